/* SPDX-License-Identifier: Apache-2.0 */
/* proto_error.h - the stable error codes a client sees, and the one mapping from the
 * project's status codes to them.
 *
 * A request can fail in the router (decoding, admission, routing) or in a worker's engine
 * (engine_add refused it). Either way the client gets one of these codes, by name, in an
 * `error` reply (docs/protocol.md lists them). They live here, below the wire, so that the
 * engine side decides with codes too: the engine returns a deras_status (DERAS_ECONTEXT
 * for a request longer than the context), the worker turns it into a code with
 * proto_error_of_status() and the worker link carries the code's name; nobody reads
 * message text to decide. Costs: O(1); nothing allocates.
 */
#ifndef DERAS_PROTO_ERROR_H
#define DERAS_PROTO_ERROR_H

/* Stable error codes; proto_error_name() gives the wire string. Never renumber. */
enum proto_error_code {
    PE_NONE = 0,
    PE_MALFORMED,               /* "malformed": not msgpack, not a map, trailing bytes, too deep */
    PE_UNSUPPORTED_VERSION,     /* "unsupported_version" */
    PE_UNKNOWN_TYPE,            /* "unknown_type": "type" is not a known message */
    PE_INVALID_FIELD,           /* "invalid_field": unknown key or wrong type */
    PE_MISSING_FIELD,           /* "missing_field" */
    PE_MESSAGE_TOO_LARGE,       /* "message_too_large" */
    PE_LIMIT_EXCEEDED,          /* "limit_exceeded": a cap (max_tokens, n, stops, logprobs...) */
    PE_VALUE_OUT_OF_RANGE,      /* "value_out_of_range": non-finite or out-of-range number */
    PE_TOKEN_OUT_OF_RANGE,      /* "token_out_of_range": a token id outside [0, vocab) */
    PE_INVALID_UTF8,            /* "invalid_utf8" */
    PE_CONTEXT_LENGTH_EXCEEDED, /* "context_length_exceeded": prompt + max_tokens > context */
    PE_DUPLICATE_ID,            /* "duplicate_id": this client already has a live request with it */
    PE_UNKNOWN_REQUEST,         /* "unknown_request": cancel of an id that is not live */
    PE_BUSY,                    /* "busy": admission queue full; retry later */
    PE_NO_WORKERS,              /* "no_workers": no worker is ready */
    PE_WORKER_FAILED,           /* "worker_failed": the worker serving the request died */
    PE_DEADLINE_EXCEEDED,       /* "deadline_exceeded": deadline_ms passed before the end */
    PE_SHUTTING_DOWN,           /* "shutting_down": the router is draining for exit */
    PE_INTERNAL,                /* "internal" */
    PE_CHAT_UNSUPPORTED,        /* "chat_unsupported": the model has no chat template and no
                                   built-in chat format fits it */
    PE_CHAT_TEMPLATE,           /* "chat_template_error": the model's chat template refused
                                   the conversation (its raise_exception) or failed on it */
    PE_INVALID_GRAMMAR,         /* "invalid_grammar": a json_schema, regex or grammar (or the
                                   OpenAI response_format / tools) that does not compile:
                                   syntax, an unsupported keyword (named), a limit */
    PE_GRAMMAR_BUDGET,          /* "grammar_budget_exceeded": decoding under the grammar went
                                   past a matcher budget (too ambiguous or too deeply nested
                                   output); the request ends instead of running unconstrained */
    PE_N_CODES
};

/* The wire string of c; "internal" for a value outside the enum. Never NULL. */
const char *proto_error_name(enum proto_error_code c);

/* The code a client sees for a request the engine refused with `status` (a deras_status
 * from engine_add or the request checks): DERAS_ECONTEXT context_length_exceeded,
 * DERAS_EBUSY busy, DERAS_ERANGE value_out_of_range, DERAS_EINVAL invalid_field, anything
 * else internal. */
enum proto_error_code proto_error_of_status(int status);

#endif
