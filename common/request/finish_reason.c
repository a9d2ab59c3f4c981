/* SPDX-License-Identifier: Apache-2.0 */
/* finish_reason.c - the names of the finish reasons (see finish_reason.h). */
#include "finish_reason.h"

#include <string.h>

static const char *const names[FINISH_N] = {
    [FINISH_STOP] = "stop",
    [FINISH_LENGTH] = "length",
    [FINISH_ABORT] = "abort",
    [FINISH_ERROR] = "error",
};

const char *finish_reason_name(finish_reason f)
{
    return (int)f >= 0 && f < FINISH_N ? names[f] : "unknown";
}

bool finish_reason_parse(const char *s, finish_reason *out)
{
    for (int f = 0; s && f < FINISH_N; f++)
        if (!strcmp(s, names[f])) {
            *out = (finish_reason)f;
            return true;
        }
    return false;
}
