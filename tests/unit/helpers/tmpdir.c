/* tmpdir.c — scratch directory and file writers for the unit tests (see tmpdir.h). The directory
 * is removed with nftw, not system("rm -rf"), so no shell sees the path.
 */
#include "tests/unit/helpers/tmpdir.h"

#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint/safetensors.h"
#include "util/fileio.h"

char tmp_dir[64];

int tmpdir_setup(void **state) {
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/%s_XXXXXX", program_invocation_short_name);
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int tmpdir_teardown(void **state) {
    (void)state;
    if (!tmp_dir[0]) return 0;
    return nftw(tmp_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", tmp_dir, name);
    return p;
}

static FILE *open_or_fail(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("%s: cannot create (%s)", path, strerror(errno));
    return f;
}

static void close_or_fail(FILE *f, const char *path) {
    int bad = ferror(f);
    if (fclose(f) || bad) fail_msg("%s: write failed", path);
}

void tmp_write(const char *path, const void *data, size_t n) {
    FILE *f = open_or_fail(path);
    if (n) fwrite(data, 1, n, f);
    close_or_fail(f, path);
}

void tmp_write_st(const char *path, const char *header, const void *data, size_t n_data) {
    size_t n = strlen(header), padded = (n + 7) & ~(size_t)7;
    FILE *f = open_or_fail(path);
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = n; i < padded; i++)
        fputc(' ', f);
    if (data && n_data) fwrite(data, 1, n_data, f);
    if (!data && (fflush(f) || ftruncate(fileno(f), (off_t)(8 + padded + n_data))))
        fail_msg("%s: cannot extend to %zu bytes", path, 8 + padded + n_data);
    close_or_fail(f, path);
}

char *tmp_read(const char *path, size_t *n_bytes) {
    char err[600];
    size_t n;
    char *buf = qvu_read_file(path, (size_t)1 << 32, &n, err, sizeof err);
    if (!buf) fail_msg("%s (tests run from the repo root)", err);
    if (n_bytes) *n_bytes = n;
    return buf;
}

long tmp_first_diff(const char *a, size_t skip_a, const char *b) {
    size_t na, nb, i = 0;
    char *x = tmp_read(a, &na), *y = tmp_read(b, &nb);
    if (skip_a > na) skip_a = na;
    const size_t n = na - skip_a < nb ? na - skip_a : nb;
    while (i < n && x[skip_a + i] == y[i]) i++;
    const long d = i == n && na - skip_a == nb ? -1 : (long)i;
    free(x);
    free(y);
    return d;
}

long tmp_st_offset(const char *path, const char *tensor) {
    char err[512];
    size_t n;
    uint8_t *buf = (uint8_t *)tmp_read(path, &n);
    qvm_st *st = qvm_st_open_memory(buf, n, path, err, sizeof err);
    if (!st) fail_msg("%s", err);
    const qvm_tensor *t = qvm_st_find(st, tensor);
    if (!t) fail_msg("%s: no tensor %s", path, tensor);
    const long at = (long)((const uint8_t *)t->data - buf);
    qvm_st_close(st);
    free(buf);
    return at;
}
