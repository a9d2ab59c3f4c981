/* SPDX-License-Identifier: Apache-2.0 */
/* bench_floor.c - bench_floor.h's measurements. */
#include "bench/bench_floor.h"

#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/cli/cli_util.h"

/* 64-bit words XORed into four accumulators: nothing for the compiler to vectorize away
 * or to round, so the loop is bound by reading. */
double bench_read_bandwidth(int nt)
{
    size_t n = (1u << 30) / sizeof(uint64_t);
    uint64_t *a = malloc(n * sizeof(uint64_t));
    if (!a)
        return 0;
    for (size_t i = 0; i < n; i++)
        a[i] = i * 0x9e3779b97f4a7c15u;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = cli_now();
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp parallel for num_threads(nt > 0 ? nt : omp_get_max_threads()) reduction(^ : s0, s1, s2, s3)
        for (size_t i = 0; i < n; i += 4) {
            s0 ^= a[i];
            s1 ^= a[i + 1];
            s2 ^= a[i + 2];
            s3 ^= a[i + 3];
        }
        double dt = cli_now() - t0;
        sink = s0 ^ s1 ^ s2 ^ s3;
        best = n * sizeof(uint64_t) / dt > best ? n * sizeof(uint64_t) / dt : best;
    }
    (void)sink;
    free(a);
    return best;
}

double bench_sgemm_rate(void)
{
    const int n = 2048;
    float *a = malloc((size_t)n * n * sizeof(float)), *b = malloc((size_t)n * n * sizeof(float)),
          *c = malloc((size_t)n * n * sizeof(float));
    double best = 0;
    for (size_t i = 0; a && b && c && i < (size_t)n * n; i++)
        a[i] = b[i] = (float)(i % 13) * 0.01f;
    for (int r = 0; a && b && c && r < 3; r++) {
        double t0 = cli_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double rate = 2.0 * n * n * n / (cli_now() - t0);
        best = rate > best ? rate : best;
    }
    free(a), free(b), free(c);
    return best;
}
