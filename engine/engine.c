/* SPDX-License-Identifier: Apache-2.0 */
/* engine.c - requests, sequences and the step loop (see engine.h).
 *
 * Records. A request owns n sequences (samples). Sequences live in a pool of
 * max_live_seqs entries whose index is also the sequence's KV slot, so a step plan's
 * seq_ref maps straight back to the sequence. Free entries form a stack. Each sequence
 * has its own token buffer (prompt + max_tokens), allocated at engine_add.
 *
 * Forks. Sample 0 prefills the prompt; samples 1..n-1 wait parked (in no queue) until
 * sample 0 first catches up. In that step every parked sample forks sample 0's blocks
 * and draws its first token from the same logits row with its own random stream.
 *
 * Speculation. A step first asks the proposer for drafts for every decoding sequence
 * (appended to its tokens, sq.n_spec set), then schedules, runs the target, and in plan
 * order verifies each sequence's drafts against its k + 1 logits rows (speculative.h has
 * the rule), rolling rejected drafts back through sched_spec_resolve() before
 * sched_step_done() commits blocks; only then are tokens reported. Per-step scratch for
 * all of this (draft distributions, the target's distribution, verified results) is
 * sized at engine_new.
 *
 * Grammars (engine/constrain.h). A constrained sample's matcher lives in its slot; drafts
 * are cut at the first the grammar refuses in propose(); after scheduling, the masks of
 * the sequences that sample are computed while the pass runs, and the sampler sees row j's
 * mask; every token reported is accepted by the matcher in emit(). The constrain record is
 * made with the first constrained request (scratch for max_seqs x rows masks).
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "engine/constrain.h"
#include "engine/kv_manager.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "engine/step_plan.h"

typedef struct ereq ereq;

typedef struct eseq {
    sched_seq sq;          /* scheduler view; sq.slot is this entry's index */
    ereq *req;
    int index;             /* sample index within the request */
    int32_t *tokens;       /* (n_prompt + max_tokens) */
    int n_generated;
    sampler_rng rng;
    sampler_rng draft_rng; /* the proposer's draws (speculative.h) */
    spec_adapt adapt;
    spec_counters spec;    /* this sample's speculation */
    const float *q;        /* this step's draft distributions, NULL: point masses */
    bool live, parked, done;
    int next_free;         /* free-stack link */
} eseq;

struct ereq {
    uint64_t id;
    int n_prompt, n_done;
    req_params params;
    int32_t *stops;        /* the tokens that end its samples: stop ids, then end of
                              generation unless ignore_eos; in engine.stops */
    int n_stops;
    int seq[REQ_MAX_N];    /* slots of its samples */
    bool live;
};

struct engine {
    model_t *m;
    engine_opts o;
    int32_t *eog;
    int32_t *stops;        /* (max_live_seqs, REQ_MAX_STOP_IDS + n_eog) each request's stops */
    int vocab;
    kv_manager_t *kv;
    sched_t *sched;
    step_plan_t *plan;
    sampler_t *sampler;
    float *logits;         /* (max_seqs * rows, vocab), rows = 1 + spec.k (1 without) */
    int rows;              /* logits rows per sequence at most */
    spec_proposer_t *spec; /* NULL: no speculation */
    spec_seq *cand;        /* (max_seqs) this step's draft requests */
    eseq **cand_seq;       /* (max_seqs) their sequences */
    float *spec_q;         /* (max_seqs, spec.k, vocab) draft distributions; NULL for n-gram */
    float *p_buf;          /* (vocab) the target's processed distribution at one row */
    sample_result *res;    /* (max_seqs, rows) verified tokens, by plan index */
    int *n_res;            /* (max_seqs) verified tokens of plan sequence i, 0: none */
    int *row0;             /* (max_seqs) first logits row of plan sequence i */
    eseq *seqs;            /* (max_live_seqs) */
    ereq *reqs;            /* (max_live_seqs) */
    int free_head, n_free;
    constrain_t *cons;     /* NULL until the first request with a grammar */
    bool complete_pending; /* a sample's grammar is complete before any token: end it */
    engine_stats st;
};

static int check_opts(const model_t *m, engine_opts *o)
{
    const model_opts *mo = model_get_opts(m);
    const model_config *c = model_get_config(m);
    int cache_len = (mo->n_kv_blocks - 1) * mo->block_size;
    int table_len = mo->max_blocks_per_seq * mo->block_size;
    int limit = c->max_seq_len < cache_len ? c->max_seq_len : cache_len;
    limit = limit < table_len ? limit : table_len;
    if (o->max_model_len == 0)
        o->max_model_len = limit;
    int rows = o->spec.kind == SPEC_NONE ? 1 : 1 + o->spec.k;
    int rc = spec_opts_check(&o->spec);
    if (rc)
        return rc;
    if (o->max_seqs > 0 && (long)o->max_seqs * rows > mo->max_logits)
        return deras_fail(DERAS_EINVAL, "engine: %d sequences x %d logits rows (1 + k drafts) "
                          "exceed the model's %d logit rows", o->max_seqs, rows, mo->max_logits);
    if (o->max_seqs <= 0 || o->max_seqs > mo->max_seqs || o->max_seqs > mo->max_logits ||
        o->max_seqs > mo->max_copies)
        return deras_fail(DERAS_EINVAL,
                          "engine: max_seqs %d must be in [1, %d] (the model's sequences, logit "
                          "rows and copies: %d, %d, %d)",
                          o->max_seqs, mo->max_seqs, mo->max_seqs, mo->max_logits, mo->max_copies);
    if (o->max_batch_tokens < o->max_seqs || o->max_batch_tokens > mo->max_batch_tokens)
        return deras_fail(DERAS_EINVAL, "engine: max_batch_tokens %d must be in [max_seqs %d, %d]",
                          o->max_batch_tokens, o->max_seqs, mo->max_batch_tokens);
    if (o->max_live_seqs < o->max_seqs)
        return deras_fail(DERAS_EINVAL, "engine: max_live_seqs %d < max_seqs %d", o->max_live_seqs,
                          o->max_seqs);
    if (o->max_model_len < 1 || o->max_model_len > limit)
        return deras_fail(DERAS_EINVAL,
                          "engine: max_model_len %d must be in [1, %d] (model context %d, KV "
                          "cache %d tokens, block table %d tokens)",
                          o->max_model_len, limit, c->max_seq_len, cache_len, table_len);
    if (o->n_eog < 0 || (o->n_eog && !o->eog_ids))
        return deras_fail(DERAS_EINVAL, "engine: bad end-of-generation ids");
    return DERAS_OK;
}

int engine_new(model_t *m, const engine_opts *opts, engine_t **out)
{
    if (!m || !opts || !out)
        return deras_fail(DERAS_EINVAL, "engine_new: NULL argument");
    *out = NULL;
    engine_opts o = *opts;
    int rc = check_opts(m, &o);
    if (rc)
        return rc;
    engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return deras_fail(DERAS_ENOMEM, "engine_new: out of memory");
    const model_opts *mo = model_get_opts(m);
    e->m = m;
    e->o = o;
    e->vocab = model_get_config(m)->vocab_size;
    kv_manager_opts ko = {.n_blocks = mo->n_kv_blocks, .block_size = mo->block_size,
                          .max_seqs = o.max_live_seqs, .max_blocks_per_seq = mo->max_blocks_per_seq,
                          .prefix_caching = o.prefix_caching};
    if ((rc = kv_manager_new(&ko, &e->kv)))
        goto fail;
    sched_opts so = {.max_seqs = o.max_seqs, .max_batch_tokens = o.max_batch_tokens,
                     .static_batching = o.static_batching};
    e->rows = o.spec.kind == SPEC_NONE ? 1 : 1 + o.spec.k;
    const size_t S = (size_t)o.max_seqs;
    if ((rc = sched_new(e->kv, &so, &e->sched)) ||
        (rc = step_plan_new(o.max_batch_tokens, o.max_seqs, mo->max_blocks_per_seq,
                            o.max_seqs * e->rows, o.max_seqs, &e->plan)) ||
        (rc = sampler_new(e->vocab, &e->sampler)))
        goto fail;
    e->logits = malloc(S * e->rows * e->vocab * sizeof(float));
    e->seqs = calloc((size_t)o.max_live_seqs, sizeof *e->seqs);
    e->reqs = calloc((size_t)o.max_live_seqs, sizeof *e->reqs);
    e->eog = malloc((size_t)(o.n_eog + 1) * sizeof(int32_t));
    e->stops = malloc((size_t)o.max_live_seqs * (REQ_MAX_STOP_IDS + o.n_eog) * sizeof(int32_t));
    e->row0 = calloc(S, sizeof *e->row0);
    if (!e->logits || !e->seqs || !e->reqs || !e->eog ||
        !e->stops || !e->row0) {
        rc = deras_fail(DERAS_ENOMEM, "engine_new: out of memory");
        goto fail;
    }
    if (o.spec.kind != SPEC_NONE) {
        if ((rc = spec_proposer_new(&o.spec, o.drafter, e->vocab, o.max_live_seqs, o.max_seqs,
                                    &e->spec)))
            goto fail;
        e->cand = calloc(S, sizeof *e->cand);
        e->cand_seq = calloc(S, sizeof *e->cand_seq);
        e->p_buf = malloc((size_t)e->vocab * sizeof(float));
        e->res = malloc(S * e->rows * sizeof *e->res);
        e->n_res = calloc(S, sizeof *e->n_res);
        if (o.drafter)
            e->spec_q = malloc(S * o.spec.k * e->vocab * sizeof(float));
        if (!e->cand || !e->cand_seq || !e->p_buf || !e->res || !e->n_res ||
            (o.drafter && !e->spec_q)) {
            rc = deras_fail(DERAS_ENOMEM, "engine_new: out of memory for speculation");
            goto fail;
        }
    }
    if (o.n_eog)
        memcpy(e->eog, o.eog_ids, (size_t)o.n_eog * sizeof(int32_t));
    e->o.eog_ids = e->eog;
    for (int i = 0; i < o.max_live_seqs; i++) {
        e->seqs[i].sq.slot = i;
        e->seqs[i].next_free = i + 1 < o.max_live_seqs ? i + 1 : -1;
    }
    e->free_head = 0;
    e->n_free = o.max_live_seqs;
    e->st.kv_blocks_total = mo->n_kv_blocks - 1;
    *out = e;
    return DERAS_OK;
fail:
    engine_destroy(&e);
    return rc;
}

void engine_destroy(engine_t **ep)
{
    if (!ep || !*ep)
        return;
    engine_t *e = *ep;
    if (e->seqs)
        for (int i = 0; i < e->o.max_live_seqs; i++)
            free(e->seqs[i].tokens);
    free(e->seqs);
    free(e->reqs);
    free(e->logits);
    free(e->eog);
    free(e->stops);
    spec_proposer_destroy(&e->spec);
    free(e->cand);
    free(e->cand_seq);
    free(e->spec_q);
    free(e->p_buf);
    free(e->res);
    free(e->n_res);
    free(e->row0);
    constrain_destroy(&e->cons);
    sampler_destroy(&e->sampler);
    step_plan_destroy(&e->plan);
    sched_destroy(&e->sched);
    kv_manager_destroy(&e->kv);
    free(e);
    *ep = NULL;
}

static ereq *find_req(engine_t *e, uint64_t id)
{
    for (int i = 0; i < e->o.max_live_seqs; i++)
        if (e->reqs[i].live && e->reqs[i].id == id)
            return &e->reqs[i];
    return NULL;
}

static int validate_request(const engine_t *e, const engine_request *r)
{
    const req_params *p = &r->params;
    if (!r->prompt || r->n_prompt < 1)
        return deras_fail(DERAS_EINVAL, "request %llu: empty prompt", (unsigned long long)r->id);
    int rc = req_params_validate(p, e->vocab);
    if (rc)
        return rc;
    if ((long)r->n_prompt + p->max_tokens > e->o.max_model_len)
        return deras_fail(DERAS_ECONTEXT,
                          "context_length_exceeded: prompt %d + max_tokens %d = %ld tokens exceeds "
                          "the limit of %d",
                          r->n_prompt, p->max_tokens, (long)r->n_prompt + p->max_tokens,
                          e->o.max_model_len);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->vocab)
            return deras_fail(DERAS_ERANGE, "request %llu: prompt token %d is %d, outside [0, %d)",
                              (unsigned long long)r->id, i, r->prompt[i], e->vocab);
    if (find_req((engine_t *)e, r->id))
        return deras_fail(DERAS_EINVAL, "request %llu is already live", (unsigned long long)r->id);
    return DERAS_OK;
}

int engine_add(engine_t *e, const engine_request *r)
{
    if (!e || !r)
        return deras_fail(DERAS_EINVAL, "engine_add: NULL argument");
    int rc = validate_request(e, r);
    if (rc)
        return rc;
    const req_params *p = &r->params;
    if (e->n_free < p->n)
        return deras_fail(DERAS_EBUSY, "engine: %d sequences live, no room for %d more",
                          e->o.max_live_seqs - e->n_free, p->n);
    ereq *q = NULL;
    for (int i = 0; i < e->o.max_live_seqs && !q; i++)
        if (!e->reqs[i].live)
            q = &e->reqs[i];
    memset(q, 0, sizeof *q);
    q->id = r->id;
    q->n_prompt = r->n_prompt;
    q->params = *p;
    q->stops = e->stops + (size_t)(q - e->reqs) * (REQ_MAX_STOP_IDS + e->o.n_eog);
    memcpy(q->stops, p->stop_ids, (size_t)p->n_stop_ids * sizeof(int32_t));
    q->n_stops = p->n_stop_ids;
    for (int i = 0; !p->ignore_eos && i < e->o.n_eog; i++)
        q->stops[q->n_stops++] = e->eog[i];

    if (r->grammar && !e->cons &&
        (rc = constrain_new(e->vocab, e->o.max_live_seqs, e->o.max_seqs, e->rows, e->eog,
                            e->o.n_eog, e->o.inline_masks, &e->cons)))
        return rc;
    size_t cap = (size_t)r->n_prompt + (size_t)p->max_tokens;
    int taken[REQ_MAX_N];
    for (int i = 0; i < p->n; i++) {
        int slot = e->free_head;
        eseq *s = &e->seqs[slot];
        int32_t *buf = realloc(s->tokens, cap * sizeof(int32_t));
        rc = buf ? DERAS_OK : deras_fail(DERAS_ENOMEM, "engine_add: out of memory for %zu tokens",
                                         cap);
        if (buf)
            s->tokens = buf;
        if (!rc && r->grammar)
            rc = constrain_attach(e->cons, slot, r->grammar);
        if (rc) {
            for (int j = 0; j < i; j++) { /* give the taken entries back */
                constrain_detach(e->cons, taken[j]);
                e->seqs[taken[j]].next_free = e->free_head;
                e->free_head = taken[j];
                e->n_free++;
            }
            return rc;
        }
        if (r->grammar && constrain_complete(e->cons, slot))
            e->complete_pending = true;
        e->free_head = s->next_free;
        e->n_free--;
        taken[i] = slot;
        memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
        s->sq.tokens = s->tokens;
        s->sq.n_tokens = r->n_prompt;
        s->sq.n_computed = 0;
        s->sq.n_preempted = 0;
        s->sq.n_spec = 0;
        s->sq.state = SEQ_IDLE;
        s->req = q;
        s->index = i;
        s->n_generated = 0;
        s->live = true;
        s->done = false;
        s->parked = i > 0;
        sampler_rng_seed(&s->rng, p->seed + (uint64_t)i);
        sampler_rng_seed(&s->draft_rng, (p->seed + (uint64_t)i) ^ SPEC_DRAFT_STREAM);
        spec_adapt_reset(&s->adapt);
        s->spec = (spec_counters){0};
        s->q = NULL;
        q->seq[i] = slot;
    }
    q->live = true;
    e->st.n_requests++;
    e->st.prompt_tokens += (uint64_t)r->n_prompt;
    return sched_add(e->sched, &e->seqs[q->seq[0]].sq);
}

static void release_seq(engine_t *e, eseq *s)
{
    constrain_detach(e->cons, s->sq.slot);
    s->live = false;
    s->sq.state = SEQ_IDLE;
    s->next_free = e->free_head;
    e->free_head = s->sq.slot;
    e->n_free++;
}

/* End sample s (not done yet): leave the scheduler, free blocks, report, and retire the
 * request once all its samples ended. error: PE_NONE, or why the engine ends it itself. */
static void finish_seq_err(engine_t *e, eseq *s, finish_reason why, enum proto_error_code error)
{
    ereq *q = s->req;
    sched_remove(e->sched, &s->sq);
    spec_release(e->spec, s->sq.slot);
    s->done = true;
    s->parked = false;
    q->n_done++;
    if (e->o.cb.on_finish) {
        engine_sample_end end = {why, q->n_prompt, s->n_generated, s->spec, error};
        e->o.cb.on_finish(e->o.cb.ctx, q->id, s->index, &end);
    }
    if (q->n_done == q->params.n) {
        for (int i = 0; i < q->params.n; i++)
            release_seq(e, &e->seqs[q->seq[i]]);
        q->live = false;
        e->st.n_requests--;
    }
}

static void finish_seq(engine_t *e, eseq *s, finish_reason why)
{
    finish_seq_err(e, s, why, PE_NONE);
}

/* The engine ends request q itself (a grammar's budget): every sample still running ends
 * with FINISH_ABORT and the error, the message already set by deras_fail. */
static void fail_request(engine_t *e, ereq *q, enum proto_error_code error)
{
    int n = q->params.n, slots[REQ_MAX_N];
    memcpy(slots, q->seq, sizeof slots);
    for (int i = 0; i < n; i++)
        if (!e->seqs[slots[i]].done)
            finish_seq_err(e, &e->seqs[slots[i]], FINISH_ABORT, error);
}

int engine_abort(engine_t *e, uint64_t id)
{
    ereq *q = e ? find_req(e, id) : NULL;
    if (!q)
        return deras_fail(DERAS_ENOTFOUND, "request %llu is not live", (unsigned long long)id);
    int n = q->params.n, slots[REQ_MAX_N];
    memcpy(slots, q->seq, sizeof slots);
    for (int i = 0; i < n; i++)
        if (!e->seqs[slots[i]].done)
            finish_seq(e, &e->seqs[slots[i]], FINISH_ABORT);
    return DERAS_OK;
}

static bool is_stop(const ereq *q, int32_t t)
{
    for (int i = 0; i < q->n_stops; i++)
        if (q->stops[i] == t)
            return true;
    return false;
}

/* What the sampler sees of s before its output token j (0: the next one); allow: the
 * grammar's mask for that position, NULL for none. */
static sample_history history(const eseq *s, int j, const uint32_t *allow)
{
    const ereq *q = s->req;
    return (sample_history){s->tokens, q->n_prompt, s->tokens + q->n_prompt,
                            s->n_generated + j, q->stops, q->n_stops, allow};
}

/* Report s's next token (appending it to s's tokens unless it is there already, as an
 * accepted draft is) and end s if it stops. True if s ended. A constrained sample's
 * matcher takes the token first (a stop that ends the sample needs no grammar step); a
 * matcher that cannot (a budget) ends the request with an error, the token unreported. */
static bool emit(engine_t *e, eseq *s, const sample_result *r, bool append)
{
    ereq *q = s->req;
    /* min_tokens: the sampler kept stop tokens away until then; a stop is no end before */
    bool stops = s->n_generated + 1 > q->params.sp.min_tokens && is_stop(q, r->token);
    if (constrain_has(e->cons, s->sq.slot) && !stops) {
        int rc = constrain_accept(e->cons, s->sq.slot, r->token);
        if (rc) {
            deras_fail_ctx(rc, "request %llu, sample %d: ", (unsigned long long)q->id,
                           s->index);
            log_warn("%s", deras_errmsg());
            fail_request(e, q, rc == DERAS_ERANGE ? PE_GRAMMAR_BUDGET : PE_INTERNAL);
            return true;
        }
    }
    if (append)
        s->tokens[s->sq.n_tokens++] = r->token;
    s->n_generated++;
    e->st.generated_tokens++;
    if (e->o.cb.on_token)
        e->o.cb.on_token(e->o.cb.ctx, q->id, s->index, r);
    if (stops || (constrain_has(e->cons, s->sq.slot) && constrain_complete(e->cons, s->sq.slot)))
        finish_seq(e, s, FINISH_STOP);
    else if (s->n_generated == q->params.max_tokens ||
             q->n_prompt + s->n_generated >= e->o.max_model_len)
        finish_seq(e, s, FINISH_LENGTH);
    return s->done;
}

/* Sample s's next token from `logits` (under the grammar's mask `allow`, or NULL), report
 * it, and end s if it stops. */
static int sample_into(engine_t *e, eseq *s, const float *logits, const uint32_t *allow)
{
    ereq *q = s->req;
    sample_history h = history(s, 0, allow);
    sample_result r;
    int rc = sampler_sample(e->sampler, logits, &q->params.sp, &s->rng, &h, &r);
    if (rc)
        return rc;
    emit(e, s, &r, true);
    return DERAS_OK;
}

/* Sample 0 of a request caught up for the first time: fork the parked samples. Their
 * grammars are at the start, as sample 0's is: its mask `allow` is theirs. */
static int fork_parked(engine_t *e, eseq *s0, const float *logits, const uint32_t *allow)
{
    ereq *q = s0->req;
    for (int i = 1; i < q->params.n; i++) {
        eseq *c = &e->seqs[q->seq[i]];
        if (!c->parked)
            continue;
        int rc = kv_fork(e->kv, s0->sq.slot, c->sq.slot);
        if (rc)
            return rc;
        c->parked = false;
        c->sq.n_computed = s0->sq.n_computed;
        if ((rc = sched_add_forked(e->sched, &c->sq)) || (rc = sample_into(e, c, logits, allow)))
            return rc;
    }
    return DERAS_OK;
}

/* Drafts for every decoding sequence that speculates this step: appended to its tokens
 * (sq.n_spec). *n_cand gets the number of sequences asked. */
static int propose(engine_t *e, int *n_cand)
{
    *n_cand = 0;
    sched_stats ss;
    sched_get_stats(e->sched, &ss);
    bool greedy_ok = !e->o.spec.max_batch || ss.n_running <= e->o.spec.max_batch;
    const size_t qstride = (size_t)e->o.spec.k * e->vocab;
    int n = 0;
    for (int i = 0; i < e->o.max_live_seqs && n < e->o.max_seqs; i++) {
        eseq *s = &e->seqs[i];
        if (!s->live || s->done || s->parked || s->sq.state != SEQ_RUNNING ||
            s->n_generated == 0 || s->sq.n_tokens - s->sq.n_computed != 1)
            continue;
        ereq *q = s->req;
        if (q->params.spec_tokens < 0 || (sampling_is_greedy(&q->params.sp) && !greedy_ok))
            continue;
        int k_max = q->params.spec_tokens > 0 && q->params.spec_tokens < e->o.spec.k
                        ? q->params.spec_tokens
                        : e->o.spec.k;
        int left = q->params.max_tokens - s->n_generated - 1; /* the step adds drafts + 1 */
        k_max = left < k_max ? left : k_max;
        int k = k_max > 0 ? spec_adapt_k(&s->adapt, k_max) : 0;
        if (k <= 0)
            continue;
        e->cand[n] = (spec_seq){.slot = i, .tokens = s->tokens, .n_tokens = s->sq.n_tokens,
                                .n_prompt = q->n_prompt, .k = k, .sp = &q->params.sp,
                                .rng = &s->draft_rng,
                                .q = e->spec_q ? e->spec_q + (size_t)n * qstride : NULL};
        e->cand_seq[n++] = s;
    }
    if (n == 0)
        return DERAS_OK;
    int rc = spec_propose(e->spec, e->cand, n);
    if (rc)
        return rc;
    for (int c = 0; c < n; c++) {
        eseq *s = e->cand_seq[c];
        /* drafts the grammar refuses go where that changes no output (greedy, point-mass
         * drafts); sampled ones stay: the residual max(0, p - q) keeps its law */
        if (constrain_has(e->cons, s->sq.slot) && e->cand[c].n_drafts &&
            (!e->cand[c].q_valid || sampling_is_greedy(&s->req->params.sp))) {
            int n_ok; /* a matcher budget fails the request at its mask, without drafts */
            if (constrain_valid_prefix(e->cons, s->sq.slot, s->tokens + s->sq.n_tokens,
                                       e->cand[c].n_drafts, &n_ok))
                n_ok = 0;
            e->cand[c].n_drafts = n_ok;
        }
        s->q = e->cand[c].q_valid ? e->cand[c].q : NULL;
        s->sq.n_spec = e->cand[c].n_drafts;
        s->sq.n_tokens += e->cand[c].n_drafts;
    }
    *n_cand = n;
    return DERAS_OK;
}

/* Row j's grammar mask of plan sequence i, NULL when s is free. A constrained row without
 * one (past a refused draft) is never sampled: verification stops at the refusal. */
static int row_mask(const engine_t *e, const eseq *s, int i, int j, const uint32_t **allow)
{
    *allow = NULL;
    if (!constrain_has(e->cons, s->sq.slot))
        return DERAS_OK;
    if (!(*allow = constrain_mask(e->cons, i, j)))
        return deras_fail(DERAS_EINTERNAL, "engine: no grammar mask for row %d of slot %d", j,
                          s->sq.slot);
    return DERAS_OK;
}

/* Verify s's drafts (plan sequence i) against its 1 + n_spec logits rows (speculative.h):
 * res gets the tokens to report (accepted drafts, then the target's own), *n_res their
 * count; the rejected drafts are rolled back. */
static int verify(engine_t *e, eseq *s, int i, const float *lg, sample_result *res, int *n_res)
{
    ereq *q = s->req;
    const int V = e->vocab, k = s->sq.n_spec, base = q->n_prompt + s->n_generated;
    int a = 0, rc = DERAS_OK;
    for (int j = 0; j <= k; j++) {
        const float *row = lg + (size_t)j * V;
        const uint32_t *allow;
        if ((rc = row_mask(e, s, i, j, &allow)))
            return rc;
        sample_history h = history(s, j, allow);
        sample_result *r = &res[j];
        if (j == k || sampling_is_greedy(&q->params.sp)) {
            /* the target's own choice: greedy, or the position after the last draft */
            if ((rc = sampler_sample(e->sampler, row, &q->params.sp, &s->rng, &h, r)))
                return rc;
            if (j < k && r->token == s->tokens[base + j]) {
                a++;
                continue;
            }
            break;
        }
        if ((rc = sampler_probs(e->sampler, row, &q->params.sp, &h, e->p_buf)))
            return rc;
        bool accepted;
        int32_t t = spec_accept_or_resample(e->p_buf, s->q ? s->q + (size_t)j * V : NULL, V,
                                            s->tokens[base + j], &s->rng, &accepted);
        sampler_logprobs(e->sampler, row, q->params.sp.n_logprobs, t, r);
        if (!accepted)
            break;
        a++;
    }
    *n_res = a + 1;
    s->spec.proposed += (uint64_t)k;
    s->spec.accepted += (uint64_t)a;
    s->spec.verifications++;
    e->st.spec.proposed += (uint64_t)k;
    e->st.spec.accepted += (uint64_t)a;
    e->st.spec.verifications++;
    spec_adapt_update(&s->adapt, k, a);
    return sched_spec_resolve(e->sched, &s->sq, a);
}

/* Samples whose grammar was complete before any token (it allows only the empty output)
 * end without a pass. O(max_live_seqs), only after such an add. */
static void end_complete(engine_t *e)
{
    e->complete_pending = false;
    for (int i = 0; i < e->o.max_live_seqs; i++) {
        eseq *s = &e->seqs[i];
        if (s->live && !s->done && s->n_generated == 0 && constrain_has(e->cons, i) &&
            constrain_complete(e->cons, i))
            finish_seq(e, s, FINISH_STOP);
    }
}

/* The grammar masks of this step's sampling sequences, started on the helper thread. */
static void queue_masks(engine_t *e, step_plan_t *p)
{
    const int32_t *ref = plan_seq_ref(p);
    constrain_step_begin(e->cons);
    for (int i = 0; i < p->n_seqs; i++) {
        eseq *s = &e->seqs[ref[i]];
        if (!s->sq.wants_logits || !constrain_has(e->cons, s->sq.slot))
            continue;
        const ereq *q = s->req;
        constrain_step_add(e->cons, i, s->sq.slot, s->tokens + q->n_prompt + s->n_generated,
                           s->sq.n_spec, q->stops, q->n_stops, q->params.ignore_eos);
    }
    constrain_step_start(e->cons);
}

int engine_step(engine_t *e, int *n_tokens)
{
    if (!e)
        return deras_fail(DERAS_EINVAL, "engine_step: NULL engine");
    if (n_tokens)
        *n_tokens = 0;
    int n_cand = 0, preempted = 0, rc;
    if (e->complete_pending)
        end_complete(e);
    if (e->spec && (rc = propose(e, &n_cand)))
        return rc;
    if ((rc = sched_schedule(e->sched, e->plan, &preempted)))
        return rc;
    for (int c = 0; c < n_cand; c++) /* drafts the step has no room for */
        if (e->cand_seq[c]->sq.n_scheduled == 0)
            sched_spec_drop(&e->cand_seq[c]->sq);
    e->st.preemptions += (uint64_t)preempted;
    step_plan_t *p = e->plan;
    const int32_t *ref = plan_seq_ref(p);
    if (e->cons)
        queue_masks(e, p);
    if (p->n_seqs > 0) {
        model_batch bt;
        step_plan_batch(p, &bt);
        if ((e->o.on_plan && (rc = e->o.on_plan(e->o.plan_ctx, p))) ||
            (rc = model_forward(e->m, &bt, e->logits))) {
            if (e->cons)
                constrain_step_wait(e->cons);
            return rc;
        }
    }
    if (e->cons)
        constrain_step_wait(e->cons);

    /* verify drafts (rolling back rejected ones) before any block is committed; a sequence
     * whose masks failed keeps none of its drafts and ends below */
    int row = 0;
    for (int i = 0; i < p->n_seqs; i++) {
        eseq *s = &e->seqs[ref[i]];
        e->row0[i] = row;
        if (e->spec)
            e->n_res[i] = 0;
        if (!s->sq.wants_logits)
            continue;
        int rows = 1 + s->sq.n_spec;
        bool failed = e->cons && constrain_status(e->cons, i) != DERAS_OK;
        if (failed && s->sq.n_spec > 0 && (rc = sched_spec_resolve(e->sched, &s->sq, 0)))
            return rc;
        if (!failed && s->sq.n_spec > 0 &&
            (rc = verify(e, s, i, e->logits + (size_t)row * e->vocab,
                         e->res + (size_t)i * e->rows, &e->n_res[i])))
            return rc;
        row += rows;
    }
    if (p->n_seqs > 0) {
        sched_step_done(e->sched);
        e->st.steps++;
        e->st.computed_tokens += (uint64_t)p->n_tokens;
        if (n_tokens)
            *n_tokens = p->n_tokens;
    }

    /* sequences that caught up report tokens, in plan order */
    for (int i = 0; i < p->n_seqs; i++) {
        eseq *s = &e->seqs[ref[i]];
        if (!s->sq.wants_logits)
            continue;
        const float *lg = e->logits + (size_t)e->row0[i] * e->vocab;
        s->sq.wants_logits = false;
        if (!s->live || s->done)
            continue;
        if (e->cons && (rc = constrain_status(e->cons, i))) {
            deras_fail_ctx(rc, "request %llu, sample %d: ",
                           (unsigned long long)s->req->id, s->index);
            log_warn("%s", deras_errmsg());
            fail_request(e, s->req, rc == DERAS_ERANGE ? PE_GRAMMAR_BUDGET : PE_INTERNAL);
            continue;
        }
        if (e->spec && e->n_res[i] > 0) {
            const sample_result *r = e->res + (size_t)i * e->rows;
            for (int j = 0; j < e->n_res[i] && !emit(e, s, &r[j], j == e->n_res[i] - 1); j++)
                ;
            continue;
        }
        const uint32_t *allow;
        if ((rc = row_mask(e, s, i, 0, &allow)))
            return rc;
        bool first = s->index == 0 && s->n_generated == 0 && s->req->params.n > 1;
        if (first && (rc = fork_parked(e, s, lg, allow)))
            return rc;
        if ((rc = sample_into(e, s, lg, allow)))
            return rc;
    }

    /* the proposer forgets what did not stand (finished sequences are released) */
    for (int c = 0; c < n_cand; c++) {
        eseq *s = e->cand_seq[c];
        if (s->live && !s->done)
            spec_keep(e->spec, s->sq.slot, s->sq.n_tokens - 1);
    }
    return DERAS_OK;
}

bool engine_has_work(const engine_t *e)
{
    return e && e->st.n_requests > 0;
}

void engine_get_stats(const engine_t *e, engine_stats *out)
{
    *out = e->st;
    sched_stats ss;
    sched_get_stats(e->sched, &ss);
    kv_stats ks;
    kv_get_stats(e->kv, &ks);
    out->n_running = ss.n_running;
    out->n_waiting = ss.n_waiting;
    out->kv_blocks_used = ks.n_usable - ks.n_free;
    out->cow_copies = ks.cow_copies;
    out->prefix_query_tokens = ks.prefix_query_tokens;
    out->prefix_hit_tokens = ks.prefix_hit_tokens;
    const int bs = model_get_opts(e->m)->block_size;
    out->kv_waste_tokens = 0;
    out->kv_running_tokens = 0;
    out->queued_tokens = 0;
    for (int i = 0; i < e->o.max_live_seqs; i++) {
        const eseq *s = &e->seqs[i];
        if (!s->live || s->done || s->parked)
            continue;
        int pending = s->sq.n_tokens - s->sq.n_computed - (s->n_generated > 0);
        out->queued_tokens += pending > 0 ? pending : 0;
        if (s->sq.state != SEQ_RUNNING)
            continue;
        int t = kv_slot_tokens(e->kv, s->sq.slot);
        out->kv_running_tokens += t;
        out->kv_waste_tokens += (t + bs - 1) / bs * bs - t;
    }
}

int engine_check(const engine_t *e)
{
    int rc = kv_manager_check(e->kv);
    if (!rc)
        rc = spec_check(e->spec);
    if (rc)
        return rc;
    for (int i = 0; i < e->o.max_live_seqs; i++) {
        const eseq *s = &e->seqs[i];
        int t = kv_slot_tokens(e->kv, i);
        bool holds = s->live && !s->done && s->sq.state == SEQ_RUNNING;
        if (!holds && t != 0 && !(s->live && s->sq.state == SEQ_WAITING))
            return deras_fail(DERAS_EINTERNAL, "engine: slot %d holds %d tokens of KV but its "
                              "sequence is not running", i, t);
        if (holds && t != s->sq.n_computed)
            return deras_fail(DERAS_EINTERNAL, "engine: slot %d holds %d tokens of KV, its "
                              "sequence has computed %d", i, t, s->sq.n_computed);
    }
    return DERAS_OK;
}
