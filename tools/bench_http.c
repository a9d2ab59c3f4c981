/* SPDX-License-Identifier: Apache-2.0 */
/* bench_http.c - `deras bench --http URL`: the same workload over the OpenAI-compatible
 * HTTP API (docs/http_api.md), so it can be compared with the ZeroMQ door in one run.
 *
 * Each request is one streaming POST /v1/completions (or /v1/chat/completions with
 * --chat) on a connection of its own slot; a slot's connection is kept alive and reused
 * for its next request (a reused connection that the server closed meanwhile is opened
 * again and the request resent, once; one idle for HTTP_REUSE_S is closed instead, under
 * the router's 10 s idle timeout). All connections are watched by one epoll set (only the
 * ready ones cost anything per turn: a poll(2) over hundreds of streams cost the client
 * more than it read); no thread.
 *
 * Tokens: requests ask stream_options {include_usage, continuous_usage_stats} (vLLM's),
 * so every chunk carries its sample's completion tokens so far and the chunk's tokens are
 * the difference: the same count the ZeroMQ door's token ids give, stamped the same way.
 * A server without continuous usage counts a chunk with text as one token, and the last
 * usage chunk corrects the total (inter-token latency then counts chunks).
 *
 * Failures: a non-200 answer's OpenAI error object names the code (the protocol's error
 * names map back to their codes; others, and answers without one, count as "http"); an
 * error event inside a stream likewise; a stream that ends without a finish_reason, or a
 * connection that breaks, is "http" (or "client" when nothing was heard). --timeout of
 * silence closes the connection (the router aborts the request) and counts "timeout".
 * Ctrl-C closes every connection in flight: each request is aborted at the router.
 *
 * Costs: per event, one pass of the chunk scanner (oai_chunk.h: no allocation; a full parse
 * cost the shared CPU a third of the client's time); per request, its body built once
 * (jansson); per loop turn, one epoll_wait, the ready connections, and the expiry scan,
 * O(concurrency).
 */
#include <jansson.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "common/request/sampling.h"
#include "tools/bench.h"
#include "tools/http_conn.h"
#include "tools/oai_chunk.h"

#define HTTP_REUSE_S 5.0       /* an idle connection older than this is closed, not reused */
#define HTTP_KEY_MAX 512

typedef struct slot {
    http_conn_t *c;
    req_state *r;              /* NULL: idle */
    int index;                 /* of r in the workload */
    int fd;                    /* registered in the epoll set (-1: none) */
    short events;              /* the events it is registered for */
    double idle_since;
    bool retried, finished;
    int err;                   /* an error event's code, 0 none */
    double t_finish;
} slot;

typedef struct hb {
    bench *b;
    http_url url;
    char auth[HTTP_KEY_MAX + 32];  /* "Authorization: Bearer KEY\r\n" or "" */
    char model[256];
    slot *slots;
    int ep;                    /* the epoll set; an event's data is the slot's index */
    struct epoll_event *evs;
    bool said[N_ERR];          /* each failure code's first message printed */
} hb;

/* The first key of a --api-key-file (the router's format: one per line, # comments). */
static int read_key(const char *path, char *auth, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return deras_fail(DERAS_EIO, "--api-key-file %s: cannot open", path);
    char line[HTTP_KEY_MAX + 2];
    int rc = deras_fail(DERAS_EINVAL, "--api-key-file %s holds no key", path);
    while (fgets(line, sizeof line, f)) {
        size_t l = strcspn(line, "\r\n");
        line[l] = '\0';
        if (!l || line[0] == '#')
            continue;
        snprintf(auth, cap, "Authorization: Bearer %s\r\n", line);
        rc = DERAS_OK;
        break;
    }
    fclose(f);
    return rc;
}

static void say(hb *h, int code, const char *what, const char *msg)
{
    if (h->said[code])
        return;
    h->said[code] = true;
    fprintf(stderr, "bench: %s: %s: %s\n", what, bench_err_name(code), msg);
}

/* An OpenAI error object's code: the protocol's code of that name, else ERR_HTTP. */
static int error_code(const json_t *err, const char **msg)
{
    const char *name = json_string_value(json_object_get(err, "code"));
    *msg = json_string_value(json_object_get(err, "message"));
    if (!*msg)
        *msg = "(no message)";
    for (int i = 1; name && i < PE_N_CODES; i++)
        if (!strcmp(name, proto_error_name(i)))
            return i;
    return ERR_HTTP;
}

/* GET /v1/models: the server answers, the key is good; the model's id unless --model. */
static int models(hb *h)
{
    const bench_args *a = h->b->a;
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s/v1/models HTTP/1.1\r\nHost: %s\r\n%sConnection: "
                     "close\r\n\r\n", h->url.prefix, h->url.hostport, h->auth);
    int status;
    char *body;
    size_t len;
    int rc = http_get(&h->url, req, (size_t)n, (int)(a->f.timeout_s * 1e3), &status, &body, &len);
    if (rc)
        return deras_fail(rc, "GET %s/v1/models: %s", a->http, deras_errmsg());
    json_t *o = json_loadb(body, len, 0, NULL);
    const char *id = json_string_value(json_object_get(
        json_array_get(json_object_get(o, "data"), 0), "id"));
    if (status != 200 || (!id && !a->model)) {
        const char *msg;
        error_code(json_object_get(o, "error"), &msg);
        rc = deras_fail(DERAS_EIO, "GET %s/v1/models answered %d: %s", a->http, status,
                        json_object_get(o, "error") ? msg : "no model in the list");
    } else {
        snprintf(h->model, sizeof h->model, "%s", a->model ? a->model : id);
    }
    json_decref(o);
    free(body);
    return rc;
}

/* The sampling table's non-default rows under their own keys (the API's names). */
static void put_sampling(json_t *o, const sampling_params *sp)
{
    for (int i = 0; i < SAMPLING_N_PARAMS; i++) {
        const sampling_param_info *pi = &sampling_param_table[i];
        if (i == SAMPLING_I_n_logprobs || sampling_param_is_default(sp, i))
            continue;
        if (pi->kind == SAMPLING_BIAS) {
            json_t *m = json_object();
            for (int k = 0; k < sp->logit_bias.n; k++) {
                char id[16];
                snprintf(id, sizeof id, "%d", (int)sp->logit_bias.ids[k]);
                json_object_set_new(m, id, json_real(sp->logit_bias.bias[k]));
            }
            json_object_set_new(o, pi->key, m);
        } else if (pi->kind == SAMPLING_INT) {
            json_object_set_new(o, pi->key, json_integer((json_int_t)sampling_param_get(sp, i)));
        } else {
            json_object_set_new(o, pi->key, json_real(sampling_param_get(sp, i)));
        }
    }
}

/* Request i as HTTP bytes (malloc'ed). */
static char *build_request(hb *h, int i, size_t *len)
{
    const bench_args *a = h->b->a;
    const req_state *r = &h->b->r[i];
    const proto_request *q = &a->f.req;
    json_t *o = json_pack("{s:s, s:b, s:{s:b, s:b}, s:i}", "model", h->model, "stream", 1,
                          "stream_options", "include_usage", 1, "continuous_usage_stats", 1,
                          "max_tokens", r->max_tokens);
    if (!o)
        return NULL;
    if (a->chat) {
        json_object_set_new(o, "messages", json_pack("[{s:s, s:s}]", "role", "user", "content",
                                                     r->prompt));
    } else if (r->ids) {
        json_t *ids = json_array();
        for (int k = 0; k < r->n_ids; k++)
            json_array_append_new(ids, json_integer(r->ids[k]));
        json_object_set_new(o, "prompt", ids);
    } else {
        json_object_set_new(o, "prompt", json_string(r->prompt));
    }
    if (a->has_seed)
        json_object_set_new(o, "seed", json_integer((json_int_t)(a->seed + (uint64_t)i)));
    put_sampling(o, &q->params.sp);
    if (q->n_stops) {
        json_t *stops = json_array();
        for (int k = 0; k < q->n_stops; k++)
            json_array_append_new(stops, json_stringn(q->stops[k], q->stop_lens[k]));
        json_object_set_new(o, "stop", stops);
    }
    if (q->params.n_stop_ids) {
        json_t *ids = json_array();
        for (int k = 0; k < q->params.n_stop_ids; k++)
            json_array_append_new(ids, json_integer(q->params.stop_ids[k]));
        json_object_set_new(o, "stop_token_ids", ids);
    }
    if (q->params.ignore_eos)
        json_object_set_new(o, "ignore_eos", json_true());
    if (!a->chat && !q->add_special_tokens)
        json_object_set_new(o, "add_special_tokens", json_false());
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!body)
        return NULL;
    size_t bl = strlen(body);
    size_t cap = bl + 1024 + strlen(h->auth);
    char *req = malloc(cap);
    if (req) {
        int n = snprintf(req, cap, "POST %s/v1/%s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: "
                         "application/json\r\nAccept: text/event-stream\r\nContent-Length: "
                         "%zu\r\n\r\n", h->url.prefix, a->chat ? "chat/completions" : "completions",
                         h->url.hostport, h->auth, bl);
        memcpy(req + n, body, bl);
        *len = (size_t)n + bl;
    }
    free(body);
    return req;
}

/* Close the slot's connection (which leaves the epoll set with it). */
static void drop(slot *s)
{
    http_conn_destroy(&s->c);
    s->fd = -1;
}

/* The slot is free again; its connection stays open only when it may serve again. */
static void release(slot *s, double t)
{
    if (s->c && !http_conn_reusable(s->c))
        drop(s);
    s->r = NULL;
    s->idle_since = t;
}

static void fail(hb *h, slot *s, int code, double t, const char *msg)
{
    char what[64];
    snprintf(what, sizeof what, "request %d", s->index);
    say(h, code, what, msg);
    bench_finish(h->b, s->r, false, code, t);
    release(s, t);
}

/* Open (or reuse) the slot's connection and send request s->index on it. */
static int start(hb *h, slot *s, double t)
{
    if (s->c && t - s->idle_since > HTTP_REUSE_S)
        drop(s);
    int rc = s->c ? DERAS_OK : http_conn_new(&h->url, &s->c);
    size_t len = 0;
    char *req = rc ? NULL : build_request(h, s->index, &len);
    if (!rc && !req)
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
    if (!rc)
        rc = http_conn_send(s->c, req, len);
    free(req);
    return rc;
}

static int send_next(hb *h, double t)
{
    bench *b = h->b;
    int i = b->next++;
    slot *s = NULL;
    for (int k = 0; k < b->cap && !s; k++) /* a kept-alive connection first */
        if (!h->slots[k].r && h->slots[k].c)
            s = &h->slots[k];
    for (int k = 0; k < b->cap && !s; k++)
        if (!h->slots[k].r)
            s = &h->slots[k];
    req_state *r = &b->r[i];
    *s = (slot){.c = s->c, .r = r, .index = i, .idle_since = s->idle_since, .fd = s->fd,
                .events = s->events};
    r->t_send = r->t_heard = t;
    r->state = RS_LIVE;
    b->n_live++;
    int rc = start(h, s, t);
    if (rc == DERAS_ENOMEM)
        return rc;
    if (rc)
        fail(h, s, ERR_CLIENT, t, deras_errmsg());
    return DERAS_OK;
}

/* One `data:` payload of slot s's stream. */
static void on_data(hb *h, slot *s, const char *p, size_t n, double t)
{
    req_state *r = s->r;
    oai_chunk c;
    if (n == 6 && !memcmp(p, "[DONE]", 6))
        return;
    if (oai_chunk_scan(p, n, &c)) {
        s->err = s->err ? s->err : ERR_HTTP;
        say(h, ERR_HTTP, "a stream", "an event that is not a JSON object");
        return;
    }
    if (c.id && !r->id[0])
        snprintf(r->id, sizeof r->id, "%.*s", (int)(c.id_len < PROTO_MAX_ID ? c.id_len
                                                                             : PROTO_MAX_ID), c.id);
    if (c.usage && c.prompt_tokens >= 0)
        r->prompt_tokens = (int)c.prompt_tokens;
    if (c.error) { /* rare: read it whole */
        json_t *o = json_loadb(p, n, JSON_ALLOW_NUL, NULL);
        const char *msg;
        s->err = error_code(json_object_get(o, "error"), &msg);
        say(h, s->err, r->id, msg);
        json_decref(o);
    } else if (c.choice) {
        /* continuous usage: the sample's tokens so far; without it a chunk with text is one */
        int tokens = c.usage && c.completion_tokens >= 0 ? (int)(c.completion_tokens - r->n_tokens)
                                                         : c.text;
        if (tokens > 0)
            bench_tokens(h->b, r, tokens, t);
        if (c.finish) {
            s->finished = true;
            s->t_finish = t;
            if (c.finish_len == 5 && !memcmp(c.finish, "abort", 5))
                r->bad_finish = r->bad_finish ? r->bad_finish : ERR_ABORT;
            else if (!(c.finish_len == 4 && !memcmp(c.finish, "stop", 4)) &&
                     !(c.finish_len == 6 && !memcmp(c.finish, "length", 6)))
                r->bad_finish = ERR_FINISH;
        }
    } else if (c.usage && c.completion_tokens > r->n_tokens) { /* the last usage chunk */
        h->b->out_tokens += c.completion_tokens - r->n_tokens;
        r->n_tokens = (int)c.completion_tokens;
    }
}

/* The events the body holds so far (each ends with a blank line). */
static void on_events(hb *h, slot *s, double t)
{
    size_t n;
    const char *p = http_conn_body(s->c, &n);
    const char *end;
    while (s->r && (end = memmem(p, n, "\n\n", 2))) {
        size_t ev = (size_t)(end - p);
        for (const char *line = p; line < end;) {
            const char *eol = memchr(line, '\n', (size_t)(end - line));
            if (!eol)
                eol = end;
            if (eol - line >= 5 && !memcmp(line, "data:", 5)) {
                const char *d = line + 5 + (line[5] == ' ');
                on_data(h, s, d, (size_t)(eol - d), t);
            }
            line = eol + 1;
        }
        http_conn_consume(s->c, ev + 2);
        p = http_conn_body(s->c, &n);
    }
}

/* The response of slot s is complete. */
static void on_done(hb *h, slot *s, double t)
{
    req_state *r = s->r;
    int status = http_conn_status(s->c);
    if (status != 200) {
        size_t n;
        const char *p = http_conn_body(s->c, &n);
        json_t *o = json_loadb(p, n, 0, NULL);
        const char *msg = "an answer without an error object";
        int code = json_object_get(o, "error") ? error_code(json_object_get(o, "error"), &msg)
                                               : ERR_HTTP;
        char m[400];
        snprintf(m, sizeof m, "HTTP %d: %s", status, msg);
        json_decref(o);
        fail(h, s, code, t, m);
        return;
    }
    on_events(h, s, t);
    if (s->err)
        fail(h, s, s->err, t, "an error event in the stream");
    else if (!s->finished)
        fail(h, s, ERR_HTTP, t, "the stream ended without a finish_reason");
    else {
        bench_finish(h->b, r, !r->bad_finish, r->bad_finish, s->t_finish);
        release(s, t);
    }
}

static void on_ready(hb *h, slot *s, double t)
{
    int rc = http_conn_io(s->c);
    if (rc < 0) {
        bool heard = http_conn_heard(s->c);
        if (!heard && http_conn_uses(s->c) > 1 && !s->retried) {
            /* a kept-alive connection the server had closed: a new one, once */
            drop(s);
            s->retried = true;
            if (!start(h, s, t))
                return;
        }
        fail(h, s, heard ? ERR_HTTP : ERR_CLIENT, t, deras_errmsg());
        return;
    }
    if (http_conn_heard(s->c))
        s->r->t_heard = t;
    if (rc == HTTP_IO_DONE)
        on_done(h, s, t);
    else if (http_conn_status(s->c) == 200)
        on_events(h, s, t);
}

/* Register slot k's connection for what it waits on now (nothing while idle: a kept-alive
 * connection that the server closes then shows as a hang-up, and is closed). */
static void watch(hb *h, int k)
{
    slot *s = &h->slots[k];
    int fd = s->c ? http_conn_fd(s->c) : -1;
    short want = s->c && s->r ? http_conn_events(s->c) : 0;
    if (fd < 0 || (fd == s->fd && want == s->events))
        return;
    struct epoll_event ev = {.events = (want & POLLOUT ? EPOLLOUT : 0) |
                                       (want & POLLIN ? EPOLLIN : 0),
                             .data.u32 = (uint32_t)k};
    if (fd != s->fd || epoll_ctl(h->ep, EPOLL_CTL_MOD, fd, &ev))
        epoll_ctl(h->ep, EPOLL_CTL_ADD, fd, &ev); /* a new connection (drop() unregistered) */
    s->fd = fd;
    s->events = want;
}

static int run(hb *h)
{
    bench *b = h->b;
    const bench_args *a = b->a;
    bool stopping = false;
    while (b->n_done < a->n_requests && !stopping) {
        double t = bench_now(b);
        if (bench_interrupted) {
            fprintf(stderr, "bench: interrupted: closing %d requests in flight\n", b->n_live);
            for (int k = 0; k < b->cap; k++)
                if (h->slots[k].r) {
                    drop(&h->slots[k]); /* the router aborts the request */
                    bench_finish(b, h->slots[k].r, false, ERR_ABORT, t);
                    h->slots[k].r = NULL;
                }
            stopping = true;
            break;
        }
        int rc;
        while (bench_due(b, t))
            if ((rc = send_next(h, t)))
                return rc;
        for (int k = 0; k < b->cap; k++)
            watch(h, k);
        int n = epoll_wait(h->ep, h->evs, b->cap, bench_wait_ms(b));
        t = bench_now(b);
        for (int i = 0; i < n; i++) {
            slot *s = &h->slots[h->evs[i].data.u32];
            if (s->r)
                on_ready(h, s, t);
            else if (s->c) /* an idle connection the server closed */
                drop(s);
        }
        for (int k = 0; k < b->cap; k++) {
            slot *s = &h->slots[k];
            if (s->r && t - s->r->t_heard >= a->f.timeout_s) {
                char m[96];
                snprintf(m, sizeof m, "no event for %.3g s, counted as failed", a->f.timeout_s);
                fail(h, s, ERR_TIMEOUT, t, m);
            }
        }
        bench_tick(b, t);
    }
    return DERAS_OK;
}

int bench_run_http(bench *b)
{
    const bench_args *a = b->a;
    hb h = {.b = b};
    int rc = http_url_parse(a->http, &h.url);
    if (!rc && a->api_key_file)
        rc = read_key(a->api_key_file, h.auth, sizeof h.auth);
    if (rc)
        return rc;
    snprintf(b->target, sizeof b->target, "%s", a->http);
    /* one descriptor per connection in flight */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    h.slots = calloc((size_t)b->cap, sizeof *h.slots);
    h.evs = calloc((size_t)b->cap, sizeof *h.evs);
    h.ep = epoll_create1(EPOLL_CLOEXEC);
    if (!h.slots || !h.evs)
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
    else if (h.ep < 0)
        rc = deras_fail(DERAS_EIO, "epoll_create1 failed");
    for (int k = 0; !rc && k < b->cap; k++)
        h.slots[k].fd = -1;
    if (!rc)
        rc = models(&h);
    if (!rc) {
        b->t0 = cli_now();
        b->t_progress = BENCH_PROGRESS_S;
        rc = run(&h);
    }
    for (int k = 0; h.slots && k < b->cap; k++)
        drop(&h.slots[k]);
    free(h.slots);
    free(h.evs);
    if (h.ep >= 0)
        close(h.ep);
    return rc;
}
