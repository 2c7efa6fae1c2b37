/* api.c — the public API's conventions, decided once: status texts, the per-thread error detail
 * behind qv_last_error (so creation functions give detail too, and concurrent handles on other
 * threads never overwrite it), qv_free, and the struct_size check of the versioned structs.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/api.h"

static _Thread_local char g_detail[QVU_DETAIL_SIZE];

const char *qv_strerror(enum qv_status st) {
#define QV_STATUS_TEXT_(name, text) text,
    static const char *const text[] = {QV_STATUS_LIST(QV_STATUS_TEXT_)};
#undef QV_STATUS_TEXT_
    if ((int)st < 0 || st >= QV_STATUS_COUNT) return "unknown status";
    return text[st];
}

const char *qv_last_error(void) {
    return g_detail;
}

void qv_free(void *p) {
    free(p);
}

enum qv_status qvu_fail(enum qv_status st, const char *detail) {
    if (st == QV_OK || detail == g_detail) return st;
    snprintf(g_detail, sizeof g_detail, "%s", detail && *detail ? detail : qv_strerror(st));
    return st;
}

enum qv_status qvu_failf(enum qv_status st, const char *fmt, ...) {
    char d[QVU_DETAIL_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d, sizeof d, fmt, ap);
    va_end(ap);
    return qvu_fail(st, d);
}

enum qv_status qvu_check_size(const char *type, uint32_t found, size_t expected) {
    if (found == expected) return QV_OK;
    return qvu_failf(QV_E_ABI,
                     "%s.struct_size: expected %zu (this libqvoice), found %u: set it with the "
                     "struct's default function (or sizeof) and compile against this library's "
                     "qvoice.h",
                     type, expected, (unsigned)found);
}
