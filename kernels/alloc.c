/* alloc.c — 64-byte aligned buffers for activations and scratch (cache-line and AVX-512 width),
 * and the memory read probe used by benchmarks. */
#include <stdlib.h>

#include "kernels.h"
#include "kernels_impl.h"

void *qvk_alloc(size_t n_bytes) {
    if (n_bytes > SIZE_MAX - 63) return NULL;
    size_t n = (n_bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, n ? n : 64);
}

void qvk_free(void *p) { free(p); }

uint64_t qvk_mem_read(const void *p, size_t n_bytes) {
    uint64_t s = qvk_impl_get()->xor64(p, n_bytes);
    const unsigned char *b = p;
    for (size_t i = n_bytes & ~(size_t)7; i < n_bytes; i++) s ^= (uint64_t)b[i] << (8 * (i & 7));
    return s;
}
