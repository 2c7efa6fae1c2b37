/* encode.c — audio out: the one encoder of 24 kHz mono samples for every front end (speak, the
 * server, Python, the examples). 16-bit WAV and raw PCM are written here (so they can stream: a
 * header of unknown length, then blocks); FLAC, Ogg Vorbis, Opus and MP3 go through libsndfile
 * into memory. qv_pcm_s16le is the only float → 16-bit conversion of the project. Every path
 * marks the samples first (qv_watermark, docs/provenance.md) unless told QV_WATERMARK_OFF.
 */
#include <errno.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "include/qvoice.h"
#include "util/api.h"

/* ==== formats ================================================================================ */

#define NAME_(id, name, mime) name,
static const char *const names[] = {QV_FORMAT_LIST(NAME_)};
#undef NAME_
#define MIME_(id, name, mime) mime,
static const char *const mimes[] = {QV_FORMAT_LIST(MIME_)};
#undef MIME_

/* libsndfile formats of those it writes; 0 for WAV and PCM, written here. */
static const int sf_formats[QV_FORMAT_COUNT] = {
    [QV_FORMAT_FLAC] = SF_FORMAT_FLAC | SF_FORMAT_PCM_16,
    [QV_FORMAT_OGG] = SF_FORMAT_OGG | SF_FORMAT_VORBIS,
    [QV_FORMAT_OPUS] = SF_FORMAT_OGG | SF_FORMAT_OPUS,
    [QV_FORMAT_MP3] = SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III,
};

static int valid(int f) {
    return f >= 0 && f < QV_FORMAT_COUNT;
}

int qv_format_parse(const char *name) {
    for (int f = 0; name && f < QV_FORMAT_COUNT; f++)
        if (!strcasecmp(name, names[f])) return f;
    return -1;
}

int qv_format_of_path(const char *path) {
    const char *dot = path ? strrchr(path, '.') : NULL;
    return dot && !strchr(dot, '/') ? qv_format_parse(dot + 1) : -1;
}

const char *qv_format_name(int f) {
    return valid(f) ? names[f] : NULL;
}

const char *qv_format_mime(int f) {
    return valid(f) ? mimes[f] : NULL;
}

int qv_format_writable(int f) {
    if (!valid(f)) return 0;
    SF_INFO info = {.samplerate = QV_SAMPLE_RATE_HZ, .channels = 1, .format = sf_formats[f]};
    return !sf_formats[f] || sf_format_check(&info);
}

int qv_format_progressive(int f) {
    return f == QV_FORMAT_WAV || f == QV_FORMAT_PCM;
}

/* ==== 16-bit PCM and the WAV header ========================================================== */

void qv_pcm_s16le(const float *x, int64_t n, uint8_t *out) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i] < -1.0f ? -1.0f : x[i] > 1.0f ? 1.0f : x[i];
        const int16_t s = (int16_t)lrintf(v * 32767.0f);
        out[2 * i] = (uint8_t)s;
        out[2 * i + 1] = (uint8_t)((uint16_t)s >> 8);
    }
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void qv_wav_header(uint8_t h[QV_WAV_HEADER_BYTES], int64_t n_samples) {
    /* a length a RIFF size cannot hold is written as unknown, as a stream's */
    const int unknown = n_samples < 0 || n_samples > (int64_t)(UINT32_MAX - 36) / 2;
    const uint32_t data = unknown ? 0xFFFFFFFFu : (uint32_t)(n_samples * 2);
    memcpy(h, "RIFF", 4);
    put32(h + 4, unknown ? 0xFFFFFFFFu : 36 + data);
    memcpy(h + 8, "WAVEfmt ", 8);
    put32(h + 16, 16);
    put32(h + 20, 1 | (1u << 16)); /* PCM, mono */
    put32(h + 24, QV_SAMPLE_RATE_HZ);
    put32(h + 28, QV_SAMPLE_RATE_HZ * 2);
    put32(h + 32, 2 | (16u << 16)); /* block align, bits */
    memcpy(h + 36, "data", 4);
    put32(h + 40, data);
}

int qv_pcm_collect(void *user, const float *pcm, int n) {
    qv_pcm_buffer *b = user;
    if (b->struct_size != sizeof *b)
        return qvu_check_size("qv_pcm_buffer", b->struct_size, sizeof *b), b->failed = 1;
    if (n <= 0) return 0;
    if (b->n + n > b->cap) {
        int64_t cap = b->cap ? b->cap : QV_SAMPLE_RATE_HZ;
        while (cap < b->n + n)
            cap *= 2;
        float *g = realloc(b->pcm, (size_t)cap * sizeof *g);
        if (!g)
            return qvu_failf(QV_E_NOMEM, "%lld samples: out of memory", (long long)(b->n + n)),
                   b->failed = 1;
        b->pcm = g, b->cap = cap;
    }
    memcpy(b->pcm + b->n, pcm, (size_t)n * sizeof *pcm);
    b->n += n;
    return 0;
}

/* ==== whole files in memory ================================================================== */

typedef struct {
    uint8_t *p;
    size_t len, cap, pos;
    int failed;
} membuf;

/* Room for end bytes; new bytes (a seek past the end) are zero. */
static int mem_reserve(membuf *b, size_t end) {
    if (end > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < end)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q, b->cap = cap;
    }
    if (end > b->len) memset(b->p + b->len, 0, end - b->len), b->len = end;
    return 0;
}

static sf_count_t v_len(void *u) {
    return (sf_count_t)((membuf *)u)->len;
}
static sf_count_t v_tell(void *u) {
    return (sf_count_t)((membuf *)u)->pos;
}

static sf_count_t v_seek(sf_count_t off, int whence, void *u) {
    membuf *b = u;
    const sf_count_t base = whence == SEEK_CUR   ? (sf_count_t)b->pos
                            : whence == SEEK_END ? (sf_count_t)b->len
                                                 : 0;
    if (base + off < 0) return -1;
    b->pos = (size_t)(base + off);
    return (sf_count_t)b->pos;
}

static sf_count_t v_read(void *dst, sf_count_t n, void *u) {
    membuf *b = u;
    const size_t left = b->pos < b->len ? b->len - b->pos : 0;
    if ((size_t)n > left) n = (sf_count_t)left;
    memcpy(dst, b->p + b->pos, (size_t)n);
    b->pos += (size_t)n;
    return n;
}

static sf_count_t v_write(const void *src, sf_count_t n, void *u) {
    membuf *b = u;
    if (mem_reserve(b, b->pos + (size_t)n)) return b->failed = 1, 0;
    memcpy(b->p + b->pos, src, (size_t)n);
    b->pos += (size_t)n;
    return n;
}

/* Marked output also says so in the container (docs/provenance.md, "Metadata"): libsndfile
 * writes these as Vorbis comments (FLAC, Ogg Vorbis, Opus) and ID3v2 frames (MP3: COMM). */
static void set_provenance(SNDFILE *sf, uint32_t mark) {
    char comment[256];
    snprintf(comment, sizeof comment,
             "qvoice provenance: digital_source_type=http://cv.iptc.org/newscodes/"
             "digitalsourcetype/trainedAlgorithmicMedia; engine=qvoice %s; watermark=%08x",
             qv_version(), mark);
    char software[64];
    snprintf(software, sizeof software, "qvoice %s", qv_version());
    sf_set_string(sf, SF_STR_SOFTWARE, software);
    sf_set_string(sf, SF_STR_COMMENT, comment);
}

static enum qv_status encode_sndfile(int f, const float *pcm, int64_t n, uint32_t mark, membuf *b) {
    SF_VIRTUAL_IO io = {v_len, v_seek, v_read, v_write, v_tell};
    SF_INFO info = {.samplerate = QV_SAMPLE_RATE_HZ, .channels = 1, .format = sf_formats[f]};
    SNDFILE *sf = sf_open_virtual(&io, SFM_WRITE, &info, b);
    if (!sf) return qvu_failf(QV_E_UNSUPPORTED, "%s: %s", names[f], sf_strerror(NULL));
    if (mark != QV_WATERMARK_OFF) set_provenance(sf, mark);
    sf_count_t w = -1;
    if ((sf_formats[f] & SF_FORMAT_SUBMASK) == SF_FORMAT_PCM_16) { /* 16-bit: our conversion */
        int16_t *s16 = malloc((size_t)n * sizeof *s16 + 1);
        if (s16) {
            qv_pcm_s16le(pcm, n, (uint8_t *)s16);
            for (int64_t i = 0; i < n; i++) /* to host order */
                s16[i] = (int16_t)(((uint8_t *)s16)[2 * i] | ((uint8_t *)s16)[2 * i + 1] << 8);
            w = sf_writef_short(sf, s16, n);
        }
        free(s16);
    } else { /* the lossy codecs take the samples as they are */
        w = sf_writef_float(sf, pcm, n);
    }
    const int rc = sf_close(sf);
    if (b->failed) return qvu_failf(QV_E_NOMEM, "%s: out of memory", names[f]);
    if (w != n || rc) return qvu_failf(QV_E_IO, "%s: encoding failed", names[f]);
    return QV_OK;
}

/* pcm marked with mark into a new buffer in *marked (NULL, nothing allocated, when mark is
 * QV_WATERMARK_OFF). */
static enum qv_status mark_copy(const float *pcm, int64_t n, uint32_t mark, float **marked) {
    *marked = NULL;
    if (mark == QV_WATERMARK_OFF || n == 0) return QV_OK;
    float *y = malloc((size_t)n * sizeof *y);
    if (!y) return qvu_failf(QV_E_NOMEM, "%lld samples: out of memory marking them", (long long)n);
    memcpy(y, pcm, (size_t)n * sizeof *y);
    enum qv_status st = qv_watermark_mark(mark, y, n);
    if (st) return free(y), st;
    *marked = y;
    return QV_OK;
}

enum qv_status qv_audio_encode(int format, const float *pcm, int64_t n_samples, uint32_t mark,
                               uint8_t **out, size_t *n_bytes) {
    if (!out || !n_bytes) return qvu_fail(QV_E_INVALID, "qv_audio_encode: NULL argument");
    *out = NULL, *n_bytes = 0;
    if (!valid(format) || n_samples < 0 || (n_samples && !pcm))
        return qvu_failf(QV_E_INVALID, "format %d, %lld samples: invalid", format,
                         (long long)n_samples);
    if ((uint64_t)n_samples > (SIZE_MAX - QV_WAV_HEADER_BYTES) / 2)
        return qvu_failf(QV_E_LIMIT, "%lld samples: too many", (long long)n_samples);
    membuf b = {0};
    float *marked;
    enum qv_status st = mark_copy(pcm, n_samples, mark, &marked);
    if (st) return st;
    if (marked) pcm = marked;
    if (qv_format_progressive(format)) {
        const size_t head = format == QV_FORMAT_WAV ? QV_WAV_HEADER_BYTES : 0;
        if (mem_reserve(&b, head + 2 * (size_t)n_samples)) {
            st = qvu_failf(QV_E_NOMEM, "%s: out of memory", names[format]);
        } else {
            if (head) qv_wav_header(b.p, n_samples);
            qv_pcm_s16le(pcm, n_samples, b.p + head);
        }
    } else {
        st = encode_sndfile(format, pcm, n_samples, mark, &b);
    }
    free(marked);
    if (st) return free(b.p), st;
    *out = b.p, *n_bytes = b.len;
    return QV_OK;
}

/* qv_audio_write_stream, whose detail names the stream where_ ("stdout", a path). */
static enum qv_status write_stream(FILE *f, const char *where_, int format, const float *pcm,
                                   int64_t n_samples, uint32_t mark) {
    uint8_t *buf;
    size_t n;
    enum qv_status st = qv_audio_encode(format, pcm, n_samples, mark, &buf, &n);
    if (st) return st;
    if (fwrite(buf, 1, n, f) != n || fflush(f))
        st = qvu_failf(QV_E_IO, "%s: %s", where_, strerror(errno));
    free(buf);
    return st;
}

enum qv_status qv_audio_write_stream(FILE *f, int format, const float *pcm, int64_t n_samples,
                                     uint32_t mark) {
    if (!f) return qvu_fail(QV_E_INVALID, "qv_audio_write_stream: NULL stream");
    return write_stream(f, f == stdout ? "stdout" : "stream", format, pcm, n_samples, mark);
}

enum qv_status qv_audio_write(const char *path, int format, const float *pcm, int64_t n_samples,
                              uint32_t mark) {
    qv_outfile *of;
    enum qv_status st = qv_outfile_open(&of, path);
    if (st) return st;
    FILE *f = qv_outfile_stream(of);
    if (!f)
        st = qvu_failf(QV_E_NOMEM, "%s: out of memory", path);
    else if ((st = write_stream(f, path, format, pcm, n_samples, mark)) && st != QV_E_IO)
        qvu_failf(st, "%s: %s", path, qv_last_error()); /* the encoder's detail names the format */
    if (st) return qv_outfile_abort(of), st;
    return qv_outfile_commit(of);
}

/* ==== streams ================================================================================ */

struct qv_encoder {
    int format;
    qv_write_fn fn; /* or: */
    void *user;
    FILE *file; /* seekable: the WAV header is rewritten after each block */
    int64_t n_samples;
    int started;  /* the first block (a WAV's header) went out */
    uint8_t *blk; /* one block: the header (first WAV block) and the samples */
    size_t cap;
    qv_watermark *mark; /* NULL: QV_WATERMARK_OFF */
    float *marked;      /* one block of marked samples */
    size_t marked_cap;
    int64_t mark_lag;   /* marked samples still to drop: the marker's delay (zeros) */
};

enum qv_status qv_encoder_new(qv_encoder **out, int format, uint32_t mark, qv_write_fn fn,
                              void *user, FILE *file) {
    if (!out) return qvu_fail(QV_E_INVALID, "qv_encoder_new: NULL argument");
    *out = NULL;
    if (!valid(format) || !fn == !file)
        return qvu_fail(QV_E_INVALID, "encoder: a format and either a write function or a file");
    if (!qv_format_progressive(format))
        return qvu_failf(QV_E_UNSUPPORTED, "%s: progressive output is WAV or PCM only",
                         names[format]);
    qv_encoder *e = calloc(1, sizeof *e);
    if (!e || (mark != QV_WATERMARK_OFF && qv_watermark_new(&e->mark, mark)))
        return free(e), qvu_fail(QV_E_NOMEM, "encoder: out of memory");
    e->format = format, e->fn = fn, e->user = user, e->file = file;
    e->mark_lag = e->mark ? QV_WATERMARK_DELAY : 0;
    *out = e;
    return QV_OK;
}

/* The block's bytes to the sink. 0 or -1. */
static int emit(qv_encoder *e, const uint8_t *p, size_t n) {
    if (e->fn) return e->fn(e->user, p, n) ? -1 : 0;
    return fwrite(p, 1, n, e->file) == n ? 0 : -1;
}

/* A seekable file's header gets the length so far (playable while it grows). */
static int update_header(qv_encoder *e) {
    if (e->format != QV_FORMAT_WAV || !e->file) return 0;
    const long end = ftell(e->file);
    if (end < 0 || fseek(e->file, 0, SEEK_SET)) return 0; /* a pipe keeps the unknown length */
    uint8_t h[QV_WAV_HEADER_BYTES];
    qv_wav_header(h, e->n_samples);
    return fwrite(h, 1, sizeof h, e->file) != sizeof h || fseek(e->file, end, SEEK_SET) ? -1 : 0;
}

/* One block of final samples to the sink (the first WAV one with the header). */
static enum qv_status write_block(qv_encoder *e, const float *pcm, int n_samples) {
    const size_t head = e->format == QV_FORMAT_WAV && !e->started ? QV_WAV_HEADER_BYTES : 0;
    const size_t need = head + 2 * (size_t)n_samples;
    if (need > e->cap) {
        uint8_t *q = realloc(e->blk, need);
        if (!q) return qvu_failf(QV_E_NOMEM, "%s block: out of memory", names[e->format]);
        e->blk = q, e->cap = need;
    }
    if (head) qv_wav_header(e->blk, -1);
    qv_pcm_s16le(pcm, n_samples, e->blk + head);
    if (emit(e, e->blk, need))
        return qvu_failf(QV_E_IO, "%s stream: write failed", names[e->format]);
    e->started = 1;
    e->n_samples += n_samples;
    if (update_header(e) || (e->file && fflush(e->file)))
        return qvu_failf(QV_E_IO, "%s file: %s", names[e->format], strerror(errno));
    return QV_OK;
}

/* Marked output lags by QV_WATERMARK_DELAY: its first samples (zeros) are dropped here and the
 * last ones come at close, so the stream equals the whole signal marked (qv_audio_encode). */
enum qv_status qv_encoder_write(qv_encoder *e, const float *pcm, int n_samples) {
    if (!e || n_samples < 0)
        return qvu_failf(QV_E_INVALID, "qv_encoder_write: %s", e ? "negative length" : "NULL");
    if (e->mark && n_samples) {
        if ((size_t)n_samples > e->marked_cap) {
            float *q = realloc(e->marked, (size_t)n_samples * sizeof *q);
            if (!q) return qvu_failf(QV_E_NOMEM, "%s block: out of memory", names[e->format]);
            e->marked = q, e->marked_cap = (size_t)n_samples;
        }
        memcpy(e->marked, pcm, (size_t)n_samples * sizeof *pcm);
        qv_watermark_apply(e->mark, e->marked, n_samples);
        const int drop = e->mark_lag < n_samples ? (int)e->mark_lag : n_samples;
        e->mark_lag -= drop;
        pcm = e->marked + drop, n_samples -= drop;
        if (n_samples == 0 && (e->started || e->format != QV_FORMAT_WAV)) return QV_OK;
    }
    return write_block(e, pcm, n_samples);
}

enum qv_status qv_encoder_close(qv_encoder *e) {
    if (!e) return QV_OK;
    enum qv_status st = QV_OK;
    if (e->mark) { /* the marker's last samples: as many as were taken and not yet given */
        float tail[QV_WATERMARK_DELAY];
        qv_watermark_flush(e->mark, tail);
        st = write_block(e, tail + e->mark_lag, QV_WATERMARK_DELAY - (int)e->mark_lag);
    } else if (e->format == QV_FORMAT_WAV && !e->started) {
        st = write_block(e, NULL, 0);
    }
    free(e->blk);
    free(e->marked);
    qv_watermark_free(e->mark);
    free(e);
    return st;
}
