/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_same.h - whether two decoded request parameters are the same, for the protocol fuzz
 * targets' decode -> encode -> decode check. The sampling parameters are compared through
 * their table (common/request/sampling.h), so a new parameter is covered without an edit. */
#ifndef DERAS_FUZZ_SAME_H
#define DERAS_FUZZ_SAME_H

#include <stdbool.h>
#include <string.h>

#include "common/request/req_params.h"

static inline bool fuzz_same_sampling(const sampling_params *a, const sampling_params *b)
{
    for (int i = 0; i < SAMPLING_N_PARAMS; i++) {
        if (sampling_param_get(a, i) != sampling_param_get(b, i))
            return false;
        if (sampling_param_table[i].kind == SAMPLING_BIAS) { /* same count: the entries */
            size_t off = sampling_param_table[i].offset;
            const logit_bias *x = (const void *)((const char *)a + off);
            const logit_bias *y = (const void *)((const char *)b + off);
            for (int k = 0; k < x->n; k++)
                if (x->ids[k] != y->ids[k] || x->bias[k] != y->bias[k])
                    return false;
        }
    }
    return true;
}

/* Everything but the seed, which a client request may leave out (has_seed). */
static inline bool fuzz_same_params(const req_params *a, const req_params *b)
{
    return a->max_tokens == b->max_tokens && a->n == b->n && a->ignore_eos == b->ignore_eos &&
           a->spec_tokens == b->spec_tokens && a->n_stop_ids == b->n_stop_ids &&
           !memcmp(a->stop_ids, b->stop_ids, (size_t)a->n_stop_ids * sizeof(int32_t)) &&
           fuzz_same_sampling(&a->sp, &b->sp);
}

#endif
