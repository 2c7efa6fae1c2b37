/* test_encode.c — audio out (features/encode.c, loudness.c) and the codes format (engine/codes.c):
 * the one float -> s16 conversion, the WAV header, whole files against streamed ones, every format
 * round-tripping through libsndfile, loudness targets, the codes text format's strict reader, the
 * one range check of the sampling parameters, and the one voice-lookup error text.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sndfile.h>

#include "include/qvoice.h"
#include "voicefmt/qvf.h"
#include "tests/unit/helpers/run.h"

/* n samples of a 220 Hz tone at amplitude a, with the ends pushed past full scale. */
static float *tone(int n, float a) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int i = 0; i < n; i++)
        x[i] = a * sinf(2.0f * (float)M_PI * 220.0f * (float)i / QV_SAMPLE_RATE_HZ);
    x[0] = 1.5f, x[1] = -1.5f, x[2] = 0.5f / 32767.0f, x[3] = -0.5f / 32767.0f;
    return x;
}

static void test_s16(void **st) {
    (void)st;
    const float x[] = {0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.25f, 1.5f / 32767.0f, -2.5f / 32767.0f};
    const int16_t want[] = {0, 32767, -32767, 32767, -32767, 8192, 2, -2}; /* round to nearest */
    uint8_t out[2 * 8];
    qv_pcm_s16le(x, 8, out);
    for (int i = 0; i < 8; i++)
        assert_int_equal((int16_t)(out[2 * i] | out[2 * i + 1] << 8), want[i]);
}

static void test_wav_header(void **st) {
    (void)st;
    uint8_t h[QV_WAV_HEADER_BYTES];
    qv_wav_header(h, 1000);
    assert_memory_equal(h, "RIFF", 4);
    assert_int_equal(h[4] | h[5] << 8, 36 + 2000);
    assert_memory_equal(h + 8, "WAVEfmt ", 8);
    assert_int_equal(h[24] | h[25] << 8 | h[26] << 16, 24000);
    assert_int_equal(h[40] | h[41] << 8, 2000);
    qv_wav_header(h, -1); /* a stream: unknown length */
    for (int i = 40; i < 44; i++)
        assert_int_equal(h[i], 0xFF);
}

static void test_formats(void **st) {
    (void)st;
    assert_int_equal(qv_format_parse("FLAC"), QV_FORMAT_FLAC);
    assert_int_equal(qv_format_parse("aiff"), -1);
    assert_int_equal(qv_format_of_path("a/b.c/out.wav"), QV_FORMAT_WAV);
    assert_int_equal(qv_format_of_path("dir.wav/out"), -1);
    assert_string_equal(qv_format_mime(QV_FORMAT_MP3), "audio/mpeg");
    assert_null(qv_format_name(QV_FORMAT_COUNT));
    assert_true(qv_format_progressive(QV_FORMAT_PCM) && !qv_format_progressive(QV_FORMAT_FLAC));
    assert_true(qv_format_writable(QV_FORMAT_WAV) && qv_format_writable(QV_FORMAT_FLAC));
}

typedef struct {
    uint8_t *p;
    size_t n;
} mem;

static int append(void *user, const void *p, size_t n) {
    mem *m = user;
    m->p = realloc(m->p, m->n + n);
    memcpy(m->p + m->n, p, n);
    m->n += n;
    return 0;
}

/* A WAV streamed in uneven blocks to a seekable file equals the one-shot file; to a function it
 * differs only in the header's unknown length. Both carry the default watermark: the samples are
 * the tone marked by qv_watermark_mark, and QV_WATERMARK_OFF gives the tone itself. */
static void test_stream_equals_whole(void **st) {
    (void)st;
    const int n = 24000;
    float *x = tone(n, 0.8f);
    uint8_t *whole;
    size_t n_whole;
    assert_int_equal(qv_audio_encode(QV_FORMAT_WAV, x, n, QV_WATERMARK_DEFAULT, &whole, &n_whole), 0);
    assert_int_equal(n_whole, 44 + 2 * (size_t)n);
    float *y = malloc((size_t)n * sizeof *y);
    uint8_t *s16 = malloc(2 * (size_t)n), *plain;
    size_t n_plain;
    memcpy(y, x, (size_t)n * sizeof *y);
    assert_int_equal(qv_watermark_mark(QV_WATERMARK_DEFAULT, y, n), 0);
    qv_pcm_s16le(y, n, s16);
    assert_memory_equal(whole + 44, s16, 2 * (size_t)n);
    assert_int_equal(qv_audio_encode(QV_FORMAT_WAV, x, n, QV_WATERMARK_OFF, &plain, &n_plain), 0);
    qv_pcm_s16le(x, n, s16);
    assert_memory_equal(plain + 44, s16, 2 * (size_t)n);
    assert_memory_not_equal(plain + 44, whole + 44, 2 * (size_t)n);
    qv_free(plain), free(s16), free(y);
    FILE *f = tmpfile();
    mem m = {0};
    qv_encoder *ef, *em;
    assert_int_equal(qv_encoder_new(&ef, QV_FORMAT_WAV, QV_WATERMARK_DEFAULT, NULL, NULL, f), 0);
    assert_int_equal(qv_encoder_new(&em, QV_FORMAT_WAV, QV_WATERMARK_DEFAULT, append, &m, NULL), 0);
    assert_int_equal(qv_encoder_write(ef, x, 0), 0); /* an empty block: still one header */
    assert_int_equal(qv_encoder_write(em, x, 0), 0);
    for (int i = 0, b = 1; i < n; i += b, b = b * 3 + 1) {
        const int k = i + b > n ? n - i : b;
        assert_int_equal(qv_encoder_write(ef, x + i, k), 0);
        assert_int_equal(qv_encoder_write(em, x + i, k), 0);
    }
    assert_int_equal(qv_encoder_close(ef), 0);
    assert_int_equal(qv_encoder_close(em), 0);
    uint8_t *back = malloc(n_whole + 1);
    rewind(f);
    assert_int_equal(fread(back, 1, n_whole + 1, f), n_whole);
    assert_memory_equal(back, whole, n_whole);
    assert_int_equal(m.n, n_whole);
    assert_memory_equal(m.p + 44, whole + 44, n_whole - 44);
    assert_int_equal(m.p[40], 0xFF);
    FILE *g = tmpfile(); /* no audio at all: a complete empty WAV */
    assert_int_equal(qv_encoder_new(&ef, QV_FORMAT_WAV, QV_WATERMARK_DEFAULT, NULL, NULL, g), 0);
    assert_int_equal(qv_encoder_close(ef), 0);
    assert_int_equal(ftell(g), 44);
    rewind(g);
    assert_int_equal(fread(back, 1, 44, g), 44);
    assert_int_equal(back[40] | back[41] | back[42] | back[43], 0);
    fclose(g);
    qv_encoder *bad;
    assert_int_equal(qv_encoder_new(&bad, QV_FORMAT_FLAC, QV_WATERMARK_OFF, append, &m, NULL),
                     QV_E_UNSUPPORTED);
    assert_non_null(strstr(qv_last_error(), "WAV or PCM"));
    fclose(f);
    free(back), free(m.p), qv_free(whole), free(x);
}

/* Every format this build writes reads back as 24 kHz mono of the same length; WAV and FLAC
 * (16-bit, lossless) give exactly the samples of qv_pcm_s16le. */
static void test_every_format(void **st) {
    (void)st;
    const int n = 12000;
    float *x = tone(n, 0.5f);
    uint8_t *s16 = malloc(2 * (size_t)n);
    qv_pcm_s16le(x, n, s16);
    char path[64];
    for (int f = 0; f < QV_FORMAT_COUNT; f++) {
        if (f == QV_FORMAT_PCM || !qv_format_writable(f)) continue;
        snprintf(path, sizeof path, "/tmp/qv_test_encode_%d.%s", (int)getpid(), qv_format_name(f));
        assert_int_equal(qv_audio_write(path, f, x, n, QV_WATERMARK_OFF), 0);
        SF_INFO info = {0};
        SNDFILE *sf = sf_open(path, SFM_READ, &info);
        assert_non_null(sf);
        printf("  %-4s %6lld frames at %d Hz\n", qv_format_name(f), (long long)info.frames,
               info.samplerate);
        assert_int_equal(info.samplerate, 24000);
        assert_int_equal(info.channels, 1);
        if (f == QV_FORMAT_WAV || f == QV_FORMAT_FLAC) {
            assert_int_equal(info.frames, n);
            short *y = malloc((size_t)n * sizeof *y);
            assert_int_equal(sf_readf_short(sf, y, n), n);
            for (int i = 0; i < n; i++)
                assert_int_equal(y[i], (int16_t)(s16[2 * i] | s16[2 * i + 1] << 8));
            free(y);
        }
        sf_close(sf);
        unlink(path);
    }
    assert_int_equal(qv_audio_write("/nonexistent-dir/x.wav", QV_FORMAT_WAV, x, n, QV_WATERMARK_OFF),
                     QV_E_IO);
    /* marked FLAC/Ogg/Opus/MP3 name their origin in the container; unmarked ones do not */
    for (int f = QV_FORMAT_FLAC; f < QV_FORMAT_COUNT; f++) {
        if (!qv_format_writable(f)) continue;
        for (int marked = 0; marked < 2; marked++) {
            snprintf(path, sizeof path, "/tmp/qv_test_encode_%d.%s", (int)getpid(), qv_format_name(f));
            assert_int_equal(qv_audio_write(path, f, x, n, marked ? 0x8abcdef1u : QV_WATERMARK_OFF), 0);
            SF_INFO info = {0};
            SNDFILE *sf = sf_open(path, SFM_READ, &info);
            assert_non_null(sf);
            const char *c = sf_get_string(sf, SF_STR_COMMENT);
            if (marked) {
                printf("  %-4s comment: %s\n", qv_format_name(f), c ? c : "(none)");
                assert_non_null(c);
                assert_non_null(strstr(c, "digitalsourcetype/trainedAlgorithmicMedia"));
                assert_non_null(strstr(c, "watermark=8abcdef1"));
            } else {
                assert_true(!c || !strstr(c, "trainedAlgorithmicMedia"));
            }
            sf_close(sf);
            unlink(path);
        }
    }
    assert_non_null(strstr(qv_last_error(), "/nonexistent-dir"));
    free(s16), free(x);
}

static void test_loudness(void **st) {
    (void)st;
    const int n = 48000;
    float *x = tone(n, 0.1f);
    int64_t clipped;
    double lufs, before;
    assert_int_equal(qv_loudness_normalize(x, n, 0, &clipped, &before), 0);
    assert_int_equal(qv_loudness_normalize(x, n, -20, &clipped, &lufs), 0);
    printf("  tone: %.2f LUFS -> %.2f LUFS (target -20), %lld clipped\n", before, lufs,
           (long long)clipped);
    assert_true(fabs(lufs + 20) < 0.5);
    assert_int_equal(clipped, 2); /* the two samples past full scale */
    assert_int_equal(qv_loudness_normalize(x, n, 3, &clipped, &lufs), QV_E_INVALID);
    float silence[24000] = {0};
    assert_int_equal(qv_loudness_normalize(silence, 24000, -20, &clipped, &lufs), QV_E_AUDIO);
    assert_non_null(strstr(qv_last_error(), "nothing to measure"));
    free(x);
}

static const char *write_text(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/qv_test_codes_%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_codes(void **st) {
    (void)st;
    int32_t c[2 * QV_N_CODEBOOKS];
    for (int i = 0; i < 2 * QV_N_CODEBOOKS; i++)
        c[i] = (i * 131) % 2048;
    char path[64];
    snprintf(path, sizeof path, "/tmp/qv_test_codes_%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs("# a comment\n\n", f);
    assert_int_equal(qv_codes_write(f, c, 2), 0);
    fclose(f);
    int32_t *back;
    int n;
    assert_int_equal(qv_codes_read(path, &back, &n), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(back, c, sizeof c);
    qv_free(back);
    static const char *const bad[] = {
        "1 2 3\n",                                              /* too few */
        "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",                  /* too many */
        "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 2048\n",                 /* out of range */
        "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 -1\n",                   /* negative */
        "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 7x\n",                   /* not a number */
        "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 99999999999999999999\n", /* overflow */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(qv_codes_read(write_text(bad[i]), &back, &n), QV_E_INVALID);
        assert_non_null(strstr(qv_last_error(), ":1: expected 16 codes"));
    }
    assert_int_equal(qv_codes_read(write_text("# nothing\n"), &back, &n), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "no frames"));
    unlink(path);
}

static void test_params_check(void **st) {
    (void)st;
    qv_params p = qv_default_params();
    assert_int_equal(qv_params_check(&p), 0);
    p.temperature = 10.5f;
    assert_int_equal(qv_params_check(&p), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "temperature: expected 0.001..10"));
    p = qv_default_params(), p.repetition_penalty = 0.05f;
    assert_int_equal(qv_params_check(&p), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "repetition_penalty"));
    p = qv_default_params(), p.top_k = QV_TOP_K_MAX + 1;
    assert_int_equal(qv_params_check(&p), QV_E_INVALID);
    p = qv_default_params(), p.top_p = 0;
    assert_int_equal(qv_params_check(&p), QV_E_INVALID);
    p = qv_default_params(), p.do_sample = 0, p.temperature = 0; /* greedy: no temperature */
    assert_int_equal(qv_params_check(&p), 0);
    p.struct_size--; /* built against another qvoice.h */
    assert_int_equal(qv_params_check(&p), QV_E_ABI);
    assert_non_null(strstr(qv_last_error(), "qv_params.struct_size"));
}

/* One parser of $QVOICE_PATH (empty entries skipped) and one text naming every place looked at. */
static void test_voice_lookup(void **st) {
    (void)st;
    char dir[64], path[256], err[512];
    setenv("QVOICE_PATH", "/qv/a::/qv/b:", 1);
    assert_int_equal(qvf_voice_dir(0, dir, sizeof dir), 0);
    assert_string_equal(dir, "voices");
    assert_int_equal(qvf_voice_dir(1, dir, sizeof dir), 0);
    assert_string_equal(dir, "/qv/a");
    assert_int_equal(qvf_voice_dir(2, dir, sizeof dir), 0);
    assert_string_equal(dir, "/qv/b");
    assert_int_equal(qvf_voice_dir(3, dir, sizeof dir), -1);
    assert_int_equal(qvf_voice_find("nosuch", path, sizeof path, err, sizeof err), QVF_E_IO);
    assert_string_equal(err, "voice 'nosuch' not found; looked for voices/nosuch.qvoice and, from "
                             "$QVOICE_PATH, /qv/a/nosuch.qvoice, /qv/b/nosuch.qvoice");
    qv_voice *v;
    assert_int_equal(qv_voice_open(&v, "nosuch"), QV_E_VOICE);
    assert_non_null(strstr(qv_last_error(), "/qv/b/nosuch.qvoice"));
    unsetenv("QVOICE_PATH");
    assert_int_equal(qvf_voice_find("nosuch", path, sizeof path, err, sizeof err), QVF_E_IO);
    assert_non_null(strstr(err, "($QVOICE_PATH is not set)"));
}

QVT_MAIN(NULL, NULL, test_s16, test_wav_header, test_formats, test_stream_equals_whole,
         test_every_format, test_loudness, test_codes, test_params_check, test_voice_lookup)
