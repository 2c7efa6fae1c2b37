/* sha256.h — the one SHA-256 of qvoice (OpenSSL EVP underneath): one-shot, streamed, and as hex.
 * Voice-file hashes, model fingerprints, cache keys and source-file digests all come from here.
 */
#ifndef QVU_SHA256_H
#define QVU_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct qvu_sha256_ctx qvu_sha256_ctx;

/* SHA-256 of n_bytes at buf (buf may be NULL when n_bytes is 0). 0, or -1 (out of memory). */
int qvu_sha256(const void *buf, size_t n_bytes, uint8_t out[32]);

/* Streamed: begin (NULL when out of memory), add any number of times, end. end writes the
 * digest, frees ctx (also on failure) and returns 0, or -1 when ctx is NULL or a step failed. */
qvu_sha256_ctx *qvu_sha256_begin(void);
int qvu_sha256_add(qvu_sha256_ctx *ctx, const void *buf, size_t n_bytes);
int qvu_sha256_end(qvu_sha256_ctx *ctx, uint8_t out[32]);

/* SHA-256 of the file at path, read in blocks. 0, or -1 (cannot open or read it; errno set). */
int qvu_sha256_file(const char *path, uint8_t out[32]);

/* Lower-case hex of n bytes (a digest, or a prefix of one such as a signing key's id) into
 * out[2n + 1] (NUL-terminated). Returns out. */
char *qvu_hex(const uint8_t *bytes, size_t n, char *out);

#endif
