/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_attention.c - causal attention over the paged KV cache on the CPU: work split and
 * path choice; the kernels are kernels/cpu/attn_*.c (attn_impl.h).
 *
 * One code path serves prefill, chunked prefill (queries starting at an offset into an
 * already cached context), speculative verification and decode (one query per
 * sequence): every query row attends the keys of its own sequence up to its own position,
 * read block by block through the block table, folded into a running maximum, sum and
 * output (online softmax), so no (queries x keys) score matrix ever exists.
 *
 * Work item = (sequence, KV head, a run of the query heads sharing it, a tile of up to
 * ATTN_MAX_QV / heads consecutive query rows): the tile kernel reads each stretch of K/V
 * once for all of its query vectors, flash-attention style. When a step has too few items
 * for the threads (decode of a few sequences), a grouped-query group's heads are split
 * over more items. Items are claimed one by one from the backend's thread pool
 * (kernels/cpu/cpu_pool.h; rows of a prefill differ in length). How items are cut changes no result: a query vector's arithmetic is
 * fixed by its own position (attn_impl.h), so outputs do not depend on the batch, the
 * tile or the thread count.
 *
 * Paths: the plain C reference (attn_scalar.c), AVX2+FMA+F16C (attn_avx2.c, head_dim a
 * multiple of 8) and AVX-512 (attn_avx512.c, a multiple of 16), the path qmatmul.h's
 * switch names ($DERAS_CPU_ISA, qmm_isa_force); a head_dim the path's kernel does not take
 * runs on the widest one that does. Cost: O(sum over rows of context x n_heads x
 * head_dim); scratch on the stack (attn_tile_body.h), nothing allocated.
 */
#include <stdint.h>

#include "common/base/status.h"
#include "kernels/cpu/attn_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_pool.h"
#include "kernels/cpu/qmatmul.h"

static const attn_path *path_for(int isa, int head_dim)
{
#ifdef ATTN_X86
    if (isa >= QMM_ISA_AVX512 && head_dim % attn_path_avx512.lanes == 0)
        return &attn_path_avx512;
    if (isa >= QMM_ISA_AVX2 && head_dim % attn_path_avx2.lanes == 0)
        return &attn_path_avx2;
#endif
    return &attn_path_scalar;
}

int cpu_attention_path(int head_dim, const char **name)
{
    int isa = qmm_isa_active();
    if (isa < 0)
        return isa;
    const attn_path *p = path_for(isa, head_dim);
    *name = p == &attn_path_scalar ? "scalar" : p->lanes == 8 ? "avx2" : "avx512";
    return DERAS_OK;
}

/* Sequence owning query row `row`: the s with q_start[s] <= row < q_start[s + 1]. */
static int seq_of_row(const int32_t *q_start, int n_seqs, int row)
{
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (q_start[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* One pool item: (query row, KV head, run of query heads); only a tile's first row works. */
typedef struct attn_job {
    const attn_args *a;
    const attn_path *path;
    int rep, first, per, n_runs, tq;
} attn_job;

static void attn_item(void *ctx, int it)
{
    const attn_job *j = ctx;
    const attn_args *a = j->a;
    const int rep = j->rep, first = j->first, per = j->per, n_runs = j->n_runs, tq = j->tq;
    const int run = it % n_runs;
    const int kvh = (it / n_runs) % a->n_kv_heads;
    const int row = it / (n_runs * a->n_kv_heads);
    const int s = seq_of_row(a->q_start, a->n_seqs, row);
    const int r0 = a->q_start[s], n_q = a->q_start[s + 1] - r0;
    if ((row - r0) % tq) /* not the first row of a tile */
        return;
    int g_lo = kvh * rep - first, g_hi = g_lo + rep;
    g_lo = g_lo > 0 ? g_lo : 0;
    g_hi = g_hi < a->n_heads ? g_hi : a->n_heads;
    const int h0 = g_lo + run * per;
    const int n_h = g_hi - h0 < per ? g_hi - h0 : per;
    if (n_h <= 0)
        return;
    const int n_rows = r0 + n_q - row < tq ? r0 + n_q - row : tq;
    const attn_tile t = {
        .out = (float *)a->out + ((size_t)row * a->n_heads + h0) * a->head_dim,
        .out_stride = a->n_heads * a->head_dim,
        .q = (const float *)a->q + (size_t)row * a->q_stride + (size_t)h0 * a->head_dim,
        .q_stride = a->q_stride,
        .n_rows = n_rows, .n_heads = n_h,
        .pos0 = a->ctx_len[s] - n_q + (row - r0), .window = a->window, .scale = a->scale,
        .k_cache = a->k_cache, .v_cache = a->v_cache, .kv_dtype = a->kv_dtype,
        .table = a->block_tables + (size_t)s * a->max_blocks,
        .n_kv_heads = a->n_kv_heads, .kv_head = kvh,
        .head_dim = a->head_dim, .block_size = a->block_size,
    };
    j->path->tile(&t);
}

int cpu_attention(backend_t *b, const attn_args *a)
{
    if (a->head_dim > ATTN_MAX_HEAD_DIM || a->block_size > ATTN_MAX_BLOCK)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "cpu attention: head_dim %d / block_size %d above limits %d / %d",
                          a->head_dim, a->block_size, ATTN_MAX_HEAD_DIM, ATTN_MAX_BLOCK);
    const int isa = qmm_isa_active();
    if (isa < 0)
        return isa;
    const attn_path *path = path_for(isa, a->head_dim);
    /* local KV head kvh serves local query heads [kvh * rep - first, + rep) clipped to
     * [0, n_heads): a tensor-parallel slice may cut its first and last group short */
    const int rep = a->q_per_kv ? a->q_per_kv : a->n_heads / a->n_kv_heads;
    const int first = a->q_per_kv ? a->q_head0 % rep : 0;
    /* heads per item: the whole group, unless a decode step has too few items */
    cpu_pool_t *pool = cpu_backend_pool(b);
    const int nth = cpu_pool_threads(pool);
    int per = rep < ATTN_MAX_QV ? rep : ATTN_MAX_QV;
    const long base_items = (long)a->n_seqs * a->n_kv_heads;
    if (a->max_q_len == 1 && base_items < 2L * nth) {
        const int want = (int)((2L * nth + base_items - 1) / base_items);
        per = (rep + want - 1) / want;
    }
    const int n_runs = (rep + per - 1) / per;
    const int tq = ATTN_MAX_QV / per; /* rows per tile */
    const long n_items = (long)a->n_tokens * a->n_kv_heads * n_runs;

    if (n_items > INT32_MAX)
        return deras_fail(DERAS_EINVAL, "cpu attention: %ld work items", n_items);
    const attn_job j = {a, path, rep, first, per, n_runs, tq};
    cpu_pool_run(pool, (int)n_items, 0, attn_item, (void *)&j);
    return DERAS_OK;
}
