/* SPDX-License-Identifier: Apache-2.0 */
/* openai_request.h - an OpenAI-compatible request body (JSON) -> the router's request.
 *
 * A POST /v1/completions or /v1/chat/completions body (JSON, bounded by the HTTP layer)
 * becomes a proto_request, the same struct the msgpack decoder fills, so both doors share
 * the router's checks, tokenizing and admission (frontend_admit). Every field is checked
 * as the msgpack protocol checks it (the sampling table's ranges, the protocol's caps); a
 * field this server cannot honour (response_format other than text, functions,
 * tool_choice "required" or a named tool, best_of > n, echo, suffix) and any unknown field
 * is refused naming the field, never ignored. Nulls read as absent. The replies' side is
 * openai_response.h.
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
