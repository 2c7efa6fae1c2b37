/* wav.c — see wav.h. */
#include "tests/unit/helpers/wav.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/qvoice.h"

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The chunk with id at or after offset 12: its header's offset, or -1. */
static long find(const uint8_t *p, size_t n, const char *id) {
    if (n < 12 || memcmp(p, "RIFF", 4) || memcmp(p + 8, "WAVE", 4)) return -1;
    for (size_t at = 12; at + 8 <= n;) {
        if (!memcmp(p + at, id, 4)) return (long)at;
        const uint32_t len = le32(p + at + 4);
        if (!memcmp(p + at, "data", 4) || len > n) return -1;
        at += 8 + (size_t)len + (len & 1);
    }
    return -1;
}

const uint8_t *wav_chunk(const uint8_t *p, size_t n, const char *id, uint32_t *len) {
    const long at = find(p, n, id);
    if (at < 0) return NULL;
    *len = le32(p + at + 4);
    return p + at + 8;
}

long wav_data_offset(const uint8_t *p, size_t n, uint32_t *data_bytes) {
    const long at = find(p, n, "data");
    if (at < 0) return -1;
    *data_bytes = le32(p + at + 4);
    return at + 8;
}

static size_t read_head(const char *path, uint8_t *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    const size_t n = fread(buf, 1, size, f);
    fclose(f);
    return n;
}

long wav_file_data_offset(const char *path, uint32_t *data_bytes) {
    static uint8_t buf[65536];
    return wav_data_offset(buf, read_head(path, buf, sizeof buf), data_bytes);
}

int wav_check_provenance(const char *path, const char *voice_id, const char *model_fingerprint) {
    static uint8_t buf[65536];
    const size_t n = read_head(path, buf, sizeof buf);
    uint32_t len;
    const uint8_t *p = wav_chunk(buf, n, "qvpr", &len);
    char want[3][200];
    snprintf(want[0], sizeof want[0], "\nvoice_id=%s\n", voice_id);
    snprintf(want[1], sizeof want[1], "\nmodel_fingerprint=%s\n", model_fingerprint);
    snprintf(want[2], sizeof want[2], "\nwatermark=%08x\n",
             qv_watermark_payload(voice_id, model_fingerprint));
    for (int i = 0; i < 3; i++)
        if (!p || !memmem(p, len, want[i], strlen(want[i]))) {
            printf("%s: no \"%s\" in its qvpr chunk (%.*s)\n", path, want[i] + 1,
                   p ? (int)len : 4, p ? (const char *)p : "none");
            return -1;
        }
    return 0;
}

/* The samples of the WAV at path (malloc'd, *n of them), or NULL. */
static int16_t *wav_samples(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    rewind(f);
    uint8_t *b = size > 0 ? malloc((size_t)size) : NULL;
    const size_t got = b ? fread(b, 1, (size_t)size, f) : 0;
    fclose(f);
    uint32_t data;
    const long at = b ? wav_data_offset(b, got, &data) : -1;
    int16_t *x = NULL;
    if (at > 0 && (size_t)at + data <= got && (x = malloc(data + 2))) {
        *n = data / 2;
        for (size_t i = 0; i < *n; i++)
            x[i] = (int16_t)(b[at + 2 * i] | b[at + 2 * i + 1] << 8);
    }
    free(b);
    return x;
}

int wav_mark_mismatch(const char *marked, const char *plain, uint32_t payload) {
    size_t n, np;
    int16_t *m = wav_samples(marked, &n), *p = wav_samples(plain, &np);
    float *y = p && m && n == np && n ? malloc(n * sizeof *y) : NULL;
    uint8_t *q = y ? malloc(2 * n) : NULL;
    int permille = -1;
    if (q) {
        for (size_t i = 0; i < n; i++)
            y[i] = (float)p[i] / 32767.0f;
    }
    if (q && !qv_watermark_mark(payload, y, (int64_t)n)) {
        qv_pcm_s16le(y, (int64_t)n, q);
        size_t off = 0;
        for (size_t i = 0; i < n; i++)
            off += abs((int16_t)(q[2 * i] | q[2 * i + 1] << 8) - m[i]) > 1;
        permille = (int)(1000 * off / n);
    }
    free(q), free(y), free(m), free(p);
    return permille;
}
