/* SPDX-License-Identifier: Apache-2.0 */
/* openai_codec.h - OpenAI-compatible JSON <-> the router's request and replies.
 *
 * Parsing: a POST /v1/completions or /v1/chat/completions body (JSON, bounded by the HTTP
 * layer) becomes a proto_request, the same struct the msgpack decoder fills, so both doors
 * share the router's checks, tokenizing and admission (frontend_admit). Every field is
 * checked as the msgpack protocol checks it (the sampling table's ranges, the protocol's
 * caps); a field this server cannot honour (response_format other than text, functions,
 * tool_choice "required" or a named tool, best_of > n, echo, suffix) and any unknown field
 * is refused naming the field, never ignored. Nulls read as absent.
 *
 * Encoding: response bodies, server-sent-event chunks, usage and error objects appended to
 * a growable byte buffer (oai_buf) that keeps its capacity, so a warm stream appends a
 * chunk without allocating. JSON strings are escaped here; token bytes that are not valid
 * UTF-8 become U+FFFD in token strings (their exact bytes are in "bytes"); a logprob of
 * -inf is written as -9999.0 (JSON has no infinity; vLLM does the same).
 *
 * Costs: parsing is jansson's (O(body), one allocation per JSON value: at most ~30 bytes
 * of memory per body byte) plus O(fields); encoding is O(output) and allocates only when
 * a buffer grows.
 */
#ifndef DERAS_ROUTER_OPENAI_CODEC_H
#define DERAS_ROUTER_OPENAI_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/request/finish_reason.h"
#include "common/tokenizer/tokenizer.h"
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

/* ---- output ---- */

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
/* The HTTP status an error code is answered with. */
unsigned oai_http_status(enum proto_error_code code);

#endif
