/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_serve.c - `deras serve`: a router and its workers in the foreground, as one command.
 *
 * Starts deras-router on the client address and a private worker socket, then one
 * deras-worker per GPU (or one CPU worker where this build or machine has no GPU
 * backend), and supervises them: a worker that exits unexpectedly is restarted with a
 * backoff; if the router exits, everything stops. Ctrl-C / SIGTERM: the router is asked to
 * drain (it stops taking requests, lets in-flight ones finish and tells the workers to
 * drain), the workers are told the same, and serve waits for all of them up to the drain
 * timeout plus a grace period before killing what is left. A second Ctrl-C kills at once.
 * Children get PR_SET_PDEATHSIG, so even a kill -9 of serve leaves no process behind; the
 * private socket directory is removed at exit.
 *
 * The binaries are found next to `deras` (an installed bin/ directory) or in the build
 * tree's router/ and worker/ directories beside tools/.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/base/status.h"
#include "common/checkpoint/kv_math.h"
#include "common/cli/cli_util.h"
#include "common/wire/endpoints.h"
#include "engine/loader.h"
#include "kernels/backend.h"
#include "tools/commands.h"

#define MAX_WORKERS 16
#define MAX_PASS 32

typedef struct child {
    pid_t pid;
    char name[32];
    char device[32];
    int restarts;
    double restart_at;     /* when a crashed worker may be started again, 0 if running */
} child;

typedef struct serve_args {
    char model[PATH_MAX];
    const char *listen;
    const char *admin;     /* the router's --admin, or NULL: its default */
    const char *metrics;   /* the router's --metrics-listen, or NULL: its default */
    int n_workers;         /* 0: one per GPU, or one CPU worker */
    const char *device;    /* force every worker onto this device kind ("cpu") */
    int threads;
    const char *matmul_mode; /* the workers' --matmul-mode, or NULL: theirs (exact) */
    const char *kv_memory;
    const char *weight_format; /* --weight-format for every worker, or NULL: theirs */
    const char *kv_dtype;  /* every worker's --kv-dtype, or NULL: the device's default */
    int drain_timeout;
    const char *router_args[MAX_PASS];
    int n_router_args;
    const char *worker_args[MAX_PASS];
    int n_worker_args;
} serve_args;

static volatile sig_atomic_t n_signals;

static void on_signal(int sig)
{
    (void)sig;
    n_signals++;
}

static void usage(FILE *f)
{
    fputs("usage: deras serve [options]\n"
          "\n"
          "  --model PATH            .gguf file or Hugging Face directory (default: the test model)\n"
          "  --listen ADDR           client address (default tcp://127.0.0.1:5555)\n"
          "  --admin ADDR            the router's admin socket for derasctl (default: the\n"
          "                          runtime directory's admin.sock; give another one, and\n"
          "                          --metrics-listen, for a second instance on this host)\n"
          "  --metrics-listen ADDR   HOST:PORT for /metrics, /health, /live and the\n"
          "                          OpenAI-compatible API, or none (default 127.0.0.1:9400)\n"
          "  --num-workers N         CPU workers to start (default: one per GPU, else 1)\n"
          "  --device cpu            run workers on the CPU even where GPUs exist\n"
          "  --threads N             CPU threads per worker (default: cores / workers)\n"
          "  --matmul-mode M         CPU products on quantized weights: exact (f32\n"
          "                          activations, default) or q8 (int8, llama.cpp's)\n"
          "  --kv-cache-memory SPEC  per worker: a size (4GiB) or a fraction of free memory\n"
          "  --weight-format F       as-stored (default) or f32, f16, bf16, q8_0, q4_0, q4_1,\n"
          "                          q5_0, q5_1: the format workers keep the weights in\n"
          "  --kv-dtype T            KV cache element type: f32 (CPU default), f16 or bf16\n"
          "                          (half the bytes per token); GPUs keep their own type\n"
          "  --drain-timeout S       seconds in-flight requests get at shutdown (default 30)\n"
          "  --chat-template FILE    render chats with this Jinja template instead of the\n"
          "                          model's (e.g. one that knows tools; vLLM's option)\n"
          "  --tool-call-parser S    tool calls written as hermes, llama3_json or none\n"
          "                          (default: what the chat template teaches)\n"
          "  --router-arg ARG        pass ARG to deras-router (repeatable)\n"
          "  --worker-arg ARG        pass ARG to every deras-worker (repeatable)\n",
          f);
}

static int parse(int argc, char **argv, serve_args *a)
{
    enum { O_MODEL = 256, O_LISTEN, O_WORKERS, O_NWORKERS, O_ADMIN, O_METRICS, O_DEVICE, O_THREADS,
           O_KV, O_KVDTYPE, O_DRAIN, O_RARG, O_WARG, O_WEIGHTS, O_MMMODE, O_HELP, O_TEMPLATE, O_TOOLS };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},   {"listen", required_argument, 0, O_LISTEN},
        {"workers", required_argument, 0, O_WORKERS},
        {"num-workers", required_argument, 0, O_NWORKERS},
        {"admin", required_argument, 0, O_ADMIN},
        {"metrics-listen", required_argument, 0, O_METRICS},
        {"device", required_argument, 0, O_DEVICE},
        {"threads", required_argument, 0, O_THREADS}, {"kv-cache-memory", required_argument, 0, O_KV},
        {"kv-dtype", required_argument, 0, O_KVDTYPE},
        {"drain-timeout", required_argument, 0, O_DRAIN},
        {"weight-format", required_argument, 0, O_WEIGHTS},
        {"matmul-mode", required_argument, 0, O_MMMODE},
        {"router-arg", required_argument, 0, O_RARG}, {"worker-arg", required_argument, 0, O_WARG},
        {"chat-template", required_argument, 0, O_TEMPLATE},
        {"tool-call-parser", required_argument, 0, O_TOOLS},
        {"help", no_argument, 0, O_HELP},           {0, 0, 0, 0},
    };
    memset(a, 0, sizeof *a);
    cli_default_model(a->model, sizeof a->model);
    a->listen = "tcp://127.0.0.1:5555";
    a->drain_timeout = 30;
    long l;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: snprintf(a->model, sizeof a->model, "%s", optarg); break;
        case O_LISTEN: a->listen = optarg; break;
        case O_WORKERS: /* the router's flag of that name is an address: one meaning per name */
            fprintf(stderr, "serve: --workers is deras-router's worker address; the number of "
                            "workers is --num-workers N\n");
            return 2;
        case O_NWORKERS:
            if (cli_int("--num-workers", optarg, 1, MAX_WORKERS, &l)) return 2;
            a->n_workers = (int)l;
            break;
        case O_ADMIN: a->admin = optarg; break;
        case O_MMMODE: {
            int m;
            if (backend_mm_mode_parse(optarg, &m)) {
                fprintf(stderr, "serve: --matmul-mode: %s\n", deras_errmsg());
                return 2;
            }
            a->matmul_mode = optarg;
            break;
        }
        case O_METRICS: a->metrics = optarg; break;
        case O_DEVICE:
            if (strcmp(optarg, "cpu")) {
                fprintf(stderr, "--device: only 'cpu' can be forced; GPUs are used by default\n");
                return 2;
            }
            a->device = optarg;
            break;
        case O_THREADS:
            if (cli_int("--threads", optarg, 1, 1024, &l)) return 2;
            a->threads = (int)l;
            break;
        case O_KV: a->kv_memory = optarg; break;
        case O_WEIGHTS:
            if (loader_weight_format(optarg, NULL, NULL)) {
                fprintf(stderr, "serve: %s\n", deras_errmsg());
                return 2;
            }
            a->weight_format = optarg;
            break;
        case O_KVDTYPE: {
            enum kvmath_dtype dt;
            if (kvmath_dtype_parse(optarg, &dt)) {
                fprintf(stderr, "--kv-dtype: %s\n", deras_errmsg());
                return 2;
            }
            a->kv_dtype = optarg;
            break;
        }
        case O_DRAIN:
            if (cli_int("--drain-timeout", optarg, 0, 3600, &l)) return 2;
            a->drain_timeout = (int)l;
            break;
        case O_TEMPLATE: /* the router's options, as they are */
        case O_TOOLS:
            if (a->n_router_args + 2 > MAX_PASS) {
                fprintf(stderr, "serve: at most %d pass-through arguments\n", MAX_PASS);
                return 2;
            }
            a->router_args[a->n_router_args++] = c == O_TEMPLATE ? "--chat-template"
                                                                 : "--tool-call-parser";
            a->router_args[a->n_router_args++] = optarg;
            break;
        case O_RARG:
        case O_WARG:
            if ((c == O_RARG ? a->n_router_args : a->n_worker_args) == MAX_PASS) {
                fprintf(stderr, "serve: at most %d pass-through arguments\n", MAX_PASS);
                return 2;
            }
            if (c == O_RARG)
                a->router_args[a->n_router_args++] = optarg;
            else
                a->worker_args[a->n_worker_args++] = optarg;
            break;
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* Path of `name` next to this executable, or in the build tree's `subdir`. */
static int find_binary(const char *name, const char *subdir, char *out, size_t cap)
{
    char self[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    if (snprintf(out, cap, "%s/%s", self, name) < (int)cap && access(out, X_OK) == 0)
        return 0;
    if (snprintf(out, cap, "%s/../%s/%s", self, subdir, name) >= (int)cap)
        return -1;
    return access(out, X_OK) == 0 ? 0 : -1;
}

/* GPUs the NVIDIA driver reports (0 where there is none). */
static int count_gpus(void)
{
    int n = 0;
    for (int i = 0; i < 64; i++) {
        char p[64];
        snprintf(p, sizeof p, "/dev/nvidia%d", i);
        if (access(p, F_OK) == 0)
            n++;
    }
    return n;
}

static pid_t spawn(const char *const *argv)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* serve died between fork and prctl */
            _exit(127);
        signal(SIGINT, SIG_IGN); /* Ctrl-C reaches the process group; serve decides */
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "serve: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

typedef struct serve_state {
    const serve_args *a;
    char router_bin[PATH_MAX], worker_bin[PATH_MAX], sock_dir[128], worker_ep[160];
    char threads[16], drain[16];
    child router;
    child workers[MAX_WORKERS];
    int n_workers;
} serve_state;

static pid_t start_router(serve_state *s)
{
    const char *argv[16 + MAX_PASS];
    int n = 0;
    argv[n++] = s->router_bin;
    argv[n++] = "--model";
    argv[n++] = s->a->model;
    argv[n++] = "--listen";
    argv[n++] = s->a->listen;
    argv[n++] = "--workers";
    argv[n++] = s->worker_ep;
    argv[n++] = "--drain-timeout";
    argv[n++] = s->drain;
    if (s->a->admin) {
        argv[n++] = "--admin";
        argv[n++] = s->a->admin;
    }
    if (s->a->metrics) {
        argv[n++] = "--metrics-listen";
        argv[n++] = s->a->metrics;
    }
    for (int i = 0; i < s->a->n_router_args; i++)
        argv[n++] = s->a->router_args[i];
    argv[n] = NULL;
    return spawn(argv);
}

static pid_t start_worker(serve_state *s, child *w)
{
    const char *argv[24 + MAX_PASS];
    int n = 0;
    argv[n++] = s->worker_bin;
    argv[n++] = "--model";
    argv[n++] = s->a->model;
    argv[n++] = "--router";
    argv[n++] = s->worker_ep;
    argv[n++] = "--name";
    argv[n++] = w->name;
    argv[n++] = "--device";
    argv[n++] = w->device;
    argv[n++] = "--threads";
    argv[n++] = s->threads;
    argv[n++] = "--drain-timeout";
    argv[n++] = s->drain;
    if (s->a->kv_memory) {
        argv[n++] = "--kv-cache-memory";
        argv[n++] = s->a->kv_memory;
    }
    if (s->a->weight_format) {
        argv[n++] = "--weight-format";
        argv[n++] = s->a->weight_format;
    }
    if (s->a->kv_dtype) {
        argv[n++] = "--kv-dtype";
        argv[n++] = s->a->kv_dtype;
    }
    if (s->a->matmul_mode) {
        argv[n++] = "--matmul-mode";
        argv[n++] = s->a->matmul_mode;
    }
    for (int i = 0; i < s->a->n_worker_args; i++)
        argv[n++] = s->a->worker_args[i];
    argv[n] = NULL;
    return spawn(argv);
}

static void signal_all(serve_state *s, int sig)
{
    if (s->router.pid > 0)
        kill(s->router.pid, sig);
    for (int i = 0; i < s->n_workers; i++)
        if (s->workers[i].pid > 0)
            kill(s->workers[i].pid, sig);
}

static int n_alive(const serve_state *s)
{
    int n = s->router.pid > 0;
    for (int i = 0; i < s->n_workers; i++)
        n += s->workers[i].pid > 0;
    return n;
}

/* Reap exited children; returns true if the router exited. */
static bool reap(serve_state *s, bool stopping, int *router_status)
{
    bool router_gone = false;
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == s->router.pid) {
            s->router.pid = 0;
            router_gone = true;
            *router_status = status;
            if (!stopping)
                fprintf(stderr, "serve: deras-router exited (%s %d); stopping\n",
                        WIFSIGNALED(status) ? "signal" : "status",
                        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            continue;
        }
        for (int i = 0; i < s->n_workers; i++) {
            child *w = &s->workers[i];
            if (w->pid != pid)
                continue;
            w->pid = 0;
            if (!stopping) {
                double backoff = w->restarts < 5 ? 1 << w->restarts : 30;
                fprintf(stderr, "serve: worker %s exited (%s %d); restarting in %.0f s\n", w->name,
                        WIFSIGNALED(status) ? "signal" : "status",
                        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), backoff);
                w->restart_at = cli_now() + backoff;
                w->restarts++;
            }
        }
    }
    return router_gone;
}

static int serve(const serve_args *a)
{
    serve_state s = {.a = a};
    if (find_binary("deras-router", "router", s.router_bin, sizeof s.router_bin) ||
        find_binary("deras-worker", "worker", s.worker_bin, sizeof s.worker_bin)) {
        fprintf(stderr, "serve: deras-router and deras-worker must be installed next to deras or "
                        "built in router/ and worker/ beside tools/\n");
        return 1;
    }
    /* the router-worker socket in a directory of this instance: unpredictable (mkdtemp),
     * private, inside a runtime directory that is checked to be ours */
    char run_dir[sizeof s.sock_dir - 16];
    if (endpoints_runtime_dir_checked(run_dir, sizeof run_dir) ||
        snprintf(s.sock_dir, sizeof s.sock_dir, "%s/serve-XXXXXX", run_dir) >=
            (int)sizeof s.sock_dir) {
        fprintf(stderr, "serve: %s\n", deras_errmsg());
        return 1;
    }
    if (!mkdtemp(s.sock_dir)) {
        fprintf(stderr, "serve: cannot create a directory in %s: %s\n", run_dir, strerror(errno));
        return 1;
    }
    snprintf(s.worker_ep, sizeof s.worker_ep, "ipc://%s/workers.sock", s.sock_dir);
    snprintf(s.drain, sizeof s.drain, "%d", a->drain_timeout);

    int gpus = a->device ? 0 : count_gpus();
    s.n_workers = a->n_workers ? a->n_workers : gpus ? gpus : 1;
    if (s.n_workers > MAX_WORKERS)
        s.n_workers = MAX_WORKERS;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int per = a->threads ? a->threads : (int)(cores / (gpus ? 1 : s.n_workers));
    snprintf(s.threads, sizeof s.threads, "%d", per > 0 ? per : 1);
    for (int i = 0; i < s.n_workers; i++) {
        child *w = &s.workers[i];
        snprintf(w->name, sizeof w->name, "w%d", i);
        if (gpus && i < gpus)
            snprintf(w->device, sizeof w->device, "cuda:%d", i);
        else
            snprintf(w->device, sizeof w->device, "cpu");
    }

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    fprintf(stderr, "serve: %s on %s, %d worker(s) (%s), %s threads each\n", a->model, a->listen,
            s.n_workers, s.workers[0].device, s.threads);
    s.router.pid = start_router(&s);
    for (int i = 0; i < s.n_workers; i++)
        s.workers[i].pid = start_worker(&s, &s.workers[i]);

    int router_status = 0, rc = 0;
    bool stopping = false;
    double deadline = 0;
    while (n_alive(&s) > 0) {
        if (n_signals == 1 && !stopping) {
            fprintf(stderr, "serve: draining (Ctrl-C again to stop at once)\n");
            stopping = true;
            signal_all(&s, SIGTERM);
            deadline = cli_now() + a->drain_timeout + 10;
        } else if (n_signals >= 2 || (stopping && cli_now() > deadline)) {
            signal_all(&s, SIGKILL);
        }
        bool router_gone = reap(&s, stopping, &router_status);
        if (router_gone && !stopping) {
            stopping = true;
            rc = 1;
            signal_all(&s, SIGTERM);
            deadline = cli_now() + a->drain_timeout + 10;
        }
        for (int i = 0; i < s.n_workers && !stopping; i++) {
            child *w = &s.workers[i];
            if (w->pid == 0 && w->restart_at > 0 && cli_now() >= w->restart_at) {
                w->restart_at = 0;
                w->pid = start_worker(&s, w);
            }
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    char sock[160];
    snprintf(sock, sizeof sock, "%s/workers.sock", s.sock_dir);
    unlink(sock);
    rmdir(s.sock_dir);
    if (!rc && (!WIFEXITED(router_status) || WEXITSTATUS(router_status) != 0))
        rc = 1; /* the router did not drain and exit cleanly */
    fprintf(stderr, "serve: stopped\n");
    return rc;
}

int cmd_serve(int argc, char **argv)
{
    serve_args a;
    int rc = parse(argc, argv, &a);
    return rc ? rc : serve(&a);
}
