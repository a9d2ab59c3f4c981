/* SPDX-License-Identifier: Apache-2.0 */
/* protocol.c - the client protocol's decoders: client frames for the router, router
 * replies for the C client (see protocol.h; the encoders are in protocol_enc.c).
 *
 * Decoding runs in three stages. ps_open() refuses frames over the size limit, scans the
 * rest without trusting any declared length (msgpack_scan.c) and unpacks it into the
 * decoder's reusable zone. The header pass then reads "v", "type" and, for the error
 * report, the id, so a later failure can still name the request. Last, one walk over the
 * map matches every key against the message's schema: each field's checker returns the
 * first violation with its code and a message naming the field and the bound.
 *
 * A decoded message owns nothing in the caller's buffer: strings and id arrays are copied
 * into the decoder's storage (sized at the start of each decode from the frame length, so
 * the copies never move), which lets the caller free the ZeroMQ message right away. That
 * storage, like the zone, stays allocated between decodes up to a retain size, so a warm
 * decoder decodes without calling malloc; more than that (a hostile or exceptional frame)
 * is given back at the next decode. Cost: O(frame length) per decode.
 */
#include "protocol.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "msgpack_scan.h"
#include "proto_chat.h"
#include "proto_schema.h"
#include "wire_vocab.h"
#include "common/base/status.h"

void proto_limits_default(proto_limits *l)
{
    l->max_message_bytes = 4u << 20;
    l->max_prompt_bytes = 1 << 20;
    l->max_prompt_ids = 131072;
    l->max_tokens = 32768;
    l->max_deadline_ms = 24ll * 3600 * 1000;
}

/* ---- decoder storage ---- */

#define STORAGE_RETAIN_BYTES (2u << 20)

struct proto_decoder {
    proto_limits lim;
    mp_frame_t *frame;
    char *bytes;                 /* copied strings of the last message */
    size_t bytes_cap, bytes_used;
    int32_t *ids;                /* the one id array of the last message */
    size_t ids_cap, ids_retain;
    proto_worker_status workers[PROTO_MAX_WORKERS];
    json_t *chat[4];             /* the last request's messages, tools, template kwargs and
                                    json_schema */
};

int proto_decoder_new(const proto_limits *lim, proto_decoder_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "proto_decoder_new: NULL out");
    *out = NULL;
    proto_decoder_t *d = calloc(1, sizeof *d);
    if (!d)
        return deras_fail(DERAS_ENOMEM, "proto_decoder_new: out of memory");
    if (lim)
        d->lim = *lim;
    else
        proto_limits_default(&d->lim);
    if (d->lim.max_prompt_ids < 0)
        d->lim.max_prompt_ids = 0;
    d->ids_retain = (size_t)d->lim.max_prompt_ids + 1024;
    /* A full-size id prompt should not make the zone thrash: keep what it needs. */
    if (mp_frame_new(((size_t)d->lim.max_prompt_ids + 1024) * sizeof(msgpack_object) * 2,
                     &d->frame)) {
        free(d);
        return deras_fail(DERAS_ENOMEM, "proto_decoder_new: out of memory");
    }
    *out = d;
    return DERAS_OK;
}

void proto_decoder_destroy(proto_decoder_t **dp)
{
    if (!dp || !*dp)
        return;
    proto_decoder_t *d = *dp;
    mp_frame_destroy(&d->frame);
    for (int i = 0; i < 4; i++)
        json_decref(d->chat[i]);
    free(d->bytes);
    free(d->ids);
    free(d);
    *dp = NULL;
}

/* Copy n bytes (plus a NUL) into the prepared storage; the caller sized it from the frame,
 * which contains every copied string, so this cannot run out. */
static const char *keep(proto_decoder_t *d, const char *p, size_t n)
{
    char *dst = d->bytes + d->bytes_used;
    if (n)
        memcpy(dst, p, n);
    dst[n] = '\0';
    d->bytes_used += n + 1;
    return dst;
}

/* Storage for a frame of len bytes holding at most 32 strings. */
static int prepare(proto_decoder_t *d, size_t len, proto_error *err)
{
    d->bytes_used = 0;
    for (int i = 0; i < 4; i++) {
        json_decref(d->chat[i]);
        d->chat[i] = NULL;
    }
    if (ps_grow((void **)&d->bytes, &d->bytes_cap, len + 64, 1, STORAGE_RETAIN_BYTES) !=
        DERAS_OK) {
        ps_fail(err, PE_INTERNAL, "out of memory decoding a %zu-byte message", len);
        return DERAS_ENOMEM;
    }
    return DERAS_OK;
}

/* An array of 1..max token ids (min 0 allows empty) into the decoder's id storage. */
static int id_array(proto_decoder_t *d, const msgpack_object *o, const char *field, uint32_t min,
                    uint32_t max, const int32_t **ids, int *n, proto_error *err)
{
    const msgpack_object *items;
    uint32_t k;
    int rc = ps_array(o, max, &items, &k, err, "%s", field);
    if (rc != DERAS_OK)
        return rc;
    if (k < min)
        return ps_fail(err, PE_INVALID_FIELD, "%s must have %u..%u ids, got %u", field, min, max,
                       k);
    if (ps_grow((void **)&d->ids, &d->ids_cap, k, sizeof *d->ids, d->ids_retain) != DERAS_OK) {
        ps_fail(err, PE_INTERNAL, "out of memory for %u token ids", k);
        return DERAS_ENOMEM;
    }
    for (uint32_t i = 0; i < k; i++)
        if ((rc = ps_token(&items[i], &d->ids[i], err, "%s[%u]", field, i)) != DERAS_OK)
            return rc;
    *ids = d->ids;
    *n = (int)k;
    return DERAS_OK;
}

/* ---- client -> router ---- */

/* The request's own fields, then one per sampling parameter (common/request/sampling.h). */
enum req_field {
    RF_TYPE, RF_V, RF_ID, RF_PROMPT, RF_PROMPT_IDS, RF_MAX_TOKENS, RF_N, RF_STREAM, RF_SEED,
    RF_STOP, RF_STOP_TOKEN_IDS, RF_IGNORE_EOS, RF_ADD_SPECIAL_TOKENS, RF_DEADLINE_MS,
    RF_NUM_SPECULATIVE_TOKENS, RF_MESSAGES, RF_TOOLS, RF_ADD_GENERATION_PROMPT,
    RF_CHAT_TEMPLATE_KWARGS, RF_JSON_SCHEMA, RF_REGEX, RF_GRAMMAR, RF_JSON_OBJECT, RF_SAMPLING, RF_N_FIELDS = RF_SAMPLING + SAMPLING_N_PARAMS
};
_Static_assert(RF_N_FIELDS <= 64, "request fields fit the decoder's 64-bit masks");

static const char *const req_names[RF_N_FIELDS] = {
    "type", "v", "id", "prompt", "prompt_ids", "max_tokens", "n", "stream", "seed", "stop",
    "stop_token_ids", "ignore_eos", "add_special_tokens", "deadline_ms",
    "num_speculative_tokens", "messages", "tools", "add_generation_prompt",
    "chat_template_kwargs", "json_schema", "regex", "grammar", "json_object",
    SAMPLING_PARAMS(SAMPLING_KEY)
};

static const char *const client_types[] = {"request", "cancel", "ping"};

/* Keys each client message may carry. */
#define BIT(f) (1ull << (f))
static const uint64_t client_allowed[] = {
    ~0ull,                                    /* request: every field */
    BIT(RF_TYPE) | BIT(RF_V) | BIT(RF_ID),    /* cancel */
    BIT(RF_TYPE) | BIT(RF_V),                 /* ping */
};

void proto_request_default(proto_request *r)
{
    memset(r, 0, sizeof *r);
    req_params_init(&r->params);
    r->add_special_tokens = true;
    r->add_generation_prompt = true;
}

static int request_stops(proto_decoder_t *d, const msgpack_object *v, proto_request *r,
                         proto_error *err)
{
    const msgpack_object *items;
    uint32_t k;
    int rc = ps_array(v, PROTO_MAX_STOPS, &items, &k, err, "stop");
    for (uint32_t i = 0; rc == DERAS_OK && i < k; i++) {
        const char *p;
        size_t n;
        if ((rc = ps_str(&items[i], 1, PROTO_MAX_STOP_BYTES, &p, &n, err, "stop[%u]", i)) !=
            DERAS_OK)
            break;
        r->stops[i] = keep(d, p, n);
        r->stop_lens[i] = n;
    }
    if (rc == DERAS_OK)
        r->n_stops = (int)k;
    return rc;
}

static int request_stop_ids(const msgpack_object *v, req_params *p, proto_error *err)
{
    const msgpack_object *items;
    uint32_t k;
    int rc = ps_array(v, REQ_MAX_STOP_IDS, &items, &k, err, "stop_token_ids");
    for (uint32_t i = 0; rc == DERAS_OK && i < k; i++)
        rc = ps_token(&items[i], &p->stop_ids[i], err, "stop_token_ids[%u]", i);
    if (rc == DERAS_OK)
        p->n_stop_ids = (int)k;
    return rc;
}

/* json_schema: a map, a boolean, or JSON text holding an object or a boolean;
 * text that is not JSON is invalid_grammar (the schema's syntax), as the router's compiler
 * names its other faults. */
static int request_schema(proto_decoder_t *d, const msgpack_object *v, proto_request *r,
                          proto_error *err)
{
    if (v->type == MSGPACK_OBJECT_MAP) {
        int rc = proto_chat_map(v, "json_schema", &d->chat[3], err);
        r->json_schema = d->chat[3];
        return rc;
    }
    if (v->type == MSGPACK_OBJECT_BOOLEAN) { /* the schemas true (anything) and false */
        if (!(d->chat[3] = json_boolean(v->via.boolean)))
            return ps_fail(err, PE_INTERNAL, "out of memory");
        r->json_schema = d->chat[3];
        return DERAS_OK;
    }
    const char *p;
    size_t n;
    if (v->type != MSGPACK_OBJECT_STR)
        return ps_fail(err, PE_INVALID_FIELD,
                       "json_schema must be a map, a boolean or JSON text, got %s",
                       ps_type_name(v));
    int rc = ps_str(v, 1, PROTO_MAX_GRAMMAR_BYTES, &p, &n, err, "json_schema");
    if (rc != DERAS_OK)
        return rc;
    json_error_t je;
    d->chat[3] = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!d->chat[3] || !(json_is_object(d->chat[3]) || json_is_boolean(d->chat[3])))
        return ps_fail(err, PE_INVALID_GRAMMAR,
                       "json_schema: not a JSON object or boolean%s%s (line %d, column %d)",
                       d->chat[3] ? "" : ": ", d->chat[3] ? "" : je.text, je.line, je.column);
    r->json_schema = d->chat[3];
    return DERAS_OK;
}

/* One request field. */
static int request_field(proto_decoder_t *d, int f, const msgpack_object *v, proto_request *r,
                         bool *has_prompt, proto_error *err)
{
    const proto_limits *L = &d->lim;
    req_params *q = &r->params;
    int64_t i64;
    const char *p;
    size_t n;
    int rc = DERAS_OK;
    switch ((enum req_field)f) {
    case RF_TYPE:
    case RF_V:
        return DERAS_OK; /* checked by ps_header */
    case RF_ID:
        return ps_cstr(v, 1, PROTO_MAX_ID, r->id, err, "id");
    case RF_PROMPT:
        rc = ps_str(v, 0, (size_t)(L->max_prompt_bytes < 0 ? 0 : L->max_prompt_bytes), &p, &n, err, "prompt");
        if (rc == DERAS_OK) {
            r->prompt = keep(d, p, n);
            r->prompt_len = n;
            *has_prompt = true;
        }
        return rc;
    case RF_PROMPT_IDS:
        return id_array(d, v, "prompt_ids", 1, (uint32_t)L->max_prompt_ids, &r->prompt_ids,
                        &r->n_prompt_ids, err);
    case RF_MAX_TOKENS:
        rc = ps_int(v, 1, L->max_tokens, PE_LIMIT_EXCEEDED, &i64, err, "max_tokens");
        q->max_tokens = (int)i64;
        return rc;
    case RF_N:
        rc = ps_int(v, 1, REQ_MAX_N, PE_LIMIT_EXCEEDED, &i64, err, "n");
        q->n = (int)i64;
        return rc;
    case RF_STREAM:
        return ps_bool(v, &r->stream, err, "stream");
    case RF_SEED:
        rc = ps_u64(v, &q->seed, err, "seed");
        r->has_seed = rc == DERAS_OK;
        return rc;
    case RF_STOP:
        return request_stops(d, v, r, err);
    case RF_STOP_TOKEN_IDS:
        return request_stop_ids(v, q, err);
    case RF_IGNORE_EOS:
        return ps_bool(v, &q->ignore_eos, err, "ignore_eos");
    case RF_ADD_SPECIAL_TOKENS:
        return ps_bool(v, &r->add_special_tokens, err, "add_special_tokens");
    case RF_DEADLINE_MS:
        return ps_int(v, 1, L->max_deadline_ms, PE_LIMIT_EXCEEDED, &r->deadline_ms, err, "deadline_ms");
    case RF_NUM_SPECULATIVE_TOKENS:
        rc = ps_int(v, 0, REQ_MAX_SPEC_TOKENS, PE_VALUE_OUT_OF_RANGE, &i64, err,
                    "num_speculative_tokens");
        q->spec_tokens = i64 == 0 ? -1 : (int)i64;
        return rc;
    case RF_MESSAGES:
        if ((rc = proto_chat_messages(v, &d->chat[0], err)) == DERAS_OK)
            r->messages = d->chat[0];
        return rc;
    case RF_TOOLS:
        if ((rc = proto_chat_tools(v, &d->chat[1], err)) == DERAS_OK)
            r->tools = d->chat[1];
        return rc;
    case RF_ADD_GENERATION_PROMPT:
        return ps_bool(v, &r->add_generation_prompt, err, "add_generation_prompt");
    case RF_CHAT_TEMPLATE_KWARGS:
        if ((rc = proto_chat_kwargs(v, &d->chat[2], err)) == DERAS_OK)
            r->template_kwargs = d->chat[2];
        return rc;
    case RF_JSON_SCHEMA:
        return request_schema(d, v, r, err);
    case RF_REGEX:
    case RF_GRAMMAR:
        rc = ps_str(v, 1, PROTO_MAX_GRAMMAR_BYTES, &p, &n, err, "%s", req_names[f]);
        if (rc == DERAS_OK && f == RF_REGEX) {
            r->regex = keep(d, p, n);
            r->regex_len = n;
        } else if (rc == DERAS_OK) {
            r->grammar = keep(d, p, n);
            r->grammar_len = n;
        }
        return rc;
    case RF_JSON_OBJECT:
        return ps_bool(v, &r->json_object, err, "json_object");
    case RF_SAMPLING:
    case RF_N_FIELDS:
        break;
    }
    if (f >= RF_SAMPLING && f < RF_N_FIELDS)
        return wv_decode_sampling(f - RF_SAMPLING, v, &q->sp, err);
    return ps_fail(err, PE_INTERNAL, "request field %d has no checker", f);
}

/* The id of a request or cancel, for the error report, when it is a valid id. */
static void capture_id(const msgpack_object_kv *kv, uint32_t n, proto_error *err)
{
    const msgpack_object *id = ps_find(kv, n, "id");
    proto_error scratch = {0};
    char tmp[PROTO_MAX_ID + 1];
    if (id && ps_cstr(id, 1, PROTO_MAX_ID, tmp, &scratch, "id") == DERAS_OK)
        memcpy(err->id, tmp, sizeof tmp);
    deras_errclear();
}

int proto_decode_client(proto_decoder_t *d, const void *buf, size_t len, proto_client_msg *out,
                        proto_error *err)
{
    proto_error scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    if (!d || (!buf && len) || !out) {
        ps_fail(err, PE_INTERNAL, "proto_decode_client: bad arguments");
        return DERAS_EINVAL;
    }
    mp_scan_limits lim = {.max_depth = PROTO_MAX_DEPTH,
                          .max_items = (size_t)d->lim.max_prompt_ids + 4 * RF_N_FIELDS +
                                       PROTO_MAX_STOPS + REQ_MAX_STOP_IDS + 16 +
                                       wv_sampling_max_items()};
    const msgpack_object_kv *kv;
    uint32_t n;
    int type, rc;
    if ((rc = ps_open(d->frame, buf, len, d->lim.max_message_bytes, &lim, &kv, &n, err)) !=
        DERAS_OK)
        goto done;
    capture_id(kv, n, err);
    if ((rc = ps_header(kv, n, PROTO_VERSION, client_types, 3, &type, err)) != DERAS_OK)
        goto done;
    if ((rc = prepare(d, len, err)) != DERAS_OK)
        goto done;
    memset(out, 0, sizeof *out);
    out->type = (enum proto_client_type)(type + 1);
    proto_request *r = &out->req;
    proto_request_default(r);
    uint64_t seen = 0;
    bool has_prompt = false;
    for (uint32_t i = 0; i < n; i++) {
        int f = ps_lookup(&kv[i].key, req_names, RF_N_FIELDS);
        if (f < 0 || !(client_allowed[type] & BIT(f))) {
            rc = ps_unknown_key(&kv[i].key, client_types[type], err);
            goto done;
        }
        if ((rc = ps_seen(&seen, f, req_names[f], err)) != DERAS_OK ||
            (rc = request_field(d, f, &kv[i].val, r, &has_prompt, err)) != DERAS_OK)
            goto done;
    }
    if (type != 2 && !(seen & BIT(RF_ID))) {
        rc = ps_fail(err, PE_MISSING_FIELD, "id is required");
        goto done;
    }
    if (type == 1) {
        memcpy(out->cancel_id, r->id, sizeof out->cancel_id);
        proto_request_default(r);
    } else if (type == 0) {
        bool has_ids = seen & BIT(RF_PROMPT_IDS), has_chat = seen & BIT(RF_MESSAGES);
        const uint64_t chat_only = BIT(RF_TOOLS) | BIT(RF_ADD_GENERATION_PROMPT) |
                                   BIT(RF_CHAT_TEMPLATE_KWARGS);
        if (has_prompt + has_ids + has_chat > 1)
            rc = ps_fail(err, PE_INVALID_FIELD,
                         "give exactly one of prompt, prompt_ids and messages, got %s",
                         has_chat ? (has_prompt ? "prompt and messages" : "prompt_ids and messages")
                                  : "prompt and prompt_ids");
        else if (!has_prompt && !has_ids && !has_chat)
            rc = ps_fail(err, PE_MISSING_FIELD, "prompt, prompt_ids or messages is required");
        else if (!has_chat && (seen & chat_only))
            rc = ps_fail(err, PE_INVALID_FIELD,
                         "tools, add_generation_prompt and chat_template_kwargs need messages");
        else if (has_chat && (seen & BIT(RF_ADD_SPECIAL_TOKENS)))
            rc = ps_fail(err, PE_INVALID_FIELD,
                         "add_special_tokens applies to prompt; a chat's special tokens are "
                         "the template's");
        else if (!!r->json_schema + !!r->regex + !!r->grammar + r->json_object > 1)
            rc = ps_fail(err, PE_INVALID_FIELD,
                         "give at most one of json_schema, regex, grammar and json_object");
        else if (req_params_validate(&r->params, 0) != DERAS_OK) /* the rules across fields */
            rc = ps_fail(err, PE_VALUE_OUT_OF_RANGE, "%s", deras_errmsg());
    } else {
        proto_request_default(r);
    }
done:
    return ps_close(d->frame, rc);
}

/* ---- router -> client (decoding, for the C client) ---- */

enum srv_field {
    SF_TYPE, SF_V, SF_ID, SF_INDEX, SF_TOKEN_IDS, SF_TEXT, SF_LOGPROBS, SF_FINISH_REASON,
    SF_ABORT_REASON, SF_USAGE, SF_CODE, SF_MESSAGE, SF_WORKERS, SF_N_FIELDS
};

static const char *const srv_names[SF_N_FIELDS] = {
    "type", "v", "id", "index", "token_ids", "text", "logprobs", "finish_reason",
    "abort_reason", "usage", "code", "message", "workers",
};

static const char *const server_types[] = {"chunk", "final", "error", "pong"};

static const uint64_t server_allowed[] = {
    BIT(SF_TYPE) | BIT(SF_V) | BIT(SF_ID) | BIT(SF_INDEX) | BIT(SF_TOKEN_IDS) | BIT(SF_TEXT) |
        BIT(SF_LOGPROBS),
    BIT(SF_TYPE) | BIT(SF_V) | BIT(SF_ID) | BIT(SF_INDEX) | BIT(SF_TOKEN_IDS) | BIT(SF_TEXT) |
        BIT(SF_LOGPROBS) | BIT(SF_FINISH_REASON) | BIT(SF_ABORT_REASON) | BIT(SF_USAGE),
    BIT(SF_TYPE) | BIT(SF_V) | BIT(SF_ID) | BIT(SF_CODE) | BIT(SF_MESSAGE),
    BIT(SF_TYPE) | BIT(SF_V) | BIT(SF_WORKERS),
};

static const uint64_t server_required[] = {
    BIT(SF_TYPE) | BIT(SF_ID) | BIT(SF_INDEX) | BIT(SF_TOKEN_IDS) | BIT(SF_TEXT),
    BIT(SF_TYPE) | BIT(SF_ID) | BIT(SF_INDEX) | BIT(SF_FINISH_REASON) | BIT(SF_USAGE),
    BIT(SF_TYPE) | BIT(SF_ID) | BIT(SF_CODE) | BIT(SF_MESSAGE),
    BIT(SF_TYPE) | BIT(SF_WORKERS),
};

static const char *const usage_names[] = {"prompt_tokens", "completion_tokens", "queue_ms",
                                          "ttft_ms", "total_ms",
                                          SPEC_COUNTERS(SPEC_COUNTER_KEY)};
#define N_USAGE_REQUIRED 5 /* the speculation counters that follow are optional */
#define N_USAGE (N_USAGE_REQUIRED + SPEC_N_COUNTERS)

static int decode_usage(const msgpack_object *o, proto_usage *u, proto_error *err)
{
    const msgpack_object_kv *kv;
    uint32_t n;
    uint64_t seen = 0;
    int rc = ps_map(o, &kv, &n, err, "usage");
    for (uint32_t i = 0; rc == DERAS_OK && i < n; i++) {
        int f = ps_lookup(&kv[i].key, usage_names, N_USAGE);
        if (f < 0)
            return ps_unknown_key(&kv[i].key, "usage", err);
        if ((rc = ps_seen(&seen, f, usage_names[f], err)) != DERAS_OK)
            return rc;
        int64_t v = 0;
        const msgpack_object *val = &kv[i].val;
        const char *name = usage_names[f];
        switch (f) {
        case 0:
        case 1:
            rc = ps_int(val, 0, INT32_MAX, PE_VALUE_OUT_OF_RANGE, &v, err, "usage.%s", name);
            *(f == 0 ? &u->prompt_tokens : &u->completion_tokens) = (int)v;
            break;
        case 2: rc = ps_double(val, 0, 1e300, &u->queue_ms, err, "usage.%s", name); break;
        case 3: rc = ps_double(val, 0, 1e300, &u->ttft_ms, err, "usage.%s", name); break;
        case 4: rc = ps_double(val, 0, 1e300, &u->total_ms, err, "usage.%s", name); break;
        default: rc = wv_decode_spec(f - N_USAGE_REQUIRED, val, &u->spec, err, "usage", -1);
        }
    }
    uint64_t required = BIT(N_USAGE_REQUIRED) - 1;
    if (rc == DERAS_OK && (seen & required) != required)
        for (int f = 0; f < N_USAGE_REQUIRED; f++)
            if (!(seen & BIT(f)))
                return ps_fail(err, PE_MISSING_FIELD, "usage.%s is required", usage_names[f]);
    return rc == DERAS_OK ? wv_check_spec(&u->spec, err, "usage", -1) : rc;
}

static const char *const worker_names[] = {"name", "state", "running", "waiting",
                                           "kv_blocks_free", "kv_blocks_total", "served"};

static int decode_worker(const msgpack_object *o, uint32_t k, proto_worker_status *w,
                         proto_error *err)
{
    const msgpack_object_kv *kv;
    uint32_t n;
    uint64_t seen = 0;
    char where[24];
    snprintf(where, sizeof where, "workers[%u]", k);
    int rc = ps_map(o, &kv, &n, err, "%s", where);
    for (uint32_t i = 0; rc == DERAS_OK && i < n; i++) {
        int f = ps_lookup(&kv[i].key, worker_names, 7);
        if (f < 0)
            return ps_unknown_key(&kv[i].key, where, err);
        if ((rc = ps_seen(&seen, f, worker_names[f], err)) != DERAS_OK)
            return rc;
        int64_t v = 0;
        const msgpack_object *val = &kv[i].val;
        const char *name = worker_names[f];
        switch (f) {
        case 0: rc = ps_cstr(val, 1, sizeof w->name - 1, w->name, err, "%s.%s", where, name); break;
        case 1: rc = ps_cstr(val, 1, sizeof w->state - 1, w->state, err, "%s.%s", where, name); break;
        case 6: rc = ps_u64(val, &w->served, err, "%s.%s", where, name); break;
        default:
            rc = ps_int(val, 0, INT32_MAX, PE_VALUE_OUT_OF_RANGE, &v, err, "%s.%s", where, name);
            *(f == 2   ? &w->running
              : f == 3 ? &w->waiting
              : f == 4 ? &w->kv_blocks_free
                       : &w->kv_blocks_total) = (int)v;
            break;
        }
    }
    if (rc == DERAS_OK && seen != 0x7f)
        for (int f = 0; f < 7; f++)
            if (!(seen & BIT(f)))
                return ps_fail(err, PE_MISSING_FIELD, "%s.%s is required", where,
                               worker_names[f]);
    return rc;
}

static int server_field(proto_decoder_t *d, int f, const msgpack_object *v, proto_server_msg *m,
                        proto_error *err)
{
    int64_t i64;
    const char *p;
    size_t n;
    int rc = DERAS_OK;
    char buf[32];
    switch ((enum srv_field)f) {
    case SF_TYPE:
    case SF_V:
        return DERAS_OK;
    case SF_ID:
        return ps_cstr(v, m->type == PROTO_ERROR ? 0 : 1, PROTO_MAX_ID, m->id, err, "id");
    case SF_INDEX:
        rc = ps_int(v, 0, REQ_MAX_N - 1, PE_VALUE_OUT_OF_RANGE, &i64, err, "index");
        m->index = (int)i64;
        return rc;
    case SF_TOKEN_IDS:
        return id_array(d, v, "token_ids", 0, UINT32_MAX, &m->token_ids, &m->n_token_ids, err);
    case SF_TEXT:
        if ((rc = ps_str(v, 0, SIZE_MAX, &p, &n, err, "text")) == DERAS_OK) {
            m->text = keep(d, p, n);
            m->text_len = n;
        }
        return rc;
    case SF_LOGPROBS: {
        const msgpack_object *items;
        uint32_t k;
        return ps_array(v, UINT32_MAX, &items, &k, err, "logprobs"); /* skipped */
    }
    case SF_FINISH_REASON:
        if ((rc = ps_cstr(v, 1, sizeof buf - 1, buf, err, "finish_reason")) == DERAS_OK &&
            !finish_reason_parse(buf, &m->finish))
            rc = ps_fail(err, PE_INVALID_FIELD, "finish_reason '%s' is not a finish reason", buf);
        return rc;
    case SF_ABORT_REASON:
        if ((rc = ps_cstr(v, 1, sizeof buf - 1, buf, err, "abort_reason")) == DERAS_OK)
            m->abort_reason = keep(d, buf, strlen(buf));
        return rc;
    case SF_USAGE:
        return decode_usage(v, &m->usage, err);
    case SF_CODE:
        if (v->type != MSGPACK_OBJECT_STR)
            return ps_fail(err, PE_INVALID_FIELD, "code must be a string, got %s",
                           ps_type_name(v));
        m->code = ps_error_code(v);
        return DERAS_OK;
    case SF_MESSAGE:
        if ((rc = ps_str(v, 0, SIZE_MAX, &p, &n, err, "message")) == DERAS_OK)
            m->message = keep(d, p, n);
        return rc;
    case SF_WORKERS: {
        const msgpack_object *items;
        uint32_t k;
        if ((rc = ps_array(v, PROTO_MAX_WORKERS, &items, &k, err, "workers")) != DERAS_OK)
            return rc;
        for (uint32_t i = 0; i < k; i++) {
            memset(&d->workers[i], 0, sizeof d->workers[i]);
            if ((rc = decode_worker(&items[i], i, &d->workers[i], err)) != DERAS_OK)
                return rc;
        }
        m->workers = d->workers;
        m->n_workers = (int)k;
        return DERAS_OK;
    }
    case SF_N_FIELDS:
        break;
    }
    return ps_fail(err, PE_INTERNAL, "reply field %d has no checker", f);
}

int proto_decode_server(proto_decoder_t *d, const void *buf, size_t len, proto_server_msg *out,
                        proto_error *err)
{
    proto_error scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    if (!d || (!buf && len) || !out) {
        ps_fail(err, PE_INTERNAL, "proto_decode_server: bad arguments");
        return DERAS_EINVAL;
    }
    /* Replies can be large (a non-streaming final with logprobs), so only the inherent
     * bound applies: at most one object per byte. */
    mp_scan_limits lim = {.max_depth = 6, .max_items = len};
    const msgpack_object_kv *kv;
    uint32_t n;
    int type, rc;
    if ((rc = ps_open(d->frame, buf, len, SIZE_MAX, &lim, &kv, &n, err)) != DERAS_OK)
        goto done;
    capture_id(kv, n, err);
    if ((rc = ps_header(kv, n, PROTO_VERSION, server_types, 4, &type, err)) != DERAS_OK ||
        (rc = prepare(d, len, err)) != DERAS_OK)
        goto done;
    memset(out, 0, sizeof *out);
    out->type = (enum proto_server_type)(type + 1);
    uint64_t seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        int f = ps_lookup(&kv[i].key, srv_names, SF_N_FIELDS);
        if (f < 0 || !(server_allowed[type] & BIT(f))) {
            rc = ps_unknown_key(&kv[i].key, server_types[type], err);
            goto done;
        }
        if ((rc = ps_seen(&seen, f, srv_names[f], err)) != DERAS_OK ||
            (rc = server_field(d, f, &kv[i].val, out, err)) != DERAS_OK)
            goto done;
    }
    rc = ps_required(server_required[type], seen, srv_names, SF_N_FIELDS, server_types[type],
                     err);
done:
    return ps_close(d->frame, rc);
}
