/* test_qvf_nomem.c — allocation-failure injection: the N-th malloc/calloc/realloc fails, for every
 * N a read / encode / apply / write performs. Each run must end in QVF_OK or QVF_E_NOMEM (QVF_E_IO
 * for a stream whose buffer could not grow), never crash; leaks show under valgrind. The allocator
 * is interposed by defining malloc here (glibc supports it); not under ASan, which owns malloc.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/helpers/qvf_sample.h"
#include "voicefmt/qvf_impl.h"

#if defined(__SANITIZE_ADDRESS__)
#define NO_INTERPOSE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_INTERPOSE 1
#endif
#endif

#ifdef NO_INTERPOSE
#define raw_malloc malloc
#define raw_calloc calloc
#else
#define raw_malloc __libc_malloc
#define raw_calloc __libc_calloc
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static long countdown; /* 0 = disarmed; the allocation that brings it to 0 fails */
static int fired;
static int should_fail(void) {
    if (countdown > 0 && --countdown == 0) {
        fired = 1;
        return 1;
    }
    return 0;
}
void *malloc(size_t n) {
    return should_fail() ? NULL : __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    return should_fail() ? NULL : __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    return should_fail() ? NULL : __libc_realloc(p, n);
}
#endif

static uint8_t *v4, *v3;
static size_t n4, n3;

static int op_read(const uint8_t *b, size_t n) {
    char err[256];
    qvf_voice *v = NULL;
    int rc = qvf_read_mem(b, n, "x.qvoice", 0, &v, err, sizeof err);
    for (uint32_t i = 0; !rc && i < v->n_tensors; i++) {
        const qvf_tensor *t = &v->tensors[i];
        uint8_t *z = raw_calloc(1, t->raw_bytes), *o = raw_malloc(t->raw_bytes);
        rc = qvf_wdelta_apply(t, z, o, 1, err, sizeof err);
        if (rc == QVF_E_HASH) rc = QVF_OK; /* zero target: hashes differ by design */
        free(z);
        free(o);
    }
    qvf_voice_free(v);
    return rc;
}

static int op_read4(void) {
    return op_read(v4, n4);
}
static int op_read3(void) {
    return op_read(v3, n3);
}

static int op_encode_write(void) {
    qvf_voice *v = qvf_sample_voice(1);
    if (!v) return QVF_E_NOMEM;
    char *buf = NULL, err[256];
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    int rc = f ? qvf_write_stream(v, f, 4, "m", err, sizeof err) : QVF_E_IO;
    if (f && fclose(f) && !rc) rc = QVF_E_IO;
    FILE *nul = rc ? NULL : fopen("/dev/null", "w");
    if (!rc) rc = nul ? qvf_write_stream(v, nul, 3, "m", err, sizeof err) : QVF_E_IO;
    if (nul) fclose(nul);
    free(buf);
    qvf_voice_free(v);
    return rc;
}

static void sweep(const char *what, int (*op)(void)) {
#ifdef NO_INTERPOSE
    (void)op;
    printf("%s: skipped under ASan\n", what);
#else
    long k;
    for (k = 1; k < 100000; k++) {
        fired = 0;
        countdown = k;
        int rc = op();
        countdown = 0;
        if (rc != QVF_OK && rc != QVF_E_NOMEM && rc != QVF_E_IO)
            fail_msg("%s: allocation %ld failed -> %s", what, k, qvf_errname(rc));
        if (!fired) {
            assert_int_equal(rc, QVF_OK);
            break;
        }
    }
    printf("%s: failed each of %ld allocations in turn, all handled\n", what, k - 1);
#endif
}

static void test_read_v4(void **s) {
    (void)s;
    sweep("read v4", op_read4);
}
static void test_read_v3(void **s) {
    (void)s;
    sweep("read v3", op_read3);
}
static void test_encode_write(void **s) {
    (void)s;
    sweep("encode + write", op_encode_write);
}

int main(void) {
    qvf_voice *v = qvf_sample_voice(1);
    v4 = qvf_sample_serialize(v, 4, &n4);
    v3 = qvf_sample_serialize(v, 3, &n3);
    qvf_voice_free(v);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_v4),
        cmocka_unit_test(test_read_v3),
        cmocka_unit_test(test_encode_write),
    };
    int rc = cmocka_run_group_tests_name("qvf_nomem", tests, NULL, NULL);
    free(v4);
    free(v3);
    return rc;
}
