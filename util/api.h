/* api.h — helpers behind the public API's one error convention (include/qvoice.h): a failing
 * public function returns qvu_fail(status, detail), which keeps the detail for qv_last_error on
 * the calling thread; versioned structs are checked with qvu_check_size on entry.
 */
#ifndef QVU_API_H
#define QVU_API_H

#include <stddef.h>
#include <stdint.h>

#include "include/qvoice.h"

/* Size of a detail line, and of the caller buffers the internals fill before qvu_fail. */
#define QVU_DETAIL_SIZE 512

/* Returns st; when st != QV_OK the detail (or qv_strerror(st) when detail is NULL or "") becomes
 * this thread's qv_last_error(). */
enum qv_status qvu_fail(enum qv_status st, const char *detail);
enum qv_status qvu_failf(enum qv_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* QV_OK when found == expected, else QV_E_ABI with a detail naming type. */
enum qv_status qvu_check_size(const char *type, uint32_t found, size_t expected);

#endif
