/* SPDX-License-Identifier: Apache-2.0 */
/* openai_codec.c - OpenAI-compatible JSON <-> the router's request and replies (see
 * openai_codec.h). Parsing walks the body's keys once against the kind's table of known
 * fields; sampling fields are checked against the sampling table (common/request/sampling.h)
 * so both doors refuse the same values with the same words. */
#include "router/openai_codec.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"

#define OAI_MAX_PARTS 64       /* text parts in one message's content */
#define OAI_MAX_TOOL_CALLS 64
#define OAI_MAX_NAME 256

static int fail(oai_error *e, enum proto_error_code code, const char *param, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));
static int fail(oai_error *e, enum proto_error_code code, const char *param, const char *fmt,
                ...)
{
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return DERAS_EFORMAT;
}

static const char *type_name(const json_t *v)
{
    if (!v)
        return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

static int want(oai_error *e, const char *key, const json_t *v, const char *what)
{
    return fail(e, PE_INVALID_FIELD, key, "%s must be %s, got %s", key, what, type_name(v));
}

static int get_bool(oai_error *e, const char *key, const json_t *v, bool *out)
{
    if (!json_is_boolean(v))
        return want(e, key, v, "a boolean");
    *out = json_is_true(v);
    return DERAS_OK;
}

/* An integer in [lo, hi]; above hi `over` (limit_exceeded for caps). */
static int get_int(oai_error *e, const char *key, const json_t *v, int64_t lo, int64_t hi,
                   enum proto_error_code over, int64_t *out)
{
    if (!json_is_integer(v))
        return want(e, key, v, "an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo)
        return fail(e, PE_VALUE_OUT_OF_RANGE, key, "%s must be at least %lld, got %lld", key,
                    (long long)lo, (long long)x);
    if (x > hi)
        return fail(e, over, key, "%s must be at most %lld, got %lld", key, (long long)hi,
                    (long long)x);
    *out = x;
    return DERAS_OK;
}

/* A string of 1..max bytes (jansson guarantees UTF-8 without NUL). */
static int get_str(oai_error *e, const char *key, const json_t *v, size_t max, const char **s,
                   size_t *n)
{
    if (!json_is_string(v))
        return want(e, key, v, "a string");
    *s = json_string_value(v);
    *n = json_string_length(v);
    if (*n > max)
        return fail(e, PE_LIMIT_EXCEEDED, key, "%s is %zu bytes, at most %zu", key, *n, max);
    return DERAS_OK;
}

/* A row of the sampling table given by its wire key. */
static int sampling_field(oai_error *e, const char *key, const json_t *v, req_params *p)
{
    for (int i = 0; i < SAMPLING_N_PARAMS; i++) {
        const sampling_param_info *pi = &sampling_param_table[i];
        if (strcmp(pi->key, key))
            continue;
        if (pi->kind == SAMPLING_INT ? !json_is_integer(v) : !json_is_number(v))
            return want(e, key, v, pi->kind == SAMPLING_INT ? "an integer" : "a number");
        double x = json_number_value(v);
        if (!sampling_param_in_range(pi, x)) {
            char range[64];
            return fail(e, pi->cap && x > pi->hi ? PE_LIMIT_EXCEEDED : PE_VALUE_OUT_OF_RANGE, key,
                        "%s must be in %s, got %g", key, sampling_param_range(pi, range, sizeof range),
                        x);
        }
        sampling_param_set(&p->sp, i, x);
        return DERAS_OK;
    }
    return fail(e, PE_INTERNAL, key, "%s: not a sampling parameter", key);
}

static int parse_logit_bias(oai_error *e, const json_t *v, logit_bias *b)
{
    if (!json_is_object(v))
        return want(e, "logit_bias", v, "an object of token ids to biases");
    if (json_object_size(v) > SAMPLING_MAX_LOGIT_BIAS)
        return fail(e, PE_LIMIT_EXCEEDED, "logit_bias", "logit_bias has %zu entries, at most %d",
                    json_object_size(v), SAMPLING_MAX_LOGIT_BIAS);
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || k[0] == '+' || k[0] == ' ' || id < 0 || id > INT32_MAX)
            return fail(e, PE_INVALID_FIELD, "logit_bias",
                        "logit_bias keys must be token ids (decimal integers >= 0)");
        if (!json_is_number(x))
            return want(e, "logit_bias", x, "an object of numbers");
        double bias = json_number_value(x);
        if (!(bias >= -100 && bias <= 100))
            return fail(e, PE_VALUE_OUT_OF_RANGE, "logit_bias",
                        "logit_bias[%ld] must be in [-100, 100], got %g", id, bias);
        if (logit_bias_add(b, (int32_t)id, (float)bias))
            return fail(e, PE_INVALID_FIELD, "logit_bias", "logit_bias: token %ld repeats", id);
    }
    return DERAS_OK;
}

static int parse_stop(oai_error *e, const json_t *v, proto_request *q)
{
    if (json_is_string(v)) {
        q->n_stops = 0;
        if (json_string_length(v) == 0)
            return DERAS_OK; /* "" stops nothing: OpenAI's clients send it for none */
        return get_str(e, "stop", v, PROTO_MAX_STOP_BYTES, &q->stops[0], &q->stop_lens[0]) ||
               (q->n_stops = 1, DERAS_OK);
    }
    if (!json_is_array(v))
        return want(e, "stop", v, "a string or an array of strings");
    if (json_array_size(v) > PROTO_MAX_STOPS)
        return fail(e, PE_LIMIT_EXCEEDED, "stop", "stop has %zu strings, at most %d",
                    json_array_size(v), PROTO_MAX_STOPS);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (get_str(e, "stop", s, PROTO_MAX_STOP_BYTES, &q->stops[i], &q->stop_lens[i]))
            return DERAS_EFORMAT;
        if (q->stop_lens[i] == 0)
            return fail(e, PE_INVALID_FIELD, "stop", "stop[%zu] is empty", i);
    }
    q->n_stops = (int)json_array_size(v);
    return DERAS_OK;
}

static int parse_stop_ids(oai_error *e, const json_t *v, req_params *p)
{
    if (!json_is_array(v))
        return want(e, "stop_token_ids", v, "an array of token ids");
    if (json_array_size(v) > REQ_MAX_STOP_IDS)
        return fail(e, PE_LIMIT_EXCEEDED, "stop_token_ids", "stop_token_ids: at most %d",
                    REQ_MAX_STOP_IDS);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        int64_t id;
        if (get_int(e, "stop_token_ids", x, 0, INT32_MAX, PE_TOKEN_OUT_OF_RANGE, &id))
            return DERAS_EFORMAT;
        p->stop_ids[i] = (int32_t)id;
    }
    p->n_stop_ids = (int)json_array_size(v);
    return DERAS_OK;
}

/* completions' prompt: a string, token ids, or a batch of one of either. */
static int parse_prompt(oai_error *e, const json_t *v, const proto_limits *lim, oai_request *r)
{
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    else if (json_is_array(v) && json_array_size(v) > 1 && !json_is_integer(json_array_get(v, 0)))
        return fail(e, PE_INVALID_FIELD, "prompt",
                    "prompt: a batch of several prompts is not supported; send one per request");
    if (json_is_string(v))
        return get_str(e, "prompt", v, (size_t)lim->max_prompt_bytes, &r->q.prompt,
                       &r->q.prompt_len);
    if (!json_is_array(v))
        return want(e, "prompt", v, "a string or an array of token ids");
    size_t n = json_array_size(v);
    if (n == 0)
        return fail(e, PE_INVALID_FIELD, "prompt", "prompt is an empty array");
    if (n > (size_t)lim->max_prompt_ids)
        return fail(e, PE_LIMIT_EXCEEDED, "prompt", "prompt has %zu token ids, at most %d", n,
                    lim->max_prompt_ids);
    if (!(r->ids = malloc(n * sizeof *r->ids)))
        return fail(e, PE_INTERNAL, "prompt", "out of memory");
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        int64_t id;
        if (get_int(e, "prompt", x, 0, INT32_MAX, PE_TOKEN_OUT_OF_RANGE, &id))
            return DERAS_EFORMAT;
        r->ids[i] = (int32_t)id;
    }
    r->q.prompt_ids = r->ids;
    r->q.n_prompt_ids = (int)n;
    return DERAS_OK;
}

/* One message, checked and copied into the shape the template reads. */
static int parse_message(oai_error *e, size_t i, const json_t *m, json_t *out)
{
    char where[64];
    snprintf(where, sizeof where, "messages[%zu]", i);
    if (!json_is_object(m))
        return want(e, where, m, "an object");
    const json_t *role = json_object_get(m, "role");
    if (!role)
        return fail(e, PE_MISSING_FIELD, where, "%s.role is missing", where);
    const char *rs = json_is_string(role) ? json_string_value(role) : "";
    if (!strcmp(rs, "developer"))
        rs = "system"; /* OpenAI's newer name for the system role */
    if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") &&
        strcmp(rs, "tool"))
        return fail(e, PE_INVALID_FIELD, where,
                    "%s.role must be system, developer, user, assistant or tool", where);
    json_t *msg = json_object();
    if (!msg || json_array_append_new(out, msg) || json_object_set_new(msg, "role", json_string(rs)))
        return fail(e, PE_INTERNAL, where, "out of memory");
    const char *k;
    json_t *v;
    bool has_calls = false;
    json_object_foreach((json_t *)m, k, v) {
        if (!strcmp(k, "role") || json_is_null(v))
            continue;
        char key[96];
        snprintf(key, sizeof key, "%s.%s", where, k);
        if (!strcmp(k, "content")) {
            if (json_is_array(v)) {
                if (json_array_size(v) > OAI_MAX_PARTS)
                    return fail(e, PE_LIMIT_EXCEEDED, key, "%s has more than %d parts", key,
                                OAI_MAX_PARTS);
                size_t j;
                json_t *part;
                json_array_foreach(v, j, part) {
                    const json_t *t = json_object_get(part, "type");
                    const json_t *text = json_object_get(part, "text");
                    if (!json_is_object(part) || !json_is_string(t) ||
                        strcmp(json_string_value(t), "text") || !json_is_string(text) ||
                        json_object_size(part) != 2)
                        return fail(e, PE_INVALID_FIELD, key,
                                    "%s[%zu]: only {\"type\": \"text\", \"text\": string} parts "
                                    "are supported", key, j);
                }
            } else if (!json_is_string(v)) {
                return want(e, key, v, "a string or an array of text parts");
            }
        } else if (!strcmp(k, "name") || !strcmp(k, "tool_call_id")) {
            const char *s;
            size_t n;
            if (get_str(e, key, v, OAI_MAX_NAME, &s, &n))
                return DERAS_EFORMAT;
        } else if (!strcmp(k, "tool_calls")) {
            if (!json_is_array(v) || json_array_size(v) > OAI_MAX_TOOL_CALLS)
                return fail(e, PE_INVALID_FIELD, key, "%s must be an array of at most %d calls",
                            key, OAI_MAX_TOOL_CALLS);
            has_calls = true;
            /* templates read function.arguments as a mapping; OpenAI sends a JSON string */
            json_t *calls = json_deep_copy(v);
            if (!calls || json_object_set_new(msg, k, calls))
                return fail(e, PE_INTERNAL, key, "out of memory");
            size_t j;
            json_t *call;
            json_array_foreach(calls, j, call) {
                json_t *fn = json_object_get(call, "function");
                json_t *args = json_object_get(fn, "arguments");
                if (json_is_string(args)) {
                    json_t *parsed = json_loads(json_string_value(args), JSON_REJECT_DUPLICATES,
                                                NULL);
                    if (json_is_object(parsed))
                        json_object_set(fn, "arguments", parsed);
                    json_decref(parsed);
                }
            }
            continue;
        } else {
            return fail(e, PE_INVALID_FIELD, key, "unknown field %s", key);
        }
        if (json_object_set(msg, k, v))
            return fail(e, PE_INTERNAL, key, "out of memory");
    }
    if (!json_object_get(msg, "content") && !(has_calls && !strcmp(rs, "assistant")))
        return fail(e, PE_MISSING_FIELD, where, "%s.content is missing", where);
    return DERAS_OK;
}

static int parse_messages(oai_error *e, const json_t *v, oai_request *r)
{
    if (!json_is_array(v))
        return want(e, "messages", v, "an array");
    size_t n = json_array_size(v);
    if (n == 0)
        return fail(e, PE_INVALID_FIELD, "messages", "messages is empty");
    if (n > PROTO_MAX_MESSAGES)
        return fail(e, PE_LIMIT_EXCEEDED, "messages", "messages: at most %d", PROTO_MAX_MESSAGES);
    if (!(r->messages = json_array()))
        return fail(e, PE_INTERNAL, "messages", "out of memory");
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m)
        if (parse_message(e, i, m, r->messages))
            return DERAS_EFORMAT;
    r->q.messages = r->messages;
    return DERAS_OK;
}

static int parse_kwargs(oai_error *e, const json_t *v, proto_request *q)
{
    static const char *const reserved[] = {"messages", "tools", "documents",
                                           "add_generation_prompt", "bos_token", "eos_token"};
    if (!json_is_object(v))
        return want(e, "chat_template_kwargs", v, "an object");
    if (json_object_size(v) > PROTO_MAX_TEMPLATE_KWARGS)
        return fail(e, PE_LIMIT_EXCEEDED, "chat_template_kwargs", "at most %d keys",
                    PROTO_MAX_TEMPLATE_KWARGS);
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
        if (json_object_get(v, reserved[i]))
            return fail(e, PE_INVALID_FIELD, "chat_template_kwargs",
                        "chat_template_kwargs may not set %s", reserved[i]);
    q->template_kwargs = (json_t *)v;
    return DERAS_OK;
}

/* Fields both kinds take, then each kind's own. A key not named anywhere is refused. */
static int parse_field(oai_error *e, oai_kind kind, const char *k, const json_t *v,
                       const proto_limits *lim, oai_request *r, int64_t *best_of)
{
    proto_request *q = &r->q;
    req_params *p = &q->params;
    int64_t x;
    bool chat = kind == OAI_CHAT;
    if (!strcmp(k, "model")) {
        const char *s;
        size_t n;
        if (get_str(e, k, v, 256, &s, &n))
            return DERAS_EFORMAT;
        r->model = s;
    } else if (!strcmp(k, "max_tokens") || (chat && !strcmp(k, "max_completion_tokens"))) {
        if (get_int(e, k, v, 1, lim->max_tokens, PE_LIMIT_EXCEEDED, &x))
            return DERAS_EFORMAT;
        if (!strcmp(k, "max_completion_tokens") || !json_object_get(r->root, "max_completion_tokens"))
            p->max_tokens = (int)x;
    } else if (!strcmp(k, "n")) {
        if (get_int(e, k, v, 1, REQ_MAX_N, PE_LIMIT_EXCEEDED, &x))
            return DERAS_EFORMAT;
        p->n = (int)x;
    } else if (!strcmp(k, "stream")) {
        return get_bool(e, k, v, &q->stream);
    } else if (!strcmp(k, "stream_options")) {
        const json_t *u = json_object_get(v, "include_usage");
        if (!json_is_object(v) || json_object_size(v) != (u ? 1u : 0u))
            return fail(e, PE_INVALID_FIELD, k, "stream_options takes only include_usage");
        if (!u) /* {}: include_usage absent, false (found by fuzz_openai) */
            return DERAS_OK;
        return get_bool(e, "stream_options.include_usage", u, &r->include_usage);
    } else if (!strcmp(k, "seed")) {
        if (get_int(e, k, v, 0, INT64_MAX, PE_VALUE_OUT_OF_RANGE, &x))
            return DERAS_EFORMAT;
        p->seed = (uint64_t)x;
        q->has_seed = true;
    } else if (!strcmp(k, "stop")) {
        return parse_stop(e, v, q);
    } else if (!strcmp(k, "stop_token_ids")) {
        return parse_stop_ids(e, v, p);
    } else if (!strcmp(k, "logit_bias")) {
        return parse_logit_bias(e, v, &p->sp.logit_bias);
    } else if (!strcmp(k, "temperature") || !strcmp(k, "top_p") || !strcmp(k, "top_k") ||
               !strcmp(k, "min_p") || !strcmp(k, "repetition_penalty") ||
               !strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty") ||
               !strcmp(k, "min_tokens")) {
        return sampling_field(e, k, v, p);
    } else if (!strcmp(k, "ignore_eos")) {
        return get_bool(e, k, v, &p->ignore_eos);
    } else if (!strcmp(k, "user")) {
        const char *s;
        size_t n;
        return get_str(e, k, v, 256, &s, &n); /* an end-user id for tracing: nothing to do */
    } else if (!chat && !strcmp(k, "prompt")) {
        return parse_prompt(e, v, lim, r);
    } else if (!chat && !strcmp(k, "logprobs")) {
        if (get_int(e, k, v, 0, SAMPLING_MAX_LOGPROBS, PE_LIMIT_EXCEEDED, &x))
            return DERAS_EFORMAT;
        r->logprobs = true;
        r->top_logprobs = (int)x;
    } else if (!chat && !strcmp(k, "add_special_tokens")) {
        return get_bool(e, k, v, &q->add_special_tokens);
    } else if (!chat && !strcmp(k, "best_of")) {
        return get_int(e, k, v, 1, REQ_MAX_N, PE_LIMIT_EXCEEDED, best_of);
    } else if (!chat && !strcmp(k, "echo")) {
        if (!json_is_false(v))
            return fail(e, PE_INVALID_FIELD, k, "echo is not supported (only false)");
    } else if (!chat && !strcmp(k, "suffix")) {
        return fail(e, PE_INVALID_FIELD, k, "suffix is not supported");
    } else if (chat && !strcmp(k, "messages")) {
        return parse_messages(e, v, r);
    } else if (chat && !strcmp(k, "logprobs")) {
        return get_bool(e, k, v, &r->logprobs);
    } else if (chat && !strcmp(k, "top_logprobs")) {
        if (get_int(e, k, v, 0, SAMPLING_MAX_LOGPROBS, PE_LIMIT_EXCEEDED, &x))
            return DERAS_EFORMAT;
        r->top_logprobs = (int)x;
    } else if (chat && !strcmp(k, "tools")) {
        if (!json_is_array(v) || json_array_size(v) > PROTO_MAX_TOOLS)
            return fail(e, PE_INVALID_FIELD, k, "tools must be an array of at most %d objects",
                        PROTO_MAX_TOOLS);
        q->tools = (json_t *)v;
    } else if (chat && !strcmp(k, "tool_choice")) {
        if (!json_is_string(v) || (strcmp(json_string_value(v), "none") &&
                                   strcmp(json_string_value(v), "auto")))
            return fail(e, PE_INVALID_FIELD, k,
                        "tool_choice: only \"none\" and \"auto\" are supported (the reply is "
                        "text; tool calls are not parsed out of it)");
    } else if (chat && !strcmp(k, "parallel_tool_calls")) {
        bool b;
        return get_bool(e, k, v, &b);
    } else if (chat && !strcmp(k, "response_format")) {
        const json_t *t = json_object_get(v, "type");
        if (!json_is_object(v) || json_object_size(v) != 1 || !json_is_string(t) ||
            strcmp(json_string_value(t), "text"))
            return fail(e, PE_INVALID_FIELD, k,
                        "response_format: only {\"type\": \"text\"} is supported");
    } else if (chat && !strcmp(k, "add_generation_prompt")) {
        return get_bool(e, k, v, &q->add_generation_prompt);
    } else if (chat && !strcmp(k, "chat_template_kwargs")) {
        return parse_kwargs(e, v, q);
    } else if (chat && (!strcmp(k, "functions") || !strcmp(k, "function_call"))) {
        return fail(e, PE_INVALID_FIELD, k, "%s is not supported (deprecated by OpenAI; use tools)",
                    k);
    } else {
        return fail(e, PE_INVALID_FIELD, k, "unknown or unsupported field '%.64s'", k);
    }
    return DERAS_OK;
}

int oai_parse(oai_kind kind, const char *body, size_t len, const proto_limits *lim,
              oai_request *out, oai_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    out->model = "";
    proto_request_default(&out->q);
    json_error_t je;
    out->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!out->root)
        return fail(err, PE_MALFORMED, NULL, "the body is not JSON: %s (line %d, column %d)",
                    je.text, je.line, je.column);
    if (!json_is_object(out->root)) {
        int rc = fail(err, PE_MALFORMED, NULL, "the body must be a JSON object");
        oai_request_free(out);
        return rc;
    }
    int64_t best_of = 0;
    const char *k;
    json_t *v;
    json_object_foreach(out->root, k, v) {
        if (json_is_null(v))
            continue;
        if (parse_field(err, kind, k, v, lim, out, &best_of))
            goto fail;
    }
    proto_request *q = &out->q;
    if (kind == OAI_CHAT && !q->messages) {
        fail(err, PE_MISSING_FIELD, "messages", "messages is required");
        goto fail;
    }
    if (kind == OAI_COMPLETIONS && !q->prompt && !q->prompt_ids) {
        fail(err, PE_MISSING_FIELD, "prompt", "prompt is required");
        goto fail;
    }
    if (best_of && best_of != q->params.n) {
        fail(err, PE_INVALID_FIELD, "best_of", "best_of must equal n (%d), got %lld",
             q->params.n, (long long)best_of);
        goto fail;
    }
    if (kind == OAI_CHAT && out->top_logprobs && !out->logprobs) {
        fail(err, PE_INVALID_FIELD, "top_logprobs", "top_logprobs needs logprobs: true");
        goto fail;
    }
    /* the engine reports a token's logprob with its alternatives: at least one */
    if (out->logprobs)
        q->params.sp.n_logprobs = out->top_logprobs > 0 ? out->top_logprobs : 1;
    if (req_params_validate(&q->params, 0)) {
        fail(err, PE_VALUE_OUT_OF_RANGE, NULL, "%s", deras_errmsg());
        goto fail;
    }
    return DERAS_OK;
fail:
    oai_request_free(out);
    return DERAS_EFORMAT;
}

void oai_request_free(oai_request *r)
{
    json_decref(r->root);
    json_decref(r->messages);
    free(r->ids);
    r->root = r->messages = NULL;
    r->ids = NULL;
}

/* ---- output ---- */

void oai_buf_free(oai_buf *b)
{
    free(b->p);
    *b = (oai_buf){0};
}

static bool reserve(oai_buf *b, size_t more)
{
    if (b->n + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void oai_buf_put(oai_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void oai_buf_printf(oai_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n + 1))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

void oai_buf_json_str(oai_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n * 6 + 2))
        return;
    char *o = b->p + b->n;
    *o++ = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            uint32_t cp;
            size_t l = utf8_decode(s + i, n - i, &cp);
            if (l) {
                memcpy(o, s + i, l);
                o += l;
                i += l;
            } else { /* U+FFFD for each invalid sequence */
                memcpy(o, "\xef\xbf\xbd", 3);
                o += 3;
                size_t bad = utf8_incomplete_len(s + i, n - i) ? n - i : utf8_invalid_len(s + i, n - i);
                i += bad ? bad : 1;
            }
            continue;
        }
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else if (c < 0x20 || c == 0x7f) {
            o += sprintf(o, "\\u%04x", c);
        } else {
            *o++ = (char)c;
        }
        i++;
    }
    *o++ = '"';
    b->n = (size_t)(o - b->p);
}

static void put_lit(oai_buf *b, const char *s)
{
    oai_buf_put(b, s, strlen(s));
}

static void put_logprob(oai_buf *b, float lp)
{
    oai_buf_printf(b, "%.9g", isfinite(lp) ? (double)lp : -9999.0);
}

static void put_token(oai_buf *b, const tokenizer_t *tok, int32_t id, bool bytes)
{
    size_t n = 0;
    const char *s = tok ? tokenizer_token_bytes(tok, id, &n) : NULL;
    if (!s)
        n = 0;
    oai_buf_json_str(b, s ? s : "", n);
    if (!bytes)
        return;
    put_lit(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++)
        oai_buf_printf(b, i ? ",%u" : "%u", (unsigned char)s[i]);
    put_lit(b, "]");
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs}]}; completions: {tokens,
 * token_logprobs, top_logprobs, text_offset}. */
static void put_logprobs(oai_buf *b, oai_kind kind, const tokenizer_t *tok, const oai_piece *p)
{
    if (!p->lps) {
        put_lit(b, "null");
        return;
    }
    if (kind == OAI_CHAT) {
        put_lit(b, "{\"content\":[");
        for (int i = 0; i < p->n_lps; i++) {
            const proto_logprob *l = &p->lps[i];
            put_lit(b, i ? ",{\"token\":" : "{\"token\":");
            put_token(b, tok, l->token_id, true);
            put_lit(b, ",\"logprob\":");
            put_logprob(b, l->logprob);
            put_lit(b, ",\"top_logprobs\":[");
            for (int j = 0; j < l->n_top && j < p->top_n; j++) {
                put_lit(b, j ? ",{\"token\":" : "{\"token\":");
                put_token(b, tok, l->top_ids[j], true);
                put_lit(b, ",\"logprob\":");
                put_logprob(b, l->top_logprobs[j]);
                put_lit(b, "}");
            }
            put_lit(b, "]}");
        }
        put_lit(b, "]}");
        return;
    }
    put_lit(b, "{\"tokens\":[");
    for (int i = 0; i < p->n_lps; i++) {
        if (i)
            put_lit(b, ",");
        put_token(b, tok, p->lps[i].token_id, false);
    }
    put_lit(b, "],\"token_logprobs\":[");
    for (int i = 0; i < p->n_lps; i++) {
        if (i)
            put_lit(b, ",");
        put_logprob(b, p->lps[i].logprob);
    }
    put_lit(b, "],\"top_logprobs\":[");
    for (int i = 0; i < p->n_lps; i++) {
        put_lit(b, i ? ",{" : "{");
        for (int j = 0; j < p->lps[i].n_top && j < p->top_n; j++) {
            if (j)
                put_lit(b, ",");
            put_token(b, tok, p->lps[i].top_ids[j], false);
            put_lit(b, ":");
            put_logprob(b, p->lps[i].top_logprobs[j]);
        }
        put_lit(b, "}");
    }
    /* each token's offset in the sample's text, from the bytes of the tokens before it */
    put_lit(b, "],\"text_offset\":[");
    int off = p->text_offset;
    for (int i = 0; i < p->n_lps; i++) {
        oai_buf_printf(b, i ? ",%d" : "%d", off);
        size_t n = 0;
        if (tok && tokenizer_token_bytes(tok, p->lps[i].token_id, &n))
            off += (int)n;
    }
    put_lit(b, "]}");
}

static void put_finish(oai_buf *b, const char *finish)
{
    if (!finish) {
        put_lit(b, "null");
        return;
    }
    oai_buf_json_str(b, finish, strlen(finish));
}

static void put_head(oai_buf *b, const char *object, const char *id, int64_t created,
                     const char *model)
{
    put_lit(b, "{\"id\":");
    oai_buf_json_str(b, id, strlen(id));
    oai_buf_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object,
                   (long long)created);
    oai_buf_json_str(b, model, strlen(model));
}

void oai_put_chunk(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                   const char *model, const tokenizer_t *tok, const oai_piece *p)
{
    put_lit(b, "data: ");
    put_head(b, kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", id, created,
             model);
    oai_buf_printf(b, ",\"choices\":[{\"index\":%d,", p->index);
    if (kind == OAI_CHAT) {
        put_lit(b, "\"delta\":{");
        if (p->role)
            put_lit(b, "\"role\":\"assistant\"");
        if (p->n_text || (p->role && !p->finish)) {
            put_lit(b, p->role ? ",\"content\":" : "\"content\":");
            oai_buf_json_str(b, p->text, p->n_text);
        }
        put_lit(b, "},");
    } else {
        put_lit(b, "\"text\":");
        oai_buf_json_str(b, p->text, p->n_text);
        put_lit(b, ",");
    }
    put_lit(b, "\"logprobs\":");
    put_logprobs(b, kind, tok, p);
    put_lit(b, ",\"finish_reason\":");
    put_finish(b, p->finish);
    put_lit(b, "}]}\n\n");
}

void oai_put_choice(oai_buf *b, oai_kind kind, const tokenizer_t *tok, const oai_piece *p,
                    bool first)
{
    oai_buf_printf(b, "%s{\"index\":%d,", first ? "" : ",", p->index);
    if (kind == OAI_CHAT) {
        put_lit(b, "\"message\":{\"role\":\"assistant\",\"content\":");
        oai_buf_json_str(b, p->text, p->n_text);
        put_lit(b, "},");
    } else {
        put_lit(b, "\"text\":");
        oai_buf_json_str(b, p->text, p->n_text);
        put_lit(b, ",");
    }
    put_lit(b, "\"logprobs\":");
    put_logprobs(b, kind, tok, p);
    put_lit(b, ",\"finish_reason\":");
    put_finish(b, p->finish);
    put_lit(b, "}");
}

static void put_usage(oai_buf *b, int prompt_tokens, int completion_tokens)
{
    oai_buf_printf(b,
                   "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                   prompt_tokens, completion_tokens, prompt_tokens + completion_tokens);
}

void oai_put_response(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                      const char *model, const oai_buf *choices, int prompt_tokens,
                      int completion_tokens)
{
    put_head(b, kind == OAI_CHAT ? "chat.completion" : "text_completion", id, created, model);
    put_lit(b, ",\"choices\":[");
    oai_buf_put(b, choices->p ? choices->p : "", choices->n);
    put_lit(b, "],");
    put_usage(b, prompt_tokens, completion_tokens);
    put_lit(b, "}");
}

void oai_put_usage_chunk(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                         const char *model, int prompt_tokens, int completion_tokens)
{
    put_lit(b, "data: ");
    put_head(b, kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", id, created,
             model);
    put_lit(b, ",\"choices\":[],");
    put_usage(b, prompt_tokens, completion_tokens);
    put_lit(b, "}\n\n");
}

unsigned oai_http_status(enum proto_error_code code)
{
    switch (code) {
    case PE_BUSY: return 429;
    case PE_NO_WORKERS:
    case PE_SHUTTING_DOWN:
    case PE_WORKER_FAILED: return 503;
    case PE_MESSAGE_TOO_LARGE: return 413;
    case PE_INTERNAL: return 500;
    default: return 400;
    }
}

void oai_put_error(oai_buf *b, unsigned http_status, const char *code, const char *param,
                   const char *message)
{
    const char *type = http_status == 401   ? "authentication_error"
                       : http_status == 429 ? "rate_limit_error"
                       : http_status >= 500 ? "server_error"
                                            : "invalid_request_error";
    put_lit(b, "{\"error\":{\"message\":");
    oai_buf_json_str(b, message, strlen(message));
    oai_buf_printf(b, ",\"type\":\"%s\",\"param\":", type);
    if (param && *param)
        oai_buf_json_str(b, param, strlen(param));
    else
        put_lit(b, "null");
    put_lit(b, ",\"code\":");
    oai_buf_json_str(b, code, strlen(code));
    put_lit(b, "}}");
}

const char *oai_finish_name(finish_reason f)
{
    return f == FINISH_STOP ? "stop" : f == FINISH_LENGTH ? "length" : "abort";
}
