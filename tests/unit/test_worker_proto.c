/* SPDX-License-Identifier: Apache-2.0 */
/* test_worker_proto.c - the router <-> worker protocol: every message round-trips, a STEP
 * built incrementally carries exactly what was added, and a broken or hostile worker's
 * frames are refused with the right code (a router must survive them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/wire/worker_proto.h"
#include "mp_text.h"
#include "test_util.h"

static msgpack_sbuffer sb;

static wp_load sample_load(void)
{
    return (wp_load){.phase = WP_PHASE_DRAINING, .running = 3, .waiting = 2,
                     .queued_tokens = 1000, .running_tokens = 5000,
                     .kv_blocks_free = 17, .kv_blocks_total = 64, .tokens_per_s = 123.5,
                     .steps = 1ull << 40, .preemptions = 4, .prefix_hit_tokens = 300,
                     .prefix_query_tokens = 900, .prompt_tokens = 12345,
                     .generated_tokens = UINT64_MAX, .spec.proposed = 400,
                     .spec.accepted = 310, .spec.verifications = 120};
}

static void assert_load_equal(const wp_load *a, const wp_load *b)
{
    assert_int_equal(a->phase, b->phase);
    assert_int_equal(a->running, b->running);
    assert_int_equal(a->waiting, b->waiting);
    assert_true(a->queued_tokens == b->queued_tokens && a->running_tokens == b->running_tokens);
    assert_int_equal(a->kv_blocks_free, b->kv_blocks_free);
    assert_int_equal(a->kv_blocks_total, b->kv_blocks_total);
    assert_true(a->tokens_per_s == b->tokens_per_s);
    assert_true(a->steps == b->steps && a->preemptions == b->preemptions);
    assert_true(a->prefix_hit_tokens == b->prefix_hit_tokens &&
                a->prefix_query_tokens == b->prefix_query_tokens);
    assert_true(a->prompt_tokens == b->prompt_tokens &&
                a->generated_tokens == b->generated_tokens);
    assert_true(a->spec.proposed == b->spec.proposed && a->spec.accepted == b->spec.accepted &&
                a->spec.verifications == b->spec.verifications);
}

static void decode_ok(wp_decoder_t *d, const void *buf, size_t len, wp_msg *m)
{
    proto_error err;
    int rc = wp_decode(d, buf, len, m, &err);
    if (rc != DERAS_OK)
        fail_msg("expected the frame to decode, got %s: %s", proto_error_name(err.code),
                 err.message);
}

static void every_message_round_trips(void **state)
{
    (void)state;
    wp_decoder_t *d = NULL;
    assert_int_equal(wp_decoder_new(0, &d), DERAS_OK);
    wp_encoder_t *e = NULL;
    assert_int_equal(wp_encoder_new(&e), DERAS_OK);
    const void *buf;
    size_t len;
    wp_msg m;

    wp_hello h = {.name = "w0", .device = "cuda:0", .model = "/models/llama-3-8b.gguf",
                  .vocab_size = 128256, .max_model_len = 8192, .tp_size = 2,
                  .kv_blocks_total = 4096, .block_size = 16, .max_seqs = 256, .pid = 4242};
    assert_int_equal(wp_encode_hello(e, &h, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_HELLO);
    assert_string_equal(m.hello.name, "w0");
    assert_string_equal(m.hello.device, "cuda:0");
    assert_string_equal(m.hello.model, h.model);
    assert_int_equal(m.hello.vocab_size, 128256);
    assert_int_equal(m.hello.max_model_len, 8192);
    assert_int_equal(m.hello.tp_size, 2);
    assert_int_equal(m.hello.kv_blocks_total, 4096);
    assert_int_equal(m.hello.block_size, 16);
    assert_int_equal(m.hello.max_seqs, 256);
    assert_int_equal(m.hello.pid, 4242);
    assert_string_equal(m.hello.spec, ""); /* optional: absent when the worker names none */
    snprintf(h.spec, sizeof h.spec, "ngram");
    assert_int_equal(wp_encode_hello(e, &h, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_string_equal(m.hello.spec, "ngram");
    assert_int_equal(m.hello.pid, 4242);

    assert_int_equal(wp_encode_welcome(e, 500, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_WELCOME);
    assert_int_equal(m.heartbeat_ms, 500);

    assert_int_equal(wp_encode_refuse(e, "model mismatch: router has x", &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_REFUSE);
    assert_string_equal(m.text, "model mismatch: router has x");

    wp_load l = sample_load();
    assert_int_equal(wp_encode_heartbeat(e, &l, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_HEARTBEAT);
    assert_load_equal(&m.load, &l);

    static const int32_t prompt[] = {1, 2, 3, 128000, 2147483647, 0};
    wp_submit s = {.rid = 0xfeedfacecafebeefull, .prompt_ids = prompt, .n_prompt = 6,
                   .params.max_tokens = 77, .params.n = 4, .params.sp.top_k = 50,
                   .params.sp.n_logprobs = 3, .params.sp.temperature = 0.8f,
                   .params.sp.top_p = 0.95f, .params.sp.min_p = 0.1f,
                   .params.sp.repetition_penalty = 1.2f,
                   .params.sp.presence_penalty = 0.5f, .params.sp.frequency_penalty = -0.5f,
                   .params.seed = 99,
                   .params.n_stop_ids = 2, .params.stop_ids = {128001, 128009},
                   .params.ignore_eos = true};
    assert_int_equal(wp_encode_submit(e, &s, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_SUBMIT);
    const wp_submit *g = &m.submit;
    assert_true(g->rid == s.rid);
    assert_int_equal(g->n_prompt, 6);
    assert_memory_equal(g->prompt_ids, prompt, sizeof prompt);
    assert_int_equal(g->params.max_tokens, 77);
    assert_int_equal(g->params.n, 4);
    assert_int_equal(g->params.sp.top_k, 50);
    assert_int_equal(g->params.sp.n_logprobs, 3);
    assert_true(g->params.sp.temperature == 0.8f && g->params.sp.top_p == 0.95f &&
                g->params.sp.min_p == 0.1f);
    assert_true(g->params.sp.repetition_penalty == 1.2f && g->params.sp.presence_penalty == 0.5f &&
                g->params.sp.frequency_penalty == -0.5f);
    assert_true(g->params.seed == 99);
    assert_int_equal(g->params.n_stop_ids, 2);
    assert_int_equal(g->params.stop_ids[1], 128009);
    assert_true(g->params.ignore_eos);
    assert_int_equal(g->params.spec_tokens, 0); /* not sent: the worker's default */

    /* spec_tokens: -1 (off) and 1..16 travel; beyond 16 is refused */
    for (int v = -1; v <= 17; v += 9) {
        s.params.spec_tokens = v == 8 ? 16 : v;
        assert_int_equal(wp_encode_submit(e, &s, &buf, &len), DERAS_OK);
        proto_error err;
        int rc = wp_decode(d, buf, len, &m, &err);
        if (s.params.spec_tokens > 16) {
            if (rc != DERAS_EFORMAT || err.code != PE_VALUE_OUT_OF_RANGE)
                fail_msg("spec_tokens %d: expected value_out_of_range, got %s",
                         s.params.spec_tokens,
                         proto_error_name(err.code));
        } else if (rc != DERAS_OK || m.submit.params.spec_tokens != s.params.spec_tokens) {
            fail_msg("spec_tokens %d: decoded %d (%s)", s.params.spec_tokens,
                     m.submit.params.spec_tokens,
                     err.message);
        }
    }

    assert_int_equal(wp_encode_abort(e, 77, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_ABORT);
    assert_true(m.rid == 77);

    assert_int_equal(wp_encode_reject(e, 78, PE_BUSY, "engine full", &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_REJECT);
    assert_true(m.rid == 78);
    assert_int_equal(m.code, PE_BUSY);
    assert_string_equal(m.text, "engine full");

    assert_int_equal(wp_encode_drain(e, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_DRAIN);
    assert_int_equal(wp_encode_shutdown(e, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_SHUTDOWN);
    assert_int_equal(wp_encode_bye(e, "stopped at once (second SIGTERM)", &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.type, WP_BYE);
    assert_string_equal(m.text, "stopped at once (second SIGTERM)");
    wp_encoder_destroy(&e);
    wp_decoder_destroy(&d);
    assert_null(e);
    assert_null(d);
}

/* The parameters added after version 1 travel when set and are absent otherwise, so a
 * router without them still speaks to a worker with them and back. */
static void submit_carries_min_tokens_and_logit_bias_when_set(void **state)
{
    (void)state;
    wp_decoder_t *d = NULL;
    assert_int_equal(wp_decoder_new(0, &d), DERAS_OK);
    wp_encoder_t *e = NULL;
    assert_int_equal(wp_encoder_new(&e), DERAS_OK);
    static const int32_t prompt[] = {5, 6};
    wp_submit s = {.rid = 9, .prompt_ids = prompt, .n_prompt = 2};
    req_params_init(&s.params);
    const void *buf;
    size_t len, len_plain;
    wp_msg m;
    assert_int_equal(wp_encode_submit(e, &s, &buf, &len_plain), DERAS_OK);
    decode_ok(d, buf, len_plain, &m);
    assert_int_equal(m.submit.params.sp.min_tokens, 0);
    assert_int_equal(m.submit.params.sp.logit_bias.n, 0);
    s.params.sp.min_tokens = 7;
    for (int i = 0; i < SAMPLING_MAX_LOGIT_BIAS; i++)
        assert_int_equal(logit_bias_add(&s.params.sp.logit_bias, 1000 - i, (float)(i % 201 - 100)),
                         DERAS_OK);
    assert_int_equal(wp_encode_submit(e, &s, &buf, &len), DERAS_OK);
    assert_true(len > len_plain);
    decode_ok(d, buf, len, &m);
    const sampling_params *g = &m.submit.params.sp;
    assert_int_equal(g->min_tokens, 7);
    assert_int_equal(g->logit_bias.n, SAMPLING_MAX_LOGIT_BIAS);
    assert_memory_equal(g->logit_bias.ids, s.params.sp.logit_bias.ids,
                        sizeof g->logit_bias.ids);
    assert_memory_equal(g->logit_bias.bias, s.params.sp.logit_bias.bias,
                        sizeof g->logit_bias.bias);
    assert_null(m.submit.grammar);
    /* a grammar: optional, copied out of the frame, at most WPROTO_MAX_GRAMMAR bytes */
    char *big = malloc(WPROTO_MAX_GRAMMAR + 1);
    memset(big, 'a', WPROTO_MAX_GRAMMAR + 1);
    memcpy(big, "root ::= \"x\"", 13);
    s.grammar = big;
    s.grammar_len = 13;
    assert_int_equal(wp_encode_submit(e, &s, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(m.submit.grammar_len, 13);
    assert_memory_equal(m.submit.grammar, big, 13);
    assert_true(m.submit.grammar < (const char *)buf || m.submit.grammar >= (const char *)buf + len);
    s.grammar_len = WPROTO_MAX_GRAMMAR + 1;
    assert_int_equal(wp_encode_submit(e, &s, &buf, &len), DERAS_OK);
    proto_error err;
    assert_int_equal(wp_decode(d, buf, len, &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_LIMIT_EXCEEDED);
    free(big);
    wp_encoder_destroy(&e);
    wp_decoder_destroy(&d);
}

static void step_carries_what_was_added(void **state)
{
    (void)state;
    wp_decoder_t *d = NULL;
    assert_int_equal(wp_decoder_new(0, &d), DERAS_OK);
    wp_encoder_t *e = NULL;
    assert_int_equal(wp_encoder_new(&e), DERAS_OK);
    const void *buf;
    size_t len;
    wp_msg m;
    wp_load l = sample_load();
    for (int round = 0; round < 3; round++) { /* the encoder is reused step after step */
        int n_tok = round == 1 ? 0 : 300 + round;
        wp_step_begin(e);
        assert_true(wp_step_empty(e));
        for (int i = 0; i < n_tok; i++) {
            wp_token t = {.rid = (uint64_t)i * 1000003u, .index = i % 16,
                          .lp = {.token_id = i * 7}};
            if (i % 3 == 0) { /* with logprobs */
                t.lp.logprob = -0.25f * (float)(i % 5);
                t.lp.n_top = i % 21;
                for (int k = 0; k < t.lp.n_top; k++) {
                    t.lp.top_ids[k] = k + i;
                    t.lp.top_logprobs[k] = -(float)k;
                }
            }
            if (i == 3)
                t.lp.logprob = -INFINITY; /* log 0 is allowed */
            assert_int_equal(wp_step_add_token(e, &t), DERAS_OK);
        }
        wp_finish f = {.rid = 5, .index = 2, .reason = 1, .n_prompt = 10, .n_generated = 20};
        assert_int_equal(wp_step_add_finish(e, &f), DERAS_OK);
        wp_finish fs = {.rid = 6, .index = 0, .reason = 0, .n_prompt = 3, .n_generated = 40,
                        .spec.proposed = UINT64_MAX - 1, .spec.accepted = 77,
                        .spec.verifications = 19};
        assert_int_equal(wp_step_add_finish(e, &fs), DERAS_OK);
        assert_false(wp_step_empty(e));
        assert_int_equal(wp_step_end(e, &l, &buf, &len), DERAS_OK);
        decode_ok(d, buf, len, &m);
        assert_int_equal(m.type, WP_STEP);
        assert_int_equal(m.n_tokens, n_tok);
        for (int i = 0; i < n_tok; i++) {
            const wp_token *t = &m.tokens[i];
            assert_true(t->rid == (uint64_t)i * 1000003u);
            assert_int_equal(t->index, i % 16);
            assert_int_equal(t->lp.token_id, i * 7);
            float want = i == 3 ? -INFINITY : i % 3 == 0 ? -0.25f * (float)(i % 5) : 0.0f;
            if (!(t->lp.logprob == want))
                fail_msg("token %d: logprob %g, expected %g", i, t->lp.logprob, want);
            int n_top = i % 3 == 0 ? i % 21 : 0;
            assert_int_equal(t->lp.n_top, n_top);
            for (int k = 0; k < n_top; k++) {
                assert_int_equal(t->lp.top_ids[k], k + i);
                assert_true(t->lp.top_logprobs[k] == -(float)k);
            }
        }
        assert_int_equal(m.n_finishes, 2);
        assert_true(m.finishes[0].rid == 5);
        assert_int_equal(m.finishes[0].index, 2);
        assert_int_equal(m.finishes[0].reason, 1);
        assert_int_equal(m.finishes[0].n_prompt, 10);
        assert_int_equal(m.finishes[0].n_generated, 20);
        assert_true(m.finishes[0].spec.proposed == 0 && m.finishes[0].spec.accepted == 0 &&
                    m.finishes[0].spec.verifications == 0);
        assert_true(m.finishes[1].rid == 6 && m.finishes[1].n_generated == 40);
        assert_true(m.finishes[1].spec.proposed == UINT64_MAX - 1 &&
                    m.finishes[1].spec.accepted == 77 && m.finishes[1].spec.verifications == 19);
        assert_load_equal(&m.load, &l);
    }
    /* bad entries are refused at the source */
    wp_token bad = {.index = 16};
    assert_int_equal(wp_step_add_token(e, &bad), DERAS_EINVAL);
    bad = (wp_token){.lp = {.token_id = 1, .logprob = NAN}};
    assert_int_equal(wp_step_add_token(e, &bad), DERAS_EINVAL);
    bad = (wp_token){.lp = {.token_id = -1}};
    assert_int_equal(wp_step_add_token(e, &bad), DERAS_EINVAL);
    bad = (wp_token){.lp = {.token_id = 1, .n_top = 21}};
    assert_int_equal(wp_step_add_token(e, &bad), DERAS_EINVAL);
    wp_finish badf = {.reason = 3};
    assert_int_equal(wp_step_add_finish(e, &badf), DERAS_EINVAL);
    badf = (wp_finish){.spec.proposed = 4, .spec.accepted = 5, .spec.verifications = 1};
    assert_int_equal(wp_step_add_finish(e, &badf), DERAS_EINVAL);
    wp_encoder_destroy(&e);
    wp_decoder_destroy(&d);
}

typedef struct vcase {
    const char *frame;
    enum proto_error_code code;
    const char *msg;
} vcase;

#define LOAD "load: {phase: \"ready\", running: 0, waiting: 0, queued_tokens: 0, " \
             "running_tokens: 0, "                                                  \
             "kv_blocks_free: 0, kv_blocks_total: 0, tokens_per_s: 0, steps: 0, "   \
             "preemptions: 0, prefix_hit_tokens: 0, prefix_query_tokens: 0, "       \
             "prompt_tokens: 0, generated_tokens: 0}"
#define HELLO "type: \"hello\", v: 1, name: \"w0\", device: \"cpu\", model: \"m\", " \
              "vocab_size: 10, max_model_len: 100, tp_size: 1, kv_blocks_total: 8, "  \
              "block_size: 16, max_seqs: 4"
#define SUBMIT "type: \"submit\", rid: 1, max_tokens: 5, n: 1, top_k: 0, logprobs: 0, "  \
               "temperature: 1, top_p: 1, min_p: 0, repetition_penalty: 1, "           \
               "presence_penalty: 0, frequency_penalty: 0, seed: 0, stop_token_ids: [], " \
               "ignore_eos: false"
#define STEP "type: \"step\", " LOAD ", finishes: [], "

static const vcase cases[] = {
    {"{" HELLO ", pid: 1}", PE_NONE, ""},
    {"{" HELLO "}", PE_MISSING_FIELD, "pid is required in hello"},
    {"{" HELLO ", pid: 1, v: 1}", PE_INVALID_FIELD, "duplicate key 'v'"},
    {"{type: \"hello\", v: 2}", PE_UNSUPPORTED_VERSION, "v must be 1, got 2"},
    {"{type: \"hello\", name: \"w\"}", PE_MISSING_FIELD, "v is required in hello"},
    {"{" HELLO ", pid: -1}", PE_VALUE_OUT_OF_RANGE, "pid must be in [0, 2147483647], got -1"},
    {"{" HELLO ", pid: 1, extra: 1}", PE_INVALID_FIELD, "unknown key 'extra' in hello"},
    {"{type: \"hello\", v: 1, name: str(65)}", PE_LIMIT_EXCEEDED, "name must be 1..64 bytes, got 65"},
    {"{type: \"hello\", v: 1, model: str(256)}", PE_LIMIT_EXCEEDED, "model must be 1..255 bytes"},
    {"{type: \"hello\", v: 1, device: \"cu\\xffda\"}", PE_INVALID_UTF8, "device is not valid UTF-8"},
    {"{type: \"hello\", v: 1, spec: str(16)}", PE_LIMIT_EXCEEDED, "spec must be 1..15 bytes"},
    {"{type: \"hello\", v: 1, vocab_size: 0}", PE_VALUE_OUT_OF_RANGE, "vocab_size must be in [1, "},
    {"{type: \"welcome\", v: 1, heartbeat_ms: 0}", PE_VALUE_OUT_OF_RANGE, "heartbeat_ms"},
    {"{type: \"welcome\", heartbeat_ms: 100}", PE_MISSING_FIELD, "v is required in welcome"},
    {"{type: \"refuse\", reason: str(256)}", PE_LIMIT_EXCEEDED, "reason must be 0..255 bytes"},
    {"{type: \"heartbeat\", load: {running: 1}}", PE_MISSING_FIELD, "load.phase is required"},
    {"{type: \"heartbeat\", load: {phase: \"ready\", running: 1}}", PE_MISSING_FIELD,
     "load.waiting is required"},
    {"{type: \"heartbeat\", load: []}", PE_INVALID_FIELD, "heartbeat.load must be a map, got array"},
    {"{type: \"heartbeat\", load: {running: 1, bogus: 2}}", PE_INVALID_FIELD, "unknown key 'bogus' in load"},
    {"{type: \"heartbeat\", load: {tokens_per_s: inf}}", PE_VALUE_OUT_OF_RANGE, "load.tokens_per_s"},
    {"{type: \"heartbeat\", load: {steps: -1}}", PE_VALUE_OUT_OF_RANGE, "load.steps"},
    {"{type: \"heartbeat\", load: {phase: \"asleep\"}}", PE_INVALID_FIELD,
     "load.phase must be \"starting\", \"ready\" or \"draining\""},
    {"{type: \"heartbeat\", load: {phase: 1}}", PE_INVALID_FIELD, "load.phase must be a string, got int"},
    {"{type: \"heartbeat\", " LOAD "}", PE_NONE, ""},
    {"{" SUBMIT ", prompt_ids: b\"\\x01\\x00\\x00\\x00\"}", PE_NONE, ""},
    {"{" SUBMIT ", prompt_ids: [1, 2]}", PE_INVALID_FIELD, "prompt_ids must be a bin of little-endian int32, got array"},
    {"{" SUBMIT ", prompt_ids: b\"\\x01\\x00\\x00\"}", PE_INVALID_FIELD, "got 3 bytes"},
    {"{" SUBMIT ", prompt_ids: b\"\"}", PE_INVALID_FIELD, "got 0 bytes"},
    {"{" SUBMIT ", prompt_ids: b\"\\x01\\x00\\x00\\x00\\xff\\xff\\xff\\xff\"}",
     PE_TOKEN_OUT_OF_RANGE, "prompt_ids[1] must be in [0, 2147483647], got -1"},
    {"{" SUBMIT "}", PE_MISSING_FIELD, "prompt_ids is required in submit"},
    {"{" SUBMIT ", prompt_ids: bin(4), min_tokens: 2, logit_bias: {3: -1.5}}", PE_NONE, ""},
    {"{" SUBMIT ", prompt_ids: bin(4), logit_bias: {3: 200}}", PE_VALUE_OUT_OF_RANGE,
     "logit_bias[3] must be in [-100, 100], got 200"},
    {"{" SUBMIT ", prompt_ids: bin(4), min_tokens: -1}", PE_VALUE_OUT_OF_RANGE,
     "min_tokens must be in [0, 2147483647], got -1"},
    {"{" SUBMIT ", prompt_ids: bin(4), temperature: 1}", PE_INVALID_FIELD, "duplicate key 'temperature'"},
    {"{type: \"submit\", rid: -1}", PE_VALUE_OUT_OF_RANGE, "rid must be in [0, 18446744073709551615], got -1"},
    {"{type: \"submit\", top_p: 0}", PE_VALUE_OUT_OF_RANGE, "top_p must be in (0, 1], got 0"},
    {"{type: \"submit\", n: 17}", PE_VALUE_OUT_OF_RANGE, "n must be in [1, 16], got 17"},
    {"{type: \"submit\", stop_token_ids: [-1]}", PE_TOKEN_OUT_OF_RANGE, "stop_token_ids[0]"},
    {"{type: \"submit\", temperature: nan}", PE_VALUE_OUT_OF_RANGE, "temperature"},
    {"{type: \"abort\", rid: 1.5}", PE_INVALID_FIELD, "rid must be an integer, got float"},
    {"{type: \"abort\"}", PE_MISSING_FIELD, "rid is required in abort"},
    {"{type: \"reject\", rid: 1, code: \"busy\", message: \"\\xc3\"}", PE_INVALID_UTF8, "message"},
    {"{type: \"drain\", rid: 1}", PE_INVALID_FIELD, "unknown key 'rid' in drain"},
    {"{type: \"bye\"}", PE_MISSING_FIELD, "reason is required in bye"},
    {"{type: \"bye\", reason: str(256)}", PE_LIMIT_EXCEEDED, "reason must be 0..255 bytes"},
    {"{type: \"bye\", reason: \"x\", rid: 1}", PE_INVALID_FIELD, "unknown key 'rid' in bye"},
    {"{" STEP "tokens: [[1, 0, 5]]}", PE_NONE, ""},
    {"{" STEP "tokens: [[1, 0, 5, -0.5, [[3, -1.0], [4, -2]]]]}", PE_NONE, ""},
    {"{" STEP "tokens: [[1, 0]]}", PE_INVALID_FIELD, "tokens[0] must be [rid, index, token_id"},
    {"{" STEP "tokens: [[1, 0, 5, -0.5]]}", PE_INVALID_FIELD, "got 4 elements"},
    {"{" STEP "tokens: [[1, 0, 5], [1, 16, 5]]}", PE_VALUE_OUT_OF_RANGE, "tokens[1].index must be in [0, 15], got 16"},
    {"{" STEP "tokens: [[1, 0, -5]]}", PE_TOKEN_OUT_OF_RANGE, "tokens[0].token_id"},
    {"{" STEP "tokens: [[1, 0, 5, nan, []]]}", PE_VALUE_OUT_OF_RANGE, "tokens[0].logprob"},
    {"{" STEP "tokens: [[1, 0, 5, inf, []]]}", PE_VALUE_OUT_OF_RANGE, "tokens[0].logprob"},
    {"{" STEP "tokens: [[1, 0, 5, 0, [[1, 0], [2]]]]}", PE_INVALID_FIELD, "tokens[0].top[1] must be [id, logprob]"},
    {"{" STEP "tokens: [[1, 0, 5, 0, ids(21)]]}", PE_LIMIT_EXCEEDED, "tokens[0].top may have at most 20"},
    {"{" STEP "tokens: [[1, 0, 5, 0, [[-1, 0]]]]}", PE_TOKEN_OUT_OF_RANGE, "tokens[0].top[0].id"},
    {"{" STEP "tokens: {}}", PE_INVALID_FIELD, "tokens must be an array, got map"},
    {"{type: \"step\", tokens: [], finishes: [[1, 0, 3, 0, 0]]}", PE_VALUE_OUT_OF_RANGE, "finishes[0].reason must be in [0, 2], got 3"},
    {"{type: \"step\", tokens: [], finishes: [[1, 0, 0, 0]]}", PE_INVALID_FIELD, "finishes[0] must be"},
    {"{type: \"step\", tokens: [], finishes: [[1, 0, 0, 0, -1]]}", PE_VALUE_OUT_OF_RANGE, "finishes[0].n_generated"},
    {"{type: \"step\", tokens: [], finishes: [[1, 0, 0, 0, 1, 2, 1]]}", PE_INVALID_FIELD, "finishes[0] must be"},
    {"{type: \"step\", tokens: [], finishes: [[1, 0, 0, 0, 1, 2, 3, 1]]}", PE_VALUE_OUT_OF_RANGE, "spec_accepted and spec_verifications must not exceed"},
    {"{type: \"step\", tokens: [], finishes: [[1, 0, 0, 0, 1, 2, -1, 1]]}", PE_VALUE_OUT_OF_RANGE, "finishes[0].spec_accepted"},
    {"{type: \"step\", tokens: [], finishes: []}", PE_MISSING_FIELD, "load is required in step"},
    {"{type: \"stepp\"}", PE_UNKNOWN_TYPE, "unknown message type 'stepp'"},
    {"{type: \"request\", id: \"x\", prompt: \"y\"}", PE_UNKNOWN_TYPE, "'request'"},
    {"[]", PE_MALFORMED, "a message must be a map"},
};

static void hostile_worker_frames_are_refused(void **state)
{
    (void)state;
    wp_decoder_t *d = NULL;
    assert_int_equal(wp_decoder_new(0, &d), DERAS_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wp_msg m;
        proto_error err;
        mpt_pack(&sb, cases[i].frame);
        int rc = wp_decode(d, sb.data, sb.size, &m, &err);
        bool ok = cases[i].code == PE_NONE
                      ? rc == DERAS_OK
                      : rc == DERAS_EFORMAT && err.code == cases[i].code &&
                            strstr(err.message, cases[i].msg);
        if (!ok)
            fail_msg("%s\n  expected %s \"...%s...\"\n  got rc %d, %s \"%s\"", cases[i].frame,
                     proto_error_name(cases[i].code), cases[i].msg, rc,
                     proto_error_name(err.code), err.message);
    }
    wp_decoder_destroy(&d);
}

static void reject_codes_survive_and_unknown_ones_are_internal(void **state)
{
    (void)state;
    wp_decoder_t *d = NULL;
    assert_int_equal(wp_decoder_new(0, &d), DERAS_OK);
    wp_encoder_t *e = NULL;
    assert_int_equal(wp_encoder_new(&e), DERAS_OK);
    const void *buf;
    size_t len;
    wp_msg m;
    for (int c = 1; c < PE_N_CODES; c++) {
        assert_int_equal(wp_encode_reject(e, 1, c, "m", &buf, &len), DERAS_OK);
        decode_ok(d, buf, len, &m);
        assert_int_equal(m.code, c);
    }
    mpt_pack(&sb, "{type: \"reject\", rid: 1, code: \"novel\", message: \"\"}");
    decode_ok(d, sb.data, sb.size, &m);
    assert_int_equal(m.code, PE_INTERNAL);
    /* over-long free text is cut at a character boundary, so it always decodes */
    char long_reason[600];
    memset(long_reason, 0, sizeof long_reason);
    for (int i = 0; i + 2 < 599; i += 2)
        memcpy(long_reason + i, "\xc3\xa9", 2); /* é */
    assert_int_equal(wp_encode_refuse(e, long_reason, &buf, &len), DERAS_OK);
    decode_ok(d, buf, len, &m);
    assert_int_equal(strlen(m.text), 254);
    wp_encoder_destroy(&e);
    wp_decoder_destroy(&d);
}

static void truncated_step_at_every_length_is_malformed(void **state)
{
    (void)state;
    wp_decoder_t *d = NULL;
    assert_int_equal(wp_decoder_new(0, &d), DERAS_OK);
    wp_encoder_t *e = NULL;
    assert_int_equal(wp_encoder_new(&e), DERAS_OK);
    wp_load l = sample_load();
    wp_step_begin(e);
    wp_token t = {.rid = 9, .index = 1, .lp = {.token_id = 3, .logprob = -1, .n_top = 2,
                                               .top_ids = {3, 4}, .top_logprobs = {-1, -2}}};
    assert_int_equal(wp_step_add_token(e, &t), DERAS_OK);
    wp_finish f = {.rid = 9, .index = 1, .reason = 0, .n_prompt = 4, .n_generated = 1};
    assert_int_equal(wp_step_add_finish(e, &f), DERAS_OK);
    const void *buf;
    size_t len;
    assert_int_equal(wp_step_end(e, &l, &buf, &len), DERAS_OK);
    for (size_t n = 0; n < len; n++) {
        char *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        wp_msg m;
        proto_error err;
        int rc = wp_decode(d, cut, n, &m, &err);
        if (rc != DERAS_EFORMAT || err.code != PE_MALFORMED)
            fail_msg("prefix %zu of %zu: expected malformed, got %d %s", n, len, rc,
                     proto_error_name(err.code));
        free(cut);
    }
    /* the frame cap */
    wp_decoder_t *small = NULL;
    assert_int_equal(wp_decoder_new(len - 1, &small), DERAS_OK);
    wp_msg m;
    proto_error err;
    assert_int_equal(wp_decode(small, buf, len, &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_MESSAGE_TOO_LARGE);
    static const unsigned char lie[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(wp_decode(d, lie, sizeof lie, &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_MALFORMED);
    wp_decoder_destroy(&small);
    wp_encoder_destroy(&e);
    wp_decoder_destroy(&d);
}

static void mutated_worker_frames_decode_cleanly_or_fail(void **state)
{
    (void)state;
    wp_decoder_t *d = NULL;
    assert_int_equal(wp_decoder_new(0, &d), DERAS_OK);
    wp_encoder_t *e = NULL;
    assert_int_equal(wp_encoder_new(&e), DERAS_OK);
    static const int32_t prompt[] = {5, 6, 7};
    wp_submit s = {.rid = 3, .prompt_ids = prompt, .n_prompt = 3, .params.max_tokens = 4,
                   .params.n = 1,
                   .params.sp.temperature = 1, .params.sp.top_p = 1,
                   .params.sp.repetition_penalty = 1};
    const void *buf;
    size_t len;
    assert_int_equal(wp_encode_submit(e, &s, &buf, &len), DERAS_OK);
    unsigned char base[512], frame[512];
    assert_true(len <= sizeof base);
    memcpy(base, buf, len);
    uint64_t seed = 777;
    for (int it = 0; it < 100000; it++) {
        memcpy(frame, base, len);
        for (int k = 0; k < 2; k++)
            frame[test_rng_next(&seed) % len] = (unsigned char)test_rng_next(&seed);
        wp_msg m;
        proto_error err;
        int rc = wp_decode(d, frame, len, &m, &err);
        if (rc != DERAS_OK) {
            assert_int_equal(rc, DERAS_EFORMAT);
            assert_true(err.code > PE_NONE && err.code < PE_N_CODES);
        } else {
            assert_int_equal(m.type, WP_SUBMIT);
        }
    }
    wp_encoder_destroy(&e);
    wp_decoder_destroy(&d);
}

int main(void)
{
    msgpack_sbuffer_init(&sb);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_message_round_trips),
        cmocka_unit_test(submit_carries_min_tokens_and_logit_bias_when_set),
        cmocka_unit_test(step_carries_what_was_added),
        cmocka_unit_test(hostile_worker_frames_are_refused),
        cmocka_unit_test(reject_codes_survive_and_unknown_ones_are_internal),
        cmocka_unit_test(truncated_step_at_every_length_is_malformed),
        cmocka_unit_test(mutated_worker_frames_decode_cleanly_or_fail),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}
