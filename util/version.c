/* version.c — runtime version of the library (matches the header's macros), and the one
 * thread-budget rule. Both live at the ground floor: clone, engine and compress all ask them. */
#include <unistd.h>

#include "include/qvoice.h"

const char *qv_version(void) { return QV_VERSION_STRING; }

int qv_threads_resolve(int n) {
    if (n >= 1) return n;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 ? (int)cpus : 1;
}
