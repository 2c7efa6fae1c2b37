/* shell.h — the command runner and file probes the CLI-level tests share (tests run with cwd =
 * repo root, so commands name bin/clone, bin/speak, bin/voicefmt directly).
 */
#ifndef QV_TEST_SHELL_H
#define QV_TEST_SHELL_H

#include <stdarg.h>

/* Runs printf-formatted fmt through system(3); returns its exit status, or -1 if it did not exit
 * normally (signal). Commands longer than 8 KiB are a test bug and return -1. */
int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same with the literal prefix prepended to the formatted command (e.g. "bin/speak -m DIR "). */
int vsh(const char *prefix, const char *fmt, va_list ap);
/* 1 if the file at path (up to 1 GiB, read with util's reader) contains needle; 0 otherwise or
 * when it cannot be read. */
int file_has(const char *path, const char *needle);
/* Size of the file in bytes, or -1 when it does not exist. */
long file_bytes(const char *path);

#endif
