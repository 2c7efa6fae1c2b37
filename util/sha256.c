/* sha256.c — SHA-256 over OpenSSL's EVP interface (the library links libcrypto anyway, and its
 * implementation uses the CPU's SHA extensions where present). A failed step makes the whole
 * digest fail, so callers test once at the end.
 */
#include "util/sha256.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>

struct qvu_sha256_ctx {
    EVP_MD_CTX *md;
    int bad;
};

int qvu_sha256(const void *buf, size_t n_bytes, uint8_t out[32]) {
    unsigned int n = 0;
    int ok = EVP_Digest(n_bytes ? buf : "", n_bytes, out, &n, EVP_sha256(), NULL) == 1;
    return ok && n == 32 ? 0 : -1;
}

qvu_sha256_ctx *qvu_sha256_begin(void) {
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md) return NULL;
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        return NULL;
    }
    qvu_sha256_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        EVP_MD_CTX_free(md);
        return NULL;
    }
    c->md = md;
    return c;
}

int qvu_sha256_add(qvu_sha256_ctx *ctx, const void *buf, size_t n_bytes) {
    if (!ctx) return -1;
    if (!ctx->bad && n_bytes && EVP_DigestUpdate(ctx->md, buf, n_bytes) != 1) ctx->bad = 1;
    return ctx->bad ? -1 : 0;
}

int qvu_sha256_end(qvu_sha256_ctx *ctx, uint8_t out[32]) {
    if (!ctx) return -1;
    unsigned int n = 0;
    int ok = !ctx->bad && EVP_DigestFinal_ex(ctx->md, out, &n) == 1 && n == 32;
    EVP_MD_CTX_free(ctx->md);
    free(ctx);
    return ok ? 0 : -1;
}

int qvu_sha256_file(const char *path, uint8_t out[32]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    qvu_sha256_ctx *c = qvu_sha256_begin();
    static const size_t block = 1 << 20;
    char *buf = malloc(block);
    size_t n;
    while (c && buf && (n = fread(buf, 1, block, f)) > 0)
        qvu_sha256_add(c, buf, n);
    const int bad = !buf || ferror(f);
    free(buf);
    fclose(f);
    if (bad) return qvu_sha256_end(c, out), -1;
    return qvu_sha256_end(c, out);
}

char *qvu_hex(const uint8_t *bytes, size_t n, char *out) {
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[bytes[i] >> 4];
        out[2 * i + 1] = hex[bytes[i] & 15];
    }
    out[2 * n] = 0;
    return out;
}
