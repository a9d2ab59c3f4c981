/* SPDX-License-Identifier: Apache-2.0 */
/* cli_util.c - helpers shared by the command-line tools (see cli_util.h). */
#include "cli_util.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/base/status.h"

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

/* The 40-character Z85 key of a line: bare, or in quotes after `secret-key =`. */
static bool line_key(const char *line, char out[41])
{
    const char *p = line + strspn(line, " \t");
    if (*p == '#' || strstr(p, "public-key"))
        return false;
    const char *q = strchr(p, '"');
    size_t n;
    if (q) {
        p = q + 1;
        const char *e = strchr(p, '"');
        n = e ? (size_t)(e - p) : 0;
    } else {
        n = strcspn(p, " \t\r\n");
    }
    if (n != 40)
        return false;
    memcpy(out, p, 40);
    out[40] = '\0';
    return true;
}

int cli_read_secret_key(const char *path, char out[41])
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return deras_fail(DERAS_EIO, "%s: %s", path, strerror(errno));
    if (sb.st_mode & 077)
        return deras_fail(DERAS_EINVAL, "%s: the secret key file is readable by others "
                          "(chmod 600)", path);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return deras_fail(DERAS_EIO, "%s: %s", path, strerror(errno));
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, fp))
        found = line_key(line, out);
    fclose(fp);
    return found ? DERAS_OK
                 : deras_fail(DERAS_EFORMAT, "%s: no 40-character Z85 secret key in it", path);
}
