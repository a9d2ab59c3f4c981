/* SPDX-License-Identifier: Apache-2.0 */
/* qmatmul.h - matrix products straight from GGUF-quantized weights, on the CPU.
 *
 * y (n, n_out) = x (n, n_in) * W^T, with W (n_out, n_in) stored row by row in one of the
 * formats of common/base/dtype.h (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
 * Q5_K, Q6_K), each row whole blocks, and x, y f32. The weights are never expanded in
 * memory: each block is decoded in registers where it is used, so a decode step reads
 * each weight byte once and the memory held is the file's.
 *
 * Two arithmetic modes, picked by the caller per call:
 *   QMM_EXACT  f32 activations against the dequantized weights (computed in registers bit
 *              for bit as dtype_to_f32 does) with f32 fused multiply-adds: the math of the
 *              dequantized weights, up to f32 summation order.
 *   QMM_Q8     activations first rounded to the weight format's partner, as llama.cpp
 *              does: int8 with one f32 scale per 32 elements (per 256 for the K formats,
 *              with per-16 sums) and integer dot products (AVX2 maddubs/madd, AVX-512
 *              VNNI); for BF16 weights, bf16 activations (AVX512-BF16 vdpbf16ps). Each
 *              activation moves by at most half a step of max|x_block| / 127 (bf16: half an
 *              ulp). F32 and F16 weights have no partner worth having on x86 (no f16
 *              arithmetic): QMM_Q8 computes them exactly as QMM_EXACT.
 *
 * Packed weights (QMM_Q8 only; the block formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
 * Q5_K, Q6_K): qmm_pack rearranges W once (at load) so that the lanes of a vector are 16
 * consecutive output rows; the integer sum of each block then costs its scale steps once
 * per 16 rows instead of once per row (kernels/cpu/qmm_impl.h gives the layout and the
 * exact arithmetic, the same on every path). The products are those of QMM_Q8 in the
 * file's layout up to f32 rounding; the packed copy has the file's bytes (Q4_K, Q5_K: 3%
 * and 2% more: their 6-bit scales unpacked).
 *
 * Paths: plain C (the semantics: every other path is tested against it), AVX2+FMA+F16C,
 * and AVX-512 F/BW/VL (with VNNI and BF16 where the CPU has them; without, its Q8 mode runs
 * the AVX2 integer kernels). The best path the CPU has is picked once, on first use, with
 * __builtin_cpu_supports; $DERAS_CPU_ISA=scalar|avx2|avx512 or qmm_isa_force() picks
 * another, refused when the CPU lacks it.
 *
 * Batch invariance: a row's result depends on its own x row, W, the mode and the path,
 * never on n, on the other rows, on the tile it falls in or on the thread count (each
 * output is one fixed reduction order), so greedy decoding alone and batched agree.
 *
 * Cost: n * n_out * n_in multiply-adds; the weights are read from memory once per call
 * (rows are blocked so a block of W stays in cache while every row tile of x passes over
 * it). Work is spread over n_out across the threads of a cpu_pool (kernels/cpu/cpu_pool.h);
 * the fixed cost of a call is one pool job (bench/bench_qmatmul.c measures it).
 */
#ifndef DERAS_QMATMUL_H
#define DERAS_QMATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum qmm_mode { QMM_EXACT = 0, QMM_Q8 = 1 };

enum qmm_isa { QMM_ISA_SCALAR = 0, QMM_ISA_AVX2 = 1, QMM_ISA_AVX512 = 2 };

typedef struct qmm_args {
    float *y;            /* (n, n_out), rows n_out apart */
    const float *x;      /* (n, n_in), rows n_in apart; may not overlap y */
    const void *w;       /* (n_out, n_in) in `dtype`, any alignment */
    int dtype;           /* enum deras_dtype */
    int n, n_out, n_in;  /* n_in: a whole number of the format's blocks */
    int mode;            /* enum qmm_mode */
    int n_threads;       /* threads at most; 0: all of the pool's */
    void *scratch;       /* qmm_scratch_bytes() bytes, 64-byte aligned; NULL if that is 0 */
    size_t scratch_bytes;
    int ldy;             /* y's rows are ldy floats apart (>= n_out); 0: n_out. A matrix of
                            several weights fills its columns one product at a time */
    struct cpu_pool *pool; /* kernels/cpu/cpu_pool.h; NULL: the calling thread alone */
    int packed;          /* w is in qmm_pack's layout (QMM_Q8 mode only) */
} qmm_args;

/* y = x W^T as described above. DERAS_EINVAL for NULL pointers, non-positive sizes, an
 * unknown mode, ldy below n_out or scratch too small or misaligned; DERAS_EFORMAT when n_in is not a whole
 * number of blocks; DERAS_EUNSUPPORTED for a dtype outside the list, or when the path
 * named by $DERAS_CPU_ISA is unknown or missing on this CPU. Allocates nothing. Cost:
 * above; the Q8 mode first quantizes x (O(n * n_in), in the same parallel region). */
int qmm_matmul(const qmm_args *a);

/* Bytes of scratch qmm_matmul needs for these arguments (0 in QMM_EXACT mode and for F32
 * and F16): the quantized activations, n rows of a 64-byte-aligned stride. Size it once
 * for the largest n and n_in of a model. Same failures as qmm_matmul's argument checks. */
int qmm_scratch_bytes(int dtype, int mode, int n, int n_in, size_t *out);

/* Packed weights. qmm_packs: true for the formats with a packed layout (the block
 * formats). qmm_pack_bytes: the bytes of W (n_out, n_in) packed (n_out rounded up to 16
 * rows). qmm_pack: W into dst (qmm_pack_bytes of them, any alignment; W is not modified),
 * strips spread over pool's threads (NULL: the calling thread). DERAS_EUNSUPPORTED for
 * another format, DERAS_EINVAL for NULL pointers or sizes that are not positive whole
 * blocks. O(n_out * n_in), allocates nothing. */
bool qmm_packs(int dtype);
int qmm_pack_bytes(int dtype, int n_out, int n_in, size_t *out);
int qmm_pack(void *dst, const void *w, int dtype, int n_out, int n_in, struct cpu_pool *pool);

/* True for the dtypes qmm_matmul computes on (the list above). O(1). */
bool qmm_computes(int dtype);

/* out (n_in) = row `row` of W, dequantized bit for bit as dtype_to_f32 does (the
 * embedding lookup). DERAS_EINVAL for NULL pointers or row outside [0, n_rows),
 * DERAS_EFORMAT / DERAS_EUNSUPPORTED as qmm_matmul. O(n_in). */
int qmm_embed_row(float *out, const void *w, int dtype, int64_t n_rows, int n_in, int64_t row);

/* The best path this CPU supports. O(1) after the first call. */
int qmm_isa_best(void);

/* The path qmm_matmul uses now: $DERAS_CPU_ISA at first use if set, else qmm_isa_best(),
 * unless qmm_isa_force() chose since. Negative status when $DERAS_CPU_ISA names a path
 * that is unknown (DERAS_EINVAL) or that this CPU lacks (DERAS_EUNSUPPORTED). */
int qmm_isa_active(void);

/* Use `isa` from now on, process-wide (benchmarks, tests; the environment variable for a
 * whole process). Not to be called while another thread is inside qmm_matmul.
 * DERAS_EINVAL for an unknown value, DERAS_EUNSUPPORTED when the CPU lacks the path (the
 * message names the missing feature). */
int qmm_isa_force(int isa);

/* "scalar", "avx2", "avx512"; "unknown" otherwise. qmm_isa_parse is its inverse:
 * DERAS_EINVAL for any other name. */
const char *qmm_isa_name(int isa);
int qmm_isa_parse(const char *name, int *isa);

#endif
