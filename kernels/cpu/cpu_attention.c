/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_attention.c - causal attention over the paged KV cache, flash-attention style, on CPU.
 *
 * One code path serves prefill, chunked prefill (queries starting at an offset into an
 * already cached context) and decode (one query per sequence): every query row attends the
 * keys of its own sequence up to its own position, read block by block through the block
 * table. Within a block the scores are computed, then folded into a running maximum, sum
 * and output accumulator (online softmax), so no (queries x keys) score matrix ever
 * exists and memory is O(head_dim) per query head whatever the context length.
 *
 * Work item = (query row, kv head, group of up to ATTN_MAX_GROUP query heads sharing that
 * kv head): a K/V block is loaded once for all the query heads of a grouped-query group.
 * Items are claimed one by one from the backend's thread pool because rows of one prefill
 * differ in length. Per-item scratch lives on the stack (bounded by the limits below), so
 * nothing is allocated. Cost: O(sum over rows of context * n_heads * head_dim).
 */
#include <float.h>
#include <stdint.h>
#include <math.h>

#include "common/base/status.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_pool.h"

#define ATTN_MAX_HEAD_DIM 256
#define ATTN_MAX_BLOCK 256
#define ATTN_MAX_GROUP 8

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

static void attend_item(const attn_args *a, int row, int kvh, int h0, int n_h)
{
    const int hd = a->head_dim, bs = a->block_size;
    const int s = seq_of_row(a->q_start, a->n_seqs, row);
    const int n_q = a->q_start[s + 1] - a->q_start[s];
    const int pos = a->ctx_len[s] - n_q + (row - a->q_start[s]);
    const int lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    const int32_t *table = a->block_tables + (size_t)s * a->max_blocks;
    const float *kc = a->k_cache, *vc = a->v_cache;

    float q[ATTN_MAX_GROUP][ATTN_MAX_HEAD_DIM];
    float acc[ATTN_MAX_GROUP][ATTN_MAX_HEAD_DIM];
    float m[ATTN_MAX_GROUP], l[ATTN_MAX_GROUP];
    float sc[ATTN_MAX_GROUP][ATTN_MAX_BLOCK];

    for (int r = 0; r < n_h; r++) {
        const float *qr = (const float *)a->q + (size_t)row * a->q_stride + (size_t)(h0 + r) * hd;
        for (int j = 0; j < hd; j++) {
            q[r][j] = qr[j] * a->scale;
            acc[r][j] = 0.0f;
        }
        m[r] = -FLT_MAX;
        l[r] = 0.0f;
    }

    for (int blk = lo / bs; blk <= pos / bs; blk++) {
        const int t0 = blk * bs;
        const int j0 = lo > t0 ? lo - t0 : 0;
        const int j1 = pos - t0 + 1 < bs ? pos - t0 + 1 : bs;
        const size_t base = (((size_t)table[blk] * a->n_kv_heads + kvh) * bs) * hd;
        const float *kb = kc + base, *vb = vc + base;

        for (int r = 0; r < n_h; r++) {
            float bmax = -FLT_MAX;
            for (int j = j0; j < j1; j++) {
                const float *k = kb + (size_t)j * hd;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int d = 0; d < hd; d++)
                    dot += q[r][d] * k[d];
                sc[r][j] = dot;
                bmax = dot > bmax ? dot : bmax;
            }
            float m_new = bmax > m[r] ? bmax : m[r];
            float corr = expf(m[r] - m_new);
            float sum = 0.0f;
            for (int j = j0; j < j1; j++) {
                sc[r][j] = expf(sc[r][j] - m_new);
                sum += sc[r][j];
            }
            l[r] = l[r] * corr + sum;
            m[r] = m_new;
            float *ar = acc[r];
#pragma omp simd
            for (int d = 0; d < hd; d++)
                ar[d] *= corr;
            for (int j = j0; j < j1; j++) {
                const float *v = vb + (size_t)j * hd;
                const float p = sc[r][j];
#pragma omp simd
                for (int d = 0; d < hd; d++)
                    ar[d] += p * v[d];
            }
        }
    }

    for (int r = 0; r < n_h; r++) {
        float *o = (float *)a->out + ((size_t)row * a->n_heads + h0 + r) * hd;
        const float inv = 1.0f / l[r];
        for (int d = 0; d < hd; d++)
            o[d] = acc[r][d] * inv;
    }
}

/* One pool item: query row x KV head x group of query heads. */
typedef struct attn_job {
    const attn_args *a;
    int rep, first, n_groups;
} attn_job;

static void attn_item(void *ctx, int it)
{
    const attn_job *j = ctx;
    const attn_args *a = j->a;
    int grp = it % j->n_groups;
    int kvh = (it / j->n_groups) % a->n_kv_heads;
    int row = it / (j->n_groups * a->n_kv_heads);
    int g_lo = kvh * j->rep - j->first, g_hi = g_lo + j->rep;
    g_lo = g_lo > 0 ? g_lo : 0;
    g_hi = g_hi < a->n_heads ? g_hi : a->n_heads;
    int h0 = g_lo + grp * ATTN_MAX_GROUP;
    int n_h = g_hi - h0 < ATTN_MAX_GROUP ? g_hi - h0 : ATTN_MAX_GROUP;
    if (n_h > 0)
        attend_item(a, row, kvh, h0, n_h);
}

int cpu_attention(backend_t *b, const attn_args *a)
{
    if (a->head_dim > ATTN_MAX_HEAD_DIM || a->block_size > ATTN_MAX_BLOCK)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "cpu attention: head_dim %d / block_size %d above limits %d / %d",
                          a->head_dim, a->block_size, ATTN_MAX_HEAD_DIM, ATTN_MAX_BLOCK);
    /* local KV head kvh serves local query heads [kvh * rep - first, + rep) clipped to
     * [0, n_heads): a tensor-parallel slice may cut its first and last group short */
    const int rep = a->q_per_kv ? a->q_per_kv : a->n_heads / a->n_kv_heads;
    const int first = a->q_per_kv ? a->q_head0 % rep : 0;
    const int n_groups = (rep + ATTN_MAX_GROUP - 1) / ATTN_MAX_GROUP;
    const long n_items = (long)a->n_tokens * a->n_kv_heads * n_groups;
    if (n_items > INT32_MAX)
        return deras_fail(DERAS_EINVAL, "cpu attention: %ld work items", n_items);
    attn_job j = {a, rep, first, n_groups};
    cpu_pool_run(cpu_backend_pool(b), (int)n_items, 0, attn_item, &j);
    return DERAS_OK;
}
