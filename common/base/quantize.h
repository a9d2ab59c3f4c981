/* SPDX-License-Identifier: Apache-2.0 */
/* quantize.h - f32 to the GGUF formats, for converting weights at load (--weight-format).
 *
 * The inverse of dtype_to_f32 for the formats a weight may be converted to: F32, F16,
 * BF16 and the legacy block formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1. Each writes exactly the
 * bytes of ggml's reference quantizer (quantize_row_*_ref in ggml-quants.c), which is also
 * what the PyPI package gguf (gguf.quants.quantize) writes: tests/unit/test_quantize.c
 * checks that byte for byte against vectors made by gguf-py. The K formats (Q4_K, Q5_K,
 * Q6_K) are not among them: their reference quantizers search scales iteratively and
 * gguf-py has none to check against, so a K-format target is DERAS_EUNSUPPORTED; files
 * stored in a K format are used as stored.
 *
 * Per block of 32: Q8_0 d = max|x| / 127, q = round(x / d) (halves away from zero);
 * Q4_0 / Q5_0 d = x_m / -8 (/ -16) for the x_m of largest magnitude, q = trunc(x / d +
 * 8.5 (16.5)) clipped to 15 (31); Q4_1 / Q5_1 d = (max - min) / 15 (31), m = min, q =
 * trunc((x - min) / d + 0.5). d and m are stored as f16 (round to nearest even). Every
 * product and sum is rounded to f32 on its own (the file is compiled without fused
 * multiply-adds), as the reference does.
 *
 * Error of one element after dequantization: at most half a step (d / 2, plus the f16
 * rounding of d and m applied to q) for Q8_0, Q4_1, Q5_1; for Q4_0 / Q5_0 the step is
 * |x_m| / 8 (16) and the element of largest magnitude is exact up to that rounding.
 */
#ifndef DERAS_QUANTIZE_H
#define DERAS_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

/* True for the dtypes dtype_from_f32 writes (the list above). O(1). */
bool dtype_can_quantize(int dtype);

/* Write n_elems f32 values of src into dst in `dtype` (dtype_nbytes(dtype, n_elems)
 * bytes, any alignment). Non-finite inputs give the reference's bytes where it defines
 * them and never undefined behaviour. DERAS_EUNSUPPORTED for a dtype outside the list
 * (naming it and, for a K format, why), DERAS_EFORMAT when n_elems is not a whole number
 * of blocks, DERAS_EINVAL for NULL pointers with n_elems > 0 or a negative count.
 * O(n_elems), allocates nothing, thread-safe. */
int dtype_from_f32(int dtype, const float *src, void *dst, int64_t n_elems);

#endif
