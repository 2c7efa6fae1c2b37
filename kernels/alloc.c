/* alloc.c — 64-byte aligned buffers for activations and scratch (cache-line and AVX-512 width),
 * and the memory-read and FMA probes used by benchmarks. */
#include <stdlib.h>
#include <sys/mman.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

/* Buffers this large (KV caches, scratch, widened weights) are 2 MB aligned and marked for
 * transparent huge pages: the KV cache is read one 512-byte head row per 4 KB page, and with
 * 4 KB pages every such read also missed the TLB (attention ran at ~half the read bandwidth). */
#define HUGE_MIN_BYTES ((size_t)4 << 20)
#define HUGE_ALIGN ((size_t)2 << 20)

void *qvk_alloc(size_t n_bytes) {
    if (n_bytes > SIZE_MAX - HUGE_ALIGN) return NULL;
    if (n_bytes >= HUGE_MIN_BYTES) {
        size_t n = (n_bytes + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
        void *p = aligned_alloc(HUGE_ALIGN, n);
        if (p) madvise(p, n, MADV_HUGEPAGE); /* advice only: failure leaves 4 KB pages */
        return p;
    }
    size_t n = (n_bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, n ? n : 64);
}

void qvk_free(void *p) {
    free(p);
}

uint64_t qvk_mem_read(const void *p, size_t n_bytes) {
    uint64_t s = qvk_impl_get()->xor64(p, n_bytes);
    const unsigned char *b = p;
    for (size_t i = n_bytes & ~(size_t)7; i < n_bytes; i++)
        s ^= (uint64_t)b[i] << (8 * (i & 7));
    return s;
}

uint64_t qvk_fma_probe(long n_iter) {
    const qvk_impl *impl = qvk_impl_get();
    return impl->fma_probe ? impl->fma_probe(n_iter) : 0;
}
