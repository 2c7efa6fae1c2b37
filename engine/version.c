/* version.c — runtime version of the library (matches the header's macros). */
#include "include/qvoice.h"

const char *qv_version(void) { return QV_VERSION_STRING; }
