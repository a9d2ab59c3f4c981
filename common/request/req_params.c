/* SPDX-License-Identifier: Apache-2.0 */
/* req_params.c - a request's parameters: defaults and the rules (see req_params.h). */
#include "req_params.h"

#include <string.h>

#include "common/base/status.h"

void req_params_init(req_params *p)
{
    memset(p, 0, sizeof *p);
    p->max_tokens = REQ_DEFAULT_MAX_TOKENS;
    p->n = 1;
    sampling_params_init(&p->sp);
}

int req_params_validate(const req_params *p, int vocab)
{
    if (p->max_tokens < 1)
        return deras_fail(DERAS_ERANGE, "max_tokens must be >= 1, got %d", p->max_tokens);
    if (p->n < 1 || p->n > REQ_MAX_N)
        return deras_fail(DERAS_ERANGE, "n must be in [1, %d], got %d", REQ_MAX_N, p->n);
    if (p->n_stop_ids < 0 || p->n_stop_ids > REQ_MAX_STOP_IDS)
        return deras_fail(DERAS_ERANGE, "at most %d stop token ids, got %d", REQ_MAX_STOP_IDS,
                          p->n_stop_ids);
    for (int i = 0; i < p->n_stop_ids; i++) /* beyond the vocabulary: never drawn, harmless */
        if (p->stop_ids[i] < 0)
            return deras_fail(DERAS_ERANGE, "stop_token_ids[%d] must be >= 0, got %d", i,
                              (int)p->stop_ids[i]);
    if (p->spec_tokens < -1 || p->spec_tokens > REQ_MAX_SPEC_TOKENS)
        return deras_fail(DERAS_ERANGE, "num_speculative_tokens must be in [0, %d] (or -1: "
                          "off), got %d", REQ_MAX_SPEC_TOKENS, p->spec_tokens);
    if (p->sp.min_tokens > p->max_tokens)
        return deras_fail(DERAS_ERANGE, "min_tokens must be at most max_tokens (%d), got %d",
                          p->max_tokens, p->sp.min_tokens);
    return sampling_params_validate(&p->sp, vocab);
}
