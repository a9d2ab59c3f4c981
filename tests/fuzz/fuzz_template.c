/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_template.c - libFuzzer target for the chat-template interpreter (common/template).
 *
 * The input is a template source, optionally followed by a NUL byte and a JSON context
 * (when that is not a JSON object, a fixed conversation is used). It is compiled and, if
 * that succeeds, rendered under small bounds (10^5 steps, 64 KiB of output, 16 MiB of
 * values, depth 32), so every input ends quickly. Invariants, any broken one aborts:
 *  - compile and render return 0 or one of the documented statuses, with a message that
 *    names a template line when a template line is at fault;
 *  - a successful render yields exactly out_len bytes; a failed one yields NULL and 0;
 *  - rendering twice gives the same result (rendering does not change the template);
 *  - nothing leaks (ASan's leak checker) and no bound is exceeded (the bounds stop it).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/template/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *DEFAULT_CTX =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\":"
    " \"hi \\u00e9 <b>\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\","
    " \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"}], \"tools\": [{\"type\":"
    " \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static bool known_status(int st)
{
    return st == 0 || st == DERAS_EFORMAT || st == DERAS_EUNSUPPORTED || st == DERAS_EINVAL ||
           st == DERAS_ERANGE || st == DERAS_ETIMEOUT || st == DERAS_ENOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *fallback;
    if (!fallback && !(fallback = json_loads(DEFAULT_CTX, 0, NULL)))
        abort();
    const char *src = (const char *)data;
    size_t src_len = size;
    const uint8_t *nul = memchr(data, 0, size);
    json_t *ctx = NULL;
    if (nul) {
        src_len = (size_t)(nul - data);
        ctx = json_loadb((const char *)nul + 1, size - src_len - 1, JSON_DECODE_ANY, NULL);
    }
    json_t *use = ctx && json_is_object(ctx) ? ctx : fallback;
    tmpl_limits lim = {.max_output = 64 * 1024, .max_steps = 100000, .max_depth = 32,
                       .max_memory = 16u << 20};
    tmpl_t *t = NULL;
    int st = tmpl_compile(src, src_len, &lim, &t);
    if (!known_status(st) || (st && t) || (!st && !t))
        abort();
    if (st && st != DERAS_ENOMEM && !strstr(deras_errmsg(), "template"))
        abort();
    if (t) {
        char *out[2] = {NULL, NULL};
        size_t len[2] = {0, 0};
        int rs[2];
        for (int i = 0; i < 2; i++) {
            rs[i] = tmpl_render(t, use, &out[i], &len[i]);
            if (!known_status(rs[i]) || (rs[i] && (out[i] || len[i])) || (!rs[i] && !out[i]))
                abort();
            if (!rs[i] && out[i][len[i]] != 0) /* NUL-terminated after out_len bytes */
                abort();
        }
        if (rs[0] != rs[1] || len[0] != len[1] || (len[0] && memcmp(out[0], out[1], len[0])))
            abort();
        free(out[0]);
        free(out[1]);
        tmpl_destroy(&t);
    }
    json_decref(ctx);
    return 0;
}
