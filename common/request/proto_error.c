/* SPDX-License-Identifier: Apache-2.0 */
/* proto_error.c - error code names and the status mapping (see proto_error.h). */
#include "proto_error.h"

#include "common/base/status.h"

static const char *const error_names[PE_N_CODES] = {
    [PE_NONE] = "none",
    [PE_MALFORMED] = "malformed",
    [PE_UNSUPPORTED_VERSION] = "unsupported_version",
    [PE_UNKNOWN_TYPE] = "unknown_type",
    [PE_INVALID_FIELD] = "invalid_field",
    [PE_MISSING_FIELD] = "missing_field",
    [PE_MESSAGE_TOO_LARGE] = "message_too_large",
    [PE_LIMIT_EXCEEDED] = "limit_exceeded",
    [PE_VALUE_OUT_OF_RANGE] = "value_out_of_range",
    [PE_TOKEN_OUT_OF_RANGE] = "token_out_of_range",
    [PE_INVALID_UTF8] = "invalid_utf8",
    [PE_CONTEXT_LENGTH_EXCEEDED] = "context_length_exceeded",
    [PE_DUPLICATE_ID] = "duplicate_id",
    [PE_UNKNOWN_REQUEST] = "unknown_request",
    [PE_BUSY] = "busy",
    [PE_NO_WORKERS] = "no_workers",
    [PE_WORKER_FAILED] = "worker_failed",
    [PE_DEADLINE_EXCEEDED] = "deadline_exceeded",
    [PE_SHUTTING_DOWN] = "shutting_down",
    [PE_INTERNAL] = "internal",
    [PE_CHAT_UNSUPPORTED] = "chat_unsupported",
    [PE_CHAT_TEMPLATE] = "chat_template_error",
    [PE_INVALID_GRAMMAR] = "invalid_grammar",
    [PE_GRAMMAR_BUDGET] = "grammar_budget_exceeded",
};

const char *proto_error_name(enum proto_error_code c)
{
    if ((int)c < 0 || c >= PE_N_CODES)
        return "internal";
    return error_names[c];
}

enum proto_error_code proto_error_of_status(int status)
{
    switch (status) {
    case DERAS_ECONTEXT: return PE_CONTEXT_LENGTH_EXCEEDED;
    case DERAS_EBUSY: return PE_BUSY;
    case DERAS_ERANGE: return PE_VALUE_OUT_OF_RANGE;
    case DERAS_EINVAL: return PE_INVALID_FIELD;
    default: return PE_INTERNAL;
    }
}
