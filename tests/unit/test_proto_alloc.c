/* SPDX-License-Identifier: Apache-2.0 */
/* test_proto_alloc.c - what decoding costs in memory: warm codecs allocate nothing per
 * message, a frame that lies about its lengths allocates nothing at all, the memory any
 * hostile frame makes a decoder allocate is a bounded multiple of the frame's size, and
 * 100k hostile decodes leave live memory and RSS where they were.
 *
 * The counting allocator replaces malloc/calloc/realloc/free for the whole process
 * (msgpack-c's shared library included) and forwards to glibc's __libc_* entry points,
 * measuring blocks with malloc_usable_size. Sanitizers own malloc, so under them this
 * test skips (it is also labelled no-sanitize).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/wire/protocol.h"
#include "common/base/status.h"
#include "common/wire/worker_proto.h"
#include "mp_text.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

#ifndef SANITIZED
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

static size_t n_allocs;      /* malloc, calloc and growing reallocs */
static int64_t live, peak;   /* bytes */

static void took(void *p)
{
    n_allocs++;
    live += (int64_t)malloc_usable_size(p);
    if (live > peak)
        peak = live;
}

void *malloc(size_t n)
{
    void *p = __libc_malloc(n);
    if (p)
        took(p);
    return p;
}

void *calloc(size_t n, size_t size)
{
    void *p = __libc_calloc(n, size);
    if (p)
        took(p);
    return p;
}

void *realloc(void *p, size_t n)
{
    int64_t old = p ? (int64_t)malloc_usable_size(p) : 0;
    void *q = __libc_realloc(p, n);
    if (q) {
        live -= old;
        took(q);
    } else if (n == 0) {
        live -= old;
    }
    return q;
}

void free(void *p)
{
    if (p)
        live -= (int64_t)malloc_usable_size(p);
    __libc_free(p);
}
#else
static size_t n_allocs;
static int64_t live, peak;
#endif

static msgpack_sbuffer sb;

/* A hostile or ordinary frame and which decoder gets it. */
enum which { CLIENT, SERVER, WORKER };

static int decode(enum which w, proto_decoder_t *pd, wp_decoder_t *wd, const void *buf, size_t len)
{
    proto_error err;
    if (w == CLIENT) {
        proto_client_msg m;
        return proto_decode_client(pd, buf, len, &m, &err);
    }
    if (w == SERVER) {
        proto_server_msg m;
        return proto_decode_server(pd, buf, len, &m, &err);
    }
    wp_msg m;
    return wp_decode(wd, buf, len, &m, &err);
}

static void warm_codecs_allocate_nothing_per_message(void **state)
{
    (void)state;
    proto_decoder_t *pd = NULL;
    assert_int_equal(proto_decoder_new(NULL, &pd), DERAS_OK);
    wp_decoder_t *wd = NULL;
    assert_int_equal(wp_decoder_new(0, &wd), DERAS_OK);
    proto_encoder_t *pe = NULL;
    assert_int_equal(proto_encoder_new(&pe), DERAS_OK);
    wp_encoder_t *we = NULL;
    assert_int_equal(wp_encoder_new(&we), DERAS_OK);
    static int32_t ids[64];
    static const proto_logprob lps[4] = {{.token_id = 1, .logprob = -1, .n_top = 2}};
    wp_load load = {.running = 1};
    proto_usage u = {.prompt_tokens = 5};
    const void *buf;
    size_t len;
    static const char *const frames[] = {
        "{type: \"request\", id: \"warm\", prompt: \"Tell me a story.\", max_tokens: 64, "
        "temperature: 0.7, stop: [\"\\n\\n\"], stream: true}",
        "{type: \"request\", id: \"warm2\", prompt_ids: ids(2000)}",
        "{type: \"cancel\", id: \"warm\"}",
    };
    enum { N_FRAMES = sizeof frames / sizeof frames[0] };
    char *packed[N_FRAMES];
    size_t packed_len[N_FRAMES];
    for (size_t f = 0; f < N_FRAMES; f++) {
        mpt_pack(&sb, frames[f]);
        packed[f] = malloc(sb.size);
        memcpy(packed[f], sb.data, sb.size);
        packed_len[f] = sb.size;
    }
    size_t before = 0;
    for (int round = 0; round < 2; round++) { /* round 0 warms, round 1 counts */
        if (round == 1)
            before = n_allocs;
        for (int it = 0; it < 500; it++) {
            for (size_t f = 0; f < N_FRAMES; f++) {
                size_t n0 = n_allocs;
                assert_int_equal(decode(CLIENT, pd, wd, packed[f], packed_len[f]), DERAS_OK);
                if (round == 1 && n_allocs != n0)
                    fail_msg("decoding '%.40s' allocated %zu times", frames[f], n_allocs - n0);
            }
            assert_int_equal(proto_encode_chunk(pe, "warm", 0, ids, 4, "text", 4, lps, &buf, &len),
                             DERAS_OK);
            assert_int_equal(decode(SERVER, pd, wd, buf, len), DERAS_OK);
            assert_int_equal(proto_encode_final(pe, "warm", 0, FINISH_STOP, NULL, &u, "all", 3, ids, 64,
                                                NULL, &buf, &len),
                             DERAS_OK);
            assert_int_equal(decode(SERVER, pd, wd, buf, len), DERAS_OK);
            wp_step_begin(we);
            for (int t = 0; t < 256; t++) {
                wp_token tok = {.rid = (uint64_t)t, .lp = {.token_id = t, .logprob = -0.5f,
                                                           .n_top = t % 4}};
                assert_int_equal(wp_step_add_token(we, &tok), DERAS_OK);
            }
            wp_finish fin = {.rid = 1};
            assert_int_equal(wp_step_add_finish(we, &fin), DERAS_OK);
            assert_int_equal(wp_step_end(we, &load, &buf, &len), DERAS_OK);
            assert_int_equal(decode(WORKER, pd, wd, buf, len), DERAS_OK);
            wp_submit s = {.rid = 1, .prompt_ids = ids, .n_prompt = 64, .params.max_tokens = 1,
                           .params.n = 1, .params.sp.temperature = 1, .params.sp.top_p = 1,
                           .params.sp.repetition_penalty = 1};
            assert_int_equal(wp_encode_submit(we, &s, &buf, &len), DERAS_OK);
            assert_int_equal(decode(WORKER, pd, wd, buf, len), DERAS_OK);
            assert_int_equal(wp_encode_heartbeat(we, &load, &buf, &len), DERAS_OK);
            assert_int_equal(decode(WORKER, pd, wd, buf, len), DERAS_OK);
        }
    }
    if (n_allocs != before)
        fail_msg("warm codecs allocated %zu times over 500 rounds, expected 0",
                 n_allocs - before);
    for (size_t f = 0; f < N_FRAMES; f++)
        free(packed[f]);
    proto_encoder_destroy(&pe);
    wp_encoder_destroy(&we);
    proto_decoder_destroy(&pd);
    wp_decoder_destroy(&wd);
}

/* Frames that grow a little each time (a conversation getting longer) reallocate only
 * when a capacity doubles, not once per frame. */
static void growing_frames_allocate_logarithmically(void **state)
{
    (void)state;
    proto_decoder_t *pd = NULL;
    assert_int_equal(proto_decoder_new(NULL, &pd), DERAS_OK);
    proto_encoder_t *pe = NULL;
    assert_int_equal(proto_encoder_new(&pe), DERAS_OK);
    wp_decoder_t *wd = NULL;
    assert_int_equal(wp_decoder_new(0, &wd), DERAS_OK);
    wp_encoder_t *we = NULL;
    assert_int_equal(wp_encoder_new(&we), DERAS_OK);
    static int32_t ids[20000];
    static char text[20000];
    memset(text, 'x', sizeof text);
    const void *buf;
    size_t len;
    size_t n0 = n_allocs;
    for (int n = 1; n <= 20000; n += 7) {
        proto_request r = {.prompt_ids = ids, .n_prompt_ids = n, .params.max_tokens = 1,
                           .params.n = 1,
                           .params.sp.temperature = 1, .params.sp.top_p = 1,
                           .params.sp.repetition_penalty = 1,
                           .add_special_tokens = true};
        strcpy(r.id, "grow");
        assert_int_equal(proto_encode_request(pe, &r, &buf, &len), DERAS_OK);
        assert_int_equal(decode(CLIENT, pd, wd, buf, len), DERAS_OK);
        r.prompt_ids = NULL;
        r.n_prompt_ids = 0;
        r.prompt = text;
        r.prompt_len = (size_t)n;
        assert_int_equal(proto_encode_request(pe, &r, &buf, &len), DERAS_OK);
        assert_int_equal(decode(CLIENT, pd, wd, buf, len), DERAS_OK);
        wp_submit s = {.rid = 1, .prompt_ids = ids, .n_prompt = n, .params.max_tokens = 1,
                       .params.n = 1,
                       .params.sp.temperature = 1, .params.sp.top_p = 1,
                       .params.sp.repetition_penalty = 1};
        assert_int_equal(wp_encode_submit(we, &s, &buf, &len), DERAS_OK);
        assert_int_equal(decode(WORKER, pd, wd, buf, len), DERAS_OK);
    }
    size_t n_grow = n_allocs - n0;
    printf("  8572 frames growing to 20000 ids / bytes: %zu allocations\n", n_grow);
    if (n_grow > 80)
        fail_msg("growing frames allocated %zu times, expected a few per doubling", n_grow);
    proto_encoder_destroy(&pe);
    wp_encoder_destroy(&we);
    proto_decoder_destroy(&pd);
    wp_decoder_destroy(&wd);
}

static void lying_frames_allocate_nothing(void **state)
{
    (void)state;
    proto_decoder_t *pd = NULL;
    assert_int_equal(proto_decoder_new(NULL, &pd), DERAS_OK);
    wp_decoder_t *wd = NULL;
    assert_int_equal(wp_decoder_new(0, &wd), DERAS_OK);
    static const unsigned char lies[][5] = {
        {0xdd, 0xff, 0xff, 0xff, 0xff}, /* array32 of 2^32-1 */
        {0xdf, 0xff, 0xff, 0xff, 0xff}, /* map32 of 2^32-1 */
        {0xdb, 0xff, 0xff, 0xff, 0xff}, /* str32 of 4 GiB */
        {0xc6, 0xff, 0xff, 0xff, 0xff}, /* bin32 of 4 GiB */
    };
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++)
        for (int w = CLIENT; w <= WORKER; w++) {
            size_t n0 = n_allocs;
            int64_t p0 = live;
            assert_int_equal(decode((enum which)w, pd, wd, lies[i], 5), DERAS_EFORMAT);
            if (n_allocs != n0 || live != p0)
                fail_msg("lie %zu through decoder %d allocated %zu times", i, w, n_allocs - n0);
        }
    proto_decoder_destroy(&pd);
    wp_decoder_destroy(&wd);
}

/* Hostile frames that pass the structural scan (every length honest) but are as costly
 * as a frame of their size can be: one object per byte, deep, many strings, long ids. */
static void hostile_memory_is_a_bounded_multiple_of_the_frame(void **state)
{
    (void)state;
    static const struct {
        enum which w;
        const char *frame;
    } frames[] = {
        {CLIENT, "{type: \"request\", id: \"h\", prompt_ids: ids(131072)}"},
        {CLIENT, "{type: \"request\", id: \"h\", prompt_ids: ids(131073)}"},
        {CLIENT, "{type: \"request\", id: \"h\", prompt: str(1000000)}"},
        {CLIENT, "{type: \"request\", id: \"h\", bogus: ids(200000)}"},
        {CLIENT, "{type: \"request\", id: \"h\", stop: [str(256), str(256), str(256), str(256), "
                 "str(256), str(256), str(256), str(256), str(256), str(256), str(256)]}"},
        {CLIENT, "[[[[[[[[ids(100000)]]]]]]]]"},
        {SERVER, "{type: \"chunk\", id: \"h\", index: 0, token_ids: ids(1000000), text: \"\"}"},
        {SERVER, "{type: \"final\", id: \"h\", index: 0, logprobs: ids(1000000)}"},
        {SERVER, "[ids(1000000), ids(1000000)]"},
        {WORKER, "{type: \"step\", tokens: ids(65536)}"},
        {WORKER, "{type: \"step\", tokens: ids(65537)}"},
        {WORKER, "{type: \"step\", tokens: [ids(3), ids(3), ids(3), ids(3), ids(3), ids(3)]}"},
        {WORKER, "{type: \"step\", foo: ids(1000000)}"},
        {WORKER, "{type: \"submit\", prompt_ids: bin(8000000)}"},
        {WORKER, "{type: \"heartbeat\", load: ids(1048575)}"},
    };
    proto_decoder_t *pd = NULL;
    assert_int_equal(proto_decoder_new(NULL, &pd), DERAS_OK);
    wp_decoder_t *wd = NULL;
    assert_int_equal(wp_decoder_new(0, &wd), DERAS_OK);
    double worst = 0;
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        mpt_pack(&sb, frames[i].frame);
        /* fresh decoders each time: nothing retained from earlier frames hides a cost */
        proto_decoder_destroy(&pd);
        wp_decoder_destroy(&wd);
        assert_int_equal(proto_decoder_new(NULL, &pd), DERAS_OK);
        assert_int_equal(wp_decoder_new(0, &wd), DERAS_OK);
        int64_t base = live;
        peak = live;
        (void)decode(frames[i].w, pd, wd, sb.data, sb.size);
        double ratio = (double)(peak - base) / (double)sb.size;
        printf("  %-7s %9zu bytes -> peak %10lld bytes allocated (%.1fx)  %.50s\n",
               frames[i].w == CLIENT ? "client" : frames[i].w == SERVER ? "server" : "worker",
               sb.size, (long long)(peak - base), ratio, frames[i].frame);
        if (ratio > worst && sb.size >= (64u << 10))
            worst = ratio;
        /* msgpack-c: 24 bytes per object, objects <= bytes; our copies: <= 4 bytes per id
         * or 184 per STEP token entry (4 bytes on the wire at least), plus fixed buffers */
        if (peak - base > 80 * (int64_t)sb.size + (1 << 20))
            fail_msg("frame %zu (%zu bytes) made the decoder allocate %lld bytes", i, sb.size,
                     (long long)(peak - base));
    }
    /* The densest STEP: 65536 tokens of 4 bytes each ([rid, index, id] as fixints). */
    wp_encoder_t *we = NULL;
    assert_int_equal(wp_encoder_new(&we), DERAS_OK);
    wp_load load = {0};
    const void *buf;
    size_t len;
    wp_step_begin(we);
    for (int t = 0; t < 65536; t++) {
        wp_token tok = {.rid = 1, .lp = {.token_id = 5}};
        assert_int_equal(wp_step_add_token(we, &tok), DERAS_OK);
    }
    assert_int_equal(wp_step_end(we, &load, &buf, &len), DERAS_OK);
    wp_decoder_destroy(&wd);
    assert_int_equal(wp_decoder_new(0, &wd), DERAS_OK);
    int64_t base = live;
    peak = live;
    assert_int_equal(decode(WORKER, pd, wd, buf, len), DERAS_OK);
    double ratio = (double)(peak - base) / (double)len;
    printf("  worker  %9zu bytes -> peak %10lld bytes allocated (%.1fx)  a STEP of 65536 "
           "3-element tokens\n", len, (long long)(peak - base), ratio);
    worst = ratio > worst ? ratio : worst;
    if (peak - base > 80 * (int64_t)len + (1 << 20))
        fail_msg("the dense STEP made the decoder allocate %lld bytes", (long long)(peak - base));
    wp_encoder_destroy(&we);
    printf("  worst over frames of 64 KiB and more: %.1f bytes allocated per frame byte\n",
           worst);
    proto_decoder_destroy(&pd);
    wp_decoder_destroy(&wd);
}

static long rss_kb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void rss_stays_flat_over_100k_hostile_decodes(void **state)
{
    (void)state;
    proto_decoder_t *pd = NULL;
    assert_int_equal(proto_decoder_new(NULL, &pd), DERAS_OK);
    wp_decoder_t *wd = NULL;
    assert_int_equal(wp_decoder_new(0, &wd), DERAS_OK);
    proto_encoder_t *pe = NULL;
    assert_int_equal(proto_encoder_new(&pe), DERAS_OK);
    wp_encoder_t *we = NULL;
    assert_int_equal(wp_encoder_new(&we), DERAS_OK);
    /* seeds: one valid frame per decoder, mutated and cut at random */
    unsigned char seeds[3][4096];
    size_t seed_len[3];
    const void *buf;
    size_t len;
    mpt_pack(&sb, "{type: \"request\", id: \"rss\", prompt: \"hello there\", stop: [\"a\", \"b\"], "
                  "stop_token_ids: [1, 2], temperature: 0.5, seed: 7, n: 2}");
    memcpy(seeds[0], sb.data, sb.size);
    seed_len[0] = sb.size;
    static const int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const proto_logprob lps[8] = {{.token_id = 1, .logprob = -1, .n_top = 3}};
    assert_int_equal(proto_encode_chunk(pe, "rss", 1, ids, 8, "héllo", 6, lps, &buf, &len),
                     DERAS_OK);
    memcpy(seeds[1], buf, len);
    seed_len[1] = len;
    wp_load load = {.running = 1};
    wp_step_begin(we);
    for (int t = 0; t < 20; t++) {
        wp_token tok = {.rid = (uint64_t)t, .lp = {.token_id = t, .logprob = -1, .n_top = 2}};
        assert_int_equal(wp_step_add_token(we, &tok), DERAS_OK);
    }
    assert_int_equal(wp_step_end(we, &load, &buf, &len), DERAS_OK);
    assert_true(len <= sizeof seeds[2]);
    memcpy(seeds[2], buf, len);
    seed_len[2] = len;

    uint64_t rng = 2024;
    unsigned char frame[4096 + 16];
    long rss0 = 0;
    int64_t live0 = 0;
    size_t n_rejected = 0;
    for (int it = 0; it < 101000; it++) {
        if (it == 1000) { /* after warm-up */
            rss0 = rss_kb();
            live0 = live;
        }
        int w = (int)(test_rng_next(&rng) % 3);
        size_t n = seed_len[w];
        memcpy(frame, seeds[w], n);
        int kind = (int)(test_rng_next(&rng) % 4);
        if (kind == 0) { /* a lying length somewhere */
            size_t at = test_rng_next(&rng) % n;
            static const unsigned char lie[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
            size_t k = n - at < 5 ? n - at : 5;
            memcpy(frame + at, lie, k);
        } else if (kind == 1) { /* cut */
            n = test_rng_next(&rng) % n;
        }
        for (int k = 0; k < 1 + kind; k++) /* byte flips */
            frame[test_rng_next(&rng) % (n ? n : 1)] = (unsigned char)test_rng_next(&rng);
        if (decode((enum which)w, pd, wd, frame, n) != DERAS_OK)
            n_rejected++;
    }
    long rss1 = rss_kb();
    printf("  %zu of 101000 mutated frames rejected; live bytes %lld -> %lld, RSS %ld -> %ld KiB\n",
           n_rejected, (long long)live0, (long long)live, rss0, rss1);
    if (live != live0)
        fail_msg("live memory moved from %lld to %lld bytes over 100k decodes",
                 (long long)live0, (long long)live);
    if (rss1 - rss0 > 1024)
        fail_msg("RSS grew by %ld KiB over 100k decodes", rss1 - rss0);
    assert_true(n_rejected > 50000);
    proto_encoder_destroy(&pe);
    wp_encoder_destroy(&we);
    proto_decoder_destroy(&pd);
    wp_decoder_destroy(&wd);
}

int main(void)
{
#ifdef SANITIZED
    test_skip("the counting allocator cannot run under AddressSanitizer");
#endif
    msgpack_sbuffer_init(&sb);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(warm_codecs_allocate_nothing_per_message),
        cmocka_unit_test(growing_frames_allocate_logarithmically),
        cmocka_unit_test(lying_frames_allocate_nothing),
        cmocka_unit_test(hostile_memory_is_a_bounded_multiple_of_the_frame),
        cmocka_unit_test(rss_stays_flat_over_100k_hostile_decodes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}
