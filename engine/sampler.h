/* SPDX-License-Identifier: Apache-2.0 */
/* sampler.h - turning a row of logits into the next token, per request's sampling parameters.
 *
 * The pipeline, in this order (vLLM's): the logit bias (OpenAI's: added to the raw
 * logits), a grammar's mask (sample_history.allow), min_tokens (the tokens that would end the sample cannot be drawn before
 * min_tokens outputs), repetition penalty (prompt and output tokens;
 * positive logits divided, negative multiplied), presence and frequency penalties (output
 * tokens only, OpenAI semantics), then either greedy argmax (temperature 0, or below
 * SAMPLING_GREEDY_BELOW; ties go to the lowest id), or temperature scaling, top-k, top-p
 * (nucleus), min-p, and a draw from the renormalised distribution with the request's own
 * random generator. Logprobs are those of
 * the model's raw distribution (log-softmax of the unprocessed logits), so they do not
 * depend on sampling settings; the chosen token's logprob and the top-N are reported.
 *
 * A sampler_t holds scratch sized for the vocabulary and is reused for every row: sampling
 * allocates nothing (the bias and the stop tokens are applied in place, O(entries)). Cost
 * per row: O(vocab) plus O(k log k) for the k candidates kept;
 * top-p without top-k first tries the 1,024 most likely tokens and sorts the whole
 * vocabulary only if they hold less than top_p of the mass.
 */
#ifndef DERAS_SAMPLER_H
#define DERAS_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/request/sampling.h"

/* Greedy with every processor off: the table's defaults (common/request/sampling.h, which
 * also validates) at temperature 0. */
void sampling_params_default(sampling_params *p);

/* A request's random stream (xoshiro256**). The same seed gives the same draws, whatever
 * else runs in the batch. */
typedef struct sampler_rng {
    uint64_t s[4];
} sampler_rng;

void sampler_rng_seed(sampler_rng *r, uint64_t seed);
/* Uniform double in [0, 1). */
double sampler_rng_uniform(sampler_rng *r);

typedef struct sample_result {
    int32_t token;
    float logprob;                              /* of token, raw distribution */
    int n_top;
    int32_t top_ids[SAMPLING_MAX_LOGPROBS];     /* most likely first */
    float top_logprobs[SAMPLING_MAX_LOGPROBS];
} sample_result;

/* Token history the penalties look at, the tokens that would end the sample (stop ids,
 * end of generation) that min_tokens holds back while n_output < min_tokens, and the
 * tokens a grammar allows (structured output: a bitset, bit t & 31 of word t >> 5; every
 * other token is set to -inf right after the logit bias, so greedy, penalties, top-k/p and
 * min-p see only allowed tokens, while logprobs stay those of the raw distribution). */
typedef struct sample_history {
    const int32_t *prompt;
    int n_prompt;
    const int32_t *output;
    int n_output;
    const int32_t *stops;     /* NULL: none */
    int n_stops;
    const uint32_t *allow;    /* NULL: every token */
} sample_history;

typedef struct sampler sampler_t;

/* A sampler for `vocab` logits, its scratch sized once: DERAS_EINVAL for vocab < 1,
 * DERAS_ENOMEM. O(vocab). */
int sampler_new(int vocab, sampler_t **out);
void sampler_destroy(sampler_t **s);

/* Sample one token from `logits` (vocab entries, left unchanged: processing happens in the
 * sampler's scratch). `hist` may be NULL when no penalty and no min_tokens is set.
 * Never a silent token from bad numbers: DERAS_EBACKEND when a logit is NaN or +inf (-inf
 * is a masked token), DERAS_ERANGE when every token is masked or logit / temperature
 * overflows. */
int sampler_sample(sampler_t *s, const float *logits, const sampling_params *p, sampler_rng *rng,
                   const sample_history *hist, sample_result *out);

/* The distribution sampler_sample draws from when not greedy (penalties, temperature,
 * min-p, top-k, top-p applied), as vocab dense probabilities, zero outside the kept
 * candidates. Speculative sampling compares it with a draft's. DERAS_EINVAL at a greedy
 * temperature; the errors of sampler_sample. Cost as one sampler_sample row. */
int sampler_probs(sampler_t *s, const float *logits, const sampling_params *p,
                  const sample_history *hist, float *probs);

/* The token sampler_sample picks greedily (penalties applied; ties to the lowest id),
 * whatever p->temperature says: a greedy draft. Bad logits still give a token in range
 * (the target's sampler refuses them). O(vocab + history). */
int32_t sampler_greedy(sampler_t *s, const float *logits, const sampling_params *p,
                       const sample_history *hist);

/* out->token = token, with its raw logprob and the top n_top (as sampler_sample reports
 * them): the logprobs of a token chosen elsewhere, e.g. an accepted draft. O(vocab). */
void sampler_logprobs(const sampler_t *s, const float *logits, int n_top, int32_t token,
                      sample_result *out);

#endif
