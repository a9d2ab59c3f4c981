/* SPDX-License-Identifier: Apache-2.0 */
/* speculative.c - proposer options, the verification rule, adaptive k, and the proposer
 * front (see speculative.h).
 *
 * The rule works on dense probability vectors: p from sampler_probs (every processor
 * applied), q as the proposer kept it. Acceptance compares u * q(d) < p(d), which is
 * u < min(1, p(d) / q(d)) without a division. The residual max(0, p - q) is drawn by one
 * pass that sums it and one that walks it; with q a point mass it is p without d.
 */
#include "speculative.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "engine/spec_draft.h"
#include "engine/spec_ngram.h"

struct spec_proposer {
    spec_opts o;
    int vocab;
    spec_draft_t *draft; /* model proposers */
};

void spec_opts_default(spec_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kind = SPEC_NONE;
    o->k = 4;
    o->ngram_min = 1;
    o->ngram_max = 3;
    o->max_batch = SPEC_DEFAULT_MAX_BATCH;
}

const char *spec_kind_name(spec_kind k)
{
    switch (k) {
    case SPEC_NONE: return "none";
    case SPEC_NGRAM: return "ngram";
    case SPEC_SELF: return "self";
    case SPEC_DRAFT: return "draft";
    default: return "unknown";
    }
}

int spec_opts_parse_proposer(const char *s, spec_opts *o)
{
    if (!s || !o)
        return deras_fail(DERAS_EINVAL, "--spec-proposer: missing value");
    if (!strcmp(s, "none")) {
        o->kind = SPEC_NONE;
    } else if (!strcmp(s, "ngram")) {
        o->kind = SPEC_NGRAM;
    } else if (!strncmp(s, "self:", 5)) {
        char *end = NULL;
        long l = strtol(s + 5, &end, 10);
        if (end == s + 5 || *end || l < 1 || l > 4096)
            return deras_fail(DERAS_EINVAL, "--spec-proposer %s: self:L needs a layer count L >= 1",
                              s);
        o->kind = SPEC_SELF;
        o->self_layers = (int)l;
    } else if (!strncmp(s, "draft:", 6) && s[6]) {
        o->kind = SPEC_DRAFT;
        o->draft_path = s + 6;
    } else {
        return deras_fail(DERAS_EINVAL, "--spec-proposer '%s': expected none, ngram, self:L (the "
                          "target's first L layers) or draft:PATH (a checkpoint)", s);
    }
    return DERAS_OK;
}

int spec_opts_check(const spec_opts *o)
{
    if (!o)
        return deras_fail(DERAS_EINVAL, "spec options: NULL");
    if (o->kind == SPEC_NONE)
        return DERAS_OK;
    if (o->kind < SPEC_NONE || o->kind > SPEC_DRAFT)
        return deras_fail(DERAS_EINVAL, "spec options: unknown proposer %d", (int)o->kind);
    if (o->k < 1 || o->k > SPEC_MAX_K)
        return deras_fail(DERAS_EINVAL, "--spec-k must be in [1, %d], got %d", SPEC_MAX_K, o->k);
    if (o->kind == SPEC_NGRAM && (o->ngram_min < 1 || o->ngram_max < o->ngram_min ||
                                  o->ngram_max > 64))
        return deras_fail(DERAS_EINVAL, "n-gram lengths must satisfy 1 <= min <= max <= 64, got "
                          "%d..%d", o->ngram_min, o->ngram_max);
    if (o->kind == SPEC_SELF && o->self_layers < 1)
        return deras_fail(DERAS_EINVAL, "self:L needs L >= 1, got %d", o->self_layers);
    if (o->kind == SPEC_DRAFT && (!o->draft_path || !*o->draft_path))
        return deras_fail(DERAS_EINVAL, "draft:PATH needs a path");
    if (o->max_batch < 0)
        return deras_fail(DERAS_EINVAL, "--spec-max-batch must be >= 0 (0: no cut-off), got %d",
                          o->max_batch);
    return DERAS_OK;
}

/* ---- the verification rule ---- */

int32_t spec_draw(const float *w, int vocab, double total, double u)
{
    double target = u * total, acc = 0.0;
    int32_t last = -1;
    for (int i = 0; i < vocab; i++) {
        if (w[i] <= 0.0f)
            continue;
        acc += w[i];
        last = i;
        if (target < acc)
            return i;
    }
    return last >= 0 ? last : 0; /* u landed on the rounding slack at the very top */
}

int32_t spec_accept_or_resample(const float *p, const float *q, int vocab, int32_t d,
                                sampler_rng *rng, bool *accepted)
{
    double qd = q ? q[d] : 1.0, u = sampler_rng_uniform(rng);
    if (u * qd < (double)p[d]) {
        *accepted = true;
        return d;
    }
    *accepted = false;
    /* residual max(0, p - q): its mass is the rejection probability, > 0 here */
    double total = 0.0;
    for (int i = 0; i < vocab; i++) {
        double r = (double)p[i] - (q ? q[i] : (i == d));
        total += r > 0 ? r : 0;
    }
    double target = sampler_rng_uniform(rng) * total, acc = 0.0;
    int32_t last = -1;
    for (int i = 0; i < vocab; i++) {
        double r = (double)p[i] - (q ? q[i] : (i == d));
        if (r <= 0)
            continue;
        acc += r;
        last = i;
        if (target < acc)
            return i;
    }
    if (last >= 0)
        return last;
    /* no residual mass (p == q up to rounding, and the test still failed on rounding):
     * p itself is then the distribution to draw from */
    return spec_draw(p, vocab, 1.0, sampler_rng_uniform(rng));
}

/* ---- adaptive k ---- */

void spec_adapt_reset(spec_adapt *a)
{
    /* a prior of 2 accepted out of 3 examined: start optimistic; it decays with the real
     * counts, so a run of rejections can bring the rate below SPEC_MIN_RATE */
    a->examined = 3.0;
    a->accepted = 2.0;
    a->pause = 0;
}

int spec_adapt_k(spec_adapt *a, int k_max)
{
    if (a->pause > 0) {
        a->pause--;
        return a->pause == 0 ? 1 : 0;
    }
    double rate = a->accepted / a->examined;
    if (rate < SPEC_MIN_RATE) {
        a->pause = SPEC_PAUSE_STEPS;
        a->examined *= 0.5; /* the probe after the pause is judged on fresher counts */
        a->accepted *= 0.5;
        return 0;
    }
    int k = 1;
    double tail = rate;
    while (k < k_max && tail * rate >= SPEC_TAIL_P) {
        tail *= rate;
        k++;
    }
    return k;
}

void spec_adapt_update(spec_adapt *a, int n, int n_acc)
{
    const double decay = 0.8;
    int examined = n_acc < n ? n_acc + 1 : n;
    a->examined = a->examined * decay + examined;
    a->accepted = a->accepted * decay + n_acc;
}

/* ---- proposers ---- */

int spec_proposer_new(const spec_opts *o, model_t *drafter, int vocab, int max_live_seqs,
                      int max_seqs, spec_proposer_t **out)
{
    if (!o || !out)
        return deras_fail(DERAS_EINVAL, "spec_proposer_new: NULL argument");
    *out = NULL;
    int rc = spec_opts_check(o);
    if (rc)
        return rc;
    bool model_kind = o->kind == SPEC_SELF || o->kind == SPEC_DRAFT;
    if (o->kind == SPEC_NONE || model_kind != (drafter != NULL))
        return deras_fail(DERAS_EINVAL, "proposer %s %s a draft model", spec_kind_name(o->kind),
                          model_kind ? "needs" : "takes no");
    if (drafter && model_get_config(drafter)->vocab_size != vocab)
        return deras_fail(DERAS_EINVAL, "draft model vocabulary %d differs from the target's %d",
                          model_get_config(drafter)->vocab_size, vocab);
    spec_proposer_t *p = calloc(1, sizeof *p);
    if (!p)
        return deras_fail(DERAS_ENOMEM, "spec_proposer_new: out of memory");
    p->o = *o;
    p->vocab = vocab;
    if (drafter && (rc = spec_draft_new(drafter, max_live_seqs, max_seqs, &p->draft))) {
        free(p);
        return rc;
    }
    *out = p;
    return DERAS_OK;
}

void spec_proposer_destroy(spec_proposer_t **pp)
{
    if (!pp || !*pp)
        return;
    spec_draft_destroy(&(*pp)->draft);
    free(*pp);
    *pp = NULL;
}

int spec_propose(spec_proposer_t *p, spec_seq *seqs, int n)
{
    if (p->draft)
        return spec_draft_propose(p->draft, seqs, n);
    for (int i = 0; i < n; i++) {
        spec_seq *q = &seqs[i];
        q->q_valid = false;
        q->n_drafts = spec_ngram_propose(q->tokens, q->n_tokens, p->o.ngram_min, p->o.ngram_max,
                                         q->k, q->tokens + q->n_tokens);
    }
    return DERAS_OK;
}

void spec_keep(spec_proposer_t *p, int slot, int n_valid)
{
    if (p && p->draft)
        spec_draft_keep(p->draft, slot, n_valid);
}

void spec_release(spec_proposer_t *p, int slot)
{
    if (p && p->draft)
        spec_draft_release(p->draft, slot);
}

int spec_check(const spec_proposer_t *p)
{
    return p && p->draft ? spec_draft_check(p->draft) : DERAS_OK;
}
