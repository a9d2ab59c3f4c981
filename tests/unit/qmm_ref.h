/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_ref.h - references for the quantized matrix products (kernels/cpu/qmatmul.h), shared
 * by test_qmatmul and bench_qmatmul.
 *
 * Weights: random blocks where every bit pattern of codes is valid (all nibbles, high
 * bits, 6-bit K scales and mins, int8 Q6_K scales) and the f16 scales are drawn in the
 * ranges real checkpoints have (weights of order 0.01-0.1), so the products are neither
 * trivial nor overflowing. Activations: random with an occasional outlier, never zero.
 * The Q8 rounding of activations is written here again, independently of the kernels
 * (amax / 127, round to nearest even), and every reference is computed in double from the
 * weights dequantized by common/base/dtype.c.
 */
#ifndef DERAS_TEST_QMM_REF_H
#define DERAS_TEST_QMM_REF_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of one row of n_in elements. */
size_t qref_row_bytes(int dtype, int n_in);

/* n_out rows of random valid blocks into out (n_out * qref_row_bytes bytes). */
void qref_weights(int dtype, int n_out, int n_in, uint64_t *seed, uint8_t *out);

/* The rows dequantized (dtype_to_f32) into wf (n_out * n_in), and into wmin, if not NULL,
 * each element's |offset| (the _1 formats' m, Q4_K/Q5_K's dmin * min; 0 elsewhere): its
 * weight is scale * code + offset, computed in two parts by the Q8 kernels. */
void qref_dequant(int dtype, const uint8_t *w, int n_out, int n_in, float *wf, float *wmin);

/* n random activations: uniform in [-1, 1) with one in 64 scaled by 8. */
void qref_activations(float *x, size_t n, uint64_t *seed);

/* What the Q8 mode's activations are for this dtype: x rounded in blocks of 32 (legacy)
 * or 256 (K) to amax / 127 steps, to bf16 (BF16), or x itself (F32, F16); n_in elements.
 * step, if not NULL, gets each element's worst rounding error (half a step). */
void qref_q8_activations(int dtype, const float *x, int n_in, float *xhat, float *step);

/* Per (row r, output o) references, at [r * n_out + o]. */
typedef struct qref_pair {
    double exact;  /* sum w x */
    double quant;  /* sum w xhat, xhat = qref_q8_activations */
    double abs_wx; /* sum |w x| */
    double qbound; /* sum |w| step: the largest effect of the activation rounding */
    double mag;    /* sum (|w| + 2 |offset|) (|x| + step): what f32 roundings scale with */
    double one_step; /* max 2 |w| step: one activation rounded the other way at a tie */
} qref_pair;

/* wmin as qref_dequant makes it (required). */
void qref_pairs(int dtype, const float *wf, const float *wmin, const float *x, int n, int n_out,
                int n_in, qref_pair *out);

#endif
