/* test_synth.c — the public synthesis API (qv_synth) on the tiny synthetic CustomVoice model
 * ($QVOICE_CACHE/tiny-cv): two syntheses on one shared model in two threads give the sequential
 * samples bit for bit; streamed delivery starts with a one-frame block, grows, and equals
 * whole-chunk delivery; a synthesizer given new parameters equals a new one; the guard's
 * semantics once audio went out; cancellation; a weight delta refused on a shared model; a voice
 * of an unrelated checkpoint refused unless forced; voice lookup errors; voices made in memory
 * (from a voice file's bytes, from parts) and saved.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"

static qv_model *g_m;
static char g_cache[1024], g_tmp[256];

typedef struct {
    float *x;
    int64_t n, cap;
    int n_calls, first, largest;
    qv_synth *cancel_after_first; /* qv_synth_cancel from the callback's first call */
} pcm;

static int on_pcm(void *user, const float *x, int n) {
    pcm *p = user;
    test_pcm_append(&p->x, &p->n, &p->cap, x, n);
    if (!p->n_calls++) p->first = n;
    if (n > p->largest) p->largest = n;
    if (p->cancel_after_first) qv_synth_cancel(p->cancel_after_first);
    return 0;
}

typedef struct {
    const char *speaker;
    uint64_t seed;
    int whole;
    pcm out;
    enum qv_status st;
    qv_synth_stats stats;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    qv_params p = qv_model_params(g_m);
    p.seed = j->seed;
    p.max_frames = 20;
    p.n_threads = 2;
    qv_synth *s;
    j->st = qv_synth_new(&s, g_m, &p);
    if (j->st) return NULL;
    qv_synth_request r = qv_synth_default_request();
    r.text = "Two sentences here. And a second one.";
    r.speaker = j->speaker;
    r.max_chunk_chars = 20;
    r.whole_chunks = j->whole;
    j->stats.struct_size = sizeof j->stats;
    j->st = qv_synth_run(s, &r, on_pcm, &j->out, &j->stats);
    qv_synth_free(s);
    return NULL;
}

static int setup(void **st) {
    (void)st;
    snprintf(g_cache, sizeof g_cache, "%s", test_cache_dir());
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/tiny-cv", g_cache);
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qv_synth_%d", (int)getpid());
    if (mkdir(g_tmp, 0700)) return -1;
    if (qv_model_load(&g_m, dir)) {
        fprintf(stderr, "%s\n", qv_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **st) {
    (void)st;
    qv_model_free(g_m);
    return sh("rm -rf %s", g_tmp) ? -1 : 0;
}

/* Two syntheses on one model at once equal the same two run one after the other. */
static void test_concurrent(void **st) {
    (void)st;
    job seq[2] = {{"ryan", 3, 0, {0}, 0, {0}}, {"serena", 9, 0, {0}, 0, {0}}}, par[2];
    memcpy(par, seq, sizeof par);
    for (int i = 0; i < 2; i++) {
        run_job(&seq[i]);
        assert_int_equal(seq[i].st, QV_OK);
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, run_job, &par[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(par[i].st, QV_OK);
        printf("  %s: %lld samples, %d chunks, %d frames; concurrent %s\n", seq[i].speaker,
               (long long)seq[i].out.n, seq[i].stats.n_chunks, seq[i].stats.n_frames,
               par[i].out.n == seq[i].out.n &&
                       !memcmp(par[i].out.x, seq[i].out.x, (size_t)seq[i].out.n * sizeof(float))
                   ? "bit-identical"
                   : "DIFFERENT");
        assert_int_equal(seq[i].stats.n_chunks, 2);
        assert_true(seq[i].out.n > 2 * 19 * QV_SAMPLES_PER_FRAME);
        assert_int_equal(par[i].out.n, seq[i].out.n);
        assert_memory_equal(par[i].out.x, seq[i].out.x, (size_t)seq[i].out.n * sizeof(float));
        free(par[i].out.x);
    }
    assert_int_not_equal(seq[0].out.n == seq[1].out.n &&
                             !memcmp(seq[0].out.x, seq[1].out.x, (size_t)seq[0].out.n * 4),
                         1);
    /* streaming: the first block is one frame less the crossfade window, later ones grow */
    printf("  streamed: %d calls, first %d samples, largest %d\n", seq[0].out.n_calls,
           seq[0].out.first, seq[0].out.largest);
    assert_int_equal(seq[0].out.first, QV_SAMPLES_PER_FRAME - 240);
    assert_true(seq[0].out.largest >= 8 * QV_SAMPLES_PER_FRAME - 240);
    assert_true(seq[0].stats.first_audio_s <= seq[0].stats.total_s);
    /* whole-chunk delivery gives the same samples in fewer, larger calls */
    job w = {"ryan", 3, 1, {0}, 0, {0}};
    run_job(&w);
    assert_int_equal(w.st, QV_OK);
    assert_int_equal(w.out.n, seq[0].out.n);
    assert_memory_equal(w.out.x, seq[0].out.x, (size_t)w.out.n * sizeof(float));
    assert_true(w.out.n_calls < seq[0].out.n_calls);
    free(w.out.x);
    for (int i = 0; i < 2; i++)
        free(seq[i].out.x);
}

/* A synthesizer given new parameters (qv_synth_set_params, as a server slot reuses one) gives
 * the samples of a new synthesizer with them; a thread count or quant it was not built with, or
 * an invalid value, is refused and changes nothing. */
static void test_set_params(void **st) {
    (void)st;
    job fresh[2] = {{"serena", 9, 0, {0}, 0, {0}}, {"ryan", 3, 0, {0}, 0, {0}}};
    for (int i = 0; i < 2; i++) {
        run_job(&fresh[i]);
        assert_int_equal(fresh[i].st, QV_OK);
    }
    qv_params p = qv_model_params(g_m);
    p.seed = 3;
    p.max_frames = 20;
    p.n_threads = 2;
    qv_synth *s;
    assert_int_equal(qv_synth_new(&s, g_m, &p), QV_OK);
    qv_params bad = p;
    bad.n_threads = 1;
    assert_int_equal(qv_synth_set_params(s, &bad), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "n_threads"));
    bad = p;
    bad.quant = QV_QUANT_INT8;
    assert_int_equal(qv_synth_set_params(s, &bad), QV_E_INVALID);
    bad = p;
    bad.temperature = 0;
    assert_int_equal(qv_synth_set_params(s, &bad), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "temperature"));
    for (int i = 0; i < 2; i++) {
        p.seed = fresh[i].seed;
        assert_int_equal(qv_synth_set_params(s, &p), QV_OK);
        qv_synth_request r = qv_synth_default_request();
        r.text = "Two sentences here. And a second one.";
        r.speaker = fresh[i].speaker;
        r.max_chunk_chars = 20;
        pcm out = {0};
        assert_int_equal(qv_synth_run(s, &r, on_pcm, &out, NULL), QV_OK);
        printf("  reused synthesizer, seed %llu: %lld samples, %s\n",
               (unsigned long long)p.seed, (long long)out.n,
               out.n == fresh[i].out.n &&
                       !memcmp(out.x, fresh[i].out.x, (size_t)out.n * sizeof(float))
                   ? "bit-identical to a new one"
                   : "DIFFERENT");
        assert_int_equal(out.n, fresh[i].out.n);
        assert_memory_equal(out.x, fresh[i].out.x, (size_t)out.n * sizeof(float));
        free(out.x);
        free(fresh[i].out.x);
    }
    qv_synth_free(s);
}

/* The synthetic model never ends by itself: the guard's frame budget trips. Streaming: audio has
 * gone out, so the synthesis ends with QV_E_GUARD (no retry); whole chunks: retried in halves
 * first. Cancellation from the callback ends within a frame. */
static void test_guard_and_cancel(void **st) {
    (void)st;
    qv_params p = qv_model_params(g_m);
    qv_synth *s;
    assert_int_equal(qv_synth_new(&s, g_m, &p), QV_OK);
    qv_synth_request r = qv_synth_default_request();
    r.text = "Hi there, you.";
    r.speaker = "ryan";
    pcm out = {0};
    qv_synth_stats ss = {.struct_size = sizeof ss};
    assert_int_equal(qv_synth_run(s, &r, on_pcm, &out, &ss), QV_E_GUARD);
    printf("  streamed: %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "chunk 1/1: runaway guard"));
    assert_non_null(strstr(qv_last_error(), "not retried"));
    assert_true(out.n > 0);
    assert_int_equal(ss.guard_trips, 1);
    assert_string_equal(ss.guard_verdict, "budget");
    r.whole_chunks = 1;
    out.n = 0;
    assert_int_equal(qv_synth_run(s, &r, on_pcm, &out, &ss), QV_E_GUARD);
    printf("  whole chunks: %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "(after splitting it in two)"));
    assert_int_equal(out.n, 0);
    assert_int_equal(ss.guard_trips, 2);

    r.whole_chunks = 0;
    r.guard = 0;
    out.n = 0, out.n_calls = 0;
    out.cancel_after_first = s;
    assert_int_equal(qv_synth_run(s, &r, on_pcm, &out, &ss), QV_E_CANCELLED);
    printf("  cancelled after %d frames\n", ss.n_frames);
    assert_true(out.n_calls <= 2);
    qv_synth_cancel(s); /* nothing runs: no effect on the next synthesis */
    r.max_seconds = 0.4;
    out.cancel_after_first = NULL;
    assert_int_equal(qv_synth_run(s, &r, on_pcm, &out, &ss), QV_OK);
    assert_int_equal(ss.n_frames, 5);
    assert_true(ss.capped);
    free(out.x);
    qv_synth_free(s);
}

/* Voices: a name not found lists the places looked at; a weight delta is refused while the
 * model is shared and applied when it is not. */
static void test_voices(void **st) {
    (void)st;
    qv_voice *v;
    char path[600];
    assert_int_equal(qv_voice_open(&v, "nosuch_voice"), QV_E_VOICE);
    assert_null(v);
    assert_non_null(strstr(qv_last_error(), "voices/nosuch_voice.qvoice"));
    snprintf(path, sizeof path, "%s/h.qvoice", g_tmp);
    assert_int_equal(sh("bin/clone -m %s/tiny-base --target-cv %s/tiny-cv -s 8 "
                        "tests/audio/en_ohenry_chenevert.wav -o %s > /dev/null 2>&1",
                        g_cache, g_cache, path),
                     0);
    assert_int_equal(qv_voice_open(&v, path), QV_OK);
    assert_true(qv_voice_has_wdelta(v));
    assert_int_equal(qv_voice_check(v, g_m, NULL), QV_OK);
    char dir[1100];
    qv_model *m;
    snprintf(dir, sizeof dir, "%s/tiny-cv", g_cache);
    assert_int_equal(qv_model_load(&m, dir), QV_OK);
    qv_params p = qv_model_params(m);
    p.max_frames = 4;
    qv_synth *a, *b;
    assert_int_equal(qv_synth_new(&a, m, &p), QV_OK);
    assert_int_equal(qv_synth_new(&b, m, &p), QV_OK);
    qv_synth_request r = qv_synth_default_request();
    r.text = "Hi.";
    r.voice = v;
    qv_synth_stats ss = {.struct_size = sizeof ss};
    assert_int_equal(qv_synth_run(a, &r, NULL, NULL, &ss), QV_E_UNSUPPORTED);
    printf("  %s\n", qv_last_error());
    assert_string_equal(qv_model_type(m), "custom_voice");
    qv_synth_free(b);
    assert_int_equal(qv_synth_run(a, &r, NULL, NULL, &ss), QV_OK);
    assert_true(ss.wdelta_applied);
    assert_string_equal(qv_model_type(m), "base");
    assert_int_equal(qv_synth_run(a, &r, NULL, NULL, &ss), QV_OK); /* applied once */
    qv_synth_free(a);
    qv_model_free(m);

    /* an unrelated checkpoint of the same size (tiny-base's config, another seed): the voice is
       foreign there (without its delta, which names tiny-cv); used only when forced */
    snprintf(dir, sizeof dir, "%s/other-seed", g_tmp);
    assert_int_equal(sh("%s -t %s/npm/tokenizer-qwen3/package/models -c "
                        "tests/golden/configs/q06b-base --tiny --seed-model 9 %s > /dev/null",
                        test_built("tools/mkmodel"), g_cache, dir),
                     0);
    assert_int_equal(qv_model_load(&m, dir), QV_OK);
    assert_int_equal(qv_synth_new(&a, m, &p), QV_OK);
    r.use_wdelta = 0;
    r.codes_only = 1;
    assert_int_equal(qv_synth_run(a, &r, NULL, NULL, &ss), QV_E_FOREIGN_VOICE);
    printf("  %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "unrelated"));
    r.force_voice = 1;
    assert_int_equal(qv_synth_run(a, &r, NULL, NULL, &ss), QV_OK);
    assert_non_null(strstr(ss.warning, "unrelated"));
    assert_int_equal(ss.n_frames, 4);
    qv_synth_free(a);
    qv_model_free(m);
    qv_voice_free(v);
}

/* A voice without a file: the bytes of a voice file (qv_voice_open_memory) and the parts a clone
 * stores (qv_voice_from_parts) give the file's x-vector, ICL codes and transcript; a parts voice
 * saved and reopened keeps them; bad bytes and bad parts are refused naming what is wrong. */
static void test_voice_in_memory(void **st) {
    (void)st;
    char path[600], saved[600];
    snprintf(path, sizeof path, "%s/icl.qvoice", g_tmp);
    snprintf(saved, sizeof saved, "%s/parts.qvoice", g_tmp);
    assert_int_equal(sh("bin/clone -m %s/tiny-base -s 8 -t 'One dollar and eighty seven cents. "
                        "That was all. And sixty cents of it was in pennies saved one and two "
                        "at a time.' tests/audio/en_ohenry_chenevert.wav -o %s > /dev/null 2>&1",
                        g_cache, path),
                     0);
    qv_voice *file, *mem, *parts, *back;
    char *bytes;
    size_t n;
    assert_int_equal(qv_voice_open(&file, path), QV_OK);
    assert_int_equal(qv_file_read(path, 1 << 26, &bytes, &n), QV_OK);
    assert_int_equal(qv_voice_open_memory(&mem, bytes, n, "item"), QV_OK);
    assert_int_equal(qv_voice_open_memory(&back, bytes, n / 2, "half"), QV_E_VOICE);
    assert_null(back);
    assert_non_null(strstr(qv_last_error(), "half"));
    qv_free(bytes); /* the voice keeps its own copy */
    assert_string_equal(qv_voice_path(mem), "item");
    int dim, dim2, nf, nf2;
    const float *x = qv_voice_xvector(file, &dim);
    const int32_t *c = qv_voice_ref_codes(file, &nf);
    assert_int_equal(dim, 64);
    assert_true(nf > 10 && qv_voice_has_icl(mem));
    assert_memory_equal(qv_voice_xvector(mem, &dim2), x, dim * sizeof *x);
    assert_memory_equal(qv_voice_ref_codes(mem, &nf2), c, (size_t)nf * 16 * sizeof *c);
    assert_int_equal(nf2, nf);
    assert_string_equal(qv_voice_ref_text(mem), qv_voice_ref_text(file));

    assert_int_equal(qv_voice_from_parts(&parts, x, dim, c, nf, qv_voice_ref_text(file), "english"),
                     QV_OK);
    assert_true(qv_voice_has_icl(parts));
    /* ids (docs/provenance.md): a file and its bytes in memory share one, the file's SHA-256;
     * a voice of parts is named by what it is made of */
    assert_int_equal(strlen(qv_voice_id(file)), 64);
    assert_string_equal(qv_voice_id(mem), qv_voice_id(file));
    assert_int_equal(sh("test \"$(sha256sum < %s | cut -c1-64)\" = %s", path, qv_voice_id(file)),
                     0);
    assert_int_equal(strncmp(qv_voice_id(parts), "parts:", 6), 0);
    assert_int_equal(strlen(qv_voice_id(parts)), 70);
    assert_string_equal(qv_voice_language(parts), "english");
    assert_int_equal(qv_voice_save(parts, saved), QV_OK);
    assert_int_equal(qv_voice_open(&back, saved), QV_OK);
    assert_memory_equal(qv_voice_xvector(back, &dim2), x, dim * sizeof *x);
    assert_memory_equal(qv_voice_ref_codes(back, &nf2), c, (size_t)nf * 16 * sizeof *c);
    assert_string_equal(qv_voice_ref_text(back), qv_voice_ref_text(file));
    assert_null(qv_voice_style(back, 0, NULL, NULL));
    qv_voice_free(back);

    int32_t bad[16] = {0};
    bad[5] = 2048;
    assert_int_equal(qv_voice_from_parts(&back, x, dim, bad, 1, "x", NULL), QV_E_INVALID);
    assert_null(back);
    assert_non_null(strstr(qv_last_error(), "2048"));
    assert_int_equal(qv_voice_from_parts(&back, x, dim, c, nf, NULL, NULL), QV_E_INVALID);
    assert_int_equal(qv_voice_from_parts(&back, x, dim, NULL, 0, "text alone", NULL), QV_E_INVALID);
    float nan_x[64];
    memcpy(nan_x, x, sizeof nan_x);
    nan_x[3] = NAN;
    assert_int_equal(qv_voice_from_parts(&back, nan_x, dim, NULL, 0, NULL, NULL), QV_E_INVALID);
    assert_int_equal(qv_voice_from_parts(&back, x, dim, NULL, 0, NULL, NULL), QV_OK);
    assert_false(qv_voice_has_icl(back));
    assert_null(qv_voice_ref_codes(back, &nf2));
    assert_int_equal(nf2, 0);
    qv_voice_free(back);
    qv_voice_free(parts);
    qv_voice_free(mem);
    qv_voice_free(file);
}

QVT_MAIN(setup, teardown, test_concurrent, test_set_params, test_guard_and_cancel, test_voices,
         test_voice_in_memory)
