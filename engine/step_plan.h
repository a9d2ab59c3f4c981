/* SPDX-License-Identifier: Apache-2.0 */
/* step_plan.h - one forward step, as a flat self-contained record.
 *
 * The scheduler writes a plan each step; the model runs it; tensor-parallel followers
 * will receive exactly these bytes through shared memory. So a plan holds no pointers:
 * a fixed header followed by int32 arrays at offsets that depend only on the capacities
 * in the header. step_plan_bytes() gives the size for given capacities, and a copy of
 * those bytes anywhere (another process's mapping) is a valid plan.
 *
 * Arrays (n_* used, cap_* allocated):
 *   tokens       (cap_tokens)             token ids to compute, sequences contiguous
 *   q_start      (cap_seqs + 1)           sequence s owns rows [q_start[s], q_start[s+1])
 *   ctx_len      (cap_seqs)               tokens in s's cache after the step
 *   block_tables (cap_seqs, max_blocks)   s's block ids; unused entries 0 (null block)
 *   seq_ref      (cap_seqs)               the leader's handle for s (slot id); followers
 *                                         ignore it
 *   logits_rows  (cap_logits)             rows whose next-token logits the leader samples
 *   copies       (cap_copies, 2)          KV blocks to copy (src, dst) before the step
 * Sampling parameters stay with the leader, which alone samples; followers need only
 * what the forward pass reads.
 */
#ifndef DERAS_STEP_PLAN_H
#define DERAS_STEP_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

#define STEP_PLAN_MAGIC 0x4e4c5053u /* "SPLN" */

typedef struct step_plan {
    uint32_t magic;
    uint32_t bytes;      /* total size of header + arrays */
    uint64_t step_id;
    int32_t cap_tokens, cap_seqs, max_blocks, cap_logits, cap_copies;
    int32_t n_tokens, n_seqs, n_logits, n_copies;
    /* byte offsets of the arrays from the start of the plan, fixed by the capacities */
    uint32_t off_tokens, off_q_start, off_ctx_len, off_tables, off_seq_ref, off_logits,
        off_copies, pad_;
} step_plan_t;

/* Bytes a plan with these capacities takes; 0 on overflow or non-positive capacities. */
size_t step_plan_bytes(int cap_tokens, int cap_seqs, int max_blocks, int cap_logits,
                       int cap_copies);

/* A zeroed plan with these capacities in one allocation (free with step_plan_destroy):
 * DERAS_EINVAL for capacities step_plan_bytes refuses, DERAS_ENOMEM. */
int step_plan_new(int cap_tokens, int cap_seqs, int max_blocks, int cap_logits, int cap_copies,
                  step_plan_t **out);
void step_plan_destroy(step_plan_t **p);

/* Start a new step: counts to zero, q_start[0] = 0. */
void step_plan_reset(step_plan_t *p, uint64_t step_id);

/* Array accessors: O(1), the header's offsets. */
int32_t *plan_tokens(step_plan_t *p);
int32_t *plan_q_start(step_plan_t *p);
int32_t *plan_ctx_len(step_plan_t *p);
int32_t *plan_block_tables(step_plan_t *p);
int32_t *plan_seq_ref(step_plan_t *p);
int32_t *plan_logits_rows(step_plan_t *p);
int32_t *plan_copies(step_plan_t *p);

/* Check that `bytes` bytes at p hold a well-formed plan (magic, sizes, counts within
 * capacities, q_start monotonic, rows in range): what a follower calls before trusting
 * bytes from shared memory. DERAS_EFORMAT naming the field. */
int step_plan_validate(const step_plan_t *p, size_t bytes);

/* A pointer view of the plan for model_forward (valid while p lives). */
void step_plan_batch(step_plan_t *p, model_batch *b);

#endif
