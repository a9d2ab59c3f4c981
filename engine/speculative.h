/* SPDX-License-Identifier: Apache-2.0 */
/* speculative.h - speculative decoding: draft proposers and the verification rule.
 *
 * A proposer guesses the next k tokens of a sequence cheaply; the target model scores the
 * sequence's pending token and all k drafts in one forward pass (k + 1 rows of logits),
 * and the verification rule decides how many drafts stand. The output never changes:
 *   - greedy (temperature 0): a draft stands while it equals the target's own choice at
 *     its position (penalties applied to the history including the drafts before it);
 *     the first disagreement is replaced by the target's token, and when every draft
 *     stands the target's next token is appended (k + 1 tokens from one pass);
 *   - sampling: the rule of Leviathan et al. (2023) and Chen et al. (2023): a draft d
 *     drawn from the proposer's distribution q stands with probability min(1, p(d) /
 *     q(d)), where p is the target's distribution after every logits processor
 *     (penalties, temperature, min-p, top-k, top-p), else the position is drawn from
 *     normalise(max(0, p - q)); so every emitted token is distributed exactly as p.
 *     A deterministic proposer (n-gram) has q = a point mass on d.
 *
 * Proposers (one per engine, chosen at start):
 *   ngram      the latest earlier occurrence of the sequence's last n tokens (n from
 *              ngram_max down to ngram_min) in prompt and output; the drafts are the
 *              tokens that followed it (spec_ngram.h). Costs no model pass.
 *   self:L     the target's first L layers, its final norm and LM head, with its own KV
 *              cache (model_new_partial): no second checkpoint.
 *   draft:PATH a smaller checkpoint with the target's vocabulary, in the same process.
 *   A model proposer (spec_draft.h) keeps its own KV per sequence slot and catches up on
 *   the tokens it has not seen (the whole prompt the first time) before drafting.
 *
 * Random streams. Sample i of a request with seed s draws from two streams: the target
 * stream (seed s + i, as without speculation) and a draft stream (seed (s + i) ^
 * SPEC_DRAFT_STREAM). Per verified position the target stream gives one uniform for the
 * acceptance test of a draft and one for a draw when the draft is rejected (or for the
 * position after the last draft); the draft stream gives one uniform per sampled draft.
 * So a seed reproduces its output given the same proposer and k schedule; the schedule
 * of a request at temperature > 0 depends only on its own acceptance (the batch-size
 * cut-off below applies to greedy requests, whose output is the same either way).
 *
 * Adaptive k. Each sequence keeps decayed counts of drafts examined and accepted; its
 * acceptance rate a gives k = the largest k <= k_max with a^k >= SPEC_TAIL_P (the k-th
 * draft still has a fair chance of standing). Below SPEC_MIN_RATE it pauses for
 * SPEC_PAUSE_STEPS steps, then probes with k = 1.
 *
 * Batch cut-off. With more than max_batch running sequences a step does not speculate
 * for greedy requests: the target pass is then compute-bound and verifying drafts costs
 * more than it saves. The default comes from bench/bench_spec (docs/benchmarks.md).
 */
#ifndef DERAS_SPECULATIVE_H
#define DERAS_SPECULATIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/request/spec_counters.h"
#include "engine/model.h"
#include "engine/sampler.h"

#define SPEC_MAX_K 16
#define SPEC_DRAFT_STREAM 0x5eedd4a9f7c3b1e5ull
#define SPEC_TAIL_P 0.3
#define SPEC_MIN_RATE 0.3
#define SPEC_PAUSE_STEPS 16

typedef enum spec_kind {
    SPEC_NONE = 0,
    SPEC_NGRAM,
    SPEC_SELF,
    SPEC_DRAFT,
} spec_kind;

typedef struct spec_opts {
    spec_kind kind;
    int k;                  /* most drafts per sequence per step, 1 .. SPEC_MAX_K */
    int self_layers;        /* SPEC_SELF: the target layers the draft runs */
    const char *draft_path; /* SPEC_DRAFT: the draft checkpoint */
    int ngram_min, ngram_max; /* SPEC_NGRAM: match lengths tried, longest first */
    int max_batch;          /* greedy speculation only while running <= this; 0: always */
} spec_opts;

/* No speculation; k 4, n-gram 1..3, max_batch SPEC_DEFAULT_MAX_BATCH. */
#define SPEC_DEFAULT_MAX_BATCH 16
void spec_opts_default(spec_opts *o);

/* Parse a proposer as the worker's --spec-proposer spells it: "none", "ngram", "self:L",
 * "draft:PATH" (PATH points into `s`). DERAS_EINVAL naming the accepted forms. */
int spec_opts_parse_proposer(const char *s, spec_opts *o);

/* Range checks (k, layers, n-gram lengths, max_batch); DERAS_EINVAL naming the field. */
int spec_opts_check(const spec_opts *o);

/* "none", "ngram", "self", "draft". */
const char *spec_kind_name(spec_kind k);

/* ---- the verification rule ---- */

/* One position of speculative sampling: d was drawn from q (vocab probabilities; NULL: a
 * point mass on d) and p is the target's distribution. Accept d with probability
 * min(1, p[d] / q[d]), else draw from normalise(max(0, p - q)). Returns the token for the
 * position; *accepted says whether it is d. One uniform from rng for the test, one more
 * on rejection. O(vocab) on rejection, O(1) otherwise. */
int32_t spec_accept_or_resample(const float *p, const float *q, int vocab, int32_t d,
                                sampler_rng *rng, bool *accepted);

/* A draw from the vocab probabilities w (they need not sum to 1; their sum is total > 0)
 * with the uniform u in [0, 1): the first index whose running sum exceeds u * total,
 * skipping zeros. O(vocab). */
int32_t spec_draw(const float *w, int vocab, double total, double u);

/* ---- adaptive k ---- */

typedef struct spec_adapt {
    double examined, accepted; /* decayed counts */
    int pause;                 /* steps left without speculation */
} spec_adapt;

void spec_adapt_reset(spec_adapt *a);
/* Drafts to ask for this step (0 while paused; the pause counts down). O(k_max). */
int spec_adapt_k(spec_adapt *a, int k_max);
/* A verification examined drafts up to the first rejection: n proposed, n_acc stood. */
void spec_adapt_update(spec_adapt *a, int n, int n_acc);

/* ---- proposers ---- */

/* One sequence asking for drafts, filled by the engine. */
typedef struct spec_seq {
    int slot;                    /* the engine's slot: the proposer's per-sequence state */
    int32_t *tokens;             /* prompt then output; drafts are written after n_tokens */
    int n_tokens;                /* known tokens; the last one's KV is not computed yet */
    int n_prompt;
    int k;                       /* drafts wanted, >= 1; tokens has room for them */
    const sampling_params *sp;   /* the request's (a model proposer applies them to q) */
    sampler_rng *rng;            /* the draft stream */
    float *q;                    /* (k, vocab) out: draft distributions at temperature > 0
                                    from a model proposer; NULL for greedy */
    int n_drafts;                /* out: drafts written (0 .. k) */
    bool q_valid;                /* out: q holds the draft distributions (else point masses) */
} spec_seq;

typedef struct spec_proposer spec_proposer_t;

/* A proposer for opts->kind. Model proposers use `drafter` (borrowed: a model_new_partial
 * view or a draft checkpoint's model with the target's vocabulary and block layout) and
 * keep per-slot KV for max_live_seqs slots. DERAS_EINVAL for a kind/drafter mismatch or a
 * vocabulary that differs from the target's. */
int spec_proposer_new(const spec_opts *o, model_t *drafter, int vocab, int max_live_seqs,
                      int max_seqs, spec_proposer_t **out);
void spec_proposer_destroy(spec_proposer_t **p);

/* Drafts for n sequences (tokens[n_tokens ..] and, where q_valid, q). A sequence the
 * proposer cannot serve (no match, drafter KV full) gets n_drafts 0; that is not an
 * error. Errors are a model pass's. Cost: n-gram O(n_tokens * ngram_max) per sequence; a
 * model proposer runs up to k passes of its model over the batch (plus catch-up). */
int spec_propose(spec_proposer_t *p, spec_seq *seqs, int n);

/* Only the first n_valid tokens of slot's sequence stand (drafts were rejected, or
 * dropped before running): forget proposer state beyond them. O(released blocks). */
void spec_keep(spec_proposer_t *p, int slot, int n_valid);

/* The slot's sequence ended: free its state. */
void spec_release(spec_proposer_t *p, int slot);

/* For tests: the proposer's own invariants (a model proposer's KV accounting); NULL is
 * fine. DERAS_EINTERNAL naming the broken one. */
int spec_check(const spec_proposer_t *p);

#endif
