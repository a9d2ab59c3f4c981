/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.h - the router's request counters and latency histograms, and their rendering
 * as Prometheus text (exposition format 0.0.4) for GET /metrics and `derasctl metrics`.
 *
 * What is counted here is what only the router sees: how requests end, their tokens, and
 * four latency histograms (time to first token, time per output token, end to end, time
 * in the router's queue). Per-worker series (load, KV cache usage, preemptions, prefix
 * cache) are read from the worker registry at render time, so they are as fresh as the
 * workers' last reports and cost nothing between scrapes.
 *
 * Units: a request of n samples ends with n finals, each with its own finish reason, so
 * deras_requests_total and the per-sample histograms (TTFT, TPOT, end to end) count
 * samples; the queue histogram and the prompt tokens count requests. A request that ends
 * with an error (refused after decoding, or failed after admission) counts once under
 * finish_reason "error". The names are documented in docs/operations.md and never change.
 *
 * Next to them, the gauges Kubernetes inference gateways read from vLLM, with vLLM's names
 * and a model_name label: vllm:num_requests_waiting (the router's queue and the workers'),
 * vllm:num_requests_running (sequences the workers run), vllm:kv_cache_usage_perc (a 0..1
 * fraction over every live worker's blocks) and vllm:cache_config_info{block_size,
 * num_gpu_blocks} (the blocks of all live workers; block_size of the first).
 *
 * Everything is plain counters updated from the router's one thread: no locks. Recording
 * is O(1) (a histogram observation is a scan of at most METRICS_MAX_BUCKETS bounds) and
 * allocates nothing; rendering is O(workers + buckets) into a buffer the module keeps and
 * reuses, so only the first scrapes (and a bigger registry) allocate.
 */
#ifndef DERAS_ROUTER_METRICS_H
#define DERAS_ROUTER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "common/request/finish_reason.h"
#include "common/wire/protocol.h"
#include "router/workers.h"

#define METRICS_MAX_BUCKETS 24

typedef struct metrics metrics_t;

/* The router-wide figures the registry does not hold, gathered by the caller per render. */
typedef struct metrics_router {
    int requests_waiting;             /* admitted, in the router's queue */
    uint64_t requests_received;       /* request frames decoded */
    const uint64_t *errors;           /* PE_N_CODES error replies by code (any frame) */
    uint64_t redispatched, worker_deaths, worker_stuck;
    double start_time_s;              /* process start, seconds since the Unix epoch */
    const char *model_name;           /* the vllm:* gauges' model_name label (/v1/models id) */
} metrics_router;

/* DERAS_ENOMEM. */
int metrics_new(metrics_t **out);
void metrics_destroy(metrics_t **m);

/* A sample's final went out, ending for `finish` (FINISH_STOP .. FINISH_LAST_SAMPLE; a
 * value outside the enum counts as FINISH_ABORT); ttft_s and tpot_s < 0 when the sample produced no token (TTFT) or
 * fewer than two (TPOT). O(buckets). */
void metrics_sample_end(metrics_t *m, finish_reason finish, int completion_tokens,
                        double ttft_s, double tpot_s, double e2e_s);
/* Every sample of a request ended with a final: its prompt tokens and time in the queue. */
void metrics_request_end(metrics_t *m, int prompt_tokens, double queue_s);
/* A decoded request ended with an error reply instead of finals. */
void metrics_request_error(metrics_t *m);

/* Render every series. *text (not NUL-terminated, *len bytes) stays valid until the next
 * render or metrics_destroy. DERAS_ENOMEM if the buffer cannot grow. O(workers + buckets). */
int metrics_render(metrics_t *m, workers_t *w, const metrics_router *r, const char **text,
                   size_t *len);

#endif
