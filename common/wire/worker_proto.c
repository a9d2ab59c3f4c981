/* SPDX-License-Identifier: Apache-2.0 */
/* worker_proto.c - the router <-> worker protocol's decoder (see worker_proto.h; the
 * encoders and the STEP builder are in worker_proto_enc.c).
 *
 * Same decoding pipeline as protocol.c (size cap, bounded scan, sized unpack, header,
 * one schema walk), with one schema table for every message: a mask per type says which
 * keys it may carry and which it must. Both ends are deras, so every field is required
 * (version skew shows up as missing_field at once, not as a silent default); "v" is
 * required in HELLO and WELCOME and checked wherever it appears.
 *
 * Wire shapes chosen for the per-step path:
 *   SUBMIT prompt_ids  bin of little-endian int32 (4 bytes per id, one memcpy each way;
 *                      an array of ints would cost 1-5 bytes and a branch per id)
 *   STEP tokens        [[rid, index, token_id], ...] or, with logprobs,
 *                      [rid, index, token_id, logprob, [[id, logprob], ...]]
 *   STEP finishes      [[rid, index, reason, n_prompt, n_generated(, the speculation
 *                       counters of common/request/spec_counters.h)], ...]
 * Positional arrays keep a STEP of a 256-sequence batch at a few KB; a token without
 * logprobs (logprob 0 and no alternatives) takes the 3-element form.
 *
 * Memory: the decoder keeps growable arrays for prompt ids, tokens and finishes that grow
 * to the largest message seen (up to a retain size), so after warm-up it allocates nothing
 * per step. Caps bound what a hostile worker can make the router hold: 2^20 objects per
 * frame (24 MiB of msgpack-c zone) and WPROTO_MAX_STEP_ENTRIES tokens and as many
 * finishes per STEP (12 MiB of wp_token). Cost: O(frame length) per decode.
 */
#include "worker_proto.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "msgpack_scan.h"
#include "proto_schema.h"
#include "wire_vocab.h"
#include "common/base/status.h"

#define WP_DEFAULT_MAX_BYTES (16u << 20)
#define WP_MAX_ITEMS (1u << 20)     /* objects per frame: 24 MiB of msgpack-c zone at most */
#define WP_ZONE_RETAIN (4u << 20)
#define WP_RETAIN_IDS (1u << 18)    /* prompt ids kept between decodes */
#define WP_RETAIN_ENTRIES (1u << 14) /* tokens / finishes kept between decodes */

/* The link's own fields, then one per sampling parameter (common/request/sampling.h). */
enum wp_field {
    WF_TYPE, WF_V, WF_NAME, WF_DEVICE, WF_MODEL, WF_VOCAB_SIZE, WF_MAX_MODEL_LEN, WF_TP_SIZE,
    WF_KV_BLOCKS_TOTAL, WF_BLOCK_SIZE, WF_MAX_SEQS, WF_PID, WF_HEARTBEAT_MS, WF_REASON,
    WF_LOAD, WF_RID, WF_PROMPT_IDS, WF_MAX_TOKENS, WF_N, WF_SEED, WF_STOP_TOKEN_IDS,
    WF_IGNORE_EOS, WF_TOKENS, WF_FINISHES, WF_CODE, WF_MESSAGE, WF_SPEC_TOKENS, WF_SPEC,
    WF_GRAMMAR, WF_SAMPLING, WF_N_FIELDS = WF_SAMPLING + SAMPLING_N_PARAMS
};
_Static_assert(WF_N_FIELDS <= 64, "worker fields fit the decoder's 64-bit masks");

static const char *const wf_names[WF_N_FIELDS] = {
    "type", "v", "name", "device", "model", "vocab_size", "max_model_len", "tp_size",
    "kv_blocks_total", "block_size", "max_seqs", "pid", "heartbeat_ms", "reason", "load",
    "rid", "prompt_ids", "max_tokens", "n", "seed", "stop_token_ids", "ignore_eos", "tokens",
    "finishes", "code", "message", "spec_tokens", "spec", "grammar", SAMPLING_PARAMS(SAMPLING_KEY)
};

/* Indexed by enum wproto_type - 1. */
static const char *const wp_types[] = {"hello", "welcome", "refuse", "heartbeat", "submit",
                                       "abort", "step", "reject", "drain", "shutdown", "bye"};
#define N_TYPES 11

#define BIT(f) (1ull << (f))
#define RANGE(a, b) ((BIT((b) + 1) - 1) & ~(BIT(a) - 1)) /* fields a..b */

/* The sampling parameters SUBMIT must carry, and those it may omit (worker_optional in the
 * table: added after version 1's first release). */
#define SAMPLING_BIT(field, kind, key, flag, arg, def, lo, lo_open, hi, hi_open, cap, wopt,  \
                     doc, optional)                                                          \
    | ((wopt) == (optional) ? BIT(WF_SAMPLING + SAMPLING_I_##field) : 0)
#define SAMPLING_REQUIRED(...) SAMPLING_BIT(__VA_ARGS__, 0)
#define SAMPLING_OPTIONAL(...) SAMPLING_BIT(__VA_ARGS__, 1)
#define SUBMIT_SAMPLING_REQUIRED (0 SAMPLING_PARAMS(SAMPLING_REQUIRED))
#define SUBMIT_SAMPLING_OPTIONAL (0 SAMPLING_PARAMS(SAMPLING_OPTIONAL))

/* Keys a type may carry beyond its required ones and "v": added after version 1's
 * first release, so a peer that omits them still speaks the protocol. */
static const uint64_t wp_optional[N_TYPES] = {
    [WP_HELLO - 1] = BIT(WF_SPEC),
    [WP_SUBMIT - 1] = BIT(WF_SPEC_TOKENS) | BIT(WF_GRAMMAR) | SUBMIT_SAMPLING_OPTIONAL,
};

/* Required keys per type; the allowed keys are these plus "v" and the optional ones. */
static const uint64_t wp_required[N_TYPES] = {
    BIT(WF_TYPE) | BIT(WF_V) | RANGE(WF_NAME, WF_PID),                      /* hello */
    BIT(WF_TYPE) | BIT(WF_V) | BIT(WF_HEARTBEAT_MS),                        /* welcome */
    BIT(WF_TYPE) | BIT(WF_REASON),                                          /* refuse */
    BIT(WF_TYPE) | BIT(WF_LOAD),                                            /* heartbeat */
    BIT(WF_TYPE) | RANGE(WF_RID, WF_IGNORE_EOS) | SUBMIT_SAMPLING_REQUIRED, /* submit */
    BIT(WF_TYPE) | BIT(WF_RID),                                             /* abort */
    BIT(WF_TYPE) | BIT(WF_TOKENS) | BIT(WF_FINISHES) | BIT(WF_LOAD),        /* step */
    BIT(WF_TYPE) | BIT(WF_RID) | BIT(WF_CODE) | BIT(WF_MESSAGE),            /* reject */
    BIT(WF_TYPE),                                                           /* drain */
    BIT(WF_TYPE),                                                           /* shutdown */
    BIT(WF_TYPE) | BIT(WF_REASON),                                          /* bye */
};

static const char *const load_names[] = {
    "phase", "running", "waiting", "queued_tokens", "running_tokens", "kv_blocks_free",
    "kv_blocks_total", "tokens_per_s", "steps", "preemptions", "prefix_hit_tokens",
    "prefix_query_tokens", "prompt_tokens", "generated_tokens",
    SPEC_COUNTERS(SPEC_COUNTER_KEY)
};
#define N_LOAD_REQUIRED WPROTO_LOAD_FIELDS /* the speculation counters that follow are
                                              optional (added later) */
#define N_LOAD (N_LOAD_REQUIRED + SPEC_N_COUNTERS)

/* ---- decoder ---- */

struct wp_decoder {
    size_t max_bytes;
    mp_frame_t *frame;
    int32_t *ids;
    size_t ids_cap;
    wp_token *tokens;
    size_t tokens_cap;
    wp_finish *finishes;
    size_t finishes_cap;
    char *grammar;          /* a SUBMIT's grammar text, copied */
    size_t grammar_cap;
};

int wp_decoder_new(size_t max_message_bytes, wp_decoder_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "wp_decoder_new: NULL out");
    *out = NULL;
    wp_decoder_t *d = calloc(1, sizeof *d);
    if (!d || mp_frame_new(WP_ZONE_RETAIN, &d->frame)) {
        free(d);
        return deras_fail(DERAS_ENOMEM, "wp_decoder_new: out of memory");
    }
    d->max_bytes = max_message_bytes ? max_message_bytes : WP_DEFAULT_MAX_BYTES;
    *out = d;
    return DERAS_OK;
}

void wp_decoder_destroy(wp_decoder_t **dp)
{
    if (!dp || !*dp)
        return;
    wp_decoder_t *d = *dp;
    mp_frame_destroy(&d->frame);
    free(d->ids);
    free(d->tokens);
    free(d->finishes);
    free(d->grammar);
    free(d);
    *dp = NULL;
}

static int nomem(proto_error *err, const char *what, size_t n)
{
    ps_fail(err, PE_INTERNAL, "out of memory for %zu %s", n, what);
    return DERAS_ENOMEM;
}


static const char *const phase_names[] = {"starting", "ready", "draining"};

const char *wp_phase_name(enum wp_phase p)
{
    return p >= WP_PHASE_STARTING && p <= WP_PHASE_DRAINING ? phase_names[p] : "?";
}

static int decode_phase(const msgpack_object *v, enum wp_phase *out, proto_error *err)
{
    if (v->type != MSGPACK_OBJECT_STR)
        return ps_fail(err, PE_INVALID_FIELD, "load.phase must be a string, got %s",
                       ps_type_name(v));
    int p = ps_lookup(v, phase_names, 3);
    if (p < 0)
        return ps_fail(err, PE_INVALID_FIELD,
                       "load.phase must be \"starting\", \"ready\" or \"draining\"");
    *out = (enum wp_phase)p;
    return DERAS_OK;
}

static int decode_load(const msgpack_object *o, const char *where, wp_load *l, proto_error *err)
{
    const msgpack_object_kv *kv;
    uint32_t n;
    uint64_t seen = 0;
    int rc = ps_map(o, &kv, &n, err, "%s.load", where);
    for (uint32_t i = 0; rc == DERAS_OK && i < n; i++) {
        int f = ps_lookup(&kv[i].key, load_names, N_LOAD);
        if (f < 0)
            return ps_unknown_key(&kv[i].key, "load", err);
        if ((rc = ps_seen(&seen, f, load_names[f], err)) != DERAS_OK)
            return rc;
        const msgpack_object *v = &kv[i].val;
        const char *name = load_names[f];
        int64_t i64 = 0;
        switch (f) {
        case 0:
            rc = decode_phase(v, &l->phase, err);
            break;
        case 1: case 2: case 5: case 6: {
            rc = ps_int(v, 0, INT32_MAX, PE_VALUE_OUT_OF_RANGE, &i64, err, "load.%s", name);
            int *dst[] = {NULL, &l->running, &l->waiting, NULL, NULL, &l->kv_blocks_free,
                          &l->kv_blocks_total};
            *dst[f] = (int)i64;
            break;
        }
        case 3: case 4:
            rc = ps_int(v, 0, INT64_MAX, PE_VALUE_OUT_OF_RANGE, &i64, err, "load.%s", name);
            *(f == 3 ? &l->queued_tokens : &l->running_tokens) = i64;
            break;
        case 7:
            rc = ps_double(v, 0, 1e300, &l->tokens_per_s, err, "load.%s", name);
            break;
        default: {
            uint64_t *dst[] = {&l->steps, &l->preemptions, &l->prefix_hit_tokens,
                               &l->prefix_query_tokens, &l->prompt_tokens,
                               &l->generated_tokens};
            rc = f < N_LOAD_REQUIRED ? ps_u64(v, dst[f - 8], err, "load.%s", name)
                                     : wv_decode_spec(f - N_LOAD_REQUIRED, v, &l->spec, err,
                                                      "load", -1);
            break;
        }
        }
    }
    if (rc == DERAS_OK && (seen & (BIT(N_LOAD_REQUIRED) - 1)) != BIT(N_LOAD_REQUIRED) - 1)
        for (int f = 0; f < N_LOAD_REQUIRED; f++)
            if (!(seen & BIT(f)))
                return ps_fail(err, PE_MISSING_FIELD, "load.%s is required", load_names[f]);
    return rc;
}

/* SUBMIT prompt_ids: a bin of little-endian int32, 1 or more ids, each >= 0. */
static int decode_prompt_bin(wp_decoder_t *d, const msgpack_object *o, wp_submit *s,
                             proto_error *err)
{
    if (o->type != MSGPACK_OBJECT_BIN)
        return ps_fail(err, PE_INVALID_FIELD,
                       "prompt_ids must be a bin of little-endian int32, got %s",
                       ps_type_name(o));
    size_t size = o->via.bin.size;
    if (size == 0 || size % 4)
        return ps_fail(err, PE_INVALID_FIELD,
                       "prompt_ids must hold 1 or more 4-byte ids, got %zu bytes", size);
    size_t n = size / 4;
    if (n > INT32_MAX)
        return ps_fail(err, PE_LIMIT_EXCEEDED, "prompt_ids holds %zu ids", n);
    if (ps_grow((void **)&d->ids, &d->ids_cap, n, sizeof *d->ids, WP_RETAIN_IDS) != DERAS_OK)
        return nomem(err, "prompt ids", n);
    const uint8_t *b = (const uint8_t *)o->via.bin.ptr;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(d->ids, b, size);
#else
    for (size_t i = 0; i < n; i++)
        d->ids[i] = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                              (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24);
#endif
    for (size_t i = 0; i < n; i++)
        if (d->ids[i] < 0)
            return ps_fail(err, PE_TOKEN_OUT_OF_RANGE,
                           "prompt_ids[%zu] must be in [0, 2147483647], got %d", i, d->ids[i]);
    s->prompt_ids = d->ids;
    s->n_prompt = (int)n;
    return DERAS_OK;
}

static int decode_stop_ids(const msgpack_object *o, req_params *p, proto_error *err)
{
    const msgpack_object *items;
    uint32_t k;
    int rc = ps_array(o, REQ_MAX_STOP_IDS, &items, &k, err, "stop_token_ids");
    for (uint32_t i = 0; rc == DERAS_OK && i < k; i++)
        rc = ps_token(&items[i], &p->stop_ids[i], err, "stop_token_ids[%u]", i);
    p->n_stop_ids = rc == DERAS_OK ? (int)k : 0;
    return rc;
}

/* One STEP token: [rid, index, token_id] or [rid, index, token_id, logprob, [[id, lp]...]]. */
static int decode_token(const msgpack_object *o, uint32_t i, wp_token *t, proto_error *err)
{
    const msgpack_object *a, *top;
    uint32_t n, n_top;
    int64_t index;
    int rc = ps_array(o, 5, &a, &n, err, "tokens[%u]", i);
    if (rc != DERAS_OK)
        return rc;
    if (n != 3 && n != 5)
        return ps_fail(err, PE_INVALID_FIELD,
                       "tokens[%u] must be [rid, index, token_id(, logprob, top)], got %u "
                       "elements", i, n);
    if ((rc = ps_u64(&a[0], &t->rid, err, "tokens[%u].rid", i)) != DERAS_OK ||
        (rc = ps_int(&a[1], 0, REQ_MAX_N - 1, PE_VALUE_OUT_OF_RANGE, &index, err,
                     "tokens[%u].index", i)) != DERAS_OK ||
        (rc = ps_token(&a[2], &t->lp.token_id, err, "tokens[%u].token_id", i)) != DERAS_OK)
        return rc;
    t->index = (int)index;
    t->lp.logprob = 0;
    t->lp.n_top = 0;
    if (n == 3)
        return DERAS_OK;
    if ((rc = ps_logprob(&a[3], &t->lp.logprob, err, "tokens[%u].logprob", i)) != DERAS_OK ||
        (rc = ps_array(&a[4], SAMPLING_MAX_LOGPROBS, &top, &n_top, err, "tokens[%u].top", i)) !=
            DERAS_OK)
        return rc;
    for (uint32_t k = 0; k < n_top; k++) {
        const msgpack_object *pair;
        uint32_t m;
        if ((rc = ps_array(&top[k], 2, &pair, &m, err, "tokens[%u].top[%u]", i, k)) != DERAS_OK)
            return rc;
        if (m != 2)
            return ps_fail(err, PE_INVALID_FIELD, "tokens[%u].top[%u] must be [id, logprob]",
                           i, k);
        if ((rc = ps_token(&pair[0], &t->lp.top_ids[k], err, "tokens[%u].top[%u].id", i, k)) !=
                DERAS_OK ||
            (rc = ps_logprob(&pair[1], &t->lp.top_logprobs[k], err,
                             "tokens[%u].top[%u].logprob", i, k)) != DERAS_OK)
            return rc;
    }
    t->lp.n_top = (int)n_top;
    return DERAS_OK;
}

static int decode_tokens(wp_decoder_t *d, const msgpack_object *o, wp_msg *m, proto_error *err)
{
    const msgpack_object *items;
    uint32_t k;
    int rc = ps_array(o, WPROTO_MAX_STEP_ENTRIES, &items, &k, err, "tokens");
    if (rc != DERAS_OK)
        return rc;
    /* Shapes first, so storage (184 bytes per entry) is only sized for entries that take
     * at least 4 bytes of the frame each. */
    for (uint32_t i = 0; i < k; i++)
        if (items[i].type != MSGPACK_OBJECT_ARRAY ||
            (items[i].via.array.size != 3 && items[i].via.array.size != 5)) {
            wp_token scratch;
            return decode_token(&items[i], i, &scratch, err);
        }
    if (ps_grow((void **)&d->tokens, &d->tokens_cap, k, sizeof *d->tokens, WP_RETAIN_ENTRIES) !=
        DERAS_OK)
        return nomem(err, "step tokens", k);
    for (uint32_t i = 0; i < k; i++)
        if ((rc = decode_token(&items[i], i, &d->tokens[i], err)) != DERAS_OK)
            return rc;
    m->tokens = d->tokens;
    m->n_tokens = (int)k;
    return DERAS_OK;
}

/* The speculation counters' keys as one string, for messages: "spec_proposed, ..." */
#define SPEC_KEY_TEXT(field, key, metric, help) ", " key

/* One STEP finish: [rid, index, reason, n_prompt, n_generated], and when the sample
 * speculated, [..., the speculation counters in table order]. */
static int decode_finish(const msgpack_object *o, uint32_t i, wp_finish *f, proto_error *err)
{
    enum { N_FIXED = 5 };
    const msgpack_object *a;
    uint32_t n;
    int64_t index, reason, n_prompt, n_gen;
    int rc = ps_array(o, N_FIXED + SPEC_N_COUNTERS, &a, &n, err, "finishes[%u]", i);
    if (rc != DERAS_OK)
        return rc;
    if (n != N_FIXED && n != N_FIXED + SPEC_N_COUNTERS)
        return ps_fail(err, PE_INVALID_FIELD,
                       "finishes[%u] must be [rid, index, reason, n_prompt, n_generated] "
                       "(+ [%s]), got %u elements", i,
                       (SPEC_COUNTERS(SPEC_KEY_TEXT)) + 2, n);
    if ((rc = ps_u64(&a[0], &f->rid, err, "finishes[%u].rid", i)) != DERAS_OK ||
        (rc = ps_int(&a[1], 0, REQ_MAX_N - 1, PE_VALUE_OUT_OF_RANGE, &index, err,
                     "finishes[%u].index", i)) != DERAS_OK ||
        (rc = ps_int(&a[2], 0, FINISH_LAST_SAMPLE, PE_VALUE_OUT_OF_RANGE, &reason, err,
                     "finishes[%u].reason", i)) != DERAS_OK ||
        (rc = ps_int(&a[3], 0, INT32_MAX, PE_VALUE_OUT_OF_RANGE, &n_prompt, err,
                     "finishes[%u].n_prompt", i)) != DERAS_OK ||
        (rc = ps_int(&a[4], 0, INT32_MAX, PE_VALUE_OUT_OF_RANGE, &n_gen, err,
                     "finishes[%u].n_generated", i)) != DERAS_OK)
        return rc;
    f->index = (int)index;
    f->reason = (finish_reason)reason;
    f->n_prompt = (int)n_prompt;
    f->n_generated = (int)n_gen;
    f->spec = (spec_counters){0};
    for (uint32_t c = N_FIXED; c < n; c++)
        if ((rc = wv_decode_spec((int)(c - N_FIXED), &a[c], &f->spec, err, "finishes", i)) !=
            DERAS_OK)
            return rc;
    return wv_check_spec(&f->spec, err, "finishes", i);
}

static int decode_finishes(wp_decoder_t *d, const msgpack_object *o, wp_msg *m, proto_error *err)
{
    const msgpack_object *items;
    uint32_t k;
    int rc = ps_array(o, WPROTO_MAX_STEP_ENTRIES, &items, &k, err, "finishes");
    if (rc != DERAS_OK)
        return rc;
    if (ps_grow((void **)&d->finishes, &d->finishes_cap, k, sizeof *d->finishes,
             WP_RETAIN_ENTRIES) != DERAS_OK)
        return nomem(err, "step finishes", k);
    for (uint32_t i = 0; i < k; i++)
        if ((rc = decode_finish(&items[i], i, &d->finishes[i], err)) != DERAS_OK)
            return rc;
    m->finishes = d->finishes;
    m->n_finishes = (int)k;
    return DERAS_OK;
}

/* SUBMIT grammar: 1..WPROTO_MAX_GRAMMAR bytes of UTF-8, copied (the frame goes first). */
static int decode_grammar(wp_decoder_t *d, const msgpack_object *o, wp_submit *s,
                          proto_error *err)
{
    const char *p;
    size_t n;
    int rc = ps_str(o, 1, WPROTO_MAX_GRAMMAR, &p, &n, err, "grammar");
    if (rc != DERAS_OK)
        return rc;
    if (ps_grow((void **)&d->grammar, &d->grammar_cap, n, 1, WPROTO_MAX_GRAMMAR) != DERAS_OK)
        return nomem(err, "grammar bytes", n);
    memcpy(d->grammar, p, n);
    s->grammar = d->grammar;
    s->grammar_len = n;
    return DERAS_OK;
}

/* An int field into an int (all of HELLO's are >= lo and fit in int32). */
static int int_field(const msgpack_object *v, int64_t lo, int64_t hi, int *out, proto_error *err,
                     const char *name)
{
    int64_t i64 = 0;
    int rc = ps_int(v, lo, hi, PE_VALUE_OUT_OF_RANGE, &i64, err, "%s", name);
    *out = (int)i64;
    return rc;
}

static int wp_field(wp_decoder_t *d, int f, const msgpack_object *v, wp_msg *m, proto_error *err)
{
    wp_hello *h = &m->hello;
    wp_submit *s = &m->submit;
    req_params *q = &s->params;
    const char *name = wf_names[f];
    int64_t i64;
    int rc;
    switch ((enum wp_field)f) {
    case WF_TYPE:
    case WF_V: return DERAS_OK; /* checked by ps_header */
    case WF_NAME: return ps_cstr(v, 1, WPROTO_MAX_NAME, h->name, err, "name");
    case WF_DEVICE: return ps_cstr(v, 1, sizeof h->device - 1, h->device, err, "device");
    case WF_MODEL: return ps_cstr(v, 1, sizeof h->model - 1, h->model, err, "model");
    case WF_SPEC: return ps_cstr(v, 1, sizeof h->spec - 1, h->spec, err, "spec");
    case WF_VOCAB_SIZE: return int_field(v, 1, INT32_MAX, &h->vocab_size, err, name);
    case WF_MAX_MODEL_LEN: return int_field(v, 1, INT32_MAX, &h->max_model_len, err, name);
    case WF_TP_SIZE: return int_field(v, 1, 4096, &h->tp_size, err, name);
    case WF_KV_BLOCKS_TOTAL: return int_field(v, 0, INT32_MAX, &h->kv_blocks_total, err, name);
    case WF_BLOCK_SIZE: return int_field(v, 1, INT32_MAX, &h->block_size, err, name);
    case WF_MAX_SEQS: return int_field(v, 1, INT32_MAX, &h->max_seqs, err, name);
    case WF_PID:
        rc = ps_int(v, 0, INT32_MAX, PE_VALUE_OUT_OF_RANGE, &i64, err, "pid");
        h->pid = (int32_t)i64;
        return rc;
    case WF_HEARTBEAT_MS: return int_field(v, 1, 3600000, &m->heartbeat_ms, err, name);
    case WF_REASON:
    case WF_MESSAGE: return ps_cstr(v, 0, sizeof m->text - 1, m->text, err, "%s", name);
    case WF_LOAD: return decode_load(v, wp_types[m->type - 1], &m->load, err);
    case WF_RID:
        rc = ps_u64(v, &m->rid, err, "rid");
        s->rid = m->rid;
        return rc;
    case WF_PROMPT_IDS: return decode_prompt_bin(d, v, s, err);
    case WF_MAX_TOKENS: return int_field(v, 1, INT32_MAX, &q->max_tokens, err, name);
    case WF_N: return int_field(v, 1, REQ_MAX_N, &q->n, err, name);
    case WF_SEED: return ps_u64(v, &q->seed, err, "seed");
    case WF_STOP_TOKEN_IDS: return decode_stop_ids(v, q, err);
    case WF_IGNORE_EOS: return ps_bool(v, &q->ignore_eos, err, "ignore_eos");
    case WF_SPEC_TOKENS: return int_field(v, -1, REQ_MAX_SPEC_TOKENS, &q->spec_tokens, err, name);
    case WF_GRAMMAR: return decode_grammar(d, v, s, err);
    case WF_TOKENS: return decode_tokens(d, v, m, err);
    case WF_FINISHES: return decode_finishes(d, v, m, err);
    case WF_CODE:
        if (v->type != MSGPACK_OBJECT_STR)
            return ps_fail(err, PE_INVALID_FIELD, "code must be a string, got %s",
                           ps_type_name(v));
        m->code = ps_error_code(v);
        return DERAS_OK;
    case WF_SAMPLING:
    case WF_N_FIELDS: break;
    }
    if (f >= WF_SAMPLING && f < WF_N_FIELDS)
        return wv_decode_sampling(f - WF_SAMPLING, v, &q->sp, err);
    return ps_fail(err, PE_INTERNAL, "worker field %d has no checker", f);
}

int wp_decode(wp_decoder_t *d, const void *buf, size_t len, wp_msg *out, proto_error *err)
{
    proto_error scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    if (!d || (!buf && len) || !out) {
        ps_fail(err, PE_INTERNAL, "wp_decode: bad arguments");
        return DERAS_EINVAL;
    }
    mp_scan_limits lim = {.max_depth = 6, .max_items = WP_MAX_ITEMS};
    const msgpack_object_kv *kv;
    uint32_t n;
    int type, rc;
    if ((rc = ps_open(d->frame, buf, len, d->max_bytes, &lim, &kv, &n, err)) != DERAS_OK ||
        (rc = ps_header(kv, n, WPROTO_VERSION, wp_types, N_TYPES, &type, err)) != DERAS_OK)
        goto done;
    memset(out, 0, sizeof *out);
    out->type = (enum wproto_type)(type + 1);
    if (out->type == WP_SUBMIT) /* what the optional keys default to */
        req_params_init(&out->submit.params);
    uint64_t seen = 0, allowed = wp_required[type] | wp_optional[type] | BIT(WF_V);
    for (uint32_t i = 0; i < n; i++) {
        int f = ps_lookup(&kv[i].key, wf_names, WF_N_FIELDS);
        if (f < 0 || !(allowed & BIT(f))) {
            rc = ps_unknown_key(&kv[i].key, wp_types[type], err);
            goto done;
        }
        if ((rc = ps_seen(&seen, f, wf_names[f], err)) != DERAS_OK ||
            (rc = wp_field(d, f, &kv[i].val, out, err)) != DERAS_OK)
            goto done;
    }
    rc = ps_required(wp_required[type], seen, wf_names, WF_N_FIELDS, wp_types[type], err);
done:
    return ps_close(d->frame, rc);
}
