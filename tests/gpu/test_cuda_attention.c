/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_attention.c - paged decode and flash prefill attention on the GPU against the
 * CPU backend's attention and, where the case is small, a double-precision dense softmax.
 *
 * Each case draws fresh K/V for every sequence (rounded to the element type), writes them
 * into a paged cache through a shuffled block table with backend_kv_write on both
 * backends, leaves every slot outside the sequences as NaN on the GPU (0xFF bytes: any
 * read of a foreign slot poisons the output), poisons the output, and compares every
 * (row, head) output vector. Decode batches (one query per sequence) run the split
 * kernel with the backend's own split count and with 1 and 7 forced splits; batches with
 * longer queries run both variants of the prefill kernel. Shapes cover head dims 64 and
 * 128, GQA ratios 1, 3, 4, 8 and 12, batches 1 to 256, contexts 1 to 32,768, block sizes
 * 1 to 256, sliding windows, chunked prefill at offsets and mixed batches, tensor-parallel
 * head slices that cut groups short; head dims 16, 80 and 256 take the generic kernel.
 *
 * Tolerance per (row, head), relative L2 against the f32 CPU result: 1e-2 for bf16, 2e-3
 * for fp16. The GPU rounds the output once (2^-9 / 2^-12 relative) and, in prefill, the
 * probabilities once before the P V product (the same again, averaged over the keys), so a
 * row's error is a few 1e-3 (bf16) at most; a wrong key, mask or rescale moves a row by
 * O(1). The same bound holds against the dense double reference.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/base/dtype.h"
#include "gpu_test.h"
#include "ref_attention.h"

static backend_t *cpu;

typedef struct acase {
    const char *name;
    int n_heads, n_kv_heads, head_dim, block_size, window;
    int n_seqs;
    int ctx_fixed, nq_fixed;  /* every sequence: ctx, n_q (0: random, below) */
    int ctx_max;              /* random ctx in [1, ctx_max] */
    int nq_mode;              /* 0: decode (1 query); 1: whole context; 2: random 1..ctx */
    int seqs[8][2];           /* explicit (ctx, n_q) pairs when n_seqs <= 8 and [0][0] > 0 */
    int q_head0, q_per_kv;    /* a tensor-parallel rank's slice of the heads; 0, 0: all */
} acase;

static const acase cases[] = {
    /* decode */
    {"decode mha hd64, partial blocks", 4, 4, 64, 16, 0, 3, 0, 0, 0, 0, {{1, 1}, {17, 1}, {40, 1}}, 0, 0},
    {"decode gqa4 hd128, random contexts", 8, 2, 128, 16, 0, 5, 0, 0, 700, 0, {{0}}, 0, 0},
    {"decode gqa8 hd128, batch 256", 32, 4, 128, 16, 0, 256, 0, 0, 1500, 0, {{0}}, 0, 0},
    {"decode gqa4 hd128, batch 64 context 4096", 32, 8, 128, 16, 0, 64, 4096, 1, 0, 0, {{0}}, 0, 0},
    {"decode gqa8 hd128, batch 1 context 32768", 32, 4, 128, 16, 0, 1, 32768, 1, 0, 0, {{0}}, 0, 0},
    {"decode gqa12 hd64 (two head groups)", 12, 1, 64, 16, 0, 4, 0, 0, 300, 0, {{0}}, 0, 0},
    {"decode gqa3 hd128", 6, 2, 128, 32, 0, 6, 0, 0, 400, 0, {{0}}, 0, 0},
    {"decode sliding window 100", 8, 2, 64, 16, 100, 8, 0, 0, 3000, 0, {{0}}, 0, 0},
    {"decode block size 1", 4, 2, 64, 1, 0, 2, 0, 0, 0, 0, {{13, 1}, {7, 1}}, 0, 0},
    {"decode mqa hd64, batch 16", 8, 1, 64, 16, 0, 16, 0, 0, 1000, 0, {{0}}, 0, 0},
    /* prefill, chunked prefill, mixed */
    {"prefill mqa hd64", 8, 1, 64, 16, 0, 2, 0, 0, 0, 0, {{23, 23}, {16, 16}}, 0, 0},
    {"prefill gqa4 hd128, 2048 tokens", 16, 4, 128, 16, 0, 1, 2048, 2048, 0, 0, {{0}}, 0, 0},
    {"chunked prefill at offsets hd128", 8, 2, 128, 16, 0, 3, 0, 0, 0, 0, {{3000, 500}, {48, 16}, {19, 3}}, 0, 0},
    {"mixed decode + prefill + verify", 4, 4, 128, 32, 0, 4, 0, 0, 0, 0, {{300, 1}, {45, 45}, {77, 5}, {2, 1}}, 0, 0},
    {"prefill sliding window 7", 8, 2, 64, 16, 7, 3, 0, 0, 0, 0, {{40, 40}, {90, 1}, {60, 12}}, 0, 0},
    {"prefill sliding window 200", 8, 2, 128, 16, 200, 2, 0, 0, 0, 0, {{600, 300}, {1000, 1000}}, 0, 0},
    {"prefill gqa8 hd64, block size 256", 16, 2, 64, 256, 0, 1, 1000, 1000, 0, 0, {{0}}, 0, 0},
    {"prefill block size 1", 4, 2, 128, 1, 0, 2, 0, 0, 0, 0, {{13, 13}, {70, 70}}, 0, 0},
    {"32 short prefills at random offsets", 8, 2, 128, 16, 0, 32, 0, 0, 200, 2, {{0}}, 0, 0},
    /* head dims without a tensor-core kernel: the generic warp-per-row path */
    {"generic hd16 mixed batch", 4, 2, 16, 4, 0, 3, 0, 0, 0, 0, {{30, 30}, {50, 1}, {9, 4}}, 0, 0},
    {"generic hd80 window 5", 6, 3, 80, 16, 5, 2, 0, 0, 0, 0, {{40, 40}, {70, 1}}, 0, 0},
    {"generic hd256 decode", 4, 1, 256, 16, 0, 3, 0, 0, 500, 0, {{0}}, 0, 0},
    /* tensor-parallel slices: global heads 6..17 of 4 per KV head (KV heads 1..4, the first
     * and last groups cut short); heads 3..7 of 8 per KV head; heads 5..10 of 2 */
    {"tp slice decode hd128", 12, 4, 128, 16, 0, 8, 0, 0, 900, 0, {{0}}, 6, 4},
    {"tp slice prefill hd64", 5, 1, 64, 16, 0, 2, 0, 0, 0, 0, {{300, 300}, {90, 20}}, 3, 8},
    {"tp slice generic hd16", 6, 4, 16, 8, 0, 2, 0, 0, 0, 0, {{40, 40}, {25, 1}}, 5, 2},
};

static void check_rows(const char *what, int dt, const float *got, const float *want,
                       const double *dense, int n_rows, int n_heads, int hd)
{
    const double tol = dt == CUDA_DTYPE_FP16 ? 2e-3 : 1e-2;
    for (int r = 0; r < n_rows; r++)
        for (int h = 0; h < n_heads; h++) {
            const size_t o = ((size_t)r * n_heads + h) * hd;
            double num = 0, den = 0, dnum = 0, dden = 0;
            for (int d = 0; d < hd; d++) {
                double e = (double)got[o + d] - want[o + d];
                num += e * e;
                den += (double)want[o + d] * want[o + d];
                if (dense) {
                    double f = (double)got[o + d] - dense[o + d];
                    dnum += f * f;
                    dden += dense[o + d] * dense[o + d];
                }
            }
            double rel = sqrt(num / (den > 0 ? den : 1e-300));
            if (!(rel <= tol))
                fail_msg("%s (%s): row %d head %d: relative L2 error %.3g against the CPU "
                         "backend, expected <= %.3g (first element got %.6g, expected %.6g)",
                         what, gpu_dtype_name(dt), r, h, rel, tol, got[o], want[o]);
            if (dense) {
                double drel = sqrt(dnum / (dden > 0 ? dden : 1e-300));
                if (!(drel <= tol))
                    fail_msg("%s (%s): row %d head %d: relative L2 error %.3g against dense "
                             "double attention, expected <= %.3g",
                             what, gpu_dtype_name(dt), r, h, drel, tol);
            }
        }
}

static void run_case(const acase *c, int dt, uint64_t seed)
{
    backend_t *g = NULL;
    GPU_OK(backend_new(gpu_spec(dt), 0, &g));
    const int S = c->n_seqs, hd = c->head_dim, bs = c->block_size, nkv = c->n_kv_heads;
    int *ctx = malloc(S * sizeof(int)), *nq = malloc(S * sizeof(int));
    for (int s = 0; s < S; s++) {
        if (c->seqs[0][0] > 0) {
            ctx[s] = c->seqs[s][0];
            nq[s] = c->seqs[s][1];
        } else {
            ctx[s] = c->ctx_fixed ? c->ctx_fixed
                                  : 1 + (int)(test_rng_next(&seed) % (uint64_t)c->ctx_max);
            nq[s] = c->nq_fixed ? c->nq_fixed
                    : c->nq_mode == 0 ? 1
                    : c->nq_mode == 1 ? ctx[s]
                                      : 1 + (int)(test_rng_next(&seed) % (uint64_t)ctx[s]);
        }
    }
    int n_tok = 0, max_q = 0, max_ctx = 0, max_blocks = 0;
    long tot_ctx = 0, tot_blocks = 0;
    int32_t *q_start = malloc((S + 1) * sizeof(int32_t));
    for (int s = 0; s < S; s++) {
        q_start[s] = n_tok;
        n_tok += nq[s];
        tot_ctx += ctx[s];
        int nb = (ctx[s] + bs - 1) / bs;
        tot_blocks += nb;
        max_blocks = nb > max_blocks ? nb : max_blocks;
        max_q = nq[s] > max_q ? nq[s] : max_q;
        max_ctx = ctx[s] > max_ctx ? ctx[s] : max_ctx;
    }
    q_start[S] = n_tok;
    const int n_blocks = (int)tot_blocks + 3;

    /* shuffled block ids; unused table entries -1 (a read of one faults) */
    int32_t *perm = malloc(n_blocks * sizeof(int32_t));
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(test_rng_next(&seed) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *tables = malloc((size_t)S * max_blocks * sizeof(int32_t));
    int32_t *slots = malloc((size_t)tot_ctx * sizeof(int32_t));
    long next = 0, tok = 0;
    for (int s = 0; s < S; s++) {
        for (int b = 0; b < max_blocks; b++)
            tables[(size_t)s * max_blocks + b] = b * bs < ctx[s] ? perm[next++] : -1;
        for (int t = 0; t < ctx[s]; t++)
            slots[tok++] = tables[(size_t)s * max_blocks + t / bs] * bs + t % bs;
    }

    /* K/V rows of every context token, sequence after sequence: (tot_ctx, nkv * hd) */
    const int kvw = nkv * hd, q_stride = c->n_heads * hd + 8;
    float *kh = gpu_random(dt, (size_t)tot_ctx * kvw, &seed, 1.0f);
    float *vh = gpu_random(dt, (size_t)tot_ctx * kvw, &seed, 1.0f);
    float *qh = gpu_random(dt, (size_t)n_tok * q_stride, &seed, 1.0f);
    const size_t cache_elems = (size_t)n_blocks * bs * kvw;
    dual kc = dual_new(cpu, g, NULL, cache_elems), vc = dual_new(cpu, g, NULL, cache_elems);
    gpu_poison(g, kc.g, cache_elems * 2);
    gpu_poison(g, vc.g, cache_elems * 2);
    {
        /* write in pieces of at most 1 M tokens' worth, through each backend's kv_write */
        dual kk = dual_new(cpu, g, kh, (size_t)tot_ctx * kvw), vv = dual_new(cpu, g, vh, (size_t)tot_ctx * kvw);
        dual sl = dual_i32(cpu, g, slots, (size_t)tot_ctx);
        GPU_OK(backend_kv_write(cpu, kc.c, vc.c, kk.c, vv.c, kvw, sl.c, (int)tot_ctx, nkv, hd, bs,
                                DT_F32));
        GPU_OK(backend_kv_write(g, kc.g, vc.g, kk.g, vv.g, kvw, sl.g, (int)tot_ctx, nkv, hd, bs,
                                gpu_kv_dtype(dt)));
        GPU_OK(backend_sync(g));
        dual_free(cpu, g, &kk);
        dual_free(cpu, g, &vv);
        dual_free(cpu, g, &sl);
    }
    dual q = dual_new(cpu, g, qh, (size_t)n_tok * q_stride);
    dual out = dual_new(cpu, g, NULL, (size_t)n_tok * c->n_heads * hd);
    dual qs = dual_i32(cpu, g, q_start, (size_t)S + 1), cl;
    {
        int32_t *c32 = malloc(S * sizeof(int32_t));
        for (int s = 0; s < S; s++)
            c32[s] = ctx[s];
        cl = dual_i32(cpu, g, c32, (size_t)S);
        free(c32);
    }
    dual tb = dual_i32(cpu, g, tables, (size_t)S * max_blocks);

    attn_args a = {
        .q_stride = q_stride, .n_seqs = S, .n_tokens = n_tok, .max_blocks = max_blocks,
        .n_heads = c->n_heads, .n_kv_heads = nkv, .head_dim = hd, .block_size = bs,
        .window = c->window, .scale = 1.0f / sqrtf((float)hd), .max_q_len = max_q,
        .max_ctx_len = max_ctx, .q_head0 = c->q_head0, .q_per_kv = c->q_per_kv,
    };
    a.out = out.c, a.q = q.c, a.k_cache = kc.c, a.v_cache = vc.c, a.q_start = qs.c;
    a.ctx_len = cl.c, a.block_tables = tb.c;
    GPU_OK(backend_attention(cpu, &a));
    float *want = malloc(out.n * sizeof(float)), *got = malloc(out.n * sizeof(float));
    GPU_OK(backend_download_f32(cpu, want, out.c, out.n));

    /* dense double reference when the case is small */
    double *dense = NULL;
    double work = 0;
    for (int s = 0; s < S; s++)
        work += (double)nq[s] * ctx[s] * c->n_heads * hd;
    if (work < 2e8) {
        const ref_attn_shape shape = {c->n_heads, c->n_kv_heads, hd, c->window, c->q_head0,
                                      c->q_per_kv};
        dense = malloc(out.n * sizeof(double));
        long kv0 = 0;
        for (int s = 0; s < S; s++) {
            ref_attention(&shape, qh + (size_t)q_start[s] * q_stride, (size_t)q_stride,
                          kh + (size_t)kv0 * kvw, vh + (size_t)kv0 * kvw, ctx[s], nq[s],
                          dense + (size_t)q_start[s] * c->n_heads * hd);
            kv0 += ctx[s];
        }
    }

    a.out = out.g, a.q = q.g, a.k_cache = kc.g, a.v_cache = vc.g, a.q_start = qs.g;
    a.ctx_len = cl.g, a.block_tables = tb.g, a.kv_dtype = gpu_kv_dtype(dt);
    /* decode: automatic, 1 and 7 splits; prefill: both kernel variants */
    const int decode = max_q == 1;
    const int split_runs[3] = {0, 1, 7};
    for (int r = 0; r < (decode ? 3 : 2); r++) {
        GPU_OK(backend_cuda_set_decode_splits(g, decode ? split_runs[r] : 0));
        GPU_OK(backend_cuda_set_prefill_variant(g, decode ? 0 : r + 1));
        gpu_poison(g, out.g, out.n * 2);
        GPU_OK(backend_attention(g, &a));
        GPU_OK(backend_sync(g));
        GPU_OK(backend_download_f32(g, got, out.g, out.n));
        char what[160];
        snprintf(what, sizeof what, "%s%s", c->name,
                 decode ? (r == 0 ? " (auto splits)" : r == 1 ? " (1 split)" : " (7 splits)")
                        : (r == 0 ? " (prefill variant 1)" : " (prefill variant 2)"));
        check_rows(what, dt, got, want, dense, n_tok, c->n_heads, hd);
    }

    free(dense);
    free(want);
    free(got);
    free(kh);
    free(vh);
    free(qh);
    free(ctx);
    free(nq);
    free(q_start);
    free(perm);
    free(tables);
    free(slots);
    dual_free(cpu, g, &kc);
    dual_free(cpu, g, &vc);
    dual_free(cpu, g, &q);
    dual_free(cpu, g, &out);
    dual_free(cpu, g, &qs);
    dual_free(cpu, g, &cl);
    dual_free(cpu, g, &tb);
    backend_destroy(&g);
}

static void attention_matches_cpu_and_dense_reference(void **state)
{
    const int only = state && *state ? *(int *)*state : -1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (only >= 0 && (int)i != only)
            continue;
        for (int dt = 0; dt < 2; dt++) {
            printf("  %s (%s)\n", cases[i].name, gpu_dtype_name(dt));
            fflush(stdout);
            run_case(&cases[i], dt, 1000 + 17 * i + dt);
        }
    }
}

static void head_dim_above_256_is_refused(void **state)
{
    backend_t *g = NULL;
    GPU_OK(backend_new("cuda:0", 0, &g));
    void *buf;
    GPU_OK(backend_alloc(g, 1 << 20, &buf));
    attn_args a = {
        .out = buf, .q = buf, .q_stride = 288, .k_cache = buf, .v_cache = buf, .q_start = buf,
        .ctx_len = buf, .block_tables = buf, .n_seqs = 1, .n_tokens = 1, .max_blocks = 1,
        .n_heads = 1, .n_kv_heads = 1, .head_dim = 288, .block_size = 16, .scale = 0.1f,
        .max_q_len = 1, .max_ctx_len = 1, .kv_dtype = gpu_kv_dtype(CUDA_DTYPE_BF16),
    };
    int rc = backend_attention(g, &a);
    if (rc != DERAS_EUNSUPPORTED)
        fail_msg("head_dim 288: expected %d (DERAS_EUNSUPPORTED), got %d (%s)",
                 DERAS_EUNSUPPORTED, rc, deras_errmsg());
    backend_free(g, buf);
    backend_destroy(&g);
}

/* Usage: test_cuda_attention [case index] (all cases by default). */
int main(int argc, char **argv)
{
    gpu_require_device();
    if (backend_new("cpu", 0, &cpu)) {
        fprintf(stderr, "FAIL: cpu backend: %s\n", deras_errmsg());
        return 1;
    }
    static int only;
    only = argc > 1 ? atoi(argv[1]) : -1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(head_dim_above_256_is_refused),
        cmocka_unit_test_prestate(attention_matches_cpu_and_dense_reference, &only),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    backend_destroy(&cpu);
    return rc;
}
