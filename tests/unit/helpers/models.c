/* models.c — see models.h. */
#include "tests/unit/helpers/models.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint/ckpt.h"

const char *test_cache_dir(void) {
    const char *c = getenv("QVOICE_CACHE");
    return c && *c ? c : "cache";
}

const char *test_built(const char *rel) {
    static char path[4096];
    char exe[4000];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0; /* <build dir>/tests */
    snprintf(path, sizeof path, "%s/../%s", exe[0] ? exe : "build/tests", rel);
    return path;
}

qv_model *test_model_load(const char *name) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", test_cache_dir(), name);
    qv_model *m;
    if (qv_model_load(&m, dir)) fail_msg("%s", qv_last_error());
    return m;
}

void test_pcm_append(float **buf, int64_t *n, int64_t *cap, const float *x, int k) {
    if (*n + k > *cap) {
        *cap = 2 * (*n + k);
        *buf = realloc(*buf, (size_t)*cap * sizeof **buf);
        assert_non_null(*buf);
    }
    memcpy(*buf + *n, x, (size_t)k * sizeof *x);
    *n += k;
}

struct qvm_ckpt *test_ckpt_open(const char *dir) {
    char err[512];
    qvm_ckpt *ck = qvm_ckpt_open(dir, err, sizeof err);
    if (!ck) fail_msg("%s", err);
    return ck;
}
