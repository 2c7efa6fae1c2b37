/* encode.c — response audio: 16-bit WAV/PCM written here (a streamed WAV gets a header of unknown
 * length), FLAC, MP3 and Ogg Opus through libsndfile into memory, base64 for SSE events.
 */
#include <math.h>
#include <openssl/evp.h>
#include <sndfile.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

#define FMT_NAME_(name, text, mime) text,
static const char *const fmt_names[] = {AUDIO_FORMAT_LIST(FMT_NAME_)};
#undef FMT_NAME_
#define FMT_MIME_(name, text, mime) mime,
static const char *const fmt_mimes[] = {AUDIO_FORMAT_LIST(FMT_MIME_)};
#undef FMT_MIME_

/* libsndfile major formats for the ones it writes; 0 for those written here. */
static const int sf_formats[FMT_COUNT] = {
    [FMT_FLAC] = SF_FORMAT_FLAC | SF_FORMAT_PCM_16,
    [FMT_MP3] = SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III,
    [FMT_OPUS] = SF_FORMAT_OGG | SF_FORMAT_OPUS,
};

int qvs_format_parse(const char *name) {
    for (int f = 0; f < FMT_COUNT; f++)
        if (!strcmp(name, fmt_names[f])) return f;
    return -1;
}
const char *qvs_format_name(int f) {
    return fmt_names[f];
}
const char *qvs_format_mime(int f) {
    return fmt_mimes[f];
}

int qvs_formats_available(void) {
    int bits = 0;
    for (int f = 0; f < FMT_COUNT; f++) {
        SF_INFO info = {.samplerate = QV_SAMPLE_RATE_HZ, .channels = 1, .format = sf_formats[f]};
        if (!sf_formats[f] || sf_format_check(&info)) bits |= 1 << f;
    }
    return bits;
}

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

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void qvs_wav_header(uint8_t h[44], int64_t n_samples) {
    uint32_t data = n_samples < 0 ? 0xFFFFFFFFu : (uint32_t)(n_samples * 2);
    memcpy(h, "RIFF", 4);
    put32(h + 4, n_samples < 0 ? 0xFFFFFFFFu : 36 + data);
    memcpy(h + 8, "WAVEfmt ", 8);
    put32(h + 16, 16);
    put32(h + 20, 1 | (1u << 16)); /* PCM, mono */
    put32(h + 24, QV_SAMPLE_RATE_HZ);
    put32(h + 28, QV_SAMPLE_RATE_HZ * 2);
    put32(h + 32, 2 | (16u << 16)); /* block align, bits */
    memcpy(h + 36, "data", 4);
    put32(h + 40, data);
}

int qvs_pcm16_add(bytes *b, const float *x, int n) {
    uint8_t tmp[512];
    for (int i = 0; i < n;) {
        int k = 0;
        for (; k < (int)sizeof tmp / 2 && i < n; k++, i++) {
            float v = x[i] < -1.0f ? -1.0f : x[i] > 1.0f ? 1.0f : x[i];
            int16_t s = (int16_t)lrintf(v * 32767.0f);
            tmp[2 * k] = (uint8_t)s;
            tmp[2 * k + 1] = (uint8_t)((uint16_t)s >> 8);
        }
        if (qvs_bytes_add(b, tmp, 2 * (size_t)k)) return -1;
    }
    return 0;
}

/* ---- libsndfile into memory ---- */

typedef struct {
    bytes *b;
    sf_count_t pos;
    int failed;
} vfile;

static sf_count_t v_len(void *u) {
    return (sf_count_t)((vfile *)u)->b->len;
}
static sf_count_t v_seek(sf_count_t off, int whence, void *u) {
    vfile *v = u;
    sf_count_t base = whence == SEEK_CUR ? v->pos : whence == SEEK_END ? (sf_count_t)v->b->len : 0;
    if (base + off < 0) return -1;
    v->pos = base + off;
    return v->pos;
}
static sf_count_t v_read(void *p, sf_count_t n, void *u) {
    vfile *v = u;
    sf_count_t left = (sf_count_t)v->b->len - v->pos;
    if (n > left) n = left > 0 ? left : 0;
    memcpy(p, v->b->p + v->pos, (size_t)n);
    v->pos += n;
    return n;
}
static sf_count_t v_write(const void *p, sf_count_t n, void *u) {
    vfile *v = u;
    size_t end = (size_t)(v->pos + n);
    if (end > v->b->len) { /* extend, with zeros past a seek beyond the end */
        size_t old = v->b->len;
        if (qvs_bytes_add(v->b, NULL, end - old)) {
            v->failed = 1;
            return 0;
        }
        memset(v->b->p + old, 0, end - old);
    }
    memcpy(v->b->p + v->pos, p, (size_t)n);
    v->pos += n;
    return n;
}
static sf_count_t v_tell(void *u) {
    return ((vfile *)u)->pos;
}

int qvs_encode_all(int f, const float *x, int64_t n, bytes *out, char *err, size_t es) {
    if (f == FMT_WAV || f == FMT_PCM) {
        uint8_t h[44];
        qvs_wav_header(h, n);
        if ((f == FMT_WAV && qvs_bytes_add(out, h, sizeof h)) || qvs_pcm16_add(out, x, (int)n)) {
            snprintf(err, es, "response: out of memory");
            return -1;
        }
        return 0;
    }
    SF_VIRTUAL_IO io = {v_len, v_seek, v_read, v_write, v_tell};
    vfile v = {out, 0, 0};
    SF_INFO info = {.samplerate = QV_SAMPLE_RATE_HZ, .channels = 1, .format = sf_formats[f]};
    SNDFILE *sf = sf_open_virtual(&io, SFM_WRITE, &info, &v);
    if (!sf) {
        snprintf(err, es, "response_format %s: %s", fmt_names[f], sf_strerror(NULL));
        return -1;
    }
    sf_count_t w = sf_writef_float(sf, x, n);
    int rc = sf_close(sf);
    if (w != n || rc || v.failed) {
        snprintf(err, es, "response_format %s: encoding failed", fmt_names[f]);
        return -1;
    }
    return 0;
}

int qvs_base64_add(bytes *b, const uint8_t *p, size_t n) {
    size_t len = b->len;
    if (qvs_bytes_add(b, NULL, 4 * ((n + 2) / 3) + 1)) return -1; /* EVP_EncodeBlock adds a NUL */
    b->len = len + (size_t)EVP_EncodeBlock(b->p + len, p, (int)n);
    return 0;
}
