/* SPDX-License-Identifier: Apache-2.0 */
/* test_router_dispatch.c - the router's dispatch policy with fake workers, the worker
 * registry's verdicts on HELLO and its states, and the live request table.
 *
 * Dispatch: the least loaded ready worker gets the request (queued + running tokens
 * from its last report plus what was sent since), ties go to the most free KV blocks; a
 * worker at capacity holds the FIFO queue; admission caps count samples (n counts as
 * n) and prompt tokens; without workers a request fails no_workers after the wait, not
 * before, and so does one that comes back from the last worker; a request longer than
 * every worker's context fails; a busy worker is held until a heartbeat says it has room;
 * an unreachable one is skipped; every dispatch gets a new rid. Worker states: a worker is
 * starting (gets nothing) until its load says ready; a drained one gets nothing new and
 * shows "drained" once nothing of ours is on it; drain --all also covers workers that
 * register later; an overdue drain is found once; a busy worker without a completed step
 * for the stuck timeout is stuck, and a stuck one that goes silent is dead. The request
 * table is checked against a model under random operations: lookups by key and rid, the
 * deadline order, slot reuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "router/dispatch.h"
#include "router/requests.h"
#include "router/workers.h"
#include "test_util.h"

#define VOCAB 1005

static workers_t *reg;
static rq_table_t *tab;
static dispatch_t *disp;
static int64_t now;

static struct { int slot; uint64_t rid; rq_t *r; } sent[256];
static int n_sent;
static int unreachable_slot = -1;
static struct { enum proto_error_code code; char id[PROTO_MAX_ID + 1]; } failed[64];
static int n_failed;

static int fake_submit(void *ctx, worker_t *k, rq_t *r)
{
    (void)ctx;
    if (k->slot == unreachable_slot)
        return DERAS_ECLOSED;
    sent[n_sent].slot = k->slot;
    sent[n_sent].rid = r->rid;
    sent[n_sent++].r = r;
    return DERAS_OK;
}

static void fake_fail(void *ctx, rq_t *r, enum proto_error_code code, const char *msg)
{
    (void)ctx;
    (void)msg;
    failed[n_failed].code = code;
    snprintf(failed[n_failed++].id, sizeof failed[0].id, "%s", r->id);
    rq_release(tab, r);
}

static void make(int max_queued_requests, int64_t max_queued_tokens, int wait_ms)
{
    assert_int_equal(workers_new(VOCAB, "/models/tiny-chat", 3000, 10000, &reg), DERAS_OK);
    assert_int_equal(rq_table_new(NULL, &tab), DERAS_OK);
    dispatch_opts o = {max_queued_requests, max_queued_tokens, wait_ms};
    assert_int_equal(dispatch_new(reg, tab, &o, fake_submit, fake_fail, NULL, &disp), DERAS_OK);
    assert_non_null(reg);
    assert_non_null(tab);
    assert_non_null(disp);
    n_sent = n_failed = 0;
    unreachable_slot = -1;
    now = 1000000;
}

static int teardown(void **s)
{
    (void)s;
    dispatch_destroy(&disp);
    rq_table_destroy(&tab);
    workers_destroy(&reg);
    return 0;
}

static wp_hello hello_of(const char *name, int pid, int max_seqs, int ctx, int kv)
{
    wp_hello h = {0};
    snprintf(h.name, sizeof h.name, "%s", name);
    snprintf(h.device, sizeof h.device, "cpu");
    snprintf(h.model, sizeof h.model, "/elsewhere/tiny-chat/");
    h.vocab_size = VOCAB;
    h.max_model_len = ctx;
    h.max_seqs = max_seqs;
    h.kv_blocks_total = kv;
    h.block_size = 16;
    h.tp_size = 1;
    h.pid = pid;
    return h;
}

static worker_t *add_worker(const char *name, int max_seqs, int ctx, int kv)
{
    wp_hello h = hello_of(name, 100, max_seqs, ctx, kv);
    worker_t *k;
    char why[256];
    enum hello_verdict v = workers_hello(reg, name, (int)strlen(name), &h, -1, now, &k, why, sizeof why);
    if (v != HELLO_NEW)
        fail_msg("HELLO from %s: expected HELLO_NEW, got %d (%s)", name, v, why);
    wp_load l = {.phase = WP_PHASE_READY, .kv_blocks_free = kv, .kv_blocks_total = kv};
    workers_load(k, &l, true, now); /* its warm-up ran */
    return k;
}

static void set_load(worker_t *k, int64_t queued, int64_t running, int kv_free)
{
    wp_load l = {0};
    l.phase = WP_PHASE_READY;
    l.queued_tokens = queued;
    l.running_tokens = running;
    l.kv_blocks_free = kv_free;
    l.kv_blocks_total = k->hello.kv_blocks_total;
    workers_load(k, &l, true, now);
}

static rq_t *submit(int n, int n_prompt, int max_tokens)
{
    static int counter;
    if (dispatch_check(disp, n, n_prompt))
        return NULL;
    rq_t *r = NULL;
    assert_int_equal(rq_acquire(tab, &r), DERAS_OK);
    assert_non_null(r);
    snprintf(r->id, sizeof r->id, "r%d", counter++);
    r->ident[0] = 7;
    r->ident_len = 1;
    r->params.n = n;
    r->n_prompt = n_prompt;
    r->params.max_tokens = max_tokens;
    r->t_recv_us = now;
    assert_int_equal(rq_insert(tab, r), DERAS_OK);
    dispatch_admit(disp, r, now);
    dispatch_run(disp, now);
    return r;
}

static void the_least_loaded_worker_gets_the_request(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    worker_t *w0 = add_worker("w0", 8, 4096, 100);
    worker_t *w1 = add_worker("w1", 8, 4096, 100);
    set_load(w0, 40, 60, 50);
    set_load(w1, 0, 0, 50);
    /* w1 is at 0, then 60, then 90 tokens sent since its report: all below w0's 100 */
    submit(1, 60, 16);
    submit(1, 30, 16);
    submit(1, 60, 16);
    /* w1 now counts 150: w0 is the lighter */
    submit(1, 10, 16);
    assert_int_equal(n_sent, 4);
    assert_int_equal(sent[0].slot, w1->slot);
    assert_int_equal(sent[1].slot, w1->slot);
    assert_int_equal(sent[2].slot, w1->slot);
    assert_int_equal(sent[3].slot, w0->slot);
    /* a report resets the tokens counted since */
    set_load(w1, 0, 0, 50);
    submit(1, 10, 16);
    assert_int_equal(sent[4].slot, w1->slot);
    teardown(NULL);
}

static void ties_go_to_the_most_free_kv_blocks(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    worker_t *w0 = add_worker("w0", 8, 4096, 100);
    worker_t *w1 = add_worker("w1", 8, 4096, 100);
    set_load(w0, 10, 10, 30);
    set_load(w1, 10, 10, 70);
    submit(1, 1, 16);
    assert_int_equal(sent[0].slot, w1->slot);
    (void)w0;
    teardown(NULL);
}

static void a_full_worker_holds_the_queue_in_order(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    worker_t *w = add_worker("w0", 1, 4096, 100); /* capacity 1 x 4 sequences */
    assert_int_equal(w->capacity, 4);
    rq_t *a = submit(2, 10, 16), *b = submit(2, 10, 16), *c = submit(2, 10, 16), *d = submit(1, 10, 16);
    assert_int_equal(n_sent, 2);
    assert_ptr_equal(sent[0].r, a);
    assert_ptr_equal(sent[1].r, b);
    assert_int_equal(c->state, RQ_QUEUED);
    assert_int_equal(d->state, RQ_QUEUED); /* would fit, but never overtakes c */
    assert_int_equal(dispatch_queued_requests(disp), 3);
    assert_int_equal(dispatch_queued_tokens(disp), 20);
    workers_ended(w, a->params.n);
    rq_release(tab, a);
    dispatch_run(disp, now);
    assert_int_equal(n_sent, 3);
    assert_ptr_equal(sent[2].r, c);
    assert_int_equal(d->state, RQ_QUEUED);
    teardown(NULL);
}

static void admission_caps_count_samples_and_prompt_tokens(void **state)
{
    (void)state;
    make(4, 100, 60000);
    assert_non_null(submit(3, 40, 16));
    assert_null(submit(2, 10, 16)); /* 3 + 2 samples > 4 */
    assert_non_null(submit(1, 40, 16));
    assert_null(submit(1, 1, 16)); /* samples full */
    teardown(NULL);
    make(16, 100, 60000);
    assert_non_null(submit(1, 60, 16));
    assert_null(submit(1, 41, 16)); /* 60 + 41 tokens > 100 */
    assert_non_null(submit(1, 40, 16));
    assert_int_equal(dispatch_queued_tokens(disp), 100);
    teardown(NULL);
}

static void without_workers_a_request_fails_after_the_wait(void **state)
{
    (void)state;
    make(256, 1 << 20, 100);
    rq_t *r = submit(1, 10, 16);
    now += 50 * 1000;
    dispatch_run(disp, now);
    assert_int_equal(n_failed, 0);
    assert_int_equal(dispatch_next_timer(disp), r->t_recv_us + 100 * 1000);
    now += 51 * 1000;
    dispatch_run(disp, now);
    assert_int_equal(n_failed, 1);
    assert_int_equal(failed[0].code, PE_NO_WORKERS);
    assert_int_equal(dispatch_queued_requests(disp), 0);
    /* a worker arriving within the wait gets the request */
    submit(1, 10, 16);
    now += 50 * 1000;
    add_worker("w0", 4, 4096, 10);
    dispatch_run(disp, now);
    assert_int_equal(n_sent, 1);
    assert_int_equal(n_failed, 1);
    teardown(NULL);
}

static void a_request_back_from_the_last_worker_fails_after_the_wait(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    worker_t *w = add_worker("w0", 4, 4096, 10);
    rq_t *r = submit(1, 10, 16);
    assert_int_equal(n_sent, 1);
    now += 5 * 1000000LL; /* the request ran a while; then its worker died (or got stuck) */
    workers_dead(w, now);
    r->worker = -1;
    dispatch_requeue(disp, r, now);
    dispatch_run(disp, now);
    assert_int_equal(n_failed, 0);
    int64_t t = dispatch_next_timer(disp);
    if (t != now + 1000 * 1000)
        fail_msg("next timer: expected the end of the wait (+1000 ms), got %+lld us",
                 (long long)(t - now));
    dispatch_run(disp, t);
    assert_int_equal(n_failed, 1);
    assert_int_equal(failed[0].code, PE_NO_WORKERS);
    assert_int_equal(dispatch_queued_count(disp), 0);
    teardown(NULL);
}

static void a_request_longer_than_every_context_fails(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    add_worker("w0", 4, 1024, 10);
    add_worker("w1", 4, 2048, 10);
    submit(1, 2000, 48); /* 2048: fits w1 only */
    assert_int_equal(n_sent, 1);
    submit(1, 2000, 49);
    assert_int_equal(n_failed, 1);
    assert_int_equal(failed[0].code, PE_CONTEXT_LENGTH_EXCEEDED);
    teardown(NULL);
}

static void a_busy_worker_is_held_until_a_heartbeat_says_it_has_room(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    worker_t *w = add_worker("w0", 4, 4096, 10);
    rq_t *r = submit(1, 10, 16);
    assert_int_equal(n_sent, 1);
    /* the worker answers busy: the request goes back, the worker is held at 0 */
    workers_ended(w, r->params.n);
    workers_busy(w);
    r->attempts--;
    dispatch_requeue(disp, r, now);
    dispatch_run(disp, now);
    assert_int_equal(n_sent, 1);
    wp_load l = {.phase = WP_PHASE_READY, .waiting = 0, .kv_blocks_free = 10,
                 .kv_blocks_total = 10};
    workers_load(w, &l, false, now); /* a STEP's load does not lift the hold */
    dispatch_run(disp, now);
    assert_int_equal(n_sent, 1);
    workers_load(w, &l, true, now);
    dispatch_run(disp, now);
    assert_int_equal(n_sent, 2);
    assert_true(sent[1].rid != sent[0].rid); /* every dispatch a new rid */
    assert_ptr_equal(rq_find_rid(tab, sent[1].rid), r);
    assert_null(rq_find_rid(tab, sent[0].rid));
    teardown(NULL);
}

static void an_unreachable_worker_is_skipped(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    worker_t *w0 = add_worker("w0", 4, 4096, 10);
    worker_t *w1 = add_worker("w1", 4, 4096, 10);
    set_load(w1, 500, 0, 10);
    unreachable_slot = w0->slot;
    rq_t *r = submit(1, 10, 16);
    assert_int_equal(n_sent, 1);
    assert_int_equal(sent[0].slot, w1->slot);
    assert_true(w0->disconnected);
    assert_int_equal(w0->inflight_seqs, 0);
    assert_int_equal(r->attempts, 1);
    /* heard from again: back in the rotation */
    workers_seen(w0, 5, now);
    unreachable_slot = -1;
    submit(1, 10, 16);
    assert_int_equal(sent[1].slot, w0->slot);
    teardown(NULL);
}

static void hello_verdicts(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    char why[256];
    worker_t *k;
    wp_hello h = hello_of("w0", 100, 4, 4096, 10);
    h.vocab_size = VOCAB + 1;
    assert_int_equal(workers_hello(reg, "w0", 2, &h, -1, now, &k, why, sizeof why), HELLO_REFUSE);
    assert_non_null(strstr(why, "vocabulary"));
    h = hello_of("w0", 100, 4, 4096, 10);
    snprintf(h.model, sizeof h.model, "/models/other.gguf");
    assert_int_equal(workers_hello(reg, "w0", 2, &h, -1, now, &k, why, sizeof why), HELLO_REFUSE);
    assert_non_null(strstr(why, "model"));
    h = hello_of("w0", 100, 4, 4096, 10);
    assert_int_equal(workers_hello(reg, "w1", 2, &h, -1, now, &k, why, sizeof why), HELLO_REFUSE);
    h.max_seqs = 0;
    assert_int_equal(workers_hello(reg, "w0", 2, &h, -1, now, &k, why, sizeof why), HELLO_REFUSE);
    h = hello_of("w0", 100, 4, 4096, 10);
    assert_int_equal(workers_hello(reg, "w0", 2, &h, 3, now, &k, why, sizeof why), HELLO_NEW);
    worker_t *first = k;
    assert_int_equal(workers_hello(reg, "w0", 2, &h, 3, now, &k, why, sizeof why), HELLO_RECONNECT);
    assert_ptr_equal(k, first);
    h.pid = 101;
    assert_int_equal(workers_hello(reg, "w0", 2, &h, 4, now, &k, why, sizeof why), HELLO_RESTART);
    uint64_t epoch = k->epoch;
    workers_dead(k, now);
    assert_null(workers_find(reg, "w0", 2));
    assert_int_equal(workers_hello(reg, "w0", 2, &h, 4, now, &k, why, sizeof why), HELLO_NEW);
    assert_ptr_equal(k, first);
    assert_true(k->epoch != epoch);
    /* a full registry refuses, a dead slot is reused */
    for (int i = 1; i < WORKERS_MAX; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        wp_hello hx = hello_of(name, 200 + i, 4, 4096, 10);
        assert_int_equal(workers_hello(reg, name, (int)strlen(name), &hx, -1, now, &k, why, sizeof why),
                         HELLO_NEW);
    }
    wp_hello hy = hello_of("y", 999, 4, 4096, 10);
    assert_int_equal(workers_hello(reg, "y", 1, &hy, -1, now, &k, why, sizeof why), HELLO_REFUSE);
    workers_dead(workers_find(reg, "x5", 2), now);
    assert_int_equal(workers_hello(reg, "y", 1, &hy, -1, now, &k, why, sizeof why), HELLO_NEW);
    proto_worker_status st[WORKERS_MAX];
    assert_int_equal(workers_status(reg, st, WORKERS_MAX), WORKERS_MAX);
    teardown(NULL);
}

static void silent_workers_expire(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    worker_t *w0 = add_worker("w0", 4, 4096, 10);
    worker_t *w1 = add_worker("w1", 4, 4096, 10);
    assert_int_equal(workers_next_expiry(reg), now + 3000 * 1000);
    now += 2000 * 1000;
    workers_seen(w1, -1, now);
    assert_null(workers_expired(reg, now));
    now += 1001 * 1000;
    assert_ptr_equal(workers_expired(reg, now), w0);
    workers_dead(w0, now);
    assert_null(workers_expired(reg, now));
    assert_int_equal(workers_ready(reg), 1);
    teardown(NULL);
}

static void a_starting_worker_gets_nothing_until_its_load_says_ready(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    wp_hello h = hello_of("w0", 100, 4, 4096, 10);
    worker_t *k;
    char why[256];
    assert_int_equal(workers_hello(reg, "w0", 2, &h, -1, now, &k, why, sizeof why), HELLO_NEW);
    assert_string_equal(workers_state_name(k), "starting");
    assert_true(workers_live(k));
    rq_t *r = submit(1, 10, 16);
    assert_int_equal(n_sent, 0);
    assert_int_equal(r->state, RQ_QUEUED);
    wp_load l = {.phase = WP_PHASE_STARTING, .kv_blocks_free = 10, .kv_blocks_total = 10};
    workers_load(k, &l, true, now); /* still warming up */
    dispatch_run(disp, now);
    assert_int_equal(n_sent, 0);
    l.phase = WP_PHASE_READY;
    workers_load(k, &l, true, now);
    assert_string_equal(workers_state_name(k), "ready");
    dispatch_run(disp, now);
    assert_int_equal(n_sent, 1);
    /* a worker draining on its own (a signal) takes nothing new either */
    l.phase = WP_PHASE_DRAINING;
    workers_load(k, &l, true, now);
    assert_int_equal(k->state, W_DRAINING);
    submit(1, 10, 16);
    assert_int_equal(n_sent, 1);
    teardown(NULL);
}

static void a_drained_worker_gets_nothing_new_and_is_drained_when_empty(void **state)
{
    (void)state;
    make(256, 1 << 20, 60000);
    worker_t *w0 = add_worker("w0", 4, 4096, 10);
    worker_t *w1 = add_worker("w1", 4, 4096, 10);
    set_load(w1, 100, 0, 10); /* w0 looks idler: the first request goes there */
    rq_t *r = submit(1, 10, 16);
    assert_int_equal(sent[0].slot, w0->slot);
    workers_drain(w0, true, now + 5000000);
    assert_string_equal(workers_state_name(w0), "draining");
    assert_false(workers_drained(w0));
    for (int i = 0; i < 5; i++)
        submit(1, 10, 16);
    for (int i = 1; i < n_sent; i++)
        if (sent[i].slot != w1->slot)
            fail_msg("dispatch %d after the drain: expected w1, got slot %d", i, sent[i].slot);
    assert_null(workers_drain_overdue(reg, now + 4999999));
    assert_ptr_equal(workers_drain_overdue(reg, now + 5000000), w0);
    workers_ended(w0, r->params.n); /* its request ended */
    assert_true(workers_drained(w0));
    assert_string_equal(workers_state_name(w0), "drained");
    assert_null(workers_drain_overdue(reg, now + 5000000)); /* nothing left to abort */
    workers_drain(w0, false, 0);
    assert_string_equal(workers_state_name(w0), "ready");
    set_load(w1, 1000, 0, 10);
    submit(1, 10, 16);
    assert_int_equal(sent[n_sent - 1].slot, w0->slot);
    teardown(NULL);
}

static void drain_all_covers_workers_that_register_later(void **state)
{
    (void)state;
    make(256, 1 << 20, 1000);
    worker_t *w0 = add_worker("w0", 4, 4096, 10);
    workers_drain_all(reg, 0);
    worker_t *w1 = add_worker("w1", 4, 4096, 10);
    assert_string_equal(workers_state_name(w0), "drained");
    assert_string_equal(workers_state_name(w1), "drained");
    assert_int_equal(workers_ready(reg), 0);
    workers_undrain_all(reg);
    worker_t *w2 = add_worker("w2", 4, 4096, 10);
    assert_int_equal(workers_ready(reg), 3);
    assert_string_equal(workers_state_name(w2), "ready");
    teardown(NULL);
}

static void a_busy_worker_without_a_step_is_stuck_and_then_dead_when_silent(void **state)
{
    (void)state;
    make(256, 1 << 20, 60000); /* workers: timeout 3 s, stuck after 10 s */
    worker_t *w = add_worker("w0", 4, 4096, 10);
    /* idle: never stuck, however long */
    now += 60 * 1000000LL;
    workers_seen(w, -1, now);
    assert_null(workers_find_stuck(reg, now));
    submit(1, 10, 16); /* work arrives: the stuck clock starts now */
    int64_t t0 = now;
    assert_int_equal(workers_next_expiry(reg), t0 + 3000000); /* silence comes first */
    wp_load l = {.phase = WP_PHASE_READY, .running = 1, .kv_blocks_free = 9, .kv_blocks_total = 10,
                 .steps = 1};
    now = t0 + 6000000;
    workers_load(w, &l, false, now); /* a step completed at 6 s */
    for (int i = 1; i <= 13; i++) {  /* then only heartbeats (pulses), no step, to 19 s */
        workers_pulse(w, t0 + 6000000 + i * 1000000LL);
        assert_null(workers_expired(reg, t0 + 6000000 + i * 1000000LL));
    }
    assert_null(workers_find_stuck(reg, t0 + 16000000));
    assert_ptr_equal(workers_find_stuck(reg, t0 + 16000001), w);
    workers_stuck(w);
    assert_string_equal(workers_state_name(w), "stuck");
    assert_false(workers_live(w));
    assert_null(workers_find(reg, "w0", 2));     /* its own socket gets REFUSE register */
    assert_ptr_equal(workers_lookup(reg, "w0", 2), w);
    assert_int_equal(w->inflight_reqs, 0);
    assert_null(workers_find_stuck(reg, t0 + 20000000));
    /* pulses keep it stuck; silence makes it dead */
    assert_null(workers_expired(reg, t0 + 19000000 + 3000000));
    assert_ptr_equal(workers_expired(reg, t0 + 19000000 + 3000001), w);
    teardown(NULL);
}

/* The table against a model: random inserts and releases with random deadlines. */
static void the_request_table_matches_a_model(void **state)
{
    (void)state;
    assert_int_equal(rq_table_new(NULL, &tab), DERAS_OK);
    enum { MAXLIVE = 300 };
    rq_t *live[MAXLIVE];
    int n_live = 0, max_seen = 0;
    uint64_t rid = 1;
    unsigned seed = 12345;
    for (int op = 0; op < 200000; op++) {
        seed = seed * 1103515245u + 12345u;
        bool add = n_live == 0 || (n_live < MAXLIVE && (seed >> 16) % 100 < 52);
        if (add) {
            rq_t *r = NULL;
            assert_int_equal(rq_acquire(tab, &r), DERAS_OK);
            assert_non_null(r);
            r->ident_len = 1 + (int)((seed >> 8) % 3);
            memset(r->ident, (int)(seed >> 20) & 3, (size_t)r->ident_len);
            snprintf(r->id, sizeof r->id, "id%u", (seed >> 4) % 1000);
            if (rq_find_key(tab, r->ident, r->ident_len, r->id)) {
                rq_discard(tab, r);
                continue;
            }
            r->deadline_us = (seed >> 12) % 4 ? (int64_t)((seed >> 3) % 100000) + 1 : 0;
            assert_int_equal(rq_insert(tab, r), DERAS_OK);
            rq_set_rid(tab, r, rid++);
            live[n_live++] = r;
        } else {
            int i = (int)((seed >> 16) % (unsigned)n_live);
            rq_release(tab, live[i]);
            live[i] = live[--n_live];
        }
        if (n_live > max_seen)
            max_seen = n_live;
        if (op % 97 == 0) {
            assert_int_equal(rq_count(tab), n_live);
            rq_t *best = NULL;
            for (int i = 0; i < n_live; i++) {
                rq_t *r = live[i];
                if (rq_find_key(tab, r->ident, r->ident_len, r->id) != r ||
                    rq_find_rid(tab, r->rid) != r)
                    fail_msg("op %d: request %s (rid %llu) not found by key or rid", op, r->id,
                             (unsigned long long)r->rid);
                if (r->deadline_us && (!best || r->deadline_us < best->deadline_us))
                    best = r;
            }
            rq_t *next = rq_next_deadline(tab);
            if ((best == NULL) != (next == NULL) || (best && next->deadline_us != best->deadline_us))
                fail_msg("op %d: next deadline %lld, expected %lld", op,
                         next ? (long long)next->deadline_us : -1LL,
                         best ? (long long)best->deadline_us : -1LL);
        }
    }
    assert_true(rq_slots(tab) <= max_seen + 1);
    rq_table_destroy(&tab);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_least_loaded_worker_gets_the_request),
        cmocka_unit_test(ties_go_to_the_most_free_kv_blocks),
        cmocka_unit_test(a_full_worker_holds_the_queue_in_order),
        cmocka_unit_test(admission_caps_count_samples_and_prompt_tokens),
        cmocka_unit_test(without_workers_a_request_fails_after_the_wait),
        cmocka_unit_test(a_request_back_from_the_last_worker_fails_after_the_wait),
        cmocka_unit_test(a_request_longer_than_every_context_fails),
        cmocka_unit_test(a_busy_worker_is_held_until_a_heartbeat_says_it_has_room),
        cmocka_unit_test(an_unreachable_worker_is_skipped),
        cmocka_unit_test(hello_verdicts),
        cmocka_unit_test(silent_workers_expire),
        cmocka_unit_test(a_starting_worker_gets_nothing_until_its_load_says_ready),
        cmocka_unit_test(a_drained_worker_gets_nothing_new_and_is_drained_when_empty),
        cmocka_unit_test(drain_all_covers_workers_that_register_later),
        cmocka_unit_test(a_busy_worker_without_a_step_is_stuck_and_then_dead_when_silent),
        cmocka_unit_test(the_request_table_matches_a_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
