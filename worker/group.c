/* SPDX-License-Identifier: Apache-2.0 */
/* group.c - the tensor-parallel worker group's shared segment, start-up and liveness
 * (see group.h).
 *
 * Segment layout: group_hdr (group_impl.h), then the plan ring's region, then the
 * communicator's region, each 64-byte aligned. The leader fills the header, lays out
 * both regions, takes rank 0's liveness mutex and only then stores the magic (release),
 * so a follower that sees the magic sees a complete segment with a live leader. Nobody
 * acts on a segment before group_trust.c's checks: the file ours and private, the layout
 * inside the file, and (to join) the group's secret from the leader's key file.
 *
 * Stale segments: a segment whose leader mutex is free belongs to a group whose leader
 * is gone; a new leader unlinks it and creates a fresh one (followers of the old group
 * notice their leader is dead and exit), and followers waiting for their leader skip
 * such a segment until it is replaced. The leader also sweeps /dev/shm for other
 * deras-<uid>-* segments in which no rank is alive.
 */
#include "group.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "worker/group_impl.h"
#include "worker/plan_ring.h"

#define RING_SLOTS 4
#define COMM_MAX_CHUNK ((size_t)1 << 20) /* floats per communicator chunk */
#define ALIGN64 GROUP_ALIGN64
#define GROUP_NOT_YET 1 /* internal: not yet, look again (never returned) */

struct group {
    char name[80];        /* the group's --name (its key file) */
    char shm_name[128];
    int rank, size;
    double timeout_s;
    int fd;
    group_hdr *h;
    size_t bytes;
    plan_ring_t *ring;
    comm_t *comm;
    bool holds_life;
    bool failed;
};

int group_segment_name(const char *name, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "/deras-%ld-%s", (long)getuid(), name ? name : "");
    return n < 0 || (size_t)n >= cap ? deras_fail(DERAS_ERANGE, "group name too long") : DERAS_OK;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Between sleeps of any wait: the group not aborted, every other rank alive. */
static int check_peers(void *ctx)
{
    group_t *g = ctx;
    group_hdr *h = g->h;
    if (shm_flag_load(&h->abort))
        return deras_fail(DERAS_ECLOSED, "the group was aborted: %.255s", h->abort_msg);
    for (int r = 0; r < g->size; r++)
        if (r != g->rank && !shm_life_alive(&h->life[r]))
            return deras_fail(DERAS_ECLOSED, "rank %d (pid %d) of the group is gone", r,
                              (int)atomic_load(&h->pid[r]));
    return DERAS_OK;
}

void group_abort(group_t *g, const char *why)
{
    if (!g || !g->h)
        return;
    g->failed = true;
    group_hdr *h = g->h;
    if (shm_flag_load(&h->abort) == 0) {
        snprintf(h->abort_msg, sizeof h->abort_msg, "rank %d: %s", g->rank, why ? why : "failed");
        shm_flag_store(&h->abort, 1);
    }
    comm_shm_abort((char *)h + h->comm_off);
}

static bool any_alive(group_hdr *h)
{
    for (int r = 0; r < h->size && r < GROUP_MAX; r++)
        if (shm_life_alive(&h->life[r]))
            return true;
    return false;
}

/* Map an existing segment read-write; NULL if it is not this user's private file holding at
 * least a header (the reason in deras_errmsg). */
static group_hdr *map_existing(int fd, const char *name, size_t *bytes)
{
    struct stat st;
    if (group_fd_check(fd, name) || fstat(fd, &st))
        return NULL;
    if ((size_t)st.st_size < sizeof(group_hdr)) {
        deras_fail(DERAS_EFORMAT, "segment %s: %lld bytes, smaller than its header", name,
                   (long long)st.st_size);
        return NULL;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return NULL;
    *bytes = (size_t)st.st_size;
    return p;
}

/* Remove this user's group segments in which no rank lives (crashed groups). */
static void sweep_stale(const char *keep)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "deras-%ld-", (long)getuid());
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) || !strcmp(de->d_name, keep + 1))
            continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", de->d_name);
        int fd = shm_open(name, O_RDWR, 0);
        if (fd < 0)
            continue;
        size_t bytes = 0;
        group_hdr *h = map_existing(fd, name, &bytes);
        if (h && group_hdr_check(h, bytes) == DERAS_OK && !any_alive(h)) {
            log_info("removing the shared-memory segment %s of a group whose ranks are all gone",
                     name);
            shm_unlink(name);
        }
        if (h)
            munmap(h, bytes);
        close(fd);
    }
    closedir(d);
}

static int alloc_group(const group_opts *o, group_t **out)
{
    if (!o || !out || !o->name || o->size < 2 || o->size > GROUP_MAX || o->rank < 0 ||
        o->rank >= o->size || !(o->timeout_s > 0))
        return deras_fail(DERAS_EINVAL, "group: rank %d of %d (size 2..%d), timeout %g", o ? o->rank : -1,
                          o ? o->size : 0, GROUP_MAX, o ? o->timeout_s : 0);
    *out = NULL;
    group_t *g = calloc(1, sizeof *g);
    if (!g)
        return deras_fail(DERAS_ENOMEM, "group: out of memory");
    g->fd = -1;
    snprintf(g->name, sizeof g->name, "%s", o->name);
    g->rank = o->rank;
    g->size = o->size;
    g->timeout_s = o->timeout_s;
    int rc = group_segment_name(o->name, g->shm_name, sizeof g->shm_name);
    if (rc) {
        free(g);
        return rc;
    }
    *out = g;
    return DERAS_OK;
}

static int attach_regions(group_t *g)
{
    group_hdr *h = g->h;
    int rc = plan_ring_new((char *)h + h->ring_off, h->ring_bytes, g->rank, g->size, check_peers,
                           g, &g->ring);
    if (rc)
        return rc;
    if (h->comm_nccl)
        return deras_fail(DERAS_EUNSUPPORTED, "the group uses NCCL, which needs the CUDA model "
                          "backend (not in this release)");
    comm_shm_opts co = {.timeout_s = h->timeout_s, .check = check_peers, .check_ctx = g};
    return comm_shm_new((char *)h + h->comm_off, h->comm_bytes, g->rank, g->size, &co, &g->comm);
}

int group_lead(const group_opts *o, const model_config *cfg, const model_opts *mo,
               size_t max_plan, group_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "group_lead: NULL out");
    *out = NULL;
    group_t *g = NULL;
    int rc = alloc_group(o, &g);
    if (rc)
        return rc;
    if (!cfg || !mo || o->rank != 0 || !max_plan) {
        free(g);
        return deras_fail(DERAS_EINVAL, "group_lead: rank 0 with a config, options and plan size");
    }
    sweep_stale(g->shm_name);

    const size_t T = (size_t)mo->max_batch_tokens * (size_t)cfg->d_model;
    const size_t lg = (size_t)mo->max_logits * ((size_t)cfg->vocab_size / (size_t)o->size + 1);
    size_t chunk = T > lg ? T : lg;
    chunk = chunk < COMM_MAX_CHUNK ? chunk : COMM_MAX_CHUNK;
    const size_t ring_bytes = plan_ring_bytes(o->size, RING_SLOTS, max_plan);
    const size_t comm_bytes = comm_shm_bytes(o->size, chunk);
    const size_t ring_off = ALIGN64(sizeof(group_hdr));
    const size_t comm_off = ALIGN64(ring_off + ring_bytes);
    const size_t bytes = comm_off + comm_bytes;
    if (!ring_bytes || !comm_bytes) {
        free(g);
        return deras_fail(DERAS_ERANGE, "group: plan of %zu bytes or %zu-float chunks too large",
                          max_plan, chunk);
    }

    for (int attempt = 0; attempt < 2 && g->fd < 0; attempt++) {
        g->fd = shm_open(g->shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (g->fd >= 0 || errno != EEXIST)
            break;
        int fd = shm_open(g->shm_name, O_RDWR, 0);
        if (fd >= 0 && (rc = group_fd_check(fd, g->shm_name))) { /* not ours: cannot remove it */
            close(fd);
            free(g);
            return deras_fail_ctx(rc, "tensor-parallel group '%s': ", o->name);
        }
        size_t old_bytes = 0;
        group_hdr *old = fd >= 0 ? map_existing(fd, g->shm_name, &old_bytes) : NULL;
        bool live = old && group_hdr_check(old, old_bytes) == DERAS_OK &&
                    shm_life_alive(&old->life[0]);
        int pid = old ? (int)atomic_load(&old->pid[0]) : 0;
        if (old)
            munmap(old, old_bytes);
        if (fd >= 0)
            close(fd);
        if (live) {
            free(g);
            return deras_fail(DERAS_EBUSY, "tensor-parallel group '%s' already has a live leader "
                              "(pid %d): pick another --name or stop that one", o->name, pid);
        }
        log_warn("removing the stale shared-memory segment %s of a previous group", g->shm_name);
        shm_unlink(g->shm_name);
    }
    if (g->fd < 0) {
        rc = deras_fail(DERAS_EIO, "shm_open(%s): %s", g->shm_name, strerror(errno));
        free(g);
        return rc;
    }
    if (ftruncate(g->fd, (off_t)bytes) != 0) {
        rc = deras_fail(DERAS_EIO, "ftruncate(%s, %zu): %s", g->shm_name, bytes, strerror(errno));
        goto fail;
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
    if (p == MAP_FAILED) {
        rc = deras_fail(DERAS_EIO, "mmap(%s, %zu): %s", g->shm_name, bytes, strerror(errno));
        goto fail;
    }
    g->h = p;
    g->bytes = bytes;
    group_hdr *h = g->h;
    if ((rc = group_secret_create(g->name, h->secret)))
        goto fail;
    h->version = GROUP_VERSION;
    h->size = o->size;
    h->leader_pid = (int32_t)getpid();
    h->bytes = bytes;
    h->ring_off = ring_off;
    h->ring_bytes = ring_bytes;
    h->comm_off = comm_off;
    h->comm_bytes = comm_bytes;
    h->timeout_s = o->timeout_s;
    h->cfg = *cfg;
    h->max_batch_tokens = mo->max_batch_tokens;
    h->max_seqs = mo->max_seqs;
    h->max_logits = mo->max_logits;
    h->block_size = mo->block_size;
    h->n_kv_blocks = mo->n_kv_blocks;
    h->max_blocks_per_seq = mo->max_blocks_per_seq;
    h->max_copies = mo->max_copies;
    h->convert_weights = mo->convert_weights;
    h->weight_dtype = mo->weight_dtype;
    h->kv_dtype = mo->kv_dtype;
    shm_flag_init(&h->abort, 0);
    for (int r = 0; r < GROUP_MAX; r++) {
        shm_flag_init(&h->loaded[r], 0);
        if ((rc = shm_life_init(&h->life[r])))
            goto fail;
    }
    if ((rc = plan_ring_init((char *)h + ring_off, ring_bytes, o->size, RING_SLOTS, max_plan)) ||
        (rc = comm_shm_init((char *)h + comm_off, comm_bytes, o->size, chunk)) ||
        (rc = shm_life_hold(&h->life[0])))
        goto fail;
    g->holds_life = true;
    atomic_store(&h->pid[0], (int32_t)getpid());
    if ((rc = attach_regions(g)))
        goto fail;
    atomic_store_explicit(&h->magic, GROUP_MAGIC, memory_order_release);
    log_info("tensor-parallel group '%s': leader of %d ranks, segment %s (%.1f MiB)", o->name,
             o->size, g->shm_name, bytes / 1048576.0);
    *out = g;
    return DERAS_OK;
fail:
    g->failed = true;
    group_destroy(&g);
    return rc;
}

/* Start-up: the group not aborted, and no rank that joined has died since. */
static int check_joined(void *ctx)
{
    group_t *g = ctx;
    group_hdr *h = g->h;
    if (shm_flag_load(&h->abort))
        return deras_fail(DERAS_ECLOSED, "the group failed at start-up: %.255s", h->abort_msg);
    for (int r = 1; r < g->size; r++)
        if (atomic_load(&h->pid[r]) && !shm_life_alive(&h->life[r]))
            return deras_fail(DERAS_ECLOSED, "rank %d (pid %d) died while loading its shard", r,
                              (int)atomic_load(&h->pid[r]));
    return DERAS_OK;
}

int group_wait_ready(group_t *g)
{
    if (!g || g->rank != 0)
        return deras_fail(DERAS_EINVAL, "group_wait_ready: leader only");
    const double deadline = shm_now() + g->timeout_s;
    for (int r = 1; r < g->size; r++) {
        char what[64];
        snprintf(what, sizeof what, "rank %d to load its shard", r);
        double left = deadline - shm_now();
        int rc = shm_flag_wait_ge(&g->h->loaded[r], 1, left > 0 ? left : 0, check_joined, g, what);
        if (rc == DERAS_ETIMEOUT)
            return deras_fail(DERAS_ETIMEOUT, "tensor-parallel rank %d did not join and load its "
                              "shard within %g s: is 'deras-worker --tp-rank %d --tp-size %d' with "
                              "the same --name and --model running?", r, g->timeout_s, r, g->size);
        if (rc)
            return rc;
        if (!shm_life_alive(&g->h->life[r]))
            return deras_fail(DERAS_ECLOSED, "rank %d died after loading", r);
    }
    log_info("tensor-parallel group ready: %d ranks", g->size);
    return DERAS_OK;
}

int group_join(const group_opts *o, group_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "group_join: NULL out");
    *out = NULL;
    group_t *g = NULL;
    int rc = alloc_group(o, &g);
    if (rc)
        return rc;
    if (o->rank == 0) {
        free(g);
        return deras_fail(DERAS_EINVAL, "group_join: rank 0 leads, it does not join");
    }
    const double deadline = shm_now() + o->timeout_s;
    bool told = false;
    while (!g->h) {
        int fd = shm_open(g->shm_name, O_RDWR, 0);
        if (fd >= 0) {
            /* Another user's segment, or one whose live leader fails the checks, is refused
             * at once: waiting would not make it trustworthy. A complete segment whose
             * leader is gone is stale: wait for the new leader to replace it. */
            size_t bytes = 0;
            group_hdr *h = map_existing(fd, g->shm_name, &bytes);
            if (!h && (rc = group_fd_check(fd, g->shm_name)) == DERAS_OK)
                rc = GROUP_NOT_YET; /* ours but not whole yet */
            bool complete = h && atomic_load_explicit(&h->magic, memory_order_acquire) ==
                                     GROUP_MAGIC;
            bool live = complete && shm_life_alive(&h->life[0]);
            if (live && (rc = group_hdr_check(h, bytes)) == DERAS_OK &&
                (rc = group_secret_verify(g->name, h->secret)) == DERAS_OK) {
                g->h = h;
                g->fd = fd;
                g->bytes = bytes;
                break;
            }
            if (h)
                munmap(h, bytes);
            close(fd);
            if ((!h && rc != GROUP_NOT_YET) || live) {
                char seg[sizeof g->shm_name];
                snprintf(seg, sizeof seg, "%s", g->shm_name);
                free(g);
                return deras_fail_ctx(rc, "tensor-parallel group '%s' (segment %s): ", o->name,
                                      seg);
            }
        }
        if (shm_now() >= deadline) {
            rc = deras_fail(DERAS_ETIMEOUT, "no live leader of tensor-parallel group '%s' "
                            "(segment %s) within %g s: start 'deras-worker --tp-rank 0 "
                            "--tp-size %d --name %s'", o->name, g->shm_name, o->timeout_s,
                            o->size, o->name);
            free(g);
            return rc;
        }
        if (!told)
            log_info("waiting for the leader of group '%s' (segment %s)", o->name, g->shm_name);
        told = true;
        sleep_ms(50);
    }
    group_hdr *h = g->h;
    if (h->size != o->size) {
        rc = deras_fail(DERAS_EINVAL, "group '%s' has %d ranks, this worker says --tp-size %d",
                        o->name, h->size, o->size);
        goto fail;
    }
    if ((rc = shm_life_hold(&h->life[o->rank]))) {
        rc = deras_fail(DERAS_EBUSY, "rank %d of group '%s' already runs (pid %d)", o->rank,
                        o->name, (int)atomic_load(&h->pid[o->rank]));
        goto fail;
    }
    g->holds_life = true;
    atomic_store(&h->pid[o->rank], (int32_t)getpid());
    g->timeout_s = h->timeout_s;
    if ((rc = attach_regions(g)))
        goto fail;
    log_info("joined tensor-parallel group '%s' as rank %d of %d", o->name, o->rank, o->size);
    *out = g;
    return DERAS_OK;
fail:
    group_destroy(&g);
    return rc;
}

int group_check_config(const group_t *g, const model_config *c)
{
    const model_config *l = &g->h->cfg;
#define SAME(f)                                                                              \
    if (l->f != c->f)                                                                        \
        return deras_fail(DERAS_EINVAL, "this rank's model has " #f " %d, the leader's %d: "  \
                          "every rank must load the same checkpoint", (int)c->f, (int)l->f);
    SAME(arch) SAME(n_layers) SAME(d_model) SAME(n_heads) SAME(n_kv_heads) SAME(head_dim)
    SAME(d_ff) SAME(vocab_size) SAME(tied_embeddings) SAME(qkv_bias) SAME(sliding_window)
#undef SAME
    return DERAS_OK;
}

void group_model_opts(const group_t *g, model_opts *mo)
{
    const group_hdr *h = g->h;
    memset(mo, 0, sizeof *mo);
    mo->max_batch_tokens = h->max_batch_tokens;
    mo->max_seqs = h->max_seqs;
    mo->max_logits = h->max_logits;
    mo->block_size = h->block_size;
    mo->n_kv_blocks = h->n_kv_blocks;
    mo->max_blocks_per_seq = h->max_blocks_per_seq;
    mo->max_copies = h->max_copies;
    mo->convert_weights = h->convert_weights != 0;
    mo->weight_dtype = h->weight_dtype;
    mo->kv_dtype = h->kv_dtype;
    mo->tp_rank = g->rank;
    mo->tp_size = g->size;
    mo->comm = g->comm;
}

comm_t *group_comm(const group_t *g)
{
    return g ? g->comm : NULL;
}

void group_set_loaded(group_t *g)
{
    if (g && g->h)
        shm_flag_store(&g->h->loaded[g->rank], 1);
}

int group_publish(void *ctx, const step_plan_t *p)
{
    group_t *g = ctx;
    int rc = plan_ring_publish(g->ring, PLAN_MSG_STEP, p, p->bytes, g->timeout_s);
    if (rc)
        group_abort(g, deras_errmsg());
    return rc;
}

int group_follow(group_t *g, model_t *m)
{
    const size_t cap = plan_ring_max_msg(g->ring);
    step_plan_t *p = malloc(cap);
    if (!p)
        return deras_fail(DERAS_ENOMEM, "group: out of memory for a %zu-byte plan", cap);
    int rc;
    uint64_t steps = 0;
    for (;;) {
        enum plan_msg type;
        size_t len = 0;
        /* idle for as long as the leader is: no deadline, liveness checked every slice */
        if ((rc = plan_ring_next(g->ring, &type, p, cap, &len, -1)))
            break;
        if (type == PLAN_MSG_STOP) {
            log_info("the leader stopped the group after %llu steps", (unsigned long long)steps);
            break;
        }
        model_batch bt;
        if ((rc = step_plan_validate(p, len)))
            break;
        step_plan_batch(p, &bt);
        if ((rc = model_forward(m, &bt, NULL)))
            break;
        steps++;
    }
    free(p);
    if (rc)
        group_abort(g, deras_errmsg());
    return rc;
}

int group_check(group_t *g)
{
    if (!g)
        return DERAS_OK;
    int rc = check_peers(g);
    if (rc)
        group_abort(g, deras_errmsg());
    return rc;
}

void group_destroy(group_t **gp)
{
    if (!gp || !*gp)
        return;
    group_t *g = *gp;
    if (g->h && g->rank == 0) {
        if (!g->failed && g->ring && shm_flag_load(&g->h->abort) == 0 &&
            plan_ring_publish(g->ring, PLAN_MSG_STOP, NULL, 0, 1.0) != DERAS_OK)
            log_warn("could not tell the followers to stop: %s", deras_errmsg());
        shm_unlink(g->shm_name); /* the followers keep their mappings until they exit */
        group_secret_remove(g->name);
    }
    comm_destroy(&g->comm);
    plan_ring_destroy(&g->ring);
    if (g->h && g->holds_life)
        shm_life_release(&g->h->life[g->rank]);
    if (g->h)
        munmap(g->h, g->bytes);
    if (g->fd >= 0)
        close(g->fd);
    free(g);
    *gp = NULL;
}
