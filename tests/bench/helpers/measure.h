/* measure.h — what the benchmarks measure the same way: the clock, the median of repeated runs,
 * and the machine's read bandwidth (linked into every build/bench/ program).
 */
#ifndef QV_BENCH_MEASURE_H
#define QV_BENCH_MEASURE_H

#include <stddef.h>
#include <time.h>

#include "kernels/kernels.h"

/* Seconds on clock id (CLOCK_MONOTONIC for wall time, CLOCK_PROCESS_CPUTIME_ID,
 * CLOCK_THREAD_CPUTIME_ID for CPU time). */
double bench_clock_s(clockid_t id);
/* Median of v[0..n) (sorts v in place): the middle value, or the mean of the two middle ones. */
double bench_median(double *v, int n);
/* Seconds for one read of the n_bytes at buf (a multiple of 8) by the pool's threads (NULL: the
 * calling thread), each reading a contiguous share at full vector width (qvk_mem_read). */
double bench_read_s(qvk_pool *pool, const void *buf, size_t n_bytes);
/* Read bandwidth in GB/s: n_bytes over the median of n_rep bench_read_s passes (at most 128). */
double bench_read_gbs(qvk_pool *pool, const void *buf, size_t n_bytes, int n_rep);

#endif
