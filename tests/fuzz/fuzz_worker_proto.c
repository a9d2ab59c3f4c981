/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_worker_proto.c - libFuzzer target for the router <-> worker protocol.
 *
 * Arbitrary bytes go through wp_decode, as a router decodes what a broken or hostile
 * worker sends (and a worker what the router sends). A failure must be DERAS_EFORMAT with
 * a code in the enum and a valid UTF-8 message; a success must re-encode with the wp_
 * encoders (STEP through the incremental builder) to a frame that decodes to the same
 * message, field for field. The seed corpus (corpus/fuzz_worker_proto) holds valid frames
 * of every type.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"
#include "common/wire/worker_proto.h"
#include "fuzz_same.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static wp_decoder_t *d1, *d2;
static wp_encoder_t *enc;

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            abort();                                                                         \
    } while (0)

static void check_same_load(const wp_load *a, const wp_load *b)
{
    CHECK(a->phase == b->phase && a->running == b->running && a->waiting == b->waiting &&
          a->queued_tokens == b->queued_tokens && a->running_tokens == b->running_tokens &&
          a->kv_blocks_free == b->kv_blocks_free && a->kv_blocks_total == b->kv_blocks_total &&
          a->tokens_per_s == b->tokens_per_s && a->steps == b->steps &&
          a->preemptions == b->preemptions && a->prefix_hit_tokens == b->prefix_hit_tokens &&
          a->prefix_query_tokens == b->prefix_query_tokens &&
          a->prompt_tokens == b->prompt_tokens && a->generated_tokens == b->generated_tokens);
}

static int reencode(const wp_msg *m, const void **buf, size_t *len)
{
    switch (m->type) {
    case WP_HELLO: return wp_encode_hello(enc, &m->hello, buf, len);
    case WP_WELCOME: return wp_encode_welcome(enc, m->heartbeat_ms, buf, len);
    case WP_REFUSE: return wp_encode_refuse(enc, m->text, buf, len);
    case WP_HEARTBEAT: return wp_encode_heartbeat(enc, &m->load, buf, len);
    case WP_SUBMIT: return wp_encode_submit(enc, &m->submit, buf, len);
    case WP_ABORT: return wp_encode_abort(enc, m->rid, buf, len);
    case WP_REJECT: return wp_encode_reject(enc, m->rid, m->code, m->text, buf, len);
    case WP_DRAIN: return wp_encode_drain(enc, buf, len);
    case WP_SHUTDOWN: return wp_encode_shutdown(enc, buf, len);
    case WP_BYE: return wp_encode_bye(enc, m->text, buf, len);
    case WP_STEP:
        wp_step_begin(enc);
        for (int i = 0; i < m->n_tokens; i++)
            CHECK(wp_step_add_token(enc, &m->tokens[i]) == DERAS_OK);
        for (int i = 0; i < m->n_finishes; i++)
            CHECK(wp_step_add_finish(enc, &m->finishes[i]) == DERAS_OK);
        return wp_step_end(enc, &m->load, buf, len);
    }
    abort();
}

static void check_same(const wp_msg *a, const wp_msg *b)
{
    CHECK(a->type == b->type);
    switch (a->type) {
    case WP_HELLO: {
        const wp_hello *x = &a->hello, *y = &b->hello;
        CHECK(!strcmp(x->name, y->name) && !strcmp(x->device, y->device) &&
              !strcmp(x->model, y->model));
        CHECK(x->vocab_size == y->vocab_size && x->max_model_len == y->max_model_len &&
              x->tp_size == y->tp_size && x->kv_blocks_total == y->kv_blocks_total &&
              x->block_size == y->block_size && x->max_seqs == y->max_seqs && x->pid == y->pid);
        break;
    }
    case WP_WELCOME: CHECK(a->heartbeat_ms == b->heartbeat_ms); break;
    case WP_REFUSE:
    case WP_BYE: CHECK(!strcmp(a->text, b->text)); break;
    case WP_HEARTBEAT: check_same_load(&a->load, &b->load); break;
    case WP_SUBMIT: {
        const wp_submit *x = &a->submit, *y = &b->submit;
        CHECK(x->rid == y->rid && x->n_prompt == y->n_prompt);
        CHECK(!memcmp(x->prompt_ids, y->prompt_ids, (size_t)x->n_prompt * sizeof(int32_t)));
        CHECK(fuzz_same_params(&x->params, &y->params) && x->params.seed == y->params.seed);
        break;
    }
    case WP_ABORT: CHECK(a->rid == b->rid); break;
    case WP_REJECT: CHECK(a->rid == b->rid && a->code == b->code && !strcmp(a->text, b->text)); break;
    case WP_DRAIN:
    case WP_SHUTDOWN: break;
    case WP_STEP:
        CHECK(a->n_tokens == b->n_tokens && a->n_finishes == b->n_finishes);
        for (int i = 0; i < a->n_tokens; i++) {
            const wp_token *x = &a->tokens[i], *y = &b->tokens[i];
            CHECK(x->rid == y->rid && x->index == y->index && x->lp.token_id == y->lp.token_id);
            CHECK(x->lp.logprob == y->lp.logprob && x->lp.n_top == y->lp.n_top);
            for (int k = 0; k < x->lp.n_top; k++)
                CHECK(x->lp.top_ids[k] == y->lp.top_ids[k] &&
                      x->lp.top_logprobs[k] == y->lp.top_logprobs[k]);
        }
        for (int i = 0; i < a->n_finishes; i++) {
            const wp_finish *x = &a->finishes[i], *y = &b->finishes[i];
            CHECK(x->rid == y->rid && x->index == y->index && x->reason == y->reason &&
                  x->n_prompt == y->n_prompt && x->n_generated == y->n_generated);
        }
        check_same_load(&a->load, &b->load);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!d1) {
        CHECK(wp_decoder_new(1 << 20, &d1) == DERAS_OK && wp_decoder_new(0, &d2) == DERAS_OK &&
              wp_encoder_new(&enc) == DERAS_OK);
    }
    wp_msg m, m2;
    proto_error err;
    int rc = wp_decode(d1, data, size, &m, &err);
    if (rc != DERAS_OK) {
        CHECK(rc == DERAS_EFORMAT && err.code > PE_NONE && err.code < PE_N_CODES);
        size_t n = strnlen(err.message, sizeof err.message);
        CHECK(n > 0 && n < sizeof err.message && utf8_valid_prefix(err.message, n) == n);
        return 0;
    }
    const void *buf;
    size_t len;
    CHECK(reencode(&m, &buf, &len) == DERAS_OK);
    CHECK(wp_decode(d2, buf, len, &m2, &err) == DERAS_OK);
    check_same(&m, &m2);
    return 0;
}
