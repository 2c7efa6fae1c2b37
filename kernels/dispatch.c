/* dispatch.c — picks the kernel variant once from CPUID; QV_KERNELS=scalar|avx2|avx512 forces one
 * (an unsupported forced variant falls back to the best the CPU has, never to illegal code).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
/* CPUID.1:ECX.F16C directly: clang 14's __builtin_cpu_supports does not know "f16c". */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static const qvk_impl *g_impl = &qvk_impl_scalar;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int supports(const char *name) {
    if (strcmp(name, "scalar") == 0) return 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (strcmp(name, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    if (strcmp(name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni") &&
               supports("avx2");
#endif
    return 0;
}

static const qvk_impl *by_name(const char *name) {
    if (strcmp(name, "avx512") == 0) return &qvk_impl_avx512;
    if (strcmp(name, "avx2") == 0) return &qvk_impl_avx2;
    if (strcmp(name, "scalar") == 0) return &qvk_impl_scalar;
    return NULL;
}

static void pick(void) {
    const char *want = getenv("QV_KERNELS");
    if (want && by_name(want) && supports(want)) {
        g_impl = by_name(want);
        return;
    }
    g_impl = supports("avx512") ? &qvk_impl_avx512
             : supports("avx2") ? &qvk_impl_avx2
                                : &qvk_impl_scalar;
}

void qvk_init(void) {
    pthread_once(&g_once, pick);
}

const qvk_impl *qvk_impl_get(void) {
    qvk_init();
    return g_impl;
}

const char *qvk_variant(void) {
    return qvk_impl_get()->name;
}

int qvk_set_variant(const char *name) {
    qvk_init();
    if (!name || !by_name(name) || !supports(name)) return -1;
    g_impl = by_name(name);
    return 0;
}
