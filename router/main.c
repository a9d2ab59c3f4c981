/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - deras-router: options, signals, start-up, the event loop, shutdown.
 *
 * One thread, one zmq_poll loop over the client socket, the worker socket, their
 * monitors, the admin socket, the ZAP handler (with CURVE), the HTTP server's epoll fd
 * and a self-pipe the signal handler writes to. The poll timeout is the time to the
 * nearest timer (a request deadline, a worker's silence or stuck limit, a drain's
 * deadline, the end of a wait for a worker, HTTP's own timeouts, the end of the drain),
 * so an idle router sleeps and a busy one never spins. Each turn reads a bounded batch
 * from each socket, then runs the timers and the dispatcher.
 *
 * Stopping: the first SIGTERM/SIGINT starts a drain (new requests get shutting_down,
 * queued ones too, workers get DRAIN, running requests finish) that ends when nothing
 * is live or --drain-timeout passes (what is left ends with shutting_down); the router
 * then exits 0, its ipc socket files removed. A second signal ends every live request at
 * once (shutting_down: clients hear it rather than wait for their own timeouts), aborts
 * them at the workers and exits 1, the socket files removed; should the loop not answer
 * it, a third signal exits from the handler itself (status 1, socket files removed).
 *
 * Under systemd (common/service/sdnotify.h): READY=1 once both sockets are bound (the router is
 * useful before any worker comes), STOPPING=1 when the drain begins, and WATCHDOG=1 from
 * this loop (the poll wakes for it), so a loop that hangs gets the router restarted.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/wire/endpoints.h"
#include "common/base/log.h"
#include "common/cli/version.h"
#include "common/service/sdnotify.h"
#include "common/base/status.h"
#include "common/wire/zmq_check.h"
#include "router/router.h"

#define CLIENT_BUDGET 256   /* client frames per loop turn */
#define WORKER_BUDGET 1024  /* worker frames per loop turn */
#define ADMIN_BUDGET 64     /* admin requests per loop turn */
#define N_IPC 3             /* ipc socket files: clients, workers, admin */

/* ---- signals ---- */

static int sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t sig_count;
/* ipc socket files to remove on a hard exit (async-signal-safe unlink) */
static char ipc_files[N_IPC][ROUTER_ADDR_MAX];

static void on_signal(int signo)
{
    int saved = errno;
    if (++sig_count >= 3) { /* the loop did not act on the second one */
        for (int i = 0; i < N_IPC; i++)
            if (ipc_files[i][0])
                unlink(ipc_files[i]);
        _exit(1);
    }
    unsigned char b = (unsigned char)signo;
    ssize_t w = write(sig_pipe[1], &b, 1);
    (void)w;
    errno = saved;
}

static int install_signals(void)
{
    if (pipe2(sig_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        return deras_fail(DERAS_EIO, "pipe2: %s", strerror(errno));
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
        return deras_fail(DERAS_EIO, "sigaction: %s", strerror(errno));
    signal(SIGPIPE, SIG_IGN);
    return DERAS_OK;
}

/* ---- options ---- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: deras-router --model PATH [options]\n"
        "\n"
        "  --model PATH               model (.gguf or Hugging Face dir): tokenizer and limits only\n"
        "  --listen ADDR              client socket (tcp:// or ipc://), default tcp://127.0.0.1:5555\n"
        "  --workers ADDR             worker socket, default ipc:///tmp/deras-$UID/workers.sock\n"
        "  --admin ADDR               admin socket (derasctl), default ipc:///tmp/deras-$UID/admin.sock\n"
        "                             (mode 0600); tcp:// only with --admin-curve-allow\n"
        "  --admin-curve-allow FILE   public keys (Z85) allowed on a tcp admin socket (CURVE,\n"
        "                             with --curve-secret-key)\n"
        "  --metrics-listen HOST:PORT HTTP for GET /metrics, /health, /live and the\n"
        "                             OpenAI-compatible API (/v1/...), default 127.0.0.1:9400;\n"
        "                             none: off\n"
        "  --api-key-file FILE        keys (one per line) the API's routes require as\n"
        "                             Authorization: Bearer KEY; default: none required\n"
        "  --chat-template FILE       render chats with this Jinja template instead of the\n"
        "                             model's (e.g. one that knows tools)\n"
        "  --tool-call-parser STYLE   how tool calls are written: hermes, llama3_json or\n"
        "                             none; default: what the chat template teaches\n"
        "  --max-queued-requests N    samples waiting for a worker (n counts as n), default 256\n"
        "  --max-queued-tokens N      prompt tokens waiting for a worker, default 262144\n"
        "  --max-tokens-cap N         largest max_tokens a request may ask, default 32768\n"
        "  --curve-secret-key FILE    CURVE server secret key (Z85) of the CURVE sockets\n"
        "  --curve-allow FILE         client public keys (Z85, one per line) allowed to connect\n"
        "  --worker-curve-allow FILE  worker public keys (Z85) allowed on a tcp worker socket,\n"
        "                             which is then a CURVE server (with --curve-secret-key)\n"
        "  --allow-insecure-bind      allow tcp (and HTTP) on a non-loopback address without CURVE\n"
        "  --log-prompts              log prompt text (never logged otherwise)\n"
        "  --stats-interval S         a stats line (running, waiting, KV use, tokens/s) every S\n"
        "                             seconds while there is work, 0 = never (default 10)\n"
        "  --heartbeat-ms N           worker heartbeat interval asked in WELCOME, default 500\n"
        "  --worker-timeout-ms N      a worker silent this long is dead, default 3000\n"
        "  --stuck-timeout-ms N       a worker holding requests that completes no step this\n"
        "                             long is stuck (its requests go elsewhere), default 60000;\n"
        "                             0: never\n"
        "  --no-workers-wait-ms N     how long a request waits when no worker is ready, default 1000\n"
        "  --drain-timeout S          seconds to let requests finish at SIGTERM (and derasctl\n"
        "                             drain without --timeout), default 30\n"
        "\n"
        "  --log-format F             text (default; journal priorities under journald) or\n"
        "                             json lines (also DERAS_LOG_FORMAT)\n"
        "  --version                  what this build is\n"
        "\n"
        "Log level: DERAS_LOG=debug|info|warn|error|off.\n");
}

static int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return deras_fail(DERAS_EINVAL, "%s: '%s' is not an integer in [%lld, %lld]", opt, s,
                          (long long)lo, (long long)hi);
    *out = v;
    return DERAS_OK;
}

static int check_addr(const router_opts *o, const char *what, const char *addr, bool curve)
{
    if (strncmp(addr, "tcp://", 6) && strncmp(addr, "ipc://", 6))
        return deras_fail(DERAS_EINVAL, "%s %s: only tcp:// and ipc:// addresses are served", what,
                          addr);
    bool loopback = true;
    int rc;
    if (!strncmp(addr, "tcp://", 6) && (rc = endpoint_tcp_loopback(addr, &loopback)))
        return deras_fail_ctx(rc, "%s: ", what);
    if (!loopback && !curve && !o->allow_insecure_bind)
        return deras_fail(DERAS_EINVAL,
                          "%s %s: binding tcp beyond loopback without CURVE lets anyone on the "
                          "network in; use --curve-secret-key/--curve-allow, or "
                          "--allow-insecure-bind on a trusted network",
                          what, addr);
    return DERAS_OK;
}

/* The admin socket: ipc, or tcp as a CURVE server with its own allowed keys. */
static int check_admin(const router_opts *o)
{
    if (!strncmp(o->admin, "ipc://", 6)) {
        if (o->admin_curve_allow_file)
            return deras_fail(DERAS_EINVAL, "--admin-curve-allow is for a tcp:// admin socket "
                              "(an ipc one is guarded by its file mode, 0600)");
        return DERAS_OK;
    }
    if (strncmp(o->admin, "tcp://", 6))
        return deras_fail(DERAS_EINVAL, "--admin %s: only tcp:// and ipc:// addresses are served",
                          o->admin);
    char host[256];
    int port, rc = endpoint_tcp_parse(o->admin, host, sizeof host, &port);
    if (rc)
        return deras_fail_ctx(rc, "--admin: ");
    if (!o->curve_secret_file || !o->admin_curve_allow_file)
        return deras_fail(DERAS_EINVAL,
                          "--admin %s: a tcp admin socket needs CURVE: --curve-secret-key "
                          "(with --curve-allow) and --admin-curve-allow listing the operators' "
                          "public keys", o->admin);
    return DERAS_OK;
}

static int parse_options(int argc, char **argv, router_opts *o)
{
    enum { O_MODEL = 256, O_LISTEN, O_WORKERS, O_MQR, O_MQT, O_CAP, O_CSK, O_CA, O_INSECURE,
           O_LOGP, O_HB, O_WTO, O_NWW, O_DRAIN, O_ADMIN, O_ACA, O_METRICS, O_APIKEY, O_STUCK, O_LOGFMT,
           O_WCA, O_STATS, O_VERSION, O_HELP, O_TEMPLATE, O_TOOLS };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},
        {"listen", required_argument, 0, O_LISTEN},
        {"workers", required_argument, 0, O_WORKERS},
        {"max-queued-requests", required_argument, 0, O_MQR},
        {"max-queued-tokens", required_argument, 0, O_MQT},
        {"max-tokens-cap", required_argument, 0, O_CAP},
        {"curve-secret-key", required_argument, 0, O_CSK},
        {"curve-allow", required_argument, 0, O_CA},
        {"allow-insecure-bind", no_argument, 0, O_INSECURE},
        {"log-prompts", no_argument, 0, O_LOGP},
        {"heartbeat-ms", required_argument, 0, O_HB},
        {"worker-timeout-ms", required_argument, 0, O_WTO},
        {"no-workers-wait-ms", required_argument, 0, O_NWW},
        {"drain-timeout", required_argument, 0, O_DRAIN},
        {"admin", required_argument, 0, O_ADMIN},
        {"admin-curve-allow", required_argument, 0, O_ACA},
        {"worker-curve-allow", required_argument, 0, O_WCA},
        {"stats-interval", required_argument, 0, O_STATS},
        {"metrics-listen", required_argument, 0, O_METRICS},
        {"api-key-file", required_argument, 0, O_APIKEY},
        {"chat-template", required_argument, 0, O_TEMPLATE},
        {"tool-call-parser", required_argument, 0, O_TOOLS},
        {"stuck-timeout-ms", required_argument, 0, O_STUCK},
        {"log-format", required_argument, 0, O_LOGFMT},
        {"version", no_argument, 0, O_VERSION},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    snprintf(o->listen, sizeof o->listen, "tcp://127.0.0.1:5555");
    int rc = endpoints_default_workers(o->workers, sizeof o->workers);
    if (rc || (rc = endpoints_default_admin(o->admin, sizeof o->admin)))
        return rc;
    snprintf(o->metrics_listen, sizeof o->metrics_listen, "127.0.0.1:9400");
    o->max_queued_requests = 256;
    o->max_queued_tokens = 262144;
    o->max_tokens_cap = 32768;
    o->heartbeat_ms = 500;
    o->worker_timeout_ms = 3000;
    o->no_workers_wait_ms = 1000;
    o->drain_timeout_ms = 30000;
    o->stuck_timeout_ms = 60000;
    o->stats_interval_ms = 10000;
    int c;
    int64_t v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        switch (c) {
        case O_MODEL: o->model = optarg; break;
        case O_LISTEN: snprintf(o->listen, sizeof o->listen, "%s", optarg); break;
        case O_WORKERS: snprintf(o->workers, sizeof o->workers, "%s", optarg); break;
        case O_CSK: o->curve_secret_file = optarg; break;
        case O_CA: o->curve_allow_file = optarg; break;
        case O_INSECURE: o->allow_insecure_bind = true; break;
        case O_LOGP: o->log_prompts = true; break;
        case O_ADMIN: snprintf(o->admin, sizeof o->admin, "%s", optarg); break;
        case O_ACA: o->admin_curve_allow_file = optarg; break;
        case O_WCA: o->worker_curve_allow_file = optarg; break;
        case O_METRICS:
            snprintf(o->metrics_listen, sizeof o->metrics_listen, "%s", optarg);
            o->metrics_listen_given = true;
            break;
        case O_APIKEY: o->api_key_file = optarg; break;
        case O_TEMPLATE: o->chat_template_file = optarg; break;
        case O_TOOLS: {
            tool_style st;
            if (!tool_style_parse(optarg, &st))
                return deras_fail(DERAS_EINVAL, "--tool-call-parser: '%s' is none of hermes, "
                                  "llama3_json, none", optarg);
            o->tool_call_parser = optarg;
            break;
        }
        case O_STUCK:
            if ((rc = parse_int("--stuck-timeout-ms", optarg, 0, 86400000, &v)))
                return rc;
            o->stuck_timeout_ms = (int)v;
            break;
        case O_LOGFMT: {
            enum log_format f;
            if ((rc = log_parse_format(optarg, &f)))
                return deras_fail_ctx(rc, "--log-format: ");
            log_set_format(f);
            break;
        }
        case O_VERSION: version_print("deras-router", stdout); exit(0);
        case O_HELP: usage(stdout); exit(0);
        case O_MQR:
            if ((rc = parse_int("--max-queued-requests", optarg, 1, 1 << 24, &v)))
                return rc;
            o->max_queued_requests = (int)v;
            break;
        case O_MQT:
            if ((rc = parse_int("--max-queued-tokens", optarg, 1, INT64_C(1) << 40, &v)))
                return rc;
            o->max_queued_tokens = v;
            break;
        case O_CAP:
            if ((rc = parse_int("--max-tokens-cap", optarg, 1, 1 << 24, &v)))
                return rc;
            o->max_tokens_cap = (int)v;
            break;
        case O_HB:
            if ((rc = parse_int("--heartbeat-ms", optarg, 10, 600000, &v)))
                return rc;
            o->heartbeat_ms = (int)v;
            break;
        case O_WTO:
            if ((rc = parse_int("--worker-timeout-ms", optarg, 50, 3600000, &v)))
                return rc;
            o->worker_timeout_ms = (int)v;
            break;
        case O_NWW:
            if ((rc = parse_int("--no-workers-wait-ms", optarg, 0, 3600000, &v)))
                return rc;
            o->no_workers_wait_ms = (int)v;
            break;
        case O_STATS:
            if ((rc = parse_int("--stats-interval", optarg, 0, 86400, &v)))
                return rc;
            o->stats_interval_ms = (int)v * 1000;
            break;
        case O_DRAIN:
            if ((rc = parse_int("--drain-timeout", optarg, 0, 86400, &v)))
                return rc;
            o->drain_timeout_ms = (int)v * 1000;
            break;
        default: return deras_fail(DERAS_EINVAL, "unknown or incomplete option '%s' (see --help)", name);
        }
    }
    if (optind < argc)
        return deras_fail(DERAS_EINVAL, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!o->model)
        return deras_fail(DERAS_EINVAL, "--model is required (see --help)");
    bool any_allow = o->curve_allow_file || o->admin_curve_allow_file ||
                     o->worker_curve_allow_file;
    if (o->curve_secret_file && !any_allow)
        return deras_fail(DERAS_EINVAL, "--curve-secret-key needs an allow list: --curve-allow "
                          "(clients), --worker-curve-allow (workers) or --admin-curve-allow");
    if (!o->curve_secret_file && any_allow)
        return deras_fail(DERAS_EINVAL, "--curve-allow, --worker-curve-allow and "
                          "--admin-curve-allow need --curve-secret-key (the router's key)");
    if (o->worker_curve_allow_file && strncmp(o->workers, "tcp://", 6))
        return deras_fail(DERAS_EINVAL, "--worker-curve-allow is for a tcp:// worker socket (an "
                          "ipc one is guarded by its file mode, 0600)");
    if (o->heartbeat_ms >= o->worker_timeout_ms)
        return deras_fail(DERAS_EINVAL, "--heartbeat-ms (%d) must be below --worker-timeout-ms (%d)",
                          o->heartbeat_ms, o->worker_timeout_ms);
    if (!strcmp(o->listen, o->workers) || !strcmp(o->listen, o->admin) ||
        !strcmp(o->workers, o->admin))
        return deras_fail(DERAS_EINVAL, "--listen, --workers and --admin must differ");
    if ((rc = check_addr(o, "--listen", o->listen, o->curve_allow_file != NULL)) ||
        (rc = check_addr(o, "--workers", o->workers, o->worker_curve_allow_file != NULL)) ||
        (rc = check_admin(o)) ||
        (rc = http_check_listen(o->metrics_listen, o->allow_insecure_bind)))
        return rc;
    return DERAS_OK;
}

/* ---- ipc endpoints ---- */

/* Make the directory, refuse a socket file another process is serving (ZeroMQ would
 * silently take it over), remember the file for removal at exit. */
static int prepare_ipc(const char *addr, char *file_out)
{
    file_out[0] = '\0';
    if (strncmp(addr, "ipc://", 6))
        return DERAS_OK;
    int rc = endpoints_prepare_bind(addr);
    if (rc)
        return rc;
    const char *path = addr + 6;
    const size_t path_max = sizeof ((struct sockaddr_un *)NULL)->sun_path;
    if (strlen(path) >= path_max)
        return deras_fail(DERAS_EINVAL, "%s: socket path longer than %zu bytes", addr,
                          path_max - 1);
    if (endpoints_ipc_live(path))
        return deras_fail(DERAS_EBUSY, "%s: another process is serving this socket", addr);
    snprintf(file_out, ROUTER_ADDR_MAX, "%s", path);
    return DERAS_OK;
}

/* ---- start-up and shutdown ---- */

#define TEMPLATE_MAX_BYTES (4u << 20)

/* A chat template file, whole, NUL-terminated. DERAS_EIO naming the file, DERAS_ERANGE. */
static int read_template(const char *path, char **out, size_t *len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return deras_fail(DERAS_EIO, "--chat-template %s: %s", path, strerror(errno));
    char *buf = malloc(TEMPLATE_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, TEMPLATE_MAX_BYTES + 1, f) : 0;
    int rc = !buf            ? deras_fail(DERAS_ENOMEM, "out of memory")
             : ferror(f)     ? deras_fail(DERAS_EIO, "--chat-template %s: cannot read it", path)
             : n > TEMPLATE_MAX_BYTES ? deras_fail(DERAS_ERANGE, "--chat-template %s: larger "
                                                   "than %u bytes", path, TEMPLATE_MAX_BYTES)
                                      : DERAS_OK;
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return DERAS_OK;
}

static int open_model(router_t *rt)
{
    int rc = checkpoint_open(rt->o.model, &rt->ckpt);
    if (rc)
        return deras_fail_ctx(rc, "--model %s: ", rt->o.model);
    const gguf_t *g = checkpoint_gguf(rt->ckpt);
    rc = g ? tokenizer_from_gguf(g, &rt->tok) : tokenizer_from_hf_dir(checkpoint_hf_dir(rt->ckpt), &rt->tok);
    if (rc)
        return deras_fail_ctx(rc, "--model %s: tokenizer: ", rt->o.model);
    char *source = NULL;
    if (rt->o.chat_template_file) {
        size_t n;
        if ((rc = read_template(rt->o.chat_template_file, &source, &n)))
            return rc;
    }
    rc = chat_new(rt->tok, source, &rt->chat);
    free(source);
    if (rc)
        return deras_fail_ctx(rc, "%s %s: ",
                              rt->o.chat_template_file ? "--chat-template" : "--model",
                              rt->o.chat_template_file ? rt->o.chat_template_file : rt->o.model);
    rt->tools = chat_tool_style(rt->chat);
    if (rt->o.tool_call_parser)
        tool_style_parse(rt->o.tool_call_parser, &rt->tools);
    const model_config *cfg = checkpoint_config(rt->ckpt);
    rt->vocab_size = cfg->vocab_size;
    rt->ctx_len = cfg->max_seq_len;
    rt->tok_cap = (size_t)rt->ctx_len + 1;
    if (!(rt->tok_buf = malloc(rt->tok_cap * sizeof *rt->tok_buf)))
        return deras_fail(DERAS_ENOMEM, "out of memory");
    log_info("model %s: vocabulary %d (tokenizer %d), context %d; chats: %s; tool calls: %s",
             rt->o.model, rt->vocab_size, tokenizer_vocab_size(rt->tok), rt->ctx_len,
             chat_describe(rt->chat), tool_style_name(rt->tools));
    return DERAS_OK;
}

static int start(router_t *rt)
{
    int rc;
    if ((rc = open_model(rt)))
        return rc;
    proto_limits_default(&rt->lim);
    rt->lim.max_tokens = rt->o.max_tokens_cap;
    if (rt->o.curve_allow_file &&
        (rc = curve_load(rt->o.curve_secret_file, rt->o.curve_allow_file, "deras", &rt->curve)))
        return rc;
    if (rt->o.worker_curve_allow_file &&
        (rc = curve_load(rt->o.curve_secret_file, rt->o.worker_curve_allow_file, "deras-worker",
                         &rt->worker_curve)))
        return rc;
    if (rt->o.admin_curve_allow_file &&
        (rc = curve_load(rt->o.curve_secret_file, rt->o.admin_curve_allow_file, "deras-admin",
                         &rt->admin_curve)))
        return rc;
    if ((rc = proto_decoder_new(&rt->lim, &rt->pdec)) || (rc = proto_encoder_new(&rt->penc)) ||
        (rc = wp_decoder_new(16u << 20, &rt->wdec)) || (rc = wp_encoder_new(&rt->wenc)) ||
        (rc = rq_table_new(rt->tok, &rt->rqs)) || (rc = metrics_new(&rt->metrics)) ||
        (rc = workers_new(rt->vocab_size, rt->o.model, rt->o.worker_timeout_ms,
                          rt->o.stuck_timeout_ms, &rt->workers)))
        return rc;
    dispatch_opts d = {.max_queued_requests = rt->o.max_queued_requests,
                       .max_queued_tokens = rt->o.max_queued_tokens,
                       .no_workers_wait_ms = rt->o.no_workers_wait_ms};
    if ((rc = dispatch_new(rt->workers, rt->rqs, &d, wlink_submit, relay_fail_cb, rt, &rt->disp)))
        return rc;
    if ((rc = prepare_ipc(rt->o.listen, ipc_files[0])) ||
        (rc = prepare_ipc(rt->o.workers, ipc_files[1])) ||
        (rc = prepare_ipc(rt->o.admin, ipc_files[2])))
        return rc;
    if ((rc = fd_budget_init(&rt->fds)) || (rc = ZMQ_CHECK_PTR(rt->zctx, zmq_ctx_new())))
        return rc;
    /* one ZAP handler judges the handshakes of every CURVE socket; bound before them */
    if ((rt->curve || rt->admin_curve || rt->worker_curve) &&
        (rc = curve_zap_open(rt->zctx, &rt->zap)))
        return rc;
    if ((rc = wlink_open(rt)) || (rc = frontend_open(rt)) || (rc = admin_open(rt)) ||
        (rc = http_api_open(rt)) || (rc = http_open(rt)))
        return rc;
    log_info("listening for clients on %s%s, for workers on %s%s, for derasctl on %s%s",
             rt->o.listen, rt->curve ? " (CURVE)" : "", rt->o.workers,
             rt->worker_curve ? " (CURVE)" : "", rt->o.admin,
             rt->admin_curve ? " (CURVE)" : "");
    return DERAS_OK;
}

static void log_stats(const router_t *rt)
{
    const router_stats *s = &rt->st;
    uint64_t errors = 0;
    for (int i = 0; i < PE_N_CODES; i++)
        errors += s->errors[i];
    log_info("stats: %llu frames, %llu requests, %llu ended, %llu cancels, %llu pings, %llu "
             "errors (%llu busy, %llu malformed), %llu bad envelopes, %llu stale frames, %llu send failures, %llu "
             "disconnects (frames over the cap among them), %llu protocol drops, CURVE %llu allowed / %llu denied; workers: "
             "%llu frames, %llu bad, %llu stray tokens, %llu re-dispatched, %llu deaths, %llu stuck; "
             "%llu admin requests (%llu errors), %llu HTTP requests (%llu API calls, %llu API errors); "
             "%llu client connections "
             "shut down at the cap",
             (unsigned long long)s->frames, (unsigned long long)s->requests,
             (unsigned long long)s->completed, (unsigned long long)s->cancels,
             (unsigned long long)s->pings, (unsigned long long)errors,
             (unsigned long long)s->errors[PE_BUSY], (unsigned long long)s->errors[PE_MALFORMED],
             (unsigned long long)s->bad_envelopes, (unsigned long long)s->stale_frames,
             (unsigned long long)s->send_failures,
             (unsigned long long)s->disconnects, (unsigned long long)s->protocol_drops,
             (unsigned long long)s->auth_allowed, (unsigned long long)s->auth_denied,
             (unsigned long long)s->worker_frames, (unsigned long long)s->worker_bad_frames,
             (unsigned long long)s->stray_tokens, (unsigned long long)s->redispatched,
             (unsigned long long)s->worker_deaths, (unsigned long long)s->worker_stuck,
             (unsigned long long)s->admin_requests, (unsigned long long)s->admin_errors,
             (unsigned long long)s->http_requests, (unsigned long long)s->http_api_calls,
             (unsigned long long)s->http_api_errors, (unsigned long long)s->conn_evicted);
}

static void stop(router_t *rt)
{
    http_close(rt);
    http_api_close(rt);
    admin_close(rt);
    wlink_close(rt);
    frontend_close(rt);
    if (rt->zctx)
        zmq_ctx_term(rt->zctx);
    for (int i = 0; i < N_IPC; i++)
        if (ipc_files[i][0])
            unlink(ipc_files[i]);
    dispatch_destroy(&rt->disp);
    workers_destroy(&rt->workers);
    rq_table_destroy(&rt->rqs);
    proto_decoder_destroy(&rt->pdec);
    proto_encoder_destroy(&rt->penc);
    wp_decoder_destroy(&rt->wdec);
    wp_encoder_destroy(&rt->wenc);
    curve_destroy(&rt->curve);
    curve_destroy(&rt->worker_curve);
    curve_destroy(&rt->admin_curve);
    metrics_destroy(&rt->metrics);
    free(rt->tok_buf);
    free(rt->touched);
    chat_destroy(&rt->chat);
    tokenizer_destroy(&rt->tok);
    checkpoint_destroy(&rt->ckpt);
}

/* ---- the loop ---- */

static void begin_drain(router_t *rt, int64_t now)
{
    log_info("stopping: %d requests live; draining for up to %d s (a second signal exits at once)",
             rq_count(rt->rqs), rt->o.drain_timeout_ms / 1000);
    rt->draining = true;
    rt->drain_deadline_us = now + (int64_t)rt->o.drain_timeout_ms * 1000;
    dispatch_drain(rt->disp);
    dispatch_run(rt->disp, now); /* queued requests: shutting_down */
    wlink_drain_all(rt);
    sdnotify_stopping("draining: %d requests live", rq_count(rt->rqs));
}

/* Until the nearest timer; `watchdog_us` is when systemd's watchdog wants its next ping. */
static int poll_timeout_ms(const router_t *rt, int64_t now, int64_t watchdog_us)
{
    int64_t t = workers_next_expiry(rt->workers);
    int64_t timers[] = {watchdog_us, dispatch_next_timer(rt->disp), admin_next_timer(rt),
                        http_next_timer(rt, now), stats_line_next(rt)};
    for (int i = 0; i < 5; i++)
        if (timers[i] < t)
            t = timers[i];
    rq_t *r = rq_next_deadline(rt->rqs);
    if (r && r->deadline_us < t)
        t = r->deadline_us;
    if (rt->draining && rt->drain_deadline_us < t)
        t = rt->drain_deadline_us;
    if (t == INT64_MAX)
        return -1;
    int64_t ms = (t - now + 999) / 1000 + 1; /* past the timer, never just before it */
    return ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
}

/* End every live request with shutting_down (the drain ran out, or a second signal). */
static void end_all(router_t *rt, const char *msg)
{
    rq_t *next;
    for (rq_t *r = rq_first(rt->rqs); r; r = next) {
        next = rq_next(rt->rqs, r);
        relay_fail(rt, r, PE_SHUTTING_DOWN, msg);
    }
}

/* The event loop; returns the exit status: 0 drained (or drain timeout), 1 otherwise. */
static int run(router_t *rt)
{
    enum { I_SIG, I_WMON, I_CMON, I_WORKERS, I_CLIENTS, I_ADMIN, N_FIXED };
    zmq_pollitem_t items[N_FIXED + 3];
    sdnotify_watchdog wd;
    sdnotify_watchdog_init(&wd, router_now_us());
    for (;;) {
        items[I_SIG] = (zmq_pollitem_t){.fd = sig_pipe[0], .events = ZMQ_POLLIN};
        items[I_WMON] = (zmq_pollitem_t){.socket = rt->worker_mon, .events = ZMQ_POLLIN};
        items[I_CMON] = (zmq_pollitem_t){.socket = rt->client_mon, .events = ZMQ_POLLIN};
        items[I_WORKERS] = (zmq_pollitem_t){.socket = rt->workers_sock, .events = ZMQ_POLLIN};
        items[I_CLIENTS] = (zmq_pollitem_t){.socket = rt->clients, .events = ZMQ_POLLIN};
        items[I_ADMIN] = (zmq_pollitem_t){.socket = rt->admin_sock, .events = ZMQ_POLLIN};
        int n = N_FIXED, i_zap = -1; /* ZAP and HTTP only when in use */
        if (rt->zap) {
            i_zap = n;
            items[n++] = (zmq_pollitem_t){.socket = rt->zap, .events = ZMQ_POLLIN};
        }
        if (http_fd(rt) >= 0) /* these only wake the poll: http_run runs every turn */
            items[n++] = (zmq_pollitem_t){.fd = http_fd(rt), .events = ZMQ_POLLIN};
        if (http_listen_fd(rt) >= 0)
            items[n++] = (zmq_pollitem_t){.fd = http_listen_fd(rt), .events = ZMQ_POLLIN};
        int64_t now = router_now_us();
        int rc = zmq_poll(items, n, poll_timeout_ms(rt, now, sdnotify_watchdog_tick(&wd, now)));
        if (rc == -1 && zmq_errno() != EINTR) {
            log_error("zmq_poll: %s", zmq_strerror(zmq_errno()));
            return 1;
        }
        if (rc > 0) {
            if (items[I_SIG].revents & ZMQ_POLLIN) {
                unsigned char b[16];
                ssize_t got;
                while ((got = read(sig_pipe[0], b, sizeof b)) > 0)
                    for (ssize_t i = 0; i < got; i++) {
                        if (!rt->draining) {
                            begin_drain(rt, router_now_us());
                            continue;
                        }
                        log_warn("second signal: ending %d requests now and exiting",
                                 rq_count(rt->rqs));
                        end_all(rt, "the router was stopped at once (a second signal)");
                        return 1;
                    }
            }
            if (items[I_WMON].revents & ZMQ_POLLIN)
                wlink_monitor(rt);
            if (items[I_CMON].revents & ZMQ_POLLIN)
                frontend_monitor(rt);
            if (i_zap >= 0 && (items[i_zap].revents & ZMQ_POLLIN))
                curve_zap_handle((const curve_t *const[]){rt->curve, rt->admin_curve,
                                                          rt->worker_curve},
                                 3, rt->zap, &rt->st);
            if (items[I_WORKERS].revents & ZMQ_POLLIN)
                wlink_recv(rt, WORKER_BUDGET);
            if (items[I_CLIENTS].revents & ZMQ_POLLIN)
                frontend_recv(rt, CLIENT_BUDGET);
            if (items[I_ADMIN].revents & ZMQ_POLLIN)
                admin_recv(rt, ADMIN_BUDGET);
        }
        http_run(rt); /* after every poll: libmicrohttpd's rule when it has a timeout */
        now = router_now_us();
        relay_deadlines(rt, now);
        wlink_check_timeouts(rt, now);
        admin_tick(rt, now);
        stats_line_tick(rt, now);
        dispatch_run(rt->disp, now);
        relay_reap(rt);
        if (rt->draining) {
            /* and every HTTP call answered: its response may still be on its way out */
            if (rq_count(rt->rqs) == 0 && http_api_idle(rt)) {
                log_info("drained: every request ended");
                return 0;
            }
            if (now >= rt->drain_deadline_us) {
                log_warn("drain timeout: ending %d requests", rq_count(rt->rqs));
                end_all(rt, "the router stopped before the request ended");
                return 0;
            }
        }
    }
}

int main(int argc, char **argv)
{
    if (log_init()) {
        fprintf(stderr, "deras-router: %s\n", deras_errmsg());
        return 2;
    }
    log_set_name("deras-router");
    router_t rt = {0};
    rt.start_us = router_now_us();
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    rt.start_time_s = (double)wall.tv_sec + wall.tv_nsec / 1e9;
    int rc = parse_options(argc, argv, &rt.o);
    if (rc) {
        fprintf(stderr, "deras-router: %s\n", deras_errmsg());
        return 2;
    }
    if ((rc = install_signals()) || (rc = start(&rt))) {
        log_error("%s", deras_errmsg());
        stop(&rt);
        return 1;
    }
    sdnotify_ready("listening for clients on %s, for workers on %s", rt.o.listen, rt.o.workers);
    int status = run(&rt);
    log_stats(&rt);
    stop(&rt);
    log_info("exit (status %d)", status);
    return status;
}
