/* SPDX-License-Identifier: Apache-2.0 */
/* sampling_flags.c - command-line flags from the sampling table (see sampling_flags.h). */
#include "tools/sampling_flags.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

static bool excluded(const char *flag, const char *const *exclude)
{
    for (int j = 0; exclude && exclude[j]; j++)
        if (!strcmp(exclude[j], flag))
            return true;
    return false;
}

void sampling_flags_options(const char *const *exclude, struct option *out, int *n, int cap)
{
    for (int i = 0; i < SAMPLING_N_PARAMS && *n < cap - 1; i++)
        if (!excluded(sampling_param_table[i].flag, exclude))
            out[(*n)++] = (struct option){sampling_param_table[i].flag, required_argument, 0,
                                          SAMPLING_FLAGS_CODE + i};
    out[*n] = (struct option){0, 0, 0, 0};
}

/* The whole of s as a number of the row's kind within its bounds. */
static bool parse_value(const sampling_param_info *pi, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = pi->kind == SAMPLING_INT ? (double)strtol(s, &end, 10) : strtod(s, &end);
    if (errno || end == s || *end || !sampling_param_in_range(pi, v))
        return false;
    *out = v;
    return true;
}

/* --flag ID:BIAS, one more entry of a logit-bias map. */
static int apply_bias(const sampling_param_info *pi, logit_bias *b, const char *arg)
{
    char *end, range[64];
    errno = 0;
    long id = strtol(arg, &end, 10);
    bool ok = !errno && end != arg && *end == ':' && id >= 0 && id <= INT32_MAX;
    double v = 0;
    if (ok) {
        const char *s = end + 1;
        v = strtod(s, &end);
        ok = !errno && end != s && !*end && sampling_param_in_range(pi, v);
    }
    if (!ok) {
        fprintf(stderr, "--%s: expected ID:BIAS, a token id and a bias in %s, got '%s'\n",
                pi->flag, sampling_param_range(pi, range, sizeof range), arg);
        return -1;
    }
    if (logit_bias_add(b, (int32_t)id, (float)v)) {
        fprintf(stderr, "--%s: %s\n", pi->flag, deras_errmsg());
        return -1;
    }
    return 1;
}

int sampling_flags_apply(sampling_params *p, int c, const char *arg)
{
    int i = c - SAMPLING_FLAGS_CODE;
    if (i < 0 || i >= SAMPLING_N_PARAMS)
        return 0;
    const sampling_param_info *pi = &sampling_param_table[i];
    if (pi->kind == SAMPLING_BIAS)
        return apply_bias(pi, (logit_bias *)((char *)p + pi->offset), arg);
    double v;
    if (!parse_value(pi, arg, &v)) {
        char range[64];
        fprintf(stderr, "--%s: expected %s in %s, got '%s'\n", pi->flag,
                pi->kind == SAMPLING_INT ? "an integer" : "a number",
                sampling_param_range(pi, range, sizeof range), arg);
        return -1;
    }
    sampling_param_set(p, i, v);
    return 1;
}

void sampling_flags_usage(FILE *f, const sampling_params *def, const char *const *exclude)
{
    for (int i = 0; i < SAMPLING_N_PARAMS; i++) {
        const sampling_param_info *pi = &sampling_param_table[i];
        if (excluded(pi->flag, exclude))
            continue;
        char opt[64];
        snprintf(opt, sizeof opt, "--%s %s", pi->flag, pi->arg);
        if (pi->kind == SAMPLING_BIAS)
            fprintf(f, "  %-23s %s (at most %d)\n", opt, pi->doc, SAMPLING_MAX_LOGIT_BIAS);
        else
            fprintf(f, "  %-23s %s (default %g)\n", opt, pi->doc, sampling_param_get(def, i));
    }
}
