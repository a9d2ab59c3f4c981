/* SPDX-License-Identifier: Apache-2.0 */
/* requests.h - the router's live requests: one record per client request, found by
 * (client identity, request id), by the router's own id (rid), and in deadline order.
 *
 * A request lives from its admission to the moment the client has heard its end (every
 * sample's final, or one error). Records are slots in a pool that only grows: a freed
 * slot keeps its buffers (prompt ids, sample streams) for the next request, so a steady
 * load allocates nothing and a flood answered with `busy` never reaches this table.
 * Slot pointers stay valid (and their state says FREE) after release until reused by
 * rq_acquire, which lets an event handler finish a loop over requests it may end.
 *
 * The record is a plain struct shared by the router's modules (dispatch queues it,
 * relay fills its samples); the table that indexes it is opaque. Costs: lookups O(1)
 * expected, insert/release O(log live) for the deadline heap, scans O(live).
 */
#ifndef DERAS_ROUTER_REQUESTS_H
#define DERAS_ROUTER_REQUESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/list.h"
#include "common/request/finish_reason.h"
#include "common/wire/protocol.h"
#include "common/tokenizer/tokenizer.h"
#include "router/stream.h"

#define RQ_MAX_IDENTITY 255 /* ZeroMQ routing ids are 1..255 bytes */

enum rq_state {
    RQ_FREE = 0,
    RQ_QUEUED,   /* admitted, waiting in the dispatch queue */
    RQ_RUNNING,  /* submitted to a worker */
};

typedef struct rq_sample {
    stream_t *st;               /* pooled with the slot */
    bool done;                  /* the client has (or is about to get) its final */
    bool worker_done;           /* the worker reported its finish */
    finish_reason finish;       /* once done: FINISH_STOP, FINISH_LENGTH or FINISH_ABORT */
    const char *abort_reason;   /* with FINISH_ABORT: "cancelled", "deadline_exceeded", ... */
    int64_t t_first_us;         /* first token, 0 before */
    int64_t t_last_us;          /* latest token */
    bool touched;               /* in the current STEP's list of samples to flush */
    spec_counters spec;         /* the worker's speculation for it, from its finish; 0 before */
} rq_sample;

typedef struct rq {
    enum rq_state state;
    uint64_t rid;                /* router id on the worker link; new for every dispatch */

    /* who asked */
    uint8_t ident[RQ_MAX_IDENTITY];
    int ident_len;
    bool delim;                  /* REQ envelope: echo the empty delimiter frame */
    int fd;                      /* connection the request came on (-1 unknown, HTTP) */
    struct http_call *http;      /* the HTTP call that asked (http_api.c), NULL: ZeroMQ */
    char id[PROTO_MAX_ID + 1];

    /* what to run (the prompt is already tokenized and validated) */
    int32_t *prompt;
    int n_prompt, prompt_cap;
    req_params params;           /* as decoded, with the seed chosen when the client gave none */
    bool stream;
    int n_stops;
    char stops[PROTO_MAX_STOPS][PROTO_MAX_STOP_BYTES];
    size_t stop_lens[PROTO_MAX_STOPS];
    char *grammar;               /* structured output as GBNF (router/constraint.h), NULL:
                                    none; owned by the record, freed with it */
    size_t grammar_len;

    /* progress */
    rq_sample samples[REQ_MAX_N];
    int n_done;                  /* samples with done */
    int n_finals;                /* samples whose final went out (or would have: gone) */
    bool client_seen;            /* a chunk or final went out: no silent re-dispatch */
    bool gone;                   /* the client cannot be reached: end without a word */
    int worker;                  /* registry slot while RUNNING, else -1 */
    int attempts;                /* dispatches so far */
    int64_t t_recv_us, t_dispatch_us;
    int64_t deadline_us;         /* 0: none */
    int64_t no_worker_until_us;  /* queued with no worker ready: fail no_workers after this */

    /* links, owned by the table and by dispatch */
    struct rq *h_key_next, *h_rid_next;
    list_node live;              /* the table's live list */
    list_node queue;             /* dispatch's queue; unlinked when not queued */
    int heap_at;                 /* index in the deadline heap, -1 if not there */
    int slot;
} rq_t;

typedef struct rq_table rq_table_t;

/* A table whose streams detokenize with t (borrowed). DERAS_ENOMEM. */
int rq_table_new(const tokenizer_t *t, rq_table_t **out);
/* Frees every slot, live or not; sets *tp to NULL. */
void rq_table_destroy(rq_table_t **tp);

/* Take a slot from the pool (a new one when none is free) as a fresh record in *out (state
 * QUEUED, worker -1, everything else zero), not yet indexed: fill ident/id/params, then
 * rq_insert. Not a constructor: the table owns the slot, which goes back with rq_discard or
 * rq_release, never a destroy. DERAS_ENOMEM (*out NULL). O(1) amortized. */
int rq_acquire(rq_table_t *t, rq_t **out);
/* Give back a record that was never inserted, or one rq_release already unlinked. */
void rq_discard(rq_table_t *t, rq_t *r);

/* r takes the malloc'd GBNF text g (n bytes; NULL: none), freeing what it held. O(1). */
void rq_set_grammar(rq_t *r, char *g, size_t n);
/* Make sure r->prompt holds n ids. DERAS_ENOMEM. */
int rq_reserve_prompt(rq_t *r, int n);
/* Start every sample's stream (stops, logprobs) for a first or repeated dispatch.
 * DERAS_ENOMEM / DERAS_EINVAL from stream_start. */
int rq_start_samples(rq_table_t *t, rq_t *r);

/* Index r by (ident, id), by rid, in the live list and, with a deadline, in the heap.
 * The caller checked rq_find_key first. O(log live). */
int rq_insert(rq_table_t *t, rq_t *r);
/* Give r a new rid (before a re-dispatch). O(1). */
void rq_set_rid(rq_table_t *t, rq_t *r, uint64_t rid);
/* Unindex r and return its slot to the pool (state FREE). The caller removed it from
 * the dispatch queue. O(log live). */
void rq_release(rq_table_t *t, rq_t *r);

rq_t *rq_find_key(const rq_table_t *t, const void *ident, int ident_len, const char *id);
rq_t *rq_find_rid(const rq_table_t *t, uint64_t rid);

/* The live list, in admission order: for (r = rq_first(t); r; r = rq_next(t, r)). A loop
 * that may release r takes the next record first. O(1) each. */
rq_t *rq_first(const rq_table_t *t);
/* The live record after r; NULL at the end or when r is no longer live. */
rq_t *rq_next(const rq_table_t *t, const rq_t *r);
int rq_count(const rq_table_t *t);

/* The request whose deadline comes first, or NULL. O(1). */
rq_t *rq_next_deadline(const rq_table_t *t);

/* Slots allocated so far (live + pooled): memory stays proportional to this. */
int rq_slots(const rq_table_t *t);

#endif
