/* SPDX-License-Identifier: Apache-2.0 */
/* test_client.c - the C client library (tools/client) against a fake router thread.
 *
 * The fake router (fake_frontend.c) speaks the protocol through the real codec, so these
 * tests pin down what a client program sees: events of a request in order, tagged with its
 * user pointer and flagged done on the last one; errors with their codes; timeouts instead
 * of hangs; many requests in flight; cancel; ping between request events; CURVE.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/status.h"
#include "fake_frontend.h"
#include "test_util.h"
#include "tools/client/deras_client.h"

#define WAIT_MS 30000 /* a reply that must come: only a hang waits this long */

typedef struct fixture {
    fake_frontend *router;
    deras_client_t *cl;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->router = fake_frontend_start(NULL);
    assert_non_null(f->router);
    assert_int_equal(deras_client_new(&(deras_client_opts){
                         .address = fake_frontend_address(f->router)}, &f->cl), DERAS_OK);
    assert_non_null(f->cl);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    deras_client_destroy(&f->cl);
    assert_null(f->cl);
    fake_frontend_stop(&f->router, NULL);
    free(f);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void text_request(proto_request *r, const char *prompt, int max_tokens, bool stream)
{
    deras_client_request_init(r);
    r->prompt = prompt;
    r->prompt_len = strlen(prompt);
    r->params.max_tokens = max_tokens;
    r->stream = stream;
}

static void expected_text(char *buf, size_t cap, int from, int to)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = from; i < to; i++)
        n += (size_t)snprintf(buf + n, cap - n, "w%d ", i);
}

/* Receive one event, failing the test (with the client's message) on anything but OK. */
static void recv_ok(deras_client_t *cl, deras_event *ev)
{
    int rc = deras_client_recv(cl, WAIT_MS, ev);
    if (rc)
        fail_msg("expected an event, got %s: %s", deras_status_name(rc), deras_errmsg());
}

static void test_stream_delivers_chunks_then_a_final_marked_done(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "hello world", 5, true);
    int tag;
    assert_int_equal(deras_client_send(f->cl, &r, &tag), DERAS_OK);
    assert_int_equal(strlen(r.id), 32);
    assert_int_equal(deras_client_n_in_flight(f->cl), 1);
    char text[256] = "", want[256];
    for (int i = 0;; i++) {
        deras_event ev;
        recv_ok(f->cl, &ev);
        assert_true(ev.known);
        assert_ptr_equal(ev.user, &tag);
        assert_string_equal(ev.msg.id, r.id);
        if (ev.msg.type == PROTO_FINAL) {
            assert_int_equal(i, 5);
            assert_true(ev.done);
            assert_int_equal(ev.msg.finish, FINISH_LENGTH);
            assert_int_equal(ev.msg.usage.prompt_tokens, 2);
            assert_int_equal(ev.msg.usage.completion_tokens, 5);
            break;
        }
        assert_int_equal(ev.msg.type, PROTO_CHUNK);
        assert_false(ev.done);
        assert_int_equal(ev.msg.n_token_ids, 1);
        assert_int_equal(ev.msg.token_ids[0], 100 + i);
        strncat(text, ev.msg.text, ev.msg.text_len);
    }
    expected_text(want, sizeof want, 0, 5);
    assert_string_equal(text, want);
    assert_int_equal(deras_client_n_in_flight(f->cl), 0);
}

static void test_non_stream_final_carries_text_and_ids(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "stop:3", 10, false);
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_OK);
    deras_event ev;
    recv_ok(f->cl, &ev);
    assert_int_equal(ev.msg.type, PROTO_FINAL);
    assert_true(ev.done);
    assert_int_equal(ev.msg.finish, FINISH_STOP);
    char want[64];
    expected_text(want, sizeof want, 0, 3);
    assert_int_equal(ev.msg.text_len, strlen(want));
    assert_memory_equal(ev.msg.text, want, strlen(want));
    assert_int_equal(ev.msg.n_token_ids, 3);
    assert_int_equal(ev.msg.token_ids[2], 102);
}

static void test_done_only_after_the_last_sample_finished(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "p", 2, true);
    r.params.n = 3;
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_OK);
    int finals = 0, chunks[3] = {0};
    for (;;) {
        deras_event ev;
        recv_ok(f->cl, &ev);
        assert_true(ev.msg.index >= 0 && ev.msg.index < 3);
        if (ev.msg.type == PROTO_CHUNK) {
            assert_int_equal(ev.msg.token_ids[0], 100 + 10 * ev.msg.index + chunks[ev.msg.index]);
            chunks[ev.msg.index]++;
            continue;
        }
        finals++;
        if (ev.done)
            break;
    }
    assert_int_equal(finals, 3);
    assert_int_equal(chunks[0] + chunks[1] + chunks[2], 6);
}

static void test_prompt_ids_reach_the_router(void **state)
{
    fixture *f = *state;
    proto_request r;
    deras_client_request_init(&r);
    int32_t ids[] = {1, 2, 3, 4, 5, 6, 7};
    r.prompt_ids = ids;
    r.n_prompt_ids = 7;
    r.params.max_tokens = 1;
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_OK);
    deras_event ev;
    recv_ok(f->cl, &ev);
    assert_int_equal(ev.msg.type, PROTO_FINAL);
    assert_int_equal(ev.msg.usage.prompt_tokens, 7);
}

static void test_server_error_ends_the_request_with_its_code(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "error:context_length_exceeded", 5, true);
    int tag;
    assert_int_equal(deras_client_send(f->cl, &r, &tag), DERAS_OK);
    deras_event ev;
    recv_ok(f->cl, &ev);
    assert_int_equal(ev.msg.type, PROTO_ERROR);
    assert_int_equal(ev.msg.code, PE_CONTEXT_LENGTH_EXCEEDED);
    assert_non_null(strstr(ev.msg.message, "fake failure"));
    assert_true(ev.known && ev.done);
    assert_ptr_equal(ev.user, &tag);
    assert_int_equal(deras_client_n_in_flight(f->cl), 0);
}

static void test_silent_router_times_out(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "silent", 5, true);
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_OK);
    deras_event ev;
    double t0 = now_s();
    assert_int_equal(deras_client_recv(f->cl, 200, &ev), DERAS_ETIMEOUT);
    double dt = now_s() - t0;
    /* never early; late only by scheduling on a loaded machine (10 s: a hang guard) */
    if (dt < 0.19 || dt > 10.0)
        fail_msg("expected a timeout after about 0.2 s, took %.3f s", dt);
    assert_non_null(strstr(deras_errmsg(), "no reply"));
    assert_int_equal(deras_client_recv(f->cl, 0, &ev), DERAS_ETIMEOUT);
    deras_client_forget(f->cl, r.id);
    assert_int_equal(deras_client_n_in_flight(f->cl), 0);
}

static void test_no_router_times_out_instead_of_hanging(void **state)
{
    deras_client_t *cl = NULL;
    assert_int_equal(deras_client_new(&(deras_client_opts){.address = "tcp://127.0.0.1:1"}, &cl),
                     DERAS_OK);
    assert_non_null(cl);
    proto_request r;
    text_request(&r, "p", 5, true);
    assert_int_equal(deras_client_send(cl, &r, NULL), DERAS_OK);
    deras_event ev;
    assert_int_equal(deras_client_recv(cl, 100, &ev), DERAS_ETIMEOUT);
    proto_server_msg pong;
    assert_int_equal(deras_client_ping(cl, 100, &pong), DERAS_ETIMEOUT);
    deras_client_destroy(&cl);
}

/* 200 requests of different lengths in flight at once: each gets all of its own tokens, in
 * order, and the table of live ids empties (probing and backward-shift deletion). */
static void test_many_requests_in_flight_each_get_their_own_events(void **state)
{
    fixture *f = *state;
    enum { N = 200 };
    static int got[N], finals[N];
    memset(got, 0, sizeof got);
    memset(finals, 0, sizeof finals);
    for (int i = 0; i < N; i++) {
        proto_request r;
        text_request(&r, "p", 1 + i % 7, true);
        assert_int_equal(deras_client_send(f->cl, &r, &got[i]), DERAS_OK);
    }
    assert_int_equal(deras_client_n_in_flight(f->cl), N);
    int done = 0;
    while (done < N) {
        deras_event ev;
        recv_ok(f->cl, &ev);
        assert_true(ev.known);
        int i = (int)((int *)ev.user - got);
        assert_true(i >= 0 && i < N);
        if (ev.msg.type == PROTO_CHUNK) {
            assert_int_equal(ev.msg.token_ids[0], 100 + got[i]);
            got[i]++;
        } else {
            assert_int_equal(ev.msg.type, PROTO_FINAL);
            assert_true(ev.done);
            finals[i]++;
            done++;
        }
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(got[i], 1 + i % 7);
        assert_int_equal(finals[i], 1);
    }
    assert_int_equal(deras_client_n_in_flight(f->cl), 0);
}

static void test_cancel_ends_the_request_with_abort(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "hold:2", 1000, true); /* 2 tokens, then nothing until cancelled */
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_OK);
    deras_event ev;
    recv_ok(f->cl, &ev);
    assert_int_equal(ev.msg.type, PROTO_CHUNK);
    assert_int_equal(deras_client_cancel(f->cl, r.id), DERAS_OK);
    int chunks = 1;
    for (;;) {
        recv_ok(f->cl, &ev);
        if (ev.msg.type != PROTO_CHUNK)
            break;
        chunks++;
    }
    assert_int_equal(ev.msg.type, PROTO_FINAL);
    assert_int_equal(ev.msg.finish, FINISH_ABORT);
    assert_string_equal(ev.msg.abort_reason, "cancelled");
    assert_true(ev.done);
    assert_int_equal(chunks, 2); /* the held request ended by the cancel, not by itself */
}

static void test_ping_between_request_events_keeps_them_in_order(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "p", 50, true);
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_OK);
    /* the fake sends the whole stream (50 chunks and the final) before it sees the ping */
    double end = now_s() + WAIT_MS / 1000.0;
    while (fake_frontend_frames_sent(f->router) < 51) {
        if (now_s() > end)
            fail_msg("the fake sent %d of 51 frames", fake_frontend_frames_sent(f->router));
        usleep(1000);
    }
    proto_server_msg pong;
    assert_int_equal(deras_client_ping(f->cl, WAIT_MS, &pong), DERAS_OK);
    assert_int_equal(pong.type, PROTO_PONG);
    assert_int_equal(pong.n_workers, 1);
    assert_string_equal(pong.workers[0].name, "fake0");
    assert_string_equal(pong.workers[0].state, "ready");
    for (int i = 0; i < 50; i++) {
        deras_event ev;
        recv_ok(f->cl, &ev);
        assert_int_equal(ev.msg.type, PROTO_CHUNK);
        assert_int_equal(ev.msg.token_ids[0], 100 + i);
    }
    deras_event ev;
    recv_ok(f->cl, &ev);
    assert_int_equal(ev.msg.type, PROTO_FINAL);
    assert_true(ev.done);
}

static void test_forgotten_request_events_are_unknown(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "p", 3, true);
    assert_int_equal(deras_client_send(f->cl, &r, &r), DERAS_OK);
    deras_client_forget(f->cl, r.id);
    assert_int_equal(deras_client_n_in_flight(f->cl), 0);
    for (int i = 0; i < 4; i++) {
        deras_event ev;
        recv_ok(f->cl, &ev);
        assert_false(ev.known);
        assert_false(ev.done);
        assert_null(ev.user);
        assert_string_equal(ev.msg.id, r.id);
    }
}

static void test_refuses_bad_requests_and_overflow(void **state)
{
    fixture *f = *state;
    proto_request r;
    text_request(&r, "p", 3, true);
    int32_t ids[1] = {1};
    r.prompt_ids = ids;
    r.n_prompt_ids = 1;
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_EINVAL); /* both prompts */
    text_request(&r, "p", 3, true);
    r.params.n = 0;
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_EINVAL);
    text_request(&r, "silent", 3, true);
    snprintf(r.id, sizeof r.id, "mine");
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_OK);
    assert_string_equal(r.id, "mine");
    assert_int_equal(deras_client_send(f->cl, &r, NULL), DERAS_EINVAL); /* id in flight */
    assert_non_null(strstr(deras_errmsg(), "already in flight"));
    assert_int_equal(deras_client_cancel(f->cl, ""), DERAS_EINVAL);

    deras_client_t *small = NULL;
    assert_int_equal(deras_client_new(&(deras_client_opts){
        .address = fake_frontend_address(f->router), .max_in_flight = 2}, &small), DERAS_OK);
    assert_non_null(small);
    for (int i = 0; i < 2; i++) {
        text_request(&r, "silent", 3, true);
        assert_int_equal(deras_client_send(small, &r, NULL), DERAS_OK);
    }
    text_request(&r, "silent", 3, true);
    assert_int_equal(deras_client_send(small, &r, NULL), DERAS_EBUSY);
    deras_client_destroy(&small);

    deras_client_t *refused = (deras_client_t *)(uintptr_t)1; /* a refusal NULLs *out */
    assert_int_equal(deras_client_new(&(deras_client_opts){.curve_server_key = "short"}, &refused),
                     DERAS_EINVAL);
    assert_null(refused);
    assert_non_null(strstr(deras_errmsg(), "40 Z85"));
    refused = (deras_client_t *)(uintptr_t)1;
    assert_int_equal(deras_client_new(&(deras_client_opts){.address = "nonsense://x"}, &refused),
                     DERAS_EIO);
    assert_null(refused);
    deras_client_destroy(NULL);
}

static void test_request_init_sets_protocol_defaults(void **state)
{
    proto_request r;
    memset(&r, 0x5a, sizeof r);
    deras_client_request_init(&r);
    assert_int_equal(r.params.max_tokens, 256);
    assert_int_equal(r.params.n, 1);
    assert_true(r.params.sp.temperature == 1.0f && r.params.sp.top_p == 1.0f &&
                r.params.sp.repetition_penalty == 1.0f);
    assert_true(r.params.sp.min_p == 0 && r.params.sp.presence_penalty == 0 &&
                r.params.sp.frequency_penalty == 0);
    assert_int_equal(r.params.sp.top_k, 0);
    assert_true(r.add_special_tokens);
    assert_false(r.stream || r.params.ignore_eos || r.has_seed);
    assert_null(r.prompt);
    assert_null(r.prompt_ids);
    assert_string_equal(r.id, "");
}

static void test_curve_encrypts_and_a_wrong_key_times_out(void **state)
{
    char pub[41], sec[41], wrong[41], wsec[41];
    if (zmq_curve_keypair(pub, sec))
        test_skip("libzmq without CURVE");
    zmq_curve_keypair(wrong, wsec);
    fake_frontend *fr = fake_frontend_start(sec);
    assert_non_null(fr);
    deras_client_t *good = NULL, *bad = NULL;
    assert_int_equal(deras_client_new(&(deras_client_opts){.address = fake_frontend_address(fr),
                                                           .curve_server_key = pub}, &good),
                     DERAS_OK);
    assert_int_equal(deras_client_new(&(deras_client_opts){.address = fake_frontend_address(fr),
                                                           .curve_server_key = wrong}, &bad),
                     DERAS_OK);
    assert_non_null(good);
    assert_non_null(bad);
    proto_server_msg pong;
    assert_int_equal(deras_client_ping(good, WAIT_MS, &pong), DERAS_OK);
    proto_request r;
    text_request(&r, "p", 2, false);
    assert_int_equal(deras_client_send(bad, &r, NULL), DERAS_OK);
    deras_event ev;
    assert_int_equal(deras_client_recv(bad, 300, &ev), DERAS_ETIMEOUT);
    /* a given client key: the public key is derived from it */
    deras_client_t *mine = NULL;
    assert_int_equal(deras_client_new(&(deras_client_opts){
        .address = fake_frontend_address(fr), .curve_server_key = pub, .curve_secret_key = wsec},
        &mine), DERAS_OK);
    assert_non_null(mine);
    assert_int_equal(deras_client_ping(mine, WAIT_MS, &pong), DERAS_OK);
    deras_client_destroy(&mine);
    deras_client_destroy(&good);
    deras_client_destroy(&bad);
    fake_frontend_stats st;
    fake_frontend_stop(&fr, &st);
    assert_int_equal(st.pings, 2);
    assert_int_equal(st.requests, 0);

    /* refused at construction: a secret key without the server's, a key that is not Z85 */
    deras_client_t *refused = (deras_client_t *)(uintptr_t)1; /* a refusal NULLs *out */
    assert_int_equal(deras_client_new(&(deras_client_opts){.curve_secret_key = wsec}, &refused),
                     DERAS_EINVAL);
    assert_null(refused);
    assert_non_null(strstr(deras_errmsg(), "public key too"));
    char bad_key[41];
    memset(bad_key, '~', 40);
    bad_key[40] = '\0';
    refused = (deras_client_t *)(uintptr_t)1;
    assert_int_equal(deras_client_new(&(deras_client_opts){.curve_server_key = pub,
                                                           .curve_secret_key = bad_key},
                                      &refused), DERAS_EINVAL);
    assert_null(refused);
    assert_non_null(strstr(deras_errmsg(), "not a valid Z85 key"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stream_delivers_chunks_then_a_final_marked_done,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_stream_final_carries_text_and_ids, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_done_only_after_the_last_sample_finished, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_prompt_ids_reach_the_router, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_error_ends_the_request_with_its_code, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_silent_router_times_out, setup, teardown),
        cmocka_unit_test(test_no_router_times_out_instead_of_hanging),
        cmocka_unit_test_setup_teardown(test_many_requests_in_flight_each_get_their_own_events,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_ends_the_request_with_abort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ping_between_request_events_keeps_them_in_order,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_forgotten_request_events_are_unknown, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_refuses_bad_requests_and_overflow, setup, teardown),
        cmocka_unit_test(test_request_init_sets_protocol_defaults),
        cmocka_unit_test(test_curve_encrypts_and_a_wrong_key_times_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
