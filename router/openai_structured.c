/* SPDX-License-Identifier: Apache-2.0 */
/* openai_structured.c - the OpenAI request fields that constrain the output (see
 * openai_request.h, "Structured output"): response_format, vLLM's guided_* fields, tools,
 * tool_choice and parallel_tool_calls, checked into the proto_request's structured-output
 * fields and the oai_request's tool choice. */
#include "router/openai_structured.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

#define OAI_MAX_TOOL_NAME 64

static int sfail(oai_error *e, enum proto_error_code code, const char *param, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));
static int sfail(oai_error *e, enum proto_error_code code, const char *param, const char *fmt,
                 ...)
{
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return DERAS_EFORMAT;
}

static bool tool_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > OAI_MAX_TOOL_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* tools: [{"type": "function", "function": {"name", "description"?, "parameters"?,
 * "strict"?}}], names unique. */
static int parse_tools(oai_error *e, const json_t *v, oai_request *r)
{
    if (!json_is_array(v) || json_array_size(v) > PROTO_MAX_TOOLS)
        return sfail(e, PE_INVALID_FIELD, "tools", "tools must be an array of at most %d objects",
                     PROTO_MAX_TOOLS);
    size_t i;
    const json_t *t;
    json_array_foreach(v, i, t) {
        const json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(t) || !json_is_string(type) ||
            strcmp(json_string_value(type), "function") || !json_is_object(fn))
            return sfail(e, PE_INVALID_FIELD, "tools",
                         "tools[%zu] must be {\"type\": \"function\", \"function\": {...}}", i);
        if (!name || !tool_name_ok(name))
            return sfail(e, PE_INVALID_FIELD, "tools",
                         "tools[%zu].function.name must be 1..%d characters of a-z, A-Z, 0-9, _ "
                         "and -", i, OAI_MAX_TOOL_NAME);
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)fn, k, x) {
            bool ok = !strcmp(k, "name") || (!strcmp(k, "description") && json_is_string(x)) ||
                      (!strcmp(k, "parameters") && json_is_object(x)) ||
                      (!strcmp(k, "strict") && json_is_boolean(x)) || json_is_null(x);
            if (!ok)
                return sfail(e, PE_INVALID_FIELD, "tools",
                             "tools[%zu].function.%.40s: unknown, or not of its type (description "
                             "a string, parameters an object, strict a boolean)", i, k);
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(name, json_string_value(json_object_get(
                                  json_object_get(json_array_get(v, j), "function"), "name"))))
                return sfail(e, PE_INVALID_FIELD, "tools", "tools: function '%s' is defined twice",
                             name);
    }
    r->q.tools = (json_t *)v;
    if (r->tool_choice == OAI_TOOLS_ABSENT)
        r->tool_choice = OAI_TOOL_CHOICE_AUTO;
    return DERAS_OK;
}

static int parse_tool_choice(oai_error *e, const json_t *v, oai_request *r)
{
    const char *s = json_string_value(v);
    if (s && !strcmp(s, "none"))
        r->tool_choice = OAI_TOOL_CHOICE_NONE;
    else if (s && !strcmp(s, "auto"))
        r->tool_choice = OAI_TOOL_CHOICE_AUTO;
    else if (s && !strcmp(s, "required"))
        r->tool_choice = OAI_TOOL_CHOICE_REQUIRED;
    else {
        const json_t *type = json_object_get(v, "type"), *fn = json_object_get(v, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !name)
            return sfail(e, PE_INVALID_FIELD, "tool_choice",
                         "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": "
                         "\"function\", \"function\": {\"name\": ...}}");
        r->tool_choice = OAI_TOOL_CHOICE_NAMED;
        r->tool_name = name;
    }
    return DERAS_OK;
}

/* response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {...}}. */
static int parse_response_format(oai_error *e, const json_t *v, oai_request *r)
{
    const char *type = json_string_value(json_object_get(v, "type"));
    const json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(v) || !type)
        return sfail(e, PE_INVALID_FIELD, "response_format",
                     "response_format must be an object with a type");
    if (!strcmp(type, "text") || !strcmp(type, "json_object")) {
        if (json_object_size(v) != 1)
            return sfail(e, PE_INVALID_FIELD, "response_format",
                         "response_format of type %s takes no other key", type);
        r->q.json_object = !strcmp(type, "json_object");
        return DERAS_OK;
    }
    if (strcmp(type, "json_schema"))
        return sfail(e, PE_INVALID_FIELD, "response_format",
                     "response_format.type must be text, json_object or json_schema");
    if (!json_is_object(js) || json_object_size(v) != 2)
        return sfail(e, PE_INVALID_FIELD, "response_format",
                     "response_format of type json_schema needs a json_schema object (and no "
                     "other key)");
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)js, k, x) {
        bool ok = (!strcmp(k, "name") && json_is_string(x)) ||
                  (!strcmp(k, "description") && json_is_string(x)) ||
                  (!strcmp(k, "strict") && (json_is_boolean(x) || json_is_null(x))) ||
                  (!strcmp(k, "schema") && (json_is_object(x) || json_is_boolean(x)));
        if (!ok)
            return sfail(e, PE_INVALID_FIELD, "response_format",
                         "response_format.json_schema.%.40s: unknown, or not of its type (name "
                         "and description strings, strict a boolean, schema an object)", k);
    }
    const json_t *schema = json_object_get(js, "schema");
    if (schema)
        r->q.json_schema = (json_t *)schema;
    else
        r->q.json_object = true; /* no schema: any JSON object */
    return DERAS_OK;
}

/* guided_choice: the output is one of the strings: root ::= "a" | "b" ... */
static int parse_choice(oai_error *e, const json_t *v, oai_request *r)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || n == 0 || n > 1024)
        return sfail(e, PE_INVALID_FIELD, "guided_choice",
                     "guided_choice must be an array of 1..1024 strings");
    size_t cap = 16, i;
    const json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s) || json_string_length(s) == 0)
            return sfail(e, PE_INVALID_FIELD, "guided_choice",
                         "guided_choice[%zu] must be a non-empty string", i);
        cap += json_string_length(s) * 4 + 8;
    }
    if (cap > PROTO_MAX_GRAMMAR_BYTES)
        return sfail(e, PE_LIMIT_EXCEEDED, "guided_choice", "guided_choice is too large");
    char *g = malloc(cap), *o = g;
    if (!g)
        return sfail(e, PE_INTERNAL, "guided_choice", "out of memory");
    o += sprintf(o, "root ::= ");
    json_array_foreach(v, i, s) {
        const unsigned char *c = (const unsigned char *)json_string_value(s);
        o += sprintf(o, i ? " | \"" : "\"");
        for (size_t k = 0; k < json_string_length(s); k++) {
            if (c[k] == '"' || c[k] == '\\' || c[k] < 0x20)
                o += sprintf(o, "\\x%02x", c[k]);
            else
                *o++ = (char)c[k];
        }
        *o++ = '"';
    }
    *o = '\0';
    free(r->choice_grammar);
    r->choice_grammar = g;
    r->q.grammar = g;
    r->q.grammar_len = (size_t)(o - g);
    return DERAS_OK;
}

int oai_structured_field(oai_error *e, oai_kind kind, const char *k, const json_t *v,
                         oai_request *r)
{
    bool chat = kind == OAI_CHAT;
    proto_request *q = &r->q;
    if (chat && !strcmp(k, "tools"))
        return parse_tools(e, v, r);
    if (chat && !strcmp(k, "tool_choice"))
        return parse_tool_choice(e, v, r);
    if (chat && !strcmp(k, "parallel_tool_calls")) {
        if (!json_is_boolean(v))
            return sfail(e, PE_INVALID_FIELD, k, "parallel_tool_calls must be a boolean");
        r->parallel_tool_calls = json_is_true(v);
        return DERAS_OK;
    }
    if (!strcmp(k, "response_format"))
        return parse_response_format(e, v, r);
    if (!strcmp(k, "guided_json")) {
        if (json_is_string(v)) {
            json_t *j = json_loads(json_string_value(v), JSON_DECODE_ANY, NULL);
            if (!json_is_object(j) && !json_is_boolean(j)) {
                json_decref(j);
                return sfail(e, PE_INVALID_GRAMMAR, k, "guided_json: not a JSON Schema");
            }
            json_decref(r->guided_schema);
            r->guided_schema = j;
            v = j;
        } else if (!json_is_object(v)) {
            return sfail(e, PE_INVALID_FIELD, k, "guided_json must be an object or its JSON text");
        }
        q->json_schema = (json_t *)v;
        return DERAS_OK;
    }
    if (!strcmp(k, "guided_regex") || !strcmp(k, "guided_grammar")) {
        size_t n = json_string_length(v);
        if (!json_is_string(v) || n == 0 || n > PROTO_MAX_GRAMMAR_BYTES)
            return sfail(e, PE_INVALID_FIELD, k, "%s must be a string of 1..%d bytes", k,
                         PROTO_MAX_GRAMMAR_BYTES);
        if (k[7] == 'r') {
            q->regex = json_string_value(v);
            q->regex_len = n;
        } else {
            q->grammar = json_string_value(v);
            q->grammar_len = n;
        }
        return DERAS_OK;
    }
    if (!strcmp(k, "guided_choice"))
        return parse_choice(e, v, r);
    return -1;
}

int oai_structured_check(oai_error *e, oai_request *r)
{
    const proto_request *q = &r->q;
    int n = !!q->json_schema + !!q->regex + !!q->grammar + q->json_object;
    if (n > 1)
        return sfail(e, PE_INVALID_FIELD, "response_format",
                     "give at most one of response_format (json), guided_json, guided_regex, "
                     "guided_grammar and guided_choice");
    if (r->tool_choice == OAI_TOOL_CHOICE_NAMED || r->tool_choice == OAI_TOOL_CHOICE_REQUIRED) {
        if (!q->tools || json_array_size(q->tools) == 0)
            return sfail(e, PE_INVALID_FIELD, "tool_choice",
                         "tool_choice %s needs tools", r->tool_name ? "of a function" : "required");
        if (n)
            return sfail(e, PE_INVALID_FIELD, "tool_choice",
                         "tool_choice required or named constrains the output itself: no "
                         "response_format json or guided_* with it");
    }
    if (r->tool_choice == OAI_TOOL_CHOICE_NAMED) {
        size_t i;
        const json_t *t;
        json_array_foreach(q->tools, i, t) {
            const char *name = json_string_value(json_object_get(json_object_get(t, "function"),
                                                                 "name"));
            if (name && !strcmp(name, r->tool_name))
                return DERAS_OK;
        }
        return sfail(e, PE_INVALID_FIELD, "tool_choice",
                     "tool_choice names function '%.64s', which is not in tools", r->tool_name);
    }
    return DERAS_OK;
}
