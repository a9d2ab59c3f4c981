/* SPDX-License-Identifier: Apache-2.0 */
/* bench_attention.c - the CPU attention alone (kernels/cpu/cpu_attention.c): prefill and
 * decode per kernel path and KV cache dtype against the kernel deras ran before (the
 * scalar path, kept as the reference, on an f32 cache), timed in the same run.
 *
 *   bench_attention [--shapes smollm2,llama8b] [--dtypes f32,f16,bf16] [--paths avx2,avx512]
 *                   [--prefill 128,512,2048] [--decode-ctx 128,512,2048] [--decode-batch 1,16]
 *                   [--threads N] [--rounds 5] [--min-time 0.05] [--scalar-16]
 *
 * One call = one layer's attention. Prefill L: one sequence of L new tokens over its own L
 * keys (causal); decode: a batch of B sequences, one query each, over C cached tokens.
 * Shapes: the test model's (SmolLM2-135M: 9 query heads, 3 KV heads of 64, block 16) and
 * Llama-3-8B's (32 / 8 of 128). The caches are written through backend_kv_write from the
 * same random K/V (never zeros) with shuffled block tables, as the engine's are.
 *
 * Each configuration runs "old" (scalar path, f32 cache: the previous kernel) and every
 * (SIMD path, dtype) pair; --scalar-16 adds the scalar path on 16-bit caches (the
 * reference widens every element per use: slow). The machine may be shared, so the runs
 * are interleaved: every round runs each once, and the figure kept is each run's best
 * round (a round repeats calls for at least --min-time seconds and takes their mean);
 * interference only ever adds time, and old and new see the same machine. JSON lines on
 * stdout: {"bench":"attention", shape, op, tokens or ctx and batch, dtype, path, threads,
 * us per call, GFLOP/s (4 x heads x head_dim per query-key pair), KV GB/s read (decode),
 * speedup_vs_old}; progress on stderr.
 */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "kernels/backend.h"
#include "kernels/cpu/qmatmul.h"

#define MAX_LIST 8
#define BS 16

typedef struct shape {
    const char *name;
    int n_heads, n_kv_heads, head_dim;
} shape;

static const shape shapes[] = {{"smollm2", 9, 3, 64}, {"llama8b", 32, 8, 128}};

typedef struct list {
    int v[MAX_LIST];
    int n;
} list;

static backend_t *be;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x5EEDull;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

/* One configuration's buffers: n_seqs sequences of ctx tokens, n_q queries each. */
typedef struct setup {
    attn_args a;
    void *k, *v;
    float *q, *out;
    int32_t *qs, *cl, *tab;
} setup;

static int make(setup *s, const shape *sh, int dtype, int n_seqs, int ctx, int n_q)
{
    memset(s, 0, sizeof *s);
    const int mb = (ctx + BS - 1) / BS, n_blocks = n_seqs * mb + 1, kvd = sh->n_kv_heads * sh->head_dim;
    const size_t cache = (size_t)n_blocks * BS * kvd, es = dtype_block_bytes(dtype);
    const int n_tok = n_seqs * n_q, q_w = sh->n_heads * sh->head_dim;
    int rc;
    if ((rc = backend_alloc(be, cache * es, &s->k)) || (rc = backend_alloc(be, cache * es, &s->v)))
        return rc;
    s->q = malloc((size_t)n_tok * q_w * sizeof(float));
    s->out = malloc((size_t)n_tok * q_w * sizeof(float));
    s->qs = malloc((size_t)(n_seqs + 1) * sizeof(int32_t));
    s->cl = malloc((size_t)n_seqs * sizeof(int32_t));
    s->tab = malloc((size_t)n_seqs * mb * sizeof(int32_t));
    float *kv = malloc((size_t)ctx * kvd * sizeof(float));
    int32_t *slots = malloc((size_t)ctx * sizeof(int32_t)), *perm = malloc((size_t)n_blocks * 4);
    if (!s->q || !s->out || !s->qs || !s->cl || !s->tab || !kv || !slots || !perm)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    for (int i = n_blocks - 1; i > 1; i--) { /* block 0 stays the null block */
        int j = 1 + (int)((frand() * 0.5f + 0.5f) * i) % i;
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < (size_t)n_tok * q_w; i++)
        s->q[i] = frand() * 1.5f;
    for (int b = 0; b < n_seqs; b++) {
        for (int i = 0; i < mb; i++)
            s->tab[b * mb + i] = perm[1 + b * mb + i];
        for (int t = 0; t < ctx; t++)
            slots[t] = s->tab[b * mb + t / BS] * BS + t % BS;
        for (size_t i = 0; i < (size_t)ctx * kvd; i++)
            kv[i] = frand() * 1.5f;
        if ((rc = backend_kv_write(be, s->k, s->v, kv, kv, kvd, slots, ctx, sh->n_kv_heads,
                                   sh->head_dim, BS, dtype)))
            return rc;
        s->qs[b] = b * n_q;
        s->cl[b] = ctx;
    }
    s->qs[n_seqs] = n_tok;
    free(kv), free(slots), free(perm);
    s->a = (attn_args){.out = s->out, .q = s->q, .q_stride = q_w, .k_cache = s->k,
                       .v_cache = s->v, .kv_dtype = dtype, .q_start = s->qs, .ctx_len = s->cl,
                       .block_tables = s->tab, .n_seqs = n_seqs, .n_tokens = n_tok,
                       .max_blocks = mb, .n_heads = sh->n_heads, .n_kv_heads = sh->n_kv_heads,
                       .head_dim = sh->head_dim, .block_size = BS,
                       .scale = 1.0f / sqrtf((float)sh->head_dim), .max_q_len = n_q,
                       .max_ctx_len = ctx};
    return DERAS_OK;
}

static void unmake(setup *s)
{
    backend_free(be, s->k);
    backend_free(be, s->v);
    free(s->q), free(s->out), free(s->qs), free(s->cl), free(s->tab);
}

/* Mean seconds per call over at least min_time (at least 2 calls). */
static int sample(setup *s, int isa, double min_time, double *sec)
{
    int rc = qmm_isa_force(isa);
    if (rc || (rc = backend_attention(be, &s->a))) /* warm: pages, caches */
        return rc;
    int n = 0;
    double t0 = now(), t;
    do {
        if ((rc = backend_attention(be, &s->a)))
            return rc;
        n++;
        t = now() - t0;
    } while (t < min_time || n < 2);
    *sec = t / n;
    return DERAS_OK;
}

static int parse_list(const char *what, const char *s, list *out, const char *const *names,
                      int n_names)
{
    out->n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (out->n == MAX_LIST)
            return deras_fail(DERAS_EINVAL, "%s: at most %d values", what, MAX_LIST);
        long v = -1;
        for (int i = 0; names && i < n_names; i++)
            if (!strcmp(t, names[i]))
                v = i;
        if (!names && cli_int(what, t, 1, 1 << 20, &v))
            return DERAS_EINVAL;
        if (v < 0)
            return deras_fail(DERAS_EINVAL, "%s: unknown value '%s'", what, t);
        out->v[out->n++] = (int)v;
    }
    return out->n ? DERAS_OK : deras_fail(DERAS_EINVAL, "%s: empty list", what);
}

static const char *const dtype_names[] = {"f32", "f16", "bf16"};
static const int dtype_ids[] = {DT_F32, DT_F16, DT_BF16};
static const char *const path_names[] = {"scalar", "avx2", "avx512"};
static const char *const shape_names[] = {"smollm2", "llama8b"};

typedef struct opts {
    list shapes, dtypes, paths, prefill, decode_ctx, decode_batch;
    int threads, rounds;
    double min_time;
    bool scalar_16;
} opts;

#define MAX_RUNS 16

/* One configuration: "old" (scalar, f32) and each (path, dtype), interleaved over the
 * rounds; one JSON line per run. */
static int run_config(const opts *o, const shape *sh, int n_seqs, int ctx, int n_q)
{
    struct run {
        int path, dt; /* dt: index into dtype_ids */
        double best;
    } runs[MAX_RUNS];
    int n_runs = 0;
    runs[n_runs++] = (struct run){QMM_ISA_SCALAR, 0, INFINITY};
    setup s[3];
    bool made[3] = {false, true, false};
    for (int d = 0; d < o->dtypes.n; d++)
        for (int p = 0; p < o->paths.n; p++) {
            const int path = o->paths.v[p], dt = o->dtypes.v[d];
            if ((path == QMM_ISA_SCALAR && (dt == 0 || !o->scalar_16)) || n_runs == MAX_RUNS)
                continue;
            runs[n_runs++] = (struct run){path, dt, INFINITY};
            made[dt] = true;
        }
    made[0] = true; /* the old kernel's f32 cache */
    int rc = DERAS_OK;
    for (int d = 0; d < 3 && !rc; d++)
        if (made[d] && (rc = make(&s[d], sh, dtype_ids[d], n_seqs, ctx, n_q)))
            made[d] = false, unmake(&s[d]);
    for (int r = 0; r < o->rounds && !rc; r++)
        for (int k = 0; k < n_runs && !rc; k++) {
            double sec;
            if (!(rc = sample(&s[runs[k].dt], runs[k].path, o->min_time, &sec)))
                runs[k].best = sec < runs[k].best ? sec : runs[k].best;
        }
    /* query-key pairs: causal prefill L(L+1)/2, decode n_seqs x ctx */
    const double pairs = n_q > 1 ? (double)n_q * (n_q + 1) / 2 : (double)n_seqs * ctx;
    const double flops = 4.0 * pairs * sh->n_heads * sh->head_dim;
    for (int k = 0; k < n_runs && !rc; k++) {
        const double kv_bytes = 2.0 * n_seqs * ctx * sh->n_kv_heads * sh->head_dim *
                                (double)dtype_block_bytes(dtype_ids[runs[k].dt]);
        printf("{\"bench\":\"attention\",\"shape\":\"%s\",\"op\":\"%s\",", sh->name,
               n_q > 1 ? "prefill" : "decode");
        if (n_q > 1)
            printf("\"tokens\":%d,", n_q);
        else
            printf("\"ctx\":%d,\"batch\":%d,", ctx, n_seqs);
        printf("\"dtype\":\"%s\",\"path\":\"%s\",\"old\":%s,\"threads\":%d,\"us\":%.1f,"
               "\"GFLOPs\":%.2f", dtype_names[runs[k].dt], path_names[runs[k].path],
               k == 0 ? "true" : "false", o->threads, runs[k].best * 1e6, flops / runs[k].best / 1e9);
        if (n_q == 1)
            printf(",\"kv_GBps\":%.2f", kv_bytes / runs[k].best / 1e9);
        printf(",\"speedup_vs_old\":%.2f}\n", runs[0].best / runs[k].best);
    }
    fflush(stdout);
    for (int d = 0; d < 3; d++)
        if (made[d])
            unmake(&s[d]);
    return rc;
}

int main(int argc, char **argv)
{
    opts o = {.threads = 0, .rounds = 5, .min_time = 0.05};
    const char *a_shapes = "smollm2,llama8b", *a_dtypes = "f32,f16,bf16", *a_paths = NULL,
               *a_prefill = "128,512,2048", *a_ctx = "128,512,2048", *a_batch = "1,16";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        if (v && !strcmp(argv[i], "--shapes")) a_shapes = argv[++i];
        else if (v && !strcmp(argv[i], "--dtypes")) a_dtypes = argv[++i];
        else if (v && !strcmp(argv[i], "--paths")) a_paths = argv[++i];
        else if (v && !strcmp(argv[i], "--prefill")) a_prefill = argv[++i];
        else if (v && !strcmp(argv[i], "--decode-ctx")) a_ctx = argv[++i];
        else if (v && !strcmp(argv[i], "--decode-batch")) a_batch = argv[++i];
        else if (v && !strcmp(argv[i], "--threads")) {
            if (cli_int("--threads", argv[++i], 1, 1024, &l)) return 2;
            o.threads = (int)l;
        } else if (v && !strcmp(argv[i], "--rounds")) {
            if (cli_int("--rounds", argv[++i], 1, 1000, &l)) return 2;
            o.rounds = (int)l;
        } else if (v && !strcmp(argv[i], "--min-time")) {
            if (cli_float("--min-time", argv[++i], 0, 60, &o.min_time)) return 2;
        } else if (!strcmp(argv[i], "--scalar-16")) {
            o.scalar_16 = true;
        } else {
            fprintf(stderr, "usage: bench_attention [--shapes smollm2,llama8b] [--dtypes f32,f16,bf16] "
                            "[--paths avx2,avx512] [--prefill 128,512,2048] "
                            "[--decode-ctx 128,512,2048] [--decode-batch 1,16] [--threads N] "
                            "[--rounds 5] [--min-time 0.05] [--scalar-16]\n");
            return 2;
        }
    }
    char paths_all[64] = "scalar"; /* scalar: only with --scalar-16 beyond the old run */
    for (int i = QMM_ISA_AVX2; i <= qmm_isa_best(); i++)
        snprintf(paths_all + strlen(paths_all), sizeof paths_all - strlen(paths_all), ",%s",
                 qmm_isa_name(i));
    if (parse_list("--shapes", a_shapes, &o.shapes, shape_names, 2) ||
        parse_list("--dtypes", a_dtypes, &o.dtypes, dtype_names, 3) ||
        parse_list("--paths", a_paths ? a_paths : paths_all, &o.paths, path_names, 3) ||
        parse_list("--prefill", a_prefill, &o.prefill, NULL, 0) ||
        parse_list("--decode-ctx", a_ctx, &o.decode_ctx, NULL, 0) ||
        parse_list("--decode-batch", a_batch, &o.decode_batch, NULL, 0)) {
        fprintf(stderr, "bench_attention: %s\n", deras_errmsg());
        return 2;
    }
    for (int p = 0; p < o.paths.n; p++)
        if (o.paths.v[p] > qmm_isa_best()) {
            fprintf(stderr, "bench_attention: this CPU has no %s path\n", path_names[o.paths.v[p]]);
            return 2;
        }
    if (backend_new("cpu", o.threads, &be)) {
        fprintf(stderr, "bench_attention: %s\n", deras_errmsg());
        return 1;
    }
    o.threads = omp_get_max_threads();
    double load = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1)
            load = -1;
        fclose(f);
    }
    printf("{\"bench\":\"machine\",\"best_path\":\"%s\",\"threads\":%d,\"loadavg_1min\":%.2f,"
           "\"rounds\":%d,\"min_time_s\":%g}\n",
           qmm_isa_name(qmm_isa_best()), o.threads, load, o.rounds, o.min_time);
    int rc = 0;
    for (int si = 0; si < o.shapes.n && !rc; si++) {
        const shape *sh = &shapes[o.shapes.v[si]];
        for (int i = 0; i < o.prefill.n && !rc; i++) {
            fprintf(stderr, "%s prefill %d\n", sh->name, o.prefill.v[i]);
            rc = run_config(&o, sh, 1, o.prefill.v[i], o.prefill.v[i]);
        }
        for (int b = 0; b < o.decode_batch.n && !rc; b++)
            for (int i = 0; i < o.decode_ctx.n && !rc; i++) {
                fprintf(stderr, "%s decode batch %d ctx %d\n", sh->name, o.decode_batch.v[b],
                        o.decode_ctx.v[i]);
                rc = run_config(&o, sh, o.decode_batch.v[b], o.decode_ctx.v[i], 1);
            }
    }
    if (rc)
        fprintf(stderr, "bench_attention: %s\n", deras_errmsg());
    backend_destroy(&be);
    return rc ? 1 : 0;
}
