/* SPDX-License-Identifier: Apache-2.0 */
/* bench_qmatmul.c - the quantized matrix products (kernels/cpu/qmatmul.h) against this
 * machine's floors, and their error against a double-precision reference.
 *
 *   bench_qmatmul [--formats Q4_0,Q8_0,...] [--paths scalar,avx2,avx512] [--modes exact,q8,packed]
 *                 [--shapes 576x576,...] [--ns 1,128,512] [--threads 1,2] [--min-time 0.3]
 *                 [--no-errors]
 *
 * Shapes: the test model's matrices (SmolLM2-135M: 576x576 attention, 1536x576 gate/up,
 * 576x1536 down, 49152x576 LM head; n_out x n_in) and Llama-3-8B's down projection
 * (4096x14336). K formats need n_in a multiple of 256, so they skip n_in = 576 (as
 * llama.cpp's quantizer does for such tensors). Each figure is the best of repeated calls
 * for at least --min-time seconds (best, not median: the machine may be shared, and
 * interference only ever adds time). Weights rotate through copies filling at least
 * 256 MiB, so a call finds its matrix in memory, not in cache, as in a decode step that
 * touches every layer in turn. The scalar path runs only where it takes under a second.
 *
 * Floors measured in the same run: read bandwidth per thread count (an XOR over a 1 GiB
 * array) and the OpenBLAS sgemm rate (f32, 2048^3). A decode-shaped (n = 1) call can go
 * no faster than weight_bytes / bandwidth (floor_us, for the call's thread count):
 * frac_read_bw = floor_us / us, the achieved weight GB/s over the measured bandwidth.
 * The fixed cost per call is measured too: a tiny call on one thread, an empty OpenMP
 * region on two (what a call cost before the pool) against an empty job of the
 * kernels' pool (kernels/cpu/cpu_pool.h) on two, and a call just big enough to use both
 * threads.
 *
 * Packing (qmm_pack, as a q8-mode load does it, on all --threads' largest pool): file
 * bytes per second, the packed copies' fresh pages included.
 *
 * Errors (best path, 4 rows of activations with outliers): max |y - ref| / max |ref| and
 * ||y - ref|| / ||ref|| against sum w x in double over the weights dequantized by
 * common/base/dtype.c. JSON lines on stdout, progress on stderr.
 */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "bench/bench_floor.h"
#include "common/cli/cli_util.h"
#include "kernels/cpu/cpu_pool.h"
#include "kernels/cpu/qmatmul.h"
#include "tests/unit/qmm_ref.h"

#define POOL_BYTES ((size_t)256 << 20)
#define MAX_LIST 16

static const int all_dtypes[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1,
                                 DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
static const struct shape {
    const char *name;
    int n_out, n_in;
} shapes[] = {
    {"576x576", 576, 576},     {"1536x576", 1536, 576},   {"576x1536", 576, 1536},
    {"49152x576", 49152, 576}, {"4096x14336", 4096, 14336},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static int parse_list(const char *s, const char *what, int *out, int max,
                      int (*one)(const char *, int *))
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max || one(t, &out[n])) {
            fprintf(stderr, "bench_qmatmul: bad %s '%s'\n", what, t);
            free(copy);
            return -1;
        }
        n++;
    }
    free(copy);
    return n;
}

static int one_dtype(const char *s, int *v)
{
    for (size_t i = 0; i < sizeof all_dtypes / sizeof all_dtypes[0]; i++)
        if (!strcmp(s, dtype_name(all_dtypes[i])))
            return *v = all_dtypes[i], 0;
    return -1;
}

/* The modes measured: qmatmul.h's two, and q8 on packed weights (qmm_pack). */
#define PACKED 2
static const char *const mode_names[] = {"exact", "q8", "packed"};

static int one_mode(const char *s, int *v)
{
    for (int i = 0; i <= PACKED; i++)
        if (!strcmp(s, mode_names[i]))
            return *v = i, 0;
    return -1;
}

static int one_shape(const char *s, int *v)
{
    for (int i = 0; i < N_SHAPES; i++)
        if (!strcmp(s, shapes[i].name))
            return *v = i, 0;
    return -1;
}

static int one_int(const char *s, int *v)
{
    char *end;
    long x = strtol(s, &end, 10);
    return *end || x < 1 || x > 4096 ? -1 : (*v = (int)x, 0);
}

typedef struct bench {
    uint8_t *pool;     /* copies of one matrix, at least POOL_BYTES */
    size_t mat_bytes;
    uint8_t *packed;   /* the same copies packed (qmm_pack), NULL for other formats */
    size_t packed_bytes;
    int n_copies;
    float *x, *y;
    void *scratch;
    size_t scratch_bytes;
    double min_time;
    cpu_pool_t *threads; /* the pool every call runs on (its size: the largest --threads) */
} bench;

/* Best seconds per call of qmm_matmul with these arguments, rotating through the copies. */
static double time_calls(bench *b, int dtype, int mode, int n, int n_out, int n_in, int nt)
{
    const int packed = mode == PACKED;
    qmm_args a = {b->y, b->x, b->pool, dtype, n, n_out, n_in, packed ? QMM_Q8 : mode, nt,
                  b->scratch, b->scratch_bytes, 0, b->threads, packed};
    double best = 1e30, start = cli_now();
    for (int i = 0; i < 3 || cli_now() - start < b->min_time; i++) {
        a.w = packed ? b->packed + (size_t)(i % b->n_copies) * b->packed_bytes
                     : b->pool + (size_t)(i % b->n_copies) * b->mat_bytes;
        double t0 = cli_now();
        if (qmm_matmul(&a)) {
            fprintf(stderr, "bench_qmatmul: %s\n", deras_errmsg());
            exit(1);
        }
        double dt = cli_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

/* Max |y - ref| / max |ref| and relative L2 for 4 rows on the active path. */
static void measure_error(bench *b, int dtype, int mode, const struct shape *s, const char *path)
{
    const int n = 4, n_out = s->n_out, n_in = s->n_in;
    float *wf = malloc(sizeof(float) * (size_t)n_out * n_in);
    dtype_to_f32(dtype, b->pool, wf, (int64_t)n_out * n_in);
    const int packed = mode == PACKED;
    qmm_args a = {b->y, b->x, packed ? b->packed : b->pool, dtype, n, n_out, n_in,
                  packed ? QMM_Q8 : mode, 0, b->scratch, b->scratch_bytes, 0, b->threads, packed};
    if (qmm_matmul(&a)) {
        fprintf(stderr, "bench_qmatmul: %s\n", deras_errmsg());
        exit(1);
    }
    double max_err = 0, max_ref = 0, num = 0, den = 0;
    for (int r = 0; r < n; r++)
        for (int o = 0; o < n_out; o++) {
            const float *w = wf + (size_t)o * n_in, *x = b->x + (size_t)r * n_in;
            double ref = 0;
            for (int i = 0; i < n_in; i++)
                ref += (double)w[i] * x[i];
            const double e = fabs(b->y[(size_t)r * n_out + o] - ref);
            max_err = fmax(max_err, e), max_ref = fmax(max_ref, fabs(ref));
            num += e * e, den += ref * ref;
        }
    printf("{\"bench\":\"qmatmul_error\",\"format\":\"%s\",\"mode\":\"%s\",\"path\":\"%s\","
           "\"shape\":\"%s\",\"rows\":%d,\"max_err_over_max_ref\":%.3e,\"rel_l2\":%.3e}\n",
           dtype_name(dtype), mode_names[mode], path, s->name, n, max_err / max_ref,
           sqrt(num / den));
    fflush(stdout);
    free(wf);
}

static void empty_item(void *ctx, int i)
{
    (void)ctx, (void)i;
    __asm__ volatile("" ::: "memory");
}

/* The fixed cost of a call: alone on one thread, an empty OpenMP region and an empty pool
 * job of two items on two threads (what a call paid before and pays now), and a call just
 * big enough for two threads on one and two. */
static void measure_overhead(bench *b)
{
    uint64_t seed = 3;
    static uint8_t w[128 * 1024 / 32 * 18];
    qref_weights(DT_Q4_0, 128, 1024, &seed, w);
    const int reps = 20000;
    qmm_args a = {b->y, b->x, w, DT_Q4_0, 1, 4, 32, QMM_EXACT, 1, NULL, 0, 0, b->threads, 0};
    double best_tiny = 1e30, best_region = 1e30, best_job = 1e30, best1 = 1e30, best2 = 1e30;
    for (int round = 0; round < 5; round++) {
        double t0 = cli_now();
        for (int i = 0; i < reps; i++)
            qmm_matmul(&a);
        best_tiny = fmin(best_tiny, (cli_now() - t0) / reps);
        t0 = cli_now();
        for (int i = 0; i < reps; i++) {
#pragma omp parallel num_threads(2)
            {
                __asm__ volatile("" ::: "memory");
            }
        }
        best_region = fmin(best_region, (cli_now() - t0) / reps);
        t0 = cli_now();
        for (int i = 0; i < reps; i++)
            cpu_pool_run(b->threads, 2, 2, empty_item, NULL);
        best_job = fmin(best_job, (cli_now() - t0) / reps);
        /* 128 x 1024 Q4_0: 131k multiply-adds, just enough for two threads */
        qmm_args c = {b->y, b->x, w, DT_Q4_0, 1, 128, 1024, QMM_EXACT, 1, NULL, 0, 0, b->threads, 0};
        t0 = cli_now();
        for (int i = 0; i < reps / 10; i++)
            qmm_matmul(&c);
        best1 = fmin(best1, (cli_now() - t0) / (reps / 10));
        c.n_threads = 2;
        t0 = cli_now();
        for (int i = 0; i < reps / 10; i++)
            qmm_matmul(&c);
        best2 = fmin(best2, (cli_now() - t0) / (reps / 10));
    }
    printf("{\"bench\":\"qmatmul_overhead\",\"tiny_call_1_thread_us\":%.3f,"
           "\"omp_region_2_threads_us\":%.3f,\"pool_job_2_threads_us\":%.3f,"
           "\"q4_0_128x1024_1_thread_us\":%.3f,\"q4_0_128x1024_2_threads_us\":%.3f}\n",
           best_tiny * 1e6, best_region * 1e6, best_job * 1e6, best1 * 1e6, best2 * 1e6);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int dts[MAX_LIST], n_dts = 0, paths[3], n_paths = 0, modes[3] = {QMM_EXACT, QMM_Q8, PACKED}, n_modes = 3;
    int ns[MAX_LIST] = {1, 128, 512}, n_ns = 3, threads[MAX_LIST] = {1, 2}, n_threads = 2;
    int shs[MAX_LIST], n_shs = 0;
    bool errors = true;
    bench b = {.min_time = 0.3};
    for (size_t i = 0; i < sizeof all_dtypes / sizeof all_dtypes[0]; i++)
        dts[n_dts++] = all_dtypes[i];
    for (int i = QMM_ISA_SCALAR; i <= qmm_isa_best(); i++)
        paths[n_paths++] = i;
    for (int i = 0; i < N_SHAPES; i++)
        shs[n_shs++] = i;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : "";
        int rc = 0;
        if (!strcmp(arg, "--no-errors")) {
            errors = false;
            continue;
        }
        i++;
        if (!strcmp(arg, "--formats"))
            rc = n_dts = parse_list(val, "format", dts, MAX_LIST, one_dtype);
        else if (!strcmp(arg, "--paths"))
            rc = n_paths = parse_list(val, "path", paths, 3, qmm_isa_parse);
        else if (!strcmp(arg, "--modes"))
            rc = n_modes = parse_list(val, "mode", modes, 3, one_mode);
        else if (!strcmp(arg, "--shapes"))
            rc = n_shs = parse_list(val, "shape", shs, MAX_LIST, one_shape);
        else if (!strcmp(arg, "--ns"))
            rc = n_ns = parse_list(val, "n", ns, MAX_LIST, one_int);
        else if (!strcmp(arg, "--threads"))
            rc = n_threads = parse_list(val, "thread count", threads, MAX_LIST, one_int);
        else if (!strcmp(arg, "--min-time"))
            rc = (b.min_time = atof(val)) > 0 ? 1 : -1;
        else
            rc = -1;
        if (rc <= 0) {
            fprintf(stderr, "usage: bench_qmatmul [--formats F,..] [--paths P,..] [--modes exact,q8,packed] "
                            "[--shapes 576x576,..] [--ns 1,128,512] [--threads 1,2] [--min-time S] "
                            "[--no-errors]\n");
            return 2;
        }
    }
    for (int i = 0; i < n_paths; i++)
        if (qmm_isa_force(paths[i])) {
            fprintf(stderr, "bench_qmatmul: %s\n", deras_errmsg());
            return 1;
        }

    int max_t = 2;
    for (int i = 0; i < n_threads; i++)
        max_t = threads[i] > max_t ? threads[i] : max_t;
    if (cpu_pool_new(max_t, &b.threads)) {
        fprintf(stderr, "bench_qmatmul: %s\n", deras_errmsg());
        return 1;
    }
    int max_n = 4;
    for (int i = 0; i < n_ns; i++)
        max_n = ns[i] > max_n ? ns[i] : max_n;
    size_t max_in = 14336, scratch = 0;
    b.x = malloc(sizeof(float) * max_n * max_in);
    b.y = malloc(sizeof(float) * (size_t)max_n * 49152);
    uint64_t seed = 1;
    qref_activations(b.x, (size_t)max_n * max_in, &seed);
    for (int i = 0; i < n_dts; i++) {
        size_t s;
        if (!qmm_scratch_bytes(dts[i], QMM_Q8, max_n, (int)max_in, &s) && s > scratch)
            scratch = s;
    }
    b.scratch = aligned_alloc(64, (scratch + 63) & ~(size_t)63);
    b.scratch_bytes = scratch;

    fprintf(stderr, "measuring read bandwidth and the sgemm rate...\n");
    char load[64] = "?";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf && fgets(load, sizeof load, lf))
        load[strcspn(load, " ")] = '\0';
    if (lf)
        fclose(lf);
    double bw[MAX_LIST];
    printf("{\"bench\":\"machine\",\"best_path\":\"%s\",\"loadavg_1min\":%s,\"sgemm_GFLOPs\":%.1f",
           qmm_isa_name(qmm_isa_best()), load, bench_sgemm_rate() / 1e9);
    for (int t = 0; t < n_threads; t++) {
        bw[t] = bench_read_bandwidth(threads[t]);
        printf(",\"read_bandwidth_GBps_%dt\":%.2f", threads[t], bw[t] / 1e9);
    }
    printf("}\n");
    fflush(stdout);
    measure_overhead(&b);

    for (int di = 0; di < n_dts; di++) {
        const int dt = dts[di];
        for (int si = 0; si < n_shs; si++) {
            const struct shape *s = &shapes[shs[si]];
            if (s->n_in % dtype_block_elems(dt))
                continue;
            b.mat_bytes = qref_row_bytes(dt, s->n_in) * s->n_out;
            b.n_copies = (int)((POOL_BYTES + b.mat_bytes - 1) / b.mat_bytes);
            b.n_copies = b.n_copies < 2 ? 2 : b.n_copies;
            b.pool = malloc(b.mat_bytes * b.n_copies);
            qref_weights(dt, s->n_out, s->n_in, &seed, b.pool);
            for (int c = 1; c < b.n_copies; c++)
                memcpy(b.pool + c * b.mat_bytes, b.pool, b.mat_bytes);
            b.packed = NULL;
            if (qmm_packs(dt) && !qmm_pack_bytes(dt, s->n_out, s->n_in, &b.packed_bytes) &&
                (b.packed = malloc(b.packed_bytes * b.n_copies))) {
                const double t0 = cli_now(); /* fresh pages included, as at load */
                for (int c = 0; c < b.n_copies; c++)
                    qmm_pack(b.packed + c * b.packed_bytes, b.pool, dt, s->n_out, s->n_in, b.threads);
                const double t = (cli_now() - t0) / b.n_copies;
                printf("{\"bench\":\"pack\",\"format\":\"%s\",\"shape\":\"%s\",\"threads\":%d,"
                       "\"us\":%.1f,\"file_GBps\":%.2f}\n",
                       dtype_name(dt), s->name, cpu_pool_threads(b.threads), t * 1e6,
                       b.mat_bytes / t / 1e9);
            }
            fprintf(stderr, "%s %s (%.1f MB)\n", dtype_name(dt), s->name, b.mat_bytes / 1e6);
            for (int mi = 0; mi < n_modes; mi++) {
                const int mode = modes[mi];
                if ((mode == QMM_Q8 && (dt == DT_F32 || dt == DT_F16)) || (mode == PACKED && !b.packed))
                    continue; /* computed as exact; no packed layout */
                if (errors && s->n_out * (double)s->n_in < 1e8) {
                    qmm_isa_force(qmm_isa_best());
                    measure_error(&b, dt, mode, s, qmm_isa_name(qmm_isa_best()));
                }
                for (int pi = 0; pi < n_paths; pi++)
                    for (int ni = 0; ni < n_ns; ni++)
                        for (int ti = 0; ti < n_threads; ti++) {
                            const int n = ns[ni], nt = threads[ti];
                            const double macs = (double)n * s->n_out * s->n_in;
                            if (paths[pi] == QMM_ISA_SCALAR && macs > 2e8)
                                continue;
                            qmm_isa_force(paths[pi]);
                            const double t = time_calls(&b, dt, mode, n, s->n_out, s->n_in, nt);
                            const double gbps = b.mat_bytes / t / 1e9;
                            printf("{\"bench\":\"qmatmul\",\"format\":\"%s\",\"mode\":\"%s\","
                                   "\"path\":\"%s\",\"shape\":\"%s\",\"n\":%d,\"threads\":%d,"
                                   "\"us\":%.1f,\"floor_us\":%.1f,\"weight_GBps\":%.2f,"
                                   "\"GFLOPs\":%.2f,\"frac_read_bw\":%.3f}\n",
                                   dtype_name(dt), mode_names[mode], qmm_isa_name(paths[pi]),
                                   s->name, n, nt, t * 1e6, b.mat_bytes / bw[ti] * 1e6, gbps,
                                   2 * macs / t / 1e9, gbps * 1e9 / bw[ti]);
                            fflush(stdout);
                        }
            }
            free(b.pool), free(b.packed);
        }
    }
    free(b.x), free(b.y), free(b.scratch);
    cpu_pool_destroy(&b.threads);
    return 0;
}
