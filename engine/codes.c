/* codes.c — the codes text format (speak --dump-codes / --decode-codes): one 80 ms frame per line,
 * its 16 codes as decimal integers in [0, 2048) separated by blanks; blank lines and lines
 * starting with # are skipped. Read whole through the library's one file reader, strictly (a
 * line with fewer or more codes, or anything else on it, is an error naming the line). Codes
 * decode to audio here too: a codes file's, and a voice file's ICL codes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/voice_load.h"
#include "include/qvoice.h"
#include "util/api.h"
#include "voicefmt/qvf.h"

#define MAX_FILE_BYTES ((size_t)1 << 30) /* 1 GiB: ~12 M frames, a day of audio */

enum qv_status qv_codes_write(FILE *f, const int32_t *codes, int n_frames) {
    for (int t = 0; t < n_frames; t++) {
        for (int i = 0; i < QV_N_CODEBOOKS; i++)
            if (fprintf(f, "%s%d", i ? " " : "", (int)codes[(size_t)t * QV_N_CODEBOOKS + i]) < 0)
                return qvu_fail(QV_E_IO, "codes: write failed");
        if (fputc('\n', f) == EOF) return qvu_fail(QV_E_IO, "codes: write failed");
    }
    return QV_OK;
}

static int blank(char c) {
    return c == ' ' || c == '\t' || c == '\r';
}

/* The 16 codes of the line [p, end) into out. 0, or -1. */
static int parse_frame(const char *p, const char *end, int32_t *out) {
    for (int g = 0; g < QV_N_CODEBOOKS; g++) {
        while (p < end && blank(*p))
            p++;
        if (p == end || *p < '0' || *p > '9') return -1;
        long v = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if ((v = v * 10 + (*p - '0')) >= QV_CODEBOOK_SIZE) return -1;
        if (p < end && !blank(*p)) return -1;
        out[g] = (int32_t)v;
    }
    while (p < end && blank(*p))
        p++;
    return p == end ? 0 : -1;
}

enum qv_status qv_codes_read(const char *path, int32_t **codes, int *n_frames) {
    *codes = NULL, *n_frames = 0;
    size_t n;
    char *text;
    enum qv_status st = qv_file_read(path, MAX_FILE_BYTES, &text, &n);
    if (st) return st;
    size_t cap = 0, nf = 0;
    int32_t *c = NULL;
    int line_no = 0;
    for (const char *p = text, *stop = text + n; p < stop && !st;) {
        const char *eol = memchr(p, '\n', (size_t)(stop - p));
        const char *end = eol ? eol : stop;
        line_no++;
        const char *q = p;
        while (q < end && blank(*q))
            q++;
        if (q < end && *q != '#') {
            if (nf == cap) {
                cap = cap ? 2 * cap : 256;
                int32_t *g = realloc(c, cap * QV_N_CODEBOOKS * sizeof *g); /* < 2^25 frames */
                if (!g) {
                    st = qvu_failf(QV_E_NOMEM, "%s: out of memory", path);
                    break;
                }
                c = g;
            }
            if (parse_frame(q, end, c + nf * QV_N_CODEBOOKS))
                st = qvu_failf(QV_E_INVALID, "%s:%d: expected %d codes in [0, %d)", path, line_no,
                               QV_N_CODEBOOKS, QV_CODEBOOK_SIZE);
            nf++;
        }
        p = eol ? eol + 1 : stop;
    }
    qv_free(text);
    if (!st && nf == 0) st = qvu_failf(QV_E_INVALID, "%s: no frames", path);
    if (st) return free(c), st;
    *codes = c, *n_frames = (int)nf;
    return QV_OK;
}

/* codes [n_frames][16] decoded into *pcm [*n_samples] (release with qv_free); label names them
 * in a detail. */
static enum qv_status decode(const qv_model *m, const int32_t *codes, int n_frames, int n_threads,
                             const char *label, float **pcm, int64_t *n_samples) {
    const int64_t n = (int64_t)n_frames * QV_SAMPLES_PER_FRAME;
    float *wav = malloc((size_t)n * sizeof *wav);
    if (!wav) return qvu_failf(QV_E_NOMEM, "%s: out of memory", label);
    enum qv_status st = qv_model_decode_codes(m, codes, n_frames, n_threads, wav);
    if (st) return free(wav), st;
    *pcm = wav, *n_samples = n;
    return QV_OK;
}

enum qv_status qv_codes_decode(const qv_model *m, const char *path, int n_threads, float **pcm,
                               int64_t *n_samples) {
    int32_t *codes;
    int n_frames;
    *pcm = NULL, *n_samples = 0;
    enum qv_status st = qv_codes_read(path, &codes, &n_frames);
    if (st) return st;
    st = decode(m, codes, n_frames, n_threads, path, pcm, n_samples);
    free(codes);
    return st;
}

/* A voice file's ICL codes are codes like any other: "what the file holds" (the studio's
 * reference player) is this decoder's output for them. */
enum qv_status qv_voice_reference_audio(const qv_voice *v, const qv_model *m, int n_threads,
                                        float **pcm, int64_t *n_samples) {
    *pcm = NULL, *n_samples = 0;
    if (!v || !m) return qvu_fail(QV_E_INVALID, "qv_voice_reference_audio: NULL argument");
    if (!v->codes) return qvu_failf(QV_E_VOICE, "%s: no ICL reference codes", v->path);
    return decode(m, v->codes, (int)v->f->n_frames, n_threads, v->path, pcm, n_samples);
}
