/* SPDX-License-Identifier: Apache-2.0 */
/* test_attention.c - paged causal attention (CPU backend) against dense attention
 * (ref_attention.h), on every kernel path this CPU has and every KV cache dtype.
 *
 * Each case builds several sequences with random Q/K/V (fresh seeds per case, never
 * zeros), scatters their K/V into a paged cache through a shuffled block table with
 * backend_kv_write, fills every unused cache slot with NaN (a read outside a sequence's
 * own tokens poisons its output), runs backend_attention on the whole batch with the path
 * forced (qmm_isa_force: scalar, then AVX2 and AVX-512 where the CPU has them) and
 * compares every output with a double-precision softmax(q k^T / sqrt(d)) v over the same
 * keys. The cases cover decode, prefill, chunked prefill, mixed batches, sliding windows
 * at and around block edges, one-token contexts, contexts that are not a multiple of the
 * block, block sizes 1 to 256 (below, at and above the 8 / 16 keys of a SIMD group) and
 * head dims from 2 (scalar only) to 256.
 *
 * Tolerances. Against the reference computed from the cache's own values (K/V rounded to
 * the cache dtype first, so storage rounding is not counted): the outputs are convex
 * combinations of V rows (|v| <= 1), so an error e in the scores moves them by at most
 * ~2e. A score is a dot product whose f32 rounding is at most u * n_eff * S, u = 2^-24,
 * S = max over keys of sum_d |q_d k_d| / sqrt(d) (measured per case), n_eff the longest
 * chain of additions: head_dim / 8 lane accumulations plus the 8 levels of the lane
 * reduction (the scalar path's omp simd reduction is no longer); the exp polynomial and
 * the running sums add a few ulp. TOL = 8 u (head_dim / 8 + 8) S + 1e-6 covers both with a
 * factor 4 margin, while an indexing, mask or rescaling bug gives errors of order 0.1.
 * A SIMD path against the scalar path: 2 TOL (both within TOL of the reference).
 * Against the reference on the unrounded f32 K/V, a 16-bit cache adds its storage
 * rounding: each K and V element moves by at most half an ulp, r = 2^-11 (f16) or 2^-8
 * (bf16) relative, so scores by at most r S and outputs by 2 r S + r: bound
 * TOL + 2 r S + r (f32: r = 0).
 *
 * Batch invariance: on every path and dtype, each query row's output is bit-identical
 * whether it is computed in the whole batch, in its sequence alone, alone as a decode
 * row (context cut at its position), with 1 or 3 threads, or in a batch of the
 * sequences in reverse order; tensor-parallel head slices equal the whole's heads.
 * The KV write rounds alike on every path (bytes equal to common/base/dtype.h's
 * converters for normal, subnormal, infinite and NaN inputs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/qmatmul.h"
#include "ref_attention.h"
#include "test_util.h"

#define MAX_SEQS 6

typedef struct seq_spec {
    int ctx;  /* tokens in cache after the step */
    int n_q;  /* new tokens (queries) this step */
} seq_spec;

typedef struct attn_case {
    const char *name;
    int n_heads, n_kv_heads, head_dim, block_size, window;
    int n_seqs;
    seq_spec seqs[MAX_SEQS];
} attn_case;

static const attn_case cases[] = {
    {"decode mha, partial blocks", 4, 4, 64, 16, 0, 3, {{1, 1}, {17, 1}, {40, 1}}},
    {"decode gqa4, many blocks", 8, 2, 128, 16, 0, 2, {{700, 1}, {33, 1}}},
    {"decode gqa8", 16, 2, 64, 16, 0, 3, {{5, 1}, {129, 1}, {256, 1}}},
    {"mqa prefill", 8, 1, 64, 16, 0, 2, {{23, 23}, {16, 16}}},
    {"prefill gqa4 block 8", 8, 2, 64, 8, 0, 2, {{61, 61}, {9, 9}}},
    {"chunked prefill at offsets", 8, 2, 64, 16, 0, 3, {{100, 37}, {48, 16}, {19, 3}}},
    {"mixed decode + prefill + verify", 4, 4, 128, 32, 0, 4, {{300, 1}, {45, 45}, {77, 5}, {2, 1}}},
    {"sliding window", 8, 2, 64, 16, 7, 3, {{40, 40}, {90, 1}, {60, 12}}},
    {"head dim 80, gqa ratio 12 (> one group)", 12, 1, 80, 16, 0, 2, {{50, 4}, {18, 18}}},
    {"block size 1", 4, 2, 64, 1, 0, 2, {{13, 13}, {7, 1}}},
    {"one token, window 1", 3, 1, 32, 16, 1, 3, {{1, 1}, {2, 2}, {33, 5}}},
    {"window = block size", 6, 3, 64, 16, 16, 2, {{70, 70}, {49, 1}}},
    {"window = block size + 1, block 17", 6, 3, 64, 17, 18, 2, {{71, 40}, {35, 1}}},
    {"window beyond the context", 4, 2, 64, 16, 500, 2, {{37, 37}, {80, 3}}},
    {"block 3, head dim 24 (8 lanes only)", 6, 2, 24, 3, 0, 3, {{29, 29}, {10, 1}, {8, 4}}},
    {"block 5, head dim 8, window 4", 4, 1, 8, 5, 4, 2, {{31, 31}, {12, 1}}},
    {"head dim 6 (scalar kernel everywhere)", 2, 1, 6, 4, 0, 2, {{11, 11}, {9, 2}}},
    {"block 64, head dim 96", 6, 2, 96, 64, 0, 2, {{150, 70}, {65, 1}}},
    {"block 256, head dim 256", 4, 1, 256, 256, 0, 2, {{300, 9}, {257, 1}}},
    {"block 32, head dim 48, window 33", 4, 4, 48, 32, 33, 2, {{99, 99}, {64, 1}}},
};

static const int kv_dtypes[] = {DT_F32, DT_F16, DT_BF16};

static size_t es_of(int dtype)
{
    return dtype_block_bytes(dtype);
}

static float round_to(int dtype, float x)
{
    return dtype == DT_F16 ? fp16_to_f32(f32_to_fp16(x))
           : dtype == DT_BF16 ? bf16_to_f32(f32_to_bf16(x)) : x;
}

/* One case's batch, caches written through backend_kv_write, and its references. */
typedef struct built {
    const attn_case *c;
    int kv_dtype;
    backend_t *b;
    void *k_cache, *v_cache;
    int32_t *tables, *perm;
    int32_t q_start[MAX_SEQS + 1], ctx_len[MAX_SEQS];
    float *q_all;
    float *k_exact[MAX_SEQS], *v_exact[MAX_SEQS]; /* (ctx, kvd) as drawn */
    double *ref_cache;  /* from the values in the cache */
    double *ref_exact;  /* from the values as drawn */
    int n_tokens, max_blocks, max_q, max_ctx, n_blocks;
    double s_max;       /* max over (query, head, key) of sum |q k| / sqrt(d) */
} built;

static void build(built *x, const attn_case *c, int kv_dtype, uint64_t seed)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    x->kv_dtype = kv_dtype;
    assert_int_equal(backend_new("cpu", 2, &x->b), DERAS_OK);
    const int hd = c->head_dim, bs = c->block_size, kvd = c->n_kv_heads * hd;
    const ref_attn_shape shape = {c->n_heads, c->n_kv_heads, hd, c->window, 0, 0};
    int total_blocks = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        int nb = (c->seqs[s].ctx + bs - 1) / bs;
        x->max_blocks = nb > x->max_blocks ? nb : x->max_blocks;
        total_blocks += nb;
        x->n_tokens += c->seqs[s].n_q;
        x->max_q = c->seqs[s].n_q > x->max_q ? c->seqs[s].n_q : x->max_q;
        x->max_ctx = c->seqs[s].ctx > x->max_ctx ? c->seqs[s].ctx : x->max_ctx;
    }
    x->n_blocks = total_blocks + 3; /* spare blocks stay NaN */
    x->perm = malloc((size_t)x->n_blocks * sizeof(int32_t));
    for (int i = 0; i < x->n_blocks; i++)
        x->perm[i] = i;
    for (int i = x->n_blocks - 1; i > 0; i--) {
        int j = (int)(test_rng_next(&seed) % (uint64_t)(i + 1));
        int32_t t = x->perm[i];
        x->perm[i] = x->perm[j];
        x->perm[j] = t;
    }
    x->tables = malloc((size_t)c->n_seqs * x->max_blocks * sizeof(int32_t));
    const size_t cache_elems = (size_t)x->n_blocks * bs * kvd, es = es_of(kv_dtype);
    assert_int_equal(backend_alloc(x->b, cache_elems * es, &x->k_cache), DERAS_OK);
    assert_int_equal(backend_alloc(x->b, cache_elems * es, &x->v_cache), DERAS_OK);
    for (size_t i = 0; i < cache_elems; i++) { /* NaN in every slot nobody writes */
        if (kv_dtype == DT_F32) {
            ((float *)x->k_cache)[i] = ((float *)x->v_cache)[i] = NAN;
        } else {
            const uint16_t nan16 = kv_dtype == DT_F16 ? 0x7e00 : 0x7fc0;
            ((uint16_t *)x->k_cache)[i] = ((uint16_t *)x->v_cache)[i] = nan16;
        }
    }

    const size_t out_n = (size_t)x->n_tokens * c->n_heads * hd;
    x->q_all = malloc(out_n * sizeof(float));
    x->ref_cache = malloc(out_n * sizeof(double));
    x->ref_exact = malloc(out_n * sizeof(double));
    int next_block = 0, row = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        const int ctx = c->seqs[s].ctx, nq = c->seqs[s].n_q, nb = (ctx + bs - 1) / bs;
        for (int i = 0; i < x->max_blocks; i++)
            x->tables[s * x->max_blocks + i] = i < nb ? x->perm[next_block++] : -1;
        const size_t n = (size_t)ctx * kvd;
        float *k = x->k_exact[s] = malloc(n * sizeof(float));
        float *v = x->v_exact[s] = malloc(n * sizeof(float));
        test_fill_random(k, n, &seed, 1.5f);
        test_fill_random(v, n, &seed, 1.0f);
        int32_t *slots = malloc((size_t)ctx * sizeof(int32_t));
        for (int t = 0; t < ctx; t++)
            slots[t] = x->tables[s * x->max_blocks + t / bs] * bs + t % bs;
        assert_int_equal(backend_kv_write(x->b, x->k_cache, x->v_cache, k, v, kvd, slots, ctx,
                                          c->n_kv_heads, hd, bs, kv_dtype),
                         DERAS_OK);
        free(slots);
        float *kr = malloc(n * sizeof(float)), *vr = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            kr[i] = round_to(kv_dtype, k[i]);
            vr[i] = round_to(kv_dtype, v[i]);
        }
        float *qs = x->q_all + (size_t)row * c->n_heads * hd;
        test_fill_random(qs, (size_t)nq * c->n_heads * hd, &seed, 1.5f);
        const size_t at = (size_t)row * c->n_heads * hd;
        ref_attention(&shape, qs, (size_t)c->n_heads * hd, kr, vr, ctx, nq, x->ref_cache + at);
        ref_attention(&shape, qs, (size_t)c->n_heads * hd, k, v, ctx, nq, x->ref_exact + at);
        const int rep = c->n_heads / c->n_kv_heads;
        for (int i = 0; i < nq; i++)
            for (int h = 0; h < c->n_heads; h++)
                for (int t = 0; t < ctx; t++) {
                    double sum = 0;
                    for (int d = 0; d < hd; d++)
                        sum += fabs((double)qs[((size_t)i * c->n_heads + h) * hd + d] *
                                    kr[(size_t)t * kvd + (h / rep) * hd + d]);
                    sum /= sqrt((double)hd);
                    x->s_max = sum > x->s_max ? sum : x->s_max;
                }
        free(kr);
        free(vr);
        row += nq;
        x->q_start[s + 1] = row;
        x->ctx_len[s] = ctx;
    }
}

static void unbuild(built *x)
{
    for (int s = 0; s < x->c->n_seqs; s++) {
        free(x->k_exact[s]);
        free(x->v_exact[s]);
    }
    free(x->perm);
    free(x->tables);
    free(x->q_all);
    free(x->ref_cache);
    free(x->ref_exact);
    backend_free(x->b, x->k_cache);
    backend_free(x->b, x->v_cache);
    backend_destroy(&x->b);
}

static attn_args args_of(const built *x, float *out)
{
    const attn_case *c = x->c;
    return (attn_args){
        .out = out, .q = x->q_all, .q_stride = c->n_heads * c->head_dim, .k_cache = x->k_cache,
        .v_cache = x->v_cache, .kv_dtype = x->kv_dtype, .q_start = x->q_start,
        .ctx_len = x->ctx_len, .block_tables = x->tables, .n_seqs = c->n_seqs,
        .n_tokens = x->n_tokens, .max_blocks = x->max_blocks, .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .block_size = c->block_size,
        .window = c->window, .scale = 1.0f / sqrtf((float)c->head_dim), .max_q_len = x->max_q,
        .max_ctx_len = x->max_ctx,
    };
}

static size_t out_elems(const built *x)
{
    return (size_t)x->n_tokens * x->c->n_heads * x->c->head_dim;
}

/* Run the whole batch on `isa`; out must hold out_elems(x) floats (filled with NaN first). */
static void run_isa(const built *x, int isa, float *out)
{
    assert_int_equal(qmm_isa_force(isa), DERAS_OK);
    for (size_t i = 0; i < out_elems(x); i++)
        out[i] = NAN;
    attn_args a = args_of(x, out);
    if (backend_attention(x->b, &a))
        fail_msg("%s on %s: %s", x->c->name, qmm_isa_name(isa), deras_errmsg());
}

/* Max |got - want| over the batch; non-finite counts as infinite. */
static double max_err_d(const float *got, const double *want, size_t n, size_t *at)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = isfinite(got[i]) ? fabs(got[i] - want[i]) : INFINITY;
        if (e > worst) {
            worst = e;
            *at = i;
        }
    }
    return worst;
}

static double tol_of(const built *x)
{
    const double u = ldexp(1.0, -24);
    return 8 * u * (x->c->head_dim / 8.0 + 8) * x->s_max + 1e-6;
}

static double storage_r(int dtype)
{
    return dtype == DT_F16 ? ldexp(1.0, -11) : dtype == DT_BF16 ? ldexp(1.0, -8) : 0;
}

static void paged_attention_matches_dense_reference_on_every_path(void **state)
{
    (void)state;
    const int best = qmm_isa_best();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t d = 0; d < sizeof kv_dtypes / sizeof kv_dtypes[0]; d++) {
            built x;
            build(&x, &cases[i], kv_dtypes[d], 0xA77E0000ull + i * 16 + d);
            const size_t n = out_elems(&x);
            float *scalar = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
            const double tol = tol_of(&x), r = storage_r(x.kv_dtype);
            const double tol_exact = tol + 2 * r * x.s_max + r;
            for (int isa = QMM_ISA_SCALAR; isa <= best; isa++) {
                float *out = isa == QMM_ISA_SCALAR ? scalar : got;
                run_isa(&x, isa, out);
                size_t at = 0;
                double e = max_err_d(out, x.ref_cache, n, &at);
                if (e > tol)
                    fail_msg("'%s' %s cache, %s path: max error %.3g > %.3g at %zu (got %g, "
                             "expected %g)", x.c->name, dtype_name(x.kv_dtype), qmm_isa_name(isa),
                             e, tol, at, out[at], x.ref_cache[at]);
                double ee = max_err_d(out, x.ref_exact, n, &at);
                if (ee > tol_exact)
                    fail_msg("'%s' %s cache, %s path: error %.3g against the unrounded K/V "
                             "> %.3g", x.c->name, dtype_name(x.kv_dtype), qmm_isa_name(isa), ee,
                             tol_exact);
                double es = 0;
                for (size_t k = 0; k < n; k++)
                    es = fmax(es, fabs((double)out[k] - scalar[k]));
                if (es > 2 * tol)
                    fail_msg("'%s' %s cache: %s path differs from scalar by %.3g > %.3g",
                             x.c->name, dtype_name(x.kv_dtype), qmm_isa_name(isa), es, 2 * tol);
            }
            free(scalar);
            free(got);
            unbuild(&x);
        }
    assert_int_equal(qmm_isa_force(best), DERAS_OK);
}

static void expect_same_bits(const float *got, const float *want, size_t n, const char *what)
{
    if (memcmp(got, want, n * sizeof(float))) {
        size_t i = 0;
        while (i < n && !memcmp(&got[i], &want[i], sizeof(float)))
            i++;
        fail_msg("%s: element %zu is %.9g, the whole batch gave %.9g", what, i, got[i], want[i]);
    }
}

/* Rows of the whole batch against: each sequence alone, each row alone as a decode row
 * (context cut at its position), 1 and 3 threads, the sequences in reverse order. */
static void check_invariance(const built *x, int isa)
{
    const attn_case *c = x->c;
    const int hd = c->head_dim, rw = c->n_heads * hd;
    const size_t n = out_elems(x);
    float *whole = malloc(n * sizeof(float)), *part = malloc(n * sizeof(float));
    char what[200];
    run_isa(x, isa, whole);
    for (int s = 0; s < c->n_seqs; s++) {
        const int r0 = x->q_start[s], nq = x->q_start[s + 1] - r0;
        int32_t qs[2] = {0, nq}, cl[1] = {x->ctx_len[s]};
        attn_args a = args_of(x, part);
        a.q = x->q_all + (size_t)r0 * rw;
        a.q_start = qs;
        a.ctx_len = cl;
        a.block_tables = x->tables + (size_t)s * x->max_blocks;
        a.n_seqs = 1;
        a.n_tokens = nq;
        a.max_q_len = nq;
        assert_int_equal(backend_attention(x->b, &a), DERAS_OK);
        snprintf(what, sizeof what, "'%s' %s %s: sequence %d alone", c->name,
                 dtype_name(x->kv_dtype), qmm_isa_name(isa), s);
        expect_same_bits(part, whole + (size_t)r0 * rw, (size_t)nq * rw, what);
        for (int i = 0; i < nq; i++) {
            cl[0] = x->ctx_len[s] - nq + i + 1;
            qs[1] = 1;
            a.q = x->q_all + (size_t)(r0 + i) * rw;
            a.n_tokens = a.max_q_len = 1;
            assert_int_equal(backend_attention(x->b, &a), DERAS_OK);
            snprintf(what, sizeof what, "'%s' %s %s: sequence %d row %d as a decode row",
                     c->name, dtype_name(x->kv_dtype), qmm_isa_name(isa), s, i);
            expect_same_bits(part, whole + (size_t)(r0 + i) * rw, (size_t)rw, what);
        }
    }
    for (int threads = 1; threads <= 3; threads += 2) {
        backend_t *b = NULL;
        assert_int_equal(backend_new("cpu", threads, &b), DERAS_OK);
        attn_args a = args_of(x, part);
        assert_int_equal(backend_attention(b, &a), DERAS_OK);
        backend_destroy(&b);
        snprintf(what, sizeof what, "'%s' %s %s: %d threads", c->name, dtype_name(x->kv_dtype),
                 qmm_isa_name(isa), threads);
        expect_same_bits(part, whole, n, what);
    }
    backend_t *two = NULL; /* restore the pool the built backend was made with */
    assert_int_equal(backend_new("cpu", 2, &two), DERAS_OK);
    backend_destroy(&two);
    /* reverse order of sequences: rows move, tables and contexts follow */
    float *q_rev = malloc(n * sizeof(float));
    int32_t qs[MAX_SEQS + 1], cl[MAX_SEQS];
    int32_t *tb = malloc((size_t)c->n_seqs * x->max_blocks * sizeof(int32_t));
    qs[0] = 0;
    for (int k = 0; k < c->n_seqs; k++) {
        const int s = c->n_seqs - 1 - k, r0 = x->q_start[s], nq = x->q_start[s + 1] - r0;
        memcpy(q_rev + (size_t)qs[k] * rw, x->q_all + (size_t)r0 * rw, (size_t)nq * rw * sizeof(float));
        memcpy(tb + (size_t)k * x->max_blocks, x->tables + (size_t)s * x->max_blocks,
               (size_t)x->max_blocks * sizeof(int32_t));
        qs[k + 1] = qs[k] + nq;
        cl[k] = x->ctx_len[s];
    }
    attn_args a = args_of(x, part);
    a.q = q_rev;
    a.q_start = qs;
    a.ctx_len = cl;
    a.block_tables = tb;
    assert_int_equal(backend_attention(x->b, &a), DERAS_OK);
    for (int k = 0; k < c->n_seqs; k++) {
        const int s = c->n_seqs - 1 - k, r0 = x->q_start[s], nq = x->q_start[s + 1] - r0;
        snprintf(what, sizeof what, "'%s' %s %s: sequence %d in a reversed batch", c->name,
                 dtype_name(x->kv_dtype), qmm_isa_name(isa), s);
        expect_same_bits(part + (size_t)qs[k] * rw, whole + (size_t)r0 * rw, (size_t)nq * rw, what);
    }
    free(tb);
    free(q_rev);
    free(whole);
    free(part);
}

static void rows_are_identical_in_any_batch_tile_or_thread_count(void **state)
{
    (void)state;
    const int best = qmm_isa_best();
    static const int picks[] = {3, 5, 6, 7, 12, 14, 15, 17};
    for (size_t p = 0; p < sizeof picks / sizeof picks[0]; p++)
        for (size_t d = 0; d < sizeof kv_dtypes / sizeof kv_dtypes[0]; d++) {
            built x;
            build(&x, &cases[picks[p]], kv_dtypes[d], 0xB1770000ull + p * 16 + d);
            for (int isa = QMM_ISA_SCALAR; isa <= best; isa++)
                check_invariance(&x, isa);
            unbuild(&x);
        }
    assert_int_equal(qmm_isa_force(best), DERAS_OK);
}

/* backend_kv_write on every path writes the bytes of dtype.h's converters: random values
 * of every magnitude, subnormals, halfway cases, infinities and NaNs of every payload. */
static void kv_write_rounds_alike_on_every_path(void **state)
{
    (void)state;
    enum { N = 1 << 16, HD = 64 }; /* one token per 64 values */
    const int best = qmm_isa_best();
    float *x = malloc(N * sizeof(float));
    uint64_t seed = 0xC0FFEEull;
    for (int i = 0; i < N; i++) {
        uint32_t bits = (uint32_t)i << 16 | (uint32_t)(test_rng_next(&seed) & 0xffff);
        if (i % 7 == 0) /* halfway and near-halfway for both formats */
            bits = (bits & 0xffff0000u) | (i % 14 ? 0x8000u : 0x1000u);
        memcpy(&x[i], &bits, sizeof bits);
    }
    int32_t *slots = malloc((N / HD) * sizeof(int32_t));
    for (int t = 0; t < N / HD; t++)
        slots[t] = (t * 37) % (N / HD); /* a permutation: 37 is prime to 1024 */
    backend_t *b = NULL;
    assert_int_equal(backend_new("cpu", 2, &b), DERAS_OK);
    uint16_t *kc = malloc(N * 2), *vc = malloc(N * 2), *want = malloc(N * 2);
    for (int d = 1; d < 3; d++) {
        const int dt = kv_dtypes[d];
        for (int t = 0; t < N / HD; t++)
            for (int j = 0; j < HD; j++) {
                const float v = x[t * HD + j];
                want[(size_t)slots[t] * HD + j] = dt == DT_F16 ? f32_to_fp16(v) : f32_to_bf16(v);
            }
        for (int isa = QMM_ISA_SCALAR; isa <= best; isa++) {
            assert_int_equal(qmm_isa_force(isa), DERAS_OK);
            memset(kc, 0xAB, N * 2);
            memset(vc, 0xAB, N * 2);
            assert_int_equal(backend_kv_write(b, kc, vc, x, x, HD, slots, N / HD, 1, HD, 16, dt),
                             DERAS_OK);
            for (int i = 0; i < N; i++)
                if (kc[i] != want[i] || vc[i] != want[i])
                    fail_msg("%s write on %s: element %d is 0x%04x / 0x%04x, dtype.h gives 0x%04x",
                             dtype_name(dt), qmm_isa_name(isa), i, kc[i], vc[i], want[i]);
        }
    }
    assert_int_equal(qmm_isa_force(best), DERAS_OK);
    backend_destroy(&b);
    free(kc), free(vc), free(want), free(x), free(slots);
}

static void attention_rejects_inconsistent_heads_and_unkept_dtypes(void **state)
{
    (void)state;
    backend_t *b = NULL;
    assert_int_equal(backend_new("cpu", 1, &b), DERAS_OK);
    float buf[64] = {0};
    int32_t qs[2] = {0, 1}, cl[1] = {1}, tb[1] = {0};
    attn_args a = {.out = buf, .q = buf, .q_stride = 6, .k_cache = buf, .v_cache = buf,
                   .q_start = qs, .ctx_len = cl, .block_tables = tb, .n_seqs = 1,
                   .n_tokens = 1, .max_blocks = 1, .n_heads = 3, .n_kv_heads = 2,
                   .head_dim = 2, .block_size = 1, .scale = 1, .max_q_len = 1,
                   .max_ctx_len = 1};
    assert_int_equal(backend_attention(b, &a), DERAS_EINVAL);
    a.n_heads = 2;
    a.kv_dtype = DT_Q8_0;
    assert_int_equal(backend_attention(b, &a), DERAS_EUNSUPPORTED);
    a.kv_dtype = 12345;
    assert_int_equal(backend_attention(b, &a), DERAS_EUNSUPPORTED);
    a.kv_dtype = DT_BF16;
    assert_int_equal(backend_attention(b, &a), DERAS_OK);
    assert_int_equal(backend_kv_write(b, buf, buf, buf, buf, 4, qs, 1, 2, 2, 1, DT_Q4_K),
                     DERAS_EUNSUPPORTED);
    assert_true(backend_keeps_kv(b, DT_F32) && backend_keeps_kv(b, DT_F16) &&
                backend_keeps_kv(b, DT_BF16) && !backend_keeps_kv(b, DT_Q8_0));
    backend_destroy(&b);
}

/* The device rule kvcalc and the workers share: CPU f32 by default, f16/bf16 on request;
 * CUDA its activation type only. */
static void kv_dtype_rule_per_device(void **state)
{
    (void)state;
    int dt = -1;
    assert_int_equal(backend_kv_dtype("cpu", BACKEND_KV_DEFAULT, &dt), DERAS_OK);
    assert_int_equal(dt, DT_F32);
    assert_int_equal(backend_kv_dtype("cpu", DT_BF16, &dt), DERAS_OK);
    assert_int_equal(dt, DT_BF16);
    assert_int_equal(backend_kv_dtype("cpu", DT_Q8_0, &dt), DERAS_EUNSUPPORTED);
    assert_int_equal(backend_kv_dtype("cuda:0", BACKEND_KV_DEFAULT, &dt), DERAS_OK);
    assert_int_equal(dt, DT_BF16);
    assert_int_equal(backend_kv_dtype("cuda:1:fp16", BACKEND_KV_DEFAULT, &dt), DERAS_OK);
    assert_int_equal(dt, DT_F16);
    assert_int_equal(backend_kv_dtype("cuda:0", DT_F32, &dt), DERAS_EUNSUPPORTED);
    assert_int_equal(backend_kv_dtype("cuda:0:fp16", DT_BF16, &dt), DERAS_EUNSUPPORTED);
    assert_int_equal(backend_kv_dtype("tpu", BACKEND_KV_DEFAULT, &dt), DERAS_EINVAL);
    assert_int_equal(backend_kv_dtype(NULL, BACKEND_KV_DEFAULT, &dt), DERAS_EINVAL);
    backend_t *b = NULL; /* the rule for "cpu" is what the CPU backend keeps */
    assert_int_equal(backend_new("cpu", 1, &b), DERAS_OK);
    for (int d = -2; d < 40; d++) {
        int got = -1;
        bool ruled = backend_kv_dtype("cpu", d, &got) == DERAS_OK && got == d;
        if (ruled != backend_keeps_kv(b, d))
            fail_msg("dtype %d: the rule says %d, the backend %d", d, ruled, backend_keeps_kv(b, d));
    }
    backend_destroy(&b);
}

/* A tensor-parallel rank's slice of the heads (q_head0, q_per_kv): 9 query heads in groups
 * of 3, the slices of TP 2 and TP 4 (starting and ending inside groups) over a cache that
 * holds only the slice's KV heads give exactly the full computation's heads, on every
 * path (head dims 8 and 16: the AVX2 and AVX-512 kernels). */
static void head_slices_equal_the_same_heads_of_the_whole(void **state)
{
    (void)state;
    enum { T = 5, H = 9, KV = 3, BS = 4, NB = 3, HDMAX = 16 };
    backend_t *b = NULL;
    assert_int_equal(backend_new("cpu", 1, &b), DERAS_OK);
    static float q[T * H * HDMAX], kc[NB * KV * BS * HDMAX], vc[NB * KV * BS * HDMAX];
    static float full[T * H * HDMAX], part[T * H * HDMAX];
    static float kl[NB * KV * BS * HDMAX], vl[NB * KV * BS * HDMAX];
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        q[i] = (float)(x % 2001) / 1000.0f - 1.0f;
    }
    for (size_t i = 0; i < sizeof kc / sizeof kc[0]; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        kc[i] = (float)(x % 2001) / 1000.0f - 1.0f;
        vc[i] = (float)((x >> 20) % 2001) / 1000.0f - 1.0f;
    }
    const int best = qmm_isa_best();
    for (int HD = 8; HD <= HDMAX; HD += 8)
        for (int isa = QMM_ISA_SCALAR; isa <= best; isa++) {
            assert_int_equal(qmm_isa_force(isa), DERAS_OK);
            int32_t qs[3] = {0, 2, T}, cl[2] = {7, 9}, tb[2 * NB] = {2, 0, 0, 1, 0, 2};
            attn_args a = {.out = full, .q = q, .q_stride = H * HD, .k_cache = kc, .v_cache = vc,
                           .q_start = qs, .ctx_len = cl, .block_tables = tb, .n_seqs = 2,
                           .n_tokens = T, .max_blocks = NB, .n_heads = H, .n_kv_heads = KV,
                           .head_dim = HD, .block_size = BS, .scale = 0.35f, .max_q_len = 3,
                           .max_ctx_len = 9};
            assert_int_equal(backend_attention(b, &a), DERAS_OK);
            static const int slices[][2] = {{0, 4}, {4, 9}, {0, 2}, {2, 4}, {4, 6}, {6, 9}};
            for (size_t k = 0; k < sizeof slices / sizeof slices[0]; k++) {
                const int h0 = slices[k][0], nh = slices[k][1] - h0;
                const int kv0 = h0 / 3, nkv = (slices[k][1] - 1) / 3 - kv0 + 1;
                for (int blk = 0; blk < NB; blk++) /* the cache of this rank: its KV heads */
                    for (int g = 0; g < nkv; g++)
                        for (int j = 0; j < BS * HD; j++) {
                            kl[((size_t)blk * nkv + g) * BS * HD + j] =
                                kc[((size_t)blk * KV + kv0 + g) * BS * HD + j];
                            vl[((size_t)blk * nkv + g) * BS * HD + j] =
                                vc[((size_t)blk * KV + kv0 + g) * BS * HD + j];
                        }
                attn_args s = a;
                s.out = part;
                s.q = q + h0 * HD;
                s.k_cache = kl;
                s.v_cache = vl;
                s.n_heads = nh;
                s.n_kv_heads = nkv;
                s.q_head0 = h0;
                s.q_per_kv = 3;
                assert_int_equal(backend_attention(b, &s), DERAS_OK);
                for (int t = 0; t < T; t++)
                    for (int j = 0; j < nh * HD; j++)
                        if (part[(size_t)t * nh * HD + j] != full[(size_t)t * H * HD + h0 * HD + j])
                            fail_msg("%s, head dim %d, heads %d-%d: row %d element %d expected "
                                     "%g (whole), got %g", qmm_isa_name(isa), HD, h0,
                                     h0 + nh - 1, t, j, full[(size_t)t * H * HD + h0 * HD + j],
                                     part[(size_t)t * nh * HD + j]);
                s.n_kv_heads = nkv + 1; /* a cache that does not match the slice is refused */
                assert_int_equal(backend_attention(b, &s), DERAS_EINVAL);
            }
        }
    assert_int_equal(qmm_isa_force(best), DERAS_OK);
    backend_destroy(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(paged_attention_matches_dense_reference_on_every_path),
        cmocka_unit_test(rows_are_identical_in_any_batch_tile_or_thread_count),
        cmocka_unit_test(kv_write_rounds_alike_on_every_path),
        cmocka_unit_test(attention_rejects_inconsistent_heads_and_unkept_dtypes),
        cmocka_unit_test(kv_dtype_rule_per_device),
        cmocka_unit_test(head_slices_equal_the_same_heads_of_the_whole),
    };
    printf("attention paths on this CPU: scalar .. %s\n", qmm_isa_name(qmm_isa_best()));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
