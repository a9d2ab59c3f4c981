/* SPDX-License-Identifier: Apache-2.0 */
/* openai_request.c - an OpenAI-compatible request body -> the router's request (see
 * openai_request.h). Parsing walks the body's keys once against the kind's table of known
 * fields; sampling fields are checked against the sampling table (common/request/sampling.h)
 * so both doors refuse the same values with the same words. */
#include "router/openai_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "router/openai_structured.h"

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

/* {"include_usage"?, "continuous_usage_stats"?}: booleans, null or absent is false ({} too:
 * found by fuzz_openai). */
static int parse_stream_options(oai_error *e, const json_t *v, oai_request *r)
{
    if (!json_is_object(v))
        return want(e, "stream_options", v, "an object");
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        bool *to = !strcmp(k, "include_usage")            ? &r->include_usage
                   : !strcmp(k, "continuous_usage_stats") ? &r->continuous_usage
                                                          : NULL;
        if (!to)
            return fail(e, PE_INVALID_FIELD, "stream_options",
                        "stream_options takes only include_usage and continuous_usage_stats");
        char key[64];
        snprintf(key, sizeof key, "stream_options.%s", k);
        if (!json_is_null(x) && get_bool(e, key, x, to))
            return DERAS_EFORMAT;
    }
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
    int rc = oai_structured_field(e, kind, k, v, r);
    if (rc >= 0)
        return rc;
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
        return parse_stream_options(e, v, r);
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
    out->parallel_tool_calls = true;
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
    if (oai_structured_check(err, out))
        goto fail;
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
    free(r->choice_grammar);
    json_decref(r->guided_schema);
    r->choice_grammar = NULL;
    r->guided_schema = NULL;
    r->tool_name = NULL; /* it pointed into root */
    r->root = r->messages = NULL;
    r->ids = NULL;
}
