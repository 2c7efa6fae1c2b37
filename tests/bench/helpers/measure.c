/* measure.c — see measure.h. */
#include "tests/bench/helpers/measure.h"

#include <stdint.h>
#include <stdlib.h>

double bench_clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct sum_job {
    const uint64_t *p;
    size_t n;
    uint64_t out[64];
};

static void sum_run(int ith, int nth, void *arg) {
    struct sum_job *j = arg;
    size_t per = (j->n / (size_t)nth) & ~(size_t)7;
    size_t n = ith == nth - 1 ? j->n - per * (size_t)ith : per;
    j->out[ith] = qvk_mem_read(j->p + per * (size_t)ith, n * 8);
}

static volatile uint64_t g_sink; /* keeps the reads */

double bench_read_s(qvk_pool *pool, const void *buf, size_t n_bytes) {
    struct sum_job j = {buf, n_bytes / 8, {0}};
    double t0 = bench_clock_s(CLOCK_MONOTONIC);
    qvk_pool_run(pool, sum_run, &j);
    double t = bench_clock_s(CLOCK_MONOTONIC) - t0;
    g_sink += j.out[0];
    return t;
}

double bench_read_gbs(qvk_pool *pool, const void *buf, size_t n_bytes, int n_rep) {
    double t[128];
    if (n_rep > 128) n_rep = 128;
    for (int r = 0; r < n_rep; r++)
        t[r] = bench_read_s(pool, buf, n_bytes);
    return (double)n_bytes / bench_median(t, n_rep) / 1e9;
}
