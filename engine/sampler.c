/* SPDX-License-Identifier: Apache-2.0 */
/* sampler.c - logits processors and sampling (see sampler.h for the pipeline and costs).
 *
 * Candidate sets are index arrays into a working copy of the logits. Selection of the k
 * largest is a quickselect (O(vocab) expected) followed by a sort of the k survivors;
 * ties are broken by lower token id everywhere, so results never depend on the sort
 * algorithm. Penalty bookkeeping uses per-token count and mark arrays that are cleared
 * again after each row by walking the history, so a row costs O(vocab + history).
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

#define TOP_P_FIRST_TRY 1024

struct sampler {
    int vocab;
    float *work;      /* (vocab) processed logits */
    int32_t *idx;     /* (vocab) candidate ids */
    int32_t *counts;  /* (vocab) occurrences in the output, all zero between rows */
    uint8_t *seen;    /* (vocab) in prompt or output, all zero between rows */
};

void sampling_params_default(sampling_params *p)
{
    sampling_params_init(p);
    p->temperature = 0.0f;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sampler_rng_seed(sampler_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

double sampler_rng_uniform(sampler_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(result >> 11) * 0x1.0p-53;
}

int sampler_new(int vocab, sampler_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "sampler_new: NULL out");
    *out = NULL;
    if (vocab <= 0)
        return deras_fail(DERAS_EINVAL, "sampler_new: vocab %d must be positive", vocab);
    sampler_t *s = calloc(1, sizeof *s);
    if (!s)
        return deras_fail(DERAS_ENOMEM, "sampler_new: out of memory");
    s->vocab = vocab;
    s->work = malloc((size_t)vocab * sizeof(float));
    s->idx = malloc((size_t)vocab * sizeof(int32_t));
    s->counts = calloc((size_t)vocab, sizeof(int32_t));
    s->seen = calloc((size_t)vocab, 1);
    if (!s->work || !s->idx || !s->counts || !s->seen) {
        sampler_destroy(&s);
        return deras_fail(DERAS_ENOMEM, "sampler_new: out of memory for a vocabulary of %d",
                          vocab);
    }
    *out = s;
    return DERAS_OK;
}

void sampler_destroy(sampler_t **sp)
{
    if (!sp || !*sp)
        return;
    sampler_t *s = *sp;
    free(s->work);
    free(s->idx);
    free(s->counts);
    free(s->seen);
    free(s);
    *sp = NULL;
}

/* a ranks before b: higher value, then lower id. */
static inline int ranks_before(const float *w, int32_t a, int32_t b)
{
    return w[a] > w[b] || (w[a] == w[b] && a < b);
}

static int cmp_rank(const void *pa, const void *pb, void *ctx)
{
    const float *w = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return ranks_before(w, a, b) ? -1 : ranks_before(w, b, a) ? 1 : 0;
}

/* Reorder idx[0..n) so its first k entries are the k best-ranked (unordered). O(n)
 * expected: quickselect with a median-of-three pivot. */
static void select_top(const float *w, int32_t *idx, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int32_t a = idx[lo], b = idx[mid], c = idx[hi], pivot;
        if (ranks_before(w, a, b))
            pivot = ranks_before(w, b, c) ? b : (ranks_before(w, a, c) ? c : a);
        else
            pivot = ranks_before(w, a, c) ? a : (ranks_before(w, b, c) ? c : b);
        int i = lo, j = hi;
        while (i <= j) {
            while (ranks_before(w, idx[i], pivot))
                i++;
            while (ranks_before(w, pivot, idx[j]))
                j--;
            if (i <= j) {
                int32_t t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            return;
    }
}

static void apply_penalties(sampler_t *s, const sampling_params *p, const sample_history *h)
{
    float *w = s->work;
    if (p->repetition_penalty != 1.0f) {
        const float r = p->repetition_penalty;
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *ids = pass ? h->output : h->prompt;
            int n = pass ? h->n_output : h->n_prompt;
            for (int i = 0; i < n; i++) {
                int32_t t = ids[i];
                if (t < 0 || t >= s->vocab || s->seen[t])
                    continue;
                s->seen[t] = 1;
                w[t] = w[t] > 0 ? w[t] / r : w[t] * r;
            }
        }
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *ids = pass ? h->output : h->prompt;
            int n = pass ? h->n_output : h->n_prompt;
            for (int i = 0; i < n; i++)
                if (ids[i] >= 0 && ids[i] < s->vocab)
                    s->seen[ids[i]] = 0;
        }
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (int i = 0; i < h->n_output; i++)
            if (h->output[i] >= 0 && h->output[i] < s->vocab)
                s->counts[h->output[i]]++;
        for (int i = 0; i < h->n_output; i++) {
            int32_t t = h->output[i];
            if (t < 0 || t >= s->vocab || s->counts[t] == 0)
                continue;
            w[t] -= p->presence_penalty + p->frequency_penalty * (float)s->counts[t];
            s->counts[t] = 0; /* applied once per distinct token; also clears */
        }
    }
}

/* Raw logprobs: the chosen token's and the top n. lse = log-sum-exp of the raw logits. */
static void raw_logprobs(const float *raw, int vocab, int n_top, sample_result *out)
{
    float mx = raw[0];
    for (int i = 1; i < vocab; i++)
        mx = raw[i] > mx ? raw[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < vocab; i++)
        sum += exp((double)(raw[i] - mx));
    float lse = mx + (float)log(sum);
    out->logprob = raw[out->token] - lse;
    out->n_top = 0;
    for (int i = 0; i < vocab && n_top > 0; i++) {
        int n = out->n_top;
        if (n == n_top && !(raw[i] > raw[out->top_ids[n - 1]]))
            continue; /* ties keep the lower id already held */
        int j = n < n_top ? n : n - 1;
        while (j > 0 && raw[i] > raw[out->top_ids[j - 1]]) {
            out->top_ids[j] = out->top_ids[j - 1];
            j--;
        }
        out->top_ids[j] = i;
        if (n < n_top)
            out->n_top++;
    }
    for (int i = 0; i < out->n_top; i++)
        out->top_logprobs[i] = raw[out->top_ids[i]] - lse;
}

/* Draw from exp(w[idx[i]] - mx) over the n candidates, total mass z. */
static int32_t draw(const float *w, const int32_t *idx, int n, float mx, double z, sampler_rng *rng)
{
    double u = sampler_rng_uniform(rng) * z, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)(w[idx[i]] - mx));
        if (u < acc)
            return idx[i];
    }
    return idx[n - 1]; /* u landed on the rounding slack at the very top */
}

/* Tokens outside the grammar's mask at -inf; a word of 32 allowed tokens costs one test.
 * O(vocab / 32) plus O(disallowed tokens). */
static void apply_mask(float *w, int V, const uint32_t *allow)
{
    for (int i = 0; i < V; i += 32) {
        uint32_t m = allow[i >> 5];
        if (m == 0xffffffffu)
            continue;
        int end = i + 32 < V ? i + 32 : V;
        for (int t = i; t < end; t++)
            if (!((m >> (t - i)) & 1u))
                w[t] = -INFINITY;
    }
}

/* The logit bias, the grammar's mask, then min_tokens: the stop tokens at -inf while the
 * output is short. */
static void apply_bias_and_min_tokens(sampler_t *s, const sampling_params *p,
                                      const sample_history *h)
{
    float *w = s->work;
    const logit_bias *b = &p->logit_bias;
    for (int i = 0; i < b->n; i++)
        if (b->ids[i] >= 0 && b->ids[i] < s->vocab)
            w[b->ids[i]] += b->bias[i];
    if (h && h->allow)
        apply_mask(w, s->vocab, h->allow);
    if (h && h->n_output < p->min_tokens)
        for (int i = 0; i < h->n_stops; i++)
            if (h->stops[i] >= 0 && h->stops[i] < s->vocab)
                w[h->stops[i]] = -INFINITY;
}

/* Logits are finite or -inf (a masked token); NaN or +inf is a numeric fault of the model
 * or its backend, an error instead of a token drawn from garbage. O(vocab). */
static int check_logits(const float *logits, int V)
{
    for (int i = 0; i < V; i++)
        if (!(logits[i] < INFINITY)) /* NaN compares false */
            return deras_fail(DERAS_EBACKEND, "sampler: logit %d is %s: the model's output is "
                              "not finite", i, isnan(logits[i]) ? "NaN" : "+inf");
    return DERAS_OK;
}

/* DERAS_ERANGE when every processed logit is -inf: no token can be chosen. */
static int has_candidate(const float *w, int V)
{
    for (int i = 0; i < V; i++)
        if (w[i] > -INFINITY)
            return DERAS_OK;
    return deras_fail(DERAS_ERANGE, "sampler: every token is excluded (at -inf)");
}

/* Bias and penalties into the working copy, then (unless greedy) the candidate set:
 * temperature, min-p, top-k, top-p. Leaves s->idx[0..*n) holding the candidates, *mx the
 * largest scaled logit and *z the candidates' mass sum(exp(w - mx)). DERAS_EBACKEND for
 * logits that are NaN or +inf, DERAS_ERANGE when no token is left to choose. */
static int process(sampler_t *s, const float *logits, const sampling_params *p,
                   const sample_history *hist, bool greedy, int *n_out, float *mx_out,
                   double *z_out)
{
    const int V = s->vocab;
    float *w = s->work;
    int rc = check_logits(logits, V);
    if (rc)
        return rc;
    memcpy(w, logits, (size_t)V * sizeof(float));
    apply_bias_and_min_tokens(s, p, hist);
    bool penalties = p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
                     p->frequency_penalty != 0.0f;
    if (penalties && hist)
        apply_penalties(s, p, hist);
    if (greedy || sampling_is_greedy(p))
        return has_candidate(w, V);
    const float inv_t = 1.0f / p->temperature;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) {
        w[i] *= inv_t;
        mx = w[i] > mx ? w[i] : mx;
    }
    if (!(mx < INFINITY)) /* finite logits so large that logit / temperature overflows */
        return deras_fail(DERAS_ERANGE, "sampler: logits / temperature %g overflow a float",
                          (double)p->temperature);
    /* min-p: keep p_i >= min_p * p_max, i.e. w_i >= mx + log(min_p) */
    const float floor_w = p->min_p > 0.0f ? mx + logf(p->min_p) : -INFINITY;
    int n = 0;
    for (int i = 0; i < V; i++) /* a token at -inf (min_tokens, a bias) is never a candidate */
        if (w[i] >= floor_w && w[i] > -INFINITY)
            s->idx[n++] = i;
    if (n == 0)
        return deras_fail(DERAS_ERANGE, "sampler: every token is excluded (at -inf)");
    if (p->top_k > 0 && p->top_k < n) {
        select_top(w, s->idx, n, p->top_k);
        n = p->top_k;
    }
    double z = 0.0;
    for (int i = 0; i < n; i++)
        z += exp((double)(w[s->idx[i]] - mx));
    if (p->top_p < 1.0f) {
        /* The nucleus is a prefix of the ranked candidates: rank a first slice and
         * widen to all candidates only if that slice holds less than top_p. */
        int m = n < TOP_P_FIRST_TRY ? n : TOP_P_FIRST_TRY;
        for (int pass = 0; pass < 2; pass++) {
            if (m < n)
                select_top(w, s->idx, n, m);
            qsort_r(s->idx, (size_t)m, sizeof(int32_t), cmp_rank, w);
            double need = (double)p->top_p * z, acc = 0.0;
            int keep = -1;
            for (int i = 0; i < m; i++) {
                acc += exp((double)(w[s->idx[i]] - mx));
                if (acc >= need) {
                    keep = i + 1;
                    break;
                }
            }
            if (keep > 0 || m == n) {
                n = keep > 0 ? keep : m;
                z = 0.0;
                for (int i = 0; i < n; i++)
                    z += exp((double)(w[s->idx[i]] - mx));
                break;
            }
            m = n;
        }
    }
    *n_out = n;
    *mx_out = mx;
    *z_out = z;
    return DERAS_OK;
}

static int32_t argmax(const float *w, int V)
{
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (w[i] > w[best])
            best = i;
    return best;
}

int sampler_sample(sampler_t *s, const float *logits, const sampling_params *p, sampler_rng *rng,
                   const sample_history *hist, sample_result *out)
{
    if (!s || !logits || !p || !out || (!sampling_is_greedy(p) && !rng))
        return deras_fail(DERAS_EINVAL, "sampler_sample: NULL argument");
    int n = 0;
    float mx = 0.0f;
    double z = 0.0;
    int rc = process(s, logits, p, hist, false, &n, &mx, &z);
    if (rc)
        return rc;
    if (sampling_is_greedy(p))
        out->token = argmax(s->work, s->vocab);
    else
        out->token = draw(s->work, s->idx, n, mx, z, rng);
    raw_logprobs(logits, s->vocab, p->n_logprobs, out);
    return DERAS_OK;
}

int sampler_probs(sampler_t *s, const float *logits, const sampling_params *p,
                  const sample_history *hist, float *probs)
{
    if (!s || !logits || !p || !probs || sampling_is_greedy(p))
        return deras_fail(DERAS_EINVAL, "sampler_probs: NULL argument or a greedy temperature");
    int n = 0;
    float mx = 0.0f;
    double z = 0.0;
    int rc = process(s, logits, p, hist, false, &n, &mx, &z);
    if (rc)
        return rc;
    memset(probs, 0, (size_t)s->vocab * sizeof(float));
    for (int i = 0; i < n; i++)
        probs[s->idx[i]] = (float)(exp((double)(s->work[s->idx[i]] - mx)) / z);
    return DERAS_OK;
}

int32_t sampler_greedy(sampler_t *s, const float *logits, const sampling_params *p,
                       const sample_history *hist)
{
    int n = 0;
    float mx = 0.0f;
    double z = 0.0;
    (void)process(s, logits, p, hist, true, &n, &mx, &z); /* a bad row still gives some token:
                                                             the target's check refuses it */
    return argmax(s->work, s->vocab);
}

void sampler_logprobs(const sampler_t *s, const float *logits, int n_top, int32_t token,
                      sample_result *out)
{
    out->token = token;
    raw_logprobs(logits, s->vocab, n_top, out);
}
