/* SPDX-License-Identifier: Apache-2.0 */
/* test_router_tools.c - the router's structured output and tool calling, without processes:
 *   - constraint_gbnf: each of json_schema, regex, grammar and json_object to checked GBNF,
 *     refusals with invalid_grammar naming the keyword, the construct or the rule;
 *   - the OpenAI fields (openai_structured.c): response_format, guided_*, tools and
 *     tool_choice accepted into the request, and every misuse refused naming its field;
 *   - tools_grammar: the call grammar of each style accepts the calls it should (named:
 *     only that function; parallel: several) and refuses others; a function whose
 *     parameters do not compile is named;
 *   - tool_parser: hermes and llama3_json replies into content and calls; streamed at
 *     every split point (and a byte at a time) the same content and calls as whole; text
 *     that only looks like a call stays content, byte for byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/grammar.h"
#include "router/constraint.h"
#include "router/openai_request.h"
#include "router/tool_calls.h"

static proto_limits lim;

static int setup(void **s)
{
    (void)s;
    proto_limits_default(&lim);
    return 0;
}

/* ---- constraint_gbnf ---- */

static void constraint_kinds(void **s)
{
    (void)s;
    char msg[256], *g;
    size_t n;
    proto_request q;
    proto_request_default(&q);
    assert_int_equal(constraint_gbnf(&q, &g, &n, msg, sizeof msg), PE_NONE);
    assert_null(g);

    q.regex = "[0-9]{3}-[a-z]+";
    q.regex_len = strlen(q.regex);
    assert_int_equal(constraint_gbnf(&q, &g, &n, msg, sizeof msg), PE_NONE);
    grammar_t *gr;
    bool prefix, complete;
    assert_int_equal(grammar_from_gbnf(g, n, NULL, &gr), DERAS_OK);
    assert_int_equal(grammar_match_bytes(gr, "123-abc", 7, &prefix, &complete), DERAS_OK);
    assert_true(complete);
    assert_int_equal(grammar_match_bytes(gr, "12a", 3, &prefix, &complete), DERAS_OK);
    assert_false(prefix);
    grammar_destroy(&gr);
    free(g);

    q.regex = "(a";
    q.regex_len = 2;
    assert_int_equal(constraint_gbnf(&q, &g, &n, msg, sizeof msg), PE_INVALID_GRAMMAR);
    assert_null(g);
    assert_non_null(strstr(msg, "regex"));
    q.regex = NULL;

    q.grammar = "root ::= \"a\" missing";
    q.grammar_len = strlen(q.grammar);
    assert_int_equal(constraint_gbnf(&q, &g, &n, msg, sizeof msg), PE_INVALID_GRAMMAR);
    assert_non_null(strstr(msg, "missing"));
    q.grammar = "root ::= \"yes\" | \"no\"";
    q.grammar_len = strlen(q.grammar);
    assert_int_equal(constraint_gbnf(&q, &g, &n, msg, sizeof msg), PE_NONE);
    assert_memory_equal(g, q.grammar, n);
    free(g);
    q.grammar = NULL;

    q.json_schema = json_loads("{\"type\": \"array\", \"uniqueItems\": true}", 0, NULL);
    assert_int_equal(constraint_gbnf(&q, &g, &n, msg, sizeof msg), PE_INVALID_GRAMMAR);
    assert_non_null(strstr(msg, "uniqueItems"));
    json_decref(q.json_schema);
    q.json_schema = json_loads("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
                               "\"integer\"}}, \"required\": [\"a\"]}", 0, NULL);
    assert_int_equal(constraint_gbnf(&q, &g, &n, msg, sizeof msg), PE_NONE);
    assert_int_equal(grammar_from_gbnf(g, n, NULL, &gr), DERAS_OK);
    assert_int_equal(grammar_match_bytes(gr, "{\"a\": 12}", 9, &prefix, &complete), DERAS_OK);
    assert_true(complete);
    grammar_destroy(&gr);
    free(g);
    json_decref(q.json_schema);
    q.json_schema = NULL;

    q.json_object = true;
    assert_int_equal(constraint_gbnf(&q, &g, &n, msg, sizeof msg), PE_NONE);
    assert_int_equal(grammar_from_gbnf(g, n, NULL, &gr), DERAS_OK);
    assert_int_equal(grammar_match_bytes(gr, "[1]", 3, &prefix, &complete), DERAS_OK);
    assert_false(prefix); /* an object, not any value */
    grammar_destroy(&gr);
    free(g);
}

/* ---- the OpenAI fields ---- */

#define MSGS "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]"
#define TOOL(name) "{\"type\": \"function\", \"function\": {\"name\": \"" name "\", " \
                   "\"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": " \
                   "\"integer\"}}, \"required\": [\"x\"]}}}"

static void accepted(oai_kind kind, const char *body, oai_request *r)
{
    oai_error e;
    if (oai_parse(kind, body, strlen(body), &lim, r, &e))
        fail_msg("%s: refused: %s (%s)", body, e.message, e.param);
}

static void refused(oai_kind kind, const char *body, const char *param)
{
    oai_request r;
    oai_error e;
    int rc = oai_parse(kind, body, strlen(body), &lim, &r, &e);
    if (rc != DERAS_EFORMAT || strcmp(e.param, param))
        fail_msg("%s: rc %d param '%s' (%s); wanted a refusal naming %s", body, rc, e.param,
                 e.message, param);
}

static void openai_fields(void **s)
{
    (void)s;
    oai_request r;
    accepted(OAI_CHAT, "{" MSGS ", \"response_format\": {\"type\": \"json_object\"}}", &r);
    assert_true(r.q.json_object);
    oai_request_free(&r);
    accepted(OAI_CHAT, "{" MSGS ", \"response_format\": {\"type\": \"json_schema\", "
                       "\"json_schema\": {\"name\": \"n\", \"strict\": true, \"schema\": "
                       "{\"type\": \"object\"}}}}", &r);
    assert_true(json_is_object(r.q.json_schema));
    oai_request_free(&r);
    accepted(OAI_CHAT, "{" MSGS ", \"response_format\": {\"type\": \"text\"}}", &r);
    assert_false(r.q.json_object);
    assert_null(r.q.json_schema);
    oai_request_free(&r);
    accepted(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"guided_json\": \"{\\\"type\\\": "
                              "\\\"string\\\"}\"}", &r);
    assert_true(json_is_object(r.q.json_schema));
    oai_request_free(&r);
    accepted(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"guided_regex\": \"a+\"}", &r);
    assert_int_equal(r.q.regex_len, 2);
    oai_request_free(&r);
    accepted(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"guided_choice\": [\"yes\", \"no \\\"x\\\"\"]}",
             &r);
    grammar_t *g;
    bool prefix, complete;
    assert_int_equal(grammar_from_gbnf(r.q.grammar, r.q.grammar_len, NULL, &g), DERAS_OK);
    assert_int_equal(grammar_match_bytes(g, "no \"x\"", 6, &prefix, &complete), DERAS_OK);
    assert_true(complete);
    grammar_destroy(&g);
    oai_request_free(&r);

    accepted(OAI_CHAT, "{" MSGS ", \"tools\": [" TOOL("f") "]}", &r);
    assert_int_equal(r.tool_choice, OAI_TOOL_CHOICE_AUTO);
    assert_true(r.parallel_tool_calls);
    oai_request_free(&r);
    accepted(OAI_CHAT, "{" MSGS ", \"tool_choice\": {\"type\": \"function\", \"function\": "
                       "{\"name\": \"g\"}}, \"tools\": [" TOOL("f") ", " TOOL("g") "], "
                       "\"parallel_tool_calls\": false}", &r);
    assert_int_equal(r.tool_choice, OAI_TOOL_CHOICE_NAMED);
    assert_string_equal(r.tool_name, "g");
    assert_false(r.parallel_tool_calls);
    oai_request_free(&r);
    accepted(OAI_CHAT, "{" MSGS ", \"tool_choice\": \"none\", \"tools\": [" TOOL("f") "]}", &r);
    assert_int_equal(r.tool_choice, OAI_TOOL_CHOICE_NONE);
    oai_request_free(&r);

    refused(OAI_CHAT, "{" MSGS ", \"response_format\": {\"type\": \"json_schema\"}}",
            "response_format");
    refused(OAI_CHAT, "{" MSGS ", \"response_format\": {\"type\": \"json_object\", \"x\": 1}}",
            "response_format");
    refused(OAI_CHAT, "{" MSGS ", \"response_format\": {\"type\": \"json_schema\", "
                      "\"json_schema\": {\"schema\": 3}}}", "response_format");
    refused(OAI_CHAT, "{" MSGS ", \"response_format\": {\"type\": \"json_object\"}, "
                      "\"guided_regex\": \"a\"}", "response_format");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"guided_json\": \"[1,\"}", "guided_json");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"guided_choice\": []}", "guided_choice");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"guided_regex\": \"\"}", "guided_regex");
    refused(OAI_COMPLETIONS, "{\"prompt\": \"a\", \"tools\": []}", "tools");
    refused(OAI_CHAT, "{" MSGS ", \"tool_choice\": \"required\"}", "tool_choice");
    refused(OAI_CHAT, "{" MSGS ", \"tool_choice\": \"sometimes\", \"tools\": [" TOOL("f") "]}",
            "tool_choice");
    refused(OAI_CHAT, "{" MSGS ", \"tool_choice\": {\"type\": \"function\", \"function\": "
                      "{\"name\": \"h\"}}, \"tools\": [" TOOL("f") "]}", "tool_choice");
    refused(OAI_CHAT, "{" MSGS ", \"tool_choice\": \"required\", \"tools\": [" TOOL("f") "], "
                      "\"response_format\": {\"type\": \"json_object\"}}", "tool_choice");
    refused(OAI_CHAT, "{" MSGS ", \"tools\": [" TOOL("f") ", " TOOL("f") "]}", "tools");
    refused(OAI_CHAT, "{" MSGS ", \"tools\": [" TOOL("a b") "]}", "tools");
    refused(OAI_CHAT, "{" MSGS ", \"tools\": [{\"type\": \"code\"}]}", "tools");
    refused(OAI_CHAT, "{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                      "\"f\", \"parameters\": []}}]}", "tools");
    refused(OAI_CHAT, "{" MSGS ", \"parallel_tool_calls\": 1}", "parallel_tool_calls");
}

/* ---- tools_grammar ---- */

static json_t *tools_json(void)
{
    json_t *t = json_loads("[" TOOL("get_weather") ", {\"type\": \"function\", \"function\": "
                           "{\"name\": \"now\"}}]", 0, NULL);
    assert_non_null(t);
    return t;
}

static void match(const char *gbnf, size_t n, const char *text, bool want_complete,
                  bool want_prefix)
{
    grammar_t *g;
    assert_int_equal(grammar_from_gbnf(gbnf, n, NULL, &g), DERAS_OK);
    bool prefix, complete;
    assert_int_equal(grammar_match_bytes(g, text, strlen(text), &prefix, &complete), DERAS_OK);
    grammar_destroy(&g);
    if (complete != want_complete || prefix != want_prefix)
        fail_msg("'%s': complete %d prefix %d, wanted %d %d", text, complete, prefix,
                 want_complete, want_prefix);
}

static void call_grammars(void **s)
{
    (void)s;
    json_t *tools = tools_json();
    char *g, msg[256];
    size_t n;
    static const char h1[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"x\": 3}}\n"
                             "</tool_call>";
    static const char h2[] = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    assert_int_equal(tools_grammar(TOOL_STYLE_HERMES, tools, NULL, true, &g, &n, msg, sizeof msg),
                     PE_NONE);
    match(g, n, h1, true, true);
    match(g, n, h2, true, true);
    char two[512];
    snprintf(two, sizeof two, "%s\n%s", h1, h2);
    match(g, n, two, true, true);
    match(g, n, "<tool_call>\n{\"name\": \"other\"", false, false);
    match(g, n, "Sure", false, false);
    free(g);
    assert_int_equal(tools_grammar(TOOL_STYLE_HERMES, tools, "now", true, &g, &n, msg, sizeof msg),
                     PE_NONE);
    match(g, n, h2, true, true);
    match(g, n, h1, false, false);
    snprintf(two, sizeof two, "%s\n%s", h2, h2);
    match(g, n, two, false, false); /* named: one call */
    free(g);
    assert_int_equal(tools_grammar(TOOL_STYLE_LLAMA3_JSON, tools, NULL, true, &g, &n, msg,
                                   sizeof msg), PE_NONE);
    match(g, n, "{\"name\": \"get_weather\", \"parameters\": {\"x\": -1}}", true, true);
    match(g, n, "{\"name\": \"get_weather\", \"parameters\": {\"y\": 1}}", false, false);
    free(g);
    /* style none is enforced as llama3_json */
    assert_int_equal(tools_grammar(TOOL_STYLE_NONE, tools, "now", false, &g, &n, msg, sizeof msg),
                     PE_NONE);
    match(g, n, "{\"name\": \"now\", \"parameters\": {}}", true, true);
    free(g);
    assert_int_equal(tools_grammar(TOOL_STYLE_HERMES, tools, "absent", true, &g, &n, msg,
                                   sizeof msg), PE_INVALID_GRAMMAR);
    json_decref(tools);
    tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"bad\", "
                       "\"parameters\": {\"type\": \"object\", \"not\": {}}}}]", 0, NULL);
    assert_int_equal(tools_grammar(TOOL_STYLE_HERMES, tools, NULL, true, &g, &n, msg, sizeof msg),
                     PE_INVALID_GRAMMAR);
    assert_null(g);
    assert_non_null(strstr(msg, "'bad'"));
    assert_non_null(strstr(msg, "not"));
    json_decref(tools);
}

/* ---- tool_parser ---- */

typedef struct parsed {
    oai_buf content, calls;
} parsed;

static void parse_whole(tool_style st, const char *text, parsed *out)
{
    tool_parser p = {0};
    tool_parser_start(&p, st, 42);
    memset(out, 0, sizeof *out);
    tool_parser_feed(&p, text, strlen(text), false, &out->content, &out->calls);
    tool_parser_finish(&p, false, &out->content, &out->calls);
    tool_parser_free(&p);
}

/* The calls' [name, arguments] pairs, for comparing a stream's with the whole reply's. */
static json_t *call_pairs(const oai_buf *calls)
{
    char *text = malloc(calls->n + 3);
    text[0] = '[';
    memcpy(text + 1, calls->p ? calls->p : "", calls->n);
    text[calls->n + 1] = ']';
    text[calls->n + 2] = '\0';
    json_t *a = json_loads(text, 0, NULL);
    if (!a)
        fail_msg("calls are not JSON: %s", text);
    free(text);
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(a, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        assert_true(id && !strncmp(id, "call_", 5) && strlen(id) == 29);
        assert_string_equal(json_string_value(json_object_get(c, "type")), "function");
        json_array_append_new(out, json_pack("[OO]", json_object_get(fn, "name"),
                                             json_object_get(fn, "arguments")));
    }
    json_decref(a);
    return out;
}

/* Streamed in pieces cut at `cuts` (a byte at a time when every bit is set) == whole. */
static void stream_equals_whole(tool_style st, const char *text)
{
    parsed whole;
    parse_whole(st, text, &whole);
    json_t *want = call_pairs(&whole.calls);
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n + 1; cut++) {
        tool_parser p = {0};
        tool_parser_start(&p, st, 42);
        oai_buf content = {0}, calls = {0};
        if (cut <= n) { /* two pieces */
            tool_parser_feed(&p, text, cut, true, &content, &calls);
            tool_parser_feed(&p, text + cut, n - cut, true, &content, &calls);
        } else { /* a byte at a time */
            for (size_t i = 0; i < n; i++)
                tool_parser_feed(&p, text + i, 1, true, &content, &calls);
        }
        tool_parser_finish(&p, true, &content, &calls);
        if (content.n != whole.content.n ||
            (content.n && memcmp(content.p, whole.content.p, content.n)))
            fail_msg("'%s' cut at %zu: content '%.*s', whole '%.*s'", text, cut, (int)content.n,
                     content.p, (int)whole.content.n, whole.content.p);
        json_t *got = call_pairs(&calls);
        if (!json_equal(got, want))
            fail_msg("'%s' cut at %zu: other calls", text, cut);
        json_decref(got);
        tool_parser_free(&p);
        oai_buf_free(&content);
        oai_buf_free(&calls);
    }
    json_decref(want);
    oai_buf_free(&whole.content);
    oai_buf_free(&whole.calls);
}

static void expect(tool_style st, const char *text, const char *content, const char *calls)
{
    parsed r;
    parse_whole(st, text, &r);
    if (r.content.n != strlen(content) ||
        memcmp(r.content.p ? r.content.p : "", content, r.content.n))
        fail_msg("'%s': content '%.*s', wanted '%s'", text, (int)r.content.n, r.content.p, content);
    json_t *got = call_pairs(&r.calls), *want = json_loads(calls, 0, NULL);
    assert_non_null(want);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, 0);
        fail_msg("'%s': calls %s, wanted %s", text, g, calls);
    }
    json_decref(got);
    json_decref(want);
    oai_buf_free(&r.content);
    oai_buf_free(&r.calls);
    stream_equals_whole(st, text);
}

static void parser_hermes(void **s)
{
    (void)s;
    tool_style H = TOOL_STYLE_HERMES;
    expect(H, "Let me look.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"x\"]}}\n"
              "</tool_call>", "Let me look.", "[[\"f\", \"{\\\"a\\\":[1,\\\"x\\\"]}\"]]");
    expect(H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
              "{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 2}\"}\n</tool_call>\n", "",
           "[[\"f\", \"{}\"], [\"g\", \"{\\\"b\\\":2}\"]]");
    expect(H, "a < b and <tool x", "a < b and <tool x", "[]");
    expect(H, "x <tool_call>not json</tool_call> y", "x <tool_call>not json</tool_call> y",
           "[]");
    expect(H, "<tool_call>{\"arguments\": {}}</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>", "[]");
    expect(H, "<tool_call>\n{\"name\": \"f\"", "<tool_call>\n{\"name\": \"f\"", "[]");
    expect(H, "<tool_call><tool_call>", "<tool_call><tool_call>", "[]");
    expect(H, "", "", "[]");
    expect(TOOL_STYLE_NONE, "<tool_call>{\"name\": \"f\"}</tool_call>",
           "<tool_call>{\"name\": \"f\"}</tool_call>", "[]");
}

static void parser_llama3(void **s)
{
    (void)s;
    tool_style L = TOOL_STYLE_LLAMA3_JSON;
    expect(L, " {\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}", "",
           "[[\"f\", \"{\\\"q\\\":\\\"x\\\"}\"]]");
    expect(L, "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"arguments\": {\"z\": 0}}",
           "", "[[\"f\", \"{}\"], [\"g\", \"{\\\"z\\\":0}\"]]");
    expect(L, "{\"answer\": 42}", "{\"answer\": 42}", "[]");
    expect(L, "{\"name\": \"f\", \"parameters\": {}} trailing",
           "{\"name\": \"f\", \"parameters\": {}} trailing", "[]");
    expect(L, "The answer is {\"name\": \"f\"}", "The answer is {\"name\": \"f\"}", "[]");
    expect(L, "  ", "  ", "[]");
}

static void styles(void **s)
{
    (void)s;
    assert_int_equal(tool_style_of_template(NULL), TOOL_STYLE_NONE);
    assert_int_equal(tool_style_of_template("{{ '<tool_call>' }}"), TOOL_STYLE_HERMES);
    assert_int_equal(tool_style_of_template("<tool_call>\n<function=x>"), TOOL_STYLE_NONE);
    assert_int_equal(tool_style_of_template("{\"name\": function name, \"parameters\": ...}"),
                     TOOL_STYLE_LLAMA3_JSON);
    tool_style st;
    assert_true(tool_style_parse("hermes", &st));
    assert_int_equal(st, TOOL_STYLE_HERMES);
    assert_false(tool_style_parse("xml", &st));
    assert_string_equal(tool_style_name(TOOL_STYLE_LLAMA3_JSON), "llama3_json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(constraint_kinds), cmocka_unit_test(openai_fields),
        cmocka_unit_test(call_grammars),    cmocka_unit_test(parser_hermes),
        cmocka_unit_test(parser_llama3),    cmocka_unit_test(styles),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
