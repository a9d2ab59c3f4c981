/* SPDX-License-Identifier: Apache-2.0 */
/* sampling.c - the sampling table as data, and what is computed from it (see sampling.h).
 *
 * The generic code reaches fields through the table's offsets; a field's C type follows
 * from its kind (float, int, logit_bias), so get/set convert through double, which holds
 * every int32 and every float exactly.
 */
#include "sampling.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/base/status.h"

const sampling_param_info sampling_param_table[SAMPLING_N_PARAMS] = {
#define SAMPLING_ROW(field, kind, key, flag, arg, def, lo, lo_open, hi, hi_open, cap, wopt,  \
                     doc)                                                                    \
    {#field, key, flag, arg, doc, SAMPLING_##kind, offsetof(sampling_params, field), def, lo,  \
     hi, lo_open, hi_open, cap, wopt},
    SAMPLING_PARAMS(SAMPLING_ROW)
#undef SAMPLING_ROW
};

static void *field_at(sampling_params *p, int i)
{
    return (char *)p + sampling_param_table[i].offset;
}

static const void *field_of(const sampling_params *p, int i)
{
    return (const char *)p + sampling_param_table[i].offset;
}

double sampling_param_get(const sampling_params *p, int i)
{
    switch (sampling_param_table[i].kind) {
    case SAMPLING_INT: return *(const int *)field_of(p, i);
    case SAMPLING_BIAS: return ((const logit_bias *)field_of(p, i))->n;
    default: return *(const float *)field_of(p, i);
    }
}

void sampling_param_set(sampling_params *p, int i, double v)
{
    switch (sampling_param_table[i].kind) {
    case SAMPLING_INT: *(int *)field_at(p, i) = (int)v; break;
    case SAMPLING_BIAS: break; /* logit_bias_add */
    default: *(float *)field_at(p, i) = (float)v; break;
    }
}

bool sampling_param_is_default(const sampling_params *p, int i)
{
    if (sampling_param_table[i].kind == SAMPLING_BIAS)
        return sampling_param_get(p, i) == 0;
    return sampling_param_get(p, i) == (double)(float)sampling_param_table[i].def;
}

void sampling_params_init(sampling_params *p)
{
    memset(p, 0, sizeof *p); /* the maps empty */
    for (int i = 0; i < SAMPLING_N_PARAMS; i++)
        sampling_param_set(p, i, sampling_param_table[i].def);
}

int logit_bias_add(logit_bias *b, int32_t id, float bias)
{
    const sampling_param_info *pi = &sampling_param_table[SAMPLING_I_logit_bias];
    char range[64];
    if (b->n >= SAMPLING_MAX_LOGIT_BIAS)
        return deras_fail(DERAS_ERANGE, "logit_bias holds at most %d entries",
                          SAMPLING_MAX_LOGIT_BIAS);
    if (!sampling_param_in_range(pi, bias))
        return deras_fail(DERAS_ERANGE, "logit_bias[%d] must be in %s, got %g", (int)id,
                          sampling_param_range(pi, range, sizeof range), bias);
    if (id < 0)
        return deras_fail(DERAS_EINVAL, "logit_bias: token id %d is negative", (int)id);
    for (int k = 0; k < b->n; k++)
        if (b->ids[k] == id)
            return deras_fail(DERAS_EINVAL, "logit_bias: token %d appears twice", (int)id);
    b->ids[b->n] = id;
    b->bias[b->n++] = bias;
    return DERAS_OK;
}

/* A logit-bias map against row pi: entries, biases, distinct ids inside the vocabulary. */
static int validate_bias(const sampling_param_info *pi, const logit_bias *b, int vocab)
{
    char range[64];
    if (b->n < 0 || b->n > SAMPLING_MAX_LOGIT_BIAS)
        return deras_fail(DERAS_ERANGE, "%s may have at most %d entries, got %d", pi->key,
                          SAMPLING_MAX_LOGIT_BIAS, b->n);
    for (int k = 0; k < b->n; k++) {
        if (!sampling_param_in_range(pi, b->bias[k]))
            return deras_fail(DERAS_ERANGE, "%s[%d] must be in %s, got %g", pi->key,
                              (int)b->ids[k], sampling_param_range(pi, range, sizeof range),
                              b->bias[k]);
        if (b->ids[k] < 0 || (vocab > 0 && b->ids[k] >= vocab))
            return deras_fail(DERAS_ERANGE, "%s: token %d is outside the vocabulary [0, %d)",
                              pi->key, (int)b->ids[k], vocab > 0 ? vocab : INT32_MAX);
        for (int j = 0; j < k; j++)
            if (b->ids[j] == b->ids[k])
                return deras_fail(DERAS_ERANGE, "%s: token %d appears twice", pi->key,
                                  (int)b->ids[k]);
    }
    return DERAS_OK;
}

bool sampling_param_in_range(const sampling_param_info *pi, double v)
{
    return isfinite(v) && (pi->lo_open ? v > pi->lo : v >= pi->lo) &&
           (pi->hi_open ? v < pi->hi : v <= pi->hi);
}

const char *sampling_param_range(const sampling_param_info *pi, char *buf, size_t cap)
{
    snprintf(buf, cap, "%c%.10g, %.10g%c", pi->lo_open ? '(' : '[', pi->lo, pi->hi,
             pi->hi_open ? ')' : ']');
    return buf;
}

int sampling_params_validate(const sampling_params *p, int vocab)
{
    char range[64];
    for (int i = 0; i < SAMPLING_N_PARAMS; i++) {
        const sampling_param_info *pi = &sampling_param_table[i];
        if (pi->kind == SAMPLING_BIAS) {
            int rc = validate_bias(pi, (const logit_bias *)field_of(p, i), vocab);
            if (rc)
                return rc;
            continue;
        }
        double v = sampling_param_get(p, i);
        if (!sampling_param_in_range(pi, v))
            return deras_fail(DERAS_ERANGE, "%s must be in %s, got %g", pi->key,
                              sampling_param_range(pi, range, sizeof range), v);
    }
    if (vocab > 0 && p->top_k > vocab)
        return deras_fail(DERAS_ERANGE, "top_k must be in [0, %d] (0: off), got %d", vocab,
                          p->top_k);
    return DERAS_OK;
}
