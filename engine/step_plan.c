/* SPDX-License-Identifier: Apache-2.0 */
/* step_plan.c - the flat step record (see step_plan.h).
 *
 * Layout: header, then tokens, q_start, ctx_len, block_tables, seq_ref, logits_rows,
 * copies, each an int32 array at the offset the capacities give; the offsets are stored
 * in the header so accessors are one addition. Sizes are computed in 64 bits and capped,
 * and validation recomputes the offsets, so a forged header cannot point outside.
 */
#include "step_plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

#define PLAN_MAX_BYTES ((size_t)1 << 30)

typedef struct plan_layout {
    size_t tokens, q_start, ctx_len, tables, seq_ref, logits, copies, end;
} plan_layout;

static int layout(int cap_tokens, int cap_seqs, int max_blocks, int cap_logits, int cap_copies,
                  plan_layout *l)
{
    if (cap_tokens <= 0 || cap_seqs <= 0 || max_blocks <= 0 || cap_logits <= 0 || cap_copies < 0)
        return -1;
    const uint64_t i4 = sizeof(int32_t);
    uint64_t off = sizeof(step_plan_t);
    l->tokens = off;
    off += (uint64_t)cap_tokens * i4;
    l->q_start = off;
    off += ((uint64_t)cap_seqs + 1) * i4;
    l->ctx_len = off;
    off += (uint64_t)cap_seqs * i4;
    l->tables = off;
    off += (uint64_t)cap_seqs * (uint64_t)max_blocks * i4;
    l->seq_ref = off;
    off += (uint64_t)cap_seqs * i4;
    l->logits = off;
    off += (uint64_t)cap_logits * i4;
    l->copies = off;
    off += 2 * (uint64_t)cap_copies * i4;
    if (off > PLAN_MAX_BYTES)
        return -1;
    l->end = off;
    return 0;
}

size_t step_plan_bytes(int cap_tokens, int cap_seqs, int max_blocks, int cap_logits,
                       int cap_copies)
{
    plan_layout l;
    return layout(cap_tokens, cap_seqs, max_blocks, cap_logits, cap_copies, &l) ? 0 : l.end;
}

int step_plan_new(int cap_tokens, int cap_seqs, int max_blocks, int cap_logits, int cap_copies,
                  step_plan_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "step_plan_new: NULL out");
    *out = NULL;
    plan_layout l;
    if (layout(cap_tokens, cap_seqs, max_blocks, cap_logits, cap_copies, &l))
        return deras_fail(DERAS_EINVAL, "step_plan_new: capacities (%d tokens, %d seqs, %d "
                          "blocks, %d logits, %d copies) must be positive (copies >= 0) and "
                          "fit in %zu bytes", cap_tokens, cap_seqs, max_blocks, cap_logits,
                          cap_copies, PLAN_MAX_BYTES);
    step_plan_t *p = calloc(1, l.end);
    if (!p)
        return deras_fail(DERAS_ENOMEM, "step_plan_new: out of memory for %zu bytes", l.end);
    p->magic = STEP_PLAN_MAGIC;
    p->bytes = (uint32_t)l.end;
    p->cap_tokens = cap_tokens;
    p->cap_seqs = cap_seqs;
    p->max_blocks = max_blocks;
    p->cap_logits = cap_logits;
    p->cap_copies = cap_copies;
    p->off_tokens = (uint32_t)l.tokens;
    p->off_q_start = (uint32_t)l.q_start;
    p->off_ctx_len = (uint32_t)l.ctx_len;
    p->off_tables = (uint32_t)l.tables;
    p->off_seq_ref = (uint32_t)l.seq_ref;
    p->off_logits = (uint32_t)l.logits;
    p->off_copies = (uint32_t)l.copies;
    *out = p;
    return DERAS_OK;
}

void step_plan_destroy(step_plan_t **p)
{
    if (p) {
        free(*p);
        *p = NULL;
    }
}

int32_t *plan_tokens(step_plan_t *p) { return (int32_t *)((char *)p + p->off_tokens); }
int32_t *plan_q_start(step_plan_t *p) { return (int32_t *)((char *)p + p->off_q_start); }
int32_t *plan_ctx_len(step_plan_t *p) { return (int32_t *)((char *)p + p->off_ctx_len); }
int32_t *plan_block_tables(step_plan_t *p) { return (int32_t *)((char *)p + p->off_tables); }
int32_t *plan_seq_ref(step_plan_t *p) { return (int32_t *)((char *)p + p->off_seq_ref); }
int32_t *plan_logits_rows(step_plan_t *p) { return (int32_t *)((char *)p + p->off_logits); }
int32_t *plan_copies(step_plan_t *p) { return (int32_t *)((char *)p + p->off_copies); }

void step_plan_reset(step_plan_t *p, uint64_t step_id)
{
    p->step_id = step_id;
    p->n_tokens = p->n_seqs = p->n_logits = p->n_copies = 0;
    plan_q_start(p)[0] = 0;
}

int step_plan_validate(const step_plan_t *cp, size_t bytes)
{
    if (!cp || bytes < sizeof(step_plan_t))
        return deras_fail(DERAS_EFORMAT, "step plan: %zu bytes is shorter than its header", bytes);
    step_plan_t *p = (step_plan_t *)cp;
    plan_layout l;
    if (p->magic != STEP_PLAN_MAGIC)
        return deras_fail(DERAS_EFORMAT, "step plan: bad magic 0x%08x", p->magic);
    if (layout(p->cap_tokens, p->cap_seqs, p->max_blocks, p->cap_logits, p->cap_copies, &l) ||
        l.end != p->bytes || l.end > bytes)
        return deras_fail(DERAS_EFORMAT, "step plan: capacities do not match its %u bytes", p->bytes);
    if (p->off_tokens != l.tokens || p->off_q_start != l.q_start || p->off_ctx_len != l.ctx_len ||
        p->off_tables != l.tables || p->off_seq_ref != l.seq_ref || p->off_logits != l.logits ||
        p->off_copies != l.copies)
        return deras_fail(DERAS_EFORMAT, "step plan: array offsets do not match its capacities");
    if (p->n_tokens < 0 || p->n_tokens > p->cap_tokens || p->n_seqs < 0 ||
        p->n_seqs > p->cap_seqs || p->n_logits < 0 || p->n_logits > p->cap_logits ||
        p->n_copies < 0 || p->n_copies > p->cap_copies)
        return deras_fail(DERAS_EFORMAT, "step plan: counts exceed capacities");
    const int32_t *qs = plan_q_start(p);
    if (qs[0] != 0 || qs[p->n_seqs] != p->n_tokens)
        return deras_fail(DERAS_EFORMAT, "step plan: q_start does not span the tokens");
    for (int s = 0; s < p->n_seqs; s++)
        if (qs[s + 1] <= qs[s])
            return deras_fail(DERAS_EFORMAT, "step plan: sequence %d has no tokens", s);
    const int32_t *rows = plan_logits_rows(p);
    for (int i = 0; i < p->n_logits; i++)
        if (rows[i] < 0 || rows[i] >= p->n_tokens)
            return deras_fail(DERAS_EFORMAT, "step plan: logits row %d outside the step", rows[i]);
    return DERAS_OK;
}

void step_plan_batch(step_plan_t *p, model_batch *b)
{
    memset(b, 0, sizeof *b);
    b->n_tokens = p->n_tokens;
    b->tokens = plan_tokens(p);
    b->n_seqs = p->n_seqs;
    b->q_start = plan_q_start(p);
    b->ctx_len = plan_ctx_len(p);
    b->block_tables = plan_block_tables(p);
    b->n_logits = p->n_logits;
    b->logits_rows = plan_logits_rows(p);
    b->n_copies = p->n_copies;
    b->copies = plan_copies(p);
}
