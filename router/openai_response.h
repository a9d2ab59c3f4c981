/* SPDX-License-Identifier: Apache-2.0 */
/* openai_response.h - the router's replies -> OpenAI-compatible JSON.
 *
 * Response bodies, server-sent-event chunks, usage and error objects appended to a
 * growable byte buffer (oai_buf) that keeps its capacity, so a warm stream appends a chunk
 * without allocating. JSON strings are escaped here; token bytes that are not valid UTF-8
 * become U+FFFD in token strings (their exact bytes are in "bytes"); a logprob of -inf is
 * written as -9999.0 (JSON has no infinity; vLLM does the same). A streamed chunk and a
 * whole choice share one writer of the choice object, so they cannot drift apart.
 *
 * Costs: O(output); allocation only when a buffer grows.
 */
#ifndef DERAS_ROUTER_OPENAI_RESPONSE_H
#define DERAS_ROUTER_OPENAI_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/request/finish_reason.h"
#include "common/tokenizer/tokenizer.h"
#include "common/wire/protocol.h"
#include "router/openai_request.h"


typedef struct oai_buf {
    char *p;
    size_t n, cap;
    bool failed;             /* a grow failed: the content is incomplete */
} oai_buf;

void oai_buf_free(oai_buf *b);
void oai_buf_put(oai_buf *b, const char *s, size_t n);
void oai_buf_printf(oai_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s[0..n) as a JSON string, quotes included; invalid UTF-8 becomes U+FFFD. */
void oai_buf_json_str(oai_buf *b, const char *s, size_t n);

/* What a choice (a whole one, or a streamed delta) says. */
typedef struct oai_piece {
    int index;
    const char *text;
    size_t n_text;
    const proto_logprob *lps; /* NULL: no logprobs */
    int n_lps, top_n;
    int text_offset;          /* completions: offset of text in the sample's output */
    const char *finish;       /* NULL: not finished */
    bool role;                /* chat delta: announce the assistant's role */
    bool usage;               /* chunk: add usage (continuous_usage_stats) with these */
    int prompt_tokens, completion_tokens;
    const char *tool_calls;   /* chat: the tool call objects, comma-separated (tool_calls.h);
                                 a message with calls and no text has content null */
    size_t n_tool_calls;      /* bytes; 0: none */
} oai_piece;

/* "data: {chunk}\n\n" for one streamed piece. */
void oai_put_chunk(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                   const char *model, const tokenizer_t *tok, const oai_piece *p);
/* A finished choice for a non-streamed response ("," before it unless first). */
void oai_put_choice(oai_buf *b, oai_kind kind, const tokenizer_t *tok, const oai_piece *p,
                    bool first);
/* The whole non-streamed body around the choices written by oai_put_choice. */
void oai_put_response(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                      const char *model, const oai_buf *choices, int prompt_tokens,
                      int completion_tokens);
/* The streamed usage chunk (choices []), then nothing; and the stream's end. */
void oai_put_usage_chunk(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                         const char *model, int prompt_tokens, int completion_tokens);
/* {"error": {"message", "type", "param", "code"}}: type from the HTTP status
 * (invalid_request_error, authentication_error, rate_limit_error, server_error), code a
 * stable string (a protocol error name, or invalid_api_key, not_found, model_not_found,
 * method_not_allowed); param NULL or "" is null. */
void oai_put_error(oai_buf *b, unsigned http_status, const char *code, const char *param,
                   const char *message);
/* The finish_reason of a finish. */
const char *oai_finish_name(finish_reason f);
/* The same for a chat whose sample made tool calls: "tool_calls" where it stopped. */
const char *oai_finish_name_tools(finish_reason f, int n_tool_calls);
/* The HTTP status an error code is answered with. */
unsigned oai_http_status(enum proto_error_code code);

#endif
