/* pool.c — persistent worker threads; a job is fn(ith, nth, arg) and the caller runs ith = 0.
 * Wake-up is a generation counter: workers spin on it briefly (decode jobs arrive every few tens
 * of µs), then sleep on it with a futex; the caller only pays for FUTEX_WAKE when someone sleeps.
 * A worker joins a job through its ticket; a queued job (qvk_pool_run_queued) is closed when the
 * caller is done, so a worker still waking up then is not waited for.
 */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/kernels.h"

/* ~20-50 µs of polling before sleeping; the machine is shared, so not longer. */
#define SPIN_ITERS 2000
/* ticket: the job's generation in the high 32 bits, CLOSED, then the workers that joined it */
#define TICKET_CLOSED ((uint64_t)1 << 31)
#define TICKET_JOINED (TICKET_CLOSED - 1)

struct qvk_pool {
    int n_threads;
    pthread_t *threads;
    struct worker_arg *args;
    qvk_job fn;
    void *arg;
    _Atomic uint32_t gen;    /* bumped once per job (futex word for workers) */
    _Atomic uint64_t ticket; /* generation << 32 | TICKET_CLOSED | workers joined */
    _Atomic uint32_t n_done; /* workers finished with the current job (futex word for caller) */
    _Atomic int n_sleeping;  /* workers blocked in FUTEX_WAIT on gen */
    _Atomic int caller_sleeping;
    _Atomic int stop;
    _Atomic int spin; /* polling iterations before sleeping (qvk_pool_set_spin) */
};

struct worker_arg {
    struct qvk_pool *pool;
    int ith;
};

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    syscall(SYS_futex, (uint32_t *)(uintptr_t)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)(uintptr_t)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Whether this worker takes part in job g: no when a newer job was posted or g was closed. */
static int join(struct qvk_pool *pool, uint32_t g) {
    uint64_t t = atomic_load(&pool->ticket);
    for (;;) {
        if ((uint32_t)(t >> 32) != g || (t & TICKET_CLOSED)) return 0;
        if (atomic_compare_exchange_weak(&pool->ticket, &t, t + 1)) return 1;
    }
}

static void *worker_main(void *p) {
    struct worker_arg *wa = p;
    struct qvk_pool *pool = wa->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        const int spin = atomic_load_explicit(&pool->spin, memory_order_relaxed);
        for (int i = 0; i < spin && g == seen; i++) {
            cpu_relax();
            g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        }
        while (g == seen) {
            atomic_fetch_add(&pool->n_sleeping, 1);
            futex_wait(&pool->gen, seen);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        }
        seen = g;
        if (atomic_load(&pool->stop)) break;
        if (!join(pool, g)) continue;
        pool->fn(wa->ith, pool->n_threads, pool->arg);
        atomic_fetch_add(&pool->n_done, 1); /* seq_cst: pairs with caller_sleeping */
        if (atomic_load(&pool->caller_sleeping)) futex_wake(&pool->n_done);
    }
    return NULL;
}

static void wake_workers(struct qvk_pool *pool) {
    const uint32_t g = atomic_load_explicit(&pool->gen, memory_order_relaxed) + 1;
    atomic_store(&pool->ticket, (uint64_t)g << 32); /* before gen: a worker seeing g sees it */
    atomic_fetch_add(&pool->gen, 1); /* seq_cst: pairs with n_sleeping++ in the worker */
    if (atomic_load(&pool->n_sleeping) > 0) futex_wake(&pool->gen);
}

qvk_pool *qvk_pool_create(int n_threads) {
    qvk_init();
    if (n_threads < 1) return NULL;
    struct qvk_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = 1;
    pool->spin = SPIN_ITERS;
    pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
    pool->args = calloc((size_t)n_threads, sizeof *pool->args);
    if (!pool->threads || !pool->args) goto fail;
    for (int i = 1; i < n_threads; i++) {
        pool->args[i].pool = pool;
        pool->args[i].ith = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, &pool->args[i]) != 0) goto fail;
        pool->n_threads = i + 1;
    }
    return pool;
fail:
    qvk_pool_free(pool);
    return NULL;
}

void qvk_pool_free(qvk_pool *pool) {
    if (!pool) return;
    if (pool->n_threads > 1) {
        atomic_store(&pool->stop, 1);
        wake_workers(pool);
        for (int i = 1; i < pool->n_threads; i++)
            pthread_join(pool->threads[i], NULL);
    }
    free(pool->threads);
    free(pool->args);
    free(pool);
}

void qvk_pool_set_spin(qvk_pool *pool, int iters) {
    if (pool) atomic_store(&pool->spin, iters < 0 ? SPIN_ITERS : iters);
}

int qvk_pool_threads(const qvk_pool *pool) {
    return pool ? pool->n_threads : 1;
}

static void run(qvk_pool *pool, qvk_job fn, void *arg, int queued) {
    if (!pool || pool->n_threads == 1) {
        fn(0, 1, arg);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->n_done, 0);
    wake_workers(pool);
    fn(0, pool->n_threads, arg);
    /* a queued job is done when the caller is: only the workers that joined it are waited for */
    const uint32_t want = queued ? (uint32_t)(atomic_fetch_or(&pool->ticket, TICKET_CLOSED) &
                                              TICKET_JOINED)
                                 : (uint32_t)pool->n_threads - 1;
    uint32_t d = atomic_load_explicit(&pool->n_done, memory_order_acquire);
    const int spin = atomic_load_explicit(&pool->spin, memory_order_relaxed);
    for (int i = 0; i < spin && d != want; i++) {
        cpu_relax();
        d = atomic_load_explicit(&pool->n_done, memory_order_acquire);
    }
    if (d != want) {
        atomic_store(&pool->caller_sleeping, 1);
        while ((d = atomic_load(&pool->n_done)) != want)
            futex_wait(&pool->n_done, d);
        atomic_store(&pool->caller_sleeping, 0);
    }
}

void qvk_pool_run(qvk_pool *pool, qvk_job fn, void *arg) {
    run(pool, fn, arg, 0);
}

void qvk_pool_run_queued(qvk_pool *pool, qvk_job fn, void *arg) {
    run(pool, fn, arg, 1);
}
