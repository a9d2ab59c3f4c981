/* SPDX-License-Identifier: Apache-2.0 */
/* spec_draft.h - a model that proposes drafts: a self-draft view or a draft checkpoint.
 *
 * The drafter keeps its own KV cache, managed by its own KV manager (no prefix caching,
 * no sharing) with one slot per engine slot, so the target's block accounting never
 * depends on it. Per slot it knows how many leading tokens of the sequence its cache
 * holds; a proposal first catches up on the rest (the whole prompt the first time, one or
 * two tokens after a verification), then runs one pass per further draft, all sequences
 * of the batch together. A sequence whose cache cannot grow (the drafter's pool is full)
 * simply gets fewer drafts.
 *
 * Costs: no allocation after spec_draft_new; a proposal of k drafts runs k passes of the
 * drafter (more while catching up on long prompts, in chunks of its token budget).
 */
#ifndef DERAS_SPEC_DRAFT_H
#define DERAS_SPEC_DRAFT_H

#include "kernels/backend.h"
#include "engine/speculative.h"

typedef struct spec_draft spec_draft_t;

/* A drafter over model m (borrowed) for max_live_seqs slots and batches of up to max_seqs
 * sequences; m's options give the cache and pass sizes. */
int spec_draft_new(model_t *m, int max_live_seqs, int max_seqs, spec_draft_t **out);
void spec_draft_destroy(spec_draft_t **d);

int spec_draft_propose(spec_draft_t *d, spec_seq *seqs, int n);
void spec_draft_keep(spec_draft_t *d, int slot, int n_valid);
void spec_draft_release(spec_draft_t *d, int slot);
/* The drafter's KV manager invariants (kv_manager_check). */
int spec_draft_check(const spec_draft_t *d);

/* Load the drafter o asks for: for SPEC_SELF a model_new_partial view of target, for
 * SPEC_DRAFT the checkpoint at o->draft_path on backend be (the target's), which must have
 * the target's vocabulary. Cache and pass sizes follow the target's options. DERAS_EINVAL
 * naming the mismatch; checkpoint errors carry their message. */
int spec_drafter_load(const spec_opts *o, model_t *target, backend_t *be, model_t **out);

#endif
