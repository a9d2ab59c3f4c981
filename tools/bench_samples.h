/* SPDX-License-Identifier: Apache-2.0 */
/* bench_samples.h - `deras bench --samples FILE`: every request's timings as JSON lines,
 * for bench/plot_bench.py (latency CDFs, throughput against offered load).
 *
 * Line 1: {"run": {...}} - the run's settings and totals (what --json reports, plus the
 * date); then one line per request: {"i", "arrival_s", "send_s", "ttft_ms", "tpot_ms",
 * "e2e_ms", "output_tokens", "prompt_tokens", "ok", "error"} (times from the run's start;
 * a latency that does not apply is null). Costs: O(requests) at the end of the run.
 */
#ifndef DERAS_BENCH_SAMPLES_H
#define DERAS_BENCH_SAMPLES_H

#include <jansson.h>
#include <stdbool.h>

typedef struct bench_sample {
    double arrival, send, first, last, end; /* seconds since the start; first 0: none */
    int output_tokens, prompt_tokens;
    bool ok;
    const char *error;                      /* NULL when ok */
} bench_sample;

/* Write `run` (borrowed) and the n samples to path. DERAS_EIO naming the file. */
int bench_samples_write(const char *path, json_t *run, const bench_sample *s, int n);

#endif
