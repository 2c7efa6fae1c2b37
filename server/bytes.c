/* bytes.c — the server's growing byte buffers (request bodies, responses, metrics) and base64:
 * out for SSE audio events, in for per-request references (ref_audio). The audio itself is
 * encoded by the library (qv_audio_encode, qv_encoder).
 */
#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

int qvs_bytes_add(bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    if (p && n) memcpy(b->p + b->len, p, n); /* p NULL: reserve only */
    b->len += n;
    return 0;
}

int qvs_base64_add(bytes *b, const uint8_t *p, size_t n) {
    size_t len = b->len;
    if (qvs_bytes_add(b, NULL, 4 * ((n + 2) / 3) + 1)) return -1; /* EVP_EncodeBlock adds a NUL */
    b->len = len + (size_t)EVP_EncodeBlock(b->p + len, p, (int)n);
    return 0;
}

int qvs_base64_decode(const char *in, size_t n, uint8_t **out, size_t *n_out) {
    char *clean = malloc(n + 4);
    size_t k = 0;
    if (!clean) return -1;
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", in[i])) clean[k++] = in[i];
    int pad = (k > 0 && clean[k - 1] == '=') + (k > 1 && clean[k - 2] == '=');
    uint8_t *b = k % 4 || !k || k > INT_MAX ? NULL : malloc(k / 4 * 3 + 1);
    int got = b ? EVP_DecodeBlock(b, (const unsigned char *)clean, (int)k) : -1;
    free(clean);
    if (got < 0 || (size_t)got < (size_t)pad) {
        free(b);
        return -1;
    }
    *out = b;
    *n_out = (size_t)got - (size_t)pad;
    return 0;
}
