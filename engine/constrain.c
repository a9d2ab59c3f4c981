/* SPDX-License-Identifier: Apache-2.0 */
/* constrain.c - grammar matchers per sample and the step's masks (see constrain.h).
 *
 * The helper thread sleeps on a condition variable between steps; constrain_step_start
 * posts the step's jobs, constrain_step_wait waits for "done". Only one side touches the
 * matchers at a time: the helper between start and wait, the engine's thread otherwise.
 */
#include "engine/constrain.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

#define CJ_MSG 200

typedef struct cjob {
    int slot;                /* -1: no job for this plan index */
    const int32_t *drafts;
    int n_drafts;
    const int32_t *stops;
    int n_stops;
    bool ignore_eos;
    int n_rows;              /* rows with a mask */
    int status;
    char msg[CJ_MSG];        /* the failure's message, from the thread that ran the job */
} cjob;

enum { TH_IDLE, TH_POSTED, TH_DONE };

struct constrain {
    int vocab, max_live, max_seqs, rows;
    size_t words;
    const int32_t *eog;
    int n_eog;
    gmatcher_t **m;          /* (max_live) per slot, NULL: unconstrained */
    uint32_t *masks;         /* (max_seqs * rows * words) */
    cjob *jobs;              /* (max_seqs) by plan index */
    int *queued;             /* (max_seqs) plan indices with a job */
    int n_queued;
    bool inline_masks, started, quit;
    int state;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static inline void bit_set(uint32_t *mask, int32_t t) { mask[t >> 5] |= 1u << (t & 31); }
static inline void bit_clear(uint32_t *mask, int32_t t) { mask[t >> 5] &= ~(1u << (t & 31)); }

/* One row's extra bits at the matcher's current state. */
static void finish_row(const constrain_t *c, const gmatcher_t *m, const cjob *j, uint32_t *mask)
{
    if (!gmatcher_is_accepting(m))
        return;
    if (j->ignore_eos && !gmatcher_is_complete(m))
        for (int k = 0; k < c->n_eog; k++)
            bit_clear(mask, c->eog[k]);
    for (int k = 0; k < j->n_stops; k++)
        if (j->stops[k] >= 0 && j->stops[k] < c->vocab)
            bit_set(mask, j->stops[k]);
}

static void run_job(constrain_t *c, int i)
{
    cjob *j = &c->jobs[i];
    gmatcher_t *m = c->m[j->slot];
    int n_ok = 0;
    j->n_rows = 0;
    j->status = DERAS_OK;
    for (int r = 0; r <= j->n_drafts; r++) {
        uint32_t *mask = c->masks + ((size_t)i * c->rows + r) * c->words;
        int rc = gmatcher_fill_mask(m, mask);
        if (rc) {
            j->status = rc;
            snprintf(j->msg, sizeof j->msg, "%s", deras_errmsg());
            break;
        }
        finish_row(c, m, j, mask);
        j->n_rows = r + 1;
        if (r == j->n_drafts)
            break;
        rc = gmatcher_accept(m, j->drafts[r]);
        if (rc == DERAS_EINVAL) /* a draft the grammar refuses: verification stops there */
            break;
        if (rc) {
            j->status = rc;
            snprintf(j->msg, sizeof j->msg, "%s", deras_errmsg());
            break;
        }
        n_ok++;
    }
    if (n_ok && gmatcher_rollback(m, n_ok) && j->status == DERAS_OK) {
        j->status = DERAS_EINTERNAL;
        snprintf(j->msg, sizeof j->msg, "grammar: rolling back %d drafts failed", n_ok);
    }
    if (j->status)
        j->n_rows = 0;
}

static void run_jobs(constrain_t *c)
{
    for (int k = 0; k < c->n_queued; k++)
        run_job(c, c->queued[k]);
}

static void *helper(void *arg)
{
    constrain_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->state != TH_POSTED && !c->quit)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->quit)
            break;
        pthread_mutex_unlock(&c->mu);
        run_jobs(c);
        pthread_mutex_lock(&c->mu);
        c->state = TH_DONE;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int constrain_new(int vocab, int max_live_seqs, int max_seqs, int rows, const int32_t *eog,
                  int n_eog, bool inline_masks, constrain_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "constrain_new: NULL out");
    *out = NULL;
    if (vocab < 1 || max_live_seqs < 1 || max_seqs < 1 || rows < 1 || n_eog < 0 ||
        (n_eog && !eog))
        return deras_fail(DERAS_EINVAL, "constrain_new: bad sizes");
    constrain_t *c = calloc(1, sizeof *c);
    if (!c)
        return deras_fail(DERAS_ENOMEM, "constrain_new: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->vocab = vocab;
    c->max_live = max_live_seqs;
    c->max_seqs = max_seqs;
    c->rows = rows;
    c->words = ((size_t)vocab + 31) / 32;
    c->eog = eog;
    c->n_eog = n_eog;
    c->inline_masks = inline_masks;
    c->m = calloc((size_t)max_live_seqs, sizeof *c->m);
    c->masks = malloc((size_t)max_seqs * rows * c->words * sizeof(uint32_t));
    c->jobs = calloc((size_t)max_seqs, sizeof *c->jobs);
    c->queued = calloc((size_t)max_seqs, sizeof *c->queued);
    if (!c->m || !c->masks || !c->jobs || !c->queued) {
        constrain_destroy(&c);
        return deras_fail(DERAS_ENOMEM, "constrain_new: out of memory for %d x %d masks",
                          max_seqs, rows);
    }
    for (int i = 0; i < max_seqs; i++)
        c->jobs[i].slot = -1;
    if (!inline_masks) {
        if (pthread_create(&c->th, NULL, helper, c)) {
            constrain_destroy(&c);
            return deras_fail(DERAS_EIO, "constrain_new: cannot start the mask thread");
        }
        c->started = true;
    }
    *out = c;
    return DERAS_OK;
}

void constrain_destroy(constrain_t **cp)
{
    if (!cp || !*cp)
        return;
    constrain_t *c = *cp;
    if (c->started) {
        pthread_mutex_lock(&c->mu);
        c->quit = true;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->th, NULL);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    for (int i = 0; c->m && i < c->max_live; i++)
        gmatcher_destroy(&c->m[i]);
    free(c->m);
    free(c->masks);
    free(c->jobs);
    free(c->queued);
    free(c);
    *cp = NULL;
}

int constrain_attach(constrain_t *c, int slot, token_grammar_t *tg)
{
    if (!c || !tg || slot < 0 || slot >= c->max_live || c->m[slot])
        return deras_fail(DERAS_EINVAL, "constrain_attach: bad slot %d", slot);
    int n = gvocab_size(token_grammar_vocab(tg));
    if (n != c->vocab)
        return deras_fail(DERAS_EINVAL, "grammar: its vocabulary has %d tokens, the model's "
                          "logits %d", n, c->vocab);
    return gmatcher_new(tg, NULL, &c->m[slot]);
}

void constrain_detach(constrain_t *c, int slot)
{
    if (c && slot >= 0 && slot < c->max_live)
        gmatcher_destroy(&c->m[slot]);
}

bool constrain_has(const constrain_t *c, int slot)
{
    return c && c->m[slot];
}

int constrain_accept(constrain_t *c, int slot, int32_t token)
{
    return gmatcher_accept(c->m[slot], token);
}

bool constrain_complete(const constrain_t *c, int slot)
{
    return gmatcher_is_complete(c->m[slot]);
}

int constrain_valid_prefix(constrain_t *c, int slot, const int32_t *drafts, int n, int *n_ok)
{
    gmatcher_t *m = c->m[slot];
    int k = 0, rc = DERAS_OK;
    while (k < n && (rc = gmatcher_accept(m, drafts[k])) == DERAS_OK)
        k++;
    if (k)
        gmatcher_rollback(m, k);
    *n_ok = k;
    return rc == DERAS_EINVAL ? DERAS_OK : rc;
}

void constrain_step_begin(constrain_t *c)
{
    for (int k = 0; k < c->n_queued; k++)
        c->jobs[c->queued[k]].slot = -1;
    c->n_queued = 0;
}

void constrain_step_add(constrain_t *c, int i, int slot, const int32_t *drafts, int n_drafts,
                        const int32_t *stops, int n_stops, bool ignore_eos)
{
    cjob *j = &c->jobs[i];
    *j = (cjob){.slot = slot, .drafts = drafts,
                .n_drafts = n_drafts < c->rows ? n_drafts : c->rows - 1, .stops = stops,
                .n_stops = n_stops, .ignore_eos = ignore_eos};
    c->queued[c->n_queued++] = i;
}

void constrain_step_start(constrain_t *c)
{
    if (!c->n_queued)
        return;
    if (c->inline_masks) {
        run_jobs(c);
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->state = TH_POSTED;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void constrain_step_wait(constrain_t *c)
{
    if (c->inline_masks)
        return;
    pthread_mutex_lock(&c->mu);
    while (c->state == TH_POSTED)
        pthread_cond_wait(&c->cv, &c->mu);
    c->state = TH_IDLE;
    pthread_mutex_unlock(&c->mu);
}

const uint32_t *constrain_mask(const constrain_t *c, int i, int row)
{
    if (!c || i < 0 || i >= c->max_seqs)
        return NULL;
    const cjob *j = &c->jobs[i];
    if (j->slot < 0 || row < 0 || row >= j->n_rows)
        return NULL;
    return c->masks + ((size_t)i * c->rows + row) * c->words;
}

int constrain_status(const constrain_t *c, int i)
{
    const cjob *j = &c->jobs[i];
    if (j->slot < 0 || j->status == DERAS_OK)
        return DERAS_OK;
    return deras_fail(j->status, "%s", j->msg);
}
