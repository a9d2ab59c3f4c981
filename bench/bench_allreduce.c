/* SPDX-License-Identifier: Apache-2.0 */
/* bench_allreduce.c - the shared-memory all-reduce (engine/comm.h) against memcpy.
 *
 *   bench_allreduce [--ranks 2] [--min 4096] [--max 67108864] [--chunk 1048576]
 *
 * Forks --ranks processes that share one anonymous MAP_SHARED region laid out by
 * comm_shm_init, exactly as the ranks of a worker group share their segment (the chunk is
 * the group's default, 1 Mi floats). For each message size from --min to --max bytes
 * (x4 steps) every rank all-reduces an f32 buffer of that size repeatedly (about 256 MiB
 * of messages per size, at least 5 times, after a warm-up whose sum is checked); rank 0
 * reports the mean time per all-reduce and the algorithm bandwidth, message bytes / time.
 * For comparison the same process measures memcpy of a buffer of each size (a one-rank
 * copy: what "moving the message once" costs on this machine). An all-reduce moves about
 * three message sizes per rank (copy in, reduce, copy out), so algbw near memcpy/3 is the
 * expected ceiling for one rank's memory traffic.
 *
 * Output: one JSON line per size on stdout: {"bench":"allreduce","ranks","bytes","iters",
 * "us_per_op","algbw_GBps","memcpy_GBps"}; progress on stderr.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/status.h"
#include "worker/comm_shm.h"
#include "worker/shm_sync.h"

#define MAX_RANKS 16

static double memcpy_gbps(size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    int iters = (int)((256u << 20) / bytes);
    iters = iters < 5 ? 5 : iters;
    memcpy(b, a, bytes);
    double t0 = shm_now();
    for (int i = 0; i < iters; i++) {
        a[i % bytes] = (char)i; /* keep each copy live */
        memcpy(b, a, bytes);
    }
    double dt = shm_now() - t0;
    volatile char sink = b[bytes / 2];
    (void)sink;
    free(a);
    free(b);
    return (double)bytes * iters / dt / 1e9;
}

/* One rank's run over every size; rank 0 prints. Returns a process exit status. */
static int run_rank(void *region, size_t region_bytes, int rank, int ranks, size_t min,
                    size_t max)
{
    comm_shm_opts o = {.timeout_s = 60};
    comm_t *c = NULL;
    if (comm_shm_new(region, region_bytes, rank, ranks, &o, &c)) {
        fprintf(stderr, "rank %d: %s\n", rank, deras_errmsg());
        return 1;
    }
    float *buf = malloc(max);
    for (size_t bytes = min; bytes <= max; bytes *= 4) {
        const size_t n = bytes / sizeof(float);
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)(rank + 1);
        if (comm_all_reduce(c, buf, n)) { /* warm-up, checked */
            fprintf(stderr, "rank %d: %s\n", rank, deras_errmsg());
            return 1;
        }
        const float want = (float)ranks * (ranks + 1) / 2;
        if (buf[0] != want || buf[n - 1] != want) {
            fprintf(stderr, "rank %d: sum expected %g, got %g / %g\n", rank, want, buf[0],
                    buf[n - 1]);
            return 1;
        }
        int iters = (int)((256u << 20) / bytes);
        iters = iters < 5 ? 5 : iters > 20000 ? 20000 : iters;
        double t0 = shm_now();
        for (int it = 0; it < iters; it++)
            if (comm_all_reduce(c, buf, n)) {
                fprintf(stderr, "rank %d: %s\n", rank, deras_errmsg());
                return 1;
            }
        double dt = shm_now() - t0;
        if (rank == 0) {
            double mc = memcpy_gbps(bytes);
            printf("{\"bench\":\"allreduce\",\"ranks\":%d,\"bytes\":%zu,\"iters\":%d,"
                   "\"us_per_op\":%.2f,\"algbw_GBps\":%.3f,\"memcpy_GBps\":%.3f}\n",
                   ranks, bytes, iters, dt / iters * 1e6, (double)bytes * iters / dt / 1e9, mc);
            fflush(stdout);
            fprintf(stderr, "%d ranks, %9zu bytes: %8.1f us, %.2f GB/s (memcpy %.2f GB/s)\n",
                    ranks, bytes, dt / iters * 1e6, (double)bytes * iters / dt / 1e9, mc);
        }
    }
    free(buf);
    comm_destroy(&c);
    return 0;
}

int main(int argc, char **argv)
{
    int ranks = 2;
    size_t min = 4096, max = 64u << 20, chunk = 1u << 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--ranks") && v >= 2 && v <= MAX_RANKS)
            ranks = (int)v;
        else if (!strcmp(argv[i], "--min") && v >= 4)
            min = (size_t)v;
        else if (!strcmp(argv[i], "--max") && v >= 4)
            max = (size_t)v;
        else if (!strcmp(argv[i], "--chunk") && v >= 16)
            chunk = (size_t)v;
        else {
            fprintf(stderr, "usage: bench_allreduce [--ranks 2..%d] [--min BYTES] [--max BYTES] "
                    "[--chunk FLOATS]\n", MAX_RANKS);
            return 2;
        }
    }
    if ((argc - 1) % 2 || min > max) {
        fprintf(stderr, "bench_allreduce: options come in pairs, --min <= --max\n");
        return 2;
    }
    size_t bytes = comm_shm_bytes(ranks, chunk);
    void *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED || comm_shm_init(region, bytes, ranks, chunk)) {
        fprintf(stderr, "bench_allreduce: cannot set up %zu bytes of shared memory\n", bytes);
        return 1;
    }
    pid_t pids[MAX_RANKS];
    for (int r = 1; r < ranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(run_rank(region, bytes, r, ranks, min, max));
    }
    int rc = run_rank(region, bytes, 0, ranks, min, max);
    for (int r = 1; r < ranks; r++) {
        int st;
        if (rc)
            kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st))
            rc = 1;
    }
    munmap(region, bytes);
    return rc;
}
