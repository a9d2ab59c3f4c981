/* SPDX-License-Identifier: Apache-2.0 */
/* workers.c - the registry of worker groups, their health and load (see workers.h).
 *
 * A fixed array of WORKERS_MAX records, searched linearly: there are a handful of
 * workers and every operation is per message, never per token. A record is W_FREE
 * (never used), W_STARTING, W_READY or W_DRAINING (live: heard from within the timeout),
 * W_STUCK (heard from, but its requests were taken away), or W_DEAD (kept for pong and
 * status until its slot is needed, oldest death first). Registering the same name again
 * reuses its slot with a new epoch.
 *
 * Among the live states, which one holds follows from two inputs, so it is recomputed
 * (settle) whenever either changes: the phase of the worker's last load report and
 * whether the router asked it to drain.
 */
#include "router/workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

struct workers {
    worker_t w[WORKERS_MAX];
    int vocab_size;
    char model_base[256];
    int64_t timeout_us, stuck_us;
    uint64_t next_epoch;
    bool drain_new;  /* workers registering from now on start drained */
};

static const char *base_name(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", path ? path : "");
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    const char *slash = strrchr(buf, '/');
    return slash ? slash + 1 : buf;
}

int workers_new(int vocab_size, const char *model_name, int timeout_ms, int stuck_timeout_ms,
                workers_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "workers_new: NULL out");
    workers_t *w = *out = calloc(1, sizeof *w);
    if (!w)
        return deras_fail(DERAS_ENOMEM, "workers_new: out of memory");
    w->vocab_size = vocab_size;
    char buf[sizeof w->model_base];
    snprintf(w->model_base, sizeof w->model_base, "%s", base_name(model_name, buf, sizeof buf));
    w->timeout_us = (int64_t)timeout_ms * 1000;
    w->stuck_us = (int64_t)stuck_timeout_ms * 1000;
    for (int i = 0; i < WORKERS_MAX; i++) {
        w->w[i].slot = i;
        w->w[i].fd = -1;
    }
    return DERAS_OK;
}

void workers_destroy(workers_t **w)
{
    if (!w || !*w)
        return;
    free(*w);
    *w = NULL;
}

bool workers_live(const worker_t *k)
{
    return k->state == W_STARTING || k->state == W_READY || k->state == W_DRAINING;
}

/* A live worker's state from its reported phase and the router's drain. */
static void settle(worker_t *k)
{
    if (!workers_live(k))
        return;
    if (k->load.phase == WP_PHASE_STARTING)
        k->state = W_STARTING;
    else if (k->drain_asked || k->load.phase == WP_PHASE_DRAINING)
        k->state = W_DRAINING;
    else
        k->state = W_READY;
}

static worker_t *find_any(workers_t *w, const void *name, int name_len)
{
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker_t *k = &w->w[i];
        if (k->state != W_FREE && k->name_len == name_len && !memcmp(k->name, name, (size_t)name_len))
            return k;
    }
    return NULL;
}

worker_t *workers_find(workers_t *w, const void *name, int name_len)
{
    worker_t *k = find_any(w, name, name_len);
    return k && workers_live(k) ? k : NULL;
}

worker_t *workers_lookup(workers_t *w, const void *name, int name_len)
{
    return find_any(w, name, name_len);
}

bool workers_drained(const worker_t *k)
{
    return k->state == W_DRAINING && k->inflight_reqs == 0;
}

const char *workers_state_name(const worker_t *k)
{
    switch (k->state) {
    case W_STARTING: return "starting";
    case W_READY: return "ready";
    case W_DRAINING: return workers_drained(k) ? "drained" : "draining";
    case W_STUCK: return "stuck";
    case W_DEAD: return "dead";
    default: return "";
    }
}

const char *workers_spec_name(const worker_t *k)
{
    static const char *const known[] = {"ngram", "self", "draft"};
    if (!k->hello.spec[0] || !strcmp(k->hello.spec, "none"))
        return "none";
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(k->hello.spec, known[i]))
            return known[i];
    return "other";
}

worker_t *workers_at(workers_t *w, int slot)
{
    return slot >= 0 && slot < WORKERS_MAX ? &w->w[slot] : NULL;
}

/* A slot for a new name: a free one, else the longest-dead one. */
static worker_t *free_slot(workers_t *w)
{
    worker_t *best = NULL;
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker_t *k = &w->w[i];
        if (k->state == W_FREE)
            return k;
        if (k->state == W_DEAD && (!best || k->dead_since_us < best->dead_since_us))
            best = k;
    }
    return best;
}

enum hello_verdict workers_hello(workers_t *w, const void *name, int name_len,
                                 const wp_hello *h, int fd, int64_t now_us, worker_t **out,
                                 char *why, size_t why_cap)
{
    *out = NULL;
    why[0] = '\0';
    if (name_len <= 0 || name_len > WPROTO_MAX_NAME || (size_t)name_len != strlen(h->name) ||
        memcmp(name, h->name, (size_t)name_len)) {
        snprintf(why, why_cap, "routing id does not match the HELLO name '%s'", h->name);
        return HELLO_REFUSE;
    }
    if (memchr(name, '/', (size_t)name_len)) { /* "<name>/hb" is the pulse of <name> */
        snprintf(why, why_cap, "worker names may not contain '/': '%s'", h->name);
        return HELLO_REFUSE;
    }
    if (h->vocab_size != w->vocab_size) {
        snprintf(why, why_cap, "vocabulary mismatch: worker has %d tokens, the router's model %d",
                 h->vocab_size, w->vocab_size);
        return HELLO_REFUSE;
    }
    char buf[256];
    const char *base = base_name(h->model, buf, sizeof buf);
    if (strcmp(base, w->model_base)) {
        snprintf(why, why_cap, "model mismatch: worker serves '%s', the router '%s'", base,
                 w->model_base);
        return HELLO_REFUSE;
    }
    if (h->max_seqs <= 0 || h->max_model_len <= 0 || h->kv_blocks_total < 0) {
        snprintf(why, why_cap, "bad capacity (max_seqs %d, max_model_len %d, kv_blocks %d)",
                 h->max_seqs, h->max_model_len, h->kv_blocks_total);
        return HELLO_REFUSE;
    }
    worker_t *k = find_any(w, name, name_len);
    if (k && workers_live(k)) {
        if (k->hello.pid == h->pid) {
            k->hello = *h;
            k->capacity = h->max_seqs * WORKERS_INFLIGHT_FACTOR;
            if (k->cap_limit > k->capacity)
                k->cap_limit = k->capacity;
            workers_seen(k, fd, now_us);
            *out = k;
            return HELLO_RECONNECT;
        }
        /* ZeroMQ routes one connection per routing id: a HELLO from another process
         * under this name means the old one's connection is gone. */
        *out = k;
        return HELLO_RESTART;
    }
    if (!k && !(k = free_slot(w))) {
        snprintf(why, why_cap, "registry full (%d workers)", WORKERS_MAX);
        return HELLO_REFUSE;
    }
    int slot = k->slot;
    memset(k, 0, sizeof *k);
    k->slot = slot;
    k->epoch = ++w->next_epoch;
    k->state = W_STARTING; /* until a load report says ready */
    k->load.phase = WP_PHASE_STARTING;
    k->drain_asked = w->drain_new;
    k->registered_us = k->progress_us = now_us;
    memcpy(k->name, name, (size_t)name_len);
    k->name[name_len] = '\0';
    k->name_len = name_len;
    k->hello = *h;
    k->capacity = h->max_seqs * WORKERS_INFLIGHT_FACTOR;
    k->cap_limit = k->capacity;
    k->load.kv_blocks_free = k->load.kv_blocks_total = h->kv_blocks_total;
    k->fd = fd;
    k->last_seen_us = now_us;
    *out = k;
    return HELLO_NEW;
}

void workers_pulse(worker_t *k, int64_t now_us)
{
    if (k && (workers_live(k) || k->state == W_STUCK))
        k->last_seen_us = now_us;
}

void workers_seen(worker_t *k, int fd, int64_t now_us)
{
    k->last_seen_us = now_us;
    if (fd >= 0)
        k->fd = fd;
    k->disconnected = false;
}

void workers_load(worker_t *k, const wp_load *l, bool heartbeat, int64_t now_us)
{
    if (l->steps != k->load.steps)
        k->progress_us = now_us;
    k->load = *l;
    settle(k);
    k->tokens_since = 0;
    if (heartbeat && l->waiting == 0)
        k->cap_limit = k->capacity;
}

void workers_sent(worker_t *k, int n, int n_prompt, int64_t now_us)
{
    if (k->inflight_reqs == 0) /* idle until now: the stuck clock starts here */
        k->progress_us = now_us;
    k->inflight_seqs += n;
    k->inflight_reqs++;
    k->tokens_since += n_prompt;
    k->served++;
}

void workers_ended(worker_t *k, int n)
{
    k->inflight_seqs -= n;
    k->inflight_reqs--;
    if (k->inflight_seqs < 0)
        k->inflight_seqs = 0;
    if (k->inflight_reqs < 0)
        k->inflight_reqs = 0;
}

void workers_busy(worker_t *k)
{
    k->cap_limit = k->inflight_seqs;
}

void workers_fd_closed(workers_t *w, int fd)
{
    if (fd < 0)
        return;
    for (int i = 0; i < WORKERS_MAX; i++)
        if (workers_live(&w->w[i]) && w->w[i].fd == fd)
            w->w[i].disconnected = true;
}

void workers_dead(worker_t *k, int64_t now_us)
{
    k->state = W_DEAD;
    k->dead_since_us = now_us;
    k->inflight_seqs = k->inflight_reqs = 0;
    k->fd = -1;
    k->drain_deadline_us = 0;
}

void workers_stuck(worker_t *k)
{
    k->state = W_STUCK;
    k->inflight_seqs = k->inflight_reqs = 0;
    k->drain_deadline_us = 0;
}

void workers_drain(worker_t *k, bool on, int64_t deadline_us)
{
    k->drain_asked = on;
    k->drain_deadline_us = on ? deadline_us : 0;
    settle(k);
}

void workers_drain_all(workers_t *w, int64_t deadline_us)
{
    w->drain_new = true;
    for (int i = 0; i < WORKERS_MAX; i++)
        if (workers_live(&w->w[i]))
            workers_drain(&w->w[i], true, deadline_us);
}

void workers_undrain_all(workers_t *w)
{
    w->drain_new = false;
    for (int i = 0; i < WORKERS_MAX; i++)
        if (workers_live(&w->w[i]))
            workers_drain(&w->w[i], false, 0);
}

worker_t *workers_expired(workers_t *w, int64_t now_us)
{
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker_t *k = &w->w[i];
        if ((workers_live(k) || k->state == W_STUCK) && now_us - k->last_seen_us > w->timeout_us)
            return k;
    }
    return NULL;
}

static bool may_be_stuck(const workers_t *w, const worker_t *k)
{
    return w->stuck_us > 0 && workers_live(k) && k->inflight_reqs > 0;
}

worker_t *workers_find_stuck(workers_t *w, int64_t now_us)
{
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker_t *k = &w->w[i];
        if (may_be_stuck(w, k) && now_us - k->progress_us > w->stuck_us)
            return k;
    }
    return NULL;
}

worker_t *workers_drain_overdue(workers_t *w, int64_t now_us)
{
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker_t *k = &w->w[i];
        if (k->state == W_DRAINING && k->drain_deadline_us && k->inflight_reqs > 0 &&
            now_us >= k->drain_deadline_us)
            return k;
    }
    return NULL;
}

int64_t workers_next_expiry(const workers_t *w)
{
    int64_t t = INT64_MAX;
    for (int i = 0; i < WORKERS_MAX; i++) {
        const worker_t *k = &w->w[i];
        if ((workers_live(k) || k->state == W_STUCK) && k->last_seen_us + w->timeout_us < t)
            t = k->last_seen_us + w->timeout_us;
        if (may_be_stuck(w, k) && k->progress_us + w->stuck_us < t)
            t = k->progress_us + w->stuck_us;
        if (k->state == W_DRAINING && k->drain_deadline_us && k->inflight_reqs > 0 &&
            k->drain_deadline_us < t)
            t = k->drain_deadline_us;
    }
    return t;
}

static bool has_room(const worker_t *k, int n)
{
    /* An idle worker takes a request even wider than its capacity, unless it just
     * answered busy (cap_limit 0). */
    return k->inflight_seqs + n <= k->cap_limit || (k->inflight_seqs == 0 && k->cap_limit > 0);
}

worker_t *workers_pick(workers_t *w, int n, int n_prompt, int need_len)
{
    (void)n_prompt;
    worker_t *best = NULL;
    int64_t best_score = 0;
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker_t *k = &w->w[i];
        if (k->state != W_READY || k->disconnected || !has_room(k, n) ||
            k->hello.max_model_len < need_len)
            continue;
        int64_t score = k->load.queued_tokens + k->load.running_tokens + k->tokens_since;
        if (!best || score < best_score ||
            (score == best_score && (k->load.kv_blocks_free > best->load.kv_blocks_free ||
                                     (k->load.kv_blocks_free == best->load.kv_blocks_free &&
                                      k->inflight_seqs < best->inflight_seqs)))) {
            best = k;
            best_score = score;
        }
    }
    return best;
}

int workers_ready(const workers_t *w)
{
    int n = 0;
    for (int i = 0; i < WORKERS_MAX; i++)
        n += w->w[i].state == W_READY && !w->w[i].disconnected;
    return n;
}

void workers_count(const workers_t *w, int counts[W_DEAD + 1])
{
    for (int s = 0; s <= W_DEAD; s++)
        counts[s] = 0;
    for (int i = 0; i < WORKERS_MAX; i++)
        counts[w->w[i].state]++;
}

int workers_max_len(const workers_t *w)
{
    int m = 0;
    for (int i = 0; i < WORKERS_MAX; i++)
        if (w->w[i].state == W_READY && w->w[i].hello.max_model_len > m)
            m = w->w[i].hello.max_model_len;
    return m;
}

int workers_status(const workers_t *w, proto_worker_status *out, int cap)
{
    int n = 0;
    for (int i = 0; i < WORKERS_MAX && n < cap; i++) {
        const worker_t *k = &w->w[i];
        if (k->state == W_FREE)
            continue;
        proto_worker_status *s = &out[n++];
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s", k->name);
        snprintf(s->state, sizeof s->state, "%s", workers_state_name(k));
        s->running = k->load.running;
        s->waiting = k->load.waiting;
        s->kv_blocks_free = k->load.kv_blocks_free;
        s->kv_blocks_total = k->load.kv_blocks_total;
        s->served = k->served;
    }
    return n;
}
