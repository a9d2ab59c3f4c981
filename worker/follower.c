/* SPDX-License-Identifier: Apache-2.0 */
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

#include "common/base/log.h"
#include "common/base/status.h"
#include "engine/loader.h"
#include "worker/group.h"

int worker_follower_run(const worker_opts *o)
{
    if (!o || o->tp_rank < 1 || o->tp_size < 2 || !o->name)
        return deras_fail(DERAS_EINVAL, "worker_follower_run: rank >= 1 of a named group");
    loader_t *l = NULL;
    group_t *g = NULL;
    int rc;
    /* the leader ends the group; a signal to every rank must not cut its steps short */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    /* the step limits, the cache and the weight format come from the leader
     * (group_model_opts) */
    loader_opts lo = {.model = o->model, .device = o->device, .threads = o->threads,
                      .max_seqs = 1, .max_batch_tokens = 1, .model_only = true,
                      .weight_format = o->weight_format, .matmul_mode = o->matmul_mode};
    if ((rc = loader_open(&lo, &l)))
        goto done;
    group_opts go = {.name = o->name, .rank = o->tp_rank, .size = o->tp_size,
                     .timeout_s = o->tp_timeout_s};
    if ((rc = group_join(&go, &g)) || (rc = group_check_config(g, loader_config(l))))
        goto done;
    group_model_opts(g, loader_model_opts(l));
    log_info("rank %d: loading its shard of %s on %s", o->tp_rank, o->model,
             backend_name(loader_backend(l)));
    if ((rc = loader_build_model(l)))
        goto done;
    model_t *m = loader_model(l);
    log_info("rank %d: shard loaded, %.1f MiB of weights (%.1f MiB in place from the file "
             "mapping), %.1f MiB of KV cache", o->tp_rank, model_weight_bytes(m) / 1048576.0,
             model_mapped_bytes(m) / 1048576.0, model_kv_bytes(m) / 1048576.0);
    group_set_loaded(g);
    rc = group_follow(g, m);
done:
    if (rc && g)
        group_abort(g, deras_errmsg());
    group_destroy(&g);
    loader_destroy(&l);
    return rc;
}
