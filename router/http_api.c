/* SPDX-License-Identifier: Apache-2.0 */
/* http_api.c - the OpenAI-compatible HTTP API on the router's HTTP listener:
 *
 *   GET  /v1/models             the served model
 *   POST /v1/completions        a prompt (text or token ids)
 *   POST /v1/chat/completions   messages, rendered with the model's chat template
 *   POST /tokenize, /detokenize text <-> token ids (vLLM's shapes)
 *
 * A call is one HTTP request. Its body arrives through libmicrohttpd's upload callbacks
 * into a buffer bounded by the protocol's frame cap (4 MiB: 413 beyond, the rest of the
 * body is read and dropped); it is parsed (openai_request.c) into the same proto_request the
 * ZeroMQ door decodes, and enters the same checks and admission (frontend_admit). Then the
 * connection is suspended (MHD_suspend_connection: libmicrohttpd stops polling it) until
 * the request has something to say; relay.c appends chunks, finals, an error or the end to
 * the call's output buffer and resumes it. Before the first output the status is still
 * open, so a request refused after admission (no_workers after the wait, worker_failed)
 * gets its HTTP status; then a non-streaming call gets its JSON body at the end, a
 * streaming one a 200 text/event-stream whose callback (MHD_create_response_from_callback)
 * hands out what the buffer holds and suspends the connection when it is empty. Nothing
 * blocks the router's loop.
 *
 * A client that goes away: libmicrohttpd reports the end of every call
 * (MHD_OPTION_NOTIFY_COMPLETED), and a call whose request still runs has it cancelled
 * (finish "abort", "disconnected"; the worker frees its KV). A suspended connection is not
 * polled by libmicrohttpd, so the loop polls the waiting calls' sockets for a hang-up
 * itself (one poll(2) over them, every HTTP_API_CHECK_US).
 *
 * API keys (--api-key-file): when given, every route here needs "Authorization: Bearer
 * KEY" with one of the file's keys (compared in constant time for a given length); 401
 * otherwise. /metrics, /health and /live (http.c) never do.
 *
 * Costs: a call allocates its record, the body (at most 4 MiB; all calls' bodies together
 * at most 64 MiB, 429 beyond) and jansson's values while it parses (at most ~30 bytes per
 * body byte), both freed once the request is admitted, then its output buffers; a streamed token appends to a buffer that keeps its
 * capacity (no allocation once warm). The departure check is O(waiting calls) per 100 ms.
 */
#include "router/http_api.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base/list.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "router/openai_response.h"
#include "router/tool_calls.h"

#define HTTP_API_CHECK_US 100000  /* departures of waiting clients checked this often */
#define HTTP_API_MAX_KEYS 64
#define HTTP_API_MAX_KEY 256
#define HTTP_API_BODIES_MAX ((size_t)64 << 20) /* bodies being received, all calls together */

enum route { R_MODELS, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_NONE };

struct http_api {
    char keys[HTTP_API_MAX_KEYS][HTTP_API_MAX_KEY + 1];
    size_t key_lens[HTTP_API_MAX_KEYS];
    int n_keys;
    list_node waiting;            /* calls with a live request */
    int n_waiting;
    struct pollfd *pfds;          /* scratch of the departure check */
    int cap_pfds;
    int64_t next_check_us;
    uint64_t n_calls;
    size_t body_bytes;            /* held in calls' body buffers now */
    int n_live;                   /* calls not yet completed */
    bool resumed;                 /* a call was resumed since the last http_run */
    char model[256];              /* the served model's name */
};

struct http_call {
    router_t *rt;
    struct MHD_Connection *conn;
    enum route route;
    int fd;
    oai_buf body;
    bool too_large, over_budget, handled, suspended, responding, ended;
    oai_request req;
    rq_t *r;                      /* while its request is live */
    enum proto_error_code err;
    char err_msg[256];
    oai_buf out;                  /* bytes to send */
    size_t out_off;
    oai_buf choices;              /* non-streaming: finished choices */
    int n_choices, prompt_tokens, completion_tokens;
    bool role_sent[REQ_MAX_N];
    int text_off[REQ_MAX_N];
    int n_tokens[REQ_MAX_N];      /* streamed so far, per sample (continuous_usage_stats) */
    bool parse_tools;             /* a chat with tools: each sample's text goes through tp */
    tool_parser tp[REQ_MAX_N];
    oai_buf t_content, t_calls;   /* scratch: one piece's content and tool calls */
    char id[48];
    int64_t created;
    uint8_t ident[16];
    list_node link;
    bool linked;
};

static const struct {
    const char *url, *method;
} routes[] = {
    [R_MODELS] = {"/v1/models", "GET"},
    [R_COMPLETIONS] = {"/v1/completions", "POST"},
    [R_CHAT] = {"/v1/chat/completions", "POST"},
    [R_TOKENIZE] = {"/tokenize", "POST"},
    [R_DETOKENIZE] = {"/detokenize", "POST"},
};

static enum route route_of(const char *url)
{
    for (int i = 0; i < R_NONE; i++)
        if (!strcmp(url, routes[i].url))
            return (enum route)i;
    return R_NONE;
}

bool http_api_route(const char *url)
{
    return route_of(url) != R_NONE || !strncmp(url, "/v1/", 4);
}

/* ---- keys ---- */

int http_api_open(router_t *rt)
{
    http_api_t *a = calloc(1, sizeof *a);
    if (!a)
        return deras_fail(DERAS_ENOMEM, "http api: out of memory");
    list_init(&a->waiting);
    const char *base = strrchr(rt->o.model, '/');
    snprintf(a->model, sizeof a->model, "%s", base && base[1] ? base + 1 : rt->o.model);
    size_t n = strlen(a->model);
    while (n > 1 && a->model[n - 1] == '/')
        a->model[--n] = '\0';
    rt->api = a;
    if (!rt->o.api_key_file)
        return DERAS_OK;
    FILE *f = fopen(rt->o.api_key_file, "r");
    if (!f)
        return deras_fail(DERAS_EIO, "--api-key-file %s: cannot open", rt->o.api_key_file);
    char line[HTTP_API_MAX_KEY + 2];
    int rc = DERAS_OK;
    while (fgets(line, sizeof line, f)) {
        size_t l = strcspn(line, "\r\n");
        if (l == strlen(line) && !feof(f)) {
            rc = deras_fail(DERAS_EINVAL, "--api-key-file: a key longer than %d bytes",
                            HTTP_API_MAX_KEY);
            break;
        }
        line[l] = '\0';
        if (!l || line[0] == '#')
            continue;
        if (a->n_keys == HTTP_API_MAX_KEYS) {
            rc = deras_fail(DERAS_EINVAL, "--api-key-file: more than %d keys", HTTP_API_MAX_KEYS);
            break;
        }
        memcpy(a->keys[a->n_keys], line, l + 1);
        a->key_lens[a->n_keys++] = l;
    }
    if (!rc && ferror(f))
        rc = deras_fail(DERAS_EIO, "--api-key-file %s: cannot read it", rt->o.api_key_file);
    fclose(f);
    if (!rc && !a->n_keys)
        rc = deras_fail(DERAS_EINVAL, "--api-key-file %s holds no key", rt->o.api_key_file);
    return rc;
}

void http_api_close(router_t *rt)
{
    if (!rt->api)
        return;
    free(rt->api->pfds);
    memset(rt->api, 0, sizeof *rt->api); /* the keys */
    free(rt->api);
    rt->api = NULL;
}

/* Whether the call's Authorization header holds a key: every key is compared, each over
 * all its bytes, so the time depends on the lengths only. */
static bool authorized(const http_api_t *a, struct MHD_Connection *c)
{
    if (!a->n_keys)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) /* the scheme is case-insensitive (RFC 9110) */
        return false;
    const unsigned char *k = (const unsigned char *)h + 7;
    size_t n = strlen((const char *)k);
    unsigned ok = 0;
    for (int i = 0; i < a->n_keys; i++) {
        const unsigned char *key = (const unsigned char *)a->keys[i];
        unsigned d = n != a->key_lens[i];
        for (size_t j = 0; j < a->key_lens[i]; j++)
            d |= key[j] ^ (j < n ? k[j] : 0u);
        ok |= !d;
    }
    return ok;
}

/* ---- responses ---- */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const oai_buf *b)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(b->n, b->p ? b->p : "", MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, POST");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result respond_error(router_t *rt, struct MHD_Connection *c, unsigned status,
                                     const char *code, const char *param, const char *msg)
{
    rt->st.http_api_errors++;
    oai_buf b = {0};
    oai_put_error(&b, status, code, param, msg);
    enum MHD_Result ok = respond(c, status, &b);
    oai_buf_free(&b);
    return ok;
}

/* libmicrohttpd picks a resumed connection up in its next MHD_run; the loop's next poll
 * does not wait for that (http_next_timer). */
static void resume(http_call_t *call)
{
    if (call->suspended) {
        call->suspended = false;
        call->rt->api->resumed = true;
        MHD_resume_connection(call->conn);
    }
}

static void suspend(http_call_t *call)
{
    if (!call->suspended) {
        call->suspended = true;
        MHD_suspend_connection(call->conn);
    }
}

static void unlink_call(http_api_t *a, http_call_t *call)
{
    if (call->linked) {
        list_remove(&call->link);
        call->linked = false;
        a->n_waiting--;
    }
}

static void drop_body(http_api_t *a, http_call_t *call)
{
    a->body_bytes -= call->body.n;
    oai_buf_free(&call->body);
}

/* The streaming body: what the buffer holds; when it is empty, wait (suspended). */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_call_t *call = cls;
    size_t avail = call->out.n - call->out_off;
    if (avail) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, call->out.p + call->out_off, n);
        call->out_off += n;
        if (call->out_off == call->out.n)
            call->out.n = call->out_off = 0;
        return (ssize_t)n;
    }
    if (call->ended)
        return MHD_CONTENT_READER_END_OF_STREAM;
    suspend(call);
    return 0;
}

/* ---- what relay.c reports ---- */

void http_api_bind(http_call_t *call, rq_t *r)
{
    http_api_t *a = call->rt->api;
    call->r = r;
    list_push_back(&a->waiting, &call->link);
    call->linked = true;
    a->n_waiting++;
}

/* A chat with tools: p's text goes through sample k's tool parser (what it decides
 * replaces the text, its calls join the piece); at the end (final) what it held. */
static void tool_piece(http_call_t *call, int k, oai_piece *p, bool delta, bool final)
{
    if (!call->parse_tools)
        return;
    call->t_content.n = call->t_calls.n = 0;
    tool_parser_feed(&call->tp[k], p->text, p->n_text, delta, &call->t_content, &call->t_calls);
    if (final)
        tool_parser_finish(&call->tp[k], delta, &call->t_content, &call->t_calls);
    p->text = call->t_content.p ? call->t_content.p : "";
    p->n_text = call->t_content.n;
    p->tool_calls = call->t_calls.p;
    p->n_tool_calls = call->t_calls.n;
}

static oai_piece piece_of(const http_call_t *call, int k, const stream_t *st)
{
    oai_piece p = {.index = k, .top_n = call->req.top_logprobs};
    int n_ids;
    p.text = stream_text(st, &p.n_text);
    stream_ids(st, &n_ids);
    if (call->req.logprobs) {
        p.lps = stream_logprobs(st);
        p.n_lps = p.lps ? n_ids : 0;
    }
    p.text_offset = call->text_off[k];
    return p;
}

void http_api_chunk(router_t *rt, rq_t *r, int k)
{
    http_call_t *call = r->http;
    oai_piece p = piece_of(call, k, r->samples[k].st);
    int n_ids;
    stream_ids(r->samples[k].st, &n_ids);
    call->n_tokens[k] += n_ids;
    call->text_off[k] += (int)p.n_text;
    tool_piece(call, k, &p, true, false);
    if (call->parse_tools && !p.n_text && !p.n_tool_calls && !p.n_lps)
        return; /* all held by the tool-call parser */
    p.role = call->req.kind == OAI_CHAT && !call->role_sent[k];
    call->role_sent[k] = true;
    p.usage = call->req.continuous_usage;
    p.prompt_tokens = r->n_prompt;
    p.completion_tokens = call->n_tokens[k];
    oai_put_chunk(&call->out, call->req.kind, call->id, call->created, rt->api->model, rt->tok,
                  &p);
    resume(call);
}

void http_api_final(router_t *rt, rq_t *r, int k, const proto_usage *u)
{
    http_call_t *call = r->http;
    rq_sample *s = &r->samples[k];
    call->prompt_tokens = u->prompt_tokens;
    call->completion_tokens += u->completion_tokens;
    if (r->stream) { /* the text went out in chunks: an empty delta with the reason (and
                        what the tool-call parser still held) */
        oai_piece p = {.index = k, .text = "", .usage = call->req.continuous_usage,
                       .prompt_tokens = u->prompt_tokens,
                       .completion_tokens = u->completion_tokens};
        tool_piece(call, k, &p, true, true);
        p.finish = oai_finish_name_tools(s->finish, call->parse_tools ? call->tp[k].n_calls : 0);
        p.role = call->req.kind == OAI_CHAT && !call->role_sent[k];
        call->role_sent[k] = true;
        oai_put_chunk(&call->out, call->req.kind, call->id, call->created, rt->api->model,
                      rt->tok, &p);
        resume(call);
        return;
    }
    oai_piece p = piece_of(call, k, s->st);
    tool_piece(call, k, &p, false, true);
    p.finish = oai_finish_name_tools(s->finish, call->parse_tools ? call->tp[k].n_calls : 0);
    oai_put_choice(&call->choices, call->req.kind, rt->tok, &p, call->n_choices++ == 0);
}

void http_api_fail(router_t *rt, rq_t *r, enum proto_error_code code, const char *msg)
{
    http_call_t *call = r->http;
    rt->st.errors[code]++;
    call->err = code;
    snprintf(call->err_msg, sizeof call->err_msg, "%s", msg);
    if (call->responding) { /* the status went out: the error is the stream's last event */
        oai_buf_put(&call->out, "data: ", 6);
        oai_put_error(&call->out, oai_http_status(code), proto_error_name(code), NULL, msg);
        oai_buf_put(&call->out, "\n\n", 2);
    }
}

void http_api_end(router_t *rt, rq_t *r)
{
    http_call_t *call = r->http;
    r->http = NULL;
    call->r = NULL;
    call->ended = true;
    unlink_call(rt->api, call);
    if (r->stream && (call->responding || call->err == PE_NONE)) {
        if (call->req.include_usage && call->err == PE_NONE)
            oai_put_usage_chunk(&call->out, call->req.kind, call->id, call->created,
                                rt->api->model, call->prompt_tokens, call->completion_tokens);
        oai_buf_put(&call->out, "data: [DONE]\n\n", 14);
    } else if (call->err == PE_NONE) {
        oai_put_response(&call->out, call->req.kind, call->id, call->created, rt->api->model,
                         &call->choices, call->prompt_tokens, call->completion_tokens);
    }
    resume(call);
}

/* The request of a call whose client left: cancelled, the worker told. */
static void abandon(router_t *rt, http_call_t *call)
{
    rq_t *r = call->r;
    unlink_call(rt->api, call);
    call->ended = true;
    if (!r)
        return;
    call->r = NULL;
    r->http = NULL;
    r->gone = true; /* nothing is sent for it any more */
    relay_abort(rt, r, "disconnected");
}

bool http_api_take_resumed(router_t *rt)
{
    if (!rt->api || !rt->api->resumed)
        return false;
    rt->api->resumed = false;
    return true;
}

bool http_api_resumed(const router_t *rt)
{
    return rt->api && rt->api->resumed;
}

bool http_api_idle(const router_t *rt)
{
    return !rt->api || rt->api->n_live == 0;
}

const char *http_api_model(const router_t *rt)
{
    return rt->api ? rt->api->model : "";
}

bool http_api_waiting(const router_t *rt)
{
    return rt->api && rt->api->n_waiting > 0;
}

void http_api_check_gone(router_t *rt)
{
    http_api_t *a = rt->api;
    int64_t now = router_now_us();
    if (!a || !a->n_waiting || now < a->next_check_us)
        return;
    a->next_check_us = now + HTTP_API_CHECK_US;
    if (a->n_waiting > a->cap_pfds) {
        int cap = a->n_waiting * 2;
        struct pollfd *p = realloc(a->pfds, (size_t)cap * sizeof *p);
        if (!p)
            return; /* checked again next time; libmicrohttpd still ends calls it sees end */
        a->pfds = p;
        a->cap_pfds = cap;
    }
    int n = 0;
    for (list_node *it = list_first(&a->waiting); it; it = list_next(&a->waiting, it)) {
        http_call_t *call = list_entry(it, http_call_t, link);
        a->pfds[n++] = (struct pollfd){.fd = call->fd, .events = POLLRDHUP};
    }
    if (poll(a->pfds, (nfds_t)n, 0) <= 0)
        return;
    list_node *next;
    int i = 0;
    for (list_node *it = list_first(&a->waiting); it && i < n; it = next, i++) {
        next = list_next(&a->waiting, it);
        http_call_t *call = list_entry(it, http_call_t, link);
        if (a->pfds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            abandon(rt, call);
            resume(call); /* libmicrohttpd then finds the socket closed and ends the call */
        }
    }
}

void http_api_completed(router_t *rt, void **con_cls)
{
    http_call_t *call = *con_cls;
    if (!call)
        return;
    *con_cls = NULL;
    rt->api->n_live--;
    abandon(rt, call);
    oai_request_free(&call->req);
    drop_body(rt->api, call);
    oai_buf_free(&call->out);
    oai_buf_free(&call->choices);
    oai_buf_free(&call->t_content);
    oai_buf_free(&call->t_calls);
    for (int k = 0; k < REQ_MAX_N; k++)
        tool_parser_free(&call->tp[k]);
    free(call);
}

/* ---- routes ---- */

static enum MHD_Result models(router_t *rt, struct MHD_Connection *c)
{
    oai_buf b = {0};
    oai_buf_printf(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
    oai_buf_json_str(&b, rt->api->model, strlen(rt->api->model));
    oai_buf_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"deras\","
                       "\"max_model_len\":%d}]}",
                   (long long)rt->start_time_s, rt->ctx_len);
    enum MHD_Result ok = respond(c, MHD_HTTP_OK, &b);
    oai_buf_free(&b);
    return ok;
}

static enum MHD_Result tokenize_route(router_t *rt, http_call_t *call)
{
    const proto_request *q = &call->req.q;
    call->req.q.params.max_tokens = 0; /* only the prompt must fit the context */
    const int32_t *ids;
    int n;
    char msg[256];
    enum proto_error_code code = frontend_prompt(rt, q, &ids, &n, msg, sizeof msg);
    if (code != PE_NONE)
        return respond_error(rt, call->conn, oai_http_status(code), proto_error_name(code),
                             NULL, msg);
    oai_buf b = {0};
    oai_buf_printf(&b, "{\"count\":%d,\"max_model_len\":%d,\"tokens\":[", n, rt->ctx_len);
    for (int i = 0; i < n; i++)
        oai_buf_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
    oai_buf_put(&b, "]}", 2);
    enum MHD_Result ok = respond(call->conn, MHD_HTTP_OK, &b);
    oai_buf_free(&b);
    return ok;
}

static enum MHD_Result detokenize_route(router_t *rt, http_call_t *call)
{
    json_t *root = json_loadb(call->body.p ? call->body.p : "", call->body.n, 0, NULL);
    json_t *tokens = json_object_get(root, "tokens");
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
        if (strcmp(k, "tokens") && strcmp(k, "model")) {
            json_decref(root);
            return respond_error(rt, call->conn, 400, "invalid_field", k, "unknown field");
        }
    size_t n = json_array_size(tokens);
    if (!json_is_array(tokens) || n > (size_t)rt->lim.max_prompt_ids) {
        json_decref(root);
        return respond_error(rt, call->conn, 400, "invalid_field", "tokens",
                             "tokens must be an array of at most max_prompt_ids token ids");
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    char *text = NULL;
    enum MHD_Result ok;
    for (size_t i = 0; ids && i < n; i++) {
        json_t *x = json_array_get(tokens, i);
        json_int_t id = json_integer_value(x);
        if (!json_is_integer(x) || id < 0 || id >= rt->vocab_size) {
            ok = respond_error(rt, call->conn, 400, "token_out_of_range", "tokens",
                               "tokens must be ids in [0, vocab)");
            goto out;
        }
        ids[i] = (int32_t)id;
    }
    size_t need = 0;
    if (ids)
        tokenizer_decode(rt->tok, ids, n, true, NULL, 0, &need);
    if (!ids || !(text = malloc(need + 1)) ||
        tokenizer_decode(rt->tok, ids, n, true, text, need + 1, &need)) {
        ok = respond_error(rt, call->conn, 500, "internal", NULL, "out of memory");
        goto out;
    }
    oai_buf b = {0};
    oai_buf_put(&b, "{\"prompt\":", 10);
    oai_buf_json_str(&b, text, need);
    oai_buf_put(&b, "}", 1);
    ok = respond(call->conn, MHD_HTTP_OK, &b);
    oai_buf_free(&b);
out:
    free(text);
    free(ids);
    json_decref(root);
    return ok;
}

static enum MHD_Result answer(router_t *rt, http_call_t *call);

/* A chat with tools: the tool-call parsers of its samples and, for tool_choice required or
 * named, the grammar that makes the model call (into *grammar, the caller frees it after
 * admission). PE_NONE, or the code with msg. */
static enum proto_error_code tools_setup(router_t *rt, http_call_t *call, char **grammar,
                                         char *msg, size_t cap)
{
    oai_request *req = &call->req;
    if (!req->q.tools || req->tool_choice < OAI_TOOL_CHOICE_AUTO)
        return PE_NONE;
    tool_style st = rt->tools;
    if (req->tool_choice >= OAI_TOOL_CHOICE_REQUIRED) {
        if (st == TOOL_STYLE_NONE) /* enforced and parsed in the plainest form */
            st = TOOL_STYLE_LLAMA3_JSON;
        size_t len;
        const char *name = req->tool_choice == OAI_TOOL_CHOICE_NAMED ? req->tool_name : NULL;
        enum proto_error_code code = tools_grammar(st, req->q.tools, name,
                                                   req->parallel_tool_calls, grammar, &len, msg,
                                                   cap);
        if (code != PE_NONE)
            return code;
        req->q.grammar = *grammar;
        req->q.grammar_len = len;
    }
    call->parse_tools = st != TOOL_STYLE_NONE;
    for (int k = 0; k < REQ_MAX_N && call->parse_tools; k++)
        tool_parser_start(&call->tp[k], st, (uint64_t)call->created * 1000003u ^
                                                (uint64_t)rt->api->n_calls << 8 ^ (uint64_t)k);
    return PE_NONE;
}

/* The body is complete: parse, then answer or admit. */
static enum MHD_Result handle(router_t *rt, http_call_t *call)
{
    struct MHD_Connection *c = call->conn;
    if (call->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body exceeds %zu bytes", rt->lim.max_message_bytes);
        return respond_error(rt, c, 413, "message_too_large", NULL, msg);
    }
    if (call->over_budget)
        return respond_error(rt, c, 429, "busy", NULL,
                             "too many request bodies are being received; retry later");
    if (call->route == R_DETOKENIZE)
        return detokenize_route(rt, call);
    /* /tokenize takes a completion's prompt or a chat's messages */
    oai_kind kind = call->route == R_CHAT ? OAI_CHAT : OAI_COMPLETIONS;
    if (call->route == R_TOKENIZE) { /* a second parse, for /tokenize only */
        json_t *root = json_loadb(call->body.p ? call->body.p : "", call->body.n, 0, NULL);
        if (json_object_get(root, "messages"))
            kind = OAI_CHAT;
        json_decref(root);
    }
    oai_error e;
    int rc = oai_parse(kind, call->body.p ? call->body.p : "", call->body.n, &rt->lim,
                       &call->req, &e);
    drop_body(rt->api, call); /* the parsed values hold what is needed */
    if (rc)
        return respond_error(rt, c, oai_http_status(e.code), proto_error_name(e.code), e.param,
                             e.message);
    if (*call->req.model && strcmp(call->req.model, rt->api->model)) {
        char msg[400];
        snprintf(msg, sizeof msg, "The model '%.150s' does not exist; this server serves '%.150s'",
                 call->req.model, rt->api->model);
        return respond_error(rt, c, MHD_HTTP_NOT_FOUND, "model_not_found", "model", msg);
    }
    if (call->route == R_TOKENIZE)
        return tokenize_route(rt, call);

    http_api_t *a = rt->api;
    uint64_t serial = ++a->n_calls;
    snprintf(call->id, sizeof call->id, "%s-%llu", kind == OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)serial);
    snprintf(call->req.q.id, sizeof call->req.q.id, "%s", call->id);
    call->created = (int64_t)(rt->start_time_s + (router_now_us() - rt->start_us) / 1e6);
    /* a key no ZeroMQ peer can have: libzmq's own ids are 5 bytes from 0x00, a client's
     * may not start with 0x00 */
    memcpy(call->ident, "\0http\0\0\0", 8);
    memcpy(call->ident + 8, &serial, 8);
    rq_origin o = {.ident = call->ident, .ident_len = 16, .fd = -1, .http = call};
    char msg[256];
    char *tool_grammar = NULL;
    enum proto_error_code code = tools_setup(rt, call, &tool_grammar, msg, sizeof msg);
    if (code == PE_NONE)
        code = frontend_admit(rt, &o, &call->req.q, msg, sizeof msg);
    free(tool_grammar); /* admission compiled its own copy */
    /* admission copied or tokenized what it needs: the parsed body goes (the flags stay) */
    oai_request_free(&call->req);
    if (code != PE_NONE) {
        rt->st.errors[code]++;
        return respond_error(rt, c, oai_http_status(code), proto_error_name(code), NULL, msg);
    }
    return answer(rt, call); /* dispatch may have ended it already; else it waits */
}

/* A resumed call that has not answered yet: its error, its stream, or its whole body. */
static enum MHD_Result answer(router_t *rt, http_call_t *call)
{
    if (call->err != PE_NONE)
        return respond_error(rt, call->conn, oai_http_status(call->err),
                             proto_error_name(call->err), NULL, call->err_msg);
    if (call->req.q.stream && (call->out.n || call->ended)) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                   stream_reader, call, NULL);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        call->responding = true;
        enum MHD_Result ok = MHD_queue_response(call->conn, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ok;
    }
    if (call->ended) {
        if (call->out.failed || call->choices.failed)
            return respond_error(rt, call->conn, 500, "internal", NULL, "out of memory");
        call->responding = true;
        return respond(call->conn, MHD_HTTP_OK, &call->out);
    }
    suspend(call);
    return MHD_YES;
}

enum MHD_Result http_api_request(router_t *rt, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *upload_data,
                                 size_t *upload_size, void **con_cls)
{
    http_call_t *call = *con_cls;
    if (!call) {
        enum route route = route_of(url);
        if (!authorized(rt->api, c))
            return respond_error(rt, c, MHD_HTTP_UNAUTHORIZED, "invalid_api_key", NULL,
                                 "a valid API key is required (Authorization: Bearer KEY)");
        if (route == R_NONE)
            return respond_error(rt, c, MHD_HTTP_NOT_FOUND, "not_found", NULL,
                                 "no such route: /v1/models, /v1/completions, "
                                 "/v1/chat/completions, /tokenize, /detokenize");
        if (strcmp(method, routes[route].method)) {
            char msg[80];
            snprintf(msg, sizeof msg, "%s takes %s", routes[route].url, routes[route].method);
            return respond_error(rt, c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", NULL,
                                 msg);
        }
        if (route == R_MODELS)
            return models(rt, c);
        if (!(call = calloc(1, sizeof *call)))
            return MHD_NO;
        call->rt = rt;
        call->conn = c;
        call->route = route;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        call->fd = ci ? ci->connect_fd : -1;
        *con_cls = call;
        rt->api->n_live++;
        rt->st.http_api_calls++;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        http_api_t *a = rt->api;
        *upload_size = 0;
        if (call->too_large || call->over_budget ||
            call->body.n + n > rt->lim.max_message_bytes ||
            a->body_bytes + n > HTTP_API_BODIES_MAX) {
            /* read and dropped: the answer is 413, or 429 when all bodies together are over */
            if (!call->too_large && call->body.n + n <= rt->lim.max_message_bytes)
                call->over_budget = true;
            else
                call->too_large = true;
            drop_body(a, call);
            return MHD_YES;
        }
        size_t before = call->body.n;
        oai_buf_put(&call->body, upload_data, n);
        a->body_bytes += call->body.n - before;
        call->over_budget = call->body.failed;
        return MHD_YES;
    }
    if (!call->handled) {
        call->handled = true;
        return handle(rt, call);
    }
    return answer(rt, call);
}
