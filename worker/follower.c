/* follower.c - rank 1..N-1 of a tensor-parallel worker group (see follower.h).
 *
 * Start-up order: the backend first (a device this build lacks fails before anything
 * else), then the checkpoint (mapped, not read), then the group: waiting for the leader's
 * segment can take as long as the leader's own start, up to --tp-timeout. The KV cache
 * size and batch limits come from the leader through the segment, so every rank's cache
 * has the same blocks; the checkpoint must have the leader's config. The checkpoint is
 * closed once the shard is loaded.
 */
#include "follower.h"

#include <signal.h>
#include <time.h>

#include "common/checkpoint/checkpoint.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "kernels/backend.h"
#include "worker/group.h"
#include "engine/model.h"

int worker_follower_run(const worker_opts *o)
{
    if (!o || o->tp_rank < 1 || o->tp_size < 2 || !o->name)
        return deras_fail(DERAS_EINVAL, "worker_follower_run: rank >= 1 of a named group");
    backend_t *be = NULL;
    checkpoint_t *ck = NULL;
    group_t *g = NULL;
    model_t *m = NULL;
    int rc;
    /* the leader ends the group; a signal to every rank must not cut its steps short */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    if ((rc = backend_new(o->device, o->threads, &be)) || (rc = checkpoint_open(o->model, &ck)))
        goto done;
    group_opts go = {.name = o->name, .rank = o->tp_rank, .size = o->tp_size,
                     .timeout_s = o->tp_timeout_s};
    if ((rc = group_join(&go, &g)) || (rc = group_check_config(g, checkpoint_config(ck))))
        goto done;
    model_opts mo;
    group_model_opts(g, &mo);
    log_info("rank %d: loading its shard of %s on %s", o->tp_rank, o->model, backend_name(be));
    if ((rc = model_new(ck, be, &mo, &m)))
        goto done;
    checkpoint_destroy(&ck);
    log_info("rank %d: shard loaded, %.1f MiB of weights, %.1f MiB of KV cache", o->tp_rank,
             model_weight_bytes(m) / 1048576.0, model_kv_bytes(m) / 1048576.0);
    group_set_loaded(g);
    rc = group_follow(g, m);
done:
    if (rc && g)
        group_abort(g, deras_errmsg());
    model_destroy(&m);
    group_destroy(&g);
    checkpoint_destroy(&ck);
    backend_destroy(&be);
    return rc;
}
