/* SPDX-License-Identifier: Apache-2.0 */
/* protocol.h - the client protocol: messages between clients and deras-router.
 *
 * Transport: ZeroMQ. A client connects a DEALER socket to the router's ROUTER socket and
 * sends and receives single-frame messages (a REQ client's empty delimiter frame is
 * accepted and echoed). Each frame is one msgpack map with a "type" key. Version: see
 * PROTO_VERSION; a request may carry "v", which must then equal it. docs/protocol.md is
 * the reference for clients; this header is the C view of the same thing.
 *
 * Decoding is strict and bounded. A frame is first checked structurally without trusting
 * any declared length (every array/map/string count is checked against the bytes that
 * remain, nesting depth and total element count are capped), so the msgpack library never
 * allocates more than a small multiple of the frame's size; then the map is matched
 * against the schema: known keys only, exact types (an integer where an integer is due;
 * a float field also accepts an integer), every number finite and in range, every cap
 * respected, every string valid UTF-8. The first violation is reported as a proto_error
 * with a stable code and a message naming the field and the bound. Checks that need the
 * model (token ids against the vocabulary, prompt + max_tokens against the context) are
 * the router's, with the same codes.
 *
 * Encoding uses msgpack-c packers into a reusable buffer: after warm-up, encoding a chunk
 * allocates nothing.
 */
#ifndef DERAS_PROTOCOL_H
#define DERAS_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/request/finish_reason.h"
#include "common/request/proto_error.h"
#include "common/request/req_params.h"
#include "common/request/spec_counters.h"

#define PROTO_VERSION 1
#define PROTO_MAX_ID 64          /* bytes in a request id */
#define PROTO_MAX_STOPS 16
#define PROTO_MAX_STOP_BYTES 256
#define PROTO_MAX_DEPTH 16       /* containers nested in a client frame (a chat's tool calls) */
/* Chat requests (docs/protocol.md, "Chat"). */
#define PROTO_MAX_MESSAGES 1024        /* messages in one conversation */
#define PROTO_MAX_CONTENT_PARTS 64     /* text parts of one message's content */
#define PROTO_MAX_TOOL_CALLS 64        /* tool calls of one assistant message */
#define PROTO_MAX_TOOLS 128            /* tool definitions */
#define PROTO_MAX_TEMPLATE_KWARGS 32   /* keys of chat_template_kwargs */
#define PROTO_MAX_CHAT_NAME 256        /* bytes of a name, tool_call_id or kwargs key */
/* Structured output (docs/protocol.md, "Structured output"). */
#define PROTO_MAX_GRAMMAR_BYTES (256 << 10) /* a regex, GBNF grammar or JSON Schema text */


typedef struct proto_error {
    enum proto_error_code code;
    char message[256];
    char id[PROTO_MAX_ID + 1]; /* the request id when it could be read, else "" */
} proto_error;

/* Limits the router enforces (configurable; defaults in proto_limits_default). */
typedef struct proto_limits {
    size_t max_message_bytes;  /* whole frame; default 4 MiB */
    int max_prompt_bytes;      /* text prompt; default 1 MiB */
    int max_prompt_ids;        /* token-id prompt; default 131072 */
    int max_tokens;            /* cap on max_tokens; default 32768 */
    int64_t max_deadline_ms;   /* default 24 h */
} proto_limits;

void proto_limits_default(proto_limits *l);

/* ---- client -> router ---- */

enum proto_client_type { PROTO_REQUEST = 1, PROTO_CANCEL = 2, PROTO_PING = 3 };

/* A decoded request. Defaults: req_params_init's (max_tokens 256, n 1, the sampling
 * table's defaults, no stop ids, the worker's speculation), stream false, no seed, no
 * deadline, add_special_tokens true, add_generation_prompt true, no structured output.
 * Pointers point into the decoder and stay valid until its next decode (the JSON values
 * too: the decoder owns them). Exactly one of prompt / prompt_ids / messages is set. For encoding (the C
 * client) the JSON values are the caller's, borrowed. */
typedef struct proto_request {
    char id[PROTO_MAX_ID + 1];
    const char *prompt;          /* UTF-8, not NUL-terminated */
    size_t prompt_len;
    const int32_t *prompt_ids;
    int n_prompt_ids;
    bool stream, add_special_tokens, has_seed; /* has_seed: params.seed was given */
    int n_stops;
    const char *stops[PROTO_MAX_STOPS]; /* UTF-8, not NUL-terminated */
    size_t stop_lens[PROTO_MAX_STOPS];
    int64_t deadline_ms;         /* 0: none; else relative to the router's receipt */
    req_params params;           /* what the worker's engine gets; on the wire
                                    "num_speculative_tokens" 0 is params.spec_tokens -1 */
    /* a chat: the router renders the model's chat template with these */
    json_t *messages;            /* array of {role, content, ...}; NULL: not a chat */
    json_t *tools;               /* array of tool definitions; NULL: none */
    json_t *template_kwargs;     /* object of extra template variables; NULL: none */
    bool add_generation_prompt;
    /* structured output, at most one of the four: the router compiles it to a grammar
     * (router/constraint.h) that the worker enforces while decoding */
    json_t *json_schema;         /* a JSON Schema (sent as a map or as JSON text); NULL: none */
    const char *regex;           /* a regular expression the whole output matches */
    size_t regex_len;
    const char *grammar;         /* a GBNF grammar (llama.cpp's notation), start rule root */
    size_t grammar_len;
    bool json_object;            /* JSON mode: the output is one JSON object */
} proto_request;

/* Reset *r to the defaults above (no prompt, empty id). O(sizeof *r). */
void proto_request_default(proto_request *r);

typedef struct proto_client_msg {
    enum proto_client_type type;
    proto_request req;                  /* PROTO_REQUEST */
    char cancel_id[PROTO_MAX_ID + 1];   /* PROTO_CANCEL */
} proto_client_msg;

typedef struct proto_decoder proto_decoder_t;

/* A decoder enforcing lim (NULL: proto_limits_default). DERAS_ENOMEM. */
int proto_decoder_new(const proto_limits *lim, proto_decoder_t **out);
void proto_decoder_destroy(proto_decoder_t **d);

/* Decode one client frame. DERAS_OK with *out filled, or DERAS_EFORMAT with *err filled
 * (code, message, and the id if it could be read). Never reads outside buf. Cost: O(len). */
int proto_decode_client(proto_decoder_t *d, const void *buf, size_t len, proto_client_msg *out,
                        proto_error *err);

/* ---- router -> client ---- */

typedef struct proto_logprob {
    int32_t token_id;
    float logprob;
    int n_top;
    int32_t top_ids[SAMPLING_MAX_LOGPROBS];
    float top_logprobs[SAMPLING_MAX_LOGPROBS];
} proto_logprob;

typedef struct proto_usage {
    int prompt_tokens, completion_tokens;
    double queue_ms, ttft_ms, total_ms; /* receipt to dispatch, to first token, to the end */
    spec_counters spec;        /* the sample's speculation; all 0, and absent on the wire,
                                  when it had none */
} proto_usage;

typedef struct proto_encoder proto_encoder_t;

/* DERAS_ENOMEM. */
int proto_encoder_new(proto_encoder_t **out);
void proto_encoder_destroy(proto_encoder_t **e);

/* Each encoder call replaces the encoder's buffer with one message; *buf / *len stay valid
 * until the next call. ENOMEM is the only failure. */

/* {"type":"chunk","id","index","token_ids","text"[,"logprobs"]}: streamed tokens of sample
 * `index` and the text they complete (possibly ""). lps: one per token id, or NULL. */
int proto_encode_chunk(proto_encoder_t *e, const char *id, int index, const int32_t *ids, int n_ids,
                       const char *text, size_t text_len, const proto_logprob *lps,
                       const void **buf, size_t *len);

/* {"type":"final","id","index","finish_reason","usage":{...}[,"text","token_ids",
 * "logprobs"][,"abort_reason"]}: the end of sample `index`. Non-streaming requests carry
 * the whole text, token ids and logprobs here (text/ids NULL for streams). */
int proto_encode_final(proto_encoder_t *e, const char *id, int index, finish_reason why,
                       const char *abort_reason, const proto_usage *u, const char *text,
                       size_t text_len, const int32_t *ids, int n_ids, const proto_logprob *lps,
                       const void **buf, size_t *len);

/* {"type":"error","id","code","message"}: the request ends (all samples). id may be "". */
int proto_encode_error(proto_encoder_t *e, const char *id, enum proto_error_code code,
                       const char *message, const void **buf, size_t *len);

/* Per-worker summary in a pong (operators and tests watch load through it). */
#define PROTO_MAX_WORKERS 64
typedef struct proto_worker_status {
    char name[65];
    char state[16];            /* "starting", "ready", "draining", "drained", "dead" */
    int running, waiting, kv_blocks_free, kv_blocks_total;
    uint64_t served;           /* requests dispatched to it so far */
} proto_worker_status;

/* {"type":"pong","v","workers":[{"name","state","running","waiting","kv_blocks_free",
 * "kv_blocks_total","served"}...]} */
int proto_encode_pong(proto_encoder_t *e, const proto_worker_status *w, int n_workers,
                      const void **buf, size_t *len);

/* ---- client side: encoding requests, decoding replies (the C client library) ---- */

/* Encode a request as the router expects it; fields at their defaults are omitted. */
int proto_encode_request(proto_encoder_t *e, const proto_request *r, const void **buf, size_t *len);
int proto_encode_cancel(proto_encoder_t *e, const char *id, const void **buf, size_t *len);

enum proto_server_type { PROTO_CHUNK = 1, PROTO_FINAL = 2, PROTO_ERROR = 3, PROTO_PONG = 4 };

typedef struct proto_server_msg {
    enum proto_server_type type;
    char id[PROTO_MAX_ID + 1];
    int index;
    const int32_t *token_ids;  /* chunk, or final of a non-stream request */
    int n_token_ids;
    const char *text;          /* not NUL-terminated */
    size_t text_len;
    finish_reason finish;      /* final */
    const char *abort_reason;  /* final; NUL-terminated or NULL */
    proto_usage usage;         /* final */
    enum proto_error_code code;/* error */
    const char *message;       /* error; NUL-terminated */
    int n_workers;             /* pong */
    const proto_worker_status *workers; /* pong: into the decoder's storage */
} proto_server_msg;

/* Decode a router reply (same strictness; unknown error codes map to PE_INTERNAL, an
 * unknown finish_reason is invalid_field).
 * Logprobs in replies are skipped by this decoder. */
int proto_decode_server(proto_decoder_t *d, const void *buf, size_t len, proto_server_msg *out,
                        proto_error *err);

#endif
