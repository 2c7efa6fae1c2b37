/* encode.c — audio out: the one encoder of 24 kHz mono samples for every front end (speak, the
 * server, Python, the examples). 16-bit WAV and raw PCM are written here (so they can stream: a
 * header of unknown length, then blocks); FLAC, Ogg Vorbis, Opus and MP3 go through libsndfile
 * into memory; AAC through aac.c's frames (streamable too), behind an ID3v2 tag written here. qv_pcm_s16le is the only float → 16-bit conversion of the project. Every path
 * marks the samples first (qv_watermark) and tags the container with the output's provenance
 * (docs/provenance.md), unless given no qv_provenance; a WAV's tags sit before its data chunk so
 * that a stream carries them too. Another output rate is made last, from the marked 24 kHz
 * samples, by one streaming resampler for whole files and streams alike.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "features/features.h"
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

/* libsndfile's compression level for the lossy ones (0: best, 1: smallest), chosen so that the
 * watermark survives qvoice's own encoding of speech (test_watermark's test_own_codecs: every 3 s
 * excerpt found, every 10 s payload; Ogg Vorbis 57 of 58 at its best quality, about 99 kbit/s at
 * 24 kHz mono): MP3 80 kbit/s constant, Opus 133 kbit/s constant. libsndfile's defaults (MP3
 * about 56 kbit/s variable, Vorbis 50, Opus 36) lost it: 41, 12 and 0 of the clips' 58 excerpts
 * were found. */
static const double sf_levels[QV_FORMAT_COUNT] = {
    [QV_FORMAT_MP3] = 0.5,
    [QV_FORMAT_OGG] = 0.01,
    [QV_FORMAT_OPUS] = 0.5,
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
    if (!valid(f)) return qvu_failf(QV_E_INVALID, "format %d: unknown", f), 0;
    if (f == QV_FORMAT_AAC) return qva_aac_available() == QV_OK;
    SF_INFO info = {.samplerate = QV_SAMPLE_RATE_HZ, .channels = 1, .format = sf_formats[f]};
    if (!sf_formats[f] || sf_format_check(&info)) return 1;
    qvu_failf(QV_E_UNSUPPORTED, "%s: this build's libsndfile cannot write it", names[f]);
    return 0;
}

/* The rates lame (MPEG-1, 2, 2.5 layer III) and AAC's ADTS index share within our bounds, and
 * Opus's (RFC 6716 §2). */
static const int mpeg_rates[] = {8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 0};
static const int opus_rates[] = {8000, 12000, 16000, 24000, 48000, 0};

enum qv_status qv_format_rate_check(int f, int hz) {
    if (!valid(f)) return qvu_failf(QV_E_INVALID, "format %d: unknown", f);
    if (hz < QV_OUT_RATE_MIN_HZ || hz > QV_OUT_RATE_MAX_HZ)
        return qvu_failf(QV_E_INVALID, "sample_rate %d: expected %d to %d", hz, QV_OUT_RATE_MIN_HZ,
                         QV_OUT_RATE_MAX_HZ);
    const int *set = f == QV_FORMAT_OPUS                        ? opus_rates
                     : f == QV_FORMAT_MP3 || f == QV_FORMAT_AAC ? mpeg_rates
                                                                : NULL;
    if (!set) return QV_OK;
    char list[128];
    size_t n = 0;
    for (int i = 0; set[i]; i++) {
        if (set[i] == hz) return QV_OK;
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", i ? ", " : "", set[i]);
    }
    return qvu_failf(QV_E_INVALID, "sample_rate %d: %s takes %s", hz, names[f], list);
}

int qv_format_progressive(int f) {
    return f == QV_FORMAT_WAV || f == QV_FORMAT_PCM || f == QV_FORMAT_AAC;
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

/* ==== provenance tags ======================================================================== */

#define SOURCE_TYPE "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
#define TAG_TEXT_BYTES QV_PROVENANCE_TEXT_BYTES /* the key set with two ids of 128 bytes: ~470 */

/* A qv_provenance checked and copied: what every container says of an output. */
typedef struct {
    int on;                 /* 0: raw output, no tags */
    uint32_t mark;          /* the watermark payload, or QV_WATERMARK_OFF */
    char voice[QV_PROVENANCE_MAX_ID + 1], model[QV_PROVENANCE_MAX_ID + 1];
    char created[32];       /* YYYY-MM-DDThh:mm:ssZ, or "" */
} tags;

qv_provenance qv_provenance_default(void) {
    qv_provenance p = {.struct_size = sizeof p, .watermark = 1, .utc = (int64_t)time(NULL)};
    const char *e = getenv("SOURCE_DATE_EPOCH"); /* reproducible-builds.org's convention */
    char *end;
    if (e && *e) {
        errno = 0;
        const long long t = strtoll(e, &end, 10);
        if (!*end && !errno && t >= 0) p.utc = t;
    }
    return p;
}

/* s[0..size) up to its NUL, anything but printable ASCII (and ';', the comment's separator) as
 * '?'. */
static void clean_id(const char *s, size_t size, char out[QV_PROVENANCE_MAX_ID + 1]) {
    size_t n = 0;
    for (; n < size && n < QV_PROVENANCE_MAX_ID && s[n]; n++)
        out[n] = s[n] > ' ' && s[n] < 0x7f && s[n] != ';' ? s[n] : '?';
    out[n] = 0;
}

static enum qv_status tags_of(const qv_provenance *p, tags *t) {
    memset(t, 0, sizeof *t);
    t->mark = QV_WATERMARK_OFF;
    if (!p) return QV_OK;
    if (p->struct_size != sizeof *p) return qvu_check_size("qv_provenance", p->struct_size, sizeof *p);
    t->on = 1;
    clean_id(p->voice_id, sizeof p->voice_id, t->voice);
    clean_id(p->model_fingerprint, sizeof p->model_fingerprint, t->model);
    if (p->watermark) /* no id at all: the synthetic flag alone */
        t->mark = t->voice[0] || t->model[0] ? qv_watermark_payload(t->voice, t->model)
                                             : QV_WATERMARK_DEFAULT;
    struct tm tm;
    const time_t when = (time_t)p->utc;
    if (p->utc >= 0 && gmtime_r(&when, &tm))
        strftime(t->created, sizeof t->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return QV_OK;
}

/* The documented key set (docs/provenance.md), "key=value" joined by sep; keys without a value
 * are left out. */
static void tags_text(const tags *t, const char *sep, char out[TAG_TEXT_BYTES]) {
    char mark[16] = "off";
    if (t->mark != QV_WATERMARK_OFF) snprintf(mark, sizeof mark, "%08x", t->mark);
    size_t n = (size_t)snprintf(out, TAG_TEXT_BYTES, "digital_source_type=%s%sengine=qvoice %s",
                                SOURCE_TYPE, sep, qv_version());
    const char *const keys[] = {"model_fingerprint", "voice_id", "watermark", "created"};
    const char *const vals[] = {t->model, t->voice, mark, t->created};
    for (int i = 0; i < 4; i++)
        if (vals[i][0] && n < TAG_TEXT_BYTES)
            n += (size_t)snprintf(out + n, TAG_TEXT_BYTES - n, "%s%s=%s", sep, keys[i], vals[i]);
}

/* The container comment: "qvoice provenance: " and the key set joined by "; ". */
static void comment_text(const tags *t, char out[TAG_TEXT_BYTES + 32]) {
    char text[TAG_TEXT_BYTES];
    tags_text(t, "; ", text);
    snprintf(out, TAG_TEXT_BYTES + 32, "qvoice provenance: %s", text);
}

enum qv_status qv_provenance_text(const qv_provenance *p, char out[QV_PROVENANCE_TEXT_BYTES]) {
    if (!p || !out) return qvu_fail(QV_E_INVALID, "qv_provenance_text: NULL argument");
    tags t;
    const enum qv_status st = tags_of(p, &t);
    if (!st) tags_text(&t, "; ", out);
    return st;
}

_Static_assert(QV_PROVENANCE_TEXT_BYTES == 1024, "qv_provenance_read's %.1023s");

enum qv_status qv_provenance_read(const char *path, char out[QV_PROVENANCE_TEXT_BYTES]) {
    if (!path || !out) return qvu_fail(QV_E_INVALID, "qv_provenance_read: NULL argument");
    static const char prefix[] = "qvoice provenance: ";
    char comment[TAG_TEXT_BYTES + 32], err[QVU_DETAIL_SIZE];
    out[0] = 0;
    if (qva_audio_comment(path, comment, sizeof comment, err, sizeof err))
        return qvu_fail(QV_E_AUDIO, err);
    if (!strncmp(comment, prefix, sizeof prefix - 1))
        snprintf(out, QV_PROVENANCE_TEXT_BYTES, "%.1023s", comment + sizeof prefix - 1);
    return QV_OK;
}

/* ==== the WAV header ========================================================================= */

/* RIFF, fmt, then with tags LIST/INFO (ISFT software, ICRD time, ICMT the comment)
 * and the `qvpr` chunk (the key set, one "key=value\n" each), then the data chunk's header. */
#define WAV_PLAIN_BYTES 44
#define WAV_HEADER_MAX_BYTES (WAV_PLAIN_BYTES + 128 + 3 * TAG_TEXT_BYTES)

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A chunk id, its size and text at h[*n] (a NUL ends an INFO string; both pad to even). */
static void put_text_chunk(uint8_t *h, size_t *n, const char *id, const char *text, int nul) {
    const size_t len = strlen(text) + (size_t)nul;
    memcpy(h + *n, id, 4);
    put32(h + *n + 4, (uint32_t)len);
    memcpy(h + *n + 8, text, len - (size_t)nul);
    if (nul) h[*n + 8 + len - 1] = 0;
    *n += 8 + len;
    if (len & 1) h[(*n)++] = 0;
}

/* The header of a 16-bit mono WAV at hz of n_samples (< 0, or more than a RIFF size holds:
 * unknown length, as a stream writes it) into h; returns its length, the same for any n_samples. */
static size_t wav_header(uint8_t h[WAV_HEADER_MAX_BYTES], int hz, int64_t n_samples,
                         const tags *t) {
    size_t n = 36;
    memcpy(h, "RIFF", 4);
    memcpy(h + 8, "WAVEfmt ", 8);
    put32(h + 16, 16);
    put32(h + 20, 1 | (1u << 16)); /* PCM, mono */
    put32(h + 24, (uint32_t)hz);
    put32(h + 28, (uint32_t)hz * 2);
    put32(h + 32, 2 | (16u << 16)); /* block align, bits */
    if (t->on) {
        char text[TAG_TEXT_BYTES], software[64];
        const size_t list = n;
        memcpy(h + n, "LISTxxxxINFO", 12);
        n += 12;
        snprintf(software, sizeof software, "qvoice %s", qv_version());
        put_text_chunk(h, &n, "ISFT", software, 1);
        if (t->created[0]) put_text_chunk(h, &n, "ICRD", t->created, 1);
        char comment[TAG_TEXT_BYTES + 32];
        comment_text(t, comment);
        put_text_chunk(h, &n, "ICMT", comment, 1);
        put32(h + list + 4, (uint32_t)(n - list - 8));
        tags_text(t, "\n", text); /* at most ~470 bytes: room for the last newline */
        const size_t k = strlen(text);
        if (k + 1 < sizeof text) text[k] = '\n', text[k + 1] = 0;
        put_text_chunk(h, &n, "qvpr", text, 0);
    }
    const uint64_t head = n + 8;
    const int unknown = n_samples < 0 || (uint64_t)n_samples > (UINT32_MAX - head) / 2;
    const uint32_t data = unknown ? 0xFFFFFFFFu : (uint32_t)(n_samples * 2);
    put32(h + 4, unknown ? 0xFFFFFFFFu : (uint32_t)(head - 8 + data));
    memcpy(h + n, "data", 4);
    put32(h + n + 4, data);
    return n + 8;
}

/* ==== the ID3v2 tag of an AAC stream ========================================================== */

/* ID3v2.4 (id3.org/id3v2.4.0-structure) in front of the ADTS frames, as an MP3 carries it and
 * FFmpeg's ADTS reader skips and reads (ffprobe shows it): TSSE the software, TDRC the creation
 * time, COMM the comment with the key set. UTF-8 text (the key set is ASCII). */
#define AAC_BIT_RATE 96000 /* AAC-LC, mono speech at 24 kHz (and the other rates) */
#define ID3_MAX_BYTES (10 + (11 + 64) + (11 + 32) + (15 + TAG_TEXT_BYTES + 32)) /* TSSE TDRC COMM */

static void put_syncsafe(uint8_t *p, size_t v) { /* 7 bits per byte, big-endian */
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (7 * (3 - i)) & 0x7F);
}

/* A frame: id, size, no flags, then UTF-8 (3), the COMM's language and empty description, text. */
static void put_id3_frame(uint8_t *h, size_t *n, const char *id, const char *text) {
    const int comm = !strcmp(id, "COMM");
    const size_t len = strlen(text), size = 1 + (comm ? 4 : 0) + len;
    memcpy(h + *n, id, 4);
    put_syncsafe(h + *n + 4, size);
    h[*n + 8] = h[*n + 9] = 0;
    h[*n + 10] = 3;
    *n += 11;
    if (comm) memcpy(h + *n, "eng", 4), *n += 4; /* the language, then the description's NUL */
    memcpy(h + *n, text, len);
    *n += len;
}

static size_t id3_tag(uint8_t h[ID3_MAX_BYTES], const tags *t) {
    char software[64], comment[TAG_TEXT_BYTES + 32], date[32];
    size_t n = 10;
    snprintf(software, sizeof software, "qvoice %s", qv_version());
    put_id3_frame(h, &n, "TSSE", software);
    if (t->created[0]) { /* ID3's timestamps have no zone: UTC without the Z */
        snprintf(date, sizeof date, "%.19s", t->created);
        put_id3_frame(h, &n, "TDRC", date);
    }
    comment_text(t, comment);
    put_id3_frame(h, &n, "COMM", comment);
    memcpy(h, "ID3\x04\x00\x00", 6); /* version 2.4.0, no flags */
    put_syncsafe(h + 6, n - 10);
    return n;
}

/* ==== sample buffers ========================================================================= */

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

/* qv_write_fn appending to a membuf (aac.c's frames). */
static int mem_append(void *u, const void *p, size_t n) {
    membuf *b = u;
    const size_t at = b->len;
    if (mem_reserve(b, at + n)) return b->failed = 1, -1;
    memcpy(b->p + at, p, n);
    return 0;
}

/* An AAC file: the tag (unless raw), then the frames of pcm. */
static enum qv_status encode_aac(int hz, const float *pcm, int64_t n, const tags *t, membuf *b) {
    qva_aac *a;
    enum qv_status st = qva_aac_new(&a, AAC_BIT_RATE, hz);
    if (st) return st;
    uint8_t h[ID3_MAX_BYTES];
    if (t->on && mem_append(b, h, id3_tag(h, t)))
        st = qvu_fail(QV_E_NOMEM, "aac: out of memory");
    if (!st) st = qva_aac_write(a, pcm, n, mem_append, b);
    if (!st) st = qva_aac_finish(a, mem_append, b);
    qva_aac_free(a);
    return b->failed ? qvu_fail(QV_E_NOMEM, "aac: out of memory") : st;
}

/* libsndfile writes these as Vorbis comments (FLAC, Ogg Vorbis, Opus: SOFTWARE/ENCODER, DATE,
 * COMMENT) and ID3v2 frames (MP3: TYER from the date, COMM; lame sets its own TSSE). */
static void set_tags(SNDFILE *sf, const tags *t) {
    char comment[TAG_TEXT_BYTES + 32], software[64];
    comment_text(t, comment);
    snprintf(software, sizeof software, "qvoice %s", qv_version());
    sf_set_string(sf, SF_STR_SOFTWARE, software);
    if (t->created[0]) sf_set_string(sf, SF_STR_DATE, t->created);
    sf_set_string(sf, SF_STR_COMMENT, comment);
}

static enum qv_status encode_sndfile(int f, int hz, const float *pcm, int64_t n, const tags *t,
                                     membuf *b) {
    SF_VIRTUAL_IO io = {v_len, v_seek, v_read, v_write, v_tell};
    SF_INFO info = {.samplerate = hz, .channels = 1, .format = sf_formats[f]};
    SNDFILE *sf = sf_open_virtual(&io, SFM_WRITE, &info, b);
    if (!sf) return qvu_failf(QV_E_UNSUPPORTED, "%s: %s", names[f], sf_strerror(NULL));
    if (t->on) set_tags(sf, t);
    if (f == QV_FORMAT_MP3 || f == QV_FORMAT_OPUS) {
        int mode = SF_BITRATE_MODE_CONSTANT;
        sf_command(sf, SFC_SET_BITRATE_MODE, &mode, sizeof mode);
    }
    if (sf_levels[f] > 0.0) {
        double level = sf_levels[f];
        sf_command(sf, SFC_SET_COMPRESSION_LEVEL, &level, sizeof level);
    }
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

/* ==== another output rate =================================================================== */

/* libsamplerate's medium sinc (SNR ~ 121 dB, ~ 90 % of the band) from 24 kHz; its state carries
 * over from block to block, so a stream's output equals one call on the whole (tested). */
typedef struct {
    SRC_STATE *src; /* NULL: 24 kHz out, no resampling */
    double ratio;
    float *y; /* the last call's output */
    size_t cap;
} resampler;

static enum qv_status resampler_init(resampler *r, int hz) {
    memset(r, 0, sizeof *r);
    if (hz == QV_SAMPLE_RATE_HZ) return QV_OK;
    int err = 0;
    if (!(r->src = src_new(SRC_SINC_MEDIUM_QUALITY, 1, &err)))
        return qvu_failf(QV_E_NOMEM, "sample_rate %d: %s", hz, src_strerror(err));
    r->ratio = (double)hz / QV_SAMPLE_RATE_HZ;
    return QV_OK;
}

static void resampler_free(resampler *r) {
    if (r->src) src_delete(r->src);
    free(r->y);
    memset(r, 0, sizeof *r);
}

/* x[n] (final: the input ends, the converter's delay drained) resampled into r->y; the count
 * through *n_out. QV_E_NOMEM, QV_E_LIMIT. */
static enum qv_status resample(resampler *r, const float *x, int64_t n, int final, int64_t *n_out) {
    size_t got = 0;
    for (;;) {
        const size_t need = got + (size_t)((double)n * r->ratio) + 1024;
        if (need > r->cap) {
            if (need > SIZE_MAX / (2 * sizeof *r->y))
                return qvu_fail(QV_E_LIMIT, "resampling: too many samples");
            float *q = realloc(r->y, 2 * need * sizeof *q);
            if (!q) return qvu_failf(QV_E_NOMEM, "resampling %lld samples: out of memory",
                                     (long long)n);
            r->y = q, r->cap = 2 * need;
        }
        SRC_DATA d = {.data_in = x, .input_frames = (long)n, .data_out = r->y + got,
                      .output_frames = (long)(r->cap - got), .end_of_input = final,
                      .src_ratio = r->ratio};
        const int err = src_process(r->src, &d);
        if (err) return qvu_failf(QV_E_IO, "resampling: %s", src_strerror(err));
        x += d.input_frames_used, n -= d.input_frames_used, got += (size_t)d.output_frames_gen;
        if (n == 0 && (!final || d.output_frames_gen == 0)) break;
    }
    *n_out = (int64_t)got;
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

/* The final samples pcm[n] (marked, at hz) as a whole file of format with tags t, into b. */
static enum qv_status encode_final(int format, int hz, const float *pcm, int64_t n, const tags *t,
                                   membuf *b) {
    if (format == QV_FORMAT_AAC) return encode_aac(hz, pcm, n, t, b);
    if (!qv_format_progressive(format)) return encode_sndfile(format, hz, pcm, n, t, b);
    uint8_t h[WAV_HEADER_MAX_BYTES];
    const size_t head = format == QV_FORMAT_WAV ? wav_header(h, hz, n, t) : 0;
    if (mem_reserve(b, head + 2 * (size_t)n))
        return qvu_failf(QV_E_NOMEM, "%s: out of memory", names[format]);
    memcpy(b->p, h, head);
    qv_pcm_s16le(pcm, n, b->p + head);
    return QV_OK;
}

enum qv_status qv_audio_encode(int format, const float *pcm, int64_t n_samples,
                               const qv_provenance *prov, uint8_t **out, size_t *n_bytes) {
    return qv_audio_encode_at(format, QV_SAMPLE_RATE_HZ, pcm, n_samples, prov, out, n_bytes);
}

enum qv_status qv_audio_encode_at(int format, int hz, const float *pcm, int64_t n_samples,
                                  const qv_provenance *prov, uint8_t **out, size_t *n_bytes) {
    if (!out || !n_bytes) return qvu_fail(QV_E_INVALID, "qv_audio_encode: NULL argument");
    *out = NULL, *n_bytes = 0;
    if (!valid(format) || n_samples < 0 || (n_samples && !pcm))
        return qvu_failf(QV_E_INVALID, "format %d, %lld samples: invalid", format,
                         (long long)n_samples);
    enum qv_status st = qv_format_rate_check(format, hz);
    if (st) return st;
    /* at most twice as many samples out (48 kHz) */
    if ((uint64_t)n_samples > (SIZE_MAX - WAV_HEADER_MAX_BYTES) / 4)
        return qvu_failf(QV_E_LIMIT, "%lld samples: too many", (long long)n_samples);
    tags t;
    if ((st = tags_of(prov, &t))) return st;
    membuf b = {0};
    float *marked;
    if ((st = mark_copy(pcm, n_samples, t.mark, &marked))) return st;
    if (marked) pcm = marked;
    resampler r;
    if (!(st = resampler_init(&r, hz)) && r.src &&
        !(st = resample(&r, pcm, n_samples, 1, &n_samples)))
        pcm = r.y;
    if (!st) st = encode_final(format, hz, pcm, n_samples, &t, &b);
    resampler_free(&r);
    free(marked);
    if (st) return free(b.p), st;
    *out = b.p, *n_bytes = b.len;
    return QV_OK;
}

/* qv_audio_write_stream at hz, whose detail names the stream where_ ("stdout", a path). */
static enum qv_status write_stream(FILE *f, const char *where_, int format, int hz,
                                   const float *pcm, int64_t n_samples, const qv_provenance *prov) {
    uint8_t *buf;
    size_t n;
    enum qv_status st = qv_audio_encode_at(format, hz, pcm, n_samples, prov, &buf, &n);
    if (st) return st;
    if (fwrite(buf, 1, n, f) != n || fflush(f))
        st = qvu_failf(QV_E_IO, "%s: %s", where_, strerror(errno));
    free(buf);
    return st;
}

enum qv_status qv_audio_write_stream(FILE *f, int format, const float *pcm, int64_t n_samples,
                                     const qv_provenance *prov) {
    if (!f) return qvu_fail(QV_E_INVALID, "qv_audio_write_stream: NULL stream");
    return write_stream(f, f == stdout ? "stdout" : "stream", format, QV_SAMPLE_RATE_HZ, pcm,
                        n_samples, prov);
}

enum qv_status qv_audio_write(const char *path, int format, const float *pcm, int64_t n_samples,
                              const qv_provenance *prov) {
    return qv_audio_write_at(path, format, QV_SAMPLE_RATE_HZ, pcm, n_samples, prov);
}

enum qv_status qv_audio_write_at(const char *path, int format, int hz, const float *pcm,
                                 int64_t n_samples, const qv_provenance *prov) {
    qv_outfile *of;
    enum qv_status st = qv_outfile_open(&of, path);
    if (st) return st;
    FILE *f = qv_outfile_stream(of);
    if (!f)
        st = qvu_failf(QV_E_NOMEM, "%s: out of memory", path);
    else if ((st = write_stream(f, path, format, hz, pcm, n_samples, prov)) && st != QV_E_IO)
        qvu_failf(st, "%s: %s", path, qv_last_error()); /* the encoder's detail names the format */
    if (st) return qv_outfile_abort(of), st;
    return qv_outfile_commit(of);
}

/* ==== streams ================================================================================ */

struct qv_encoder {
    int format, hz; /* hz: the output rate */
    resampler rs;   /* to hz from 24 kHz */
    qv_write_fn fn; /* or: */
    void *user;
    FILE *file; /* seekable: the WAV header is rewritten after each block */
    int64_t n_samples; /* out */
    int64_t n_in;      /* given */
    int started;  /* the first block (a WAV's header) went out */
    tags tags;
    uint8_t *blk; /* one block: the header (first WAV block) and the samples */
    size_t cap;
    qva_aac *aac;       /* AAC: the codec */
    qv_watermark *mark; /* NULL: QV_WATERMARK_OFF */
    float *marked;      /* the marked samples a write releases */
    size_t marked_cap;
};

enum qv_status qv_encoder_new(qv_encoder **out, int format, const qv_provenance *prov,
                              qv_write_fn fn, void *user, FILE *file) {
    if (!out) return qvu_fail(QV_E_INVALID, "qv_encoder_new: NULL argument");
    *out = NULL;
    if (!valid(format) || !fn == !file)
        return qvu_fail(QV_E_INVALID, "encoder: a format and either a write function or a file");
    if (!qv_format_progressive(format))
        return qvu_failf(QV_E_UNSUPPORTED, "%s: progressive output is WAV, PCM or AAC only",
                         names[format]);
    tags t;
    enum qv_status st = tags_of(prov, &t);
    if (st) return st;
    qva_aac *aac = NULL;
    if (format == QV_FORMAT_AAC && (st = qva_aac_new(&aac, AAC_BIT_RATE, QV_SAMPLE_RATE_HZ)))
        return st;
    qv_encoder *e = calloc(1, sizeof *e);
    if (!e || (t.mark != QV_WATERMARK_OFF && qv_watermark_new(&e->mark, t.mark)))
        return free(e), qva_aac_free(aac), qvu_fail(QV_E_NOMEM, "encoder: out of memory");
    e->aac = aac;
    e->tags = t;
    e->format = format, e->hz = QV_SAMPLE_RATE_HZ, e->fn = fn, e->user = user, e->file = file;
    *out = e;
    return QV_OK;
}

enum qv_status qv_encoder_set_rate(qv_encoder *e, int hz) {
    if (!e) return qvu_fail(QV_E_INVALID, "qv_encoder_set_rate: NULL");
    if (e->n_in || e->started) /* samples taken, or a WAV header sent by an empty block */
        return qvu_fail(QV_E_INVALID, "sample_rate: set before the first block");
    enum qv_status st = qv_format_rate_check(e->format, hz);
    if (st || hz == e->hz) return st;
    qva_aac *aac = NULL;
    resampler rs;
    if (e->aac && (st = qva_aac_new(&aac, AAC_BIT_RATE, hz))) return st;
    if ((st = resampler_init(&rs, hz))) return qva_aac_free(aac), st;
    if (e->aac) qva_aac_free(e->aac), e->aac = aac;
    resampler_free(&e->rs);
    e->rs = rs, e->hz = hz;
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
    uint8_t h[WAV_HEADER_MAX_BYTES];
    const size_t n = wav_header(h, e->hz, e->n_samples, &e->tags);
    return fwrite(h, 1, n, e->file) != n || fseek(e->file, end, SEEK_SET) ? -1 : 0;
}

/* AAC: the frames n_samples complete (final: all of them, the encoder drained), after the tag in
 * the first block, to the sink in one call; nothing when no frame is ready. */
static enum qv_status aac_block(qv_encoder *e, const float *pcm, int n_samples, int final) {
    membuf b = {.p = e->blk, .cap = e->cap};
    uint8_t h[ID3_MAX_BYTES];
    enum qv_status st = QV_OK;
    if (!e->started && e->tags.on && mem_append(&b, h, id3_tag(h, &e->tags)))
        st = qvu_fail(QV_E_NOMEM, "aac block: out of memory");
    const size_t head = b.len;
    if (!st) st = qva_aac_write(e->aac, pcm, n_samples, mem_append, &b);
    if (!st && final) st = qva_aac_finish(e->aac, mem_append, &b);
    e->blk = b.p, e->cap = b.cap;
    if (b.failed) return qvu_fail(QV_E_NOMEM, "aac block: out of memory");
    if (st) return st;
    e->n_samples += n_samples;
    if (b.len == head && !final) return QV_OK; /* the tag waits for the first frame */
    if (emit(e, b.p, b.len)) return qvu_fail(QV_E_IO, "aac stream: write failed");
    e->started = 1;
    return e->file && fflush(e->file) ? qvu_failf(QV_E_IO, "aac file: %s", strerror(errno)) : QV_OK;
}

/* One block of final samples to the sink (the first WAV one with the header). */
static enum qv_status write_block(qv_encoder *e, const float *pcm, int n_samples) {
    if (e->aac) return aac_block(e, pcm, n_samples, 0);
    uint8_t h[WAV_HEADER_MAX_BYTES];
    const size_t head =
        e->format == QV_FORMAT_WAV && !e->started ? wav_header(h, e->hz, -1, &e->tags) : 0;
    const size_t need = head + 2 * (size_t)n_samples;
    if (need > e->cap) {
        uint8_t *q = realloc(e->blk, need);
        if (!q) return qvu_failf(QV_E_NOMEM, "%s block: out of memory", names[e->format]);
        e->blk = q, e->cap = need;
    }
    memcpy(e->blk, h, head);
    qv_pcm_s16le(pcm, n_samples, e->blk + head);
    if (emit(e, e->blk, need))
        return qvu_failf(QV_E_IO, "%s stream: write failed", names[e->format]);
    e->started = 1;
    e->n_samples += n_samples;
    if (update_header(e) || (e->file && fflush(e->file)))
        return qvu_failf(QV_E_IO, "%s file: %s", names[e->format], strerror(errno));
    return QV_OK;
}

/* Nothing to send yet: a WAV's header still goes out with the first call. */
static int nothing_yet(const qv_encoder *e, int64_t n_samples) {
    return n_samples == 0 && (e->started || e->format != QV_FORMAT_WAV);
}

/* Marked output goes out as the marker releases it: the first block at once, later ones whole
 * when complete, the held rest at close; then resampled as the converter releases it. The stream
 * equals the whole signal marked and resampled (qv_audio_encode_at). */
enum qv_status qv_encoder_write(qv_encoder *e, const float *pcm, int n_samples) {
    if (!e || n_samples < 0)
        return qvu_failf(QV_E_INVALID, "qv_encoder_write: %s", e ? "negative length" : "NULL");
    if (nothing_yet(e, n_samples)) return QV_OK;
    e->n_in += n_samples;
    if (e->mark && n_samples) {
        if (n_samples > INT_MAX - QV_WATERMARK_DELAY)
            return qvu_failf(QV_E_LIMIT, "%s block: %d samples: too many", names[e->format],
                             n_samples);
        const size_t need = (size_t)n_samples + QV_WATERMARK_DELAY;
        if (need > e->marked_cap) {
            float *q = realloc(e->marked, need * sizeof *q);
            if (!q) return qvu_failf(QV_E_NOMEM, "%s block: out of memory", names[e->format]);
            e->marked = q, e->marked_cap = need;
        }
        n_samples = (int)qv_watermark_apply(e->mark, pcm, n_samples, e->marked);
        pcm = e->marked;
        if (nothing_yet(e, n_samples)) return QV_OK;
    }
    if (e->rs.src && n_samples) {
        int64_t n;
        const enum qv_status st = resample(&e->rs, pcm, n_samples, 0, &n);
        if (st) return st;
        if (nothing_yet(e, n)) return QV_OK;
        pcm = e->rs.y, n_samples = (int)n;
    }
    return write_block(e, pcm, n_samples);
}

enum qv_status qv_encoder_close(qv_encoder *e) {
    if (!e) return QV_OK;
    enum qv_status st = QV_OK;
    float tail[QV_WATERMARK_DELAY];
    const float *last = tail;
    int64_t n = e->mark ? qv_watermark_flush(e->mark, tail) : 0; /* the held samples */
    if (e->rs.src && !(st = resample(&e->rs, tail, n, 1, &n))) last = e->rs.y;
    if (!st && e->aac)
        st = aac_block(e, last, (int)n, 1);
    else if (!st && (n || (e->format == QV_FORMAT_WAV && !e->started)))
        st = write_block(e, last, (int)n);
    qva_aac_free(e->aac);
    resampler_free(&e->rs);
    free(e->blk);
    free(e->marked);
    qv_watermark_free(e->mark);
    free(e);
    return st;
}
