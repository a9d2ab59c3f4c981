/* SPDX-License-Identifier: Apache-2.0 */
/* test_protocol_chat.c - chat requests on the client protocol: `messages`, `tools`,
 * `add_generation_prompt` and `chat_template_kwargs` decoded into the JSON values a chat
 * template reads, encoded back by the C client's encoder, and every hostile shape (wrong
 * types, bad roles, parts that are not text, huge counts, deep nesting, non-finite numbers,
 * invalid UTF-8, reserved names) refused with its stable code and a message naming where. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "proto_cases.h"

static const vcase chat_cases[] = {
    /* one prompt form only, and the chat keys need a chat */
    {"{" REQ "prompt: \"x\", messages: [{role: \"user\", content: \"hi\"}]}", PE_INVALID_FIELD,
     "got prompt and messages"},
    {"{" REQ "prompt_ids: [1], messages: [{role: \"user\", content: \"hi\"}]}", PE_INVALID_FIELD,
     "got prompt_ids and messages"},
    {"{" REQ "prompt: \"x\", tools: []}", PE_INVALID_FIELD, "need messages"},
    {"{" REQ "prompt: \"x\", add_generation_prompt: false}", PE_INVALID_FIELD, "need messages"},
    {"{" REQ "prompt: \"x\", chat_template_kwargs: {}}", PE_INVALID_FIELD, "need messages"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], add_special_tokens: true}",
     PE_INVALID_FIELD, "add_special_tokens applies to prompt"},
    /* messages itself */
    {"{" REQ "messages: []}", PE_INVALID_FIELD, "messages must have 1..1024 messages, got 0"},
    {"{" REQ "messages: \"hi\"}", PE_INVALID_FIELD, "messages must be an array, got str"},
    {"{" REQ "messages: {role: \"user\"}}", PE_INVALID_FIELD, "messages must be an array, got map"},
    {"{" REQ "messages: ids(1025)}", PE_LIMIT_EXCEEDED, "messages may have at most 1024 elements, got 1025"},
    {"{" REQ "messages: [1]}", PE_INVALID_FIELD, "messages[0] must be a map, got int"},
    {"{" REQ "messages: [nil]}", PE_INVALID_FIELD, "messages[0] must be a map, got nil"},
    /* roles */
    {"{" REQ "messages: [{content: \"hi\"}]}", PE_MISSING_FIELD, "role is required in messages[0]"},
    {"{" REQ "messages: [{role: \"bot\", content: \"hi\"}]}", PE_INVALID_FIELD,
     "messages[0].role must be system, user, assistant or tool, got 'bot'"},
    {"{" REQ "messages: [{role: \"\", content: \"hi\"}]}", PE_INVALID_FIELD, "messages[0].role must be 1..16 bytes"},
    {"{" REQ "messages: [{role: str(17), content: \"hi\"}]}", PE_LIMIT_EXCEEDED, "messages[0].role must be 1..16 bytes, got 17"},
    {"{" REQ "messages: [{role: 1, content: \"hi\"}]}", PE_INVALID_FIELD, "messages[0].role must be a string, got int"},
    {"{" REQ "messages: [{role: \"user\", content: \"a\"}, {role: \"\\xff\", content: \"b\"}]}",
     PE_INVALID_UTF8, "messages[1].role is not valid UTF-8"},
    {"{" REQ "messages: [{role: \"user\", role: \"user\", content: \"hi\"}]}", PE_INVALID_FIELD,
     "duplicate key 'role'"},
    /* content */
    {"{" REQ "messages: [{role: \"user\"}]}", PE_MISSING_FIELD, "content is required in messages[0]"},
    {"{" REQ "messages: [{role: \"assistant\"}]}", PE_MISSING_FIELD, "content is required in messages[0]"},
    {"{" REQ "messages: [{role: \"user\", content: 5}]}", PE_INVALID_FIELD,
     "messages[0].content must be a string or a list of text parts, got int"},
    {"{" REQ "messages: [{role: \"user\", content: nil}]}", PE_INVALID_FIELD,
     "messages[0].content must be a string or a list of text parts, got nil"},
    {"{" REQ "messages: [{role: \"user\", content: \"ok \\xc3\\x28\"}]}", PE_INVALID_UTF8,
     "messages[0].content is not valid UTF-8 (byte 3)"},
    {"{" REQ "messages: [{role: \"user\", content: b\"hi\"}]}", PE_INVALID_FIELD, "got bin"},
    {"{" REQ "messages: [{role: \"user\", content: [\"hi\"]}]}", PE_INVALID_FIELD,
     "messages[0].content[0] must be a map, got str"},
    {"{" REQ "messages: [{role: \"user\", content: [{type: \"image_url\", image_url: \"x\"}]}]}",
     PE_INVALID_FIELD, "unknown key 'image_url' in messages[0].content[0]"},
    {"{" REQ "messages: [{role: \"user\", content: [{type: \"image\", text: \"x\"}]}]}",
     PE_INVALID_FIELD, "messages[0].content[0].type must be \"text\" (the only part type served), got 'image'"},
    {"{" REQ "messages: [{role: \"user\", content: [{text: \"x\"}]}]}", PE_MISSING_FIELD,
     "messages[0].content[0] needs type and text"},
    {"{" REQ "messages: [{role: \"user\", content: [{type: \"text\", text: 3}]}]}", PE_INVALID_FIELD,
     "messages[0].content[0].text must be a string, got int"},
    {"{" REQ "messages: [{role: \"user\", content: ids(65)}]}", PE_LIMIT_EXCEEDED,
     "messages[0].content may have at most 64 elements, got 65"},
    /* the other message keys */
    {"{" REQ "messages: [{role: \"user\", content: \"hi\", images: []}]}", PE_INVALID_FIELD,
     "unknown key 'images' in messages[0]"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\", name: \"\"}]}", PE_INVALID_FIELD,
     "messages[0].name must be 1..256 bytes, got 0"},
    {"{" REQ "messages: [{role: \"tool\", content: \"4\", tool_call_id: str(257)}]}", PE_LIMIT_EXCEEDED,
     "messages[0].tool_call_id must be 1..256 bytes, got 257"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: {}}]}", PE_INVALID_FIELD,
     "messages[0].tool_calls must be an array, got map"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [\"f\"]}]}", PE_INVALID_FIELD,
     "messages[0].tool_calls[0] must be a map, got str"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: ids(65)}]}", PE_LIMIT_EXCEEDED,
     "messages[0].tool_calls may have at most 64 elements, got 65"},
    /* free-form values inside tool calls */
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{function: {arguments: {x: nan}}}]}]}",
     PE_VALUE_OUT_OF_RANGE, "messages[0].tool_calls[0].function.arguments.x must be finite"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{function: {arguments: {x: -inf}}}]}]}",
     PE_VALUE_OUT_OF_RANGE, "must be finite"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{id: 18446744073709551615}]}]}",
     PE_VALUE_OUT_OF_RANGE, "messages[0].tool_calls[0].id must be at most 9223372036854775807"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{id: b\"x\"}]}]}", PE_INVALID_FIELD,
     "messages[0].tool_calls[0].id must not be a bin"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{1: 2}]}]}", PE_INVALID_FIELD,
     "keys must be strings, got int in messages[0].tool_calls[0]"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{\"a\\0b\": 2}]}]}", PE_INVALID_FIELD,
     "holds a NUL byte"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{a: 1, a: 2}]}]}", PE_INVALID_FIELD,
     "duplicate key in messages[0].tool_calls[0].a"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{a: \"\\xff\"}]}]}", PE_INVALID_UTF8,
     "messages[0].tool_calls[0].a is not valid UTF-8"},
    {"{" REQ "messages: [{role: \"assistant\", tool_calls: [{a: [[[[[[[[[[[[[1]]]]]]]]]]]]]}]}]}",
     PE_MALFORMED, "nested deeper than 16"},
    /* tools */
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], tools: {}}", PE_INVALID_FIELD,
     "tools must be an array, got map"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], tools: [1]}", PE_INVALID_FIELD,
     "tools[0] must be a map, got int"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], tools: ids(129)}", PE_LIMIT_EXCEEDED,
     "tools may have at most 128 elements, got 129"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], tools: [{f: {g: inf}}]}",
     PE_VALUE_OUT_OF_RANGE, "tools[0].f.g must be finite"},
    /* add_generation_prompt, chat_template_kwargs */
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], add_generation_prompt: 1}",
     PE_INVALID_FIELD, "add_generation_prompt must be a bool, got int"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], chat_template_kwargs: []}",
     PE_INVALID_FIELD, "chat_template_kwargs must be a map, got array"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], chat_template_kwargs: {messages: 1}}",
     PE_INVALID_FIELD, "chat_template_kwargs may not set 'messages'"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], chat_template_kwargs: {add_generation_prompt: true}}",
     PE_INVALID_FIELD, "may not set 'add_generation_prompt'"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], chat_template_kwargs: {\"\": 1}}",
     PE_INVALID_FIELD, "a key of chat_template_kwargs must be 1..256 bytes, got 0"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], chat_template_kwargs: {a: nan}}",
     PE_VALUE_OUT_OF_RANGE, "chat_template_kwargs.a must be finite"},
    {"{" REQ "messages: [{role: \"user\", content: \"hi\"}], chat_template_kwargs: {a0: 0, a1: 1, "
     "a2: 2, a3: 3, a4: 4, a5: 5, a6: 6, a7: 7, a8: 8, a9: 9, b0: 0, b1: 1, b2: 2, b3: 3, b4: 4, "
     "b5: 5, b6: 6, b7: 7, b8: 8, b9: 9, c0: 0, c1: 1, c2: 2, c3: 3, c4: 4, c5: 5, c6: 6, c7: 7, "
     "c8: 8, c9: 9, d0: 0, d1: 1, d2: 2}}",
     PE_LIMIT_EXCEEDED, "chat_template_kwargs may have at most 32 keys, got 33"},
};

static void every_chat_rule_has_its_code_and_message(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    for (size_t i = 0; i < sizeof chat_cases / sizeof chat_cases[0]; i++)
        check_case(d, chat_cases[i].frame, chat_cases[i].code, chat_cases[i].msg);
    proto_decoder_destroy(&d);
}

/* The JSON a template sees, compact and with keys in the order sent. */
static void assert_json(const json_t *j, const char *want)
{
    char *got = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    assert_non_null(got);
    if (strcmp(got, want))
        fail_msg("got  %s\nwant %s", got, want);
    free(got);
}

static void a_chat_decodes_into_the_values_a_template_reads(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_client_msg m;
    proto_error err;
    assert_int_equal(decode_text(d, "{" REQ "messages: [{role: \"system\", content: \"Be brief.\"}, "
                                 "{role: \"user\", content: [{type: \"text\", text: \"Hi \"}, "
                                 "{text: \"there\", type: \"text\"}]}, "
                                 "{role: \"assistant\", tool_calls: [{type: \"function\", function: "
                                 "{name: \"f\", arguments: {x: 1.5, y: [true, nil, -3], z: \"\\xc3\\xa9\"}}}]}, "
                                 "{role: \"tool\", tool_call_id: \"c1\", name: \"f\", content: \"4\"}], "
                                 "tools: [{type: \"function\", function: {name: \"f\"}}], "
                                 "add_generation_prompt: false, "
                                 "chat_template_kwargs: {enable_thinking: false, bos_token: \"<s>\"}}",
                                 &m, &err),
                     DERAS_OK);
    const proto_request *q = &m.req;
    assert_null(q->prompt);
    assert_null(q->prompt_ids);
    assert_false(q->add_generation_prompt);
    assert_json(q->messages,
                "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi \"},"
                "{\"type\":\"text\",\"text\":\"there\"}]},"
                "{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
                "{\"name\":\"f\",\"arguments\":{\"x\":1.5,\"y\":[true,null,-3],\"z\":\"\xc3\xa9\"}}}]},"
                "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"name\":\"f\",\"content\":\"4\"}]");
    assert_json(q->tools, "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
    assert_json(q->template_kwargs, "{\"enable_thinking\":false,\"bos_token\":\"<s>\"}");

    /* the defaults, and nothing left over from the last request */
    assert_int_equal(decode_text(d, "{" REQ "messages: [{role: \"user\", content: \"\"}]}", &m, &err),
                     DERAS_OK);
    assert_true(m.req.add_generation_prompt);
    assert_null(m.req.tools);
    assert_null(m.req.template_kwargs);
    assert_json(m.req.messages, "[{\"role\":\"user\",\"content\":\"\"}]");
    assert_int_equal(decode_text(d, "{" REQ "prompt: \"x\"}", &m, &err), DERAS_OK);
    assert_null(m.req.messages);
    assert_true(m.req.add_generation_prompt);
    proto_decoder_destroy(&d);
}

/* What the C client encodes, the router decodes to the same values. */
static void a_chat_round_trips_through_the_encoder(void **state)
{
    (void)state;
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    proto_decoder_t *d = default_decoder();
    json_error_t jerr;
    const char *msgs = "[{\"role\":\"user\",\"content\":\"caf\\u00e9 \\u0000 ok\"},"
                       "{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":"
                       "{\"n\":12345678901234,\"f\":-0.25,\"t\":true,\"z\":null}}}]}]";
    proto_request r;
    proto_request_default(&r);
    snprintf(r.id, sizeof r.id, "c1");
    r.messages = json_loads(msgs, JSON_ALLOW_NUL, &jerr);
    r.tools = json_loads("[{\"type\":\"function\"}]", 0, &jerr);
    r.template_kwargs = json_loads("{\"enable_thinking\":true}", 0, &jerr);
    r.add_generation_prompt = false;
    assert_non_null(r.messages);
    const void *buf;
    size_t len;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    proto_client_msg m;
    proto_error err;
    assert_int_equal(proto_decode_client(d, buf, len, &m, &err), DERAS_OK);
    assert_true(json_equal(m.req.messages, r.messages));
    assert_true(json_equal(m.req.tools, r.tools));
    assert_true(json_equal(m.req.template_kwargs, r.template_kwargs));
    assert_false(m.req.add_generation_prompt);
    json_decref(r.messages);
    json_decref(r.tools);
    json_decref(r.template_kwargs);
    proto_decoder_destroy(&d);
    proto_encoder_destroy(&e);
}

/* A full-size frame of the smallest messages stays within the scan's object cap and decodes
 * in bounded time; one message past the cap is refused before any JSON is built. */
static void many_messages_are_bounded(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    size_t cap = 64 + 1025 * 40;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int n = 1024; n <= 1025; n++) {
        size_t at = (size_t)snprintf(text, cap, "{" REQ "messages: [");
        for (int i = 0; i < n; i++)
            at += (size_t)snprintf(text + at, cap - at, "{role: \"user\", content: \"m\"},");
        snprintf(text + at, cap - at, "]}");
        proto_client_msg m;
        proto_error err;
        int rc = decode_text(d, text, &m, &err);
        if (n == 1024) {
            assert_int_equal(rc, DERAS_OK);
            assert_int_equal(json_array_size(m.req.messages), 1024);
        } else {
            assert_int_equal(rc, DERAS_EFORMAT);
            assert_int_equal(err.code, PE_LIMIT_EXCEEDED);
        }
    }
    free(text);
    proto_decoder_destroy(&d);
}

int main(void)
{
    msgpack_sbuffer_init(&sb);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_chat_rule_has_its_code_and_message),
        cmocka_unit_test(a_chat_decodes_into_the_values_a_template_reads),
        cmocka_unit_test(a_chat_round_trips_through_the_encoder),
        cmocka_unit_test(many_messages_are_bounded),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}
