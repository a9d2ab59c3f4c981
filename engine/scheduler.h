/* SPDX-License-Identifier: Apache-2.0 */
/* scheduler.h - continuous batching: which sequences compute how many tokens each step.
 *
 * One rule instead of two phases: a sequence has n_computed tokens in the KV cache
 * catching up to n_tokens (prompt plus generated). Each step gives scheduled sequences
 * new tokens under a token budget (max_batch_tokens) and a sequence cap (max_seqs): one
 * token for a decode, a chunk for a prompt (chunked prefill). Prefix caching simply
 * starts n_computed further along; preemption resets it to 0.
 *
 * Order of a step:
 *   1. running sequences, oldest admitted first: a decode gets its one token; a sequence
 *      still prefilling gets a chunk of what budget remains after reserving one token for
 *      every decode still to come, so a long prompt never stalls the others' tokens;
 *   2. waiting sequences in FIFO order (preempted ones first), while the budget, the cap
 *      and the KV pool allow; the queue head is never skipped.
 * When a running sequence cannot get blocks, the most recently admitted running sequence
 * (the tail of the running list, never one already scheduled this step) is preempted -
 * its blocks freed, n_computed reset, back to the front of the waiting queue - until the
 * sequence fits or is itself the one preempted; no sequence is admitted in a step that
 * preempted. Since the engine refuses requests that could not fit in the whole pool, the
 * oldest running sequence always fits eventually: no deadlock.
 *
 * Speculation: the engine appends k drafts to a decoding sequence (n_tokens += k, n_spec
 * = k) before scheduling. Such a sequence is scheduled all at once - its pending token
 * and its drafts, k + 1 tokens with logits on every row - or with fewer drafts when the
 * budget or the free blocks are short (drafts never preempt anyone; the dropped ones
 * leave tokens). After the pass, sched_spec_resolve() keeps the accepted drafts and rolls
 * back the rest: n_tokens shrinks and the blocks past the new end are released, before
 * sched_step_done() registers full blocks in the prefix cache, so a block filled only by
 * rejected drafts is never registered. A preempted or unscheduled sequence loses its
 * drafts.
 *
 * Static mode (kept for the benchmark): new sequences join only when nothing is running,
 * so a batch runs to completion before the next one starts.
 *
 * The scheduler owns no sequences: the engine embeds sched_seq in its own sequence
 * records and the queues are intrusive lists, so scheduling allocates nothing. Cost per
 * step: O(running + admitted) plus the KV manager's O(1) per block.
 */
#ifndef DERAS_SCHEDULER_H
#define DERAS_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/list.h"
#include "engine/kv_manager.h"
#include "engine/step_plan.h"

typedef enum sched_state {
    SEQ_IDLE = 0,   /* in no queue: not yet added, finished, or parked by the engine */
    SEQ_WAITING,
    SEQ_RUNNING,
} sched_state;

typedef struct sched_seq {
    /* set by the engine */
    int slot;              /* KV manager slot; also the sequence's handle in plans */
    const int32_t *tokens; /* prompt then generated tokens */
    int n_tokens;          /* tokens known, including n_spec drafts at the end */
    int n_spec;            /* speculative drafts at the end of tokens, to verify this step */
    /* owned by the scheduler */
    int n_computed;        /* tokens whose KV is in the cache */
    int n_scheduled;       /* tokens this step computes, 0 when not scheduled */
    bool wants_logits;     /* this step catches up: sample after it */
    sched_state state;
    uint64_t admitted;     /* admission order, for choosing whom to preempt */
    int n_preempted;
    list_node link;        /* in the waiting or the running queue */
} sched_seq;

typedef struct sched_opts {
    int max_seqs;          /* running sequences per step */
    int max_batch_tokens;  /* tokens per step; >= max_seqs */
    bool static_batching;
} sched_opts;

typedef struct sched_stats {
    int n_running, n_waiting;
    uint64_t preemptions;
} sched_stats;

typedef struct sched sched_t;

/* A scheduler over kv (borrowed) for o->max_seqs running sequences: DERAS_EINVAL unless
 * 0 < max_seqs <= max_batch_tokens, DERAS_ENOMEM. O(max_seqs). */
int sched_new(kv_manager_t *kv, const sched_opts *o, sched_t **out);
void sched_destroy(sched_t **s);

/* Queue a sequence (state IDLE, n_tokens >= 1) at the back of the waiting queue. */
int sched_add(sched_t *s, sched_seq *q);

/* A sequence that shares its parent's KV (n > 1 samples): the slot must already hold the
 * forked blocks (kv_fork) and q->n_computed equals the parent's. Joins the running set if
 * the cap allows; otherwise its blocks are released and it waits (recomputing, from the
 * prefix cache where possible). */
int sched_add_forked(sched_t *s, sched_seq *q);

/* Take q out of whatever queue it is in and free its KV blocks. O(blocks). */
void sched_remove(sched_t *s, sched_seq *q);

/* Fill `plan` with the next step (reset first). The copy-on-write copies the KV manager
 * recorded are placed in the plan. *n_preempted counts preemptions made. An empty plan
 * (n_seqs 0) means nothing can run. */
int sched_schedule(sched_t *s, step_plan_t *plan, int *n_preempted);

/* After the pass, before sched_step_done: of q's n_spec drafts the first n_accepted stand.
 * The rest leave q's tokens and KV (tail blocks released); q computed its pending token
 * and the accepted drafts. DERAS_EINVAL if q was not scheduled with drafts or n_accepted
 * is out of [0, n_spec]. O(released blocks). */
int sched_spec_resolve(sched_t *s, sched_seq *q, int n_accepted);

/* A sequence that keeps drafts it was not scheduled for drops them (n_tokens -= n_spec).
 * O(1). */
void sched_spec_drop(sched_seq *q);

/* After the step ran: the sequences the last sched_schedule() scheduled advance
 * n_computed and their full blocks are registered in the prefix cache. */
void sched_step_done(sched_t *s);

void sched_get_stats(const sched_t *s, sched_stats *out);

#endif
