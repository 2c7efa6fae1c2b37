/* test_cloner.c — the public cloning API (include/qvoice.h) on the tiny synthetic Base
 * ($QVOICE_CACHE/tiny-base): a non-Base model refused, in-memory PCM cloned with ICL (JSON report
 * numbers vs the voice file written), analysis only (out_path NULL), a transcript that does not
 * fit refused with QV_E_INVALID and nothing written, eight concurrent runs on one cloner (five
 * rounds) equal to a single run bit for bit, and qv_clone_similarity. Includes only public
 * headers and cJSON.
 */
#include <cJSON.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <sndfile.h>
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
#include "voicefmt/qvf.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"

#define CLIP "tests/audio/en_ohenry_chenevert.wav"
#define TEXT12                                                                                     \
    "One dollar and eighty-seven cents. That was all. And sixty cents of it was in "               \
    "pennies, saved one and two at a time by bulldozing the grocer."

static char g_tiny[1024], g_cv[1024], g_dir[128];
static float *g_pcm; /* the bundled clip, 24 kHz mono */
static int64_t g_n;
static qv_cloner *g_c;

static int setup(void **state) {
    (void)state;
    const char *cache = test_cache_dir();
    snprintf(g_tiny, sizeof g_tiny, "%s/tiny-base", cache);
    snprintf(g_cv, sizeof g_cv, "%s/tiny-cv", cache);
    snprintf(g_dir, sizeof g_dir, "/tmp/test_cloner_%d", (int)getpid());
    mkdir(g_dir, 0700);
    SF_INFO info = {0};
    SNDFILE *sf = sf_open(CLIP, SFM_READ, &info);
    if (!sf || info.channels != 1 || info.samplerate != 24000) return -1;
    g_pcm = malloc(sizeof(float) * (size_t)info.frames);
    g_n = sf_readf_float(sf, g_pcm, info.frames);
    sf_close(sf);
    if (qv_cloner_load(&g_c, g_tiny, 2)) {
        fprintf(stderr, "%s (run make models)\n", qv_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    qv_cloner_free(g_c);
    free(g_pcm);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return 0;
}

static double jnum(const cJSON *j, const char *dotted) {
    char key[256];
    snprintf(key, sizeof key, "%s", dotted);
    for (char *k = strtok(key, "."); k && j; k = strtok(NULL, "."))
        j = cJSON_GetObjectItemCaseSensitive(j, k);
    return j && cJSON_IsNumber(j) ? j->valuedouble
           : j && cJSON_IsBool(j) ? (double)cJSON_IsTrue(j)
                                  : NAN;
}

static qv_clone_request pcm_request(int64_t n, const char *text) {
    qv_clone_request r = qv_clone_default_request();
    r.pcm = g_pcm, r.n_samples = n, r.sample_rate_hz = 24000;
    r.ref_text = text;
    r.name = "api";
    return r;
}

static void test_not_base(void **state) {
    (void)state;
    qv_cloner *c = (qv_cloner *)1;
    assert_int_equal(qv_cloner_load(&c, g_cv, 1), QV_E_MODEL);
    assert_null(c);
    assert_non_null(strstr(qv_last_error(), "Base model"));
}

static void test_pcm_icl(void **state) {
    (void)state;
    char out[256], err[512], *rep = NULL;
    snprintf(out, sizeof out, "%s/api.qvoice", g_dir);
    qv_clone_request r = pcm_request(12 * 24000, TEXT12);
    assert_int_equal(qv_clone_run(g_c, &r, out, &rep), QV_OK);
    cJSON *j = cJSON_Parse(rep);
    assert_non_null(j);
    printf(
        "  12 s from memory: %g ICL frames, span %.2f-%.2f s, %.1f letters/voiced s, %.1f LUFS\n",
        jnum(j, "icl_frames"), jnum(j, "hygiene.icl_window.start_s"),
        jnum(j, "hygiene.icl_window.end_s"), jnum(j, "hygiene.transcript.units_per_voiced_s"),
        jnum(j, "loudness_lufs"));
    assert_true(jnum(j, "ok") == 1);
    qvf_voice *v = NULL;
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    assert_int_equal(v->n_frames, (uint32_t)jnum(j, "icl_frames"));
    assert_int_equal(v->enc_dim, (uint32_t)jnum(j, "xvector_dim"));
    assert_string_equal(v->transcript, TEXT12);
    assert_string_equal(qvf_meta_get(v, "name"), "api");
    assert_true(v->tpad_hidden > 0 && v->wovr_h > 0);
    qvf_voice_free(v);
    cJSON_Delete(j);
    qv_free(rep);
    /* analysis only: the same report, nothing written */
    char none[256];
    snprintf(none, sizeof none, "%s/none.qvoice", g_dir);
    r.icl_window = QV_ICL_AUTO, r.ref_text = NULL;
    r.n_samples = g_n;
    assert_int_equal(qv_clone_run(g_c, &r, NULL, &rep), QV_OK);
    j = cJSON_Parse(rep);
    double a = jnum(j, "hygiene.icl_window.start_s"), b = jnum(j, "hygiene.icl_window.end_s");
    printf("  auto span of the 30 s clip: %.2f-%.2f s\n", a, b);
    assert_true(b - a >= 10 - 0.02 && b - a <= 15 + 0.02);
    assert_true(isnan(jnum(j, "file_bytes")));
    cJSON_Delete(j);
    qv_free(rep);
}

static void test_misfit(void **state) {
    (void)state;
    char out[256], *rep = NULL;
    snprintf(out, sizeof out, "%s/misfit.qvoice", g_dir);
    qv_clone_request r = pcm_request(12 * 24000, "Yes.");
    assert_int_equal(qv_clone_run(g_c, &r, out, &rep), QV_E_INVALID);
    printf("  %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "far too short"));
    assert_int_equal(access(out, F_OK), -1);
    cJSON *j = cJSON_Parse(rep);
    assert_true(jnum(j, "ok") == 0);
    assert_true(jnum(j, "hygiene.transcript.plausible") == 0);
    cJSON_Delete(j);
    qv_free(rep);
    r = pcm_request(12 * 24000, NULL);
    r.icl_window = QV_ICL_RANGE, r.icl_start_s = 5, r.icl_end_s = 4;
    assert_int_equal(qv_clone_run(g_c, &r, out, NULL), QV_E_INVALID);
}

typedef struct {
    char out[256];
    enum qv_status st;
} job;

static void *clone_job(void *p) {
    job *jb = p;
    qv_clone_request r = pcm_request(10 * 24000, TEXT12);
    jb->st = qv_clone_run(g_c, &r, jb->out, NULL);
    return NULL;
}

/* N_JOBS runs at once on one cloner (hygiene on: each run also makes mel contexts for its pool's
 * threads), N_ROUNDS times: every x-vector and every code the same bits as a run alone. Unlocked
 * FFTW planning can corrupt the heap here only when two plans are made at the same instant, which
 * is rare on a loaded machine; test_fft makes that deterministic. make tsan runs this too. */
#define N_JOBS 8
#define N_ROUNDS 5
static void test_concurrent(void **state) {
    (void)state;
    job jobs[N_JOBS + 1];
    pthread_t th[N_JOBS];
    char err[512];
    for (int i = 0; i <= N_JOBS; i++)
        snprintf(jobs[i].out, sizeof jobs[i].out, "%s/c%d.qvoice", g_dir, i);
    clone_job(&jobs[N_JOBS]);
    qvf_voice *alone;
    assert_int_equal(jobs[N_JOBS].st, QV_OK);
    assert_int_equal(qvf_read_file(jobs[N_JOBS].out, 0, &alone, err, sizeof err), 0);
    for (int round = 0; round < N_ROUNDS; round++) {
        for (int i = 0; i < N_JOBS; i++)
            assert_int_equal(pthread_create(&th[i], NULL, clone_job, &jobs[i]), 0);
        for (int i = 0; i < N_JOBS; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < N_JOBS; i++) {
            qvf_voice *v;
            assert_int_equal(jobs[i].st, QV_OK);
            assert_int_equal(qvf_read_file(jobs[i].out, 0, &v, err, sizeof err), 0);
            assert_memory_equal(v->xvector, alone->xvector, sizeof(float) * alone->enc_dim);
            assert_int_equal(v->n_frames, alone->n_frames);
            assert_memory_equal(v->codes, alone->codes, 2 * 16 * (size_t)alone->n_frames);
            qvf_voice_free(v);
        }
    }
    qvf_voice_free(alone);
    /* the similarity of a voice with itself and with its audio's x-vector */
    double cs = 0;
    char *rep = NULL;
    assert_int_equal(
        qv_clone_similarity(NULL, jobs[0].out, jobs[1].out, 30, &cs, &rep), QV_OK);
    assert_true(fabs(cs - 1.0) < 1e-12);
    qv_free(rep);
    assert_int_equal(qv_clone_similarity(NULL, jobs[0].out, CLIP, 30, &cs, NULL),
                     QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "needs a Base model"));
    assert_int_equal(qv_clone_similarity(g_c, jobs[0].out, CLIP, 30, &cs, NULL),
                     QV_OK);
    printf("  voice (10 s, hygiene) vs the raw 30 s clip: cosine %.4f\n", cs);
    assert_true(cs > 0.5 && cs < 1.0);
}

QVT_MAIN(setup, teardown, test_not_base, test_pcm_icl, test_misfit, test_concurrent)
