/* SPDX-License-Identifier: Apache-2.0 */
/* constrain.h - structured output inside the engine: one grammar matcher per sample, the
 * step's token masks, and speculative drafts checked against the grammar
 * (docs/structured_output.md has the design; common/grammar the matchers).
 *
 * A sample that runs under a grammar gets a matcher (common/grammar/matcher.h) at
 * engine_add, in its sequence slot; the matcher follows the sample's output tokens (not
 * its KV: preemption and prefix caching leave it alone). Each step, for every sequence
 * that samples after the pass, the engine queues a mask job: rows 1 + its drafts, row j
 * being the tokens allowed after the pending token and the first j drafts. The jobs run
 * on a helper thread while model_forward runs (masks depend only on tokens known before
 * the step), and the engine waits for them before sampling; with `inline_masks` they run
 * on the caller's thread at constrain_step_start instead (the benchmark's comparison).
 *
 * A row's mask is the matcher's (end of generation set exactly where the grammar accepts),
 * then where the output so far is a complete sentence the request's stop ids are set too
 * (like end of generation), and for an ignore_eos request the end-of-generation ids are
 * cleared unless nothing else may follow. A draft the grammar refuses ends a job's rows:
 * rows after it get no mask (verification never reaches them: the refused draft has
 * probability 0 in the row before).
 *
 * Costs: a matcher's scratch per constrained sample (about 500 KiB at the defaults,
 * allocated in constrain_attach); per step, per row one gmatcher_fill_mask (see matcher.h)
 * plus O(vocab / 32) for the stop and end-of-generation bits; the masks live in scratch
 * sized at constrain_new (max_seqs x rows x vocab / 32 words). Nothing allocates per step.
 */
#ifndef DERAS_CONSTRAIN_H
#define DERAS_CONSTRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/grammar/matcher.h"

typedef struct constrain constrain_t;

/* Scratch for max_live_seqs matchers and max_seqs x rows masks over vocab tokens; eog (the
 * engine's end-of-generation ids, borrowed: they must outlive it) are cleared for
 * ignore_eos samples. Starts the helper thread unless inline_masks. DERAS_EINVAL,
 * DERAS_ENOMEM, DERAS_EIO when the thread cannot start. */
int constrain_new(int vocab, int max_live_seqs, int max_seqs, int rows, const int32_t *eog,
                  int n_eog, bool inline_masks, constrain_t **out);
/* Stops the helper thread; destroys every matcher. */
void constrain_destroy(constrain_t **c);

/* A matcher at the start of tg's grammar for sequence slot `slot`. DERAS_EINVAL when tg's
 * vocabulary is not the engine's width or the slot already has one; gmatcher_new's errors
 * (DERAS_ENOMEM, DERAS_ERANGE). */
int constrain_attach(constrain_t *c, int slot, token_grammar_t *tg);
/* The slot's matcher goes (no-op without one). */
void constrain_detach(constrain_t *c, int slot);
/* Whether slot runs under a grammar (c may be NULL). O(1). */
bool constrain_has(const constrain_t *c, int slot);

/* Advance slot's matcher by its sampled token. DERAS_EINVAL when the grammar does not allow
 * it, DERAS_ERANGE on a matcher budget. O(token bytes x stacks). */
int constrain_accept(constrain_t *c, int slot, int32_t token);
/* The output is complete and nothing but end of generation may follow: the sample ends. */
bool constrain_complete(const constrain_t *c, int slot);
/* How many of drafts[0..n) the grammar allows in a row from slot's state (left as it was).
 * Budget errors of the matcher. O(n x accept). */
int constrain_valid_prefix(constrain_t *c, int slot, const int32_t *drafts, int n, int *n_ok);

/* ---- one step's masks ---- */

/* Forget the previous step's jobs. O(previous jobs). */
void constrain_step_begin(constrain_t *c);
/* Masks for plan sequence i (< max_seqs) of slot: 1 + n_drafts rows (n_drafts < rows),
 * drafts being the tokens after the pending one; stops (n_stops ids) are set where the
 * grammar accepts; ignore_eos clears end of generation as above. The pointers must stay
 * valid until constrain_step_wait. */
void constrain_step_add(constrain_t *c, int i, int slot, const int32_t *drafts, int n_drafts,
                        const int32_t *stops, int n_stops, bool ignore_eos);
/* Run the queued jobs: on the helper thread (returns at once) or, inline, now. */
void constrain_step_start(constrain_t *c);
/* Wait for the jobs (no-op when none run). The matchers are the caller's again after it. */
void constrain_step_wait(constrain_t *c);
/* Row `row` of plan sequence i's masks, NULL when it has none (no job, or a row past a draft
 * the grammar refused, or a failed job). */
const uint32_t *constrain_mask(const constrain_t *c, int i, int row);
/* DERAS_OK, or the status that failed plan sequence i's job (a matcher budget:
 * DERAS_ERANGE; DERAS_ENOMEM) with its message set again for the calling thread. */
int constrain_status(const constrain_t *c, int i);

#endif
