/* SPDX-License-Identifier: Apache-2.0 */
/* tool_calls.c - tool-call grammars and the tool-call parser (see tool_calls.h). */
#include "router/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/grammar.h"
#include "common/schema/json_schema.h"

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
#define OPEN_LEN (sizeof OPEN - 1)
#define CLOSE_LEN (sizeof CLOSE - 1)

/* parser states: hermes OUT, IN; llama3_json OUT (the start), TEXT, JSON */
enum { S_OUT = 0, S_IN, S_TEXT, S_JSON };

static const char *const style_names[] = {"none", "hermes", "llama3_json"};

const char *tool_style_name(tool_style s)
{
    return (unsigned)s < 3 ? style_names[s] : "none";
}

bool tool_style_parse(const char *name, tool_style *out)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, style_names[i])) {
            *out = (tool_style)i;
            return true;
        }
    return false;
}

tool_style tool_style_of_template(const char *src)
{
    if (!src)
        return TOOL_STYLE_NONE;
    if (strstr(src, OPEN) && !strstr(src, "<function="))
        return TOOL_STYLE_HERMES;
    if (strstr(src, "\"parameters\""))
        return TOOL_STYLE_LLAMA3_JSON;
    return TOOL_STYLE_NONE;
}

/* ---- the grammar ---- */

static bool ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/* Copy GBNF g[0..n) into out with every rule name prefixed: names are the identifiers
 * outside literals, classes, repetition braces and comments. */
static void rename_rules(oai_buf *out, const char *g, size_t n, const char *prefix)
{
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < n;) {
        char c = g[i];
        char end = c == '"' ? '"' : c == '[' ? ']' : c == '{' ? '}' : c == '#' ? '\n' : 0;
        if (end) {
            size_t j = i + 1;
            while (j < n && g[j] != end)
                j += g[j] == '\\' && end != '\n' ? 2 : 1;
            j = j < n ? j + 1 : n;
            oai_buf_put(out, g + i, j - i);
            i = j;
        } else if (ident_char(c)) {
            size_t j = i;
            while (j < n && ident_char(g[j]))
                j++;
            oai_buf_put(out, prefix, plen);
            oai_buf_put(out, g + i, j - i);
            i = j;
        } else {
            oai_buf_put(out, &c, 1);
            i++;
        }
    }
}

/* Function f's frame rule and its parameters' renamed grammar, as fN. */
static enum proto_error_code add_function(oai_buf *out, tool_style style, int f,
                                          const json_t *fn, char *msg, size_t cap)
{
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *params = json_object_get(fn, "parameters");
    json_t *empty = NULL;
    if (!params || (json_is_object(params) && json_object_size(params) == 0))
        params = empty = json_pack("{s:s}", "type", "object"); /* no parameters: {} */
    char *g = NULL;
    size_t n = 0;
    int rc = params ? jschema_to_gbnf_json(params, NULL, &g, &n)
                    : deras_fail(DERAS_ENOMEM, "out of memory");
    json_decref(empty);
    if (rc) {
        snprintf(msg, cap, "tools: function '%s': parameters: %s", name, deras_errmsg());
        return rc == DERAS_ENOMEM ? PE_INTERNAL : PE_INVALID_GRAMMAR;
    }
    char prefix[24];
    snprintf(prefix, sizeof prefix, "f%d-", f);
    if (style == TOOL_STYLE_HERMES)
        oai_buf_printf(out, "f%d ::= \"<tool_call>\\n{\\\"name\\\": \\\"%s\\\", "
                            "\\\"arguments\\\": \" f%d-root \"}\\n</tool_call>\"\n", f, name, f);
    else
        oai_buf_printf(out, "f%d ::= \"{\\\"name\\\": \\\"%s\\\", \\\"parameters\\\": \" f%d-root "
                            "\"}\"\n", f, name, f);
    rename_rules(out, g, n, prefix);
    oai_buf_put(out, "\n", 1);
    free(g);
    return PE_NONE;
}

enum proto_error_code tools_grammar(tool_style style, const json_t *tools, const char *name,
                                    bool parallel, char **gbnf, size_t *len, char *msg,
                                    size_t cap)
{
    *gbnf = NULL;
    *len = 0;
    if (style == TOOL_STYLE_NONE)
        style = TOOL_STYLE_LLAMA3_JSON;
    oai_buf out = {0}, alts = {0};
    size_t i;
    const json_t *t;
    int n_fn = 0;
    enum proto_error_code code = PE_NONE;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (name && strcmp(json_string_value(json_object_get(fn, "name")), name))
            continue;
        if ((code = add_function(&out, style, (int)i, fn, msg, cap)) != PE_NONE)
            break;
        oai_buf_printf(&alts, n_fn++ ? " | f%zu" : "f%zu", i);
    }
    if (code == PE_NONE && n_fn == 0) {
        snprintf(msg, cap, "tool_choice: no function named '%s' in tools", name ? name : "");
        code = PE_INVALID_GRAMMAR;
    }
    if (code == PE_NONE) {
        if (style == TOOL_STYLE_HERMES && parallel && !name)
            oai_buf_printf(&out, "root ::= call (\"\\n\" call)*\ncall ::= %.*s\n", (int)alts.n,
                           alts.p);
        else
            oai_buf_printf(&out, "root ::= %.*s\n", (int)alts.n, alts.p);
        oai_buf_put(&out, "", 1);
        grammar_t *g = NULL;
        int rc = out.failed ? deras_fail(DERAS_ENOMEM, "out of memory")
                            : grammar_from_gbnf(out.p, out.n - 1, NULL, &g);
        grammar_destroy(&g);
        if (rc) {
            snprintf(msg, cap, "tools: %s", deras_errmsg());
            code = rc == DERAS_ENOMEM ? PE_INTERNAL : PE_INVALID_GRAMMAR;
        }
    }
    oai_buf_free(&alts);
    if (code != PE_NONE) {
        oai_buf_free(&out);
        return code;
    }
    *gbnf = out.p;
    *len = out.n - 1;
    return PE_NONE;
}

/* ---- the parser ---- */

void tool_parser_start(tool_parser *p, tool_style style, uint64_t id_seed)
{
    p->style = style;
    p->state = S_OUT;
    p->held.n = p->blanks.n = 0;
    p->held.failed = p->blanks.failed = false;
    p->n_calls = 0;
    p->id_seed = id_seed;
}

void tool_parser_free(tool_parser *p)
{
    oai_buf_free(&p->held);
    oai_buf_free(&p->blanks);
}

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* Content, except blanks between or after calls (OpenAI's messages have none): after a
 * call, trailing blanks wait in p->blanks for text that follows them (the next call or the
 * end drops them), so a reply streamed in any pieces gives the same content as whole. */
static void put_content(tool_parser *p, oai_buf *content, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (p->n_calls == 0) {
        oai_buf_put(content, s, n);
        return;
    }
    size_t k = n;
    while (k > 0 && blank(s + k - 1, 1))
        k--;
    if (k > 0) {
        if (p->blanks.n)
            oai_buf_put(content, p->blanks.p, p->blanks.n);
        p->blanks.n = 0;
        oai_buf_put(content, s, k);
    }
    oai_buf_put(&p->blanks, s + k, n - k);
}

/* One call object from a parsed {"name", "arguments" | "parameters"}; false if it is not. */
static bool put_call(tool_parser *p, const json_t *o, bool delta, oai_buf *calls)
{
    const json_t *name = json_object_get(o, "name");
    json_t *args = json_object_get(o, "arguments");
    if (!args)
        args = json_object_get(o, "parameters");
    json_t *parsed = NULL;
    if (json_is_string(args)) /* arguments already as JSON text */
        args = parsed = json_loads(json_string_value(args), 0, NULL);
    if (!json_is_object(o) || !json_is_string(name) || (args && !json_is_object(args))) {
        json_decref(parsed);
        return false;
    }
    char *text = args ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(parsed);
    if (calls->n)
        oai_buf_put(calls, ",", 1);
    if (delta)
        oai_buf_printf(calls, "{\"index\":%d,", p->n_calls);
    else
        oai_buf_put(calls, "{", 1);
    oai_buf_printf(calls, "\"id\":\"call_%016llx%08x\",\"type\":\"function\",\"function\":{"
                          "\"name\":", (unsigned long long)mix(p->id_seed + (uint64_t)p->n_calls),
                   (unsigned)(mix(p->id_seed ^ 0x5eed) & 0xffffffffu));
    oai_buf_json_str(calls, json_string_value(name), json_string_length(name));
    oai_buf_put(calls, ",\"arguments\":", 13);
    oai_buf_json_str(calls, text ? text : "{}", text ? strlen(text) : 2);
    oai_buf_put(calls, "}}", 2);
    free(text);
    p->n_calls++;
    p->blanks.n = 0; /* blanks between calls */
    return true;
}

static void drop_held(tool_parser *p, size_t k)
{
    memmove(p->held.p, p->held.p + k, p->held.n - k);
    p->held.n -= k;
}

static const char *find(const char *s, size_t n, const char *w, size_t wn)
{
    for (size_t i = 0; i + wn <= n; i++)
        if (s[i] == w[0] && !memcmp(s + i, w, wn))
            return s + i;
    return NULL;
}

/* Hermes: decide as much of the held text as can be decided. */
static void hermes_run(tool_parser *p, bool delta, oai_buf *content, oai_buf *calls)
{
    for (;;) {
        const char *h = p->held.p;
        size_t n = p->held.n;
        if (p->state == S_OUT) {
            const char *at = find(h, n, OPEN, OPEN_LEN);
            if (at) {
                put_content(p, content, h, (size_t)(at - h));
                drop_held(p, (size_t)(at - h) + OPEN_LEN);
                p->state = S_IN;
                continue;
            }
            size_t keep = 0; /* the longest tail that may still become the tag */
            for (size_t k = n < OPEN_LEN - 1 ? n : OPEN_LEN - 1; k > 0 && !keep; k--)
                if (!memcmp(h + n - k, OPEN, k))
                    keep = k;
            put_content(p, content, h, n - keep);
            drop_held(p, n - keep);
            return;
        }
        const char *end = find(h, n, CLOSE, CLOSE_LEN);
        if (!end)
            return;
        size_t inner = (size_t)(end - h);
        json_t *o = json_loadb(h, inner, 0, NULL);
        if (!o || !put_call(p, o, delta, calls)) {
            put_content(p, content, OPEN, OPEN_LEN);
            put_content(p, content, h, inner + CLOSE_LEN);
        }
        json_decref(o);
        drop_held(p, inner + CLOSE_LEN);
        p->state = S_OUT;
    }
}

/* llama3_json: a reply starting with '{' is held for the end. */
static void json_run(tool_parser *p, oai_buf *content)
{
    if (p->state == S_OUT) {
        size_t i = 0;
        while (i < p->held.n && blank(p->held.p + i, 1))
            i++;
        if (i == p->held.n)
            return;
        p->state = p->held.p[i] == '{' ? S_JSON : S_TEXT;
    }
    if (p->state == S_TEXT) {
        put_content(p, content, p->held.p, p->held.n);
        p->held.n = 0;
    }
}

void tool_parser_feed(tool_parser *p, const char *text, size_t n, bool delta, oai_buf *content,
                      oai_buf *calls)
{
    if (n == 0)
        return;
    if (p->style == TOOL_STYLE_NONE) {
        oai_buf_put(content, text, n);
        return;
    }
    oai_buf_put(&p->held, text, n);
    if (p->style == TOOL_STYLE_HERMES)
        hermes_run(p, delta, content, calls);
    else
        json_run(p, content);
}

/* The held reply as ';'-separated call objects, all or nothing. */
static bool json_calls(tool_parser *p, bool delta, oai_buf *calls)
{
    size_t at = 0, before = calls->n;
    int n_before = p->n_calls;
    while (at < p->held.n) {
        json_error_t je;
        json_t *o = json_loadb(p->held.p + at, p->held.n - at, JSON_DISABLE_EOF_CHECK, &je);
        bool ok = o && put_call(p, o, delta, calls);
        json_decref(o);
        if (!ok) {
            calls->n = before;
            p->n_calls = n_before;
            return false;
        }
        at += (size_t)je.position;
        while (at < p->held.n && (blank(p->held.p + at, 1) || p->held.p[at] == ';'))
            at++;
    }
    return p->n_calls > n_before;
}

void tool_parser_finish(tool_parser *p, bool delta, oai_buf *content, oai_buf *calls)
{
    if (p->style == TOOL_STYLE_HERMES && p->state == S_IN) /* unterminated: as written */
        put_content(p, content, OPEN, OPEN_LEN);
    else if (p->style == TOOL_STYLE_LLAMA3_JSON && p->state == S_JSON &&
             json_calls(p, delta, calls))
        p->held.n = 0;
    put_content(p, content, p->held.p, p->held.n);
    p->held.n = 0;
    p->state = S_OUT;
}
