/* SPDX-License-Identifier: Apache-2.0 */
/* stats_line.c - the router's periodic stats line and its per-request end line: what an
 * operator reads in the journal without a metrics stack.
 *
 * Every --stats-interval seconds (default 10; 0: never), while anything is running or
 * waiting or something ended since the last line, one info line:
 *
 *   stats: 3 running, 2 waiting (1 in the router's queue), KV cache 41.2% used, 2 workers
 *   ready; prompt 512.3 tokens/s, generation 183.2 tokens/s; 17 requests ended in 10.0 s
 *
 * Running, waiting and KV use are the sum of the workers' last load reports; prompt tokens
 * are counted when dispatched, generated tokens when they reach the router. Each request's
 * end is one info line with its id (control characters shown as '?'), outcome, tokens and
 * times, never its text (a request refused before admission: its id and error code):
 *
 *   request "a1" ended: stop, prompt 12 tokens, 40 generated (n 1), queue 0.1 ms, first
 *   token 21.4 ms, total 480.9 ms, worker w0
 *
 * Costs: O(workers) per stats line, O(n) per request end; nothing allocates.
 */
#include <stdio.h>
#include <string.h>

#include "common/base/log.h"
#include "router/router.h"

int64_t stats_line_next(const router_t *rt)
{
    return rt->o.stats_interval_ms > 0 ? rt->stats_next_us : INT64_MAX;
}

void stats_line_tick(router_t *rt, int64_t now_us)
{
    if (rt->o.stats_interval_ms <= 0)
        return;
    if (!rt->stats_next_us) { /* the first interval starts now */
        rt->stats_next_us = now_us + (int64_t)rt->o.stats_interval_ms * 1000;
        rt->stats_last_us = now_us;
        return;
    }
    if (now_us < rt->stats_next_us)
        return;
    int running = 0, waiting = 0, ready = 0;
    int64_t kv_free = 0, kv_total = 0;
    for (int i = 0; i < WORKERS_MAX; i++) {
        const worker_t *k = workers_at(rt->workers, i);
        if (!workers_live(k))
            continue;
        running += k->load.running;
        waiting += k->load.waiting;
        kv_free += k->load.kv_blocks_free;
        kv_total += k->load.kv_blocks_total;
        ready += k->state == W_READY;
    }
    const router_stats *s = &rt->st;
    uint64_t ended = s->completed - rt->stats_last.completed;
    int queued = dispatch_queued_count(rt->disp);
    if (running || waiting || queued || ended || s->prompt_tokens != rt->stats_last.prompt_tokens) {
        double dt = (now_us - rt->stats_last_us) / 1e6;
        log_info("stats: %d running, %d waiting (%d in the router's queue), KV cache %.1f%% used, "
                 "%d workers ready; prompt %.1f tokens/s, generation %.1f tokens/s; %llu "
                 "requests ended in %.1f s",
                 running, waiting + queued, queued,
                 kv_total ? 100.0 * (double)(kv_total - kv_free) / (double)kv_total : 0.0, ready,
                 (double)(s->prompt_tokens - rt->stats_last.prompt_tokens) / dt,
                 (double)(s->generated_tokens - rt->stats_last.generated_tokens) / dt,
                 (unsigned long long)ended, dt);
    }
    rt->stats_last = *s;
    rt->stats_last_us = now_us;
    rt->stats_next_us = now_us + (int64_t)rt->o.stats_interval_ms * 1000;
}

/* A client's id as a log line may show it: control characters, quotes and backslashes
 * become '?', so an id cannot forge a line or a field. */
static const char *clean_id(const char *in, char out[PROTO_MAX_ID + 1])
{
    size_t n = strnlen(in, PROTO_MAX_ID);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        out[i] = c < 0x20 || c == 0x7f || c == '"' || c == '\\' ? '?' : (char)c;
    }
    out[n] = '\0';
    return out;
}

void stats_line_request_refused(const char *id, enum proto_error_code code)
{
    char buf[PROTO_MAX_ID + 1];
    log_info("request \"%s\" refused: %s", clean_id(id, buf), proto_error_name(code));
}

void stats_line_request_end(const router_t *rt, const rq_t *r, enum proto_error_code code,
                            int64_t now_us)
{
    char id[PROTO_MAX_ID + 1];
    clean_id(r->id, id);
    double total_ms = (now_us - r->t_recv_us) / 1e3;
    if (code != PE_NONE) {
        log_info("request \"%s\" ended: error %s after %.1f ms, prompt %d tokens", id,
                 proto_error_name(code), total_ms, r->n_prompt);
        return;
    }
    char finish[64] = "";
    int generated = 0;
    int64_t first = 0;
    for (int k = 0; k < r->params.n; k++) {
        const rq_sample *s = &r->samples[k];
        generated += stream_n_tokens(s->st);
        if (s->t_first_us && (!first || s->t_first_us < first))
            first = s->t_first_us;
        const char *name = finish_reason_name(s->finish);
        if (!strstr(finish, name)) { /* the distinct reasons, in sample order */
            size_t len = strlen(finish);
            snprintf(finish + len, sizeof finish - len, "%s%s", len ? "/" : "", name);
        }
    }
    const worker_t *k = r->worker >= 0 ? workers_at(rt->workers, r->worker) : NULL;
    log_info("request \"%s\" ended: %s, prompt %d tokens, %d generated (n %d), queue %.1f ms, "
             "first token %.1f ms, total %.1f ms, worker %s",
             id, finish, r->n_prompt, generated, r->params.n,
             ((r->t_dispatch_us ? r->t_dispatch_us : now_us) - r->t_recv_us) / 1e3,
             first ? (first - r->t_recv_us) / 1e3 : -1.0, total_ms, k ? k->name : "-");
}
