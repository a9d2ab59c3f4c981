/* SPDX-License-Identifier: Apache-2.0 */
/* openai_request.h - an OpenAI-compatible request body (JSON) -> the router's request.
 *
 * A POST /v1/completions or /v1/chat/completions body (JSON, bounded by the HTTP layer)
 * becomes a proto_request, the same struct the msgpack decoder fills, so both doors share
 * the router's checks, tokenizing and admission (frontend_admit). Every field is checked
 * as the msgpack protocol checks it (the sampling table's ranges, the protocol's caps); a
 * field this server cannot honour (functions, best_of > n, echo, suffix) and any unknown
 * field is refused naming the field, never ignored. Nulls read as absent. The replies'
 * side is openai_response.h.
 *
 * Structured output: response_format {"type": "json_object"} is JSON mode, {"type":
 * "json_schema", "json_schema": {"name", "schema", "strict", "description"}} a JSON Schema
 * (no schema: JSON mode); vLLM's guided_json, guided_regex, guided_grammar and
 * guided_choice are taken too (both kinds). At most one of them. Tools (chat): the
 * definitions are checked ({"type": "function", "function": {"name" ([a-zA-Z0-9_-],
 * 1..64 bytes), "description", "parameters" (an object), "strict"}}) and rendered by the
 * chat template; tool_choice "none", "auto" (the default with tools), "required" or
 * {"type": "function", "function": {"name"}} is recorded for the router, which enforces the
 * last two with a grammar (router/tool_calls.h); these exclude the other structured outputs.
 *
 * Costs: jansson's parse (O(body), one allocation per JSON value: at most ~30 bytes of
 * memory per body byte) plus O(fields).
 */
#ifndef DERAS_ROUTER_OPENAI_REQUEST_H
#define DERAS_ROUTER_OPENAI_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/wire/protocol.h"

typedef enum oai_kind { OAI_COMPLETIONS, OAI_CHAT } oai_kind;

/* What tool_choice asks (OAI_TOOLS_ABSENT: no tools at all). */
typedef enum oai_tool_choice {
    OAI_TOOLS_ABSENT = 0, OAI_TOOL_CHOICE_NONE, OAI_TOOL_CHOICE_AUTO, OAI_TOOL_CHOICE_REQUIRED,
    OAI_TOOL_CHOICE_NAMED
} oai_tool_choice;

typedef struct oai_request {
    oai_kind kind;
    proto_request q;         /* strings and JSON values point into root */
    json_t *root;            /* the parsed body, owned (oai_request_free) */
    json_t *messages;        /* chat: the checked copy handed to the template, owned */
    int32_t *ids;            /* completions: a prompt of token ids, owned */
    const char *model;       /* "" when absent */
    bool include_usage;      /* stream_options.include_usage */
    bool continuous_usage;   /* stream_options.continuous_usage_stats (vLLM's): usage in
                                every chunk, the sample's tokens so far */
    bool logprobs;           /* token logprobs asked (q.params.sp.n_logprobs >= 1 then) */
    int top_logprobs;        /* alternatives to report per token, 0..20 */
    oai_tool_choice tool_choice;
    const char *tool_name;   /* OAI_TOOL_CHOICE_NAMED: the function (in root) */
    bool parallel_tool_calls;/* default true */
    char *choice_grammar;    /* guided_choice's GBNF, owned */
    json_t *guided_schema;   /* guided_json sent as JSON text, parsed; owned */
} oai_request;

typedef struct oai_error {
    enum proto_error_code code;
    char param[64];          /* the field, "" when none */
    char message[256];
} oai_error;

/* Parse body[0..len) as a `kind` request under lim. DERAS_OK with *out filled (release it
 * with oai_request_free), or DERAS_EFORMAT with *err filled (*out then holds nothing to
 * free). O(len). */
int oai_parse(oai_kind kind, const char *body, size_t len, const proto_limits *lim,
              oai_request *out, oai_error *err);
void oai_request_free(oai_request *r);

#endif
