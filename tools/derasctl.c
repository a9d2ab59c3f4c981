/* SPDX-License-Identifier: Apache-2.0 */
/* derasctl.c - the operator's command for a running deras-router, over its admin socket.
 *
 *   derasctl status [--json]                       a table per worker, or the reply as JSON
 *   derasctl drain WORKER|--all [--timeout S] [--no-wait] [--json]
 *   derasctl undrain WORKER|--all [--json]
 *   derasctl health [--json]                       exit 0 ready, 1 not ready
 *   derasctl metrics                               the Prometheus text of GET /metrics
 *
 * One DEALER to the admin socket (common/wire/admin_proto.h; default from common/wire/endpoints.h,
 * $DERAS_ADMIN or --admin), one request, one reply. A drain's reply comes when the worker
 * is empty or at the drain's timeout (the router aborts what is left then); while it
 * waits, derasctl asks a second socket for `health` every few seconds, so a router that
 * died does not leave it waiting for a reply that will never come. Replies are read with
 * the same bounded msgpack scan as everything else (a broken router must not crash it);
 * --json prints the reply map as JSON (jansson).
 *
 * Exit status: 0 ok (drain: drained; health: ready), 1 error reply, no reply, not
 * drained or not ready, 2 usage.
 */
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <msgpack.h>
#include <zmq.h>

#include "common/wire/admin_proto.h"
#include "common/wire/endpoints.h"
#include "common/wire/msgpack_scan.h"
#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "common/cli/version.h"

#define HEALTH_EVERY_S 2.0 /* while a drain waits: is the router still there? */

typedef struct ctl {
    const char *address;
    double reply_timeout_s;
    const char *server_key;   /* CURVE: the router's public key */
    char secret[41];          /* CURVE: ours, from --curve-client-key */
    bool curve, json;
    void *zctx;
    admin_codec_t *codec;
    mp_frame_t *frame;
    zmq_msg_t reply;
    bool reply_open;
} ctl;

static void usage(FILE *f)
{
    fputs("usage: derasctl [options] COMMAND [arguments]\n"
          "\n"
          "commands:\n"
          "  status [--json]            every worker: state, device, model, running and waiting\n"
          "                             sequences, requests, KV blocks, tokens/s, uptime\n"
          "  drain WORKER|--all [--timeout S] [--no-wait] [--json]\n"
          "                             no new requests to the worker(s); waits until they are\n"
          "                             empty or S seconds passed (the router's --drain-timeout\n"
          "                             without --timeout), when what is left ends with abort\n"
          "  undrain WORKER|--all [--json]  take new requests again\n"
          "  health [--json]            exit 0 when some worker is ready, else 1\n"
          "  metrics                    the Prometheus text that GET /metrics serves\n"
          "\n"
          "options:\n"
          "  --admin ADDR               the router's admin socket (default $DERAS_ADMIN, else\n"
          "                             ipc://$DERAS_RUNTIME_DIR-or-/tmp/deras-$UID/admin.sock)\n"
          "  --reply-timeout S          longest wait for a reply (a drain: its own timeout +\n"
          "                             this), default 10\n"
          "  --curve-server-key KEY     the router's CURVE public key (a tcp admin socket)\n"
          "  --curve-client-key FILE    this operator's CURVE secret key (mode 600)\n"
          "\n"
          "exit status: 0 ok, 1 error, no reply, not drained or not ready, 2 usage\n",
          f);
}

/* ---- the socket ---- */

static void *open_socket(ctl *c)
{
    void *s = zmq_socket(c->zctx, ZMQ_DEALER);
    int zero = 0;
    if (!s)
        return NULL;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (c->curve) {
        char pub[41];
        if (zmq_curve_public(pub, c->secret) == -1 ||
            zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c->server_key, 40) == -1 ||
            zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40) == -1 ||
            zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret, 40) == -1) {
            fprintf(stderr, "derasctl: CURVE keys: %s\n", zmq_strerror(zmq_errno()));
            zmq_close(s);
            return NULL;
        }
    }
    if (zmq_connect(s, c->address) == -1) {
        fprintf(stderr, "derasctl: %s: %s\n", c->address, zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    return s;
}

static int send_request(ctl *c, void *s, const admin_request *q)
{
    const void *buf;
    size_t len;
    if (admin_encode_request(c->codec, q, &buf, &len) || zmq_send(s, buf, len, 0) == -1) {
        fprintf(stderr, "derasctl: sending %s: %s\n", admin_type_name(q->type), deras_errmsg());
        return -1;
    }
    return 0;
}

/* The next reply on s within timeout_s, unpacked into *root (valid until the next call).
 * 0, or -1 with a message printed. */
static int recv_reply(ctl *c, void *s, double timeout_s, msgpack_object *root)
{
    zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
    long ms = (long)ceil(timeout_s * 1000);
    if (zmq_poll(&it, 1, ms) <= 0) {
        fprintf(stderr, "derasctl: no reply from %s within %g s: is deras-router running, and is "
                        "this its admin socket (--admin)?\n", c->address, timeout_s);
        return -1;
    }
    if (c->reply_open)
        zmq_msg_close(&c->reply);
    zmq_msg_init(&c->reply);
    c->reply_open = true;
    if (zmq_msg_recv(&c->reply, s, 0) == -1) {
        fprintf(stderr, "derasctl: receiving: %s\n", zmq_strerror(zmq_errno()));
        return -1;
    }
    size_t len = zmq_msg_size(&c->reply);
    mp_scan_limits lim = {.max_depth = 6, .max_items = len + 1};
    if (mp_frame_parse(c->frame, zmq_msg_data(&c->reply), len, &lim, root) ||
        root->type != MSGPACK_OBJECT_MAP) {
        fprintf(stderr, "derasctl: the reply is not a msgpack map: %s\n", deras_errmsg());
        return -1;
    }
    return 0;
}

/* ---- reading replies ---- */

static const msgpack_object *get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t n = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            !memcmp(k->via.str.ptr, key, n))
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

static double num(const msgpack_object *map, const char *key)
{
    const msgpack_object *v = get(map, key);
    if (!v)
        return 0;
    switch (v->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return (double)v->via.u64;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return (double)v->via.i64;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return v->via.f64;
    default: return 0;
    }
}

static bool flag(const msgpack_object *map, const char *key)
{
    const msgpack_object *v = get(map, key);
    return v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
}

/* A string field as text (at most cap - 1 bytes; "" when absent). */
static const char *str(const msgpack_object *map, const char *key, char *buf, size_t cap)
{
    const msgpack_object *v = get(map, key);
    size_t n = v && v->type == MSGPACK_OBJECT_STR ? v->via.str.size : 0;
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(buf, v->via.str.ptr, n);
    buf[n] = '\0';
    return buf;
}

static json_t *to_json(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return json_null();
    case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return json_real(o->via.f64);
    case MSGPACK_OBJECT_STR: return json_stringn(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; a && i < o->via.array.size; i++)
            json_array_append_new(a, to_json(&o->via.array.ptr[i]));
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; m && i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR)
                continue;
            char key[128];
            size_t n = kv->key.via.str.size < sizeof key - 1 ? kv->key.via.str.size : sizeof key - 1;
            memcpy(key, kv->key.via.str.ptr, n);
            key[n] = '\0';
            json_object_set_new(m, key, to_json(&kv->val));
        }
        return m;
    }
    default: return json_null();
    }
}

static void print_json(const msgpack_object *root)
{
    json_t *j = to_json(root);
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
    json_decref(j);
}

/* An error reply: printed, -1; otherwise 0. */
static int check_error(const msgpack_object *root)
{
    char type[32], code[64], msg[1024];
    if (strcmp(str(root, "type", type, sizeof type), "error"))
        return 0;
    fprintf(stderr, "derasctl: %s: %s\n", str(root, "code", code, sizeof code),
            str(root, "message", msg, sizeof msg));
    return -1;
}

static const char *duration(double s, char *buf, size_t cap)
{
    long t = (long)s;
    if (t < 60)
        snprintf(buf, cap, "%lds", t);
    else if (t < 3600)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, t % 3600 / 60);
    else
        snprintf(buf, cap, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
    return buf;
}

static void print_workers(const msgpack_object *root)
{
    const msgpack_object *ws = get(root, "workers");
    printf("%-16s %-9s %-8s %-32s %5s %5s %5s %13s %8s %-11s %8s\n", "WORKER", "STATE",
           "DEVICE", "MODEL", "RUN", "WAIT", "REQS", "KV USED/TOTAL", "TOK/S", "SPEC ACCEPT",
           "UPTIME");
    for (uint32_t i = 0; ws && ws->type == MSGPACK_OBJECT_ARRAY && i < ws->via.array.size; i++) {
        const msgpack_object *w = &ws->via.array.ptr[i];
        char name[80], state[16], device[40], model[260], kv[32], up[32], spec[16], acc[40];
        snprintf(kv, sizeof kv, "%.0f/%.0f", num(w, "kv_blocks_used"), num(w, "kv_blocks_total"));
        /* the proposer and its acceptance so far: "ngram 71%", "-" without speculation */
        double proposed = num(w, "spec_proposed");
        str(w, "spec", spec, sizeof spec);
        if (!spec[0] || !strcmp(spec, "none"))
            snprintf(acc, sizeof acc, "-");
        else if (proposed > 0)
            snprintf(acc, sizeof acc, "%s %.0f%%", spec, 100.0 * num(w, "spec_accepted") / proposed);
        else
            snprintf(acc, sizeof acc, "%s", spec);
        printf("%-16s %-9s %-8s %-32.32s %5.0f %5.0f %5.0f %13s %8.1f %-11s %8s\n",
               str(w, "name", name, sizeof name), str(w, "state", state, sizeof state),
               str(w, "device", device, sizeof device), str(w, "model", model, sizeof model),
               num(w, "running"), num(w, "waiting"), num(w, "requests"), kv,
               num(w, "tokens_per_s"), acc, duration(num(w, "uptime_s"), up, sizeof up));
    }
}

/* ---- commands ---- */

static int cmd_status(ctl *c, void *s)
{
    msgpack_object root;
    admin_request q = {.type = ADMIN_STATUS};
    if (send_request(c, s, &q) || recv_reply(c, s, c->reply_timeout_s, &root) ||
        check_error(&root))
        return 1;
    if (c->json) {
        print_json(&root);
        return 0;
    }
    const msgpack_object *r = get(&root, "router");
    char up[32];
    printf("router: %s%s, up %s, %.0f requests running, %.0f waiting, %.0f workers ready\n",
           flag(r, "ready") ? "ready" : "not ready", flag(r, "stopping") ? " (stopping)" : "",
           duration(num(r, "uptime_s"), up, sizeof up), num(r, "requests_running"),
           num(r, "requests_waiting"), num(r, "workers_ready"));
    print_workers(&root);
    return 0;
}

static int cmd_health(ctl *c, void *s)
{
    msgpack_object root;
    admin_request q = {.type = ADMIN_HEALTH};
    if (send_request(c, s, &q) || recv_reply(c, s, c->reply_timeout_s, &root) ||
        check_error(&root))
        return 1;
    bool ready = flag(&root, "ready");
    if (c->json)
        print_json(&root);
    else
        printf("%s: %.0f workers ready, %.0f live\n", ready ? "ready" : "not ready",
               num(&root, "workers_ready"), num(&root, "workers_live"));
    return ready ? 0 : 1;
}

static int cmd_metrics(ctl *c, void *s)
{
    msgpack_object root;
    admin_request q = {.type = ADMIN_METRICS};
    if (send_request(c, s, &q) || recv_reply(c, s, c->reply_timeout_s, &root) ||
        check_error(&root))
        return 1;
    const msgpack_object *t = get(&root, "text");
    if (!t || t->type != MSGPACK_OBJECT_STR) {
        fprintf(stderr, "derasctl: the metrics reply has no text\n");
        return 1;
    }
    fwrite(t->via.str.ptr, 1, t->via.str.size, stdout);
    return 0;
}

/* Wait for a drain's reply; meanwhile check every HEALTH_EVERY_S that the router answers. */
static int wait_drain(ctl *c, void *s, double limit_s, msgpack_object *root)
{
    void *probe = open_socket(c);
    if (!probe)
        return -1;
    admin_request hq = {.type = ADMIN_HEALTH};
    double end = cli_now() + limit_s;
    int rc = -1;
    for (;;) {
        double left = end - cli_now();
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, (long)(fmin(left, HEALTH_EVERY_S) * 1000)) > 0) {
            rc = recv_reply(c, s, 0, root);
            break;
        }
        if (left <= 0) {
            fprintf(stderr, "derasctl: no drain reply within %g s\n", limit_s);
            break;
        }
        msgpack_object hr;
        if (send_request(c, probe, &hq) || recv_reply(c, probe, c->reply_timeout_s, &hr)) {
            fprintf(stderr, "derasctl: the router stopped answering while the drain waited\n");
            break;
        }
    }
    zmq_close(probe);
    return rc;
}

static int cmd_drain(ctl *c, void *s, admin_request *q)
{
    msgpack_object root;
    double limit = q->timeout_ms >= 0 ? q->timeout_ms / 1e3 : ADMIN_MAX_TIMEOUT_MS / 1e3;
    if (send_request(c, s, q))
        return 1;
    int rc = q->wait ? wait_drain(c, s, limit + c->reply_timeout_s, &root)
                     : recv_reply(c, s, c->reply_timeout_s, &root);
    if (rc || check_error(&root))
        return 1;
    if (c->json) {
        print_json(&root);
    } else if (q->type == ADMIN_UNDRAIN) {
        print_workers(&root);
    } else {
        const char *who = q->all ? "every worker" : q->worker;
        if (!q->wait)
            printf("%s: draining\n", who);
        else if (flag(&root, "drained"))
            printf("%s: drained%s\n", who, flag(&root, "timed_out") ? " after the timeout" : "");
        else
            printf("%s: not drained%s\n", who, flag(&root, "timed_out") ? " (timed out)" : "");
        if (num(&root, "aborted") > 0)
            printf("%.0f requests ended with abort (drain_timeout)\n", num(&root, "aborted"));
        print_workers(&root);
    }
    return q->type == ADMIN_DRAIN && q->wait && !flag(&root, "drained") ? 1 : 0;
}

/* drain / undrain arguments: WORKER | --all, and for drain --timeout S, --no-wait. */
static int parse_target(int argc, char **argv, admin_request *q, bool *json)
{
    enum { A_ALL = 300, A_TIMEOUT, A_NOWAIT, A_JSON };
    static const struct option opts[] = {
        {"all", no_argument, 0, A_ALL},       {"timeout", required_argument, 0, A_TIMEOUT},
        {"no-wait", no_argument, 0, A_NOWAIT}, {"json", no_argument, 0, A_JSON},
        {0, 0, 0, 0},
    };
    bool drain = q->type == ADMIN_DRAIN;
    int o;
    double v;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == A_ALL)
            q->all = true;
        else if (o == A_JSON)
            *json = true;
        else if (o == A_TIMEOUT && drain) {
            if (cli_float("--timeout", optarg, 0, ADMIN_MAX_TIMEOUT_MS / 1e3, &v))
                return -1;
            q->timeout_ms = (int64_t)llround(v * 1000);
        } else if (o == A_NOWAIT && drain)
            q->wait = false;
        else {
            fprintf(stderr, "derasctl %s: unknown or incomplete option '%s'\n",
                    admin_type_name(q->type), argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        if (q->all || optind + 1 < argc || strlen(argv[optind]) > WPROTO_MAX_NAME) {
            fprintf(stderr, "derasctl %s: name one worker (at most %d bytes) or --all\n",
                    admin_type_name(q->type), WPROTO_MAX_NAME);
            return -1;
        }
        snprintf(q->worker, sizeof q->worker, "%s", argv[optind]);
    } else if (!q->all) {
        fprintf(stderr, "derasctl %s: which worker? (a name, or --all)\n", admin_type_name(q->type));
        return -1;
    }
    return 0;
}

/* Global options before the command; returns the command's index in argv, or -1. */
static int parse_global(ctl *c, int argc, char **argv, char *admin, size_t cap)
{
    const char *key_file = NULL;
    const char *env = getenv("DERAS_ADMIN");
    if (env && *env)
        snprintf(admin, cap, "%s", env);
    else if (endpoints_default_admin(admin, cap))
        return -1;
    c->address = admin;
    c->reply_timeout_s = 10;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--version")) {
            version_print("derasctl", stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "derasctl: %s needs a value\n", a);
            return -1;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--admin"))
            c->address = v;
        else if (!strcmp(a, "--reply-timeout")) {
            if (cli_float(a, v, 0.001, 86400, &c->reply_timeout_s))
                return -1;
        } else if (!strcmp(a, "--curve-server-key"))
            c->server_key = v;
        else if (!strcmp(a, "--curve-client-key"))
            key_file = v;
        else {
            fprintf(stderr, "derasctl: unknown option '%s' (see --help)\n", a);
            return -1;
        }
    }
    if (!c->server_key != !key_file) {
        fprintf(stderr, "derasctl: --curve-server-key and --curve-client-key go together\n");
        return -1;
    }
    if (c->server_key && strlen(c->server_key) != 40) {
        fprintf(stderr, "derasctl: --curve-server-key: expected 40 Z85 characters\n");
        return -1;
    }
    if (key_file && cli_read_secret_key(key_file, c->secret)) {
        fprintf(stderr, "derasctl: %s\n", deras_errmsg());
        return -1;
    }
    c->curve = key_file != NULL;
    if (i >= argc) {
        usage(stderr);
        return -1;
    }
    return i;
}

int main(int argc, char **argv)
{
    ctl c = {0};
    char admin[ENDPOINT_MAX];
    int i = parse_global(&c, argc, argv, admin, sizeof admin);
    if (i < 0)
        return 2;
    const char *cmd = argv[i];
    int sub_argc = argc - i;
    char **sub_argv = argv + i;
    admin_request q = {.timeout_ms = -1, .wait = true};
    if (!strcmp(cmd, "status") || !strcmp(cmd, "health") || !strcmp(cmd, "metrics")) {
        q.type = cmd[0] == 's' ? ADMIN_STATUS : cmd[0] == 'h' ? ADMIN_HEALTH : ADMIN_METRICS;
        for (int k = 1; k < sub_argc; k++) {
            if (!strcmp(sub_argv[k], "--json") && q.type != ADMIN_METRICS) {
                c.json = true;
                continue;
            }
            fprintf(stderr, "derasctl %s: unexpected argument '%s'\n", cmd, sub_argv[k]);
            return 2;
        }
    } else if (!strcmp(cmd, "drain") || !strcmp(cmd, "undrain")) {
        q.type = cmd[0] == 'd' ? ADMIN_DRAIN : ADMIN_UNDRAIN;
        if (parse_target(sub_argc, sub_argv, &q, &c.json))
            return 2;
    } else {
        fprintf(stderr, "derasctl: unknown command '%s' (see --help)\n", cmd);
        return 2;
    }
    int rc = 1;
    void *s = NULL;
    if (!(c.zctx = zmq_ctx_new()) || admin_codec_new(&c.codec) ||
        mp_frame_new(1u << 20, &c.frame)) {
        fprintf(stderr, "derasctl: out of memory\n");
        goto done;
    }
    if (!(s = open_socket(&c)))
        goto done;
    switch (q.type) {
    case ADMIN_STATUS: rc = cmd_status(&c, s); break;
    case ADMIN_HEALTH: rc = cmd_health(&c, s); break;
    case ADMIN_METRICS: rc = cmd_metrics(&c, s); break;
    case ADMIN_DRAIN:
    case ADMIN_UNDRAIN: rc = cmd_drain(&c, s, &q); break;
    }
done:
    if (c.reply_open)
        zmq_msg_close(&c.reply);
    if (s)
        zmq_close(s);
    mp_frame_destroy(&c.frame);
    admin_codec_destroy(&c.codec);
    if (c.zctx)
        zmq_ctx_term(c.zctx);
    return rc;
}
