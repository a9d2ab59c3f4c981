/* SPDX-License-Identifier: Apache-2.0 */
/* test_router_openai.c - the OpenAI-compatible JSON mapping (router/openai_request.c, openai_response.c):
 * well-formed bodies map onto the request's fields; hostile ones (malformed JSON, wrong
 * types, unknown or unsupported fields, huge n, NaN, out-of-range numbers) are refused with
 * the protocol's stable code and the field named; the encoders write JSON that parses back
 * (escapes, invalid UTF-8 as U+FFFD, -inf logprobs as -9999). No model needed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/base/status.h"
#include "router/openai_response.h"

static proto_limits lim;

static int setup(void **s)
{
    (void)s;
    proto_limits_default(&lim);
    return 0;
}

static int parse(oai_kind kind, const char *body, oai_request *r, oai_error *e)
{
    return oai_parse(kind, body, strlen(body), &lim, r, e);
}

/* body is refused with `code`, naming `param` (NULL: none). */
static void refused(oai_kind kind, const char *body, enum proto_error_code code,
                    const char *param)
{
    oai_request r;
    oai_error e;
    int rc = parse(kind, body, &r, &e);
    if (rc != DERAS_EFORMAT || e.code != code || (param && strcmp(e.param, param)))
        fail_msg("%s: rc %d code %s param '%s' (%s); wanted %s '%s'", body, rc,
                 proto_error_name(e.code), e.param, e.message, proto_error_name(code),
                 param ? param : "");
    assert_null(r.root);
    assert_true(strlen(e.message) > 0);
}

static void chat_fields_map(void **s)
{
    (void)s;
    oai_request r;
    oai_error e;
    const char *body =
        "{\"model\": \"m\", \"messages\": [{\"role\": \"developer\", \"content\": \"Be terse.\"},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}],"
        " \"max_completion_tokens\": 7, \"n\": 2, \"temperature\": 0.5, \"top_p\": 0.9,"
        " \"stop\": [\"a\", \"bc\"], \"seed\": 42, \"presence_penalty\": 1,"
        " \"frequency_penalty\": -1, \"logit_bias\": {\"5\": -100, \"9\": 3.5},"
        " \"logprobs\": true, \"top_logprobs\": 3, \"stream\": true,"
        " \"stream_options\": {\"include_usage\": true}, \"min_tokens\": 2, \"top_k\": 40,"
        " \"min_p\": 0.1, \"repetition_penalty\": 1.1, \"user\": \"u1\", \"tool_choice\": \"auto\","
        " \"response_format\": {\"type\": \"text\"}, \"max_tokens\": null}";
    assert_int_equal(parse(OAI_CHAT, body, &r, &e), DERAS_OK);
    const req_params *p = &r.q.params;
    assert_string_equal(r.model, "m");
    assert_int_equal(p->max_tokens, 7);
    assert_int_equal(p->n, 2);
    assert_float_equal(p->sp.temperature, 0.5, 1e-6);
    assert_float_equal(p->sp.top_p, 0.9, 1e-6);
    assert_int_equal(r.q.n_stops, 2);
    assert_int_equal(r.q.stop_lens[1], 2);
    assert_true(r.q.has_seed);
    assert_int_equal(p->seed, 42);
    assert_int_equal(p->sp.logit_bias.n, 2);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 3);
    assert_int_equal(p->sp.n_logprobs, 3);
    assert_true(r.q.stream);
    assert_true(r.include_usage);
    assert_int_equal(p->sp.min_tokens, 2);
    assert_int_equal(p->sp.top_k, 40);
    /* developer reads as system; parts stay parts */
    json_t *m0 = json_array_get(r.q.messages, 0);
    assert_string_equal(json_string_value(json_object_get(m0, "role")), "system");
    assert_true(json_is_array(json_object_get(json_array_get(r.q.messages, 1), "content")));
    oai_request_free(&r);
}

static void completion_prompts(void **s)
{
    (void)s;
    oai_request r;
    oai_error e;
    assert_int_equal(parse(OAI_COMPLETIONS, "{\"prompt\": \"hello\", \"stop\": \"\\n\"}", &r, &e),
                     DERAS_OK);
    assert_int_equal(r.q.prompt_len, 5);
    assert_int_equal(r.q.n_stops, 1);
    assert_int_equal(r.q.params.max_tokens, REQ_DEFAULT_MAX_TOKENS);
    oai_request_free(&r);
    assert_int_equal(parse(OAI_COMPLETIONS, "{\"prompt\": [[1, 2, 3]], \"logprobs\": 0}", &r, &e),
                     DERAS_OK);
    assert_int_equal(r.q.n_prompt_ids, 3);
    assert_int_equal(r.q.prompt_ids[2], 3);
    assert_true(r.logprobs);
    assert_int_equal(r.q.params.sp.n_logprobs, 1); /* the token's own logprob at least */
    oai_request_free(&r);
    assert_int_equal(parse(OAI_COMPLETIONS, "{\"prompt\": [\"one\"], \"best_of\": 1, \"echo\": false}",
                           &r, &e), DERAS_OK);
    oai_request_free(&r);
}

static void hostile_bodies_are_refused(void **s)
{
    (void)s;
    refused(OAI_CHAT, "", PE_MALFORMED, NULL);
    refused(OAI_CHAT, "{\"messages\": [", PE_MALFORMED, NULL);
    refused(OAI_CHAT, "[1, 2]", PE_MALFORMED, NULL);
    refused(OAI_CHAT, "{\"messages\": [], \"messages\": []}", PE_MALFORMED, NULL);
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"temperature\": NaN}", PE_MALFORMED, NULL);
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\\u0000b\"}", PE_MALFORMED, NULL);
    refused(OAI_COMPLETIONS, "{\"prompt\": \"\xff\"}", PE_MALFORMED, NULL);
    refused(OAI_CHAT, "{}", PE_MISSING_FIELD, "messages");
    refused(OAI_COMPLETIONS, "{\"model\": \"m\"}", PE_MISSING_FIELD, "prompt");
    refused(OAI_COMPLETIONS, "{\"prompt\": 5}", PE_INVALID_FIELD, "prompt");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"wat\": 1}", PE_INVALID_FIELD, "wat");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"n\": 1000000}", PE_LIMIT_EXCEEDED, "n");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"n\": 0}", PE_VALUE_OUT_OF_RANGE, "n");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"n\": 2.5}", PE_INVALID_FIELD, "n");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"max_tokens\": 99999999}", PE_LIMIT_EXCEEDED,
            "max_tokens");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"temperature\": 250}", PE_VALUE_OUT_OF_RANGE,
            "temperature");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"temperature\": 1e999}", PE_MALFORMED, NULL);
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"top_p\": 0}", PE_VALUE_OUT_OF_RANGE, "top_p");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"top_k\": 1.5}", PE_INVALID_FIELD, "top_k");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"seed\": -1}", PE_VALUE_OUT_OF_RANGE, "seed");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"stream\": 1}", PE_INVALID_FIELD, "stream");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"logprobs\": 21}", PE_LIMIT_EXCEEDED, "logprobs");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"logit_bias\": {\"x\": 1}}", PE_INVALID_FIELD,
            "logit_bias");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"logit_bias\": {\"1\": 101}}",
            PE_VALUE_OUT_OF_RANGE, "logit_bias");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"stop\": [\"\"]}", PE_INVALID_FIELD, "stop");
    refused(OAI_COMPLETIONS,
            "{\"prompt\": \"a\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
            "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
            PE_LIMIT_EXCEEDED, "stop");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"echo\": true}", PE_INVALID_FIELD, "echo");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"suffix\": \"b\"}", PE_INVALID_FIELD, "suffix");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"best_of\": 3}", PE_INVALID_FIELD, "best_of");
    refused(OAI_COMPLETIONS, "{\"prompt\": [\"a\", \"b\"]}", PE_INVALID_FIELD, "prompt");
    refused(OAI_COMPLETIONS, "{\"prompt\": [1, -1]}", PE_VALUE_OUT_OF_RANGE, "prompt");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"min_tokens\": 9, \"max_tokens\": 3}",
            PE_VALUE_OUT_OF_RANGE, NULL);
    const char *m = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
    char b[512];
    snprintf(b, sizeof b, "{%s, \"response_format\": {\"type\": \"yaml\"}}", m);
    refused(OAI_CHAT, b, PE_INVALID_FIELD, "response_format");
    snprintf(b, sizeof b, "{%s, \"tool_choice\": \"required\"}", m);
    refused(OAI_CHAT, b, PE_INVALID_FIELD, "tool_choice");
    snprintf(b, sizeof b, "{%s, \"functions\": []}", m);
    refused(OAI_CHAT, b, PE_INVALID_FIELD, "functions");
    snprintf(b, sizeof b, "{%s, \"top_logprobs\": 2}", m);
    refused(OAI_CHAT, b, PE_INVALID_FIELD, "top_logprobs");
    snprintf(b, sizeof b, "{%s, \"stream_options\": {\"x\": 1}}", m);
    refused(OAI_CHAT, b, PE_INVALID_FIELD, "stream_options");
    /* {} is include_usage absent: false (fuzz_openai found it crashing the parser) */
    snprintf(b, sizeof b, "{%s, \"stream\": true, \"stream_options\": {}}", m);
    oai_request ok;
    oai_error oe;
    assert_int_equal(parse(OAI_CHAT, b, &ok, &oe), DERAS_OK);
    assert_false(ok.include_usage);
    oai_request_free(&ok);
    /* vLLM's continuous_usage_stats; null reads as absent */
    snprintf(b, sizeof b, "{%s, \"stream_options\": {\"include_usage\": null, "
             "\"continuous_usage_stats\": true}}", m);
    assert_int_equal(parse(OAI_CHAT, b, &ok, &oe), DERAS_OK);
    assert_false(ok.include_usage);
    assert_true(ok.continuous_usage);
    oai_request_free(&ok);
    snprintf(b, sizeof b, "{%s, \"stream_options\": {\"continuous_usage_stats\": 1}}", m);
    refused(OAI_CHAT, b, PE_INVALID_FIELD, "stream_options.continuous_usage_stats");
    snprintf(b, sizeof b, "{%s, \"stream_options\": []}", m);
    refused(OAI_CHAT, b, PE_INVALID_FIELD, "stream_options");
    refused(OAI_CHAT, "{\"messages\": []}", PE_INVALID_FIELD, "messages");
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}",
            PE_INVALID_FIELD, "messages[0]");
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", PE_MISSING_FIELD, "messages[0]");
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", PE_INVALID_FIELD,
            "messages[0].content");
    refused(OAI_CHAT,
            "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
            PE_INVALID_FIELD, "messages[0].content");
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"extra\": 1}]}",
            PE_INVALID_FIELD, "messages[0].extra");
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"prompt\": \"y\"}",
            PE_INVALID_FIELD, "prompt");
}

static void tool_call_arguments_become_objects(void **s)
{
    (void)s;
    oai_request r;
    oai_error e;
    const char *body = "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
                       "[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
                       "\"arguments\": \"{\\\"x\\\": 1}\"}}]}]}";
    assert_int_equal(parse(OAI_CHAT, body, &r, &e), DERAS_OK);
    json_t *args = json_object_get(
        json_object_get(json_array_get(json_object_get(json_array_get(r.q.messages, 0),
                                                       "tool_calls"), 0), "function"),
        "arguments");
    assert_true(json_is_object(args));
    assert_int_equal(json_integer_value(json_object_get(args, "x")), 1);
    oai_request_free(&r);
}

static void encoders_write_json(void **s)
{
    (void)s;
    oai_buf b = {0};
    oai_buf_json_str(&b, "a\"b\\\n\x01\xff\xe2\x82", 9);
    oai_buf_put(&b, "", 1);
    json_t *v = json_loads(b.p, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    assert_string_equal(json_string_value(v), "a\"b\\\n\x01\xef\xbf\xbd\xef\xbf\xbd");
    json_decref(v);
    oai_buf_free(&b);

    proto_logprob lp = {.token_id = 1, .logprob = -INFINITY, .n_top = 1, .top_ids = {2},
                        .top_logprobs = {-0.5f}};
    oai_piece p = {.index = 1, .text = "hi", .n_text = 2, .lps = &lp, .n_lps = 1, .top_n = 1,
                   .finish = "stop"};
    oai_buf choices = {0};
    oai_put_choice(&choices, OAI_CHAT, NULL, &p, true);
    oai_put_response(&b, OAI_CHAT, "chatcmpl-1", 5, "m", &choices, 3, 4);
    oai_buf_put(&b, "", 1);
    v = json_loads(b.p, 0, NULL);
    assert_non_null(v);
    json_t *c = json_array_get(json_object_get(v, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c, "message"), "content")),
                        "hi");
    json_t *lpj = json_array_get(json_object_get(json_object_get(c, "logprobs"), "content"), 0);
    assert_float_equal(json_number_value(json_object_get(lpj, "logprob")), -9999.0, 1e-9);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "usage"), "total_tokens")),
                     7);
    json_decref(v);
    oai_buf_free(&b);
    oai_buf_free(&choices);

    /* a streamed chunk and a whole choice write the same choice object; a chunk may carry
     * the sample's usage so far */
    p.usage = true;
    p.prompt_tokens = 3;
    p.completion_tokens = 2;
    p.role = true;
    oai_put_chunk(&b, OAI_CHAT, "chatcmpl-1", 5, "m", NULL, &p);
    assert_true(b.n > 8 && !memcmp(b.p, "data: ", 6) && !memcmp(b.p + b.n - 2, "\n\n", 2));
    v = json_loadb(b.p + 6, b.n - 8, 0, NULL);
    assert_non_null(v);
    c = json_array_get(json_object_get(v, "choices"), 0);
    json_t *delta = json_object_get(c, "delta");
    assert_string_equal(json_string_value(json_object_get(delta, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(delta, "content")), "hi");
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
    assert_int_equal(json_integer_value(json_object_get(c, "index")), 1);
    assert_true(json_is_object(json_object_get(c, "logprobs")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "usage"),
                                                        "completion_tokens")), 2);
    json_decref(v);
    oai_buf_free(&b);
    p.usage = false;
    oai_put_chunk(&b, OAI_COMPLETIONS, "cmpl-1", 5, "m", NULL, &p);
    v = json_loadb(b.p + 6, b.n - 8, 0, NULL);
    assert_non_null(v);
    assert_null(json_object_get(v, "usage"));
    c = json_array_get(json_object_get(v, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "hi");
    assert_int_equal(json_array_size(json_object_get(json_object_get(c, "logprobs"), "tokens")),
                     1);
    json_decref(v);
    oai_buf_free(&b);

    oai_put_error(&b, 429, "busy", "n", "full");
    oai_buf_put(&b, "", 1);
    v = json_loads(b.p, 0, NULL);
    json_t *err = json_object_get(v, "error");
    assert_string_equal(json_string_value(json_object_get(err, "type")), "rate_limit_error");
    assert_string_equal(json_string_value(json_object_get(err, "param")), "n");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "busy");
    json_decref(v);
    oai_buf_free(&b);
    assert_int_equal(oai_http_status(PE_BUSY), 429);
    assert_int_equal(oai_http_status(PE_NO_WORKERS), 503);
    assert_int_equal(oai_http_status(PE_INVALID_FIELD), 400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chat_fields_map),
        cmocka_unit_test(completion_prompts),
        cmocka_unit_test(hostile_bodies_are_refused),
        cmocka_unit_test(tool_call_arguments_become_objects),
        cmocka_unit_test(encoders_write_json),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
