/* workers.c - the registry of worker groups, their health and load (see workers.h).
 *
 * A fixed array of WORKERS_MAX records, searched linearly: there are a handful of
 * workers and every operation is per message, never per token. A record is W_FREE
 * (never used), W_READY or W_DRAINING (live: heard from within the timeout), or W_DEAD
 * (kept for pong until its slot is needed, oldest death first). Registering the same
 * name again reuses its slot with a new epoch.
 */
#include "router/workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

struct workers {
    worker w[WORKERS_MAX];
    int vocab_size;
    char model_base[256];
    int64_t timeout_us;
    uint64_t next_epoch;
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

workers_t *workers_new(int vocab_size, const char *model_name, int timeout_ms)
{
    workers_t *w = calloc(1, sizeof *w);
    if (!w) {
        deras_fail(DERAS_ENOMEM, "workers_new: out of memory");
        return NULL;
    }
    w->vocab_size = vocab_size;
    char buf[sizeof w->model_base];
    snprintf(w->model_base, sizeof w->model_base, "%s", base_name(model_name, buf, sizeof buf));
    w->timeout_us = (int64_t)timeout_ms * 1000;
    for (int i = 0; i < WORKERS_MAX; i++) {
        w->w[i].slot = i;
        w->w[i].fd = -1;
    }
    return w;
}

void workers_destroy(workers_t **w)
{
    if (!w || !*w)
        return;
    free(*w);
    *w = NULL;
}

static bool is_live(const worker *k)
{
    return k->state == W_READY || k->state == W_DRAINING;
}

static worker *find_any(workers_t *w, const void *name, int name_len)
{
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker *k = &w->w[i];
        if (k->state != W_FREE && k->name_len == name_len && !memcmp(k->name, name, (size_t)name_len))
            return k;
    }
    return NULL;
}

worker *workers_find(workers_t *w, const void *name, int name_len)
{
    worker *k = find_any(w, name, name_len);
    return k && is_live(k) ? k : NULL;
}

worker *workers_at(workers_t *w, int slot)
{
    return slot >= 0 && slot < WORKERS_MAX ? &w->w[slot] : NULL;
}

/* A slot for a new name: a free one, else the longest-dead one. */
static worker *free_slot(workers_t *w)
{
    worker *best = NULL;
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker *k = &w->w[i];
        if (k->state == W_FREE)
            return k;
        if (k->state == W_DEAD && (!best || k->dead_since_us < best->dead_since_us))
            best = k;
    }
    return best;
}

enum hello_verdict workers_hello(workers_t *w, const void *name, int name_len,
                                 const wp_hello *h, int fd, int64_t now_us, worker **out,
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
    worker *k = find_any(w, name, name_len);
    if (k && is_live(k)) {
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
    k->state = W_READY;
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

void workers_pulse(worker *k, int64_t now_us)
{
    if (k)
        k->last_seen_us = now_us;
}

void workers_seen(worker *k, int fd, int64_t now_us)
{
    k->last_seen_us = now_us;
    if (fd >= 0)
        k->fd = fd;
    k->disconnected = false;
}

void workers_load(worker *k, const wp_load *l, bool heartbeat)
{
    k->load = *l;
    k->tokens_since = 0;
    if (heartbeat && l->waiting == 0)
        k->cap_limit = k->capacity;
}

void workers_sent(worker *k, int n, int n_prompt)
{
    k->inflight_seqs += n;
    k->inflight_reqs++;
    k->tokens_since += n_prompt;
    k->served++;
}

void workers_ended(worker *k, int n)
{
    k->inflight_seqs -= n;
    k->inflight_reqs--;
    if (k->inflight_seqs < 0)
        k->inflight_seqs = 0;
    if (k->inflight_reqs < 0)
        k->inflight_reqs = 0;
}

void workers_busy(worker *k)
{
    k->cap_limit = k->inflight_seqs;
}

void workers_fd_closed(workers_t *w, int fd)
{
    if (fd < 0)
        return;
    for (int i = 0; i < WORKERS_MAX; i++)
        if (is_live(&w->w[i]) && w->w[i].fd == fd)
            w->w[i].disconnected = true;
}

void workers_dead(worker *k, int64_t now_us)
{
    k->state = W_DEAD;
    k->dead_since_us = now_us;
    k->inflight_seqs = k->inflight_reqs = 0;
    k->fd = -1;
}

void workers_drain_all(workers_t *w)
{
    for (int i = 0; i < WORKERS_MAX; i++)
        if (w->w[i].state == W_READY)
            w->w[i].state = W_DRAINING;
}

worker *workers_expired(workers_t *w, int64_t now_us)
{
    for (int i = 0; i < WORKERS_MAX; i++)
        if (is_live(&w->w[i]) && now_us - w->w[i].last_seen_us > w->timeout_us)
            return &w->w[i];
    return NULL;
}

int64_t workers_next_expiry(const workers_t *w)
{
    int64_t t = INT64_MAX;
    for (int i = 0; i < WORKERS_MAX; i++)
        if (is_live(&w->w[i]) && w->w[i].last_seen_us + w->timeout_us < t)
            t = w->w[i].last_seen_us + w->timeout_us;
    return t;
}

static bool has_room(const worker *k, int n)
{
    /* An idle worker takes a request even wider than its capacity, unless it just
     * answered busy (cap_limit 0). */
    return k->inflight_seqs + n <= k->cap_limit || (k->inflight_seqs == 0 && k->cap_limit > 0);
}

worker *workers_pick(workers_t *w, int n, int n_prompt, int need_len)
{
    (void)n_prompt;
    worker *best = NULL;
    int64_t best_score = 0;
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker *k = &w->w[i];
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
    static const char *names[] = {"", "ready", "draining", "dead"};
    int n = 0;
    for (int i = 0; i < WORKERS_MAX && n < cap; i++) {
        const worker *k = &w->w[i];
        if (k->state == W_FREE)
            continue;
        proto_worker_status *s = &out[n++];
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s", k->name);
        const char *st = names[k->state];
        if (k->state == W_DRAINING && k->load.running == 0 && k->load.waiting == 0)
            st = "drained";
        snprintf(s->state, sizeof s->state, "%s", st);
        s->running = k->load.running;
        s->waiting = k->load.waiting;
        s->kv_blocks_free = k->load.kv_blocks_free;
        s->kv_blocks_total = k->load.kv_blocks_total;
        s->served = k->served;
    }
    return n;
}
