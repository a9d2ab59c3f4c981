/* SPDX-License-Identifier: Apache-2.0 */
/* worker_proto_enc.c - the router <-> worker protocol's encoders and the STEP builder (see
 * worker_proto.h; the wire shapes are described in worker_proto.c).
 *
 * Every message packs into one msgpack_sbuffer per encoder, cleared (not freed) before
 * each message. A STEP is collected during an engine step in arrays that keep their
 * capacity, then packed at once, so after warm-up encoding allocates nothing per step.
 * Text fields are cut at a character boundary to the length the decoder accepts. Cost:
 * O(message size).
 */
#include "worker_proto.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "proto_schema.h"
#include "wire_vocab.h"
#include "common/base/status.h"


struct wp_encoder {
    ps_out out;
    wp_token *tokens;          /* the STEP being built */
    size_t n_tokens, tokens_cap;
    wp_finish *finishes;
    size_t n_finishes, finishes_cap;
};

int wp_encoder_new(wp_encoder_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "wp_encoder_new: NULL out");
    wp_encoder_t *e = *out = calloc(1, sizeof *e);
    if (!e)
        return deras_fail(DERAS_ENOMEM, "wp_encoder_new: out of memory");
    ps_out_init(&e->out);
    return DERAS_OK;
}

void wp_encoder_destroy(wp_encoder_t **ep)
{
    if (!ep || !*ep)
        return;
    wp_encoder_t *e = *ep;
    ps_out_free(&e->out);
    free(e->tokens);
    free(e->finishes);
    free(e);
    *ep = NULL;
}

#define KEY(pk, lit) msgpack_pack_str_with_body(pk, lit, sizeof(lit) - 1)

/* A C string of at most cap bytes, cut at a character boundary (and at the first invalid
 * byte), so the peer's strict decoder always accepts it. */
static int pack_text(msgpack_packer *pk, const char *s, size_t cap)
{
    size_t n = ps_utf8_clip(s, strnlen(s, cap + 1), cap);
    return msgpack_pack_str_with_body(pk, n ? s : "", n);
}

/* {"type": t} plus n more pairs to come. */
static int pack_head(msgpack_packer *pk, const char *type, size_t n)
{
    return msgpack_pack_map(pk, n + 1) | KEY(pk, "type") | pack_text(pk, type, 16);
}

int wp_encode_hello(wp_encoder_t *e, const wp_hello *h, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, h);
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "hello", 11 + (h->spec[0] != 0));
    rc |= KEY(pk, "v") | msgpack_pack_int(pk, WPROTO_VERSION);
    rc |= KEY(pk, "name") | pack_text(pk, h->name, WPROTO_MAX_NAME);
    rc |= KEY(pk, "device") | pack_text(pk, h->device, sizeof h->device - 1);
    rc |= KEY(pk, "model") | pack_text(pk, h->model, sizeof h->model - 1);
    rc |= KEY(pk, "vocab_size") | msgpack_pack_int(pk, h->vocab_size);
    rc |= KEY(pk, "max_model_len") | msgpack_pack_int(pk, h->max_model_len);
    rc |= KEY(pk, "tp_size") | msgpack_pack_int(pk, h->tp_size);
    rc |= KEY(pk, "kv_blocks_total") | msgpack_pack_int(pk, h->kv_blocks_total);
    rc |= KEY(pk, "block_size") | msgpack_pack_int(pk, h->block_size);
    rc |= KEY(pk, "max_seqs") | msgpack_pack_int(pk, h->max_seqs);
    rc |= KEY(pk, "pid") | msgpack_pack_int32(pk, h->pid);
    if (h->spec[0])
        rc |= KEY(pk, "spec") | pack_text(pk, h->spec, sizeof h->spec - 1);
    return ps_out_done(&e->out, rc, "hello", buf, len);
}

int wp_encode_welcome(wp_encoder_t *e, int heartbeat_ms, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, true);
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "welcome", 2);
    rc |= KEY(pk, "v") | msgpack_pack_int(pk, WPROTO_VERSION);
    rc |= KEY(pk, "heartbeat_ms") | msgpack_pack_int(pk, heartbeat_ms);
    return ps_out_done(&e->out, rc, "welcome", buf, len);
}

int wp_encode_refuse(wp_encoder_t *e, const char *reason, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, reason);
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "refuse", 1);
    rc |= KEY(pk, "reason") | pack_text(pk, reason, sizeof ((wp_msg *)0)->text - 1);
    return ps_out_done(&e->out, rc, "refuse", buf, len);
}

static int pack_load(msgpack_packer *pk, const wp_load *l)
{
    int rc = msgpack_pack_map(pk, WPROTO_LOAD_FIELDS + SPEC_N_COUNTERS);
    rc |= KEY(pk, "phase") | pack_text(pk, wp_phase_name(l->phase), 16);
    rc |= KEY(pk, "running") | msgpack_pack_int(pk, l->running);
    rc |= KEY(pk, "waiting") | msgpack_pack_int(pk, l->waiting);
    rc |= KEY(pk, "queued_tokens") | msgpack_pack_int64(pk, l->queued_tokens);
    rc |= KEY(pk, "running_tokens") | msgpack_pack_int64(pk, l->running_tokens);
    rc |= KEY(pk, "kv_blocks_free") | msgpack_pack_int(pk, l->kv_blocks_free);
    rc |= KEY(pk, "kv_blocks_total") | msgpack_pack_int(pk, l->kv_blocks_total);
    rc |= KEY(pk, "tokens_per_s") | msgpack_pack_double(pk, l->tokens_per_s);
    rc |= KEY(pk, "steps") | msgpack_pack_uint64(pk, l->steps);
    rc |= KEY(pk, "preemptions") | msgpack_pack_uint64(pk, l->preemptions);
    rc |= KEY(pk, "prefix_hit_tokens") | msgpack_pack_uint64(pk, l->prefix_hit_tokens);
    rc |= KEY(pk, "prefix_query_tokens") | msgpack_pack_uint64(pk, l->prefix_query_tokens);
    rc |= KEY(pk, "prompt_tokens") | msgpack_pack_uint64(pk, l->prompt_tokens);
    rc |= KEY(pk, "generated_tokens") | msgpack_pack_uint64(pk, l->generated_tokens);
    rc |= wv_pack_spec_pairs(pk, &l->spec);
    return rc;
}

static bool load_ok(const wp_load *l)
{
    return l && l->phase >= WP_PHASE_STARTING && l->phase <= WP_PHASE_DRAINING;
}

int wp_encode_heartbeat(wp_encoder_t *e, const wp_load *l, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, load_ok(l));
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "heartbeat", 1);
    rc |= KEY(pk, "load") | pack_load(pk, l);
    return ps_out_done(&e->out, rc, "heartbeat", buf, len);
}

/* prompt_ids as a bin of little-endian int32. */
static int pack_ids_bin(msgpack_packer *pk, const int32_t *ids, int n)
{
    size_t bytes = (size_t)n * 4;
    int rc = msgpack_pack_bin(pk, bytes);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    rc |= msgpack_pack_bin_body(pk, ids, bytes);
#else
    for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)ids[i];
        uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        rc |= msgpack_pack_bin_body(pk, b, 4);
    }
#endif
    return rc;
}

static int pack_int_array(msgpack_packer *pk, const int32_t *v, int n)
{
    int rc = msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++)
        rc |= msgpack_pack_int32(pk, v[i]);
    return rc;
}

int wp_encode_submit(wp_encoder_t *e, const wp_submit *s, const void **buf, size_t *len)
{
    const req_params *q = s ? &s->params : NULL;
    PS_ENCODE_BEGIN(e, s && s->n_prompt >= 0 && (s->prompt_ids || !s->n_prompt) &&
                           q->n_stop_ids >= 0 && q->n_stop_ids <= REQ_MAX_STOP_IDS);
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "submit",
                       7u + (q->spec_tokens != 0) + (s->grammar != NULL) +
                           wv_sampling_count(&q->sp, true));
    rc |= KEY(pk, "rid") | msgpack_pack_uint64(pk, s->rid);
    rc |= KEY(pk, "prompt_ids") | pack_ids_bin(pk, s->prompt_ids, s->n_prompt);
    rc |= KEY(pk, "max_tokens") | msgpack_pack_int(pk, q->max_tokens);
    rc |= KEY(pk, "n") | msgpack_pack_int(pk, q->n);
    rc |= wv_pack_sampling(pk, &q->sp, true);
    rc |= KEY(pk, "seed") | msgpack_pack_uint64(pk, q->seed);
    rc |= KEY(pk, "stop_token_ids") | pack_int_array(pk, q->stop_ids, q->n_stop_ids);
    rc |= KEY(pk, "ignore_eos") | (q->ignore_eos ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    if (q->spec_tokens != 0)
        rc |= KEY(pk, "spec_tokens") | msgpack_pack_int(pk, q->spec_tokens);
    if (s->grammar)
        rc |= KEY(pk, "grammar") | msgpack_pack_str_with_body(pk, s->grammar, s->grammar_len);
    return ps_out_done(&e->out, rc, "submit", buf, len);
}

int wp_encode_abort(wp_encoder_t *e, uint64_t rid, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, true);
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "abort", 1);
    rc |= KEY(pk, "rid") | msgpack_pack_uint64(pk, rid);
    return ps_out_done(&e->out, rc, "abort", buf, len);
}

int wp_encode_reject(wp_encoder_t *e, uint64_t rid, enum proto_error_code code, const char *message,
                     const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, message);
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "reject", 3);
    rc |= KEY(pk, "rid") | msgpack_pack_uint64(pk, rid);
    rc |= KEY(pk, "code") | pack_text(pk, proto_error_name(code), 64);
    rc |= KEY(pk, "message") | pack_text(pk, message, sizeof ((wp_msg *)0)->text - 1);
    return ps_out_done(&e->out, rc, "reject", buf, len);
}

int wp_encode_drain(wp_encoder_t *e, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, true);
    return ps_out_done(&e->out, pack_head(&e->out.pk, "drain", 0), "drain", buf, len);
}

int wp_encode_shutdown(wp_encoder_t *e, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, true);
    return ps_out_done(&e->out, pack_head(&e->out.pk, "shutdown", 0), "shutdown", buf, len);
}

int wp_encode_bye(wp_encoder_t *e, const char *reason, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, reason);
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "bye", 1);
    rc |= KEY(pk, "reason") | pack_text(pk, reason, sizeof ((wp_msg *)0)->text - 1);
    return ps_out_done(&e->out, rc, "bye", buf, len);
}

/* ---- STEP, built incrementally ---- */

void wp_step_begin(wp_encoder_t *e)
{
    if (e) {
        e->n_tokens = 0;
        e->n_finishes = 0;
    }
}

/* Room for one more element in a growable array: doubles, so O(1) amortised and no
 * allocation once the largest step has been seen. */
static int push_room(void **p, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap)
        return DERAS_OK;
    size_t want = *cap ? *cap * 2 : 64;
    void *q = realloc(*p, want * elem);
    if (!q)
        return deras_fail(DERAS_ENOMEM, "step encoder: out of memory for %zu entries", want);
    *p = q;
    *cap = want;
    return DERAS_OK;
}

/* What the router's decoder accepts as a log-probability. */
static bool logprob_ok(float x)
{
    return !isnan(x) && x != INFINITY;
}

int wp_step_add_token(wp_encoder_t *e, const wp_token *t)
{
    if (!e || !t || t->index < 0 || t->index >= REQ_MAX_N || t->lp.token_id < 0 ||
        t->lp.n_top < 0 || t->lp.n_top > SAMPLING_MAX_LOGPROBS || !logprob_ok(t->lp.logprob))
        return deras_fail(DERAS_EINVAL, "wp_step_add_token: bad arguments");
    for (int k = 0; k < t->lp.n_top; k++)
        if (t->lp.top_ids[k] < 0 || !logprob_ok(t->lp.top_logprobs[k]))
            return deras_fail(DERAS_EINVAL, "wp_step_add_token: bad top logprob %d", k);
    if (e->n_tokens >= WPROTO_MAX_STEP_ENTRIES)
        return deras_fail(DERAS_ERANGE, "a STEP holds at most %u tokens", WPROTO_MAX_STEP_ENTRIES);
    int rc = push_room((void **)&e->tokens, e->n_tokens, &e->tokens_cap, sizeof *e->tokens);
    if (rc != DERAS_OK)
        return rc;
    e->tokens[e->n_tokens++] = *t;
    return DERAS_OK;
}

int wp_step_add_finish(wp_encoder_t *e, const wp_finish *f)
{
    if (!e || !f || f->index < 0 || f->index >= REQ_MAX_N || (int)f->reason < 0 ||
        f->reason > FINISH_LAST_SAMPLE ||
        f->n_prompt < 0 || f->n_generated < 0 || !spec_counters_valid(&f->spec))
        return deras_fail(DERAS_EINVAL, "wp_step_add_finish: bad arguments");
    if (e->n_finishes >= WPROTO_MAX_STEP_ENTRIES)
        return deras_fail(DERAS_ERANGE, "a STEP holds at most %u finishes", WPROTO_MAX_STEP_ENTRIES);
    int rc = push_room((void **)&e->finishes, e->n_finishes, &e->finishes_cap,
                       sizeof *e->finishes);
    if (rc != DERAS_OK)
        return rc;
    e->finishes[e->n_finishes++] = *f;
    return DERAS_OK;
}

bool wp_step_empty(const wp_encoder_t *e)
{
    return !e || (e->n_tokens == 0 && e->n_finishes == 0);
}

int wp_step_end(wp_encoder_t *e, const wp_load *l, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, load_ok(l));
    msgpack_packer *pk = &e->out.pk;
    int rc = pack_head(pk, "step", 3);
    rc |= KEY(pk, "tokens") | msgpack_pack_array(pk, e->n_tokens);
    for (size_t i = 0; i < e->n_tokens; i++) {
        const wp_token *t = &e->tokens[i];
        bool lp = t->lp.n_top > 0 || t->lp.logprob != 0;
        rc |= msgpack_pack_array(pk, lp ? 5 : 3) | msgpack_pack_uint64(pk, t->rid) |
              msgpack_pack_int(pk, t->index) | msgpack_pack_int32(pk, t->lp.token_id);
        if (!lp)
            continue;
        rc |= msgpack_pack_float(pk, t->lp.logprob) | msgpack_pack_array(pk, (size_t)t->lp.n_top);
        for (int k = 0; k < t->lp.n_top; k++)
            rc |= msgpack_pack_array(pk, 2) | msgpack_pack_int32(pk, t->lp.top_ids[k]) |
                  msgpack_pack_float(pk, t->lp.top_logprobs[k]);
    }
    rc |= KEY(pk, "finishes") | msgpack_pack_array(pk, e->n_finishes);
    for (size_t i = 0; i < e->n_finishes; i++) {
        const wp_finish *f = &e->finishes[i];
        bool spec = spec_counters_any(&f->spec);
        rc |= msgpack_pack_array(pk, 5u + (spec ? SPEC_N_COUNTERS : 0)) |
              msgpack_pack_uint64(pk, f->rid) | msgpack_pack_int(pk, f->index) |
              msgpack_pack_int(pk, (int)f->reason) | msgpack_pack_int(pk, f->n_prompt) |
              msgpack_pack_int(pk, f->n_generated);
        if (spec)
            rc |= wv_pack_spec_values(pk, &f->spec);
    }
    rc |= KEY(pk, "load") | pack_load(pk, l);
    e->n_tokens = 0;
    e->n_finishes = 0;
    return ps_out_done(&e->out, rc, "step", buf, len);
}
