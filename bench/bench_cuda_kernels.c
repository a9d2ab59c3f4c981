/* SPDX-License-Identifier: Apache-2.0 */
/* bench_cuda_kernels.c - every CUDA kernel against its hardware floor, measured in the
 * same run on the same device.
 *
 *   bench_cuda_kernels [--reps N] [--device cuda:0] [--quick]
 *
 * Floors (METHOD.md): the device-to-device copy bandwidth (cudaMemcpyAsync of 2 GiB,
 * counting bytes read plus bytes written) and the cuBLAS bf16 GEMM rate (8192^3 through
 * backend_matmul, random data) are measured first. A memory-bound kernel's floor is its
 * fewest bytes (every input read once, every output written once) over that bandwidth; a
 * compute-bound kernel's is its FLOPs over that rate. Each figure is the median of --reps
 * launches timed with CUDA events after warm-up, on random data (never zeros), with
 * inputs larger than the L2 cache where the shape allows.
 *
 * Output: one JSON object per line on stdout ({"kernel", "shape", "ms", "floor_ms",
 * "fraction", "gbps" or "tflops", ...}); progress on stderr. tools/gpu_check joins these
 * with bench/sdpa_compare.py's torch figures into docs-ready tables.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"

static backend_t *be;
static int kv_dt; /* the backend's KV cache dtype (its activation type) */
static cudaStream_t st;
static int reps = 20;
static double copy_gbps, gemm_tflops;

#define DIE(...)                                                                              \
    do {                                                                                      \
        fprintf(stderr, "bench_cuda_kernels: " __VA_ARGS__);                                  \
        fputc('\n', stderr);                                                                  \
        exit(1);                                                                              \
    } while (0)
#define OK(call)                                                                              \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_)                                                                              \
            DIE("%s: %s", #call, deras_errmsg());                                             \
    } while (0)
#define CU(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess)                                                                \
            DIE("%s failed at %s:%d: %s", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

/* A device buffer of n elements of the backend's type, random in [-scale, scale). */
static void *rand_buf(size_t n, float scale)
{
    void *d;
    OK(backend_alloc(be, n * 2, &d));
    const size_t chunk = (size_t)1 << 24;
    float *h = malloc(chunk * sizeof(float));
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        for (size_t j = 0; j < m; j++)
            h[j] = frand() * scale;
        OK(backend_upload_f32(be, (char *)d + i * 2, h, m));
    }
    free(h);
    return d;
}

static void *i32_buf(const int32_t *h, size_t n)
{
    void *d;
    OK(backend_alloc(be, n * 4, &d));
    OK(backend_upload(be, d, h, n * 4));
    return d;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef void (*run_fn)(void *ctx);

/* Median milliseconds of one call of fn over `reps` timed calls, after 3 warm-ups. */
static double time_ms(run_fn fn, void *ctx)
{
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++)
        fn(ctx);
    OK(backend_sync(be));
    float *t = malloc(reps * sizeof(float));
    for (int i = 0; i < reps; i++) {
        CU(cudaEventRecord(a, st));
        fn(ctx);
        CU(cudaEventRecord(b, st));
        CU(cudaEventSynchronize(b));
        CU(cudaEventElapsedTime(&t[i], a, b));
    }
    OK(backend_sync(be));
    qsort(t, reps, sizeof(float), cmp_f);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    free(t);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return med;
}

static void report_bytes(const char *kernel, const char *shape, double ms, double bytes)
{
    double floor_ms = bytes / (copy_gbps * 1e9) * 1e3;
    printf("{\"kernel\":\"%s\",\"shape\":\"%s\",\"ms\":%.5f,\"floor_ms\":%.5f,\"fraction\":%.3f,"
           "\"gbps\":%.1f,\"bytes\":%.0f,\"bound\":\"memory\"}\n",
           kernel, shape, ms, floor_ms, floor_ms / ms, bytes / (ms * 1e-3) / 1e9, bytes);
    fflush(stdout);
}

static void report_flops(const char *kernel, const char *shape, double ms, double flops)
{
    double floor_ms = flops / (gemm_tflops * 1e12) * 1e3;
    printf("{\"kernel\":\"%s\",\"shape\":\"%s\",\"ms\":%.5f,\"floor_ms\":%.5f,\"fraction\":%.3f,"
           "\"tflops\":%.1f,\"flops\":%.0f,\"bound\":\"compute\"}\n",
           kernel, shape, ms, floor_ms, floor_ms / ms, flops / (ms * 1e-3) / 1e12, flops);
    fflush(stdout);
}

/* ---- ceilings ---- */

struct copy_ctx { void *dst, *src; size_t bytes; };
static void run_copy(void *p)
{
    struct copy_ctx *c = p;
    CU(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, st));
}

struct mm_ctx { void *y, *x, *w; int n, no, ni; };
static void run_mm(void *p)
{
    struct mm_ctx *c = p;
    const backend_weight w = {.dtype = backend_weight_dtype(be, DT_F32), .rows = c->no,
                              .cols = c->ni, .data = c->w};
    OK(backend_matmul(be, c->y, c->x, &w, NULL, c->n));
}

static void ceilings(void)
{
    struct copy_ctx c = {.bytes = (size_t)2 << 30};
    c.src = rand_buf(c.bytes / 2, 1.0f);
    OK(backend_alloc(be, c.bytes, &c.dst));
    double ms = time_ms(run_copy, &c);
    copy_gbps = 2.0 * c.bytes / (ms * 1e-3) / 1e9;
    printf("{\"kernel\":\"ceiling_copy\",\"shape\":\"2 GiB device-to-device\",\"ms\":%.5f,"
           "\"gbps\":%.1f}\n", ms, copy_gbps);
    backend_free(be, c.src);
    backend_free(be, c.dst);

    struct mm_ctx m = {.n = 8192, .no = 8192, .ni = 8192};
    m.x = rand_buf((size_t)m.n * m.ni, 1.0f);
    m.w = rand_buf((size_t)m.no * m.ni, 0.01f);
    OK(backend_alloc(be, (size_t)m.n * m.no * 2, &m.y));
    ms = time_ms(run_mm, &m);
    gemm_tflops = 2.0 * m.n * m.no * m.ni / (ms * 1e-3) / 1e12;
    printf("{\"kernel\":\"ceiling_gemm\",\"shape\":\"8192^3 cuBLAS\",\"ms\":%.5f,"
           "\"tflops\":%.1f}\n", ms, gemm_tflops);
    fflush(stdout);
    backend_free(be, m.x);
    backend_free(be, m.w);
    backend_free(be, m.y);
}

/* ---- attention ---- */

struct attn_ctx { attn_args a; };
static void run_attn(void *p)
{
    OK(backend_attention(be, &((struct attn_ctx *)p)->a));
}

/* n_seqs sequences of ctx tokens each with n_q new queries, paged in 16-token blocks
 * through a shuffled table. Decode with sweep_splits also times forced split counts. */
static void bench_attention(const char *kernel, int n_seqs, int ctx, int n_q, int n_heads,
                            int n_kv, int hd, int sweep_splits)
{
    const int bs = 16, mb = (ctx + bs - 1) / bs, n_blocks = n_seqs * mb;
    const size_t cache = (size_t)n_blocks * bs * n_kv * hd;
    const int n_tok = n_seqs * n_q, q_stride = (n_heads + 2 * n_kv) * hd;
    int32_t *tab = malloc((size_t)n_blocks * 4), *qs = malloc((size_t)(n_seqs + 1) * 4),
            *cl = malloc((size_t)n_seqs * 4);
    for (int i = 0; i < n_blocks; i++)
        tab[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)((frand() * 0.5f + 0.5f) * (i + 1)) % (i + 1);
        int32_t t = tab[i];
        tab[i] = tab[j];
        tab[j] = t;
    }
    for (int s = 0; s <= n_seqs; s++)
        qs[s] = s * n_q;
    for (int s = 0; s < n_seqs; s++)
        cl[s] = ctx;
    struct attn_ctx c;
    memset(&c, 0, sizeof c);
    attn_args *a = &c.a;
    a->k_cache = rand_buf(cache, 1.0f);
    a->v_cache = rand_buf(cache, 1.0f);
    a->q = rand_buf((size_t)n_tok * q_stride, 1.0f);
    OK(backend_alloc(be, (size_t)n_tok * n_heads * hd * 2, &a->out));
    a->q_start = i32_buf(qs, (size_t)n_seqs + 1);
    a->ctx_len = i32_buf(cl, (size_t)n_seqs);
    a->block_tables = i32_buf(tab, (size_t)n_blocks);
    a->q_stride = q_stride;
    a->n_seqs = n_seqs;
    a->n_tokens = n_tok;
    a->max_blocks = mb;
    a->n_heads = n_heads;
    a->n_kv_heads = n_kv;
    a->head_dim = hd;
    a->block_size = bs;
    a->scale = 1.0f / sqrtf((float)hd);
    a->max_q_len = n_q;
    a->max_ctx_len = ctx;
    a->kv_dtype = kv_dt;
    char shape[160];
    snprintf(shape, sizeof shape, "batch %d ctx %d q %d heads %d/%d hd %d bf16", n_seqs, ctx, n_q,
             n_heads, n_kv, hd);
    if (n_q == 1) {
        /* K and V once, q once, out once */
        double bytes = 2.0 * n_seqs * (double)ctx * n_kv * hd * 2 + 2.0 * n_tok * n_heads * hd * 2;
        report_bytes(kernel, shape, time_ms(run_attn, &c), bytes);
        if (sweep_splits) { /* the split count the backend chose, against forced ones */
            static const int forced[] = {1, 2, 4, 8, 16};
            for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++) {
                char k2[64];
                snprintf(k2, sizeof k2, "%s_splits_%d", kernel, forced[i]);
                OK(backend_cuda_set_decode_splits(be, forced[i]));
                report_bytes(k2, shape, time_ms(run_attn, &c), bytes);
            }
            OK(backend_cuda_set_decode_splits(be, 0));
        }
    } else {
        /* causal: each query sees (ctx - n_q + i + 1) keys; QK^T and PV at 2 FLOPs a MAC.
         * Both prefill variants (cuda_ops.h), the default first. */
        double keys = 0;
        for (int i = 0; i < n_q; i++)
            keys += ctx - n_q + i + 1;
        double flops = 4.0 * n_seqs * n_heads * hd * keys;
        OK(backend_cuda_set_prefill_variant(be, 1));
        report_flops(kernel, shape, time_ms(run_attn, &c), flops);
        OK(backend_cuda_set_prefill_variant(be, 2));
        char k2[64];
        snprintf(k2, sizeof k2, "%s_v2", kernel);
        report_flops(k2, shape, time_ms(run_attn, &c), flops);
        OK(backend_cuda_set_prefill_variant(be, 0));
    }
    backend_free(be, (void *)a->k_cache);
    backend_free(be, (void *)a->v_cache);
    backend_free(be, (void *)a->q);
    backend_free(be, a->out);
    backend_free(be, (void *)a->q_start);
    backend_free(be, (void *)a->ctx_len);
    backend_free(be, (void *)a->block_tables);
    free(tab);
    free(qs);
    free(cl);
}

/* ---- layer ops: Llama-3-8B widths, 8192 rows (inputs well past L2) ---- */

enum op { OP_RMSNORM, OP_ADD_RMSNORM, OP_SILU, OP_ROPE, OP_KV_WRITE, OP_EMBED, OP_SAMPLE,
          OP_DEQUANT };
struct op_ctx {
    enum op op;
    void *a, *b, *c, *d, *e;
    int n, dim;
};
static void run_op(void *p)
{
    struct op_ctx *c = p;
    switch (c->op) {
    case OP_RMSNORM: OK(backend_rmsnorm(be, c->a, c->b, c->c, c->n, c->dim, 1e-5f)); break;
    case OP_ADD_RMSNORM:
        OK(backend_add_rmsnorm(be, c->a, c->d, c->b, c->c, c->n, c->dim, 1e-5f));
        break;
    case OP_SILU: OK(backend_silu_mul(be, c->a, c->b, c->n, c->dim)); break;
    case OP_ROPE: OK(backend_rope(be, c->a, c->b, c->n, 32 + 8, 128, 48 * 128)); break;
    case OP_KV_WRITE:
        OK(backend_kv_write(be, c->a, c->b, c->c, (char *)c->c + 8 * 128 * 2, 48 * 128, c->d,
                            c->n, 8, 128, 16, kv_dt));
        break;
    case OP_EMBED: {
        const backend_weight t = {.dtype = backend_weight_dtype(be, DT_F32), .rows = 128256,
                                  .cols = c->dim, .data = c->b};
        OK(backend_embed(be, c->a, &t, c->c, c->n));
        break;
    }
    case OP_SAMPLE: OK(backend_cuda_sample(be, c->a, c->b, c->c, c->n, c->dim)); break;
    case OP_DEQUANT: OK(backend_cuda_dequant(be, c->a, c->b, 12 /* Q4_K */, (int64_t)c->n * c->dim)); break;
    }
}

static void bench_layer_ops(void)
{
    const int T = 8192, D = 4096, F = 14336;
    struct op_ctx c;

    memset(&c, 0, sizeof c);
    c.op = OP_RMSNORM, c.n = T, c.dim = D;
    c.b = rand_buf((size_t)T * D, 2.0f), c.c = rand_buf(D, 1.0f);
    OK(backend_alloc(be, (size_t)T * D * 2, &c.a));
    report_bytes("rmsnorm", "8192 x 4096 bf16", time_ms(run_op, &c), 2.0 * T * D * 2);
    c.op = OP_ADD_RMSNORM;
    c.d = rand_buf((size_t)T * D, 2.0f);
    /* read x and residual, write residual and out */
    report_bytes("add_rmsnorm", "8192 x 4096 bf16", time_ms(run_op, &c), 4.0 * T * D * 2);
    backend_free(be, c.a), backend_free(be, c.b), backend_free(be, c.c), backend_free(be, c.d);

    memset(&c, 0, sizeof c);
    c.op = OP_SILU, c.n = T, c.dim = F;
    c.b = rand_buf((size_t)T * 2 * F, 4.0f);
    OK(backend_alloc(be, (size_t)T * F * 2, &c.a));
    report_bytes("silu_mul", "8192 x 14336 bf16", time_ms(run_op, &c), 3.0 * T * F * 2);
    backend_free(be, c.a), backend_free(be, c.b);

    /* RoPE on the q and k heads of a fused qkv row (32 + 8 heads of 128, stride 48 x 128) */
    memset(&c, 0, sizeof c);
    c.op = OP_ROPE, c.n = T;
    c.a = rand_buf((size_t)T * 48 * 128, 1.0f);
    OK(backend_alloc(be, (size_t)T * 128 * 4, &c.b));
    {
        float *cs = malloc((size_t)T * 128 * 4);
        for (size_t i = 0; i < (size_t)T * 128; i++)
            cs[i] = frand();
        OK(backend_upload(be, c.b, cs, (size_t)T * 128 * 4));
        free(cs);
    }
    report_bytes("rope", "8192 rows, 40 heads of 128 bf16", time_ms(run_op, &c),
                 2.0 * T * 40 * 128 * 2 + (double)T * 128 * 4);
    backend_free(be, c.b);

    /* KV write from the same rows: 8 kv heads of K and V into 16-token blocks */
    c.op = OP_KV_WRITE;
    c.c = c.a;
    OK(backend_alloc(be, (size_t)T * 8 * 128 * 2, &c.a));
    OK(backend_alloc(be, (size_t)T * 8 * 128 * 2, &c.b));
    {
        int32_t *slots = malloc((size_t)T * 4);
        for (int i = 0; i < T; i++)
            slots[i] = (i * 7919) % T; /* a permutation: T is a power of two, 7919 is odd */
        c.d = i32_buf(slots, (size_t)T);
        free(slots);
    }
    report_bytes("kv_write", "8192 tokens, 8 kv heads of 128 bf16", time_ms(run_op, &c),
                 2.0 * 2 * T * 8 * 128 * 2);
    backend_free(be, c.a), backend_free(be, c.b), backend_free(be, c.c), backend_free(be, c.d);

    memset(&c, 0, sizeof c);
    c.op = OP_EMBED, c.n = T, c.dim = D;
    c.b = rand_buf((size_t)128256 * D, 1.0f);
    OK(backend_alloc(be, (size_t)T * D * 2, &c.a));
    {
        int32_t *ids = malloc((size_t)T * 4);
        for (int i = 0; i < T; i++)
            ids[i] = (int32_t)((frand() * 0.5f + 0.5f) * 128255);
        c.c = i32_buf(ids, (size_t)T);
        free(ids);
    }
    report_bytes("embed", "8192 tokens of 4096, vocab 128256 bf16", time_ms(run_op, &c),
                 2.0 * T * D * 2);
    backend_free(be, c.a), backend_free(be, c.b), backend_free(be, c.c);

    /* sampling: 256 rows of a 128256 vocabulary, top-k 50 + top-p 0.9 */
    memset(&c, 0, sizeof c);
    c.op = OP_SAMPLE, c.n = 256, c.dim = 128256;
    c.b = rand_buf((size_t)c.n * c.dim, 8.0f);
    OK(backend_alloc(be, (size_t)c.n * 4, &c.a));
    {
        cuda_sample_params *p = malloc((size_t)c.n * sizeof *p);
        for (int i = 0; i < c.n; i++)
            p[i] = (cuda_sample_params){1.0f, 50, 0.9f, 0.0f, (i + 0.5f) / c.n};
        OK(backend_alloc(be, (size_t)c.n * sizeof *p, &c.c));
        OK(backend_upload(be, c.c, p, (size_t)c.n * sizeof *p));
        free(p);
    }
    report_bytes("sample top-k 50 top-p 0.9", "256 x 128256 bf16", time_ms(run_op, &c),
                 (double)c.n * c.dim * 2);
    backend_free(be, c.a), backend_free(be, c.b), backend_free(be, c.c);

    /* Q4_K dequantization of a 14336 x 4096 matrix (144 bytes per 256 elements) */
    memset(&c, 0, sizeof c);
    c.op = OP_DEQUANT, c.n = 14336, c.dim = 4096;
    {
        const size_t n = (size_t)c.n * c.dim, nb = n / 256 * 144;
        uint8_t *raw = malloc(nb);
        for (size_t i = 0; i < nb; i++)
            raw[i] = (uint8_t)(frand() * 127 + 128);
        for (size_t b = 0; b < nb; b += 144)
            raw[b] = 0x00, raw[b + 1] = 0x20, raw[b + 2] = 0x00, raw[b + 3] = 0x20; /* d, dmin */
        OK(backend_alloc(be, nb, &c.b));
        OK(backend_upload(be, c.b, raw, nb));
        free(raw);
        OK(backend_alloc(be, n * 2, &c.a));
        report_bytes("dequant Q4_K", "14336 x 4096 to bf16", time_ms(run_op, &c),
                     (double)nb + (double)n * 2);
    }
    backend_free(be, c.a), backend_free(be, c.b);
}

int main(int argc, char **argv)
{
    const char *device = "cuda:0";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: bench_cuda_kernels [--reps N] [--device cuda:N] [--quick]\n");
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    char why[200];
    if (cuda_device_count(why, sizeof why) == 0) {
        fprintf(stderr, "bench_cuda_kernels: no CUDA device: %s\n", why);
        return 77;
    }
    OK(backend_new(device, 0, &be));
    OK(backend_kv_dtype(device, BACKEND_KV_DEFAULT, &kv_dt));
    st = (cudaStream_t)backend_cuda_stream(be);
    char name[256];
    int n_sms;
    OK(backend_cuda_device_info(be, name, sizeof name, &n_sms));
    printf("{\"device\":\"%s\",\"sms\":%d,\"reps\":%d}\n", name, n_sms, reps);
    fflush(stdout);

    ceilings();
    fprintf(stderr, "copy %.0f GB/s, cuBLAS bf16 %.0f TFLOP/s\n", copy_gbps, gemm_tflops);

    /* the two headline shapes first */
    bench_attention("decode_attention", 64, 4096, 1, 32, 8, 128, 1);
    bench_attention("prefill_attention", 1, 4096, 4096, 32, 8, 128, 0);
    if (!quick) {
        const int dec[][3] = {{1, 32768, 0}, {16, 4096, 0}, {256, 1024, 0}, {256, 4096, 0},
                              {8, 16384, 0}};
        for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++)
            bench_attention("decode_attention", dec[i][0], dec[i][1], 1, 32, 8, 128, 0);
        bench_attention("prefill_attention", 1, 4096, 4096, 32, 8, 64, 0);
        bench_attention("prefill_attention", 4, 2048, 2048, 32, 8, 128, 0);
        bench_attention("prefill_attention", 1, 16384, 16384, 32, 8, 128, 0);
        bench_attention("prefill_attention", 8, 4096, 512, 32, 8, 128, 0); /* chunked prefill */
    }
    bench_layer_ops();
    backend_destroy(&be);
    return 0;
}
