/* tmpdir.h — one scratch directory per test binary plus the file writers the unit tests share.
 * tmpdir_setup / tmpdir_teardown are cmocka group fixtures. The writers fail the running test
 * (cmocka fail_msg naming the path) instead of returning a status, so a test never goes on with
 * a half-written file and each call site stays one line.
 */
#ifndef QV_TEST_TMPDIR_H
#define QV_TEST_TMPDIR_H

#include <stddef.h>

/* "/tmp/<test binary>_XXXXXX" once tmpdir_setup has run; "" before. */
extern char tmp_dir[64];

/* cmocka group setup: creates tmp_dir with mkdtemp. Returns 0, or -1 when it cannot. */
int tmpdir_setup(void **state);
/* cmocka group teardown: removes tmp_dir and everything below it (symlinks are removed, never
 * followed). Returns 0, or -1 when something could not be removed. */
int tmpdir_teardown(void **state);
/* "<tmp_dir>/<name>" in one of 8 rotating static buffers: valid until 8 more calls. Not
 * thread-safe (tests are single-threaded). */
const char *tmp_path(const char *name);
/* The whole file at path (util's reader, up to 4 GiB) in a malloc'd buffer with a NUL after its
 * *n_bytes bytes (n_bytes may be NULL); fails the running test, naming the file, when it cannot. */
char *tmp_read(const char *path, size_t *n_bytes);
/* Where the file at a, from byte skip_a on, first differs from the whole file at b (an offset into
 * b), or -1 when they are the same bytes; fails the running test when either cannot be read. */
long tmp_first_diff(const char *a, size_t skip_a, const char *b);
/* Writes the n bytes at data to path (created or truncated). */
void tmp_write(const char *path, const void *data, size_t n);
/* Writes a safetensors file: 8-byte little-endian header length, header padded with spaces to a
 * multiple of 8, then the n_data bytes at data, or n_data zero bytes (sparse) when data is NULL. */
void tmp_write_st(const char *path, const char *header, const void *data, size_t n_data);
/* File offset of tensor's data in the safetensors file at path, found with the library's own
 * reader (checkpoint/safetensors.h), for tests that patch a checkpoint's bytes in place. */
long tmp_st_offset(const char *path, const char *tensor);

#endif
