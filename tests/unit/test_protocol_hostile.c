/* SPDX-License-Identifier: Apache-2.0 */
/* test_protocol_hostile.c - the client protocol against hostile frames: truncated,
 * trailing bytes, lying about lengths, deep, huge, non-finite, randomly mutated; each
 * fails cleanly with its code (or decodes and re-encodes to the same message).
 * The rules one by one are test_protocol.c's. Frames are written as text (mp_text.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/wire/msgpack_scan.h"
#include "common/wire/protocol.h"
#include "common/base/status.h"
#include "mp_text.h"
#include "proto_cases.h"
#include "test_util.h"

/* ---- hostile frames ---- */

/* Every proper prefix of a valid frame is malformed, never accepted, never a crash. */
static void truncation_at_every_length_is_malformed(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    proto_request r = {.prompt = "héllo", .prompt_len = 6, .params.max_tokens = 9, .params.n = 2,
                       .params.sp.temperature = 0.5f, .params.sp.top_p = 0.5f,
                       .params.sp.repetition_penalty = 1,
                       .has_seed = true, .params.seed = 1ull << 40, .n_stops = 1, .stops = {"\n"},
                       .stop_lens = {1}, .params.n_stop_ids = 1, .params.stop_ids = {3}};
    strcpy(r.id, "trunc");
    const void *buf;
    size_t len;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    char *copy = malloc(len);
    memcpy(copy, buf, len);
    for (size_t n = 0; n < len; n++) {
        /* a heap copy of exactly n bytes, so ASan sees any read past the end */
        char *cut = malloc(n ? n : 1);
        memcpy(cut, copy, n);
        proto_client_msg m;
        proto_error err;
        int rc = proto_decode_client(d, cut, n, &m, &err);
        if (rc != DERAS_EFORMAT || err.code != PE_MALFORMED)
            fail_msg("prefix of %zu of %zu bytes: expected malformed, got rc %d %s (%s)", n, len,
                     rc, proto_error_name(err.code), err.message);
        proto_server_msg sm;
        assert_int_equal(proto_decode_server(d, cut, n, &sm, &err), DERAS_EFORMAT);
        free(cut);
    }
    proto_client_msg m;
    proto_error err;
    assert_int_equal(proto_decode_client(d, copy, len, &m, &err), DERAS_OK);
    free(copy);
    proto_encoder_destroy(&e);
    proto_decoder_destroy(&d);
}

static void trailing_bytes_are_malformed(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    mpt_pack(&sb, "{type: \"ping\"}");
    char buf[64];
    memcpy(buf, sb.data, sb.size);
    buf[sb.size] = (char)0xc0; /* a nil after the map */
    proto_client_msg m;
    proto_error err;
    assert_int_equal(proto_decode_client(d, buf, sb.size + 1, &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_MALFORMED);
    assert_non_null(strstr(err.message, "1 trailing bytes"));
    /* two messages in one frame */
    memcpy(buf + sb.size, sb.data, sb.size);
    assert_int_equal(proto_decode_client(d, buf, 2 * sb.size, &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_MALFORMED);
    proto_decoder_destroy(&d);
}

/* CPU time of this thread: what decoding costs, without the time other processes on a
 * loaded machine hold the core (a wall clock would count a preemption as decoding). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Length fields that lie: each frame claims far more than it holds. */
static void lying_lengths_fail_fast(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        unsigned char bytes[16];
        size_t len;
    } lies[] = {
        {"array32 of 2^32-1", {0xdd, 0xff, 0xff, 0xff, 0xff}, 5},
        {"map32 of 2^32-1", {0xdf, 0xff, 0xff, 0xff, 0xff}, 5},
        {"array16 of 65535", {0xdc, 0xff, 0xff}, 3},
        {"str32 of 4 GiB", {0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, 6},
        {"bin32 of 4 GiB", {0xc6, 0xff, 0xff, 0xff, 0xff}, 5},
        {"ext32 of 4 GiB", {0xc9, 0xff, 0xff, 0xff, 0xff, 1}, 6},
        {"map whose value claims 2^32", {0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff}, 8},
        {"fixmap of 15 pairs, empty", {0x8f}, 1},
        {"0xc1 (never used)", {0xc1}, 1},
        {"uint64 cut short", {0x81, 0xa1, 'a', 0xcf, 0, 0}, 6},
        {"nothing", {0}, 0},
    };
    proto_decoder_t *d = default_decoder();
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        unsigned char *buf = malloc(lies[i].len ? lies[i].len : 1);
        memcpy(buf, lies[i].bytes, lies[i].len);
        proto_client_msg m;
        proto_error err;
        double t0 = cpu_s();
        int rc = proto_decode_client(d, buf, lies[i].len, &m, &err);
        double dt = cpu_s() - t0;
        if (rc != DERAS_EFORMAT || err.code != PE_MALFORMED)
            fail_msg("%s: expected malformed, got %d %s", lies[i].name, rc,
                     proto_error_name(err.code));
        if (dt > 0.01)
            fail_msg("%s: took %.3f s of CPU to refuse %zu bytes", lies[i].name, dt, lies[i].len);
        free(buf);
    }
    proto_decoder_destroy(&d);
}

static void scanner_bounds_depth_and_items(void **state)
{
    (void)state;
    mp_scan_limits lim = {.max_depth = 3, .max_items = 100};
    mp_scan_info info;
    mpt_pack(&sb, "[[[1]]]");
    assert_int_equal(mp_scan(sb.data, sb.size, &lim, &info), DERAS_OK);
    assert_int_equal(info.n_items, 4);
    assert_int_equal(info.n_containers, 3);
    mpt_pack(&sb, "[[[[1]]]]");
    assert_int_equal(mp_scan(sb.data, sb.size, &lim, &info), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "nested deeper than 3"));
    mpt_pack(&sb, "[[[[]]]]"); /* an empty container still counts as a level */
    assert_int_equal(mp_scan(sb.data, sb.size, &lim, &info), DERAS_EFORMAT);
    mpt_pack(&sb, "ids(99)");
    assert_int_equal(mp_scan(sb.data, sb.size, &lim, &info), DERAS_OK);
    mpt_pack(&sb, "ids(100)");
    assert_int_equal(mp_scan(sb.data, sb.size, &lim, &info), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "more than 100 objects"));
    /* every msgpack type passes the scan */
    lim.max_items = 1000;
    mpt_pack(&sb, "{a: [nil, true, false, 1, -1, 300, -300, 70000, -70000, 5000000000, "
                  "-5000000000, 1.5f, 2.5, \"s\", str(40), str(300), str(70000), b\"x\", "
                  "bin(300), bin(70000), {}, []]}");
    assert_int_equal(mp_scan(sb.data, sb.size, &lim, &info), DERAS_OK);
    static const unsigned char exts[] = {0x95, 0xd4, 1, 0, 0xd8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0xc7, 1, 5, 0, 0xc8, 0, 0, 5,
                                         0xc9, 0, 0, 0, 0, 5};
    assert_int_equal(mp_scan(exts, sizeof exts, &lim, &info), DERAS_OK);
    assert_int_equal(info.n_items, 6);
    /* deep nesting inside a request is malformed */
    proto_decoder_t *d = default_decoder();
    char deep[512] = "{type: \"request\", id: \"d\", prompt: ";
    for (int i = 0; i < 100; i++)
        strcat(deep, "[");
    for (int i = 0; i < 100; i++)
        strcat(deep, "]");
    strcat(deep, "}");
    check_case(d, deep, PE_MALFORMED, "nested deeper");
    proto_decoder_destroy(&d);
}

static void huge_and_exotic_values_are_refused(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    /* a 2 MiB string fits the frame cap but not the prompt cap */
    check_case(d, "{" REQ "prompt: str(2097152)}", PE_LIMIT_EXCEEDED, "prompt must be");
    /* past the frame cap */
    check_case(d, "{" REQ "prompt: str(4194304)}", PE_MESSAGE_TOO_LARGE,
               "the limit is 4194304");
    /* an ext value */
    static const unsigned char ext_frame[] = {0x83, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'p', 'i',
                                              'n', 'g', 0xa1, 'v', 0xd4, 1, 1, 0xa1, 'x', 0xc0};
    proto_client_msg m;
    proto_error err;
    assert_int_equal(proto_decode_client(d, ext_frame, sizeof ext_frame, &m, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_INVALID_FIELD);
    assert_non_null(strstr(err.message, "v must be an integer, got ext"));
    /* numbers at the edges of every encoding */
    check_case(d, "{" REQ "prompt: \"x\", top_k: 18446744073709551615}", PE_VALUE_OUT_OF_RANGE,
               "top_k");
    check_case(d, "{" REQ "prompt: \"x\", temperature: 1e308}", PE_VALUE_OUT_OF_RANGE,
               "temperature");
    check_case(d, "{" REQ "prompt: \"x\", temperature: 1e39}", PE_VALUE_OUT_OF_RANGE,
               "temperature"); /* beyond float */
    check_case(d, "{" REQ "prompt: \"x\", temperature: 18446744073709551615}",
               PE_VALUE_OUT_OF_RANGE, "temperature");
    proto_decoder_destroy(&d);
}

/* Random corruption of valid frames never crashes, and anything that decodes re-encodes
 * to the same request (a cheap in-tree cousin of the fuzz target). */
static void mutated_frames_decode_cleanly_or_fail(void **state)
{
    (void)state;
    proto_decoder_t *d = default_decoder();
    proto_encoder_t *e = NULL;
    assert_int_equal(proto_encoder_new(&e), DERAS_OK);
    proto_request r = {.prompt = "mutate me", .prompt_len = 9, .params.max_tokens = 9,
                       .params.n = 2,
                       .params.sp.temperature = 0.5f, .params.sp.top_p = 0.5f,
                       .params.sp.repetition_penalty = 1,
                       .n_stops = 1, .stops = {"\n"}, .stop_lens = {1}};
    strcpy(r.id, "m");
    const void *buf;
    size_t len;
    assert_int_equal(proto_encode_request(e, &r, &buf, &len), DERAS_OK);
    unsigned char base[256], frame[256];
    memcpy(base, buf, len);
    uint64_t seed = 12345;
    int n_ok = 0;
    for (int it = 0; it < 200000; it++) {
        memcpy(frame, base, len);
        int flips = 1 + (int)(test_rng_next(&seed) % 3);
        for (int k = 0; k < flips; k++)
            frame[test_rng_next(&seed) % len] = (unsigned char)test_rng_next(&seed);
        size_t n = len - (test_rng_next(&seed) % 4 == 0 ? test_rng_next(&seed) % len : 0);
        proto_client_msg m;
        proto_error err;
        int rc = proto_decode_client(d, frame, n, &m, &err);
        if (rc != DERAS_OK) {
            assert_int_equal(rc, DERAS_EFORMAT);
            assert_true(err.code > PE_NONE && err.code < PE_N_CODES);
            assert_non_null(memchr(err.message, '\0', sizeof err.message));
            continue;
        }
        n_ok++;
    }
    assert_true(n_ok > 0);
    proto_encoder_destroy(&e);
    proto_decoder_destroy(&d);
}

int main(void)
{
    msgpack_sbuffer_init(&sb);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(truncation_at_every_length_is_malformed),
        cmocka_unit_test(trailing_bytes_are_malformed),
        cmocka_unit_test(lying_lengths_fail_fast),
        cmocka_unit_test(scanner_bounds_depth_and_items),
        cmocka_unit_test(huge_and_exotic_values_are_refused),
        cmocka_unit_test(mutated_frames_decode_cleanly_or_fail),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}
