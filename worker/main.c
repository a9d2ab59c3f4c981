/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - deras-worker: one process per device, serving one model to deras-router.
 *
 * Parses the options into worker_opts, loads the model (worker_server_new), installs the
 * signal handlers and runs the event loop (worker_server_run, worker/server.c). Signals
 * reach the loop through a self-pipe: the handler only writes the signal number to it,
 * which wakes the loop's poll; the first SIGTERM/SIGINT stops taking work and finishes
 * what runs (bounded by --drain-timeout), a second one drops it and exits at once (the
 * router, told by the worker's BYE, re-dispatches or fails what was dropped). While the
 * model is still loading the default dispositions apply: nothing is in flight yet.
 *
 * With --tp-rank above 0 the process is a tensor-parallel follower instead
 * (worker/follower.h): it joins its group, loads its shard and follows the leader's
 * step plans, never talking to the router.
 *
 * Exit status: 0 after a stop, 1 when loading, the handshake or serving fails (the reason
 * on stderr), 2 for bad options.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/wire/endpoints.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "common/cli/version.h"
#include "kernels/backend.h"
#include "worker/follower.h"
#include "worker/server.h"

static int stop_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(stop_pipe[1], &b, 1); /* non-blocking: a full pipe already says "stop" */
    (void)n;
    errno = saved;
}

/* The pipe exists before the server (its read end is an option); the handlers are
 * installed only once the model is loaded. */
static int make_stop_pipe(void)
{
    if (pipe2(stop_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        return deras_fail(DERAS_EIO, "pipe2: %s", strerror(errno));
    return DERAS_OK;
}

static int install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
        return deras_fail(DERAS_EIO, "sigaction: %s", strerror(errno));
    return DERAS_OK;
}

static void usage(FILE *f)
{
    char workers[ENDPOINT_MAX];
    if (endpoints_default_workers(workers, sizeof workers))
        snprintf(workers, sizeof workers, "ipc:///tmp/deras-$UID/workers.sock");
    fprintf(f,
            "usage: deras-worker --model PATH [options]\n"
            "\n"
            "Serves one model on one device to deras-router.\n"
            "\n"
            "  --model PATH             .gguf file or Hugging Face model directory (required)\n"
            "  --router ADDR            the router's worker endpoint (default %s)\n"
            "  --name NAME              unique worker name, the routing id (default w<pid>)\n"
            "  --device DEV             cpu or cuda:N (default cpu)\n"
            "  --threads N              CPU threads, 0 = all cores (default 0)\n"
            "  --weight-format F        as-stored (default: every weight in the format the file\n"
            "                           holds, used in place from the file mapping on the CPU),\n"
            "                           or f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1: every\n"
            "                           matrix converted at load (the cpu device)\n"
            "  --matmul-mode M          products on quantized weights: exact (f32 activations,\n"
            "                           the default) or q8 (int8 activations, llama.cpp's\n"
            "                           arithmetic; CPU only; docs/engine.md)\n"
            "  --kv-cache-memory SPEC   KV cache budget: a size (4GiB, 512MB) or a fraction of\n"
            "                           the memory available after the weights (default 0.4)\n"
            "  --kv-dtype T             KV cache element type: f32, f16 or bf16 on the CPU (default\n"
            "                           f32: exact; f16/bf16 halve its bytes per token); on CUDA the\n"
            "                           device's type (bf16, or f16 with cuda:N:fp16)\n"
            "  --max-seqs N             sequences per step (default 64)\n"
            "  --max-batch-tokens N     tokens per step, >= --max-seqs (default 512)\n"
            "  --max-live-seqs N        sequences queued + running (default 4 x --max-seqs)\n"
            "  --block-size N           KV block size in tokens (default 16)\n"
            "  --no-prefix-caching      do not reuse KV blocks of shared prompt prefixes\n"
            "  --tp-rank R --tp-size N  tensor-parallel rank and group size (default 0 / 1); every\n"
            "                           rank of a group runs with the same --name and --model,\n"
            "                           rank 0 talks to the router, ranks 1..N-1 follow it\n"
            "  --tp-timeout S           group start-up, and the longest a rank waits for another\n"
            "                           in a step before giving up on the group (default 60)\n"
            "  --handshake-timeout S    wait this long for the router's WELCOME (default 10)\n"
            "  --curve-server-key KEY   the router's CURVE public key (40 Z85 characters): the\n"
            "                           link is encrypted (default\n"
            "                           $DERAS_WORKER_CURVE_SERVER_KEY)\n"
            "  --curve-client-key FILE  this worker's CURVE secret key (mode 600), one the\n"
            "                           router's --worker-curve-allow lists (default\n"
            "                           $DERAS_WORKER_CURVE_CLIENT_KEY)\n"
            "  --heartbeat-ms MS        heartbeat period until the router sets it (default 1000)\n"
            "  --spec-proposer P        speculative decoding: none, ngram, self:L (the model's\n"
            "                           first L layers) or draft:PATH (default none)\n"
            "  --spec-k K               most drafts per sequence per step, 1 to 16 (default 4)\n"
            "  --spec-max-batch N       speculate for greedy requests only while at most N\n"
            "                           sequences run, 0 = always (default 16)\n"
            "  --drain-timeout S        at SIGTERM/SIGINT, finish in-flight requests for at most\n"
            "                           S seconds, then abort them (default 30); a second signal\n"
            "                           aborts at once\n"
            "  --log-format F           text (default; journal priorities under journald) or\n"
            "                           json lines (also DERAS_LOG_FORMAT)\n"
            "  --version                what this build is, and what CUDA it finds here\n"
            "\n"
            "Logging: DERAS_LOG=debug|info|warn|error|off. Exit status: 0 after a stop, 1 on a\n"
            "load, handshake or serving failure, 2 for bad options.\n",
            workers);
}

/* 0, or 2 after printing why. */
static int parse_args(int argc, char **argv, worker_opts *o)
{
    enum { O_MODEL = 256, O_ROUTER, O_NAME, O_DEVICE, O_THREADS, O_KV, O_KVDTYPE, O_MAXSEQS, O_MAXBATCH,
           O_MAXLIVE, O_BLOCK, O_NOPREFIX, O_TPRANK, O_TPSIZE, O_TPTIMEOUT, O_HANDSHAKE,
           O_HEARTBEAT, O_DRAIN, O_SPEC, O_SPECK, O_SPECBATCH, O_LOGFMT, O_CURVE, O_CURVE_KEY,
           O_WEIGHTS, O_MMMODE, O_VERSION, O_HELP };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},
        {"router", required_argument, 0, O_ROUTER},
        {"name", required_argument, 0, O_NAME},
        {"device", required_argument, 0, O_DEVICE},
        {"threads", required_argument, 0, O_THREADS},
        {"matmul-mode", required_argument, 0, O_MMMODE},
        {"kv-cache-memory", required_argument, 0, O_KV},
        {"kv-dtype", required_argument, 0, O_KVDTYPE},
        {"max-seqs", required_argument, 0, O_MAXSEQS},
        {"max-batch-tokens", required_argument, 0, O_MAXBATCH},
        {"max-live-seqs", required_argument, 0, O_MAXLIVE},
        {"block-size", required_argument, 0, O_BLOCK},
        {"no-prefix-caching", no_argument, 0, O_NOPREFIX},
        {"tp-rank", required_argument, 0, O_TPRANK},
        {"tp-size", required_argument, 0, O_TPSIZE},
        {"tp-timeout", required_argument, 0, O_TPTIMEOUT},
        {"handshake-timeout", required_argument, 0, O_HANDSHAKE},
        {"heartbeat-ms", required_argument, 0, O_HEARTBEAT},
        {"drain-timeout", required_argument, 0, O_DRAIN},
        {"spec-proposer", required_argument, 0, O_SPEC},
        {"spec-k", required_argument, 0, O_SPECK},
        {"spec-max-batch", required_argument, 0, O_SPECBATCH},
        {"log-format", required_argument, 0, O_LOGFMT},
        {"curve-server-key", required_argument, 0, O_CURVE},
        {"curve-client-key", required_argument, 0, O_CURVE_KEY},
        {"weight-format", required_argument, 0, O_WEIGHTS},
        {"version", no_argument, 0, O_VERSION},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    worker_opts_default(o);
    long l;
    double d;
    int c;
    static char secret[41];
    const char *env_server = getenv("DERAS_WORKER_CURVE_SERVER_KEY"),
               *key_file = getenv("DERAS_WORKER_CURVE_CLIENT_KEY");
    o->curve_server_key = env_server && *env_server ? env_server : NULL;
    key_file = key_file && *key_file ? key_file : NULL;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: o->model = optarg; break;
        case O_ROUTER: o->router = optarg; break;
        case O_NAME: o->name = optarg; break;
        case O_DEVICE: o->device = optarg; break;
        case O_KV: o->kv_cache_memory = optarg; break;
        case O_KVDTYPE: o->kv_dtype = optarg; break;
        case O_NOPREFIX: o->prefix_caching = false; break;
        case O_SPEC: o->spec_proposer = optarg; break;
        case O_WEIGHTS: o->weight_format = optarg; break;
        case O_CURVE: o->curve_server_key = optarg; break;
        case O_CURVE_KEY: key_file = optarg; break;
        case O_MMMODE:
            if (backend_mm_mode_parse(optarg, &o->matmul_mode)) {
                fprintf(stderr, "deras-worker: --matmul-mode: %s\n", deras_errmsg());
                return 2;
            }
            break;
#define INT_OPT(code, name, lo, hi, field)           \
        case code:                                   \
            if (cli_int(name, optarg, lo, hi, &l))   \
                return 2;                            \
            o->field = (int)l;                       \
            break;
        INT_OPT(O_THREADS, "--threads", 0, 1024, threads)
        INT_OPT(O_MAXSEQS, "--max-seqs", 1, 4096, max_seqs)
        INT_OPT(O_MAXBATCH, "--max-batch-tokens", 1, 1 << 20, max_batch_tokens)
        INT_OPT(O_MAXLIVE, "--max-live-seqs", 1, 1 << 20, max_live_seqs)
        INT_OPT(O_BLOCK, "--block-size", 1, 256, block_size)
        INT_OPT(O_TPRANK, "--tp-rank", 0, 63, tp_rank)
        INT_OPT(O_TPSIZE, "--tp-size", 1, 64, tp_size)
        INT_OPT(O_HEARTBEAT, "--heartbeat-ms", 10, 600000, heartbeat_ms)
        INT_OPT(O_SPECK, "--spec-k", 1, 16, spec_k)
        INT_OPT(O_SPECBATCH, "--spec-max-batch", 0, 1 << 20, spec_max_batch)
#undef INT_OPT
        case O_HANDSHAKE:
            if (cli_float("--handshake-timeout", optarg, 1e-3, 3600, &d))
                return 2;
            o->handshake_timeout_s = d;
            break;
        case O_TPTIMEOUT:
            if (cli_float("--tp-timeout", optarg, 0, 3600, &d))
                return 2;
            o->tp_timeout_s = d;
            break;
        case O_DRAIN:
            if (cli_float("--drain-timeout", optarg, 0, 86400, &d))
                return 2;
            o->drain_timeout_s = d;
            break;
        case O_LOGFMT: {
            enum log_format f;
            if (log_parse_format(optarg, &f)) {
                fprintf(stderr, "deras-worker: --log-format: %s\n", deras_errmsg());
                return 2;
            }
            log_set_format(f);
            break;
        }
        case O_VERSION: {
            char cuda[600];
            version_print("deras-worker", stdout);
            backend_describe_cuda(cuda, sizeof cuda);
            printf("cuda here: %s\n", cuda);
            exit(0);
        }
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "deras-worker: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "deras-worker: --model is required (see --help)\n");
        return 2;
    }
    if (key_file) {
        if (cli_read_secret_key(key_file, secret)) {
            fprintf(stderr, "deras-worker: --curve-client-key: %s\n", deras_errmsg());
            return 2;
        }
        o->curve_secret_key = secret;
    }
    /* TEST-ONLY: the integration tests make every serving step this much longer, so that a
     * step outlasts a timeout or a request outlasts a signal on any machine (worker_opts.h).
     * No option sets it, and the worker warns in its log while it is set. */
    const char *delay = getenv("DERAS_TEST_STEP_DELAY_MS");
    if (delay && *delay) {
        if (cli_int("DERAS_TEST_STEP_DELAY_MS", delay, 0, 600000, &l))
            return 2;
        o->test_step_delay_ms = (int)l;
    }
    if (worker_opts_check(o)) {
        fprintf(stderr, "deras-worker: %s\n", deras_errmsg());
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    worker_opts o;
    if (log_init()) {
        fprintf(stderr, "deras-worker: %s\n", deras_errmsg());
        return 2;
    }
    log_set_name("deras-worker");
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    signal(SIGPIPE, SIG_IGN);

    if (o.tp_rank > 0) {
        rc = worker_follower_run(&o);
        if (rc)
            fprintf(stderr, "deras-worker: rank %d: %s (%s)\n", o.tp_rank, deras_errmsg(),
                    deras_status_name(rc));
        return rc ? 1 : 0;
    }
    worker_server_t *s = NULL;
    if ((rc = make_stop_pipe()))
        goto done;
    o.stop_fd = stop_pipe[0];
    if ((rc = worker_server_new(&o, &s)) || (rc = install_signals()))
        goto done;
    rc = worker_server_run(s);
done:
    if (rc)
        fprintf(stderr, "deras-worker: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
    worker_server_destroy(&s); /* closes the socket; the stop pipe goes with the process */
    return rc ? 1 : 0;
}
