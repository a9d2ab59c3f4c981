/* SPDX-License-Identifier: Apache-2.0 */
/* test_quantize.c - f32 -> GGUF formats (common/base/quantize.h) against gguf-py.
 *
 * 1. Bit for bit against gguf.quants.quantize on tests/data/quant/from_f32 (made by
 *    tests/ref/make_quantize_vectors.py: random blocks at scales 1e-6..1e3 and hand-made
 *    edge blocks: zeros, a constant, equal magnitudes of both signs, exact rounding ties),
 *    from an aligned and a misaligned destination. test_quantize_gguf.py compares fresh
 *    random data against gguf-py at test time where the package is installed, through
 *    this program's `dump` mode.
 * 2. Round trip on fresh random data (seed printed): dequantizing the bytes gives back
 *    every value within the format's step. For Q8_0, Q4_1, Q5_1 half a step d/2 (d the
 *    unrounded scale), for Q4_0, Q5_0 a whole step (the values within the top half step
 *    of the positive side are clipped to the last level), plus what rounding d and the
 *    offset m to f16 moves a level (|q| |d - d16| + |m - m16|) and 1e-6 relative for the
 *    f32 arithmetic; F16/BF16 half an ulp of their own (relative 2^-11 / 2^-8).
 * 3. Requantizing what the bytes decode to gives the same bytes (the levels are exact).
 * 4. Hostile arguments: K formats and unknown types refused by code, partial blocks,
 *    NULL pointers; NaN and infinite inputs give bytes without undefined behaviour (the
 *    sanitizer build checks), and the reference's bytes where it defines them.
 *
 * `test_quantize dump TYPE IN.f32 OUT` writes dtype_from_f32's bytes of IN (the Python
 * cross-check's door); exit 0, or 1 with the message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/base/dtype.h"
#include "common/base/quantize.h"
#include "common/base/status.h"
#include "test_util.h"

static const struct { int dtype; const char *name; } FORMATS[] = {
    {DT_Q8_0, "q8_0"}, {DT_Q4_0, "q4_0"}, {DT_Q4_1, "q4_1"}, {DT_Q5_0, "q5_0"},
    {DT_Q5_1, "q5_1"}, {DT_F16, "f16"}, {DT_BF16, "bf16"},
};
#define N_FORMATS (sizeof FORMATS / sizeof FORMATS[0])

static void *load(const char *rel, size_t *len)
{
    char *path = test_data_path(rel);
    void *buf = test_read_file(path, len);
    if (!buf)
        test_skip("reference vector %s missing (run tests/ref/make_quantize_vectors.py)", path);
    free(path);
    return buf;
}

static void matches_gguf_py_bit_for_bit(void **state)
{
    (void)state;
    size_t in_bytes;
    float *x = load("quant/from_f32/input.f32", &in_bytes);
    const int64_t n = (int64_t)(in_bytes / sizeof(float));
    for (size_t f = 0; f < N_FORMATS; f++) {
        char rel[64];
        size_t want_bytes, need;
        snprintf(rel, sizeof rel, "quant/from_f32/%s.blocks", FORMATS[f].name);
        uint8_t *want = load(rel, &want_bytes);
        assert_int_equal(dtype_nbytes(FORMATS[f].dtype, n, &need), DERAS_OK);
        assert_int_equal(need, want_bytes);
        uint8_t *got = malloc(need + 1);
        for (int off = 0; off < 2; off++) { /* aligned, then one byte off */
            memset(got, 0xa5, need + 1);
            assert_int_equal(dtype_from_f32(FORMATS[f].dtype, x, got + off, n), DERAS_OK);
            for (size_t i = 0; i < need; i++)
                if (got[off + i] != want[i]) {
                    size_t bb = dtype_block_bytes(FORMATS[f].dtype);
                    fail_msg("%s: byte %zu (block %zu, byte %zu of it) is 0x%02x, gguf-py wrote "
                             "0x%02x", FORMATS[f].name, i, i / bb, i % bb, got[off + i], want[i]);
                }
        }
        printf("%-5s %lld values, %zu bytes equal to gguf-py's\n", FORMATS[f].name, (long long)n,
               need);
        free(got);
        free(want);
    }
    free(x);
}

static uint64_t rng_state;

static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

static float normal(void)
{
    double u = uniform() + 1e-300, v = uniform();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Bound of |x - dequant| for one block of 32, from the block and its stored scales. */
static double block_bound(int dtype, const float *x, const uint8_t *b)
{
    float amax = 0, lo = x[0], hi = x[0];
    for (int j = 0; j < 32; j++) {
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    const double d16 = fp16_to_f32((uint16_t)(b[0] | b[1] << 8));
    const double m16 = fp16_to_f32((uint16_t)(b[2] | b[3] << 8));
    double d, levels, step_share = 0.5, off = 0;
    switch (dtype) {
    case DT_Q8_0: d = amax / 127.0, levels = 127; break;
    case DT_Q4_0: d = amax / 8.0, levels = 8, step_share = 1.0; break;
    case DT_Q5_0: d = amax / 16.0, levels = 16, step_share = 1.0; break;
    case DT_Q4_1: d = (hi - lo) / 15.0, levels = 15, off = fabs(lo - m16); break;
    default: d = (hi - lo) / 31.0, levels = 31, off = fabs(lo - m16); break; /* Q5_1 */
    }
    return step_share * d + levels * fabs(fabs(d) - fabs(d16)) + off + 1e-6 * (amax + 1e-30);
}

static void round_trip_is_within_a_step(void **state)
{
    (void)state;
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    rng_state = seed;
    printf("round trip seed %llu\n", (unsigned long long)seed);
    enum { N = 32 * 512 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * sizeof(float)), *q2 = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) { /* a scale per block, 1e-4 .. 1e2, some offset */
        const int blk = i / 32;
        const double scale = pow(10.0, -4.0 + 6.0 * ((blk * 7919) % 512) / 512.0);
        x[i] = (float)(scale * (normal() + (blk % 3 == 0 ? 1.5 : 0.0)));
    }
    for (size_t f = 0; f < N_FORMATS; f++) {
        const int dt = FORMATS[f].dtype;
        assert_int_equal(dtype_from_f32(dt, x, q, N), DERAS_OK);
        assert_int_equal(dtype_to_f32(dt, q, y, N), DERAS_OK);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            const double err = fabs((double)x[i] - y[i]);
            double bound;
            if (dt == DT_F16 || dt == DT_BF16)
                bound = fabs(x[i]) * (dt == DT_F16 ? 0x1.0p-11 : 0x1.0p-8) + 0x1.0p-25;
            else
                bound = block_bound(dt, x + (i / 32) * 32, q + (size_t)(i / 32) * dtype_block_bytes(dt));
            if (!(err <= bound))
                fail_msg("%s (seed %llu): element %d = %.9g comes back as %.9g, error %.3g over "
                         "its bound %.3g", FORMATS[f].name, (unsigned long long)seed, i, x[i],
                         y[i], err, bound);
            worst = err / bound > worst ? err / bound : worst;
        }
        /* the decoded values are levels: quantizing them again gives the same bytes */
        assert_int_equal(dtype_from_f32(dt, y, q2, N), DERAS_OK);
        size_t bytes;
        assert_int_equal(dtype_nbytes(dt, N, &bytes), DERAS_OK);
        if (memcmp(q, q2, bytes))
            fail_msg("%s (seed %llu): requantizing the decoded values changed the bytes",
                     FORMATS[f].name, (unsigned long long)seed);
        printf("%-5s round trip of %d values: worst error %.2f of its bound\n", FORMATS[f].name, N,
               worst);
    }
    free(x), free(y), free(q), free(q2);
}

static void hostile_arguments_get_codes(void **state)
{
    (void)state;
    float x[64] = {0};
    uint8_t out[256];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i - 20) * 0.25f;
    static const int k[] = {DT_Q4_K, DT_Q5_K, DT_Q6_K};
    for (size_t i = 0; i < 3; i++) {
        assert_false(dtype_can_quantize(k[i]));
        assert_int_equal(dtype_from_f32(k[i], x, out, 256), DERAS_EUNSUPPORTED);
        assert_non_null(strstr(deras_errmsg(), "used as stored"));
    }
    assert_int_equal(dtype_from_f32(DT_UNSUPPORTED, x, out, 32), DERAS_EUNSUPPORTED);
    assert_int_equal(dtype_from_f32(10 /* Q2_K */, x, out, 32), DERAS_EUNSUPPORTED);
    assert_int_equal(dtype_from_f32(DT_Q8_0, x, out, 33), DERAS_EFORMAT);
    assert_int_equal(dtype_from_f32(DT_Q8_0, NULL, out, 32), DERAS_EINVAL);
    assert_int_equal(dtype_from_f32(DT_Q8_0, x, NULL, 32), DERAS_EINVAL);
    assert_int_equal(dtype_from_f32(DT_Q8_0, x, out, -32), DERAS_EINVAL);
    assert_int_equal(dtype_from_f32(DT_Q8_0, NULL, NULL, 0), DERAS_OK);
    for (size_t f = 0; f < N_FORMATS; f++)
        assert_true(dtype_can_quantize(FORMATS[f].dtype));
    assert_true(dtype_can_quantize(DT_F32));

    /* non-finite inputs: defined bytes, no undefined behaviour */
    x[3] = NAN, x[40] = INFINITY, x[41] = -INFINITY;
    for (size_t f = 0; f < N_FORMATS; f++)
        assert_int_equal(dtype_from_f32(FORMATS[f].dtype, x, out, 64), DERAS_OK);
    /* a block with an infinite value: Q8_0's scale is inf and 1/inf = 0, so every finite
     * value's level is 0, and the infinite ones' (inf * 0 is NaN) are written as 0 too */
    assert_int_equal(dtype_from_f32(DT_Q8_0, x + 32, out, 32), DERAS_OK);
    assert_int_equal(out[0] | out[1] << 8, 0x7c00);
    for (int j = 0; j < 32; j++)
        assert_int_equal(out[2 + j], 0);

    /* names */
    int dt = -5;
    assert_int_equal(dtype_parse("q8_0", &dt), DERAS_OK);
    assert_int_equal(dt, DT_Q8_0);
    assert_int_equal(dtype_parse("BF16", &dt), DERAS_OK);
    assert_int_equal(dt, DT_BF16);
    assert_int_equal(dtype_parse("q2_k", &dt), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "q2_k"));
    assert_int_equal(dtype_parse(NULL, &dt), DERAS_EINVAL);
}

/* dump TYPE IN OUT: the Python cross-check's door. */
static int dump(const char *type, const char *in, const char *out)
{
    int dt;
    size_t len, need;
    float *x = (float *)test_read_file(in, &len);
    if (dtype_parse(type, &dt) || !x || len % sizeof(float)) {
        fprintf(stderr, "test_quantize dump: %s / %s: %s\n", type, in,
                x ? deras_errmsg() : "cannot read");
        return 1;
    }
    const int64_t n = (int64_t)(len / sizeof(float));
    if (dtype_nbytes(dt, n, &need)) {
        fprintf(stderr, "test_quantize dump: %s\n", deras_errmsg());
        return 1;
    }
    uint8_t *q = malloc(need ? need : 1);
    FILE *f = NULL;
    int rc = dtype_from_f32(dt, x, q, n);
    if (!rc && (!(f = fopen(out, "wb")) || fwrite(q, 1, need, f) != need))
        rc = DERAS_EIO;
    if (f)
        fclose(f);
    if (rc)
        fprintf(stderr, "test_quantize dump: %s\n", rc == DERAS_EIO ? out : deras_errmsg());
    free(q);
    free(x);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "dump"))
        return dump(argv[2], argv[3], argv[4]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_gguf_py_bit_for_bit),
        cmocka_unit_test(round_trip_is_within_a_step),
        cmocka_unit_test(hostile_arguments_get_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
