/* test_clone.c — clone/ against the official implementation's outputs on the synthetic 0.6B Base
 * (mel max |Δ| ≤ 1e-3, x-vector relative L2 ≤ 1e-4, encoder codes identical), format/rate
 * invariance of the x-vector, the audio checks, the conv helper against a naive double loop, the
 * tiny model, and the CLI (exit codes, no partial output).
 */
#include <math.h>
#include <samplerate.h>
#include <setjmp.h>
#include <sndfile.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint/ckpt.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/npy.h"
#include "tests/unit/helpers/shell.h"

#include "features/speech_encoder.h"
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"
#include "voicefmt/qvf.h"

#define CLIP "tests/audio/en_ohenry_chenevert.wav"
#define GOLDEN "tests/golden/clone/"

/* ---- helpers ---------------------------------------------------------------------------- */

static char g_base[1024], g_cv[1024], g_tiny[1024];
static qvk_pool *g_pool;   /* 2 threads, OpenBLAS single-threaded */

static void model_paths(void) {
    const char *cache = test_cache_dir();
    snprintf(g_base, sizeof g_base, "%s/q06b-base", cache);
    snprintf(g_cv, sizeof g_cv, "%s/q06b-cv", cache);
    snprintf(g_tiny, sizeof g_tiny, "%s/tiny-base", cache);
}

static float *xvector_pool(const qva_ecapa *e, const qva_audio *a, qvk_pool *pool) {
    int nf = qva_mel_n_frames(a->n_samples);
    qva_mel *m = qva_mel_create();
    float *mel = malloc(sizeof(float) * QVA_MEL_BINS * (size_t)nf);
    float *x = malloc(sizeof(float) * (size_t)qva_ecapa_dim(e));
    char err[512];
    assert_non_null(m);
    assert_int_equal(qva_mel_compute(m, mel, a->samples, a->n_samples), 0);
    int rc = qva_ecapa_forward(e, pool, x, mel, nf, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    free(mel);
    qva_mel_free(m);
    return x;
}

static float *xvector_of(const qva_ecapa *e, const qva_audio *a) { return xvector_pool(e, a, g_pool); }

static int write_wav(const char *path, int format, int rate, int channels, const float *inter,
                     int64_t frames) {
    SF_INFO info = {.samplerate = rate, .channels = channels, .format = format};
    SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
    if (!sf) return -1;
    sf_count_t w = sf_writef_float(sf, inter, frames);
    sf_close(sf);
    return w == frames ? 0 : -1;
}

static qva_audio g_clip;   /* the bundled clip at 24 kHz, loaded once */
static qva_ecapa *g_ecapa; /* full-size Base speaker encoder */

static int setup_full(void **state) {
    char err[512];
    model_paths();
    g_pool = qvk_pool_create(2);
    if (qva_audio_load(&g_clip, CLIP, 30.0, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    qvm_ckpt *ck_g_ecapa = test_ckpt_open(g_base);
    g_ecapa = qva_ecapa_load(ck_g_ecapa, err, sizeof err);
    qvm_ckpt_free(ck_g_ecapa);
    if (!g_ecapa) fprintf(stderr, "test_clone: %s (run `make models-full`)\n", err);
    return g_ecapa ? 0 : -1;
}

static int teardown_full(void **state) {
    qva_audio_free(&g_clip);
    qva_ecapa_free(g_ecapa);
    qvk_pool_free(g_pool);
    return 0;
}

/* ---- goldens ---------------------------------------------------------------------------- */

static void test_golden_mel(void **state) {
    npy_array gold;
    npy_load(GOLDEN "spk_mel.npy", NPY_F32, &gold);
    float *ref = gold.data;
    const size_t n = gold.n_elems;
    int nf = qva_mel_n_frames(g_clip.n_samples);
    assert_int_equal((size_t)nf * QVA_MEL_BINS, n);
    float *mel = malloc(sizeof(float) * n);
    qva_mel *m = qva_mel_create();
    assert_int_equal(qva_mel_compute(m, mel, g_clip.samples, g_clip.n_samples), 0);
    double md = 0.0;
    for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)mel[i] - ref[i]));
    printf("  mel [%d, 128] vs official: max |d| = %.3g (tolerance 1e-3)\n", nf, md);
    assert_true(md <= 1e-3);
    qva_mel_free(m);
    free(mel);
    free(ref);
}

static void test_golden_xvector(void **state) {
    npy_array gold;
    npy_load(GOLDEN "spk_xvector.npy", NPY_F32, &gold);
    float *ref = gold.data;
    const size_t n = gold.n_elems;
    assert_int_equal(n, (size_t)qva_ecapa_dim(g_ecapa));
    float *x = xvector_of(g_ecapa, &g_clip);
    double num = 0.0, den = 0.0, md = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        md = fmax(md, fabs(d));
    }
    double rel = sqrt(num / den);
    printf("  x-vector vs official: relative L2 = %.3g (tolerance 1e-4), max |d| = %.3g, norm %.4f\n",
           rel, md, sqrt(den));
    assert_true(rel <= 1e-4);
    /* the pool splits work the same way for any thread count: one thread gives the same bits */
    float *x1 = xvector_pool(g_ecapa, &g_clip, NULL);
    int same = !memcmp(x, x1, n * sizeof(float));
    printf("  x-vector with 1 thread vs 2: %s\n", same ? "bit-identical" : "DIFFERENT");
    assert_true(same);
    free(x1);
    free(x);
    free(ref);
}

static void test_golden_codes(void **state) {
    char err[512];
    npy_array gold;
    npy_load(GOLDEN "codes_enc.npy", NPY_I64, &gold);
    int64_t *ref = gold.data;
    const size_t n = gold.n_elems;
    qvm_ckpt *ck_se = test_ckpt_open(g_base);
    qva_speech_encoder *se = qva_speech_encoder_load(ck_se, err, sizeof err);
    qvm_ckpt_free(ck_se);
    if (!se) fprintf(stderr, "%s\n", err);
    assert_non_null(se);
    int nf = qva_speech_encoder_n_frames(g_clip.n_samples);
    assert_int_equal((size_t)nf * QV_N_CODEBOOKS, n);
    int32_t *codes = malloc(sizeof(int32_t) * n);
    assert_int_equal(qva_speech_encoder_encode(se, g_pool, codes, g_clip.samples, g_clip.n_samples, err, sizeof err), 0);
    int bad = 0;
    for (int g = 0; g < QV_N_CODEBOOKS; g++)
        for (int f = 0; f < nf; f++) bad += ref[(size_t)g * nf + f] != codes[(size_t)f * QV_N_CODEBOOKS + g];
    printf("  speech-encoder codes [%d, 16] vs official: %d of %zu differ (tolerance 0)\n", nf, bad, n);
    assert_int_equal(bad, 0);
    /* one thread (no pool) gives the same codes */
    int32_t *codes1 = malloc(sizeof(int32_t) * n);
    assert_int_equal(qva_speech_encoder_encode(se, NULL, codes1, g_clip.samples, g_clip.n_samples, err, sizeof err), 0);
    assert_memory_equal(codes, codes1, sizeof(int32_t) * n);
    free(codes1);
    /* the sliding window (flash-attention behaviour) must differ on this 750-frame clip */
    qva_speech_encoder_set_window(se, 250);
    assert_int_equal(qva_speech_encoder_encode(se, g_pool, codes, g_clip.samples, g_clip.n_samples, err, sizeof err), 0);
    int bad_w = 0;
    for (int g = 0; g < QV_N_CODEBOOKS; g++)
        for (int f = 0; f < nf; f++) bad_w += ref[(size_t)g * nf + f] != codes[(size_t)f * QV_N_CODEBOOKS + g];
    printf("  with window 250 instead of plain causal: %d differ (the reference is plain causal)\n", bad_w);
    assert_true(bad_w > 0);
    free(codes);
    free(ref);
    qva_speech_encoder_free(se);
}

/* ---- same voice from WAV, FLAC and 44.1 kHz stereo ------------------------------------- */

static void test_formats(void **state) {
    char err[512];
    char flac[64], st44[64];
    snprintf(flac, sizeof flac, "/tmp/test_clone_%d.flac", (int)getpid());
    snprintf(st44, sizeof st44, "/tmp/test_clone_%d_44k.wav", (int)getpid());
    /* FLAC copy of the 16-bit clip: lossless, so the decoded samples are identical */
    assert_int_equal(write_wav(flac, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 24000, 1, g_clip.samples,
                               g_clip.n_samples), 0);
    /* 44.1 kHz stereo 16-bit copy */
    long n44 = (long)ceil(g_clip.n_samples * 44100.0 / 24000.0) + 16;
    float *mono44 = malloc(sizeof(float) * (size_t)n44);
    SRC_DATA d = {.data_in = g_clip.samples, .input_frames = (long)g_clip.n_samples,
                  .data_out = mono44, .output_frames = n44, .src_ratio = 44100.0 / 24000.0};
    assert_int_equal(src_simple(&d, SRC_SINC_MEDIUM_QUALITY, 1), 0);
    float *inter = malloc(sizeof(float) * 2 * (size_t)d.output_frames_gen);
    for (long i = 0; i < d.output_frames_gen; i++) inter[2 * i] = inter[2 * i + 1] = mono44[i];
    assert_int_equal(write_wav(st44, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 2, inter,
                               d.output_frames_gen), 0);
    free(inter);
    free(mono44);

    qva_audio a_flac, a_44;
    assert_int_equal(qva_audio_load(&a_flac, flac, 30.0, err, sizeof err), 0);
    assert_int_equal(qva_audio_load(&a_44, st44, 30.0, err, sizeof err), 0);
    assert_int_equal(a_44.src_channels, 2);
    assert_int_equal(a_44.src_rate_hz, 44100);
    assert_true(a_44.resampled);
    float *x_wav = xvector_of(g_ecapa, &g_clip);
    float *x_flac = xvector_of(g_ecapa, &a_flac);
    float *x_44 = xvector_of(g_ecapa, &a_44);
    int dim = qva_ecapa_dim(g_ecapa);
    int same = !memcmp(x_wav, x_flac, sizeof(float) * (size_t)dim);
    double c44 = qvk_cosine(x_wav, x_44, dim);
    printf("  WAV vs FLAC x-vector: %s; WAV vs 44.1 kHz stereo: cosine %.6f (tolerance >= 0.99)\n",
           same ? "bit-identical" : "DIFFERENT", c44);
    assert_true(same);
    assert_true(c44 >= 0.99);
    free(x_wav);
    free(x_flac);
    free(x_44);
    qva_audio_free(&a_flac);
    qva_audio_free(&a_44);
    unlink(flac);
    unlink(st44);
}

/* Lossy containers libsndfile reads: OGG/Vorbis, Opus (written at 48 kHz), MP3. The first 10 s of
 * the clip, written with libsndfile's default encoder settings, must give nearly the x-vector of
 * the same 10 s read losslessly. */
static void test_lossy_formats(void **state) {
    char err[512], path[64];
    struct { const char *ext; int format, rate; } f[] = {
        {"ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 24000},
        {"opus", SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000},
        {"mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 24000},
    };
    int64_t n = 240000;
    qva_audio ref;
    assert_int_equal(qva_audio_from_mono(&ref, g_clip.samples, n, 24000, "ref", err, sizeof err), 0);
    float *x_ref = xvector_of(g_ecapa, &ref);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        SF_INFO probe = {.samplerate = f[i].rate, .channels = 1, .format = f[i].format};
        if (!sf_format_check(&probe)) {
            printf("  %s: not supported by this libsndfile, skipped\n", f[i].ext);
            continue;
        }
        snprintf(path, sizeof path, "/tmp/test_clone_%d.%s", (int)getpid(), f[i].ext);
        float *data = g_clip.samples;
        float *up = NULL;
        int64_t n_w = n;
        if (f[i].rate != 24000) {
            long cap = (long)(n * 2 + 16);
            up = malloc(sizeof(float) * (size_t)cap);
            SRC_DATA d = {.data_in = g_clip.samples, .input_frames = (long)n, .data_out = up,
                          .output_frames = cap, .src_ratio = 2.0};
            assert_int_equal(src_simple(&d, SRC_SINC_MEDIUM_QUALITY, 1), 0);
            data = up;
            n_w = d.output_frames_gen;
        }
        assert_int_equal(write_wav(path, f[i].format, f[i].rate, 1, data, n_w), 0);
        free(up);
        qva_audio a;
        int rc = qva_audio_load(&a, path, 30.0, err, sizeof err);
        if (rc) fprintf(stderr, "%s\n", err);
        assert_int_equal(rc, 0);
        float *x = xvector_of(g_ecapa, &a);
        double cs = qvk_cosine(x_ref, x, qva_ecapa_dim(g_ecapa));
        printf("  %s (%s, %.2f s read): x-vector cosine vs lossless %.5f (tolerance >= 0.98)\n",
               f[i].ext, a.src_format, a.used_seconds, cs);
        assert_true(cs >= 0.98);
        free(x);
        qva_audio_free(&a);
        unlink(path);
    }
    free(x_ref);
    qva_audio_free(&ref);
}

/* ---- audio checks ----------------------------------------------------------------------- */

static void expect_load_error(const char *path, const char *needle) {
    char err[512] = "";
    qva_audio a;
    int rc = qva_audio_load(&a, path, 30.0, err, sizeof err);
    printf("  %s -> %s\n", path, rc ? err : "(accepted)");
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, needle));
}

static void test_audio_errors(void **state) {
    char path[64];
    int64_t n = 24000 * 5;
    float *x = calloc((size_t)n, sizeof(float));
    snprintf(path, sizeof path, "/tmp/test_clone_%d_bad.wav", (int)getpid());
    /* digital silence */
    assert_int_equal(write_wav(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 24000, 1, x, n), 0);
    expect_load_error(path, "digital silence");
    /* near-silence: −80 dBFS noise */
    srand(1);
    for (int64_t i = 0; i < n; i++) x[i] = 1e-4f * ((float)rand() / RAND_MAX - 0.5f);
    assert_int_equal(write_wav(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 24000, 1, x, n), 0);
    expect_load_error(path, "near-silence");
    /* too short: 2 s of the clip */
    assert_int_equal(write_wav(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 24000, 1, g_clip.samples, 48000), 0);
    expect_load_error(path, "too short");
    /* non-finite samples in a float WAV */
    for (int64_t i = 0; i < n; i++) x[i] = 0.1f * sinf((float)i * 0.01f);
    x[12345] = NAN;
    assert_int_equal(write_wav(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 24000, 1, x, n), 0);
    expect_load_error(path, "NaN or infinite");
    /* unreadable: not audio at all */
    FILE *f = fopen(path, "wb");
    fputs("this is not a sound file\n", f);
    fclose(f);
    expect_load_error(path, "cannot read audio");
    unlink(path);
    expect_load_error("/nonexistent/ref.wav", "cannot read audio");
    free(x);
}

static void test_audio_warnings(void **state) {
    char err[512], path[64];
    qva_audio a;
    /* --max-seconds 10 on the 30 s clip: first 10 s, flagged */
    assert_int_equal(qva_audio_load(&a, CLIP, 10.0, err, sizeof err), 0);
    assert_true(a.truncated);
    assert_int_equal(a.n_samples, 240000);
    assert_memory_equal(a.samples, g_clip.samples, 240000 * sizeof(float));
    assert_true(a.short_warning == 0);
    qva_audio_free(&a);
    /* 5 s: accepted with the short warning; clipped copy: warning with its fraction */
    snprintf(path, sizeof path, "/tmp/test_clone_%d_w.wav", (int)getpid());
    int64_t n = 24000 * 5;
    float *x = malloc(sizeof(float) * (size_t)n);
    int64_t clipped = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = 8.0f * g_clip.samples[i];
        if (x[i] > 1.0f) x[i] = 1.0f;
        if (x[i] < -1.0f) x[i] = -1.0f;
        clipped += fabsf(x[i]) >= (float)QVA_CLIP_LEVEL;
    }
    assert_int_equal(write_wav(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 24000, 1, x, n), 0);
    assert_int_equal(qva_audio_load(&a, path, 30.0, err, sizeof err), 0);
    printf("  5 s clipped copy: short warning %d, clip warning %d, clipped %.4f%% (expected %.4f%%)\n",
           a.short_warning, a.clip_warning, 100 * a.clipped_fraction, 100.0 * clipped / n);
    assert_true(a.short_warning);
    assert_true(a.clip_warning);
    assert_true(fabs(a.clipped_fraction - (double)clipped / n) < 1e-9);
    qva_audio_free(&a);
    unlink(path);
    free(x);
}

static void test_not_base(void **state) {
    char err[512] = "";
    qvm_ckpt *ck_e = test_ckpt_open(g_cv);
    qva_ecapa *e = qva_ecapa_load(ck_e, err, sizeof err);
    qvm_ckpt_free(ck_e);
    printf("  CustomVoice: %s\n", err);
    assert_null(e);
    assert_non_null(strstr(err, "Base"));
}

/* ---- conv helper vs naive double -------------------------------------------------------- */

static void naive_conv(const qvk_conv *cv, double *y, const float *x, int t_in, const float *w,
                       const float *b) {
    int t_out = (int)qvk_conv1d_out_len(cv, t_in);
    for (int o = 0; o < cv->c_out; o++)
        for (int t = 0; t < t_out; t++) {
            double acc = b ? b[o] : 0.0;
            for (int c = 0; c < cv->c_in; c++)
                for (int j = 0; j < cv->k; j++) {
                    int p = t * cv->stride + j * cv->dilation - cv->pad_left;
                    double v;
                    if (p >= 0 && p < t_in) v = x[c * t_in + p];
                    else if (cv->pad == QVK_PAD_ZERO) v = 0.0;
                    else if (cv->pad == QVK_PAD_REFLECT) v = x[c * t_in + (p < 0 ? -p : 2 * (t_in - 1) - p)];
                    else v = x[c * t_in + (p < 0 ? 0 : t_in - 1)];
                    if (cv->act_in == QVK_ACT_ELU && v < 0) v = expm1(v);
                    if (cv->act_in == QVK_ACT_RELU && v < 0) v = 0;
                    acc += v * w[(o * cv->c_in + c) * cv->k + j];
                }
            if (cv->act_out == QVK_ACT_RELU && acc < 0) acc = 0;
            if (cv->act_out == QVK_ACT_ELU && acc < 0) acc = expm1(acc);
            y[o * t_out + t] = acc;
        }
}

static void test_conv_helper(void **state) {
    struct { int c_in, c_out, k, stride, dil; enum qvk_pad pad; int causal; enum qvk_act ai, ao; int t; } cases[] = {
        {3, 5, 7, 1, 1, QVK_PAD_ZERO, 1, QVK_ACT_NONE, QVK_ACT_NONE, 1000},
        {4, 6, 8, 4, 1, QVK_PAD_ZERO, 1, QVK_ACT_ELU, QVK_ACT_NONE, 1001},
        {5, 3, 3, 1, 4, QVK_PAD_REFLECT, 0, QVK_ACT_NONE, QVK_ACT_RELU, 300},
        {6, 6, 4, 2, 1, QVK_PAD_REPLICATE, 1, QVK_ACT_NONE, QVK_ACT_NONE, 77},
        {700, 9, 1, 1, 1, QVK_PAD_ZERO, 0, QVK_ACT_NONE, QVK_ACT_NONE, 5000},
        {2, 4, 16, 8, 1, QVK_PAD_ZERO, 1, QVK_ACT_ELU, QVK_ACT_NONE, 61},
        {64, 32, 1, 1, 1, QVK_PAD_ZERO, 0, QVK_ACT_NONE, QVK_ACT_RELU, 777}, /* read in place */
    };
    srand(7);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        qvk_conv cv = {.c_in = cases[ci].c_in, .c_out = cases[ci].c_out, .k = cases[ci].k,
                       .stride = cases[ci].stride, .dilation = cases[ci].dil, .pad = cases[ci].pad,
                       .act_in = cases[ci].ai, .act_out = cases[ci].ao};
        int t = cases[ci].t;
        if (cases[ci].causal) qvk_conv_causal(&cv, t);
        else qvk_conv_same(&cv);
        int t_out = (int)qvk_conv1d_out_len(&cv, t);
        if (cases[ci].causal) assert_int_equal(t_out, (t + cv.stride - 1) / cv.stride);
        else assert_int_equal(t_out, t);
        float *x = malloc(sizeof(float) * (size_t)cv.c_in * t);
        float *w = malloc(sizeof(float) * (size_t)cv.c_out * cv.c_in * cv.k);
        float *b = malloc(sizeof(float) * (size_t)cv.c_out);
        float *y = malloc(sizeof(float) * (size_t)cv.c_out * t_out);
        double *yr = malloc(sizeof(double) * (size_t)cv.c_out * t_out);
        float *scratch = qvk_alloc(2 * sizeof(float) * qvk_conv_chunk_scratch(&cv));
        for (int i = 0; i < cv.c_in * t; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
        for (int i = 0; i < cv.c_out * cv.c_in * cv.k; i++) w[i] = (float)rand() / RAND_MAX - 0.5f;
        for (int i = 0; i < cv.c_out; i++) b[i] = (float)rand() / RAND_MAX - 0.5f;
        qvk_conv1d_chunked(NULL, &cv, y, t_out, x, t, t, w, b, scratch);
        naive_conv(&cv, yr, x, t, w, b);
        double md = 0.0;
        for (int i = 0; i < cv.c_out * t_out; i++) md = fmax(md, fabs(y[i] - yr[i]));
        printf("  conv case %zu (c_in %d, k %d, stride %d, dil %d): max |d| vs double %.3g\n", ci,
               cv.c_in, cv.k, cv.stride, cv.dilation, md);
        assert_true(md < 1e-4);
        /* residual mode adds onto y */
        cv.residual = 1;
        qvk_conv1d_chunked(g_pool, &cv, y, t_out, x, t, t, w, b, scratch);
        md = 0.0;
        for (int i = 0; i < cv.c_out * t_out; i++) md = fmax(md, fabs(y[i] - 2 * yr[i]));
        assert_true(md < 2e-4);
        /* time-major variant: x [t, c_in], W [c_out, k, c_in], y [t_out, c_out] */
        cv.residual = 0;
        float *xt = malloc(sizeof(float) * (size_t)cv.c_in * t);
        float *wt = malloc(sizeof(float) * (size_t)cv.c_out * cv.c_in * cv.k);
        float *yt = malloc(sizeof(float) * (size_t)cv.c_out * t_out);
        float *scratch_tm = qvk_alloc(2 * sizeof(float) * qvk_conv_chunk_scratch(&cv));
        for (int c = 0; c < cv.c_in; c++)
            for (int i = 0; i < t; i++) xt[(size_t)i * cv.c_in + c] = x[(size_t)c * t + i];
        qvk_conv_weights_tm(wt, w, cv.c_out, cv.c_in, cv.k);
        qvk_conv1d_chunked_tm(g_pool, &cv, yt, cv.c_out, xt, cv.c_in, t, wt, b, scratch_tm);
        md = 0.0;
        for (int o = 0; o < cv.c_out; o++)
            for (int i = 0; i < t_out; i++) md = fmax(md, fabs(yt[(size_t)i * cv.c_out + o] - yr[(size_t)o * t_out + i]));
        printf("    time-major: max |d| vs double %.3g\n", md);
        assert_true(md < 1e-4);
        free(xt);
        free(wt);
        free(yt);
        qvk_free(scratch_tm);
        free(x);
        free(w);
        free(b);
        free(y);
        free(yr);
        qvk_free(scratch);
    }
}

/* The 16-wide ELU gives the same bits as the 8-wide one (so the codes do not depend on it). */
static void test_elu_variants(void **state) {
    (void)state;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("  no AVX-512F on this CPU: nothing to compare\n");
        return;
    }
    enum { N = 4099 };
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    uint32_t rng = 12345;
    for (int i = 0; i < N; i++) {
        rng = rng * 1664525u + 1013904223u;
        a[i] = -25.0f + 30.0f * (float)(rng >> 8) / 16777216.0f;
        if (i % 97 == 0) a[i] = -1e-30f * (float)(i % 5);
        if (i % 101 == 0) a[i] = 0.0f;
    }
    a[7] = -0.0f;
    memcpy(b, a, sizeof(float) * N);
    /* the kernels' ELU under each variant (the clone runs whichever the kernels picked) */
    char was[16];
    snprintf(was, sizeof was, "%s", qvk_variant());
    assert_int_equal(qvk_set_variant("avx2"), 0);
    qvk_elu(a, N);
    int have512 = qvk_set_variant("avx512") == 0;
    qvk_elu(b, N);
    assert_int_equal(qvk_set_variant(was), 0);
    if (!have512) {
        printf("  no AVX-512 kernel variant on this CPU: ELU not compared\n");
        memcpy(b, a, sizeof(float) * N);
    }
    int n_diff = 0;
    for (int i = 0; i < N; i++) n_diff += memcmp(a + i, b + i, sizeof(float)) != 0;
    printf("  ELU avx512 vs avx2: %d of %d values differ (tolerance 0)\n", n_diff, N);
    assert_int_equal(n_diff, 0);
    /* the direct 1-channel conv is one fmaf chain from zero per output, in tap order */
    enum { K = 7, CO = 64, T = 300 };
    float w[CO * K], *y = malloc(sizeof(float) * T * CO);
    for (int i = 0; i < CO * K; i++) w[i] = 0.37f * a[i] - 0.1f;
    qvk_conv_c1_avx512(y, CO, a + 1, T, w, K, CO);
    n_diff = 0;
    for (int i = 0; i < T; i++)
        for (int o = 0; o < CO; o++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) acc = fmaf(a[1 + i + j], w[o * K + j], acc);
            n_diff += memcmp(&acc, y + (size_t)i * CO + o, sizeof acc) != 0;
        }
    printf("  1-channel conv avx512 vs fmaf chain: %d of %d differ (tolerance 0)\n", n_diff, T * CO);
    assert_int_equal(n_diff, 0);
    free(y);
    free(a);
    free(b);
}

/* Speech-encoder codes under the AVX-512 and the scalar kernels: identical on 12 s of both
 * bundled clips, each also resampled through 16 and 44.1 kHz and at -12 and +6 dB (+6 dB
 * lowered to stay below clipping). The two variants differ in ELU (polynomial vs expm1f) and
 * softmax (polynomial vs expf) by about an ulp; a code may only flip where two codebook rows
 * are nearly tied, and the official codes do not depend on that noise either. */
static int clip_version(qva_audio *out, const qva_audio *a, int64_t n, int kind) {
    char err[512];
    static const int rates[] = {24000, 16000, 44100, 24000, 24000};
    int rate = rates[kind];
    long cap = (long)(n * (rate / 24000.0)) + 16;
    float *x = malloc(sizeof(float) * (size_t)cap);
    long m = (long)n;
    if (rate != 24000) {
        SRC_DATA d = {.data_in = a->samples, .input_frames = (long)n, .data_out = x,
                      .output_frames = cap, .src_ratio = rate / 24000.0};
        assert_int_equal(src_simple(&d, SRC_SINC_MEDIUM_QUALITY, 1), 0);
        m = d.output_frames_gen;
    } else {
        float g = kind == 3 ? powf(10.0f, -12.0f / 20.0f)
                  : kind == 4 ? fminf(powf(10.0f, 6.0f / 20.0f), 0.99f / (float)a->peak) : 1.0f;
        for (long i = 0; i < m; i++) x[i] = g * a->samples[i];
    }
    int rc = qva_audio_from_mono(out, x, m, rate, "version", err, sizeof err);
    free(x);
    return rc;
}

static void test_codes_variants(void **state) {
    (void)state;
    char err[512], was[16];
    snprintf(was, sizeof was, "%s", qvk_variant());
    if (qvk_set_variant("avx512")) {
        printf("  no AVX-512 kernel variant on this CPU: nothing to compare\n");
        return;
    }
    qvm_ckpt *ck_se = test_ckpt_open(g_base);
    qva_speech_encoder *se = qva_speech_encoder_load(ck_se, err, sizeof err);
    qvm_ckpt_free(ck_se);
    assert_non_null(se);
    static const char *const clips[] = {CLIP, "tests/audio/it_galatea_fasol.wav"};
    static const char *const kinds[] = {"24 kHz", "via 16 kHz", "via 44.1 kHz", "-12 dB", "+6 dB"};
    const int64_t n = 12 * 24000;
    const int nf = qva_speech_encoder_n_frames(n);
    int32_t *codes[2];
    for (int v = 0; v < 2; v++) codes[v] = malloc(sizeof(int32_t) * (size_t)(nf + 1) * QV_N_CODEBOOKS);
    for (int c = 0; c < 2; c++) {
        qva_audio a;
        assert_int_equal(qva_audio_load(&a, clips[c], 30.0, err, sizeof err), 0);
        assert_true(a.n_samples >= n);
        for (int k = 0; k < 5; k++) {
            qva_audio b;
            assert_int_equal(clip_version(&b, &a, n, k), 0);
            int nb = qva_speech_encoder_n_frames(b.n_samples);
            assert_true(nb <= nf + 1);
            for (int v = 0; v < 2; v++) {
                assert_int_equal(qvk_set_variant(v ? "scalar" : "avx512"), 0);
                assert_int_equal(qva_speech_encoder_encode(se, g_pool, codes[v], b.samples,
                                                           b.n_samples, err, sizeof err), 0);
            }
            int bad = 0;
            for (int i = 0; i < nb * QV_N_CODEBOOKS; i++) bad += codes[0][i] != codes[1][i];
            printf("  %s %-13s %d frames: avx512 vs scalar codes, %d differ (tolerance 0)\n",
                   c ? "it" : "en", kinds[k], nb, bad);
            assert_int_equal(bad, 0);
            qva_audio_free(&b);
        }
        qva_audio_free(&a);
    }
    assert_int_equal(qvk_set_variant(was), 0);
    for (int v = 0; v < 2; v++) free(codes[v]);
    qva_speech_encoder_free(se);
}

/* ---- tiny model ------------------------------------------------------------------------- */

static void test_tiny_model(void **state) {
    char err[512];
    qvm_ckpt *ck_e = test_ckpt_open(g_tiny);
    qva_ecapa *e = qva_ecapa_load(ck_e, err, sizeof err);
    qvm_ckpt_free(ck_e);
    if (!e) fprintf(stderr, "%s\n", err);
    assert_non_null(e);
    assert_int_equal(qva_ecapa_dim(e), 64);
    float *x1 = xvector_of(e, &g_clip);
    float *x2 = xvector_of(e, &g_clip);
    int finite = 1;
    for (int i = 0; i < 64; i++) finite &= isfinite(x1[i]);
    assert_true(finite);
    assert_memory_equal(x1, x2, 64 * sizeof(float));
    /* a different 10 s part of the clip is a different, still similar, "speaker" */
    qva_audio part;
    assert_int_equal(qva_audio_from_mono(&part, g_clip.samples + 240000, 240000, 24000, "part", err, sizeof err), 0);
    float *x3 = xvector_of(e, &part);
    double c = qvk_cosine(x1, x3, 64);
    printf("  tiny x-vector norm %.3f; cosine whole clip vs 10 s part %.4f\n", qva_l2norm(x1, 64), c);
    assert_true(c < 1.0);
    qvm_ckpt *ck_se = test_ckpt_open(g_tiny);
    qva_speech_encoder *se = qva_speech_encoder_load(ck_se, err, sizeof err);
    qvm_ckpt_free(ck_se);
    if (!se) fprintf(stderr, "%s\n", err);
    assert_non_null(se);
    int nf = qva_speech_encoder_n_frames(4000);
    assert_int_equal(nf, 3);
    int32_t codes[3 * QV_N_CODEBOOKS];
    assert_int_equal(qva_speech_encoder_encode(se, g_pool, codes, g_clip.samples, 4000, err, sizeof err), 0);
    for (int i = 0; i < 3 * QV_N_CODEBOOKS; i++) assert_true(codes[i] >= 0 && codes[i] < 2048);
    /* causal: the codes of the first frames do not depend on later audio */
    int32_t codes2[QV_N_CODEBOOKS * 2];
    assert_int_equal(qva_speech_encoder_encode(se, NULL, codes2, g_clip.samples, 3840, err, sizeof err), 0);
    assert_memory_equal(codes, codes2, sizeof codes2);
    qva_speech_encoder_free(se);
    qva_audio_free(&part);
    free(x1);
    free(x2);
    free(x3);
    qva_ecapa_free(e);
}

/* ---- CLI -------------------------------------------------------------------------------- */

static void test_cli(void **state) {
    char out[64], bad[64];
    struct stat sb;
    snprintf(out, sizeof out, "/tmp/test_clone_%d.qvoice", (int)getpid());
    snprintf(bad, sizeof bad, "/tmp/test_clone_%d_short.wav", (int)getpid());
    assert_int_equal(access("bin/clone", X_OK), 0);
    assert_int_equal(sh("bin/clone --help > /dev/null"), 0);
    assert_int_equal(sh("bin/clone --bogus 2> /dev/null"), 2);
    /* failures: exit 1 and no output file */
    unlink(out);
    assert_int_equal(write_wav(bad, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 24000, 1, g_clip.samples, 24000), 0);
    assert_int_equal(sh("bin/clone -m %s %s -o %s 2> /dev/null", g_tiny, bad, out), 1);
    assert_int_equal(stat(out, &sb), -1);
    assert_int_equal(sh("bin/clone -m %s %s -o %s 2> /dev/null", g_cv, CLIP, out), 1);
    assert_int_equal(stat(out, &sb), -1);
    unlink(bad);
    /* tiny Base, ICL: the file reads back with the x-vector, transcript and 375 frames */
    assert_int_equal(sh("bin/clone -m %s %s -o %s --no-hygiene -t 'One dollar.' -l english -n tester > /dev/null",
                         g_tiny, CLIP, out), 0);
    qvf_voice *v = NULL;
    char err[512];
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    assert_int_equal(v->enc_dim, 64);
    assert_int_equal(v->n_frames, 375);
    assert_string_equal(v->transcript, "One dollar.");
    assert_string_equal(qvf_meta_get(v, "name"), "tester");
    assert_string_equal(qvf_meta_get(v, "language_id"), "2050");
    qvf_voice_free(v);
    assert_int_equal(sh("bin/clone --compare %s %s > /dev/null", out, out), 0);
    /* --target-cv: a WDELTA against the tiny CustomVoice, target identity recorded */
    char cv_tiny[1024];
    snprintf(cv_tiny, sizeof cv_tiny, "%.*s/tiny-cv", (int)(strlen(g_tiny) - strlen("/tiny-base")), g_tiny);
    assert_int_equal(sh("bin/clone -m %s %s -o %s --target-cv %s --json > /dev/null", g_tiny, CLIP,
                         out, cv_tiny), 0);
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    printf("  --target-cv: WDELTA with %u tensors, target variant %u\n", v->n_tensors, v->target.variant);
    assert_true(v->has_wdelta);
    assert_true(v->n_tensors > 0);
    assert_int_equal(v->target.variant, QVF_VARIANT_CUSTOM_VOICE);
    assert_int_equal(v->n_frames, 0);
    qvf_voice_free(v);
    unlink(out);
}

int main(void) {
    const struct CMUnitTest full[] = {
        cmocka_unit_test(test_golden_mel),     cmocka_unit_test(test_golden_xvector),
        cmocka_unit_test(test_golden_codes),   cmocka_unit_test(test_formats),
        cmocka_unit_test(test_lossy_formats),
        cmocka_unit_test(test_audio_errors),   cmocka_unit_test(test_audio_warnings),
        cmocka_unit_test(test_not_base),       cmocka_unit_test(test_conv_helper),
        cmocka_unit_test(test_elu_variants),   cmocka_unit_test(test_codes_variants),
        cmocka_unit_test(test_tiny_model),     cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests_name("clone", full, setup_full, teardown_full);
}
