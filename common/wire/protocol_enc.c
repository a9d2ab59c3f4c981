/* SPDX-License-Identifier: Apache-2.0 */
/* protocol_enc.c - the client protocol's encoders: replies for clients (chunk, final,
 * error, pong) and, for the C client, requests and cancels (see protocol.h).
 *
 * Each encoder packs into one msgpack_sbuffer, cleared (not freed) before each message, so
 * after the first few messages encoding allocates nothing. Cost: O(message size); the
 * sampling parameters and speculation counters are packed from their tables
 * (wire_vocab.h).
 */
#include "protocol.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "proto_chat.h"
#include "proto_schema.h"
#include "wire_vocab.h"
#include "common/base/status.h"


struct proto_encoder {
    ps_out out;
};

int proto_encoder_new(proto_encoder_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "proto_encoder_new: NULL out");
    proto_encoder_t *e = *out = calloc(1, sizeof *e);
    if (!e)
        return deras_fail(DERAS_ENOMEM, "proto_encoder_new: out of memory");
    ps_out_init(&e->out);
    return DERAS_OK;
}

void proto_encoder_destroy(proto_encoder_t **ep)
{
    if (!ep || !*ep)
        return;
    ps_out_free(&(*ep)->out);
    free(*ep);
    *ep = NULL;
}

/* Packing helpers: each returns msgpack-c's 0 / -1 so calls can be or-ed together; the
 * only way a pack fails is the buffer's realloc. */
#define KEY(pk, lit) msgpack_pack_str_with_body(pk, lit, sizeof(lit) - 1)

static int pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    return msgpack_pack_str_with_body(pk, n ? s : "", n);
}

static int pack_cstr(msgpack_packer *pk, const char *s)
{
    return pack_str(pk, s, strlen(s));
}

static int pack_ids(msgpack_packer *pk, const int32_t *ids, int n)
{
    int rc = msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++)
        rc |= msgpack_pack_int32(pk, ids[i]);
    return rc;
}

/* "logprobs": [{"token_id", "logprob", "top": [[id, logprob], ...]}, ...] */
static int pack_logprobs(msgpack_packer *pk, const proto_logprob *lps, int n)
{
    int rc = msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < n; i++) {
        const proto_logprob *lp = &lps[i];
        int n_top = lp->n_top < 0                       ? 0
                    : lp->n_top > SAMPLING_MAX_LOGPROBS ? SAMPLING_MAX_LOGPROBS
                                                        : lp->n_top;
        rc |= msgpack_pack_map(pk, 3);
        rc |= KEY(pk, "token_id") | msgpack_pack_int32(pk, lp->token_id);
        rc |= KEY(pk, "logprob") | msgpack_pack_float(pk, lp->logprob);
        rc |= KEY(pk, "top") | msgpack_pack_array(pk, (size_t)n_top);
        for (int k = 0; k < n_top; k++)
            rc |= msgpack_pack_array(pk, 2) | msgpack_pack_int32(pk, lp->top_ids[k]) |
                  msgpack_pack_float(pk, lp->top_logprobs[k]);
    }
    return rc;
}

int proto_encode_chunk(proto_encoder_t *e, const char *id, int index, const int32_t *ids, int n_ids,
                       const char *text, size_t text_len, const proto_logprob *lps,
                       const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, id && n_ids >= 0 && (ids || !n_ids) && (text || !text_len));
    msgpack_packer *pk = &e->out.pk;
    int rc = msgpack_pack_map(pk, lps ? 6 : 5);
    rc |= KEY(pk, "type") | KEY(pk, "chunk");
    rc |= KEY(pk, "id") | pack_cstr(pk, id);
    rc |= KEY(pk, "index") | msgpack_pack_int(pk, index);
    rc |= KEY(pk, "token_ids") | pack_ids(pk, ids, n_ids);
    rc |= KEY(pk, "text") | pack_str(pk, text, text_len);
    if (lps)
        rc |= KEY(pk, "logprobs") | pack_logprobs(pk, lps, n_ids);
    return ps_out_done(&e->out, rc, "chunk", buf, len);
}

int proto_encode_final(proto_encoder_t *e, const char *id, int index, finish_reason why,
                       const char *abort_reason, const proto_usage *u, const char *text,
                       size_t text_len, const int32_t *ids, int n_ids, const proto_logprob *lps,
                       const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, id && (int)why >= 0 && why < FINISH_N && u && n_ids >= 0 && (ids || !lps));
    msgpack_packer *pk = &e->out.pk;
    int rc = msgpack_pack_map(pk, 5u + (text != NULL) + (ids != NULL) + (lps != NULL) +
                                      (abort_reason != NULL));
    rc |= KEY(pk, "type") | KEY(pk, "final");
    rc |= KEY(pk, "id") | pack_cstr(pk, id);
    rc |= KEY(pk, "index") | msgpack_pack_int(pk, index);
    rc |= KEY(pk, "finish_reason") | pack_cstr(pk, finish_reason_name(why));
    bool spec = spec_counters_any(&u->spec);
    rc |= KEY(pk, "usage") | msgpack_pack_map(pk, 5u + (spec ? SPEC_N_COUNTERS : 0));
    rc |= KEY(pk, "prompt_tokens") | msgpack_pack_int(pk, u->prompt_tokens);
    rc |= KEY(pk, "completion_tokens") | msgpack_pack_int(pk, u->completion_tokens);
    rc |= KEY(pk, "queue_ms") | msgpack_pack_double(pk, u->queue_ms);
    rc |= KEY(pk, "ttft_ms") | msgpack_pack_double(pk, u->ttft_ms);
    rc |= KEY(pk, "total_ms") | msgpack_pack_double(pk, u->total_ms);
    if (spec)
        rc |= wv_pack_spec_pairs(pk, &u->spec);
    if (text)
        rc |= KEY(pk, "text") | pack_str(pk, text, text_len);
    if (ids)
        rc |= KEY(pk, "token_ids") | pack_ids(pk, ids, n_ids);
    if (lps)
        rc |= KEY(pk, "logprobs") | pack_logprobs(pk, lps, n_ids);
    if (abort_reason)
        rc |= KEY(pk, "abort_reason") | pack_cstr(pk, abort_reason);
    return ps_out_done(&e->out, rc, "final", buf, len);
}

#define PROTO_MAX_MESSAGE_TEXT 1024 /* error messages on the wire, bytes */

int proto_encode_error(proto_encoder_t *e, const char *id, enum proto_error_code code,
                       const char *message, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, id && message);
    msgpack_packer *pk = &e->out.pk;
    size_t n = strlen(message);
    n = ps_utf8_clip(message, n, PROTO_MAX_MESSAGE_TEXT);
    int rc = msgpack_pack_map(pk, 4);
    rc |= KEY(pk, "type") | KEY(pk, "error");
    rc |= KEY(pk, "id") | pack_cstr(pk, id);
    rc |= KEY(pk, "code") | pack_cstr(pk, proto_error_name(code));
    rc |= KEY(pk, "message") | pack_str(pk, message, n);
    return ps_out_done(&e->out, rc, "error", buf, len);
}

int proto_encode_pong(proto_encoder_t *e, const proto_worker_status *w, int n_workers,
                      const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, n_workers >= 0 && n_workers <= PROTO_MAX_WORKERS && (w || !n_workers));
    msgpack_packer *pk = &e->out.pk;
    int rc = msgpack_pack_map(pk, 3);
    rc |= KEY(pk, "type") | KEY(pk, "pong");
    rc |= KEY(pk, "v") | msgpack_pack_int(pk, PROTO_VERSION);
    rc |= KEY(pk, "workers") | msgpack_pack_array(pk, (size_t)n_workers);
    for (int i = 0; i < n_workers; i++) {
        rc |= msgpack_pack_map(pk, 7);
        rc |= KEY(pk, "name") | pack_str(pk, w[i].name, strnlen(w[i].name, sizeof w[i].name - 1));
        rc |= KEY(pk, "state") |
              pack_str(pk, w[i].state, strnlen(w[i].state, sizeof w[i].state - 1));
        rc |= KEY(pk, "running") | msgpack_pack_int(pk, w[i].running);
        rc |= KEY(pk, "waiting") | msgpack_pack_int(pk, w[i].waiting);
        rc |= KEY(pk, "kv_blocks_free") | msgpack_pack_int(pk, w[i].kv_blocks_free);
        rc |= KEY(pk, "kv_blocks_total") | msgpack_pack_int(pk, w[i].kv_blocks_total);
        rc |= KEY(pk, "served") | msgpack_pack_uint64(pk, w[i].served);
    }
    return ps_out_done(&e->out, rc, "pong", buf, len);
}

int proto_encode_request(proto_encoder_t *e, const proto_request *r, const void **buf, size_t *len)
{
    const req_params *q = r ? &r->params : NULL;
    PS_ENCODE_BEGIN(e, r && (r->prompt || !r->prompt_len) &&
                           (r->prompt_ids || r->n_prompt_ids <= 0) && r->n_stops >= 0 &&
                           r->n_stops <= PROTO_MAX_STOPS && q->n_stop_ids >= 0 &&
                           q->n_stop_ids <= REQ_MAX_STOP_IDS);
    msgpack_packer *pk = &e->out.pk;
    bool chat = r->messages != NULL;
    bool ids = !chat && r->prompt_ids != NULL && !r->prompt;
    unsigned n = 4u + (q->max_tokens != REQ_DEFAULT_MAX_TOKENS) + (q->n != 1) + r->stream +
                 r->has_seed + (r->n_stops > 0) + (q->n_stop_ids > 0) + q->ignore_eos +
                 !r->add_special_tokens + (r->deadline_ms != 0) + (q->spec_tokens != 0) +
                 wv_sampling_count(&q->sp, false);
    if (chat)
        n += (r->tools != NULL) + (r->template_kwargs != NULL) + !r->add_generation_prompt;
    n += (r->json_schema != NULL) + (r->regex != NULL) + (r->grammar != NULL) + r->json_object;
    int rc = msgpack_pack_map(pk, n);
    rc |= KEY(pk, "type") | KEY(pk, "request");
    rc |= KEY(pk, "v") | msgpack_pack_int(pk, PROTO_VERSION);
    rc |= KEY(pk, "id") | pack_cstr(pk, r->id);
    if (chat) {
        rc |= KEY(pk, "messages") | proto_chat_pack(pk, r->messages);
        if (r->tools)
            rc |= KEY(pk, "tools") | proto_chat_pack(pk, r->tools);
        if (r->template_kwargs)
            rc |= KEY(pk, "chat_template_kwargs") | proto_chat_pack(pk, r->template_kwargs);
        if (!r->add_generation_prompt)
            rc |= KEY(pk, "add_generation_prompt") | msgpack_pack_false(pk);
    } else if (ids) {
        rc |= KEY(pk, "prompt_ids") | pack_ids(pk, r->prompt_ids, r->n_prompt_ids);
    } else {
        rc |= KEY(pk, "prompt") | pack_str(pk, r->prompt, r->prompt_len);
    }
    if (q->max_tokens != REQ_DEFAULT_MAX_TOKENS)
        rc |= KEY(pk, "max_tokens") | msgpack_pack_int(pk, q->max_tokens);
    if (q->n != 1)
        rc |= KEY(pk, "n") | msgpack_pack_int(pk, q->n);
    if (r->stream)
        rc |= KEY(pk, "stream") | msgpack_pack_true(pk);
    rc |= wv_pack_sampling(pk, &q->sp, false);
    if (r->has_seed)
        rc |= KEY(pk, "seed") | msgpack_pack_uint64(pk, q->seed);
    if (r->n_stops > 0) {
        rc |= KEY(pk, "stop") | msgpack_pack_array(pk, (size_t)r->n_stops);
        for (int i = 0; i < r->n_stops; i++)
            rc |= pack_str(pk, r->stops[i], r->stops[i] ? r->stop_lens[i] : 0);
    }
    if (q->n_stop_ids > 0)
        rc |= KEY(pk, "stop_token_ids") | pack_ids(pk, q->stop_ids, q->n_stop_ids);
    if (q->ignore_eos)
        rc |= KEY(pk, "ignore_eos") | msgpack_pack_true(pk);
    if (!r->add_special_tokens)
        rc |= KEY(pk, "add_special_tokens") | msgpack_pack_false(pk);
    if (r->deadline_ms != 0)
        rc |= KEY(pk, "deadline_ms") | msgpack_pack_int64(pk, r->deadline_ms);
    if (q->spec_tokens != 0)
        rc |= KEY(pk, "num_speculative_tokens") |
              msgpack_pack_int(pk, q->spec_tokens < 0 ? 0 : q->spec_tokens);
    if (r->json_schema)
        rc |= KEY(pk, "json_schema") | proto_chat_pack(pk, r->json_schema);
    if (r->regex)
        rc |= KEY(pk, "regex") | pack_str(pk, r->regex, r->regex_len);
    if (r->grammar)
        rc |= KEY(pk, "grammar") | pack_str(pk, r->grammar, r->grammar_len);
    if (r->json_object)
        rc |= KEY(pk, "json_object") | msgpack_pack_true(pk);
    return ps_out_done(&e->out, rc, "request", buf, len);
}

int proto_encode_cancel(proto_encoder_t *e, const char *id, const void **buf, size_t *len)
{
    PS_ENCODE_BEGIN(e, id);
    msgpack_packer *pk = &e->out.pk;
    int rc = msgpack_pack_map(pk, 2);
    rc |= KEY(pk, "type") | KEY(pk, "cancel");
    rc |= KEY(pk, "id") | pack_cstr(pk, id);
    return ps_out_done(&e->out, rc, "cancel", buf, len);
}
