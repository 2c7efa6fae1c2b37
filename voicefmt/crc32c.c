/* crc32c.c — CRC-32C (Castagnoli) for chunk checksums (SHA-256 is util/sha256.c).
 * The SSE4.2 crc32 instruction is used when the CPU has it (checked once at run time; the function
 * carries its own target attribute so this generic file needs no ISA flags); otherwise a
 * slicing-by-1 table. Both give 0xE3069283 for "123456789".
 */
#include <pthread.h>
#include <string.h>
#include "voicefmt/qvf_impl.h"

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT; /* readers on many threads (the server) */

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

static uint32_t crc_table(uint32_t c, const uint8_t *p, size_t n) {
    pthread_once(&table_once, make_table);
    while (n--)
        c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const uint8_t *p,
                                                            size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}
/* Cached with relaxed atomics: threads checking at once (concurrent clones writing their voice
 * files) store the same value, and a plain int was a data race (ThreadSanitizer,
 * test_parallel_clones). */
static int have_sse42(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

uint32_t qvf_crc32c(uint32_t crc, const void *buf, size_t n_bytes) {
    uint32_t c = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (have_sse42()) return ~crc_sse42(c, buf, n_bytes);
#endif
    return ~crc_table(c, buf, n_bytes);
}

uint32_t qvf_crc32c_sw(uint32_t crc, const void *buf, size_t n_bytes) {
    return ~crc_table(~crc, buf, n_bytes);
}
