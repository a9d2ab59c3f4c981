/* SPDX-License-Identifier: Apache-2.0 */
/* attn_impl.h - what the paths of the CPU attention share (private to kernels/cpu/): the
 * tile a kernel computes, the table each path exports, and the KV element conversions.
 *
 * A tile is a block of query vectors of one sequence: up to ATTN_MAX_QV (query row, query
 * head) pairs, n_rows consecutive rows times n_heads consecutive heads that share one KV
 * head. A kernel walks the sequence's keys block by block through the block table, reads
 * each stretch of keys and values once for all of the tile's query vectors (converting
 * f16/bf16 caches to f32 once per tile), and keeps a running maximum, sum and output
 * accumulator per query vector (online softmax), so no score matrix exists. Decode is
 * the same kernel with one row.
 *
 * Batch invariance. Each query vector's arithmetic is a fixed sequence fixed by its own
 * position, the window, the cache's block size and the path: the order in which keys are
 * folded in, the reduction tree of every dot product and of every sum are the same
 * whatever the other vectors of the tile are, which rows share the tile, how the heads of
 * a group were split or how many threads run. So a request's output is the same alone and
 * in any batch, as a prefill row and as a decode row (tests/unit/test_attention.c checks
 * it bit for bit on every path).
 */
#ifndef DERAS_ATTN_IMPL_H
#define DERAS_ATTN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__)
#define ATTN_X86 1
#endif

#define ATTN_MAX_HEAD_DIM 256
#define ATTN_MAX_BLOCK 256
#define ATTN_MAX_QV 32 /* query vectors (rows x heads) in one tile */

typedef struct attn_tile {
    float *out;              /* row r, head h at out[r * out_stride + h * head_dim] */
    int out_stride;
    const float *q;          /* row r, head h at q[r * q_stride + h * head_dim] */
    int q_stride;
    int n_rows, n_heads;     /* n_rows * n_heads <= ATTN_MAX_QV */
    int pos0;                /* position of row 0; row r is at pos0 + r */
    int window;              /* keys max(0, pos - window + 1) .. pos; 0: from 0 */
    float scale;
    const void *k_cache, *v_cache; /* the layer's caches (n_blocks, n_kv_heads, bs, hd) */
    int kv_dtype;            /* enum deras_dtype: F32, F16 or BF16 */
    const int32_t *table;    /* the sequence's block table */
    int n_kv_heads, kv_head; /* the head every query head of the tile reads */
    int head_dim, block_size;
} attn_tile;

typedef void (*attn_tile_fn)(const attn_tile *t);

/* Cache element conversions: n values, round to nearest even, NaN kept NaN exactly as
 * common/base/dtype.h's f32_to_fp16 / f32_to_bf16 do (every path writes the same bytes). */
typedef void (*attn_cvt_fn)(const float *x, uint16_t *y, int n);

typedef struct attn_path {
    attn_tile_fn tile;
    int lanes;               /* the tile kernel needs head_dim % lanes == 0 */
    attn_cvt_fn to_f16, to_bf16;
} attn_path;

extern const attn_path attn_path_scalar;
#ifdef ATTN_X86
extern const attn_path attn_path_avx2;
extern const attn_path attn_path_avx512;
#endif

/* First key position row `pos` sees. */
static inline int attn_lo(int pos, int window)
{
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/* Elements from the start of a cache to (block slot `blk`, KV head `g`, token 0). */
static inline size_t attn_block_base(const attn_tile *t, int blk)
{
    return (((size_t)t->table[blk] * t->n_kv_heads + t->kv_head) * t->block_size) *
           (size_t)t->head_dim;
}

#endif
