/* cli_util.c - helpers shared by the command-line tools (see cli_util.h). */
#include "cli_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int cli_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: expected an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_float(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "%s: expected a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_u64(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "%s: expected a non-negative integer, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

void cli_default_model(char *buf, size_t cap)
{
    const char *dir = getenv("DERAS_MODELS");
    const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (dir && *dir)
        snprintf(buf, cap, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else if (cache && *cache)
        snprintf(buf, cap, "%s/deras/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(buf, cap, "%s/.cache/deras/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : ".");
}

void cli_progress(void *ctx, int done, int total)
{
    int *last = ctx;
    int pct = total > 0 ? done * 100 / total : 100;
    if (pct / 10 != *last / 10 || done == total) {
        fprintf(stderr, "loading weights: %3d%% (%d/%d)\n", pct, done, total);
        *last = pct;
    }
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
