/* SPDX-License-Identifier: Apache-2.0 */
/* bench_samples.c - the per-request JSON lines of `deras bench --samples` (see the header). */
#include "tools/bench_samples.h"

#include <stdio.h>
#include <time.h>

#include "common/base/status.h"

static json_t *ms_or_null(bool have, double seconds)
{
    return have ? json_real(seconds * 1e3) : json_null();
}

int bench_samples_write(const char *path, json_t *run, const bench_sample *s, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return deras_fail(DERAS_EIO, "--samples %s: cannot create the file", path);
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_t *head = json_pack("{s:O}", "run", run);
    json_object_set_new(json_object_get(head, "run"), "date", json_string(date));
    int bad = !head || json_dumpf(head, f, JSON_COMPACT | JSON_REAL_PRECISION(6)) ||
              fputc('\n', f) == EOF;
    json_decref(head);
    for (int i = 0; i < n && !bad; i++) {
        const bench_sample *r = &s[i];
        bool first = r->ok && r->first > 0;
        json_t *o = json_pack(
            "{s:i, s:f, s:f, s:o, s:o, s:o, s:i, s:i, s:b, s:s?}", "i", i, "arrival_s",
            r->arrival, "send_s", r->send, "ttft_ms", ms_or_null(first, r->first - r->send),
            "tpot_ms",
            ms_or_null(first && r->output_tokens > 1 && r->last > r->first,
                       (r->last - r->first) / (r->output_tokens > 1 ? r->output_tokens - 1 : 1)),
            "e2e_ms", ms_or_null(r->ok, r->end - r->send), "output_tokens", r->output_tokens,
            "prompt_tokens", r->prompt_tokens, "ok", r->ok, "error", r->error);
        bad = !o || json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(6)) ||
              fputc('\n', f) == EOF;
        json_decref(o);
    }
    if (fclose(f) || bad)
        return deras_fail(DERAS_EIO, "--samples %s: writing failed", path);
    return DERAS_OK;
}
