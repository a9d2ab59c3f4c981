/* SPDX-License-Identifier: Apache-2.0 */
/* spec_draft.c - a model proposer: catch up, then one pass per draft (see spec_draft.h).
 *
 * Each proposal is a loop of passes over the sequences still drafting. A sequence's
 * `len` is its known tokens plus drafts so far; its slot's KV holds `done` of them. A
 * pass gives each sequence the next chunk of [done, len) that fits the token budget and
 * asks for logits when the chunk reaches len; those logits give the next draft (greedy,
 * or drawn from the processed distribution q, kept for the verification). A sequence
 * stops at k drafts. The drafter never computes its last draft: the verification decides
 * what that position holds, and spec_draft_keep() trims the cache to what stood.
 */
#include "spec_draft.h"

#include <stdlib.h>
#include <string.h>

#include "common/checkpoint/checkpoint.h"
#include "common/base/status.h"
#include "engine/kv_manager.h"
#include "engine/step_plan.h"

struct spec_draft {
    model_t *m;
    int vocab, max_live_seqs, max_seqs, budget;
    kv_manager_t *kv;
    step_plan_t *plan;
    sampler_t *sampler;
    float *logits;     /* (max_seqs, vocab) */
    int *len;          /* (max_seqs) per proposal entry: tokens known incl. drafts */
    int *row_of;       /* (max_seqs) per proposal entry: logits row this pass, or -1 */
    bool *active;      /* (max_seqs) per proposal entry: still drafting */
};

int spec_draft_new(model_t *m, int max_live_seqs, int max_seqs, spec_draft_t **out)
{
    if (!m || !out || max_live_seqs < 1 || max_seqs < 1)
        return deras_fail(DERAS_EINVAL, "spec_draft_new: bad arguments");
    *out = NULL;
    const model_opts *mo = model_get_opts(m);
    if (mo->max_seqs < max_seqs || mo->max_logits < max_seqs)
        return deras_fail(DERAS_EINVAL, "draft model: %d sequences per pass needed, its options "
                          "allow %d sequences and %d logit rows", max_seqs, mo->max_seqs,
                          mo->max_logits);
    spec_draft_t *d = calloc(1, sizeof *d);
    if (!d)
        return deras_fail(DERAS_ENOMEM, "spec_draft_new: out of memory");
    d->m = m;
    d->vocab = model_get_config(m)->vocab_size;
    d->max_live_seqs = max_live_seqs;
    d->max_seqs = max_seqs;
    d->budget = mo->max_batch_tokens;
    kv_manager_opts ko = {.n_blocks = mo->n_kv_blocks, .block_size = mo->block_size,
                          .max_seqs = max_live_seqs, .max_blocks_per_seq = mo->max_blocks_per_seq};
    int rc = kv_manager_new(&ko, &d->kv);
    if (rc)
        goto fail;
    if ((rc = step_plan_new(mo->max_batch_tokens, max_seqs, mo->max_blocks_per_seq, max_seqs, 0,
                            &d->plan)) ||
        (rc = sampler_new(d->vocab, &d->sampler)))
        goto fail;
    d->logits = malloc((size_t)max_seqs * d->vocab * sizeof(float));
    d->len = calloc((size_t)max_seqs, sizeof *d->len);
    d->row_of = calloc((size_t)max_seqs, sizeof *d->row_of);
    d->active = calloc((size_t)max_seqs, sizeof *d->active);
    if (!d->logits || !d->len || !d->row_of || !d->active) {
        rc = deras_fail(DERAS_ENOMEM, "spec_draft_new: out of memory");
        goto fail;
    }
    *out = d;
    return DERAS_OK;
fail:
    spec_draft_destroy(&d);
    return rc;
}

void spec_draft_destroy(spec_draft_t **dp)
{
    if (!dp || !*dp)
        return;
    spec_draft_t *d = *dp;
    kv_manager_destroy(&d->kv);
    step_plan_destroy(&d->plan);
    sampler_destroy(&d->sampler);
    free(d->logits);
    free(d->len);
    free(d->row_of);
    free(d->active);
    free(d);
    *dp = NULL;
}

/* The next draft of q from its logits row: greedy, or drawn from the processed
 * distribution (kept in q->q for the verification). */
static int next_draft(spec_draft_t *d, spec_seq *q, int len, const float *lg)
{
    /* no stop tokens: a draft that ends the sample before min_tokens has target probability
     * 0 there and never stands, so the drafter need not know them */
    sample_history h = {q->tokens, q->n_prompt, q->tokens + q->n_prompt, len - q->n_prompt,
                        NULL, 0, NULL};
    int32_t t;
    if (sampling_is_greedy(q->sp)) {
        t = sampler_greedy(d->sampler, lg, q->sp, &h);
    } else {
        float *qr = q->q + (size_t)q->n_drafts * d->vocab;
        int rc = sampler_probs(d->sampler, lg, q->sp, &h, qr);
        if (rc)
            return rc;
        t = spec_draw(qr, d->vocab, 1.0, sampler_rng_uniform(q->rng));
        q->q_valid = true;
    }
    q->tokens[len] = t;
    q->n_drafts++;
    return DERAS_OK;
}

int spec_draft_propose(spec_draft_t *d, spec_seq *seqs, int n)
{
    if (n > d->max_seqs)
        return deras_fail(DERAS_EINVAL, "draft model: %d sequences, at most %d", n, d->max_seqs);
    for (int i = 0; i < n; i++) {
        seqs[i].n_drafts = 0;
        seqs[i].q_valid = false;
        d->len[i] = seqs[i].n_tokens;
        d->active[i] = seqs[i].k > 0 && seqs[i].slot >= 0 && seqs[i].slot < d->max_live_seqs &&
                       (sampling_is_greedy(seqs[i].sp) || seqs[i].q);
    }
    const int max_blocks = d->plan->max_blocks;
    for (;;) {
        step_plan_t *p = d->plan;
        step_plan_reset(p, p->step_id + 1);
        int budget = d->budget;
        for (int i = 0; i < n && budget > 0; i++) {
            d->row_of[i] = -1;
            if (!d->active[i])
                continue;
            spec_seq *q = &seqs[i];
            int done = kv_slot_tokens(d->kv, q->slot);
            int want = d->len[i] - done, chunk = want < budget ? want : budget;
            if (chunk <= 0 || kv_grow(d->kv, q->slot, done + chunk)) {
                d->active[i] = false; /* drafter cache full: keep the drafts made so far */
                continue;
            }
            int32_t *tok = plan_tokens(p) + p->n_tokens;
            memcpy(tok, q->tokens + done, (size_t)chunk * sizeof(int32_t));
            int si = p->n_seqs++;
            p->n_tokens += chunk;
            plan_q_start(p)[si + 1] = p->n_tokens;
            plan_ctx_len(p)[si] = done + chunk;
            plan_seq_ref(p)[si] = i;
            memcpy(plan_block_tables(p) + (size_t)si * max_blocks, kv_block_table(d->kv, q->slot),
                   (size_t)max_blocks * sizeof(int32_t));
            if (done + chunk == d->len[i]) {
                d->row_of[i] = p->n_logits;
                plan_logits_rows(p)[p->n_logits++] = p->n_tokens - 1;
            }
            budget -= chunk;
        }
        if (p->n_seqs == 0)
            return DERAS_OK;
        model_batch bt;
        step_plan_batch(p, &bt);
        int rc = model_forward(d->m, &bt, d->logits);
        if (rc)
            return rc;
        for (int s = 0; s < p->n_seqs; s++) {
            int i = plan_seq_ref(p)[s];
            if (d->row_of[i] < 0)
                continue;
            spec_seq *q = &seqs[i];
            if ((rc = next_draft(d, q, d->len[i], d->logits + (size_t)d->row_of[i] * d->vocab)))
                return rc;
            d->len[i]++;
            if (q->n_drafts == q->k)
                d->active[i] = false;
        }
    }
}

void spec_draft_keep(spec_draft_t *d, int slot, int n_valid)
{
    int have = kv_slot_tokens(d->kv, slot);
    if (have > n_valid && n_valid >= 0)
        kv_truncate(d->kv, slot, n_valid);
}

void spec_draft_release(spec_draft_t *d, int slot)
{
    kv_free(d->kv, slot);
}

int spec_draft_check(const spec_draft_t *d)
{
    int rc = kv_manager_check(d->kv);
    return rc ? deras_fail_ctx(rc, "draft model: ") : DERAS_OK;
}

int spec_drafter_load(const spec_opts *o, model_t *target, backend_t *be, model_t **out)
{
    if (!o || !target || !out)
        return deras_fail(DERAS_EINVAL, "spec_drafter_load: NULL argument");
    *out = NULL;
    const model_opts *to = model_get_opts(target);
    model_opts mo = {.max_batch_tokens = to->max_batch_tokens, .max_seqs = to->max_seqs,
                     .max_logits = to->max_seqs, .block_size = to->block_size,
                     .n_kv_blocks = to->n_kv_blocks, .max_blocks_per_seq = to->max_blocks_per_seq,
                     .max_copies = 0, .kv_dtype = to->kv_dtype};
    if (o->kind == SPEC_SELF)
        return model_new_partial(target, o->self_layers, &mo, out);
    if (o->kind != SPEC_DRAFT || !o->draft_path || !be)
        return deras_fail(DERAS_EINVAL, "spec_drafter_load: proposer %s has no draft model",
                          spec_kind_name(o->kind));
    checkpoint_t *ck = NULL;
    int rc = checkpoint_open(o->draft_path, &ck);
    if (rc)
        return rc;
    const model_config *dc = checkpoint_config(ck), *tc = model_get_config(target);
    if (dc->vocab_size != tc->vocab_size) {
        rc = deras_fail(DERAS_EINVAL, "draft model %s has a vocabulary of %d tokens, the target "
                        "%d: a draft model must share the target's vocabulary", o->draft_path,
                        dc->vocab_size, tc->vocab_size);
    } else {
        rc = model_new(ck, be, &mo, out);
    }
    checkpoint_destroy(&ck);
    return rc;
}
