/* SPDX-License-Identifier: Apache-2.0 */
/* test_dtype.c - block sizes, half/bfloat16 conversion and dequantization against gguf-py.
 *
 * The reference vectors in tests/data/quant/ come from tests/ref/make_quant_vectors.py:
 * random blocks (finite f16 scales, extremes included) dequantized by gguf-py, and f32
 * values rounded to f16 by numpy and to bf16 by torch. Every comparison is bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "test_util.h"

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void *load(const char *rel, size_t *len)
{
    char *path = test_data_path(rel);
    void *buf = test_read_file(path, len);
    if (!buf)
        test_skip("reference vector %s missing (run tests/ref/make_quant_vectors.py)", path);
    free(path);
    return buf;
}

/* Dequantize <name>.blocks (from an aligned and a misaligned copy) and compare every value
 * bit for bit with gguf-py's <name>.f32. */
static void check_against_gguf_py(int dtype, const char *name)
{
    char rel[64];
    size_t n_blk_bytes, n_f32_bytes;
    snprintf(rel, sizeof rel, "quant/%s.blocks", name);
    uint8_t *blocks = load(rel, &n_blk_bytes);
    snprintf(rel, sizeof rel, "quant/%s.f32", name);
    float *want = load(rel, &n_f32_bytes);

    const size_t bb = dtype_block_bytes(dtype);
    const int be = dtype_block_elems(dtype);
    assert_true(bb > 0 && be > 0);
    const int64_t n_blocks = (int64_t)(n_blk_bytes / bb);
    const int64_t n = n_blocks * be;
    if (n_blk_bytes % bb || (size_t)n * sizeof(float) != n_f32_bytes)
        fail_msg("%s: %zu block bytes / %zu f32 bytes do not match block size %zu x %d", name,
                 n_blk_bytes, n_f32_bytes, bb, be);
    assert_true(n_blocks >= 4);

    uint8_t *shifted = malloc(n_blk_bytes + 1);
    memcpy(shifted + 1, blocks, n_blk_bytes);
    float *got = malloc((size_t)n * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        memset(got, 0xAB, (size_t)n * sizeof(float));
        int rc = dtype_to_f32(dtype, pass ? shifted + 1 : blocks, got, n);
        if (rc != DERAS_OK)
            fail_msg("%s: dtype_to_f32 returned %s: %s", name, deras_status_name(rc),
                     deras_errmsg());
        for (int64_t i = 0; i < n; i++)
            if (f2u(got[i]) != f2u(want[i]))
                fail_msg("%s%s: element %lld (block %lld): expected %.9g (0x%08x), got %.9g "
                         "(0x%08x)", name, pass ? " (misaligned source)" : "", (long long)i,
                         (long long)(i / be), want[i], f2u(want[i]), got[i], f2u(got[i]));
    }
    free(got);
    free(shifted);
    free(blocks);
    free(want);
}

#define DEQUANT_TEST(fn, dt, nm)                                                             \
    static void fn(void **state)                                                           \
    {                                                                                      \
        (void)state;                                                                       \
        check_against_gguf_py(dt, nm);                                                     \
    }

DEQUANT_TEST(q4_0_dequantizes_bit_exact_with_gguf_py, DT_Q4_0, "q4_0")
DEQUANT_TEST(q4_1_dequantizes_bit_exact_with_gguf_py, DT_Q4_1, "q4_1")
DEQUANT_TEST(q5_0_dequantizes_bit_exact_with_gguf_py, DT_Q5_0, "q5_0")
DEQUANT_TEST(q5_1_dequantizes_bit_exact_with_gguf_py, DT_Q5_1, "q5_1")
DEQUANT_TEST(q8_0_dequantizes_bit_exact_with_gguf_py, DT_Q8_0, "q8_0")
DEQUANT_TEST(q4_k_dequantizes_bit_exact_with_gguf_py, DT_Q4_K, "q4_k")
DEQUANT_TEST(q5_k_dequantizes_bit_exact_with_gguf_py, DT_Q5_K, "q5_k")
DEQUANT_TEST(q6_k_dequantizes_bit_exact_with_gguf_py, DT_Q6_K, "q6_k")
DEQUANT_TEST(f16_elements_convert_bit_exact_with_numpy, DT_F16, "f16")
DEQUANT_TEST(bf16_elements_convert_bit_exact_with_gguf_py, DT_BF16, "bf16")

static void f32_elements_are_copied_unchanged(void **state)
{
    (void)state;
    const float src[5] = {1.5f, -0.0f, INFINITY, 1e-45f, -3.25e10f};
    uint8_t raw[sizeof src + 3];
    memcpy(raw + 3, src, sizeof src);
    float dst[5];
    assert_int_equal(dtype_to_f32(DT_F32, raw + 3, dst, 5), DERAS_OK);
    assert_memory_equal(dst, src, sizeof src);
}

static void fp16_round_trips_all_65536_patterns(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_f32((uint16_t)h);
        uint16_t back = f32_to_fp16(f);
        if (back != h)
            fail_msg("f16 0x%04x -> f32 0x%08x -> f16: expected 0x%04x, got 0x%04x", h, f2u(f),
                     h, back);
        int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan != (f != f))
            fail_msg("f16 0x%04x: NaN-ness expected %d, got %d", h, is_nan, f != f);
        if (!is_nan && (signbit(f) != 0) != ((h & 0x8000) != 0))
            fail_msg("f16 0x%04x: sign lost", h);
    }
}

static void bf16_round_trips_all_65536_patterns(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        if (f2u(f) != h << 16)
            fail_msg("bf16 0x%04x: expected f32 0x%08x, got 0x%08x", h, h << 16, f2u(f));
        uint16_t back = f32_to_bf16(f);
        if (back != h)
            fail_msg("bf16 0x%04x -> f32 -> bf16: expected 0x%04x, got 0x%04x", h, h, back);
    }
}

static void fp16_subnormals_and_limits_have_exact_values(void **state)
{
    (void)state;
    assert_true(fp16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(fp16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    assert_true(fp16_to_f32(0x0400) == ldexpf(1.0f, -14));
    assert_true(fp16_to_f32(0x7bff) == 65504.0f);
    assert_true(fp16_to_f32(0xfbff) == -65504.0f);
    assert_true(isinf(fp16_to_f32(0x7c00)) && fp16_to_f32(0x7c00) > 0);
    assert_true(f2u(fp16_to_f32(0x8000)) == 0x80000000u);
}

static void f32_rounding_matches_numpy_f16_and_torch_bf16(void **state)
{
    (void)state;
    size_t len;
    uint8_t *rec = load("quant/fpconv.bin", &len);
    assert_true(len % 8 == 0 && len / 8 > 1000);
    for (size_t i = 0; i < len / 8; i++) {
        uint32_t fb;
        uint16_t hb, bb;
        memcpy(&fb, rec + i * 8, 4);
        memcpy(&hb, rec + i * 8 + 4, 2);
        memcpy(&bb, rec + i * 8 + 6, 2);
        uint16_t h = f32_to_fp16(u2f(fb));
        uint16_t b = f32_to_bf16(u2f(fb));
        if (h != hb)
            fail_msg("f32 0x%08x (%.9g) -> f16: expected 0x%04x (numpy), got 0x%04x", fb,
                     u2f(fb), hb, h);
        if (b != bb)
            fail_msg("f32 0x%08x (%.9g) -> bf16: expected 0x%04x (torch), got 0x%04x", fb,
                     u2f(fb), bb, b);
    }
    free(rec);
}

static void nan_stays_nan_with_its_sign(void **state)
{
    (void)state;
    /* signalling f32 NaNs whose payload lives only in the dropped low bits */
    const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffffffffu, 0x7f801000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = f32_to_fp16(u2f(nans[i]));
        uint16_t b = f32_to_bf16(u2f(nans[i]));
        if (!((h & 0x7c00) == 0x7c00 && (h & 0x3ff)))
            fail_msg("f32 0x%08x -> f16: expected a NaN, got 0x%04x", nans[i], h);
        if (!((b & 0x7f80) == 0x7f80 && (b & 0x7f)))
            fail_msg("f32 0x%08x -> bf16: expected a NaN, got 0x%04x", nans[i], b);
        assert_int_equal(h >> 15, nans[i] >> 31);
        assert_int_equal(b >> 15, nans[i] >> 31);
    }
}

static void block_sizes_match_ggml(void **state)
{
    (void)state;
    const struct { int dt; int elems; size_t bytes; const char *name; } want[] = {
        {DT_F32, 1, 4, "F32"},     {DT_F16, 1, 2, "F16"},     {DT_BF16, 1, 2, "BF16"},
        {DT_Q4_0, 32, 18, "Q4_0"}, {DT_Q4_1, 32, 20, "Q4_1"}, {DT_Q5_0, 32, 22, "Q5_0"},
        {DT_Q5_1, 32, 24, "Q5_1"}, {DT_Q8_0, 32, 34, "Q8_0"}, {DT_Q4_K, 256, 144, "Q4_K"},
        {DT_Q5_K, 256, 176, "Q5_K"}, {DT_Q6_K, 256, 210, "Q6_K"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_true(dtype_supported(want[i].dt));
        assert_string_equal(dtype_name(want[i].dt), want[i].name);
        assert_int_equal(dtype_block_elems(want[i].dt), want[i].elems);
        assert_int_equal(dtype_block_bytes(want[i].dt), want[i].bytes);
    }
    const int unsupported[] = {DT_UNSUPPORTED, 4, 5, 9, 10, 11, 15, 24, 28, 29, 31, 1000};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        assert_false(dtype_supported(unsupported[i]));
        assert_string_equal(dtype_name(unsupported[i]), "unknown");
        assert_int_equal(dtype_block_elems(unsupported[i]), 0);
        assert_int_equal(dtype_block_bytes(unsupported[i]), 0);
    }
}

static void nbytes_counts_whole_blocks_and_refuses_the_rest(void **state)
{
    (void)state;
    size_t n = 0;
    assert_int_equal(dtype_nbytes(DT_Q4_K, 512, &n), DERAS_OK);
    assert_int_equal(n, 288);
    assert_int_equal(dtype_nbytes(DT_F16, 7, &n), DERAS_OK);
    assert_int_equal(n, 14);
    assert_int_equal(dtype_nbytes(DT_Q8_0, 0, &n), DERAS_OK);
    assert_int_equal(n, 0);

    n = 12345;
    assert_int_equal(dtype_nbytes(DT_Q4_0, 33, &n), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "whole number"));
    assert_int_equal(n, 12345);
    assert_int_equal(dtype_nbytes(DT_Q6_K, 255, &n), DERAS_EFORMAT);
    assert_int_equal(dtype_nbytes(DT_F32, INT64_MAX, &n), DERAS_ERANGE);
    assert_int_equal(dtype_nbytes(DT_F32, (int64_t)1 << 62, &n), DERAS_ERANGE);
    assert_int_equal(n, 12345);
    assert_int_equal(dtype_nbytes(DT_F32, ((int64_t)1 << 62) - 1, &n), DERAS_OK);
    assert_true(n == SIZE_MAX - 3);
    n = 12345;
    assert_int_equal(dtype_nbytes(10 /* Q2_K */, 256, &n), DERAS_EUNSUPPORTED);
    assert_int_equal(dtype_nbytes(DT_UNSUPPORTED, 1, &n), DERAS_EUNSUPPORTED);
    assert_int_equal(dtype_nbytes(DT_F32, -1, &n), DERAS_EINVAL);
    assert_int_equal(dtype_nbytes(DT_F32, 1, NULL), DERAS_EINVAL);
    assert_int_equal(n, 12345);
}

static void to_f32_refuses_partial_blocks_and_unknown_types(void **state)
{
    (void)state;
    uint8_t src[64] = {0};
    float dst[64];
    assert_int_equal(dtype_to_f32(DT_Q8_0, src, dst, 16), DERAS_EFORMAT);
    assert_int_equal(dtype_to_f32(DT_UNSUPPORTED, src, dst, 1), DERAS_EUNSUPPORTED);
    assert_int_equal(dtype_to_f32(11, src, dst, 256), DERAS_EUNSUPPORTED);
    assert_int_equal(dtype_to_f32(DT_F32, NULL, dst, 1), DERAS_EINVAL);
    assert_int_equal(dtype_to_f32(DT_F32, src, NULL, 1), DERAS_EINVAL);
    assert_int_equal(dtype_to_f32(DT_F32, src, dst, -1), DERAS_EINVAL);
    assert_int_equal(dtype_to_f32(DT_F32, NULL, NULL, 0), DERAS_OK);
}

static void numel_is_the_shape_product(void **state)
{
    (void)state;
    tensor_view v = {.n_dims = 3, .shape = {2, 3, 5}};
    assert_int_equal(tensor_view_numel(&v), 30);
    v.n_dims = 0; /* a safetensors scalar */
    assert_int_equal(tensor_view_numel(&v), 1);
    v.n_dims = 2;
    v.shape[1] = 0;
    assert_int_equal(tensor_view_numel(&v), 0);
    assert_int_equal(tensor_view_numel(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(q4_0_dequantizes_bit_exact_with_gguf_py),
        cmocka_unit_test(q4_1_dequantizes_bit_exact_with_gguf_py),
        cmocka_unit_test(q5_0_dequantizes_bit_exact_with_gguf_py),
        cmocka_unit_test(q5_1_dequantizes_bit_exact_with_gguf_py),
        cmocka_unit_test(q8_0_dequantizes_bit_exact_with_gguf_py),
        cmocka_unit_test(q4_k_dequantizes_bit_exact_with_gguf_py),
        cmocka_unit_test(q5_k_dequantizes_bit_exact_with_gguf_py),
        cmocka_unit_test(q6_k_dequantizes_bit_exact_with_gguf_py),
        cmocka_unit_test(f16_elements_convert_bit_exact_with_numpy),
        cmocka_unit_test(bf16_elements_convert_bit_exact_with_gguf_py),
        cmocka_unit_test(f32_elements_are_copied_unchanged),
        cmocka_unit_test(fp16_round_trips_all_65536_patterns),
        cmocka_unit_test(bf16_round_trips_all_65536_patterns),
        cmocka_unit_test(fp16_subnormals_and_limits_have_exact_values),
        cmocka_unit_test(f32_rounding_matches_numpy_f16_and_torch_bf16),
        cmocka_unit_test(nan_stays_nan_with_its_sign),
        cmocka_unit_test(block_sizes_match_ggml),
        cmocka_unit_test(nbytes_counts_whole_blocks_and_refuses_the_rest),
        cmocka_unit_test(to_f32_refuses_partial_blocks_and_unknown_types),
        cmocka_unit_test(numel_is_the_shape_product),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
