/* shell.c — command runner and file probes for the CLI-level tests (see shell.h). */
#include "tests/unit/helpers/shell.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "util/fileio.h"

int vsh(const char *prefix, const char *fmt, va_list ap) {
    char cmd[8192];
    int n = snprintf(cmd, sizeof cmd, "%s", prefix);
    if (n < 0 || (size_t)n >= sizeof cmd) return -1;
    int m = vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
    if (m < 0 || (size_t)m >= sizeof cmd - (size_t)n) return -1;
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int sh(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vsh("", fmt, ap);
    va_end(ap);
    return rc;
}

int file_has(const char *path, const char *needle) {
    size_t n;
    char *buf = qvu_read_file(path, (size_t)1 << 30, &n, NULL, 0);
    const int has = buf && strstr(buf, needle) != NULL;
    free(buf);
    return has;
}

long file_bytes(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}
