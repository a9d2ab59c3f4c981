/* SPDX-License-Identifier: Apache-2.0 */
/* test_worker_server.c - the worker's event loop (worker/server.c) against a fake router.
 *
 * Each test runs worker_server_run() in a thread over tests/data/tiny-chat (random Llama
 * weights, real tokenizer: loads in milliseconds) and plays the router from the test's
 * thread (fake_router.h). Tokens are checked against the same engine run in-process on the
 * same request: same options, one request alone, so greedy runs (and seeded samples) must
 * agree exactly. A stop byte on the server's stop fd stands in for SIGTERM.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/checkpoint/checkpoint.h"
#include "common/base/status.h"
#include "common/tokenizer/tokenizer.h"
#include "fake_router.h"
#include "test_util.h"
#include "engine/engine.h"
#include "worker/server.h"

/* How long a test waits for what must come: a hang guard. Generous: a sanitizer build, niced,
 * on two cores shared with full-speed processes gets a few percent of a core, and OpenMP's
 * barriers do worst of all when their threads are descheduled (20 s was seen to run out). */
#define WAIT_S 60.0
/* Requests a test must still find running when it aborts, stops or restarts something get
 * this test-only step delay (worker_opts.test_step_delay_ms): 4000 tokens then take at least
 * 80 s on any machine, so they cannot end by themselves before the test acts (right after
 * their first token), however fast the CPU or however late the test thread runs (short
 * requests in the same tests, 30 tokens at most, still end in well under a second). */
#define SLOW_STEP_MS 20

static char *model_dir;

/* ---- the worker in a thread ---- */

typedef struct worker_thread {
    worker_opts o;
    worker_server_t *s;
    pthread_t th;
    int stop[2];
    int rc;
    char err[1024];
    bool running;
} worker_thread;

static void *worker_main(void *arg)
{
    worker_thread *w = arg;
    w->rc = worker_server_run(w->s);
    snprintf(w->err, sizeof w->err, "%s", deras_errmsg());
    return NULL;
}

static void worker_opts_for_test(worker_opts *o, const char *endpoint)
{
    worker_opts_default(o);
    o->model = model_dir;
    o->router = endpoint;
    o->name = "wt";
    o->threads = 1;
    o->kv_cache_memory = "4MiB";
    o->max_seqs = 8;
    o->max_batch_tokens = 64;
    o->heartbeat_ms = 50;
    o->handshake_timeout_s = 5;
}

static void worker_start(worker_thread *w)
{
    assert_int_equal(pipe(w->stop), 0);
    w->o.stop_fd = w->stop[0];
    if (worker_server_new(&w->o, &w->s))
        fail_msg("worker_server_new: %s", deras_errmsg());
    assert_int_equal(pthread_create(&w->th, NULL, worker_main, w), 0);
    w->running = true;
}

/* Join the thread (it must end within WAIT_S) and free the server. */
static void worker_join(worker_thread *w)
{
    if (w->running) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)WAIT_S;
        if (pthread_timedjoin_np(w->th, NULL, &ts))
            fail_msg("the worker did not return within %.0f s", WAIT_S);
        w->running = false;
    }
    worker_server_destroy(&w->s);
    close(w->stop[0]);
    close(w->stop[1]);
}

static void worker_signal(worker_thread *w)
{
    unsigned char b = 15;
    assert_int_equal(write(w->stop[1], &b, 1), 1);
}

/* Start a worker on the fake router and complete the handshake (WELCOME: heartbeat 50 ms). */
static void start_registered(worker_thread *w, fake_router *r)
{
    worker_start(w);
    fr_expect(r, WP_HELLO, WAIT_S);
    fr_welcome(r, 50);
    fr_expect(r, WP_HEARTBEAT, WAIT_S);
}

/* Stop the worker as SIGTERM would and check it returned DERAS_OK. */
static void stop_clean(worker_thread *w)
{
    worker_signal(w);
    worker_join(w);
    if (w->rc)
        fail_msg("the worker's run ended with %s: %s", deras_status_name(w->rc), w->err);
}

/* ---- the reference: the same engine in-process ---- */

typedef struct ref_out {
    int n[FR_MAX_N];
    int32_t tokens[FR_MAX_N][FR_MAX_GEN];
    sample_result lps[FR_MAX_N][FR_MAX_GEN];
    finish_reason why[FR_MAX_N];
} ref_out;

static void ref_on_token(void *ctx, uint64_t id, int index, const sample_result *r)
{
    ref_out *o = ctx;
    if (o->n[index] < FR_MAX_GEN) {
        o->tokens[index][o->n[index]] = r->token;
        o->lps[index][o->n[index]] = *r;
    }
    o->n[index]++;
}

static void ref_on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    ((ref_out *)ctx)->why[index] = end->why;
}

/* Run one SUBMIT through an engine built as the worker builds its own. */
static void reference_run(const worker_thread *w, const wp_submit *q, ref_out *out)
{
    memset(out, 0, sizeof *out);
    checkpoint_t *ck = NULL;
    backend_t *be = NULL;
    model_t *m = NULL;
    engine_t *e = NULL;
    tokenizer_t *tok = NULL;
    const kv_sizing *kvs = worker_server_kv(w->s);
    assert_int_equal(checkpoint_open(model_dir, &ck), 0);
    assert_int_equal(tokenizer_from_hf_dir(checkpoint_hf_dir(ck), &tok), 0);
    assert_int_equal(backend_new("cpu", w->o.threads, &be), 0);
    const model_config *c = checkpoint_config(ck);
    int64_t len = c->max_seq_len < kvs->n_tokens ? c->max_seq_len : kvs->n_tokens;
    model_opts mo = {.max_batch_tokens = w->o.max_batch_tokens, .max_seqs = w->o.max_seqs,
                     .max_logits = w->o.max_seqs, .block_size = w->o.block_size,
                     .n_kv_blocks = kvs->n_blocks,
                     .max_blocks_per_seq = (int)((len + w->o.block_size - 1) / w->o.block_size),
                     .max_copies = w->o.max_seqs};
    if (model_new(ck, be, &mo, &m))
        fail_msg("%s", deras_errmsg());
    int32_t eog[8];
    int n_eog = tokenizer_n_eog(tok);
    assert_true(n_eog <= 8);
    for (int i = 0; i < n_eog; i++)
        eog[i] = tokenizer_eog_at(tok, i);
    engine_opts eo = {.max_seqs = w->o.max_seqs, .max_batch_tokens = w->o.max_batch_tokens,
                      .max_live_seqs = 4 * w->o.max_seqs, .max_model_len = (int)len,
                      .prefix_caching = w->o.prefix_caching, .eog_ids = eog, .n_eog = n_eog,
                      .cb = {ref_on_token, ref_on_finish, out}};
    assert_int_equal(engine_new(m, &eo, &e), 0);
    engine_request r = {.id = q->rid, .prompt = q->prompt_ids, .n_prompt = q->n_prompt,
                        .params = q->params};
    if (engine_add(e, &r))
        fail_msg("reference engine_add: %s", deras_errmsg());
    while (engine_has_work(e))
        assert_int_equal(engine_step(e, NULL), 0);
    engine_destroy(&e);
    model_destroy(&m);
    backend_destroy(&be);
    tokenizer_destroy(&tok);
    checkpoint_destroy(&ck);
}

/* The worker's tokens (and logprobs) for every sample equal the reference's. */
static void expect_same_as_reference(const fr_req *got, const ref_out *want, int n)
{
    for (int i = 0; i < n; i++) {
        const fr_sample *s = &got->s[i];
        if (s->n != want->n[i])
            fail_msg("sample %d: the worker sent %d tokens, the engine in-process made %d", i,
                     s->n, want->n[i]);
        assert_int_equal(s->finished, 1);
        assert_int_equal(s->fin.reason, (int)want->why[i]);
        assert_int_equal(s->fin.n_generated, want->n[i]);
        for (int k = 0; k < s->n && k < FR_MAX_GEN; k++) {
            if (s->tokens[k] != want->tokens[i][k])
                fail_msg("sample %d token %d: worker sent %d, the engine in-process made %d", i,
                         k, s->tokens[k], want->tokens[i][k]);
            const proto_logprob *lp = &s->lps[k];
            const sample_result *r = &want->lps[i][k];
            assert_int_equal(lp->n_top, r->n_top);
            assert_float_equal(lp->logprob, r->logprob, 1e-4);
            for (int j = 0; j < r->n_top; j++) {
                assert_int_equal(lp->top_ids[j], r->top_ids[j]);
                assert_float_equal(lp->top_logprobs[j], r->top_logprobs[j], 1e-4);
            }
        }
    }
}

static void make_prompt(int32_t *p, int n, int salt)
{
    for (int i = 0; i < n; i++)
        p[i] = 3 + (i * 37 + salt * 101) % 990;
}

/* ---- tests ---- */

static void test_handshake_hello_describes_the_worker_then_heartbeats(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    w.o.heartbeat_ms = 60000; /* only WELCOME's 50 ms can make heartbeats come quickly */
    worker_start(&w);
    fr_expect(r, WP_HELLO, WAIT_S);
    assert_string_equal(r->peer, "wt"); /* routing id = name */
    assert_string_equal(r->hello.name, "wt");
    assert_string_equal(r->hello.device, "cpu");
    assert_non_null(strstr(r->hello.model, "tiny-chat"));
    assert_int_equal(r->hello.vocab_size, 1005);
    assert_int_equal(r->hello.block_size, 16);
    assert_int_equal(r->hello.max_seqs, 8);
    assert_int_equal(r->hello.tp_size, 1);
    assert_int_equal(r->hello.pid, (int)getpid());
    assert_int_equal(r->hello.kv_blocks_total, worker_server_kv(w.s)->n_blocks - 1);
    assert_int_equal(r->hello.max_model_len, 4096); /* the model's context; the cache holds more */
    assert_int_equal(r->n_heartbeat, 0);            /* nothing before WELCOME */
    fr_welcome(r, 50);
    double t0 = fr_now();
    fr_expect(r, WP_HEARTBEAT, WAIT_S * 3);
    fr_expect(r, WP_HEARTBEAT, WAIT_S * 3);
    fr_expect(r, WP_HEARTBEAT, WAIT_S * 3);
    double dt = fr_now() - t0;
    /* its own period (60 s, set before the start) would put the third heartbeat 120 s
     * after WELCOME; WELCOME's 50 ms puts it at 0.1 s. 30 s tells them apart on any machine */
    if (dt > 30.0)
        fail_msg("3 heartbeats at 50 ms took %.2f s: WELCOME's heartbeat_ms was not used", dt);
    assert_int_equal(r->load.kv_blocks_total, r->hello.kv_blocks_total);
    assert_int_equal(r->load.kv_blocks_free, r->load.kv_blocks_total);
    assert_int_equal(r->load.running, 0);
    /* the warm-up step ran before the first heartbeat, and is not reported as work */
    if (r->load.phase != WP_PHASE_READY)
        fail_msg("phase after WELCOME: expected ready, got %s", wp_phase_name(r->load.phase));
    if (r->load.steps != 0 || r->load.prompt_tokens != 0 || r->load.generated_tokens != 0)
        fail_msg("load before any request: expected 0 steps/prompt/generated, got %llu/%llu/%llu",
                 (unsigned long long)r->load.steps, (unsigned long long)r->load.prompt_tokens,
                 (unsigned long long)r->load.generated_tokens);
    stop_clean(&w);
    fr_destroy(&r);
}

static void test_greedy_tokens_equal_the_engine_in_process(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    start_registered(&w, r);
    int32_t prompt[100];
    make_prompt(prompt, 100, 1); /* longer than max_batch_tokens: a chunked prefill */
    wp_submit q = fr_submit_defaults(7, prompt, 100, 40);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    uint64_t rid = 7;
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "request 7 to finish");
    ref_out *ref = malloc(sizeof *ref);
    reference_run(&w, &q, ref);
    const fr_req *got = fr_req_of(r, 7);
    expect_same_as_reference(got, ref, 1);
    assert_int_equal(got->s[0].fin.reason, 1); /* length */
    assert_int_equal(got->s[0].fin.n_prompt, 100);
    assert_int_equal(got->s[0].n, 40);
    assert_int_equal(got->s[0].lps[0].n_top, 0); /* no logprobs asked, none sent */
    assert_true(r->n_step <= 40);                /* one STEP per engine step at most */
    r->load_from_heartbeat = false;
    fr_until(r, WAIT_S, fr_cond_idle_heartbeat, NULL, "an idle heartbeat after request 7");
    assert_int_equal(r->load.prompt_tokens, 100);
    assert_int_equal(r->load.generated_tokens, 40);
    assert_true(r->load.steps >= 3);              /* 100 prompt tokens in chunks of 64, then decode */
    if (!(r->load.tokens_per_s > 0))
        fail_msg("tokens_per_s %g just after generating 40 tokens", r->load.tokens_per_s);
    free(ref);
    stop_clean(&w);
    fr_destroy(&r);
}

static void test_speculating_worker_sends_the_same_tokens_and_counts_drafts(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    w.o.spec_proposer = "ngram";
    start_registered(&w, r);
    int32_t prompt[60];
    for (int i = 0; i < 60; i++) /* a repeating prompt: n-gram lookup has matches */
        prompt[i] = 3 + i % 10;
    wp_submit q = fr_submit_defaults(9, prompt, 60, 40);
    q.params.ignore_eos = true;
    q.params.sp.n_logprobs = 2;
    fr_submit(r, &q);
    uint64_t rid = 9;
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "request 9 to finish");
    ref_out *ref = malloc(sizeof *ref);
    reference_run(&w, &q, ref); /* no speculation */
    expect_same_as_reference(fr_req_of(r, 9), ref, 1);
    r->load_from_heartbeat = false;
    fr_until(r, WAIT_S, fr_cond_idle_heartbeat, NULL, "an idle heartbeat after request 9");
    if (r->load.spec.proposed == 0 || r->load.spec.accepted > r->load.spec.proposed ||
        r->load.spec.verifications == 0)
        fail_msg("load report: %llu drafts proposed, %llu accepted, %llu verifications; "
                 "expected drafts on a repeating prompt", (unsigned long long)r->load.spec.proposed,
                 (unsigned long long)r->load.spec.accepted,
                 (unsigned long long)r->load.spec.verifications);
    printf("  n-gram worker: 40 tokens identical to the engine without speculation; %llu drafts, "
           "%llu accepted, %llu verifications\n", (unsigned long long)r->load.spec.proposed,
           (unsigned long long)r->load.spec.accepted,
           (unsigned long long)r->load.spec.verifications);
    free(ref);
    stop_clean(&w);
    fr_destroy(&r);
}

static void test_n_samples_and_logprobs_pass_through(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    start_registered(&w, r);
    int32_t prompt[20];
    make_prompt(prompt, 20, 2);
    wp_submit q = fr_submit_defaults(9, prompt, 20, 12);
    q.params.n = 3;
    q.params.sp.temperature = 0.9f;
    q.params.sp.top_k = 50;
    q.params.seed = 1234;
    q.params.sp.n_logprobs = 3;
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    double end = fr_now() + WAIT_S;
    const fr_req *got = fr_req_of(r, 9);
    while (!(got->s[0].finished && got->s[1].finished && got->s[2].finished)) {
        if (fr_now() > end)
            fail_msg("request 9's three samples did not finish");
        fr_recv(r, 100);
    }
    ref_out *ref = malloc(sizeof *ref);
    reference_run(&w, &q, ref);
    expect_same_as_reference(got, ref, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(got->s[i].lps[0].n_top, 3);
    if (r->max_tokens_per_step < 3)
        fail_msg("every STEP carried at most %d tokens: three samples decode in one step, and "
                 "a step's tokens go out in one frame", r->max_tokens_per_step);
    bool differ = false; /* seeds seed + index: the samples are not copies of each other */
    for (int k = 0; k < 12; k++)
        differ |= got->s[0].tokens[k] != got->s[1].tokens[k];
    assert_true(differ);
    free(ref);
    stop_clean(&w);
    fr_destroy(&r);
}

static void test_abort_ends_the_request_and_frees_its_blocks(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    w.o.test_step_delay_ms = SLOW_STEP_MS; /* the 4000-token request outlasts the test */
    start_registered(&w, r);
    int32_t prompt[40];
    make_prompt(prompt, 40, 3);
    wp_submit q = fr_submit_defaults(11, prompt, 40, 4000);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    uint64_t rid = 11;
    fr_until(r, WAIT_S, fr_cond_has_token, &rid, "a first token of request 11");
    fr_abort(r, 11);
    fr_abort(r, 999); /* unknown: ignored */
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "request 11 to end after ABORT");
    const fr_sample *s = &fr_req_of(r, 11)->s[0];
    assert_int_equal(s->fin.reason, 2); /* abort */
    assert_true(s->n < 4000);
    r->load_from_heartbeat = false;
    fr_until(r, WAIT_S, fr_cond_idle_heartbeat, NULL,
             "a heartbeat with kv_blocks_free == kv_blocks_total after the abort");
    assert_int_equal(r->n_rejects, 0);
    stop_clean(&w);
    fr_destroy(&r);
}

static const fr_reject *reject_of(const fake_router *r, uint64_t rid)
{
    for (int i = 0; i < r->n_rejects; i++)
        if (r->rejects[i].rid == rid)
            return &r->rejects[i];
    fail_msg("no REJECT for request %llu", (unsigned long long)rid);
    return NULL;
}

static void test_bad_requests_are_rejected_with_their_code(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    start_registered(&w, r);
    int32_t prompt[10];
    make_prompt(prompt, 10, 4);
    prompt[5] = 1005; /* vocabulary is 1005 */
    wp_submit q = fr_submit_defaults(1, prompt, 10, 5);
    fr_submit(r, &q);
    make_prompt(prompt, 10, 4);
    q = fr_submit_defaults(2, prompt, 10, 4090); /* 10 + 4090 > 4096 */
    fr_submit(r, &q);
    q = fr_submit_defaults(3, prompt, 10, 5);
    q.params.sp.top_k = 2000; /* more than the vocabulary: the sampler refuses */
    fr_submit(r, &q);
    q = fr_submit_defaults(5, prompt, 10, 5);
    q.params.sp.temperature = -1; /* the worker's decoder refuses it: still answered, by rid */
    fr_submit(r, &q);
    q = fr_submit_defaults(4, prompt, 10, 5); /* a good one still runs */
    fr_submit(r, &q);
    int want = 4;
    fr_until(r, WAIT_S, fr_cond_rejects, &want, "four REJECTs");
    assert_int_equal(reject_of(r, 1)->code, PE_TOKEN_OUT_OF_RANGE);
    assert_non_null(strstr(reject_of(r, 1)->text, "1005"));
    assert_int_equal(reject_of(r, 2)->code, PE_CONTEXT_LENGTH_EXCEEDED);
    assert_non_null(strstr(reject_of(r, 2)->text, "4096"));
    assert_int_equal(reject_of(r, 3)->code, PE_VALUE_OUT_OF_RANGE);
    assert_non_null(strstr(reject_of(r, 3)->text, "top_k"));
    assert_int_equal(reject_of(r, 5)->code, PE_VALUE_OUT_OF_RANGE);
    assert_non_null(strstr(reject_of(r, 5)->text, "temperature"));
    uint64_t rid = 4;
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "request 4 to finish");
    assert_int_equal(r->n_rejects, 4);
    stop_clean(&w);
    fr_destroy(&r);
}

static void test_busy_and_draining_workers_reject_with_busy(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    w.o.test_step_delay_ms = SLOW_STEP_MS; /* the 4000-token request outlasts the test */
    w.o.max_seqs = 2;
    w.o.max_batch_tokens = 32;
    w.o.max_live_seqs = 2;
    start_registered(&w, r);
    int32_t prompt[10];
    make_prompt(prompt, 10, 5);
    wp_submit q = fr_submit_defaults(1, prompt, 10, 4000);
    q.params.n = 2; /* takes both live sequences */
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    q = fr_submit_defaults(2, prompt, 10, 5);
    fr_submit(r, &q);
    int want = 1;
    fr_until(r, WAIT_S, fr_cond_rejects, &want, "a REJECT of request 2");
    assert_int_equal(reject_of(r, 2)->code, PE_BUSY);
    fr_abort(r, 1);
    uint64_t rid = 1;
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "request 1 to end after ABORT");

    /* DRAIN: in-flight work goes on, new work is refused */
    q = fr_submit_defaults(3, prompt, 10, 30);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    fr_drain(r);
    q = fr_submit_defaults(4, prompt, 10, 5);
    fr_submit(r, &q);
    want = 2;
    fr_until(r, WAIT_S, fr_cond_rejects, &want, "a REJECT of request 4 after DRAIN");
    assert_int_equal(reject_of(r, 4)->code, PE_BUSY);
    assert_non_null(strstr(reject_of(r, 4)->text, "draining"));
    rid = 3;
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "request 3 to finish while draining");
    assert_int_equal(fr_req_of(r, 3)->s[0].n, 30);
    assert_int_equal(fr_req_of(r, 3)->s[0].fin.reason, 1);
    r->load_from_heartbeat = false;
    fr_until(r, WAIT_S, fr_cond_idle_heartbeat, NULL, "an idle heartbeat while draining");
    if (r->load.phase != WP_PHASE_DRAINING)
        fail_msg("phase after DRAIN: expected draining, got %s", wp_phase_name(r->load.phase));
    stop_clean(&w);
    fr_destroy(&r);
}

static void test_no_router_times_out_naming_what_to_check(void **state)
{
    char dir[64], ep[128];
    fr_unbound_endpoint(dir, sizeof dir, ep, sizeof ep);
    worker_thread w = {0};
    worker_opts_for_test(&w.o, ep);
    w.o.handshake_timeout_s = 0.3;
    double t0 = fr_now();
    worker_start(&w);
    worker_join(&w);
    double dt = fr_now() - t0;
    assert_int_equal(w.rc, DERAS_ETIMEOUT);
    assert_non_null(strstr(w.err, "no WELCOME from the router at ipc://"));
    assert_non_null(strstr(w.err, "within 0.3 s"));
    assert_non_null(strstr(w.err, "is deras-router running"));
    assert_non_null(strstr(w.err, "--workers"));
    assert_true(dt < WAIT_S); /* the model load included: only a hang could take this long */
    rmdir(dir);
}

static void test_refused_hello_ends_the_run_with_the_reason(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    worker_start(&w);
    fr_expect(r, WP_HELLO, WAIT_S);
    fr_refuse(r, "model mismatch: the group serves llama-3-8b");
    worker_join(&w);
    assert_int_equal(w.rc, DERAS_ECLOSED);
    assert_non_null(strstr(w.err, "refused"));
    assert_non_null(strstr(w.err, "model mismatch: the group serves llama-3-8b"));
    fr_destroy(&r);
}

static void test_refuse_while_registered_aborts_and_says_hello_again(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    w.o.test_step_delay_ms = SLOW_STEP_MS; /* the 4000-token request outlasts the test */
    start_registered(&w, r);
    int32_t prompt[30];
    make_prompt(prompt, 30, 6);
    wp_submit q = fr_submit_defaults(5, prompt, 30, 4000);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    uint64_t rid = 5;
    fr_until(r, WAIT_S, fr_cond_has_token, &rid, "a first token of request 5");
    fr_refuse(r, "unknown worker");         /* a restarted router */
    fr_expect(r, WP_HELLO, WAIT_S);
    assert_int_equal(r->n_hello, 2);
    int steps = r->n_step;
    fr_welcome(r, 50);
    r->load_from_heartbeat = false;
    fr_until(r, WAIT_S, fr_cond_idle_heartbeat, NULL,
             "an idle heartbeat with every block free after re-registering");
    assert_int_equal(r->n_step, steps); /* the aborts are not reported to the new router */
    assert_int_equal(fr_req_of(r, 5)->s[0].finished, 0);
    q = fr_submit_defaults(6, prompt, 30, 8); /* the new router's requests run */
    fr_submit(r, &q);
    rid = 6;
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "request 6 after re-registering");
    stop_clean(&w);
    fr_destroy(&r);
}

static void test_router_restart_is_answered_with_hello(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    w.o.test_step_delay_ms = SLOW_STEP_MS; /* the 4000-token request outlasts the test */
    start_registered(&w, r);
    int32_t prompt[30];
    make_prompt(prompt, 30, 10);
    wp_submit q = fr_submit_defaults(5, prompt, 30, 4000);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    uint64_t rid = 5;
    fr_until(r, WAIT_S, fr_cond_has_token, &rid, "a first token of request 5");
    fr_restart(r);
    /* the worker reconnects by itself; its next frame reaches a router that never heard of
     * it, which answers with REFUSE as a real one does */
    int type = 0;
    double end = fr_now() + WAIT_S;
    while ((type != WP_HEARTBEAT && type != WP_STEP) || r->peer_len == 0) { /* not a pulse */
        if (fr_now() > end)
            fail_msg("nothing from the worker after the router restarted");
        type = fr_recv(r, 100);
    }
    int hellos = r->n_hello;
    fr_refuse(r, "unknown worker wt: say HELLO");
    end = fr_now() + WAIT_S;
    while (r->n_hello == hellos) {
        if (fr_now() > end)
            fail_msg("no HELLO after REFUSE from the restarted router");
        fr_recv(r, 100); /* STEPs sent before the REFUSE arrived may come first */
    }
    fr_welcome(r, 50);
    r->load_from_heartbeat = false;
    fr_until(r, WAIT_S, fr_cond_idle_heartbeat, NULL, "an idle heartbeat after re-registering");
    stop_clean(&w);
    fr_destroy(&r);
}

static void test_shutdown_finishes_in_flight_work_then_returns(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    start_registered(&w, r);
    int32_t prompt[30];
    make_prompt(prompt, 30, 7);
    wp_submit q = fr_submit_defaults(8, prompt, 30, 50);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    fr_shutdown(r);
    q = fr_submit_defaults(9, prompt, 30, 5);
    fr_submit(r, &q);
    uint64_t rid = 8;
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "request 8 to finish after SHUTDOWN");
    assert_int_equal(fr_req_of(r, 8)->s[0].n, 50);
    assert_int_equal(fr_req_of(r, 8)->s[0].fin.reason, 1);
    int want = 1;
    fr_until(r, WAIT_S, fr_cond_rejects, &want, "a REJECT of request 9 after SHUTDOWN");
    assert_int_equal(reject_of(r, 9)->code, PE_BUSY);
    fr_until(r, WAIT_S, fr_cond_bye, NULL, "a BYE once request 8 finished");
    assert_string_equal(r->bye, "stopped, nothing in flight");
    worker_join(&w);
    assert_int_equal(w.rc, DERAS_OK);
    fr_destroy(&r);
}

static void test_stop_past_the_drain_timeout_says_bye_and_drops_what_is_left(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    w.o.test_step_delay_ms = SLOW_STEP_MS; /* the 4000-token request outlasts the test */
    w.o.drain_timeout_s = 0.2;
    start_registered(&w, r);
    int32_t prompt[30];
    make_prompt(prompt, 30, 8);
    wp_submit q = fr_submit_defaults(3, prompt, 30, 4000);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    uint64_t rid = 3;
    fr_until(r, WAIT_S, fr_cond_has_token, &rid, "a first token of request 3");
    worker_signal(&w);
    fr_until(r, WAIT_S, fr_cond_bye, NULL, "a BYE at the drain timeout");
    if (!strstr(r->bye, "drain timeout (0.2 s) ran out with 1 request in flight"))
        fail_msg("BYE reason: expected the drain timeout and 1 request, got \"%s\"", r->bye);
    /* dropped unreported: the router re-dispatches it or ends it with worker_failed */
    assert_int_equal(fr_req_of(r, 3)->s[0].finished, 0);
    worker_join(&w);
    assert_int_equal(w.rc, DERAS_OK);
    fr_destroy(&r);
}

static void test_second_stop_says_bye_at_once(void **state)
{
    fake_router *r = fr_new();
    worker_thread w = {0};
    worker_opts_for_test(&w.o, r->endpoint);
    w.o.test_step_delay_ms = SLOW_STEP_MS; /* the 4000-token request outlasts the test */
    start_registered(&w, r); /* drain timeout 30 s: only the second stop can end it soon */
    int32_t prompt[30];
    make_prompt(prompt, 30, 9);
    wp_submit q = fr_submit_defaults(4, prompt, 30, 4000);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    uint64_t rid = 4;
    fr_until(r, WAIT_S, fr_cond_has_token, &rid, "a first token of request 4");
    worker_signal(&w);
    worker_signal(&w);
    fr_until(r, WAIT_S, fr_cond_bye, NULL, "a BYE at the second stop");
    if (!strstr(r->bye, "second SIGTERM with 1 request in flight"))
        fail_msg("BYE reason: expected the second SIGTERM and 1 request, got \"%s\"", r->bye);
    assert_int_equal(fr_req_of(r, 4)->s[0].finished, 0);
    worker_join(&w);
    assert_int_equal(w.rc, DERAS_OK);
    fr_destroy(&r);
}

static void test_options_are_checked_before_loading(void **state)
{
    worker_opts o;
    worker_opts_default(&o);
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL); /* no model */
    assert_non_null(strstr(deras_errmsg(), "--model"));
    o.model = "m.gguf";
    assert_int_equal(worker_opts_check(&o), DERAS_OK);
    o.tp_size = 2;
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL); /* a group needs a name */
    assert_non_null(strstr(deras_errmsg(), "needs --name"));
    o.name = "g1";
    assert_int_equal(worker_opts_check(&o), DERAS_OK);
    o.tp_timeout_s = 0;
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "--tp-timeout"));
    o.tp_timeout_s = 60;
    o.name = NULL;
    o.tp_size = 1;
    o.tp_rank = 1;
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    o.tp_rank = 0;
    o.max_batch_tokens = 32; /* < max_seqs 64 */
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "--max-batch-tokens"));
    o.max_batch_tokens = 512;
    o.kv_cache_memory = "2.5";
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "--kv-cache-memory"));
    o.kv_cache_memory = "1GiB";
    o.device = "tpu";
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    o.device = "cuda:1";
    assert_int_equal(worker_opts_check(&o), DERAS_OK);
    o.device = "cpu";
    o.name = "has space";
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    o.name = "w0";
    o.router = "workers.sock";
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    o.router = NULL;
    o.spec_proposer = "tree";
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "--spec-proposer"));
    o.spec_proposer = "ngram";
    o.spec_k = 17;
    assert_int_equal(worker_opts_check(&o), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "--spec-k"));
    o.spec_k = 4;
    assert_int_equal(worker_opts_check(&o), DERAS_OK);
}

int main(int argc, char **argv)
{
    model_dir = test_data_path("tiny-chat");
    struct stat st;
    if (stat(model_dir, &st))
        test_skip("%s not found", model_dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_are_checked_before_loading),
        cmocka_unit_test(test_handshake_hello_describes_the_worker_then_heartbeats),
        cmocka_unit_test(test_greedy_tokens_equal_the_engine_in_process),
        cmocka_unit_test(test_speculating_worker_sends_the_same_tokens_and_counts_drafts),
        cmocka_unit_test(test_n_samples_and_logprobs_pass_through),
        cmocka_unit_test(test_abort_ends_the_request_and_frees_its_blocks),
        cmocka_unit_test(test_bad_requests_are_rejected_with_their_code),
        cmocka_unit_test(test_busy_and_draining_workers_reject_with_busy),
        cmocka_unit_test(test_no_router_times_out_naming_what_to_check),
        cmocka_unit_test(test_refused_hello_ends_the_run_with_the_reason),
        cmocka_unit_test(test_refuse_while_registered_aborts_and_says_hello_again),
        cmocka_unit_test(test_router_restart_is_answered_with_hello),
        cmocka_unit_test(test_shutdown_finishes_in_flight_work_then_returns),
        cmocka_unit_test(test_stop_past_the_drain_timeout_says_bye_and_drops_what_is_left),
        cmocka_unit_test(test_second_stop_says_bye_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
