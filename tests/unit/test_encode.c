/* test_encode.c — audio out (features/encode.c, loudness.c) and the codes format (engine/codes.c):
 * the one float -> s16 conversion, the WAV header, whole files against streamed ones, every format
 * round-tripping through libsndfile, other output rates (resampled, streamed == whole), loudness
 * targets, the codes text format's strict reader, the
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <samplerate.h>
#include <sndfile.h>

#include "include/qvoice.h"
#include "voicefmt/qvf.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/wav.h"

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

/* A fixed provenance: a voice, a model, 2023-11-14T22:13:20Z. */
static qv_provenance fixed_provenance(void) {
    qv_provenance p = qv_provenance_default();
    snprintf(p.voice_id, sizeof p.voice_id, "%s", "speaker:ryan");
    snprintf(p.model_fingerprint, sizeof p.model_fingerprint, "%064d", 7);
    p.utc = 1700000000;
    return p;
}

#define QVPR_TEXT                                                                                  \
    "digital_source_type=http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia\n" \
    "engine=qvoice %s\nmodel_fingerprint=%064d\nvoice_id=speaker:ryan\nwatermark=%08x\n"           \
    "created=2023-11-14T22:13:20Z\n"

/* The WAV layout: RIFF, fmt, LIST/INFO (ISFT, ICRD, ICMT), qvpr, data, read by the tests' own
 * RIFF walk; without provenance the plain 44-byte header. */
static void test_wav_header(void **st) {
    (void)st;
    float x[1000] = {0};
    const qv_provenance p = fixed_provenance();
    uint8_t *w;
    size_t n;
    uint32_t data, len;
    assert_int_equal(qv_audio_encode(QV_FORMAT_WAV, x, 1000, &p, &w, &n), 0);
    const long at = wav_data_offset(w, n, &data);
    printf("  tagged WAV header: %ld bytes\n", at);
    assert_int_equal(data, 2000);
    assert_int_equal(at + 2000, n);
    assert_int_equal(w[4] | w[5] << 8, n - 8); /* RIFF size */
    assert_int_equal(w[24] | w[25] << 8 | w[26] << 16, 24000);
    const uint8_t *list = wav_chunk(w, n, "LIST", &len);
    assert_non_null(list);
    assert_memory_equal(list, "INFOISFT", 8);
    char want[1024];
    snprintf(want, sizeof want, QVPR_TEXT, qv_version(), 7,
             qv_watermark_payload("speaker:ryan", p.model_fingerprint));
    const uint8_t *pr = wav_chunk(w, n, "qvpr", &len);
    assert_non_null(pr);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(pr, want, len);
    qv_free(w);
    assert_int_equal(qv_audio_encode(QV_FORMAT_WAV, x, 1000, NULL, &w, &n), 0);
    assert_int_equal(n, 44 + 2000);
    assert_int_equal(wav_data_offset(w, n, &data), 44);
    assert_null(wav_chunk(w, n, "LIST", &len));
    qv_free(w);
    char text[QV_PROVENANCE_TEXT_BYTES]; /* the same key set on one line, for HTTP headers */
    assert_int_equal(qv_provenance_text(&p, text), 0);
    assert_non_null(strstr(text, "; voice_id=speaker:ryan; watermark="));
    assert_int_equal(qv_provenance_text(NULL, text), QV_E_INVALID);
    assert_int_equal(qv_provenance_read("/nonexistent.wav", text), QV_E_AUDIO);
    assert_non_null(strstr(qv_last_error(), "/nonexistent.wav"));
    qv_provenance bad = p;
    bad.struct_size--;
    assert_int_equal(qv_audio_encode(QV_FORMAT_WAV, x, 1000, &bad, &w, &n), QV_E_ABI);
    /* hostile ids: cut, and nothing but printable ASCII reaches the tags */
    memset(bad.voice_id, 'a', sizeof bad.voice_id); /* no NUL */
    bad.struct_size = sizeof bad;
    bad.model_fingerprint[0] = '\n', bad.model_fingerprint[1] = ';', bad.model_fingerprint[2] = 0;
    assert_int_equal(qv_audio_encode(QV_FORMAT_WAV, x, 1000, &bad, &w, &n), 0);
    pr = wav_chunk(w, n, "qvpr", &len);
    assert_non_null(pr);
    assert_non_null(memmem(pr, len, "model_fingerprint=??\n", 21));
    char cut[160];
    snprintf(cut, sizeof cut, "voice_id=%.*s\n", QV_PROVENANCE_MAX_ID,
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    assert_non_null(memmem(pr, len, cut, strlen(cut)));
    qv_free(w);
}

/* SOURCE_DATE_EPOCH fixes the time (reproducible output); without it the time is now. */
static void test_provenance_time(void **st) {
    (void)st;
    char *was = getenv("SOURCE_DATE_EPOCH") ? strdup(getenv("SOURCE_DATE_EPOCH")) : NULL;
    setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
    assert_int_equal(qv_provenance_default().utc, 1700000000);
    setenv("SOURCE_DATE_EPOCH", "soon", 1);
    assert_true(llabs(qv_provenance_default().utc - (int64_t)time(NULL)) < 5);
    unsetenv("SOURCE_DATE_EPOCH");
    const qv_provenance p = qv_provenance_default();
    assert_true(p.watermark == 1 && !p.voice_id[0] && !p.model_fingerprint[0]);
    if (was) setenv("SOURCE_DATE_EPOCH", was, 1);
    free(was);
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
    assert_int_equal(qv_format_of_path("x.AAC"), QV_FORMAT_AAC);
    assert_string_equal(qv_format_mime(QV_FORMAT_AAC), "audio/aac");
    assert_true(qv_format_progressive(QV_FORMAT_AAC));
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

/* x[n] through two encoders in the same uneven blocks (1, 4, 13, 40... samples), then closed. */
static void stream_both(qv_encoder *ef, qv_encoder *em, const float *x, int n) {
    for (int i = 0, b = 1; i < n; i += b, b = b * 3 + 1) {
        const int k = i + b > n ? n - i : b;
        assert_int_equal(qv_encoder_write(ef, x + i, k), 0);
        assert_int_equal(qv_encoder_write(em, x + i, k), 0);
    }
    assert_int_equal(qv_encoder_close(ef), 0);
    assert_int_equal(qv_encoder_close(em), 0);
}

/* x[n] streamed as format at hz (after an empty block) to a seekable file and to a function, in
 * stream_both's blocks: the file is whole[n_whole] byte for byte, the function's bytes as long and
 * the same from byte head on (a WAV's header has the unknown length). Returns the latter. */
static mem stream_check(int format, int hz, const qv_provenance *prov, const float *x, int n,
                        const uint8_t *whole, size_t n_whole, size_t head) {
    FILE *f = tmpfile();
    mem m = {0};
    qv_encoder *ef, *em;
    assert_int_equal(qv_encoder_new(&ef, format, prov, NULL, NULL, f), 0);
    assert_int_equal(qv_encoder_new(&em, format, prov, append, &m, NULL), 0);
    assert_int_equal(qv_encoder_set_rate(ef, hz), 0);
    assert_int_equal(qv_encoder_set_rate(em, hz), 0);
    assert_int_equal(qv_encoder_write(ef, x, 0), 0); /* an empty block: still one header */
    assert_int_equal(qv_encoder_write(em, x, 0), 0);
    stream_both(ef, em, x, n);
    uint8_t *back = malloc(n_whole + 1);
    rewind(f);
    assert_int_equal(fread(back, 1, n_whole + 1, f), n_whole);
    assert_memory_equal(back, whole, n_whole);
    assert_int_equal(m.n, n_whole);
    assert_memory_equal(m.p + head, whole + head, n_whole - head);
    fclose(f);
    free(back);
    return m;
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
    const qv_provenance prov = fixed_provenance();
    assert_int_equal(qv_audio_encode(QV_FORMAT_WAV, x, n, &prov, &whole, &n_whole), 0);
    uint32_t data;
    const long h = wav_data_offset(whole, n_whole, &data);
    assert_int_equal(n_whole, (size_t)h + 2 * (size_t)n);
    float *y = malloc((size_t)n * sizeof *y);
    uint8_t *s16 = malloc(2 * (size_t)n), *plain;
    size_t n_plain;
    memcpy(y, x, (size_t)n * sizeof *y);
    assert_int_equal(
        qv_watermark_mark(qv_watermark_payload(prov.voice_id, prov.model_fingerprint), y, n), 0);
    qv_pcm_s16le(y, n, s16);
    assert_memory_equal(whole + h, s16, 2 * (size_t)n);
    qv_provenance off = prov; /* tags only */
    off.watermark = 0;
    assert_int_equal(qv_audio_encode(QV_FORMAT_WAV, x, n, &off, &plain, &n_plain), 0);
    const long hp = wav_data_offset(plain, n_plain, &data);
    assert_int_equal(n_plain, (size_t)hp + 2 * (size_t)n);
    qv_pcm_s16le(x, n, s16);
    assert_memory_equal(plain + hp, s16, 2 * (size_t)n);
    assert_memory_not_equal(plain + hp, whole + h, 2 * (size_t)n);
    uint32_t len;
    const uint8_t *pr = wav_chunk(plain, n_plain, "qvpr", &len);
    assert_non_null(pr);
    assert_non_null(memmem(pr, len, "watermark=off\n", 14));
    qv_free(plain), free(s16), free(y);
    mem m = stream_check(QV_FORMAT_WAV, QV_SAMPLE_RATE_HZ, &prov, x, n, whole, n_whole, (size_t)h);
    assert_memory_equal(m.p + 8, whole + 8, (size_t)h - 12); /* all but the lengths */
    assert_int_equal(m.p[h - 4] & m.p[h - 3] & m.p[h - 2] & m.p[h - 1], 0xFF);
    uint8_t *back = malloc(n_whole + 1);
    qv_encoder *ef;
    FILE *g = tmpfile(); /* no audio at all: a complete empty WAV */
    assert_int_equal(qv_encoder_new(&ef, QV_FORMAT_WAV, &prov, NULL, NULL, g), 0);
    assert_int_equal(qv_encoder_close(ef), 0);
    assert_int_equal(ftell(g), h);
    rewind(g);
    assert_int_equal(fread(back, 1, (size_t)h, g), (size_t)h);
    assert_int_equal(wav_data_offset(back, (size_t)h, &data), h);
    assert_int_equal(data, 0);
    fclose(g);
    qv_encoder *bad;
    assert_int_equal(qv_encoder_new(&bad, QV_FORMAT_FLAC, NULL, append, &m, NULL),
                     QV_E_UNSUPPORTED);
    assert_non_null(strstr(qv_last_error(), "WAV, PCM or AAC"));
    free(back), free(m.p), qv_free(whole), free(x);
}

/* Every format this build writes with libsndfile reads back as 24 kHz mono of the same length; WAV and FLAC
 * (16-bit, lossless) give exactly the samples of qv_pcm_s16le. */
static void test_every_format(void **st) {
    (void)st;
    const int n = 12000;
    float *x = tone(n, 0.5f);
    uint8_t *s16 = malloc(2 * (size_t)n);
    qv_pcm_s16le(x, n, s16);
    char path[64];
    for (int f = 0; f < QV_FORMAT_COUNT; f++) {
        if (f == QV_FORMAT_PCM || f == QV_FORMAT_AAC || !qv_format_writable(f)) continue;
        snprintf(path, sizeof path, "/tmp/qv_test_encode_%d.%s", (int)getpid(), qv_format_name(f));
        assert_int_equal(qv_audio_write(path, f, x, n, NULL), 0);
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
    assert_int_equal(qv_audio_write("/nonexistent-dir/x.wav", QV_FORMAT_WAV, x, n, NULL), QV_E_IO);
    assert_non_null(strstr(qv_last_error(), "/nonexistent-dir"));
    free(s16), free(x);
}

/* sample_rate: the marked 24 kHz samples resampled on the way out. Each format takes its rates
 * (opus and mp3/aac a fixed set, refused naming sample_rate and the values); a 16 kHz WAV streamed
 * in uneven blocks equals the whole file, lasts as long as the 24 kHz one, and resampled back to
 * 24 kHz (SRC_SINC_BEST) matches the marked samples; every writable format reads back at the rate. */
static void test_sample_rate(void **st) {
    (void)st;
    assert_int_equal(qv_format_rate_check(QV_FORMAT_OPUS, 44100), QV_E_INVALID);
    assert_string_equal(qv_last_error(),
                        "sample_rate 44100: opus takes 8000, 12000, 16000, 24000, 48000");
    assert_int_equal(qv_format_rate_check(QV_FORMAT_MP3, 37000), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "mp3 takes 8000, 11025, 12000"));
    assert_int_equal(qv_format_rate_check(QV_FORMAT_WAV, 7999), QV_E_INVALID);
    assert_string_equal(qv_last_error(), "sample_rate 7999: expected 8000 to 48000");
    assert_int_equal(qv_format_rate_check(QV_FORMAT_WAV, 48001), QV_E_INVALID);
    assert_int_equal(qv_format_rate_check(QV_FORMAT_WAV, 37000), QV_OK);
    assert_int_equal(qv_format_rate_check(QV_FORMAT_AAC, 44100), QV_OK);
    const int n = 24000 + 777, hz = 16000;
    float *x = malloc((size_t)n * sizeof *x);
    for (int i = 0; i < n; i++)
        x[i] = 0.3f * sinf(2.0f * (float)M_PI * 220.0f * (float)i / QV_SAMPLE_RATE_HZ) +
               0.2f * sinf(2.0f * (float)M_PI * 3000.0f * (float)i / QV_SAMPLE_RATE_HZ);
    const qv_provenance prov = fixed_provenance();
    uint8_t *whole, *marked;
    size_t n_whole, n_marked;
    assert_int_equal(qv_audio_encode_at(QV_FORMAT_OPUS, 44100, x, n, &prov, &whole, &n_whole),
                     QV_E_INVALID);
    assert_int_equal(qv_audio_encode_at(QV_FORMAT_WAV, hz, x, n, &prov, &whole, &n_whole), 0);
    assert_int_equal(qv_audio_encode(QV_FORMAT_PCM, x, n, &prov, &marked, &n_marked), 0);
    uint32_t data;
    const long h = wav_data_offset(whole, n_whole, &data);
    assert_int_equal(whole[24] | whole[25] << 8 | whole[26] << 16, hz); /* fmt: rate */
    assert_int_equal(whole[28] | whole[29] << 8 | whole[30] << 16, 2 * hz); /* bytes/s */
    const long m = (long)data / 2, want = lround((double)n * hz / QV_SAMPLE_RATE_HZ);
    printf("  16 kHz: %ld samples for %d at 24 kHz (%ld expected)\n", m, n, want);
    assert_true(labs(m - want) <= 2); /* the same duration, well within a frame */
    /* back to 24 kHz: close to the marked samples (the 3 kHz tone is inside both bands) */
    float *y = malloc((size_t)m * sizeof *y), *z = malloc((size_t)n * sizeof *z);
    for (long i = 0; i < m; i++)
        y[i] = (int16_t)(whole[h + 2 * i] | whole[h + 2 * i + 1] << 8) / 32767.0f;
    SRC_DATA d = {.data_in = y, .input_frames = m, .data_out = z, .output_frames = n,
                  .src_ratio = (double)QV_SAMPLE_RATE_HZ / hz};
    assert_int_equal(src_simple(&d, SRC_SINC_BEST_QUALITY, 1), 0);
    double sig = 0, err = 0;
    for (long i = 200; i < d.output_frames_gen - 200; i++) { /* the edges ring */
        const double a = (int16_t)(marked[2 * i] | marked[2 * i + 1] << 8) / 32767.0;
        sig += a * a, err += (z[i] - a) * (z[i] - a);
    }
    const double snr = 10 * log10(sig / err);
    printf("  16 kHz and back: SNR %.1f dB against the marked 24 kHz samples\n", snr);
    assert_true(snr > 40);
    /* streamed in uneven blocks: the same samples; WAV and AAC */
    for (int f = QV_FORMAT_WAV; f < QV_FORMAT_COUNT; f++) {
        if (!qv_format_progressive(f) || !qv_format_writable(f)) continue;
        uint8_t *one;
        size_t n_one;
        assert_int_equal(qv_audio_encode_at(f, hz, x, n, &prov, &one, &n_one), 0);
        mem s = stream_check(f, hz, &prov, x, n, one, n_one, f == QV_FORMAT_WAV ? (size_t)h : 0);
        if (f == QV_FORMAT_AAC) { /* ADTS: sampling frequency index 8 (16 kHz) */
            const size_t tag = 10 + (size_t)(one[6] << 21 | one[7] << 14 | one[8] << 7 | one[9]);
            assert_int_equal(one[tag + 2] >> 2 & 0xF, 8);
        }
        printf("  %s at 16 kHz: streamed == whole (%zu bytes)\n", qv_format_name(f), n_one);
        free(s.p), qv_free(one);
    }
    qv_encoder *late;
    mem lm = {0};
    assert_int_equal(qv_encoder_new(&late, QV_FORMAT_PCM, &prov, append, &lm, NULL), 0);
    assert_int_equal(qv_encoder_set_rate(late, 44100), 0);
    assert_int_equal(qv_encoder_write(late, x, 10), 0);
    assert_int_equal(qv_encoder_set_rate(late, 16000), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "before the first block"));
    assert_int_equal(qv_encoder_close(late), 0);
    assert_true(lm.n > 0 && lm.n < 2 * 30); /* 10 samples at 44.1 kHz, the converter drained */
    lm.n = 0;
    assert_int_equal(qv_encoder_new(&late, QV_FORMAT_WAV, &prov, append, &lm, NULL), 0);
    assert_int_equal(qv_encoder_write(late, x, 0), 0); /* the header went out, at 24 kHz */
    assert_int_equal(qv_encoder_set_rate(late, 16000), QV_E_INVALID);
    assert_int_equal(qv_encoder_close(late), 0);
    free(lm.p);
    /* every format this build writes reads back at the rate it was asked for */
    char path[64];
    for (int f = 0; f < QV_FORMAT_COUNT; f++) {
        if (f == QV_FORMAT_PCM || f == QV_FORMAT_AAC || !qv_format_writable(f)) continue;
        const int rates[] = {8000, 16000, 37000, 44100, 48000};
        for (int r = 0; r < 5; r++) {
            if (qv_format_rate_check(f, rates[r])) continue;
            uint8_t *b;
            size_t nb;
            assert_int_equal(qv_audio_encode_at(f, rates[r], x, n, &prov, &b, &nb), 0);
            snprintf(path, sizeof path, "/tmp/qv_test_rate_%d.%s", (int)getpid(), qv_format_name(f));
            FILE *o = fopen(path, "wb");
            assert_int_equal(fwrite(b, 1, nb, o), nb);
            fclose(o);
            SF_INFO info = {0};
            SNDFILE *sf = sf_open(path, SFM_READ, &info);
            assert_non_null(sf);
            printf("  %-4s %6lld frames at %d Hz\n", qv_format_name(f), (long long)info.frames,
                   info.samplerate);
            assert_int_equal(info.samplerate, rates[r]);
            sf_close(sf);
            unlink(path);
            qv_free(b);
        }
    }
    free(y), free(z), qv_free(marked), qv_free(whole), free(x);
}

/* Every container libsndfile reads carries the key set, read back by an independent reader:
 * exiftool (RIFF INFO, Vorbis comments, ID3v2) and the tests' own RIFF walk for the qvpr chunk;
 * raw output has none. AAC's tag: test_aac. */
static void test_provenance_tags(void **st) {
    (void)st;
    if (sh("exiftool -ver >/dev/null 2>&1")) {
        printf("  exiftool missing (make deps): skipped\n");
        skip();
    }
    const int n = 24000;
    float *x = tone(n, 0.5f);
    const qv_provenance p = fixed_provenance();
    char path[64], line[160];
    snprintf(line, sizeof line, "watermark=%08x",
             qv_watermark_payload("speaker:ryan", p.model_fingerprint));
    for (int f = 0; f < QV_FORMAT_COUNT; f++) {
        if (f == QV_FORMAT_PCM || f == QV_FORMAT_AAC || !qv_format_writable(f)) continue;
        for (int tagged = 0; tagged < 2; tagged++) {
            snprintf(path, sizeof path, "/tmp/qv_test_tags_%d.%s", (int)getpid(), qv_format_name(f));
            assert_int_equal(qv_audio_write(path, f, x, n, tagged ? &p : NULL), 0);
            /* every tag, one "Name: value" line each */
            const int rc = sh("exiftool -S -Comment -Software -Encoder -DateCreated -Date -Year "
                              "-CreateDate %s > %s.tags", path, path);
            assert_int_equal(rc, 0);
            char tags[128];
            snprintf(tags, sizeof tags, "%s.tags", path);
            sh("sed 's/^/    /' %s", tags);
            const char *const want[] = {"digitalsourcetype/trainedAlgorithmicMedia",
                                        "engine=qvoice", "voice_id=speaker:ryan",
                                        "model_fingerprint=0000000000000000", line,
                                        "created=2023-11-14T22:13:20Z"};
            for (size_t i = 0; i < sizeof want / sizeof *want; i++)
                if (file_has(tags, want[i]) != tagged)
                    fail_msg("%s: %s %s", path, want[i], tagged ? "missing" : "present untagged");
            assert_int_equal(file_has(tags, "2023"), tagged); /* the date field of the format */
            char back[QV_PROVENANCE_TEXT_BYTES], want_text[QV_PROVENANCE_TEXT_BYTES];
            assert_int_equal(qv_provenance_read(path, back), 0); /* the library's own reader */
            assert_int_equal(qv_provenance_text(&p, want_text), 0);
            assert_string_equal(back, tagged ? want_text : "");
            unlink(tags), unlink(path);
        }
    }
    free(x);
}

/* The samples of a 16-bit raw file (ffmpeg's decode) in *out; their count. */
static long read_s16(const char *path, int16_t **out) {
    const long n = file_bytes(path) / 2;
    FILE *f = fopen(path, "rb");
    *out = malloc((size_t)(n > 0 ? n : 1) * sizeof **out);
    assert_true(f && n > 0 && fread(*out, 2, (size_t)n, f) == (size_t)n);
    fclose(f);
    return n;
}

/* AAC (features/aac.c, libavcodec loaded at run time): the file is an ID3v2.4 tag then ADTS
 * frames; ffprobe reads it as 24 kHz mono AAC-LC with the provenance comment; ffmpeg decodes it
 * to the marked samples after ADTS's 1024-sample priming delay, at an SNR above 20 dB on a tone
 * with clipped clicks (the codec at 96 kbit/s; measured 24.6 dB); a stream in uneven blocks, to a
 * function or a file, is
 * the whole file byte for byte; a library that cannot be loaded is refused naming the package. */
static void test_aac(void **st) {
    (void)st;
    if (!qv_format_writable(QV_FORMAT_AAC)) /* make deps installs it; say why, then fail */
        fail_msg("aac: %s", qv_last_error());
    if (sh("ffmpeg -version >/dev/null 2>&1 && ffprobe -version >/dev/null 2>&1")) {
        printf("  ffmpeg missing (make deps): skipped\n");
        skip();
    }
    const int n = 2 * 24000 + 333;
    float *x = tone(n, 0.5f);
    const qv_provenance prov = fixed_provenance();
    uint8_t *whole, *marked;
    size_t n_whole, n_marked;
    assert_int_equal(qv_audio_encode(QV_FORMAT_AAC, x, n, &prov, &whole, &n_whole), 0);
    assert_int_equal(qv_audio_encode(QV_FORMAT_PCM, x, n, &prov, &marked, &n_marked), 0);
    assert_memory_equal(whole, "ID3\x04\x00\x00", 6);
    const size_t tag = 10 + (size_t)(whole[6] << 21 | whole[7] << 14 | whole[8] << 7 | whole[9]);
    assert_true(tag < n_whole && whole[tag] == 0xFF && whole[tag + 1] == 0xF1); /* ADTS */
    char path[64], cmd[160];
    snprintf(path, sizeof path, "/tmp/qv_test_aac_%d.aac", (int)getpid());
    assert_int_equal(qv_audio_write(path, QV_FORMAT_AAC, x, n, &prov), 0);
    assert_int_equal(file_bytes(path), (long)n_whole);
    assert_int_equal(sh("ffprobe -v error -show_entries stream=codec_name,profile,sample_rate,"
                        "channels:format=format_name:format_tags -of default=nw=1 %s > %s.probe",
                        path, path), 0);
    snprintf(cmd, sizeof cmd, "%s.probe", path);
    sh("sed 's/^/    /' %s", cmd);
    const char *const want[] = {"codec_name=aac", "profile=LC", "sample_rate=24000", "channels=1",
                                "format_name=aac", "TAG:encoder=qvoice ", "TAG:date=2023-11-14",
                                "trainedAlgorithmicMedia; engine=qvoice",
                                "voice_id=speaker:ryan; watermark="};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!file_has(cmd, want[i])) fail_msg("%s: no %s", cmd, want[i]);
    /* decoded: the priming frame, the samples, the last frame's padding */
    assert_int_equal(sh("ffmpeg -v error -y -i %s -f s16le -ac 1 %s.raw", path, path), 0);
    snprintf(cmd, sizeof cmd, "%s.raw", path);
    int16_t *y;
    const long m = read_s16(cmd, &y);
    printf("  aac: %zu bytes, %ld samples decoded of %d\n", n_whole, m, n);
    assert_true(m >= n + 1024 && m <= n + 3 * 1024);
    double sig = 0, err = 0;
    for (int i = 0; i < n; i++) {
        const double a = (int16_t)(marked[2 * i] | marked[2 * i + 1] << 8), d = y[1024 + i] - a;
        sig += a * a, err += d * d;
    }
    const double snr = 10 * log10(sig / err);
    printf("  aac: SNR %.1f dB against the marked samples (delay 1024)\n", snr);
    assert_true(snr > 20);
    /* streamed in uneven blocks: the same bytes */
    mem s = stream_check(QV_FORMAT_AAC, QV_SAMPLE_RATE_HZ, &prov, x, n, whole, n_whole, 0);
    /* raw: no tag, frames from the first byte */
    uint8_t *raw;
    size_t n_raw;
    assert_int_equal(qv_audio_encode(QV_FORMAT_AAC, x, n, NULL, &raw, &n_raw), 0);
    assert_true(raw[0] == 0xFF && raw[1] == 0xF1);
    /* without the library: one line naming the package (speak refuses before opening a model) */
    assert_int_equal(sh("QV_AVCODEC=libqv-missing.so.0 bin/speak -m /nonexistent -t hi -o %s "
                        "2> %s.err", path, path), 2);
    snprintf(cmd, sizeof cmd, "%s.err", path);
    sh("sed 's/^/    /' %s", cmd);
    assert_true(file_has(cmd, "aac: cannot load libqv-missing.so.0 (install Debian's libavcodec"));
    sh("rm -f %s %s.probe %s.raw %s.err", path, path, path, path);
    qv_free(raw), free(s.p), free(y), qv_free(marked), qv_free(whole), free(x);
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

QVT_MAIN(NULL, NULL, test_s16, test_wav_header, test_provenance_time, test_provenance_tags,
         test_formats, test_stream_equals_whole, test_aac,
         test_every_format, test_sample_rate, test_loudness, test_codes, test_params_check, test_voice_lookup)
