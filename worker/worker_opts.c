/* SPDX-License-Identifier: Apache-2.0 */
/* worker_opts.c - deras-worker's options: defaults and checks (see worker_opts.h). */
#include "worker_opts.h"

#include <string.h>

#include "common/wire/endpoints.h"
#include "common/base/status.h"
#include "common/wire/worker_proto.h"
#include "engine/kv_sizing.h"
#include "engine/loader.h"
#include "engine/speculative.h"

void worker_opts_default(worker_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->kv_cache_memory = "0.4";
    o->max_seqs = 64;
    o->max_batch_tokens = 512;
    o->block_size = 16;
    o->prefix_caching = true;
    o->tp_size = 1;
    o->tp_timeout_s = 60;
    o->handshake_timeout_s = 10;
    o->drain_timeout_s = 30;
    o->heartbeat_ms = 1000;
    o->stop_fd = -1;
    o->spec_k = 4;
    o->spec_max_batch = SPEC_DEFAULT_MAX_BATCH;
}

int worker_opts_spec(const worker_opts *o, spec_opts *so)
{
    spec_opts_default(so);
    so->k = o->spec_k;
    so->max_batch = o->spec_max_batch;
    int rc = o->spec_proposer ? spec_opts_parse_proposer(o->spec_proposer, so) : DERAS_OK;
    if (!rc && so->kind != SPEC_NONE)
        rc = spec_opts_check(so);
    if (!rc && (so->kind == SPEC_SELF || so->kind == SPEC_DRAFT) && o->tp_size > 1)
        rc = deras_fail(DERAS_EUNSUPPORTED, "--spec-proposer %s is not supported with --tp-size "
                        "%d (a draft pass would need every rank); use ngram", o->spec_proposer,
                        o->tp_size);
    if (!rc && so->kind == SPEC_NONE && (o->spec_k < 1 || o->spec_k > SPEC_MAX_K))
        rc = deras_fail(DERAS_EINVAL, "--spec-k must be in [1, %d], got %d", SPEC_MAX_K, o->spec_k);
    return rc;
}

static bool valid_name(const char *n)
{
    size_t len = strlen(n);
    if (len < 1 || len > WPROTO_MAX_NAME)
        return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr("._:@-", *p)))
            return false;
    return true;
}

static bool valid_device(const char *d)
{
    if (!strcmp(d, "cpu"))
        return true;
    if (strncmp(d, "cuda:", 5) || !d[5] || strlen(d) > 12)
        return false;
    for (const char *p = d + 5; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

int worker_opts_check(const worker_opts *o)
{
    if (!o)
        return deras_fail(DERAS_EINVAL, "worker_opts_check: NULL options");
    if (!o->model || !*o->model)
        return deras_fail(DERAS_EINVAL, "--model is required");
    if (strlen(o->model) >= 4096)
        return deras_fail(DERAS_EINVAL, "--model: path longer than 4095 bytes");
    if (o->router && (!strstr(o->router, "://") || strlen(o->router) >= ENDPOINT_MAX))
        return deras_fail(DERAS_EINVAL,
                          "--router '%s': expected a ZeroMQ endpoint such as "
                          "ipc:///tmp/deras-1000/workers.sock or tcp://10.0.0.1:5556",
                          o->router);
    char host[256];
    int port;
    if (o->router && !strncmp(o->router, "tcp://", 6) &&
        endpoint_tcp_parse(o->router, host, sizeof host, &port))
        return deras_fail_ctx(DERAS_EINVAL, "--router: ");
    if (o->name && !valid_name(o->name))
        return deras_fail(DERAS_EINVAL,
                          "--name '%s': expected 1 to %d of the characters A-Z a-z 0-9 . _ : @ -",
                          o->name, WPROTO_MAX_NAME);
    if (!o->device || !valid_device(o->device))
        return deras_fail(DERAS_EINVAL, "--device '%s': expected cpu or cuda:N",
                          o->device ? o->device : "");
    if (o->threads < 0 || o->threads > 1024)
        return deras_fail(DERAS_EINVAL, "--threads %d: expected 0 (all cores) to 1024", o->threads);
    int rc = kv_sizing_check_spec(o->kv_cache_memory);
    if (rc)
        return deras_fail_ctx(DERAS_EINVAL, "--kv-cache-memory: ");
    if ((rc = loader_weight_format(o->weight_format, NULL, NULL)))
        return rc;
    if (strlen(o->kv_cache_memory) >= 64)
        return deras_fail(DERAS_EINVAL, "--kv-cache-memory: longer than 63 bytes");
    int kv_dtype;
    if (o->kv_dtype && strlen(o->kv_dtype) >= 16)
        return deras_fail(DERAS_EINVAL, "--kv-dtype: longer than 15 bytes");
    if ((rc = kv_sizing_dtype(o->device, o->kv_dtype, &kv_dtype)))
        return deras_fail_ctx(DERAS_EINVAL, "--kv-dtype: ");
    if (o->max_seqs < 1 || o->max_seqs > 4096)
        return deras_fail(DERAS_EINVAL, "--max-seqs %d: expected 1 to 4096", o->max_seqs);
    if (o->max_batch_tokens < o->max_seqs || o->max_batch_tokens > (1 << 20))
        return deras_fail(DERAS_EINVAL,
                          "--max-batch-tokens %d: expected at least --max-seqs (%d) and at most %d",
                          o->max_batch_tokens, o->max_seqs, 1 << 20);
    if (o->max_live_seqs != 0 && (o->max_live_seqs < o->max_seqs || o->max_live_seqs > (1 << 20)))
        return deras_fail(DERAS_EINVAL,
                          "--max-live-seqs %d: expected at least --max-seqs (%d) and at most %d",
                          o->max_live_seqs, o->max_seqs, 1 << 20);
    if (o->block_size < 1 || o->block_size > 256)
        return deras_fail(DERAS_EINVAL, "--block-size %d: expected 1 to 256", o->block_size);
    if (o->tp_size < 1 || o->tp_size > 64)
        return deras_fail(DERAS_EINVAL, "--tp-size %d: expected 1 to 64", o->tp_size);
    if (o->tp_rank < 0 || o->tp_rank >= o->tp_size)
        return deras_fail(DERAS_EINVAL, "--tp-rank %d: expected 0 to --tp-size - 1 (%d)",
                          o->tp_rank, o->tp_size - 1);
    if (o->tp_size > 1 && !o->name)
        return deras_fail(DERAS_EINVAL,
                          "--tp-size %d needs --name: the ranks of a group find each other by "
                          "it (the same --name on every rank)",
                          o->tp_size);
    if (!(o->tp_timeout_s > 0 && o->tp_timeout_s <= 3600))
        return deras_fail(DERAS_EINVAL, "--tp-timeout %g: expected (0, 3600] seconds",
                          o->tp_timeout_s);
    if (!(o->handshake_timeout_s > 0 && o->handshake_timeout_s <= 3600))
        return deras_fail(DERAS_EINVAL, "--handshake-timeout %g: expected (0, 3600] seconds",
                          o->handshake_timeout_s);
    if (!(o->drain_timeout_s >= 0 && o->drain_timeout_s <= 86400))
        return deras_fail(DERAS_EINVAL, "--drain-timeout %g: expected 0 to 86400 seconds",
                          o->drain_timeout_s);
    if (o->heartbeat_ms < 10 || o->heartbeat_ms > 600000)
        return deras_fail(DERAS_EINVAL, "--heartbeat-ms %d: expected 10 to 600000", o->heartbeat_ms);
    spec_opts so;
    if ((rc = worker_opts_spec(o, &so)))
        return rc;
    if (o->curve_secret_key && !o->curve_server_key)
        return deras_fail(DERAS_EINVAL, "--curve-client-key needs --curve-server-key (the "
                          "router's public key)");
    if (o->curve_server_key && strlen(o->curve_server_key) != 40)
        return deras_fail(DERAS_EINVAL, "--curve-server-key: expected 40 Z85 characters, got %zu",
                          strlen(o->curve_server_key));
    if (o->test_step_delay_ms < 0 || o->test_step_delay_ms > 600000)
        return deras_fail(DERAS_EINVAL, "DERAS_TEST_STEP_DELAY_MS %d: expected 0 to 600000",
                          o->test_step_delay_ms);
    if (o->stop_fd < -1)
        return deras_fail(DERAS_EINVAL, "stop_fd %d: expected -1 or a file descriptor", o->stop_fd);
    return DERAS_OK;
}
