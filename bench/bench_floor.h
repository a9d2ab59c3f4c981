/* SPDX-License-Identifier: Apache-2.0 */
/* bench_floor.h - the machine's floors that benchmarks quote ratios against: the read
 * bandwidth of a 1 GiB array and the rate of OpenBLAS sgemm. Each takes a second or two
 * (best of 3 passes) and allocates what it measures (1 GiB; 48 MiB).
 */
#ifndef DERAS_BENCH_FLOOR_H
#define DERAS_BENCH_FLOOR_H

/* Bytes/s read by nt OpenMP threads (0: all) summing a 1 GiB array; 0 when it cannot be
 * allocated. */
double bench_read_bandwidth(int nt);
/* FLOP/s of OpenBLAS sgemm on 2048^3 (its own threads); 0 when out of memory. */
double bench_sgemm_rate(void);

#endif
