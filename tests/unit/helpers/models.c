/* models.c — see models.h. */
#include "tests/unit/helpers/models.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "checkpoint/ckpt.h"

qv_model *test_model_load(const char *name) {
    const char *cache = getenv("QVOICE_CACHE");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", cache ? cache : "cache", name);
    qv_model *m;
    if (qv_model_load(&m, dir)) fail_msg("%s", qv_last_error());
    return m;
}

struct qvm_ckpt *test_ckpt_open(const char *dir) {
    char err[512];
    qvm_ckpt *ck = qvm_ckpt_open(dir, err, sizeof err);
    if (!ck) fail_msg("%s", err);
    return ck;
}
