/* sampling.c - the sampling table as data, and what is computed from it (see sampling.h).
 *
 * The generic code reaches fields through the table's offsets; a field's C type follows
 * from its kind (float or int), so get/set convert through double, which holds every
 * int32 and every float exactly.
 */
#include "sampling.h"

#include <math.h>
#include <stdio.h>

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
    if (sampling_param_table[i].kind == SAMPLING_INT)
        return *(const int *)field_of(p, i);
    return *(const float *)field_of(p, i);
}

void sampling_param_set(sampling_params *p, int i, double v)
{
    if (sampling_param_table[i].kind == SAMPLING_INT)
        *(int *)field_at(p, i) = (int)v;
    else
        *(float *)field_at(p, i) = (float)v;
}

bool sampling_param_is_default(const sampling_params *p, int i)
{
    return sampling_param_get(p, i) == (double)(float)sampling_param_table[i].def;
}

void sampling_params_init(sampling_params *p)
{
    for (int i = 0; i < SAMPLING_N_PARAMS; i++)
        sampling_param_set(p, i, sampling_param_table[i].def);
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
