/* SPDX-License-Identifier: Apache-2.0 */
/* test_protocol.c - the client protocol: every message survives encode -> decode, every
 * validation rule answers with its stable code and a message naming the field and the
 * bound, replies are checked as strictly as requests. Hostile frames are
 * test_protocol_hostile.c's. Frames are written as text (mp_text.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/wire/msgpack_scan.h"
#include "common/wire/protocol.h"
#include "common/base/status.h"
#include "mp_text.h"
#include "proto_cases.h"
#include "test_util.h"

/* ---- round trips ---- */

static void request_round_trips_with_every_field(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    static const int32_t stop_ids[] = {2, 7};
    proto_request r = {
        .prompt = "Hello, wörld", .prompt_len = strlen("Hello, wörld"),
        .params.max_tokens = 100, .params.n = 3, .params.sp.top_k = 40, .params.sp.n_logprobs = 5,
        .stream = true,
        .params.ignore_eos = true, .add_special_tokens = false, .has_seed = true,
        .params.sp.temperature = 0.7f, .params.sp.top_p = 0.9f, .params.sp.min_p = 0.05f,
        .params.sp.repetition_penalty = 1.1f,
        .params.sp.presence_penalty = -0.5f, .params.sp.frequency_penalty = 1.5f,
        .params.seed = UINT64_MAX,
        .n_stops = 2, .stops = {"\n\n", "User:"}, .stop_lens = {2, 5},
        .params.n_stop_ids = 2, .deadline_ms = 30000, .params.spec_tokens = 5,
    };
    memcpy(r.params.stop_ids, stop_ids, sizeof stop_ids);
    strcpy(r.id, "req-1");
    const void *buf;
    size_t len;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    proto_client_msg m;
    proto_error err;
    int rc = proto_decode_client(d, buf, len, &m, &err);
    if (rc != DERAS_OK)
        fail_msg("expected the encoded request to decode, got %s: %s",
                 proto_error_name(err.code), err.message);
    const proto_request *g = &m.req;
    assert_int_equal(m.type, PROTO_REQUEST);
    assert_string_equal(g->id, "req-1");
    assert_int_equal(g->prompt_len, r.prompt_len);
    assert_memory_equal(g->prompt, r.prompt, r.prompt_len);
    assert_null(g->prompt_ids);
    assert_int_equal(g->params.max_tokens, 100);
    assert_int_equal(g->params.n, 3);
    assert_int_equal(g->params.sp.top_k, 40);
    assert_int_equal(g->params.sp.n_logprobs, 5);
    assert_true(g->stream && g->params.ignore_eos && !g->add_special_tokens && g->has_seed);
    assert_true(g->params.sp.temperature == 0.7f && g->params.sp.top_p == 0.9f &&
                g->params.sp.min_p == 0.05f);
    assert_true(g->params.sp.repetition_penalty == 1.1f && g->params.sp.presence_penalty == -0.5f &&
                g->params.sp.frequency_penalty == 1.5f);
    assert_true(g->params.seed == UINT64_MAX);
    assert_int_equal(g->n_stops, 2);
    assert_int_equal(g->stop_lens[1], 5);
    assert_memory_equal(g->stops[1], "User:", 5);
    assert_int_equal(g->params.n_stop_ids, 2);
    assert_int_equal(g->params.stop_ids[1], 7);
    assert_int_equal(g->deadline_ms, 30000);
    assert_int_equal(g->params.spec_tokens, 5);

    /* num_speculative_tokens 0 on the wire turns speculation off (-1 in the struct) */
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", "
                                    "num_speculative_tokens: 0}", &m, &err), DERAS_OK);
    assert_int_equal(m.req.params.spec_tokens, -1);
    r.params.spec_tokens = -1;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_client(d, buf, len, &m, &err), DERAS_OK);
    assert_int_equal(m.req.params.spec_tokens, -1);
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", "
                                    "num_speculative_tokens: 17}", &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_VALUE_OUT_OF_RANGE);

    /* prompt_ids instead of text; the decoded pointers belong to the decoder. */
    static const int32_t ids[] = {1, 15043, 0, 2147483647};
    proto_request q = {.prompt_ids = ids, .n_prompt_ids = 4, .params.max_tokens = 256,
                       .params.n = 1,
                       .params.sp.temperature = 1, .params.sp.top_p = 1,
                       .params.sp.repetition_penalty = 1,
                       .add_special_tokens = true};
    strcpy(q.id, "ids");
    assert_int_equal(proto_encode_request(e, &q, &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_client(d, buf, len, &m, &err), DERAS_OK);
    assert_null(m.req.prompt);
    assert_int_equal(m.req.n_prompt_ids, 4);
    assert_memory_equal(m.req.prompt_ids, ids, sizeof ids);
    assert_true(m.req.prompt_ids != ids);
    proto_encoder_destroy(&e);
    proto_decoder_destroy(&d);
    assert_null(e);
    assert_null(d);
}

/* Structured output: json_schema as a map, a boolean or JSON text, regex, grammar and
 * json_object round trip; at most one; JSON text that is not a schema is invalid_grammar. */
static void structured_output_fields(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    proto_client_msg m;
    proto_error err;
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", json_schema: "
                                    "{type: \"object\", properties: {a: {type: \"integer\"}}}}",
                                 &m, &err), DERAS_OK);
    assert_true(json_is_object(m.req.json_schema));
    const json_t *a = json_object_get(json_object_get(m.req.json_schema, "properties"), "a");
    assert_string_equal(json_string_value(json_object_get(a, "type")), "integer");
    /* re-encoded, it decodes the same */
    proto_request r = m.req;
    json_t *schema = json_incref(m.req.json_schema);
    r.json_schema = schema;
    const void *buf;
    size_t len;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_client(d, buf, len, &m, &err), DERAS_OK);
    assert_true(json_equal(m.req.json_schema, schema));
    json_decref(schema);
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", json_schema: "
                                    "\"{\\\"type\\\": \\\"string\\\"}\"}", &m, &err), DERAS_OK);
    assert_string_equal(json_string_value(json_object_get(m.req.json_schema, "type")), "string");
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", json_schema: "
                                    "true}", &m, &err), DERAS_OK);
    assert_true(json_is_true(m.req.json_schema));
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", json_schema: "
                                    "\"{\\\"type\\\": \"}", &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_INVALID_GRAMMAR);
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", json_schema: 3}",
                                 &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_INVALID_FIELD);
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", regex: "
                                    "\"[0-9]+\"}", &m, &err), DERAS_OK);
    assert_int_equal(m.req.regex_len, 6);
    assert_memory_equal(m.req.regex, "[0-9]+", 6);
    r = m.req;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_client(d, buf, len, &m, &err), DERAS_OK);
    assert_memory_equal(m.req.regex, "[0-9]+", 6);
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", messages: [{role: \"user\", "
                                    "content: \"x\"}], grammar: \"root ::= \\\"a\\\"\", "
                                    "json_object: false}", &m, &err), DERAS_OK);
    assert_int_equal(m.req.grammar_len, 12);
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", json_object: "
                                    "true}", &m, &err), DERAS_OK);
    assert_true(m.req.json_object);
    r = m.req;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_client(d, buf, len, &m, &err), DERAS_OK);
    assert_true(m.req.json_object);
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", json_object: "
                                    "true, regex: \"a\"}", &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_INVALID_FIELD);
    assert_non_null(strstr(err.message, "at most one"));
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"s\", prompt: \"x\", grammar: \"\"}",
                                 &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_INVALID_FIELD);
    proto_encoder_destroy(&e);
    proto_decoder_destroy(&d);
}

/* min_tokens and a full logit-bias map survive encode -> decode (with a full-size prompt:
 * the scan bound leaves room for the map), and one entry too many is a cap. */
static void min_tokens_and_logit_bias_round_trip(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    proto_limits lim;
    proto_limits_default(&lim);
    int32_t *ids = calloc((size_t)lim.max_prompt_ids, sizeof *ids);
    proto_request r;
    memset(&r, 0, sizeof r);
    req_params_init(&r.params);
    r.add_special_tokens = true;
    r.prompt_ids = ids;
    r.n_prompt_ids = lim.max_prompt_ids;
    r.params.max_tokens = 64;
    r.params.sp.min_tokens = 64;
    logit_bias *b = &r.params.sp.logit_bias;
    for (int i = 0; i < SAMPLING_MAX_LOGIT_BIAS; i++)
        assert_int_equal(logit_bias_add(b, 7 * i, i % 2 ? 100.0f : -0.25f * (float)i), DERAS_OK);
    strcpy(r.id, "bias");
    const void *buf;
    size_t len;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    proto_client_msg m;
    proto_error err;
    if (proto_decode_client(d, buf, len, &m, &err) != DERAS_OK)
        fail_msg("%s: %s", proto_error_name(err.code), err.message);
    const sampling_params *g = &m.req.params.sp;
    assert_int_equal(g->min_tokens, 64);
    assert_int_equal(g->logit_bias.n, SAMPLING_MAX_LOGIT_BIAS);
    assert_memory_equal(g->logit_bias.ids, b->ids, sizeof b->ids);
    assert_memory_equal(g->logit_bias.bias, b->bias, sizeof b->bias);
    /* 301 entries */
    char *frame = malloc(16384);
    int at = snprintf(frame, 16384, "{" REQ "prompt: \"x\", logit_bias: {");
    for (int i = 0; i <= SAMPLING_MAX_LOGIT_BIAS; i++)
        at += snprintf(frame + at, (size_t)(16384 - at), "%s%d: 1", i ? ", " : "", i);
    snprintf(frame + at, (size_t)(16384 - at), "}}");
    check_case(d, frame, PE_LIMIT_EXCEEDED, "logit_bias may have at most 300 entries, got 301");
    free(frame);
    free(ids);
    proto_encoder_destroy(&e);
    proto_decoder_destroy(&d);
}

static void request_defaults_apply_to_omitted_fields(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_client_msg m;
    proto_error err;
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"a\", prompt: \"\"}", &m, &err),
                     DERAS_OK);
    const proto_request *r = &m.req;
    assert_int_equal(r->params.max_tokens, 256);
    assert_int_equal(r->params.n, 1);
    assert_false(r->stream);
    assert_true(r->params.sp.temperature == 1 && r->params.sp.top_p == 1 &&
                r->params.sp.min_p == 0);
    assert_int_equal(r->params.sp.top_k, 0);
    assert_true(r->params.sp.repetition_penalty == 1 && r->params.sp.presence_penalty == 0 &&
                r->params.sp.frequency_penalty == 0);
    assert_false(r->has_seed);
    assert_int_equal(r->params.sp.n_logprobs, 0);
    assert_int_equal(r->deadline_ms, 0);
    assert_int_equal(r->params.spec_tokens, 0); /* the worker's default */
    assert_true(r->add_special_tokens);
    assert_false(r->params.ignore_eos);
    assert_int_equal(r->n_stops, 0);
    assert_int_equal(r->params.n_stop_ids, 0);
    assert_int_equal(r->params.sp.min_tokens, 0);
    assert_int_equal(r->params.sp.logit_bias.n, 0);
    assert_non_null(r->prompt);
    assert_int_equal(r->prompt_len, 0);
    /* Integers are accepted for float fields; "v" may be given. */
    assert_int_equal(decode_text(d, "{v: 1, type: \"request\", id: \"b\", prompt: \"x\", "
                                    "temperature: 0, top_p: 1, repetition_penalty: 2}",
                                 &m, &err),
                     DERAS_OK);
    assert_true(m.req.params.sp.temperature == 0 && m.req.params.sp.repetition_penalty == 2);
    proto_decoder_destroy(&d);
}

static void cancel_and_ping_round_trip(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    const void *buf;
    size_t len;
    proto_client_msg m;
    proto_error err;
    assert_int_equal(proto_encode_cancel(e, "req-9", &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_client(d, buf, len, &m, &err), DERAS_OK);
    assert_int_equal(m.type, PROTO_CANCEL);
    assert_string_equal(m.cancel_id, "req-9");
    assert_int_equal(decode_text(d, "{type: \"ping\"}", &m, &err), DERAS_OK);
    assert_int_equal(m.type, PROTO_PING);
    assert_int_equal(decode_text(d, "{type: \"ping\", v: 1}", &m, &err), DERAS_OK);
    proto_encoder_destroy(&e);
    proto_decoder_destroy(&d);
}

static void replies_round_trip(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    const void *buf;
    size_t len;
    proto_server_msg m;
    proto_error err;
    static const int32_t ids[] = {11, 22, 33};
    proto_logprob lps[3] = {{.token_id = 11, .logprob = -0.5f, .n_top = 2,
                             .top_ids = {11, 12}, .top_logprobs = {-0.5f, -1.5f}},
                            {.token_id = 22, .logprob = -0.1f},
                            {.token_id = 33, .logprob = -2.0f, .n_top = 1, .top_ids = {1},
                             .top_logprobs = {-0.2f}}};

    /* chunk, with and without logprobs */
    assert_int_equal(proto_encode_chunk(e, "c1", 2, ids, 3, "abc", 3, lps, &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_server(d, buf, len, &m, &err), DERAS_OK);
    assert_int_equal(m.type, PROTO_CHUNK);
    assert_string_equal(m.id, "c1");
    assert_int_equal(m.index, 2);
    assert_int_equal(m.n_token_ids, 3);
    assert_memory_equal(m.token_ids, ids, sizeof ids);
    assert_int_equal(m.text_len, 3);
    assert_memory_equal(m.text, "abc", 3);
    assert_int_equal(proto_encode_chunk(e, "c1", 0, ids, 0, "", 0, NULL, &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_server(d, buf, len, &m, &err), DERAS_OK);
    assert_int_equal(m.n_token_ids, 0);
    assert_int_equal(m.text_len, 0);

    /* final of a stream (no text), then of a non-stream request with everything */
    proto_usage u = {.prompt_tokens = 7, .completion_tokens = 3, .queue_ms = 0.25,
                     .ttft_ms = 12.5, .total_ms = 40};
    assert_int_equal(proto_encode_final(e, "f1", 0, FINISH_STOP, NULL, &u, NULL, 0, NULL, 0, NULL,
                                        &buf, &len),
                     DERAS_OK);
    assert_int_equal(proto_decode_server(d, buf, len, &m, &err), DERAS_OK);
    assert_int_equal(m.type, PROTO_FINAL);
    assert_int_equal(m.finish, FINISH_STOP);
    assert_null(m.abort_reason);
    assert_null(m.text);
    assert_int_equal(m.usage.prompt_tokens, 7);
    assert_int_equal(m.usage.completion_tokens, 3);
    assert_true(m.usage.queue_ms == 0.25 && m.usage.ttft_ms == 12.5 && m.usage.total_ms == 40);
    assert_true(m.usage.spec.proposed == 0 && m.usage.spec.accepted == 0 &&
                m.usage.spec.verifications == 0);
    /* a sample that speculated carries its counters */
    proto_usage us = u;
    us.spec.proposed = 12;
    us.spec.accepted = 9;
    us.spec.verifications = 4;
    assert_int_equal(proto_encode_final(e, "f1", 0, FINISH_LENGTH, NULL, &us, NULL, 0, NULL, 0, NULL,
                                        &buf, &len),
                     DERAS_OK);
    assert_int_equal(proto_decode_server(d, buf, len, &m, &err), DERAS_OK);
    assert_true(m.usage.spec.proposed == 12 && m.usage.spec.accepted == 9 &&
                m.usage.spec.verifications == 4 && m.usage.completion_tokens == 3);
    assert_int_equal(proto_encode_final(e, "f2", 1, FINISH_ABORT, "client cancelled", &u, "whole", 5,
                                        ids, 3, lps, &buf, &len),
                     DERAS_OK);
    int rc = proto_decode_server(d, buf, len, &m, &err);
    if (rc != DERAS_OK)
        fail_msg("final: %s", err.message);
    assert_int_equal(m.finish, FINISH_ABORT);
    assert_string_equal(m.abort_reason, "client cancelled");
    assert_int_equal(m.text_len, 5);
    assert_int_equal(m.n_token_ids, 3);
    assert_int_equal(m.index, 1);

    /* error: every code survives; the id may be empty */
    for (int c = 1; c < PE_N_CODES; c++) {
        assert_int_equal(proto_encode_error(e, c % 2 ? "x" : "", c, "why", &buf, &len), DERAS_OK);
        assert_int_equal(proto_decode_server(d, buf, len, &m, &err), DERAS_OK);
        assert_int_equal(m.type, PROTO_ERROR);
        assert_int_equal(m.code, c);
        assert_string_equal(m.message, "why");
        assert_string_equal(m.id, c % 2 ? "x" : "");
    }
    mpt_pack(&sb, "{type: \"error\", id: \"\", code: \"brand_new_code\", message: \"m\"}");
    assert_int_equal(proto_decode_server(d, sb.data, sb.size, &m, &err), DERAS_OK);
    assert_int_equal(m.code, PE_INTERNAL);
    /* A message that is not valid UTF-8 is cut before the bad byte, never sent broken. */
    assert_int_equal(proto_encode_error(e, "x", PE_INTERNAL, "bad \xff tail", &buf, &len),
                     DERAS_OK);
    assert_int_equal(proto_decode_server(d, buf, len, &m, &err), DERAS_OK);
    assert_string_equal(m.message, "bad ");

    /* pong */
    proto_worker_status w[2] = {{.name = "w0", .state = "ready", .running = 3, .waiting = 1,
                                 .kv_blocks_free = 10, .kv_blocks_total = 20, .served = 99},
                                {.name = "w1", .state = "draining"}};
    assert_int_equal(proto_encode_pong(e, w, 2, &buf, &len), DERAS_OK);
    assert_int_equal(proto_decode_server(d, buf, len, &m, &err), DERAS_OK);
    assert_int_equal(m.type, PROTO_PONG);
    assert_int_equal(m.n_workers, 2);
    assert_string_equal(m.workers[0].name, "w0");
    assert_string_equal(m.workers[1].state, "draining");
    assert_int_equal(m.workers[0].running, 3);
    assert_int_equal(m.workers[0].kv_blocks_total, 20);
    assert_true(m.workers[0].served == 99);
    proto_encoder_destroy(&e);
    proto_decoder_destroy(&d);
}

/* ---- validation: one case per rule ---- */

static const vcase request_cases[] = {
    /* ranges of the sampling parameters */
    {"{" REQ "prompt: \"x\", temperature: 250}", PE_VALUE_OUT_OF_RANGE,
     "temperature must be in [0, 100], got 250"},
    {"{" REQ "prompt: \"x\", temperature: -0.5}", PE_VALUE_OUT_OF_RANGE, "temperature"},
    {"{" REQ "prompt: \"x\", temperature: \"hot\"}", PE_INVALID_FIELD,
     "temperature must be a number, got str"},
    {"{" REQ "prompt: \"x\", temperature: nan}", PE_VALUE_OUT_OF_RANGE, "got nan"},
    {"{" REQ "prompt: \"x\", temperature: inf}", PE_VALUE_OUT_OF_RANGE, "got inf"},
    {"{" REQ "prompt: \"x\", top_p: -inf}", PE_VALUE_OUT_OF_RANGE, "top_p"},
    {"{" REQ "prompt: \"x\", top_p: 0}", PE_VALUE_OUT_OF_RANGE, "top_p must be in (0, 1], got 0"},
    {"{" REQ "prompt: \"x\", top_p: 1.5f}", PE_VALUE_OUT_OF_RANGE, "top_p"},
    {"{" REQ "prompt: \"x\", top_p: 1e-50}", PE_VALUE_OUT_OF_RANGE, "top_p"},
    {"{" REQ "prompt: \"x\", top_p: nil}", PE_INVALID_FIELD, "top_p must be a number, got nil"},
    {"{" REQ "prompt: \"x\", top_k: -1}", PE_VALUE_OUT_OF_RANGE, "top_k must be in [0, "},
    {"{" REQ "prompt: \"x\", top_k: 1.0}", PE_INVALID_FIELD, "top_k must be an integer, got float"},
    {"{" REQ "prompt: \"x\", min_p: 1.5}", PE_VALUE_OUT_OF_RANGE, "min_p must be in [0, 1]"},
    {"{" REQ "prompt: \"x\", repetition_penalty: 0}", PE_VALUE_OUT_OF_RANGE,
     "repetition_penalty must be in [0.01, 10], got 0"},
    {"{" REQ "prompt: \"x\", repetition_penalty: 10.5}", PE_VALUE_OUT_OF_RANGE,
     "repetition_penalty"},
    {"{" REQ "prompt: \"x\", presence_penalty: 2.5}", PE_VALUE_OUT_OF_RANGE,
     "presence_penalty must be in [-2, 2], got 2.5"},
    {"{" REQ "prompt: \"x\", frequency_penalty: -3}", PE_VALUE_OUT_OF_RANGE,
     "frequency_penalty must be in [-2, 2], got -3"},
    {"{" REQ "prompt: \"x\", seed: -1}", PE_VALUE_OUT_OF_RANGE, "seed must be in [0, "},
    {"{" REQ "prompt: \"x\", min_tokens: -1}", PE_VALUE_OUT_OF_RANGE,
     "min_tokens must be in [0, 2147483647], got -1"},
    {"{" REQ "prompt: \"x\", min_tokens: 1.5}", PE_INVALID_FIELD,
     "min_tokens must be an integer, got float"},
    {"{" REQ "prompt: \"x\", min_tokens: 257}", PE_VALUE_OUT_OF_RANGE,
     "min_tokens must be at most max_tokens (256), got 257"},
    {"{" REQ "prompt: \"x\", max_tokens: 8, min_tokens: 9}", PE_VALUE_OUT_OF_RANGE,
     "min_tokens must be at most max_tokens (8), got 9"},
    {"{" REQ "prompt: \"x\", logit_bias: [1, 2]}", PE_INVALID_FIELD,
     "logit_bias must be a map of token ids to biases, got array"},
    {"{" REQ "prompt: \"x\", logit_bias: {\"5\": 1}}", PE_INVALID_FIELD,
     "logit_bias keys must be an integer, got str"},
    {"{" REQ "prompt: \"x\", logit_bias: {-1: 1}}", PE_TOKEN_OUT_OF_RANGE,
     "logit_bias keys must be in [0, 2147483647], got -1"},
    {"{" REQ "prompt: \"x\", logit_bias: {5: 100.5}}", PE_VALUE_OUT_OF_RANGE,
     "logit_bias[5] must be in [-100, 100], got 100.5"},
    {"{" REQ "prompt: \"x\", logit_bias: {5: nan}}", PE_VALUE_OUT_OF_RANGE, "logit_bias[5]"},
    {"{" REQ "prompt: \"x\", logit_bias: {5: \"up\"}}", PE_INVALID_FIELD,
     "logit_bias[5] must be a number, got str"},
    {"{" REQ "prompt: \"x\", logit_bias: {5: 1, 6: 2, 5: 3}}", PE_INVALID_FIELD,
     "logit_bias has token 5 twice"},
    {"{" REQ "prompt: \"x\", seed: 1.5}", PE_INVALID_FIELD, "seed must be an integer"},
    /* caps */
    {"{" REQ "prompt: \"x\", logprobs: 21}", PE_LIMIT_EXCEEDED, "logprobs must be in [0, 20], got 21"},
    {"{" REQ "prompt: \"x\", logprobs: -1}", PE_VALUE_OUT_OF_RANGE, "logprobs"},
    {"{" REQ "prompt: \"x\", n: 0}", PE_VALUE_OUT_OF_RANGE, "n must be in [1, 16], got 0"},
    {"{" REQ "prompt: \"x\", n: 17}", PE_LIMIT_EXCEEDED, "n must be in [1, 16], got 17"},
    {"{" REQ "prompt: \"x\", max_tokens: 0}", PE_VALUE_OUT_OF_RANGE, "max_tokens must be in [1, 32768], got 0"},
    {"{" REQ "prompt: \"x\", max_tokens: 32769}", PE_LIMIT_EXCEEDED, "max_tokens must be in [1, 32768], got 32769"},
    {"{" REQ "prompt: \"x\", max_tokens: 18446744073709551615}", PE_LIMIT_EXCEEDED,
     "got 18446744073709551615"},
    {"{" REQ "prompt: \"x\", max_tokens: -9223372036854775808}", PE_VALUE_OUT_OF_RANGE,
     "got -9223372036854775808"},
    {"{" REQ "prompt: \"x\", max_tokens: 16.0}", PE_INVALID_FIELD, "max_tokens must be an integer, got float"},
    {"{" REQ "prompt: \"x\", deadline_ms: 0}", PE_VALUE_OUT_OF_RANGE, "deadline_ms must be in [1, 86400000], got 0"},
    {"{" REQ "prompt: \"x\", deadline_ms: 86400001}", PE_LIMIT_EXCEEDED, "deadline_ms"},
    /* booleans */
    {"{" REQ "prompt: \"x\", stream: 1}", PE_INVALID_FIELD, "stream must be a bool, got int"},
    {"{" REQ "prompt: \"x\", ignore_eos: \"yes\"}", PE_INVALID_FIELD, "ignore_eos must be a bool, got str"},
    {"{" REQ "prompt: \"x\", add_special_tokens: nil}", PE_INVALID_FIELD, "add_special_tokens"},
    /* the id */
    {"{type: \"request\", id: \"\", prompt: \"x\"}", PE_INVALID_FIELD, "id must be 1..64 bytes, got 0"},
    {"{type: \"request\", id: str(65), prompt: \"x\"}", PE_LIMIT_EXCEEDED, "id must be 1..64 bytes, got 65"},
    {"{type: \"request\", id: 5, prompt: \"x\"}", PE_INVALID_FIELD, "id must be a string, got int"},
    {"{type: \"request\", id: \"a\\0b\", prompt: \"x\"}", PE_INVALID_FIELD, "id must not contain NUL"},
    {"{type: \"request\", id: \"a\\xffb\", prompt: \"x\"}", PE_INVALID_UTF8, "id is not valid UTF-8 (byte 1)"},
    {"{type: \"request\", prompt: \"x\"}", PE_MISSING_FIELD, "id is required"},
    /* the prompt */
    {"{" REQ "prompt: \"x\", prompt_ids: [1]}", PE_INVALID_FIELD, "exactly one of prompt, prompt_ids and messages, got prompt and prompt_ids"},
    {"{" REQ "max_tokens: 5}", PE_MISSING_FIELD, "prompt, prompt_ids or messages is required"},
    {"{" REQ "prompt: \"ok \\xc3\\x28\"}", PE_INVALID_UTF8, "prompt is not valid UTF-8 (byte 3)"},
    {"{" REQ "prompt: \"\\xed\\xa0\\x80\"}", PE_INVALID_UTF8, "prompt"}, /* a surrogate */
    {"{" REQ "prompt: \"\\xc0\\xaf\"}", PE_INVALID_UTF8, "prompt"},      /* overlong */
    {"{" REQ "prompt: \"abc\\xe2\\x82\"}", PE_INVALID_UTF8, "prompt"},   /* truncated char */
    {"{" REQ "prompt: b\"abc\"}", PE_INVALID_FIELD, "prompt must be a string, got bin"},
    {"{" REQ "prompt: [\"a\"]}", PE_INVALID_FIELD, "prompt must be a string, got array"},
    {"{" REQ "prompt_ids: []}", PE_INVALID_FIELD, "prompt_ids must have 1..131072 ids, got 0"},
    {"{" REQ "prompt_ids: [1, -1]}", PE_TOKEN_OUT_OF_RANGE, "prompt_ids[1] must be in [0, 2147483647], got -1"},
    {"{" REQ "prompt_ids: [2147483648]}", PE_TOKEN_OUT_OF_RANGE, "prompt_ids[0]"},
    {"{" REQ "prompt_ids: [1, \"a\"]}", PE_INVALID_FIELD, "prompt_ids[1] must be an integer, got str"},
    {"{" REQ "prompt_ids: [1.0]}", PE_INVALID_FIELD, "prompt_ids[0] must be an integer, got float"},
    {"{" REQ "prompt_ids: ids(131073)}", PE_LIMIT_EXCEEDED, "prompt_ids may have at most 131072 elements, got 131073"},
    {"{" REQ "prompt_ids: \"1 2 3\"}", PE_INVALID_FIELD, "prompt_ids must be an array, got str"},
    {"{" REQ "prompt: str(1048577)}", PE_LIMIT_EXCEEDED, "prompt must be 0..1048576 bytes, got 1048577"},
    /* stops */
    {"{" REQ "prompt: \"x\", stop: \"###\"}", PE_INVALID_FIELD, "stop must be an array, got str"},
    {"{" REQ "prompt: \"x\", stop: [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\","
     "\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}", PE_LIMIT_EXCEEDED,
     "stop may have at most 16 elements, got 17"},
    {"{" REQ "prompt: \"x\", stop: [\"a\", \"\"]}", PE_INVALID_FIELD, "stop[1] must be 1..256 bytes, got 0"},
    {"{" REQ "prompt: \"x\", stop: [str(257)]}", PE_LIMIT_EXCEEDED, "stop[0] must be 1..256 bytes, got 257"},
    {"{" REQ "prompt: \"x\", stop: [\"\\xff\"]}", PE_INVALID_UTF8, "stop[0] is not valid UTF-8"},
    {"{" REQ "prompt: \"x\", stop: [1]}", PE_INVALID_FIELD, "stop[0] must be a string, got int"},
    {"{" REQ "prompt: \"x\", stop_token_ids: [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}",
     PE_LIMIT_EXCEEDED, "stop_token_ids may have at most 16 elements, got 17"},
    {"{" REQ "prompt: \"x\", stop_token_ids: [-5]}", PE_TOKEN_OUT_OF_RANGE, "stop_token_ids[0]"},
    /* keys and header */
    {"{" REQ "prompt: \"x\", tempreature: 1}", PE_INVALID_FIELD, "unknown key 'tempreature' in request"},
    {"{" REQ "prompt: \"x\", \"\\xff\\x01\": 1}", PE_INVALID_FIELD, "unknown key '\\xff\\x01'"},
    {"{" REQ "prompt: \"x\", 7: 1}", PE_INVALID_FIELD, "keys must be strings, got int"},
    {"{" REQ "prompt: \"x\", n: 2, n: 3}", PE_INVALID_FIELD, "duplicate key 'n'"},
    {"{" REQ "prompt: \"x\", v: 2}", PE_UNSUPPORTED_VERSION, "v must be 1, got 2"},
    {"{" REQ "prompt: \"x\", v: \"1\"}", PE_INVALID_FIELD, "v must be an integer, got str"},
    {"{id: \"r1\", prompt: \"x\"}", PE_MISSING_FIELD, "type is required"},
    {"{type: \"complete\", id: \"r1\"}", PE_UNKNOWN_TYPE, "unknown message type 'complete'"},
    {"{type: 3, id: \"r1\"}", PE_INVALID_FIELD, "type must be a string, got int"},
    {"{type: \"cancel\", id: \"r1\", prompt: \"x\"}", PE_INVALID_FIELD, "unknown key 'prompt' in cancel"},
    {"{type: \"cancel\"}", PE_MISSING_FIELD, "id is required"},
    {"{type: \"ping\", id: \"x\"}", PE_INVALID_FIELD, "unknown key 'id' in ping"},
    {"{" REQ "prompt: \"x\", seed: {a: 1}}", PE_INVALID_FIELD, "seed must be an integer, got map"},
    /* not a message at all */
    {"[1, 2]", PE_MALFORMED, "a message must be a map, got array"},
    {"\"request\"", PE_MALFORMED, "got str"},
    {"{" REQ "prompt: \"x\", stop: [[[[[[[[[[[[[[[[[\"a\"]]]]]]]]]]]]]]]]]}", PE_MALFORMED, "nested deeper than 16"},
};

static void every_request_rule_has_its_code_and_message(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    for (size_t i = 0; i < sizeof request_cases / sizeof request_cases[0]; i++)
        check_case(d, request_cases[i].frame, request_cases[i].code, request_cases[i].msg);
    proto_decoder_destroy(&d);
}

/* Every field against values of every wrong type, and every number field against
 * non-finite, negative and huge values. */
static void every_field_refuses_wrong_types_and_bad_numbers(void **state)
{
    (void)state;
    static const struct {
        const char *name, *ok, *want; /* a valid value; what a wrong type is told to be */
        char kind;                    /* 'f' float, 'i' integer, '-' other */
    } fields[] = {
        {"id", "\"x\"", "a string", '-'},
        {"prompt", "\"x\"", "a string", '-'},
        {"prompt_ids", "[1]", "an array", '-'},
        {"max_tokens", "1", "an integer", 'i'},
        {"n", "1", "an integer", 'i'},
        {"stream", "true", "a bool", '-'},
        {"temperature", "1", "a number", 'f'},
        {"top_p", "1", "a number", 'f'},
        {"top_k", "1", "an integer", 'i'},
        {"min_p", "0", "a number", 'f'},
        {"repetition_penalty", "1", "a number", 'f'},
        {"presence_penalty", "0", "a number", 'f'},
        {"frequency_penalty", "0", "a number", 'f'},
        {"seed", "1", "an integer", 'i'},
        {"stop", "[\"a\"]", "an array", '-'},
        {"stop_token_ids", "[1]", "an array", '-'},
        {"logprobs", "1", "an integer", 'i'},
        {"ignore_eos", "true", "a bool", '-'},
        {"add_special_tokens", "true", "a bool", '-'},
        {"deadline_ms", "1", "an integer", 'i'},
    };
    static const struct {
        const char *value, *type;
    } wrong[] = {{"nil", "nil"}, {"true", "bool"}, {"7", "int"}, {"-7", "int"},
                 {"1.5", "float"}, {"1.5f", "float"}, {"\"s\"", "str"}, {"b\"s\"", "bin"},
                 {"[]", "array"}, {"{}", "map"}};
    proto_decoder_t *d = default_decoder();
    char frame[512], want[128];
    int n_checked = 0;
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        const char *name = fields[f].name;
        /* the rest of a valid request, without this field */
        const char *id = strcmp(name, "id") ? "id: \"r\", " : "";
        const char *prompt = strcmp(name, "prompt") && strcmp(name, "prompt_ids") ? "prompt: \"p\", " : "";
        snprintf(frame, sizeof frame, "{type: \"request\", %s%s%s: %s}", id, prompt, name,
                 fields[f].ok);
        proto_client_msg m;
        proto_error err;
        if (decode_text(d, frame, &m, &err) != DERAS_OK)
            fail_msg("%s: expected valid, got %s", frame, err.message);
        for (size_t w = 0; w < sizeof wrong / sizeof wrong[0]; w++) {
            bool numeric = !strcmp(wrong[w].type, "int") || !strcmp(wrong[w].type, "float");
            if (strstr(fields[f].want, wrong[w].type) || (fields[f].kind == 'f' && numeric) ||
                (!strcmp(fields[f].want, "an integer") && !strcmp(wrong[w].type, "int")))
                continue; /* not a wrong type for this field */
            snprintf(frame, sizeof frame, "{type: \"request\", %s%s%s: %s}", id, prompt, name,
                     wrong[w].value);
            snprintf(want, sizeof want, "%s must be %s, got %s", name, fields[f].want,
                     wrong[w].type);
            check_case(d, frame, PE_INVALID_FIELD, want);
            n_checked++;
        }
        static const char *const bad_numbers[] = {"nan", "inf", "-inf", "1e300",
                                                  "-9223372036854775808",
                                                  "18446744073709551615"};
        for (size_t b = 0; fields[f].kind != '-' && b < 6; b++) {
            if (fields[f].kind == 'i' && b < 4)
                continue; /* floats are a type error there, checked above */
            if (!strcmp(name, "seed") && b == 5)
                continue; /* 2^64 - 1 is a valid seed */
            snprintf(frame, sizeof frame, "{type: \"request\", %s%s%s: %s}", id, prompt, name,
                     bad_numbers[b]);
            proto_client_msg m2;
            proto_error err2;
            mpt_pack(&sb, frame);
            int rc = proto_decode_client(d, sb.data, sb.size, &m2, &err2);
            if (rc != DERAS_EFORMAT ||
                (err2.code != PE_VALUE_OUT_OF_RANGE && err2.code != PE_LIMIT_EXCEEDED) ||
                strncmp(err2.message, name, strlen(name)))
                fail_msg("%s: expected a range error naming %s, got rc %d %s \"%s\"", frame,
                         name, rc, proto_error_name(err2.code), err2.message);
            n_checked++;
        }
    }
    assert_true(n_checked > 150);
    proto_decoder_destroy(&d);
}

static void errors_carry_the_id_when_it_was_readable(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_client_msg m;
    proto_error err;
    /* the bad field comes before the id in the map: the id is still reported */
    assert_int_equal(decode_text(d, "{type: \"request\", temperature: 250, id: \"req-42\", "
                                    "prompt: \"x\"}", &m, &err),
                     DERAS_EFORMAT);
    assert_string_equal(err.id, "req-42");
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"c-1\", v: 9}", &m, &err),
                     DERAS_EFORMAT);
    assert_int_equal(err.code, PE_UNSUPPORTED_VERSION);
    assert_string_equal(err.id, "c-1");
    /* an unreadable id is not echoed */
    assert_int_equal(decode_text(d, "{type: \"request\", id: \"\\xff\", prompt: \"x\"}", &m,
                                 &err),
                     DERAS_EFORMAT);
    assert_string_equal(err.id, "");
    assert_int_equal(decode_text(d, "{type: \"request\", id: str(65), prompt: \"x\"}", &m, &err),
                     DERAS_EFORMAT);
    assert_string_equal(err.id, "");
    proto_decoder_destroy(&d);
}

static void limits_are_the_decoders(void **state)
{
    (void)state;
    proto_limits lim;
    proto_limits_default(&lim);
    assert_int_equal(lim.max_message_bytes, 4u << 20);
    assert_int_equal(lim.max_prompt_bytes, 1 << 20);
    assert_int_equal(lim.max_prompt_ids, 131072);
    assert_int_equal(lim.max_tokens, 32768);
    assert_true(lim.max_deadline_ms == 86400000);
    lim.max_message_bytes = 100;
    lim.max_prompt_bytes = 8;
    lim.max_prompt_ids = 3;
    lim.max_tokens = 10;
    lim.max_deadline_ms = 1000;
    proto_decoder_t *d = NULL;
    assert_int_equal(proto_decoder_new(&lim, &d), DERAS_OK);
    check_case(d, "{" REQ "prompt: \"123456789\"}", PE_LIMIT_EXCEEDED,
               "prompt must be 0..8 bytes, got 9");
    check_case(d, "{" REQ "prompt_ids: [1,2,3,4]}", PE_LIMIT_EXCEEDED,
               "prompt_ids may have at most 3 elements, got 4");
    check_case(d, "{" REQ "prompt: \"x\", max_tokens: 11}", PE_LIMIT_EXCEEDED,
               "max_tokens must be in [1, 10], got 11");
    check_case(d, "{" REQ "prompt: \"x\", deadline_ms: 1001}", PE_LIMIT_EXCEEDED,
               "deadline_ms must be in [1, 1000], got 1001");
    check_case(d, "{" REQ "prompt: str(100)}", PE_MESSAGE_TOO_LARGE,
               "the limit is 100");
    proto_decoder_destroy(&d);
}


static void server_replies_are_checked_as_strictly(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    static const vcase cases[] = {
        {"{type: \"chunk\", id: \"a\", index: 0, token_ids: [1], text: \"\\xff\"}",
         PE_INVALID_UTF8, "text is not valid UTF-8"},
        {"{type: \"chunk\", id: \"a\", index: 16, token_ids: [], text: \"\"}",
         PE_VALUE_OUT_OF_RANGE, "index must be in [0, 15], got 16"},
        {"{type: \"chunk\", id: \"a\", index: 0, text: \"\"}", PE_MISSING_FIELD,
         "token_ids is required in chunk"},
        {"{type: \"chunk\", id: \"a\", index: 0, token_ids: [-1], text: \"\"}",
         PE_TOKEN_OUT_OF_RANGE, "token_ids[0]"},
        {"{type: \"chunk\", id: \"a\", index: 0, token_ids: [], text: \"\", code: \"x\"}",
         PE_INVALID_FIELD, "unknown key 'code' in chunk"},
        {"{type: \"final\", id: \"a\", index: 0, finish_reason: \"stop\", usage: {}}",
         PE_MISSING_FIELD, "usage.prompt_tokens is required"},
        {"{type: \"final\", id: \"a\", index: 0, finish_reason: \"stop\", usage: "
         "{prompt_tokens: 1, completion_tokens: 1, queue_ms: nan, ttft_ms: 0, total_ms: 0}}",
         PE_VALUE_OUT_OF_RANGE, "usage.queue_ms"},
        {"{type: \"final\", id: \"a\", index: 0, finish_reason: \"stop\", usage: "
         "{prompt_tokens: 1, completion_tokens: 1, queue_ms: 0, ttft_ms: 0, total_ms: 0, "
         "spec_proposed: 2, spec_accepted: 3}}",
         PE_VALUE_OUT_OF_RANGE, "spec_accepted and spec_verifications must not exceed"},
        {"{type: \"final\", id: \"a\", index: 0, finish_reason: \"stop\", usage: "
         "{prompt_tokens: 1, completion_tokens: 1, queue_ms: 0, ttft_ms: 0, total_ms: 0, "
         "spec_verifications: -1}}",
         PE_VALUE_OUT_OF_RANGE, "usage.spec_verifications"},
        {"{type: \"final\", id: \"a\", index: 0, finish_reason: \"\", usage: {}}",
         PE_INVALID_FIELD, "finish_reason must be 1..31 bytes"},
        {"{type: \"final\", id: \"a\", index: 0, finish_reason: \"done\", usage: {}}",
         PE_INVALID_FIELD, "finish_reason 'done' is not a finish reason"},
        {"{type: \"error\", id: \"a\", code: 3, message: \"m\"}", PE_INVALID_FIELD,
         "code must be a string, got int"},
        {"{type: \"error\", id: \"a\", code: \"busy\"}", PE_MISSING_FIELD,
         "message is required in error"},
        {"{type: \"pong\", workers: [{name: \"w\"}]}", PE_MISSING_FIELD,
         "workers[0].state is required"},
        {"{type: \"pong\", workers: [{name: \"w\", state: \"ready\", running: -1, waiting: 0, "
         "kv_blocks_free: 0, kv_blocks_total: 0, served: 0}]}",
         PE_VALUE_OUT_OF_RANGE, "workers[0].running"},
        {"{type: \"pong\", v: 2, workers: []}", PE_UNSUPPORTED_VERSION, "v must be 1"},
        {"{type: \"request\", id: \"a\"}", PE_UNKNOWN_TYPE, "unknown message type 'request'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        proto_server_msg m;
        proto_error err;
        mpt_pack(&sb, cases[i].frame);
        int rc = proto_decode_server(d, sb.data, sb.size, &m, &err);
        if (rc != DERAS_EFORMAT || err.code != cases[i].code || !strstr(err.message, cases[i].msg))
            fail_msg("%s\n  expected %s \"...%s...\"\n  got rc %d, %s \"%s\"", cases[i].frame,
                     proto_error_name(cases[i].code), cases[i].msg, rc,
                     proto_error_name(err.code), err.message);
    }
    proto_decoder_destroy(&d);
}

static void error_names_are_stable(void **state)
{
    (void)state;
    static const char *const want[PE_N_CODES] = {
        "none", "malformed", "unsupported_version", "unknown_type", "invalid_field",
        "missing_field", "message_too_large", "limit_exceeded", "value_out_of_range",
        "token_out_of_range", "invalid_utf8", "context_length_exceeded", "duplicate_id",
        "unknown_request", "busy", "no_workers", "worker_failed", "deadline_exceeded",
        "shutting_down", "internal", "chat_unsupported", "chat_template_error", "invalid_grammar",
        "grammar_budget_exceeded"};
    for (int c = 0; c < PE_N_CODES; c++)
        assert_string_equal(proto_error_name(c), want[c]);
    assert_string_equal(proto_error_name(PE_N_CODES), "internal");
    assert_string_equal(proto_error_name((enum proto_error_code)-1), "internal");
}

static void bad_arguments_are_einval(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    proto_client_msg m;
    proto_error err;
    const void *buf;
    size_t len;
    assert_int_equal(proto_decode_client(NULL, "x", 1, &m, &err), DERAS_EINVAL);
    assert_int_equal(proto_decode_client(d, NULL, 1, &m, &err), DERAS_EINVAL);
    assert_int_equal(proto_decode_client(d, "x", 1, NULL, &err), DERAS_EINVAL);
    assert_int_equal(proto_decode_client(d, "\x80", 1, &m, NULL), DERAS_EFORMAT);
    assert_int_equal(proto_encode_chunk(e, NULL, 0, NULL, 0, "", 0, NULL, &buf, &len),
                     DERAS_EINVAL);
    assert_int_equal(proto_encode_chunk(e, "a", 0, NULL, 2, "", 0, NULL, &buf, &len),
                     DERAS_EINVAL);
    assert_int_equal(proto_encode_pong(e, NULL, 65, &buf, &len), DERAS_EINVAL);
    assert_int_equal(proto_encode_error(e, "a", PE_BUSY, NULL, &buf, &len), DERAS_EINVAL);
    proto_decoder_destroy(&d);
    proto_decoder_destroy(&d); /* NULL-safe */
    proto_encoder_destroy(&e);
    proto_encoder_destroy(NULL);
}
int main(void)
{
    msgpack_sbuffer_init(&sb);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(request_round_trips_with_every_field),
        cmocka_unit_test(structured_output_fields),
        cmocka_unit_test(min_tokens_and_logit_bias_round_trip),
        cmocka_unit_test(request_defaults_apply_to_omitted_fields),
        cmocka_unit_test(cancel_and_ping_round_trip),
        cmocka_unit_test(replies_round_trip),
        cmocka_unit_test(every_request_rule_has_its_code_and_message),
        cmocka_unit_test(every_field_refuses_wrong_types_and_bad_numbers),
        cmocka_unit_test(errors_carry_the_id_when_it_was_readable),
        cmocka_unit_test(limits_are_the_decoders),
        cmocka_unit_test(server_replies_are_checked_as_strictly),
        cmocka_unit_test(error_names_are_stable),
        cmocka_unit_test(bad_arguments_are_einval),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}
