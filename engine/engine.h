/* SPDX-License-Identifier: Apache-2.0 */
/* engine.h - one worker's inference engine: requests in, tokens out, one step at a time.
 *
 * engine_add() queues a request (token ids, sampling parameters, n samples, limits);
 * engine_step() runs one continuous-batching step - schedule, forward pass, sample - and
 * reports each new token and each finished sequence through callbacks; engine_abort()
 * ends a request at once and frees its KV blocks. A request with n > 1 samples prefills
 * its prompt once and then forks: the samples share the prompt's KV blocks (copy-on-write
 * for the partly filled last one) and draw from their own random streams (seed + index).
 *
 * Stop conditions handled here: the request's stop token ids, the model's end-of-
 * generation ids (unless ignore_eos), max_tokens and the context limit. Stop strings are
 * text and live with the detokenizer (router, `deras generate`), which aborts the request
 * when one matches. min_tokens (vLLM's): before a sample has that many tokens the sampler
 * cannot draw a stop or end-of-generation token, and none would end it; the detokenizer
 * side looks for stop strings only after them.
 *
 * Structured output (engine_request.grammar, engine/constrain.h): each sample follows the
 * grammar with a matcher; the tokens it does not allow are masked before sampling (on a
 * helper thread while the forward pass runs), the stop and end-of-generation ids are
 * allowed exactly where the output is a complete sentence, and a sample whose output is
 * complete with nothing but end of generation possible ends at once (FINISH_STOP, with or
 * without ignore_eos). A matcher budget exceeded at run time ends the request (every
 * sample, FINISH_ABORT with error PE_GRAMMAR_BUDGET) rather than let it run unconstrained.
 * Drafts are checked against the grammar before the pass (cut at the first refused one
 * where that leaves the output's distribution unchanged: greedy sampling or drafts that
 * are point masses), so speculation keeps the output as it is without it.
 *
 * Speculative decoding (engine_opts.spec, see speculative.h): before scheduling, each
 * decoding sequence may get k drafts from the proposer; the step verifies them with the
 * target's logits on k + 1 rows, keeps the accepted ones plus the target's own next
 * token (each reported through on_token, in order, with the target's logprobs) and rolls
 * the rest back. The output is the same as without speculation: identical under greedy
 * sampling, identically distributed otherwise.
 *
 * The engine is single-threaded and not reentrant: callbacks must not call engine
 * functions (collect aborts and issue them after engine_step returns). Per-request memory
 * (token buffers) is allocated in engine_add; steps allocate nothing.
 */
#ifndef DERAS_ENGINE_H
#define DERAS_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/grammar/token_grammar.h"
#include "common/request/finish_reason.h"
#include "common/request/proto_error.h"
#include "common/request/req_params.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/speculative.h"

struct step_plan;

typedef struct engine_request {
    uint64_t id;              /* caller's id, unique among live requests */
    const int32_t *prompt;    /* copied */
    int n_prompt;
    req_params params;        /* samples, limits, stops, seed, sampling (copied); its
                                 spec_tokens 0 means the engine's k */
    token_grammar_t *grammar; /* structured output (NULL: free): every sample gets a matcher
                                 of it (retained), its vocabulary must be the logits' width */
} engine_request;

/* How a sample ended, as on_finish reports it. */
typedef struct engine_sample_end {
    finish_reason why;        /* FINISH_STOP (a stop or end-of-generation token, or the
                                 grammar complete), FINISH_LENGTH (max_tokens, the context),
                                 FINISH_ABORT */
    int n_prompt, n_generated;
    spec_counters spec;       /* this sample's drafts verified, drafts accepted, verifications */
    enum proto_error_code error; /* PE_NONE; with FINISH_ABORT, why the engine ended the
                                 request itself: PE_GRAMMAR_BUDGET (a grammar's run-time
                                 budget), the message in deras_errmsg() during the call */
} engine_sample_end;

typedef struct engine_callbacks {
    /* a new token of sample `index`; r->token is already appended */
    void (*on_token)(void *ctx, uint64_t id, int index, const sample_result *r);
    /* sample `index` ended; called exactly once per sample */
    void (*on_finish)(void *ctx, uint64_t id, int index, const engine_sample_end *end);
    void *ctx;
} engine_callbacks;

typedef struct engine_opts {
    int max_seqs;          /* sequences per step (batch), <= the model's max_seqs */
    int max_batch_tokens;  /* tokens per step, >= max_seqs, <= the model's max_batch_tokens */
    int max_live_seqs;     /* sequences queued + running; add() beyond it is DERAS_EBUSY */
    int max_model_len;     /* prompt + max_tokens limit; 0: the most the cache allows */
    bool prefix_caching;
    bool static_batching;  /* benchmark baseline: no joining until the batch drains */
    const int32_t *eog_ids;/* end-of-generation ids (copied) */
    int n_eog;
    engine_callbacks cb;
    /* Called with each step's plan right before its forward pass (a tensor-parallel
     * leader sends it to the followers: worker/group.h); nonzero fails the step. NULL:
     * nothing. */
    int (*on_plan)(void *ctx, const struct step_plan *p);
    void *plan_ctx;
    spec_opts spec;        /* speculative decoding; kind SPEC_NONE (zeroed): off */
    model_t *drafter;      /* SPEC_SELF / SPEC_DRAFT: the draft model (borrowed, see
                              spec_drafter_load); its max_seqs >= max_seqs */
    bool inline_masks;     /* grammar masks on the stepping thread before the forward pass
                              instead of on a helper thread during it (engine/constrain.h) */
} engine_opts;

typedef struct engine_stats {
    int n_running, n_waiting, n_requests;
    int kv_blocks_total, kv_blocks_used;
    int kv_waste_tokens;       /* cache positions held by running sequences but not filled */
    int kv_running_tokens;     /* tokens with KV held by running sequences */
    int64_t queued_tokens;     /* tokens still to run through the model beyond each live
                                  sequence's next decode token: unprefilled prompts and
                                  recomputation after preemption */
    uint64_t steps, preemptions, cow_copies;
    uint64_t prompt_tokens;    /* prompt tokens of admitted requests */
    uint64_t computed_tokens;  /* tokens run through the model (prefill + recompute + decode) */
    uint64_t generated_tokens;
    uint64_t prefix_query_tokens, prefix_hit_tokens;
    spec_counters spec;        /* drafts verified, drafts accepted, verifications */
} engine_stats;

typedef struct engine engine_t;

/* An engine over a loaded model (which owns the KV cache memory); one engine per model at
 * a time. DERAS_EINVAL if the options do not fit the model's. */
int engine_new(model_t *m, const engine_opts *o, engine_t **out);
void engine_destroy(engine_t **e);

/* Queue a request. DERAS_ECONTEXT if prompt + max_tokens exceeds max_model_len;
 * DERAS_EBUSY if n more sequences do not fit in max_live_seqs; DERAS_EINVAL /
 * DERAS_ERANGE for bad ids or parameters; DERAS_EINVAL for an id already live or a
 * grammar over another vocabulary; DERAS_ENOMEM. O(n_prompt), plus a matcher's scratch per
 * sample with a grammar. */
int engine_add(engine_t *e, const engine_request *r);

/* End every sample of request `id` with FINISH_ABORT (callbacks run) and free its
 * blocks at once. DERAS_ENOTFOUND if it is not live. */
int engine_abort(engine_t *e, uint64_t id);

/* One step. *n_tokens (may be NULL) gets the tokens computed; 0 means nothing could run. */
int engine_step(engine_t *e, int *n_tokens);

bool engine_has_work(const engine_t *e);
/* O(max_live_seqs). */
void engine_get_stats(const engine_t *e, engine_stats *out);

/* For tests: check the KV manager's invariants (and the draft model's), and that every
 * live sequence's table matches its state. */
int engine_check(const engine_t *e);

#endif
