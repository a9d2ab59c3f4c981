/* SPDX-License-Identifier: Apache-2.0 */
/* test_attention.c - paged causal attention (CPU backend) against dense attention (ref_attention.h).
 *
 * Each case builds several sequences with random Q/K/V (fresh seeds per case, never
 * zeros), scatters their K/V into a paged cache through a shuffled block table with
 * backend_kv_write, fills every unused cache slot with NaN (a read outside a sequence's
 * own tokens poisons its output), runs backend_attention on the whole batch and compares
 * every output with a double-precision softmax(q k^T / sqrt(d)) v over the same keys.
 *
 * Tolerance: values are O(1) and outputs are convex combinations of V rows; f32 rounding
 * in a dot product of length d <= 128 and a softmax over <= 700 keys stays below ~1e-6
 * relative per operation, so 2e-5 absolute leaves a wide margin while any indexing, mask
 * or rescaling bug gives errors of order 1e-1.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "kernels/backend.h"
#include "ref_attention.h"
#include "test_util.h"

typedef struct seq_spec {
    int ctx;  /* tokens in cache after the step */
    int n_q;  /* new tokens (queries) this step */
} seq_spec;

typedef struct attn_case {
    const char *name;
    int n_heads, n_kv_heads, head_dim, block_size, window;
    int n_seqs;
    seq_spec seqs[6];
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
};

static void run_case(const attn_case *c, uint64_t seed)
{
    backend_t *b = NULL;
    assert_int_equal(backend_new("cpu", 2, &b), DERAS_OK);
    const int hd = c->head_dim, bs = c->block_size, kvd = c->n_kv_heads * hd;
    const ref_attn_shape shape = {c->n_heads, c->n_kv_heads, hd, c->window, 0, 0};
    int max_blocks = 0, total_blocks = 0, n_tokens = 0, max_q = 0, max_ctx = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        int nb = (c->seqs[s].ctx + bs - 1) / bs;
        max_blocks = nb > max_blocks ? nb : max_blocks;
        total_blocks += nb;
        n_tokens += c->seqs[s].n_q;
        max_q = c->seqs[s].n_q > max_q ? c->seqs[s].n_q : max_q;
        max_ctx = c->seqs[s].ctx > max_ctx ? c->seqs[s].ctx : max_ctx;
    }
    int n_blocks = total_blocks + 3; /* spare blocks stay NaN */
    /* a shuffled assignment of physical blocks */
    int32_t *perm = malloc((size_t)n_blocks * sizeof(int32_t));
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(test_rng_next(&seed) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *tables = malloc((size_t)c->n_seqs * max_blocks * sizeof(int32_t));
    int32_t q_start[7], ctx_len[6];
    size_t cache_elems = (size_t)n_blocks * bs * kvd;
    float *k_cache, *v_cache;
    assert_int_equal(backend_alloc(b, cache_elems * 4, (void **)&k_cache), DERAS_OK);
    assert_int_equal(backend_alloc(b, cache_elems * 4, (void **)&v_cache), DERAS_OK);
    for (size_t i = 0; i < cache_elems; i++)
        k_cache[i] = v_cache[i] = NAN;

    float *q_all = malloc((size_t)n_tokens * c->n_heads * hd * sizeof(float));
    float *out = malloc((size_t)n_tokens * c->n_heads * hd * sizeof(float));
    double *ref = malloc((size_t)n_tokens * c->n_heads * hd * sizeof(double));
    float *dense_k[6], *dense_v[6];
    int next_block = 0, row = 0;
    q_start[0] = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        const int ctx = c->seqs[s].ctx, nq = c->seqs[s].n_q, nb = (ctx + bs - 1) / bs;
        for (int i = 0; i < max_blocks; i++)
            tables[s * max_blocks + i] = i < nb ? perm[next_block++] : -1;
        dense_k[s] = malloc((size_t)ctx * kvd * sizeof(float));
        dense_v[s] = malloc((size_t)ctx * kvd * sizeof(float));
        test_fill_random(dense_k[s], (size_t)ctx * kvd, &seed, 1.5f);
        test_fill_random(dense_v[s], (size_t)ctx * kvd, &seed, 1.0f);
        /* write every token's K/V through kv_write (rows of kvd, stride kvd) */
        int32_t *slots = malloc((size_t)ctx * sizeof(int32_t));
        for (int t = 0; t < ctx; t++)
            slots[t] = tables[s * max_blocks + t / bs] * bs + t % bs;
        assert_int_equal(backend_kv_write(b, k_cache, v_cache, dense_k[s], dense_v[s], kvd, slots,
                                          ctx, c->n_kv_heads, hd, bs),
                         DERAS_OK);
        free(slots);
        float *qs = q_all + (size_t)row * c->n_heads * hd;
        test_fill_random(qs, (size_t)nq * c->n_heads * hd, &seed, 1.5f);
        ref_attention(&shape, qs, (size_t)c->n_heads * hd, dense_k[s], dense_v[s], ctx, nq,
                      ref + (size_t)row * c->n_heads * hd);
        row += nq;
        q_start[s + 1] = row;
        ctx_len[s] = ctx;
    }
    for (size_t i = 0; i < (size_t)n_tokens * c->n_heads * hd; i++)
        out[i] = NAN;

    attn_args a = {
        .out = out, .q = q_all, .q_stride = c->n_heads * hd, .k_cache = k_cache,
        .v_cache = v_cache, .q_start = q_start, .ctx_len = ctx_len, .block_tables = tables,
        .n_seqs = c->n_seqs, .n_tokens = n_tokens, .max_blocks = max_blocks,
        .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = hd, .block_size = bs,
        .window = c->window, .scale = 1.0f / sqrtf((float)hd), .max_q_len = max_q,
        .max_ctx_len = max_ctx,
    };
    assert_int_equal(backend_attention(b, &a), DERAS_OK);

    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < (size_t)n_tokens * c->n_heads * hd; i++) {
        double e = isfinite(out[i]) ? fabs(out[i] - ref[i]) : INFINITY;
        if (e > worst) {
            worst = e;
            worst_i = i;
        }
    }
    if (worst > 2e-5)
        fail_msg("case '%s': max abs error %.3g at element %zu (got %g, expected %g)", c->name,
                 worst, worst_i, out[worst_i], ref[worst_i]);
    for (int s = 0; s < c->n_seqs; s++) {
        free(dense_k[s]);
        free(dense_v[s]);
    }
    free(perm);
    free(tables);
    free(q_all);
    free(out);
    free(ref);
    backend_free(b, k_cache);
    backend_free(b, v_cache);
    backend_destroy(&b);
}

static void paged_attention_matches_dense_reference(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (uint64_t rep = 0; rep < 2; rep++)
            run_case(&cases[i], 0xA77E0000ull + i * 16 + rep);
}

static void attention_rejects_inconsistent_heads(void **state)
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
    backend_destroy(&b);
}

/* A tensor-parallel rank's slice of the heads (q_head0, q_per_kv): 9 query heads in groups
 * of 3, the slices of TP 2 and TP 4 (starting and ending inside groups) over a cache that
 * holds only the slice's KV heads give exactly the full computation's heads. */
static void head_slices_equal_the_same_heads_of_the_whole(void **state)
{
    (void)state;
    enum { T = 5, H = 9, KV = 3, HD = 8, BS = 4, NB = 3 };
    backend_t *b = NULL;
    assert_int_equal(backend_new("cpu", 1, &b), DERAS_OK);
    static float q[T * H * HD], kc[NB * KV * BS * HD], vc[NB * KV * BS * HD];
    static float full[T * H * HD], part[T * H * HD], kl[NB * KV * BS * HD], vl[NB * KV * BS * HD];
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
        for (int blk = 0; blk < NB; blk++) /* the cache of this rank: its KV heads only */
            for (int g = 0; g < nkv; g++)
                for (int j = 0; j < BS * HD; j++) {
                    kl[((size_t)blk * nkv + g) * BS * HD + j] = kc[((size_t)blk * KV + kv0 + g) * BS * HD + j];
                    vl[((size_t)blk * nkv + g) * BS * HD + j] = vc[((size_t)blk * KV + kv0 + g) * BS * HD + j];
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
                    fail_msg("heads %d-%d: row %d element %d expected %g (whole), got %g",
                             h0, h0 + nh - 1, t, j, full[(size_t)t * H * HD + h0 * HD + j],
                             part[(size_t)t * nh * HD + j]);
        s.n_kv_heads = nkv + 1; /* a cache that does not match the slice is refused */
        assert_int_equal(backend_attention(b, &s), DERAS_EINVAL);
    }
    backend_destroy(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(paged_attention_matches_dense_reference),
        cmocka_unit_test(attention_rejects_inconsistent_heads),
        cmocka_unit_test(head_slices_equal_the_same_heads_of_the_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
