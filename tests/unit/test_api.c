/* test_api.c — the public API's conventions (include/qvoice.h): the ABI of every public struct
 * (size and each field's offset on LP64, so a layout change is a deliberate edit here, not an
 * accident), struct_size set by the default functions and checked on entry (QV_E_ABI naming the
 * struct), detail from the creation functions, qv_last_error per thread, qv_file_read's statuses
 * and qv_free. Uses only the public header (and the tests' model loader).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"

/* ==== layout ================================================================================= */

/* sizeof and offsetof of x86-64 / AArch64 (LP64). Changing a public struct changes its ABI:
 * append fields, bump the version, and update this table in the same commit. */
#define QV_ABI_TABLE(S, F) \
    S(qv_params, 64) \
    F(qv_params, struct_size, 0) \
    F(qv_params, n_threads, 4) \
    F(qv_params, seed, 8) \
    F(qv_params, do_sample, 16) \
    F(qv_params, temperature, 20) \
    F(qv_params, top_k, 24) \
    F(qv_params, top_p, 28) \
    F(qv_params, repetition_penalty, 32) \
    F(qv_params, subtalker_do_sample, 36) \
    F(qv_params, subtalker_temperature, 40) \
    F(qv_params, subtalker_top_k, 44) \
    F(qv_params, subtalker_top_p, 48) \
    F(qv_params, max_frames, 52) \
    F(qv_params, quant, 56) \
    F(qv_params, ignore_eos, 60) \
    S(qv_text_bridge, 56) \
    F(qv_text_bridge, struct_size, 0) \
    F(qv_text_bridge, fc1_weight, 8) \
    F(qv_text_bridge, fc1_bias, 16) \
    F(qv_text_bridge, fc2_weight, 24) \
    F(qv_text_bridge, fc2_bias, 32) \
    F(qv_text_bridge, codec_rows, 40) \
    F(qv_text_bridge, n_codec_rows, 48) \
    S(qv_request, 152) \
    F(qv_request, struct_size, 0) \
    F(qv_request, text, 8) \
    F(qv_request, instruct, 16) \
    F(qv_request, ref_text, 24) \
    F(qv_request, text_ids, 32) \
    F(qv_request, n_text_ids, 40) \
    F(qv_request, language, 48) \
    F(qv_request, speaker, 56) \
    F(qv_request, speaker_vector, 64) \
    F(qv_request, n_speaker_vector, 72) \
    F(qv_request, instruct_ids, 80) \
    F(qv_request, n_instruct_ids, 88) \
    F(qv_request, ref_codes, 96) \
    F(qv_request, n_ref_frames, 104) \
    F(qv_request, ref_text_ids, 112) \
    F(qv_request, n_ref_text_ids, 120) \
    F(qv_request, text_special, 128) \
    F(qv_request, bridge, 136) \
    F(qv_request, layout, 144) \
    F(qv_request, strict_vocab, 148) \
    S(qv_synth_request, 168) \
    F(qv_synth_request, struct_size, 0) \
    F(qv_synth_request, text, 8) \
    F(qv_synth_request, language, 16) \
    F(qv_synth_request, speaker, 24) \
    F(qv_synth_request, voice, 32) \
    F(qv_synth_request, voice_path, 40) \
    F(qv_synth_request, instruct, 48) \
    F(qv_synth_request, use_icl, 56) \
    F(qv_synth_request, use_wdelta, 60) \
    F(qv_synth_request, force_voice, 64) \
    F(qv_synth_request, force_instruct, 68) \
    F(qv_synth_request, strict_vocab, 72) \
    F(qv_synth_request, max_chunk_chars, 76) \
    F(qv_synth_request, guard, 80) \
    F(qv_synth_request, trim_lead, 84) \
    F(qv_synth_request, max_seconds, 88) \
    F(qv_synth_request, codes_only, 96) \
    F(qv_synth_request, whole_chunks, 100) \
    F(qv_synth_request, verify_model_dir, 104) \
    F(qv_synth_request, style, 112) \
    F(qv_synth_request, style_strength, 120) \
    F(qv_synth_request, style_dirs, 128) \
    F(qv_synth_request, n_style_dirs, 136) \
    F(qv_synth_request, style_table, 144) \
    F(qv_synth_request, strict_markup, 152) \
    F(qv_synth_request, speed, 160) \
    S(qv_style_dir, 32) \
    F(qv_style_dir, struct_size, 0) \
    F(qv_style_dir, name, 8) \
    F(qv_style_dir, direction, 16) \
    F(qv_style_dir, dim, 24) \
    F(qv_style_dir, strength, 28) \
    S(qv_synth_stats, 616) \
    F(qv_synth_stats, struct_size, 0) \
    F(qv_synth_stats, n_chunks, 4) \
    F(qv_synth_stats, n_frames, 8) \
    F(qv_synth_stats, n_samples, 16) \
    F(qv_synth_stats, audio_seconds, 24) \
    F(qv_synth_stats, first_audio_s, 32) \
    F(qv_synth_stats, total_s, 40) \
    F(qv_synth_stats, rtf, 48) \
    F(qv_synth_stats, capped, 56) \
    F(qv_synth_stats, guard_trips, 60) \
    F(qv_synth_stats, guard_verdict, 64) \
    F(qv_synth_stats, wdelta_applied, 80) \
    F(qv_synth_stats, n_verify, 84) \
    F(qv_synth_stats, verify_min, 88) \
    F(qv_synth_stats, verify_mean, 96) \
    F(qv_synth_stats, warning, 104) \
    S(qv_chunk_info, 48) \
    F(qv_chunk_info, struct_size, 0) \
    F(qv_chunk_info, index, 4) \
    F(qv_chunk_info, text_offset, 8) \
    F(qv_chunk_info, codes, 16) \
    F(qv_chunk_info, n_frames, 24) \
    F(qv_chunk_info, verify, 32) \
    F(qv_chunk_info, text_chunk, 40) \
    F(qv_chunk_info, n_text_chunks, 44) \
    S(qv_clone_request, 168) \
    F(qv_clone_request, struct_size, 0) \
    F(qv_clone_request, audio_path, 8) \
    F(qv_clone_request, pcm, 16) \
    F(qv_clone_request, n_samples, 24) \
    F(qv_clone_request, sample_rate_hz, 32) \
    F(qv_clone_request, ref_text, 40) \
    F(qv_clone_request, language, 48) \
    F(qv_clone_request, name, 56) \
    F(qv_clone_request, consent, 64) \
    F(qv_clone_request, max_seconds, 72) \
    F(qv_clone_request, hygiene, 80) \
    F(qv_clone_request, with_wovr, 84) \
    F(qv_clone_request, target_cv_dir, 88) \
    F(qv_clone_request, icl_window, 96) \
    F(qv_clone_request, icl_start_s, 104) \
    F(qv_clone_request, icl_end_s, 112) \
    F(qv_clone_request, allow_xvector_fallback, 120) \
    F(qv_clone_request, speaker_threshold, 128) \
    F(qv_clone_request, plot_path, 136) \
    F(qv_clone_request, consent_speaker, 144) \
    F(qv_clone_request, consent_scope, 152) \
    F(qv_clone_request, consent_recording, 160) \
    S(qv_jobs_options, 192) \
    F(qv_jobs_options, struct_size, 0) \
    F(qv_jobs_options, request, 8) \
    F(qv_jobs_options, loudness_lufs, 176) \
    F(qv_jobs_options, watermark, 184) \
    S(qv_pcm_buffer, 40) \
    F(qv_pcm_buffer, struct_size, 0) \
    F(qv_pcm_buffer, pcm, 8) \
    F(qv_pcm_buffer, n, 16) \
    F(qv_pcm_buffer, cap, 24) \
    F(qv_pcm_buffer, failed, 32) \
    S(qv_provenance, 216) \
    F(qv_provenance, struct_size, 0) \
    F(qv_provenance, watermark, 4) \
    F(qv_provenance, voice_id, 8) \
    F(qv_provenance, model_fingerprint, 137) \
    F(qv_provenance, utc, 208)


static void test_layout(void **state) {
    (void)state;
#if UINTPTR_MAX == 0xffffffffffffffffu
    int n = 0;
#define S(type, size)                                                                              \
    assert_int_equal(sizeof(type), size);                                                          \
    n++;
#define F(type, field, off) assert_int_equal(offsetof(type, field), off);
    QV_ABI_TABLE(S, F)
#undef S
#undef F
    printf("  %d public structs: sizes and field offsets as recorded\n", n);
    assert_int_equal(n, 11);
#else
    skip();
#endif
}

/* ==== struct_size ============================================================================ */

static qv_model *g_m; /* tiny CustomVoice */

static int setup(void **state) {
    (void)state;
    g_m = test_model_load("tiny-cv");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    qv_model_free(g_m);
    return 0;
}

static void expect_abi(enum qv_status st, const char *type) {
    printf("  %s\n", qv_last_error());
    assert_int_equal(st, QV_E_ABI);
    assert_non_null(strstr(qv_last_error(), type));
    assert_non_null(strstr(qv_last_error(), "struct_size"));
}

static void test_defaults_set_size(void **state) {
    (void)state;
    assert_int_equal(qv_default_params().struct_size, sizeof(qv_params));
    assert_int_equal(qv_model_params(g_m).struct_size, sizeof(qv_params));
    assert_int_equal(qv_default_request().struct_size, sizeof(qv_request));
    assert_int_equal(qv_synth_default_request().struct_size, sizeof(qv_synth_request));
    assert_int_equal(qv_clone_default_request().struct_size, sizeof(qv_clone_request));
    const qv_jobs_options o = qv_jobs_default_options();
    assert_int_equal(o.struct_size, sizeof(qv_jobs_options));
    assert_int_equal(o.request.struct_size, sizeof(qv_synth_request));
    assert_int_equal(qv_provenance_default().struct_size, sizeof(qv_provenance));
    assert_int_equal(qv_provenance_of(g_m, NULL, "ryan").struct_size, sizeof(qv_provenance));
}

static void on_chunk(void *user, const qv_chunk_info *c) {
    *(uint32_t *)user = c->struct_size;
}

static void test_size_checked(void **state) {
    (void)state;
    qv_params p = qv_model_params(g_m);
    p.struct_size = 0; /* e.g. built with = {0} instead of qv_model_params */
    qv_session *s = (qv_session *)1;
    expect_abi(qv_session_new(&s, g_m, &p), "qv_params");
    assert_null(s);
    qv_synth *y = (qv_synth *)1;
    p.struct_size = sizeof p + 8; /* a newer header's struct */
    expect_abi(qv_synth_new(&y, g_m, &p), "qv_params");
    assert_null(y);

    p = qv_model_params(g_m);
    p.max_frames = 2;
    assert_int_equal(qv_session_new(&s, g_m, &p), QV_OK);
    qv_request r = qv_default_request();
    r.text = "Hi.", r.speaker = "ryan";
    r.struct_size--;
    expect_abi(qv_session_start(s, &r), "qv_request");
    r.struct_size++;
    qv_text_bridge b;
    memset(&b, 0, sizeof b);
    r.bridge = &b;
    expect_abi(qv_session_start(s, &r), "qv_text_bridge");
    p.struct_size = 4;
    expect_abi(qv_session_set_params(s, &p), "qv_params");
    qv_session_free(s);

    p = qv_model_params(g_m);
    p.max_frames = 2;
    assert_int_equal(qv_synth_new(&y, g_m, &p), QV_OK);
    qv_synth_request q = qv_synth_default_request();
    q.text = "Hi.", q.speaker = "ryan", q.codes_only = 1;
    qv_synth_stats st;
    memset(&st, 0, sizeof st); /* struct_size left 0 */
    expect_abi(qv_synth_run(y, &q, NULL, NULL, &st), "qv_synth_stats");
    q.struct_size = 8;
    expect_abi(qv_synth_run(y, &q, NULL, NULL, NULL), "qv_synth_request");
    /* right sizes: it runs, and the chunk callback gets a qv_chunk_info of the library's size */
    q = qv_synth_default_request();
    q.text = "Hi.", q.speaker = "ryan", q.codes_only = 1, q.guard = 0;
    st.struct_size = sizeof st;
    uint32_t chunk_size = 0;
    qv_synth_set_chunk_fn(y, on_chunk, &chunk_size);
    assert_int_equal(qv_synth_run(y, &q, NULL, NULL, &st), QV_OK);
    assert_int_equal(st.struct_size, sizeof st);
    assert_true(st.n_frames > 0);
    assert_int_equal(chunk_size, sizeof(qv_chunk_info));
    qv_synth_free(y);

    qv_clone_request c = qv_clone_default_request();
    c.struct_size = 0;
    char *report = (char *)1;
    expect_abi(qv_clone_run(NULL, &c, NULL, &report), "qv_clone_request");
    assert_null(report);

    p = qv_model_params(g_m);
    qv_jobs_options o = qv_jobs_default_options();
    qv_jobs *j = (qv_jobs *)1;
    o.struct_size = 0;
    expect_abi(qv_jobs_new(&j, g_m, &p, &o), "qv_jobs_options");
    assert_null(j);
    o = qv_jobs_default_options();
    o.request.struct_size--;
    expect_abi(qv_jobs_new(&j, g_m, &p, &o), "qv_synth_request");
    o = qv_jobs_default_options(), p.struct_size = 0;
    expect_abi(qv_jobs_new(&j, g_m, &p, &o), "qv_params");

    qv_pcm_buffer k = {0}; /* struct_size left 0: the collector stops and says why */
    const float x[2] = {0};
    assert_int_equal(qv_pcm_collect(&k, x, 2), 1);
    assert_true(k.failed);
    assert_null(k.pcm);
    expect_abi(QV_E_ABI, "qv_pcm_buffer");
    k = (qv_pcm_buffer){.struct_size = sizeof k};
    assert_int_equal(qv_pcm_collect(&k, x, 2), 0);
    assert_int_equal(k.n, 2);
    qv_free(k.pcm);

    memset(&st, 0, sizeof st);
    assert_null(qv_synth_summary_json("x.wav", 1, &st, 0));
    expect_abi(QV_E_ABI, "qv_synth_stats");
}

/* ==== errors ================================================================================= */

static void test_creation_detail(void **state) {
    (void)state;
    qv_params p = qv_model_params(g_m);
    p.do_sample = 1, p.temperature = 0;
    qv_session *s = (qv_session *)1;
    assert_int_equal(qv_session_new(&s, g_m, &p), QV_E_INVALID);
    assert_null(s);
    printf("  qv_session_new: %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "temperature"));
    p = qv_model_params(g_m);
    p.n_threads = 1000;
    qv_synth *y = (qv_synth *)1;
    assert_int_equal(qv_synth_new(&y, g_m, &p), QV_E_INVALID);
    assert_null(y);
    printf("  qv_synth_new: %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "n_threads: expected 1..256, found 1000"));
    qv_model *m = (qv_model *)1;
    assert_int_equal(qv_model_load(&m, "/nonexistent/model"), QV_E_MODEL);
    assert_null(m);
    assert_non_null(strstr(qv_last_error(), "/nonexistent/model"));
    assert_string_equal(qv_strerror(QV_E_ABI),
                        "a struct's struct_size does not match this library's qvoice.h");
    assert_string_equal(qv_strerror((enum qv_status)QV_STATUS_COUNT), "unknown status");
}

static void *fail_elsewhere(void *arg) {
    (void)arg;
    qv_voice *v;
    enum qv_status st = qv_voice_open(&v, "other_thread_voice");
    return (void *)(intptr_t)(st == QV_E_VOICE && strstr(qv_last_error(), "other_thread_voice"));
}

static void test_last_error_per_thread(void **state) {
    (void)state;
    qv_voice *v;
    assert_int_equal(qv_voice_open(&v, "this_thread_voice"), QV_E_VOICE);
    pthread_t t;
    void *ok = NULL;
    assert_int_equal(pthread_create(&t, NULL, fail_elsewhere, NULL), 0);
    assert_int_equal(pthread_join(t, &ok), 0);
    assert_true(ok != NULL);
    /* the other thread's failure did not touch this thread's detail */
    assert_non_null(strstr(qv_last_error(), "this_thread_voice"));
    assert_null(strstr(qv_last_error(), "other_thread_voice"));
}

static void test_file_read(void **state) {
    (void)state;
    char path[] = "/tmp/qv_test_api_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello", 5), 5);
    close(fd);
    char *data = (char *)1;
    size_t n = 0;
    assert_int_equal(qv_file_read(path, 100, &data, &n), QV_OK);
    assert_int_equal(n, 5);
    assert_string_equal(data, "hello");
    qv_free(data);
    assert_int_equal(qv_file_read(path, 3, &data, &n), QV_E_LIMIT);
    assert_null(data);
    assert_non_null(strstr(qv_last_error(), path));
    unlink(path);
    assert_int_equal(qv_file_read(path, 100, &data, &n), QV_E_IO);
    assert_null(data);
    assert_non_null(strstr(qv_last_error(), path));
    qv_free(NULL);
}

QVT_MAIN(setup, teardown, test_layout, test_defaults_set_size, test_size_checked,
         test_creation_detail, test_last_error_per_thread, test_file_read)
