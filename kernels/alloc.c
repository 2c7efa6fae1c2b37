/* alloc.c — 64-byte aligned buffers for activations and scratch (cache-line and AVX-512 width). */
#include <stdlib.h>

#include "kernels.h"

void *qvk_alloc(size_t n_bytes) {
    if (n_bytes > SIZE_MAX - 63) return NULL;
    size_t n = (n_bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, n ? n : 64);
}

void qvk_free(void *p) { free(p); }
