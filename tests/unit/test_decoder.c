/* test_decoder.c — speech decoder (§6.1): golden waveforms of the official implementation on the
 * full-size synthetic 0.6B tokenizer (max |Δ| ≤ 1e-4), streamed == one-shot bit for bit, and the
 * > 300-frame chunking against a direct implementation of the reference chunked_decode formula.
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

#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/npy.h"
#include "checkpoint/ckpt.h"
#include "tests/unit/helpers/run.h"
#include "kernels/kernels.h"
#include "engine/speech_decoder.h"

#define GOLDEN "tests/golden/decoder/"

static qve_decoder *g_full, *g_tiny;

static qve_decoder *load(const char *model) {
    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/%s", test_cache_dir(), model);
    qvm_ckpt *ck = qvm_ckpt_open(dir, err, sizeof err);
    qve_decoder *d = ck ? qve_decoder_load(ck, err, sizeof err) : NULL;
    qvm_ckpt_free(ck);
    if (!d) fprintf(stderr, "test_decoder: %s\n", err);
    return d;
}

static int setup(void **state) {
    (void)state;
    qvk_init();
    g_full = load("q06b-base");
    g_tiny = load("tiny-base");
    return g_full && g_tiny ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    qve_decoder_free(g_full);
    qve_decoder_free(g_tiny);
    return 0;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static void read_npy(const char *name, enum npy_dtype dt, npy_array *a) {
    char path[512];
    snprintf(path, sizeof path, GOLDEN "%s", name);
    npy_load(path, dt, a);
}

/* int64 codes → int frames [n_frames][16]; cb_major: the array is [16, T] (else [T, 16]). */
static int32_t *to_frames(const npy_array *a, int cb_major, int *n_frames) {
    assert_int_equal(a->n_dims, 2);
    int nq = (int)(cb_major ? a->shape[0] : a->shape[1]);
    int t = (int)(cb_major ? a->shape[1] : a->shape[0]);
    assert_int_equal(nq, 16);
    int32_t *f = malloc((size_t)t * nq * sizeof *f);
    assert_non_null(f);
    const int64_t *c = npy_i64(a);
    for (int i = 0; i < t; i++)
        for (int g = 0; g < nq; g++)
            f[(size_t)i * nq + g] = (int)(cb_major ? c[(size_t)g * t + i] : c[(size_t)i * nq + g]);
    *n_frames = t;
    return f;
}

static float *alloc_wav(const qve_decoder *d, int n_frames) {
    size_t n = (size_t)n_frames * qve_decoder_samples_per_frame(d);
    float *wav = malloc((n ? n : 1) * sizeof *wav);
    assert_non_null(wav);
    return wav;
}

static float *decode(const qve_decoder *d, const int32_t *frames, int n) {
    char err[512];
    float *wav = alloc_wav(d, n);
    if (qve_decoder_decode(d, frames, n, wav, err, sizeof err) != 0) fail_msg("%s", err);
    return wav;
}

/* One reference chunk: n frames from a clean state, the first n_ctx of them context. */
static float *decode_chunk(const qve_decoder *d, const int32_t *frames, int n, int n_ctx) {
    char err[512];
    float *wav = alloc_wav(d, n - n_ctx);
    if (qve_decoder_decode_pass(d, frames, n, n_ctx, wav, err, sizeof err) != 0)
        fail_msg("%s", err);
    return wav;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= m)) m = x;
    }
    return m;
}

static double rms(const float *a, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * a[i];
    return sqrt(s / (n ? n : 1));
}

typedef struct {
    float *wav;
    size_t n, cap;
    int n_calls, stop_after;
} collect;

static int on_audio(void *user, const float *pcm, int n) {
    collect *c = user;
    c->n_calls++;
    if (c->stop_after && c->n_calls >= c->stop_after) return 1;
    if (c->n + (size_t)n > c->cap) return 1;
    memcpy(c->wav + c->n, pcm, (size_t)n * sizeof *pcm);
    c->n += (size_t)n;
    return 0;
}

/* Streams frames through a decoder thread (n_threads 1; background: at idle priority, as synth
 * runs it beside generation) or synchronously (0); with pause_us the producer sleeps after each
 * frame, so the thread really waits for frames like behind a talker. A pool, when given, is lent
 * to the stream for frames [lend_from, lend_to) (the producer syncs before taking it back). */
static float *stream_pool(const qve_decoder *d, const int32_t *frames, int n, int n_threads,
                          long pause_us, int background, qvk_pool *pool, int lend_from,
                          int lend_to) {
    char err[512];
    collect c = {0};
    c.cap = (size_t)n * qve_decoder_samples_per_frame(d);
    c.wav = malloc((c.cap ? c.cap : 1) * sizeof(float));
    assert_non_null(c.wav);
    qve_dec_stream *s = qve_dec_stream_start(d, n_threads, on_audio, &c, err, sizeof err);
    if (!s) fail_msg("%s", err);
    if (background) qve_dec_stream_background(s);
    for (int i = 0; i < n; i++) {
        if (pool && i == lend_from) assert_int_equal(qve_dec_stream_set_pool(s, pool), 0);
        if (pool && i == lend_to) {
            assert_int_equal(qve_dec_stream_sync(s), 0);
            assert_int_equal(qve_dec_stream_set_pool(s, NULL), 0);
        }
        assert_int_equal(qve_dec_stream_push(s, frames + (size_t)i * 16), 0);
        if (pause_us > 0) {
            struct timespec ts = {0, pause_us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (qve_dec_stream_finish(s, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.n, c.cap);
    return c.wav;
}

static float *stream_paced(const qve_decoder *d, const int32_t *frames, int n, int n_threads,
                           long pause_us, int background) {
    return stream_pool(d, frames, n, n_threads, pause_us, background, NULL, 0, 0);
}

static float *stream(const qve_decoder *d, const int32_t *frames, int n, int n_threads) {
    return stream_paced(d, frames, n, n_threads, 0, 0);
}

static void check_identical(const char *what, const float *a, const float *b, size_t n) {
    int same = memcmp(a, b, n * sizeof *a) == 0;
    printf("  %-44s %s (max|Δ| = %.3g)\n", what, same ? "bit-identical" : "DIFFERENT",
           max_abs_diff(a, b, n));
    assert_true(same);
}

static void check_golden(const char *what, const float *got, const float *want, size_t n) {
    double m = max_abs_diff(got, want, n);
    printf("  %-44s max|Δ| = %.3g over %zu samples (rms %.3g, tol 1e-4)\n", what, m, n,
           rms(want, n));
    assert_true(m <= 1e-4);
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static int32_t *random_frames(int n, int cb_size) {
    int32_t *f = malloc((size_t)n * 16 * sizeof *f);
    assert_non_null(f);
    for (size_t i = 0; i < (size_t)n * 16; i++) {
        g_rng ^= g_rng << 13;
        g_rng ^= g_rng >> 7;
        g_rng ^= g_rng << 17;
        f[i] = (int)(g_rng % (uint64_t)cb_size);
    }
    return f;
}

/* ---- full size: official golden outputs -------------------------------------------------- */

/* Decodes the golden codes file (cb_major: stored [16, n] instead of [n, 16]) and checks the
 * result against the golden wav file. Returns the decoded wav; *frames (both caller-freed), *n and
 * *n_s receive the frames and the sample count. */
static float *golden_pair(const char *codes_npy, int cb_major, const char *wav_npy,
                          const char *what, int32_t **frames, int *n, size_t *n_s) {
    npy_array codes = {0}, want = {0};
    read_npy(codes_npy, NPY_I64, &codes);
    read_npy(wav_npy, NPY_F32, &want);
    *frames = to_frames(&codes, cb_major, n);
    *n_s = (size_t)*n * qve_decoder_samples_per_frame(g_full);
    assert_int_equal(want.n_elems, *n_s);
    float *wav = decode(g_full, *frames, *n);
    check_golden(what, wav, npy_f32(&want), *n_s);
    npy_free(&codes);
    npy_free(&want);
    return wav;
}

/* dec_codes (16, 50) → dec_wav (96000,); the threaded stream must equal the one-shot bit for bit.
 */
static void test_golden_dec(void **state) {
    (void)state;
    int n, *frames;
    size_t n_s;
    float *wav = golden_pair("dec_codes.npy", 1, "dec_wav.npy", "dec_codes -> dec_wav (50 frames)",
                             &frames, &n, &n_s);
    float *st = stream(g_full, frames, n, 1);
    check_identical("full size: streamed (thread) vs one-shot", st, wav, n_s);
    /* a lent pool splits output channels, never the reduction: 2 threads change nothing */
    qvk_pool *pool = qvk_pool_create(2);
    assert_non_null(pool);
    float *two = alloc_wav(g_full, n);
    char err[256];
    assert_int_equal(qve_decoder_decode_pool(g_full, pool, frames, n, two, err, sizeof err), 0);
    qvk_pool_free(pool);
    check_identical("full size: one-shot on a 2-thread pool vs alone", two, wav, n_s);
    free(two);
    free(st);
    free(wav);
    free(frames);
}

/* CustomVoice run: codes (19, 16) → wav of the public API. */
static void test_golden_cv(void **state) {
    (void)state;
    int n, *frames;
    size_t n_s;
    free(golden_pair("gen_cv_ryan_en_codes.npy", 0, "gen_cv_ryan_en_wav.npy",
                     "gen_cv_ryan_en codes -> wav (19 frames)", &frames, &n, &n_s));
    free(frames);
}

/* ICL run: the reference decodes ref_code (375) + codes (19) = 394 frames with chunked_decode and
 * cuts the first 375·1920 samples. Those samples come from chunk 1 = frames 300..393 with frames
 * 275..299 as context, so decoding exactly that chunk must give the reference audio from its
 * frame 75 on; this checks the chunk formula on real data without decoding all 394 frames. */
static void test_golden_icl_chunk(void **state) {
    (void)state;
    npy_array ref = {0}, gen = {0}, want = {0};
    read_npy("gen_base_icl_en_ref_code.npy", NPY_I64, &ref);
    read_npy("gen_base_icl_en_codes.npy", NPY_I64, &gen);
    read_npy("gen_base_icl_en_wav.npy", NPY_F32, &want);
    int n_ref, n_gen;
    int32_t *fr = to_frames(&ref, 0, &n_ref);
    int32_t *fg = to_frames(&gen, 0, &n_gen);
    int total = n_ref + n_gen, ctx = QVE_DEC_CONTEXT_FRAMES;
    int start = QVE_DEC_CHUNK_FRAMES; /* chunk 1 */
    assert_true(total > start && total <= 2 * QVE_DEC_CHUNK_FRAMES);
    int32_t *all = malloc((size_t)total * 16 * sizeof *all);
    assert_non_null(all);
    memcpy(all, fr, (size_t)n_ref * 16 * sizeof *all);
    memcpy(all + (size_t)n_ref * 16, fg, (size_t)n_gen * 16 * sizeof *all);
    int spf = qve_decoder_samples_per_frame(g_full);
    float *wav = decode_chunk(g_full, all + (size_t)(start - ctx) * 16, total - start + ctx, ctx);
    assert_int_equal(want.n_elems, (size_t)n_gen * spf);
    check_golden("ICL: chunk 1 (frames 275..393) -> wav", wav + (size_t)(n_ref - start) * spf,
                 npy_f32(&want), want.n_elems);
    free(wav);
    free(all);
    free(fr);
    free(fg);
    npy_free(&ref);
    npy_free(&gen);
    npy_free(&want);
}

/* ---- tiny model: streaming and chunking -------------------------------------------------- */

static void test_tiny_stream(void **state) {
    (void)state;
    int n = 61; /* not a multiple of the block: the partial last block is exercised */
    int32_t *f = random_frames(n, qve_decoder_codebook_size(g_tiny));
    size_t n_s = (size_t)n * qve_decoder_samples_per_frame(g_tiny);
    float *one = decode(g_tiny, f, n);
    float *thr = stream(g_tiny, f, n, 1);
    float *syn = stream(g_tiny, f, n, 0);
    check_identical("tiny 61 frames: streamed (thread) vs one-shot", thr, one, n_s);
    check_identical("tiny 61 frames: streamed (sync) vs one-shot", syn, one, n_s);
    float *paced = stream_paced(g_tiny, f, n, 1, 2000, 0);
    check_identical("tiny 61 frames: paced stream (2 ms/frame) vs one-shot", paced, one, n_s);
    float *idle = stream_paced(g_tiny, f, n, 1, 2000, 1);
    check_identical("tiny 61 frames: idle-priority stream vs one-shot", idle, one, n_s);
    free(idle);
    free(paced);
    /* causality: a prefix decodes to the prefix of the audio; bit-identical when it ends on a
     * block boundary (same sgemm shapes), within float rounding otherwise */
    int spf = qve_decoder_samples_per_frame(g_tiny);
    float *pre = decode(g_tiny, f, 32);
    check_identical("tiny: decode(32 frames) vs prefix of decode(61)", pre, one, (size_t)32 * spf);
    free(pre);
    pre = decode(g_tiny, f, 37);
    double m = max_abs_diff(pre, one, (size_t)37 * spf);
    printf("  %-44s max|Δ| = %.3g (tol 1e-5)\n", "tiny: decode(37) vs prefix of decode(61)", m);
    assert_true(m <= 1e-5);
    assert_true(rms(one, n_s) > 1e-4);
    free(pre);
    free(syn);
    free(thr);
    free(one);
    free(f);
}

/* Reference chunked_decode written out directly: chunk k covers frames
 * [start − ctx, min(start + 300, T)) with ctx = 25 if start − 25 > 0 else start, each decoded
 * alone in a single pass (≤ 325 frames), the first ctx·1920 samples dropped, chunks concatenated.
 */
static void test_tiny_chunks(void **state) {
    (void)state;
    int n = 2 * QVE_DEC_CHUNK_FRAMES + 47, spf = qve_decoder_samples_per_frame(g_tiny);
    int32_t *f = random_frames(n, qve_decoder_codebook_size(g_tiny));
    size_t n_s = (size_t)n * spf;
    float *ref = malloc(n_s * sizeof *ref);
    assert_non_null(ref);
    size_t pos = 0;
    int n_chunks = 0;
    for (int start = 0; start < n; n_chunks++) {
        int end = start + QVE_DEC_CHUNK_FRAMES < n ? start + QVE_DEC_CHUNK_FRAMES : n;
        int ctx = start - QVE_DEC_CONTEXT_FRAMES > 0 ? QVE_DEC_CONTEXT_FRAMES : start;
        float *w = decode_chunk(g_tiny, f + (size_t)(start - ctx) * 16, end - start + ctx, ctx);
        memcpy(ref + pos, w, (size_t)(end - start) * spf * sizeof *ref);
        pos += (size_t)(end - start) * spf;
        free(w);
        start = end;
    }
    assert_int_equal(n_chunks, 3);
    assert_int_equal(pos, n_s);
    float *one = decode(g_tiny, f, n);
    float *thr = stream(g_tiny, f, n, 1);
    check_identical("tiny 647 frames: one-shot vs chunk formula", one, ref, n_s);
    check_identical("tiny 647 frames: streamed (thread) vs one-shot", thr, one, n_s);
    float *head = decode(g_tiny, f, QVE_DEC_CHUNK_FRAMES);
    check_identical("tiny: first 300 frames unaffected by chunking", head, one, (size_t)300 * spf);
    free(head);
    free(thr);
    free(one);
    free(ref);
    free(f);
}

/* Exactly 300 and 301 frames: the chunk boundary itself. */
static void test_tiny_boundary(void **state) {
    (void)state;
    int spf = qve_decoder_samples_per_frame(g_tiny);
    int32_t *f = random_frames(301, qve_decoder_codebook_size(g_tiny));
    float *a = decode(g_tiny, f, 301);
    float *b = decode(g_tiny, f, 300);
    check_identical("tiny: decode(300) vs prefix of decode(301)", b, a, (size_t)300 * spf);
    float *c = decode_chunk(g_tiny, f + 275 * 16, 26, 25);
    check_identical("tiny: frame 300 of decode(301) == chunk [275, 301)", a + (size_t)300 * spf, c,
                    (size_t)spf);
    free(a);
    free(b);
    free(c);
    free(f);
}

/* A lent pool splits every stage's output channels: the same samples bit for bit for 2 and 3
 * threads, on the caller's thread or the decoder thread, lent for the whole stream, from the
 * middle (the tail handoff after generation) or for the first blocks only (streaming's start).
 * Full-size shapes (panel-aligned channel splits, sgemm row splits) and the tiny model (channels
 * that are not whole panels: those stages stay on one thread). Later blocks may run on one
 * thread when that measured faster, but the first full and the first shorter block after the
 * pool is lent always use it, so every case below decodes pooled blocks. */
static void test_pool_threads(void **state) {
    (void)state;
    const qve_decoder *ds[] = {g_full, g_tiny};
    const char *names[] = {"full", "tiny"};
    for (int m = 0; m < 2; m++) {
        const qve_decoder *d = ds[m];
        int n = 21; /* blocks of 1, 1, 2, 4, 8 and a partial last one */
        int32_t *f = random_frames(n, qve_decoder_codebook_size(d));
        size_t n_s = (size_t)n * qve_decoder_samples_per_frame(d);
        float *one = decode(d, f, n);
        for (int nt = 2; nt <= 3; nt++) {
            qvk_pool *pool = qvk_pool_create(nt);
            assert_non_null(pool);
            char what[96];
            float *w = stream_pool(d, f, n, 0, 0, 0, pool, 0, n);
            snprintf(what, sizeof what, "%s: %d threads (caller) vs one-shot", names[m], nt);
            check_identical(what, w, one, n_s);
            free(w);
            w = stream_pool(d, f, n, 1, 0, 1, pool, 9, n);
            snprintf(what, sizeof what, "%s: %d threads from frame 9 vs one-shot", names[m], nt);
            check_identical(what, w, one, n_s);
            free(w);
            w = stream_pool(d, f, n, 1, 0, 0, pool, 0, 3);
            snprintf(what, sizeof what, "%s: %d threads for frames < 3 vs one-shot", names[m], nt);
            check_identical(what, w, one, n_s);
            free(w);
            qvk_pool_free(pool);
        }
        free(one);
        free(f);
    }
}

/* The smallest decoder_dim the config allows (16: one channel after the last block): the final
 * conv's [window, 7] product is then larger than every stage's activation, and the state must
 * still hold it (a heap overflow before; the ASan build catches it). A checkpoint like tiny-base
 * with decoder_dim 16, made by mkmodel (test_built). */
static void test_small_dec_dim(void **state) {
    (void)state;
    char dir[] = "/tmp/qv-test-decoder-XXXXXX", cmd[4096], err[512];
    assert_non_null(mkdtemp(dir));
    const char *c = test_cache_dir();
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/cfg/speech_tokenizer && cp %s/tiny-base/*.json %s/cfg/ && "
             "cp %s/tiny-base/speech_tokenizer/*.json %s/cfg/speech_tokenizer/ && "
             "sed -i -E 's/(\"decoder_dim\":[[:space:]]*)96/\\116/' "
             "%s/cfg/speech_tokenizer/config.json && "
             "grep -Eq '\"decoder_dim\":[[:space:]]*16,' %s/cfg/speech_tokenizer/config.json && "
             "%s -t %s/npm/tokenizer-qwen3/package/models -c %s/cfg %s/m > /dev/null",
             dir, c, dir, c, dir, dir, dir, test_built("tools/mkmodel"), c, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/m", dir);
    qvm_ckpt *ck = test_ckpt_open(cmd);
    qve_decoder *d = qve_decoder_load(ck, err, sizeof err);
    qvm_ckpt_free(ck);
    if (!d) fail_msg("%s", err);
    int n = 21; /* blocks of 1, 1, 2, 4, 8 and a partial last one */
    int32_t *f = random_frames(n, qve_decoder_codebook_size(d));
    size_t n_s = (size_t)n * qve_decoder_samples_per_frame(d);
    float *one = decode(d, f, n), *thr = stream(d, f, n, 1);
    for (size_t i = 0; i < n_s; i++)
        assert_true(one[i] >= -1.0f && one[i] <= 1.0f);
    check_identical("decoder_dim 16: streamed (thread) vs one-shot", thr, one, n_s);
    free(one);
    free(thr);
    free(f);
    qve_decoder_free(d);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_errors(void **state) {
    (void)state;
    char err[512] = "";
    int32_t *f = random_frames(5, qve_decoder_codebook_size(g_tiny));
    f[3 * 16 + 7] = qve_decoder_codebook_size(g_tiny);
    float *wav = malloc((size_t)5 * qve_decoder_samples_per_frame(g_tiny) * sizeof *wav);
    assert_non_null(wav);
    assert_int_equal(qve_decoder_decode(g_tiny, f, 5, wav, err, sizeof err), -1);
    printf("  bad code: %s\n", err);
    assert_non_null(strstr(err, "out of range"));

    /* a callback asking to stop ends the stream with an error, for both modes */
    f[3 * 16 + 7] = 0;
    for (int thr = 0; thr <= 1; thr++) {
        collect c = {0};
        c.cap = (size_t)5 * qve_decoder_samples_per_frame(g_tiny);
        c.wav = wav;
        c.stop_after = 1;
        qve_dec_stream *s = qve_dec_stream_start(g_tiny, thr, on_audio, &c, err, sizeof err);
        assert_non_null(s);
        for (int i = 0; i < 5; i++)
            qve_dec_stream_push(s, f + (size_t)i * 16);
        assert_int_equal(qve_dec_stream_finish(s, err, sizeof err), -1);
        assert_non_null(strstr(err, "callback"));
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/no-such-model", test_cache_dir());
    assert_null(qvm_ckpt_open(dir, err, sizeof err));
    printf("  missing model: %s\n", err);
    free(wav);
    free(f);
}

QVT_MAIN(setup, teardown, test_golden_dec, test_golden_cv, test_golden_icl_chunk, test_tiny_stream,
         test_tiny_chunks, test_tiny_boundary, test_pool_threads, test_small_dec_dim, test_errors)
