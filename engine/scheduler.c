/* SPDX-License-Identifier: Apache-2.0 */
/* scheduler.c - continuous batching policy (see scheduler.h for the rules).
 *
 * Two intrusive lists (common/base/list.h): `running` in admission order (head oldest)
 * and `waiting` in FIFO order. The sequences scheduled in the current step are remembered
 * in `sched`, an array of max_seqs pointers, so sched_step_done() needs no lookup.
 */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

typedef struct seq_list {
    list_node head;
    int n;
} seq_list;

struct sched {
    kv_manager_t *kv;
    sched_opts o;
    seq_list running, waiting;
    sched_seq **sched;   /* (max_seqs) scheduled this step */
    int n_sched;
    uint64_t admit_counter, preemptions;
};

static sched_seq *seq_first(const seq_list *l)
{
    return list_entry(list_first(&l->head), sched_seq, link);
}

static sched_seq *seq_last(const seq_list *l)
{
    return list_entry(list_last(&l->head), sched_seq, link);
}

static sched_seq *seq_next(const seq_list *l, const sched_seq *q)
{
    return list_entry(list_next(&l->head, &q->link), sched_seq, link);
}

static void seq_push_back(seq_list *l, sched_seq *q)
{
    list_push_back(&l->head, &q->link);
    l->n++;
}

static void seq_push_front(seq_list *l, sched_seq *q)
{
    list_push_front(&l->head, &q->link);
    l->n++;
}

static void seq_unlink(seq_list *l, sched_seq *q)
{
    list_remove(&q->link);
    l->n--;
}

int sched_new(kv_manager_t *kv, const sched_opts *o, sched_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "sched_new: NULL out");
    *out = NULL;
    if (!kv || !o || o->max_seqs <= 0 || o->max_batch_tokens < o->max_seqs)
        return deras_fail(DERAS_EINVAL, "sched_new: need a KV manager and 0 < max_seqs <= "
                          "max_batch_tokens");
    sched_t *s = calloc(1, sizeof *s);
    if (!s)
        return deras_fail(DERAS_ENOMEM, "sched_new: out of memory");
    s->sched = calloc((size_t)o->max_seqs, sizeof *s->sched);
    if (!s->sched) {
        free(s);
        return deras_fail(DERAS_ENOMEM, "sched_new: out of memory");
    }
    s->kv = kv;
    s->o = *o;
    list_init(&s->running.head);
    list_init(&s->waiting.head);
    *out = s;
    return DERAS_OK;
}

void sched_destroy(sched_t **sp)
{
    if (!sp || !*sp)
        return;
    free((*sp)->sched);
    free(*sp);
    *sp = NULL;
}

int sched_add(sched_t *s, sched_seq *q)
{
    if (!s || !q || q->state != SEQ_IDLE || q->n_tokens < 1)
        return deras_fail(DERAS_EINVAL, "sched_add: sequence must be idle with tokens");
    q->n_computed = 0;
    q->n_scheduled = 0;
    q->state = SEQ_WAITING;
    seq_push_back(&s->waiting, q);
    return DERAS_OK;
}

int sched_add_forked(sched_t *s, sched_seq *q)
{
    if (!s || !q || q->state != SEQ_IDLE)
        return deras_fail(DERAS_EINVAL, "sched_add_forked: sequence must be idle");
    q->n_scheduled = 0;
    if (s->running.n < s->o.max_seqs) {
        q->state = SEQ_RUNNING;
        q->admitted = s->admit_counter++;
        seq_push_back(&s->running, q);
        return DERAS_OK;
    }
    kv_free(s->kv, q->slot);
    q->n_computed = 0;
    q->state = SEQ_WAITING;
    seq_push_back(&s->waiting, q);
    return DERAS_OK;
}

void sched_remove(sched_t *s, sched_seq *q)
{
    if (!s || !q)
        return;
    if (q->state == SEQ_RUNNING)
        seq_unlink(&s->running, q);
    else if (q->state == SEQ_WAITING)
        seq_unlink(&s->waiting, q);
    for (int i = 0; i < s->n_sched; i++)
        if (s->sched[i] == q)
            s->sched[i] = NULL; /* removed mid-step: step_done skips it */
    kv_free(s->kv, q->slot);
    sched_spec_drop(q);
    q->state = SEQ_IDLE;
    q->n_computed = 0;
    q->n_scheduled = 0;
}

void sched_spec_drop(sched_seq *q)
{
    q->n_tokens -= q->n_spec;
    q->n_spec = 0;
}

/* Keep the first `keep` of q's drafts. */
static void spec_trim(sched_seq *q, int keep)
{
    q->n_tokens -= q->n_spec - keep;
    q->n_spec = keep;
}

static void preempt(sched_t *s, sched_seq *q)
{
    sched_spec_drop(q);
    seq_unlink(&s->running, q);
    kv_free(s->kv, q->slot);
    q->n_computed = 0;
    q->n_scheduled = 0;
    q->state = SEQ_WAITING;
    q->n_preempted++;
    seq_push_front(&s->waiting, q);
    s->preemptions++;
}

/* Append q's n_scheduled tokens to the plan. */
static void plan_add(sched_t *s, step_plan_t *p, sched_seq *q)
{
    int32_t *tok = plan_tokens(p) + p->n_tokens;
    memcpy(tok, q->tokens + q->n_computed, (size_t)q->n_scheduled * sizeof(int32_t));
    int si = p->n_seqs++;
    p->n_tokens += q->n_scheduled;
    plan_q_start(p)[si + 1] = p->n_tokens;
    plan_ctx_len(p)[si] = q->n_computed + q->n_scheduled;
    plan_seq_ref(p)[si] = q->slot;
    memcpy(plan_block_tables(p) + (size_t)si * p->max_blocks, kv_block_table(s->kv, q->slot),
           (size_t)p->max_blocks * sizeof(int32_t));
    q->wants_logits = q->n_computed + q->n_scheduled == q->n_tokens;
    for (int r = q->wants_logits ? q->n_spec : -1; r >= 0; r--) /* drafts: every row */
        plan_logits_rows(p)[p->n_logits++] = p->n_tokens - 1 - r;
    s->sched[s->n_sched++] = q;
}

int sched_schedule(sched_t *s, step_plan_t *p, int *n_preempted)
{
    step_plan_reset(p, p->step_id + 1);
    s->n_sched = 0;
    int budget = s->o.max_batch_tokens < p->cap_tokens ? s->o.max_batch_tokens : p->cap_tokens;
    int preempted = 0;
    bool static_busy = s->o.static_batching && s->running.n > 0;

    /* decodes still to schedule: the budget reserves a token for each */
    int decodes_left = 0;
    for (sched_seq *q = seq_first(&s->running); q; q = seq_next(&s->running, q))
        decodes_left += q->n_tokens - q->n_spec - q->n_computed == 1;

    for (sched_seq *q = seq_first(&s->running); q && budget > 0;) {
        sched_seq *next = seq_next(&s->running, q);
        int remaining = q->n_tokens - q->n_spec - q->n_computed;
        bool is_decode = remaining == 1;
        if (is_decode)
            decodes_left--;
        int n_new = is_decode ? 1 : remaining < budget - decodes_left ? remaining : budget - decodes_left;
        if (n_new <= 0) {
            q = next;
            continue;
        }
        if (q->n_spec > 0) {
            /* drafts take what the budget spares after the decodes to come, and only
             * free blocks: they never preempt */
            int spare = budget - decodes_left - 1, keep = q->n_spec < spare ? q->n_spec : spare;
            keep = keep > 0 ? keep : 0;
            while (keep > 0 && !kv_can_grow(s->kv, q->slot, q->n_computed + 1 + keep))
                keep--;
            spec_trim(q, keep);
            n_new = 1 + keep;
        }
        /* make room, preempting from the newest end */
        bool self_preempted = false;
        while (!kv_can_grow(s->kv, q->slot, q->n_computed + n_new)) {
            sched_seq *victim = seq_last(&s->running);
            if (victim->n_tokens - victim->n_spec - victim->n_computed == 1 && victim != q)
                decodes_left--;
            if (victim == next)
                next = NULL; /* q is now the tail's predecessor: nothing after it remains */
            preempt(s, victim);
            preempted++;
            if (victim == q) {
                self_preempted = true;
                break;
            }
        }
        if (!self_preempted) {
            if (kv_grow(s->kv, q->slot, q->n_computed + n_new))
                return deras_fail_ctx(DERAS_EINTERNAL, "scheduler: grow after can_grow: ");
            q->n_scheduled = n_new;
            plan_add(s, p, q);
            budget -= n_new;
        }
        q = next;
    }

    while (!preempted && !static_busy && budget > 0 && s->waiting.n > 0 &&
           s->running.n < s->o.max_seqs) {
        sched_seq *q = seq_first(&s->waiting);
        int rc;
        if (q->n_computed == 0 &&
            (rc = kv_claim_prefix(s->kv, q->slot, q->tokens, q->n_tokens, &q->n_computed)))
            return rc;
        int remaining = q->n_tokens - q->n_computed;
        int n_new = remaining < budget ? remaining : budget;
        if (!kv_can_grow(s->kv, q->slot, q->n_computed + n_new)) {
            kv_free(s->kv, q->slot); /* give back the claimed prefix while waiting */
            q->n_computed = 0;
            break;
        }
        if ((rc = kv_grow(s->kv, q->slot, q->n_computed + n_new)))
            return deras_fail_ctx(DERAS_EINTERNAL, "scheduler: grow after can_grow: ");
        seq_unlink(&s->waiting, q);
        q->state = SEQ_RUNNING;
        q->admitted = s->admit_counter++;
        seq_push_back(&s->running, q);
        q->n_scheduled = n_new;
        plan_add(s, p, q);
        budget -= n_new;
    }

    p->n_copies = kv_take_copies(s->kv, (kv_copy *)plan_copies(p), p->cap_copies);
    if (n_preempted)
        *n_preempted = preempted;
    return DERAS_OK;
}

int sched_spec_resolve(sched_t *s, sched_seq *q, int n_accepted)
{
    if (!s || !q || q->n_spec <= 0 || q->n_scheduled != q->n_spec + 1 || n_accepted < 0 ||
        n_accepted > q->n_spec)
        return deras_fail(DERAS_EINVAL, "sched_spec_resolve: sequence in slot %d has %d drafts "
                          "scheduled, cannot accept %d", q ? q->slot : -1, q ? q->n_spec : 0,
                          n_accepted);
    int keep = q->n_computed + 1 + n_accepted;
    int rc = kv_truncate(s->kv, q->slot, keep);
    if (rc)
        return rc;
    q->n_tokens = keep;
    q->n_scheduled = 1 + n_accepted;
    q->n_spec = 0;
    return DERAS_OK;
}

void sched_step_done(sched_t *s)
{
    for (int i = 0; i < s->n_sched; i++) {
        sched_seq *q = s->sched[i];
        if (!q)
            continue;
        q->n_computed += q->n_scheduled;
        q->n_scheduled = 0;
        kv_commit(s->kv, q->slot, q->tokens, q->n_computed);
    }
    s->n_sched = 0;
}

void sched_get_stats(const sched_t *s, sched_stats *out)
{
    out->n_running = s->running.n;
    out->n_waiting = s->waiting.n;
    out->preemptions = s->preemptions;
}
