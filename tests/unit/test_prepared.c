/* test_prepared.c — the prepared-weights cache (checkpoint/prepared.h) on the tiny models: a
 * speech decoder and an int8 or q4 view mapped from the cache compute exactly what freshly prepared
 * ones do; a damaged or foreign file is ignored and replaced; saving removes the files of
 * checkpoints that are gone; QVOICE_CACHE="" turns it off.
 * The cache goes to this test's scratch directory (QVOICE_CACHE is pointed there once the model
 * directories are named).
 */
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

#include "checkpoint/ckpt.h"
#include "tests/unit/helpers/models.h"

#include "checkpoint/prepared.h"
#include "engine/model.h"
#include "engine/speech_decoder.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/tmpdir.h"
#include "tests/unit/helpers/run.h"

#define N_FRAMES 12

static char g_model[1024];

static int setup(void **state) {
    const char *c = test_cache_dir();
    snprintf(g_model, sizeof g_model, "%s/tiny-cv", c);
    qvk_init();
    if (tmpdir_setup(state)) return -1;
    return setenv("QVOICE_CACHE", tmp_dir, 1);
}

/* Decodes a fixed code sequence with a freshly loaded decoder into wav (N_FRAMES frames). */
static void decode(float *wav, size_t n) {
    char err[512];
    qvm_ckpt *ck_d = test_ckpt_open(g_model);
    qve_decoder *d = qve_decoder_load(ck_d, err, sizeof err);
    qvm_ckpt_free(ck_d);
    if (!d) fail_msg("%s", err);
    assert_int_equal((size_t)N_FRAMES * qve_decoder_samples_per_frame(d), n);
    int32_t codes[N_FRAMES * 16];
    for (int i = 0; i < N_FRAMES * 16; i++)
        codes[i] = (i * 677 + 13) % qve_decoder_codebook_size(d);
    if (qve_decoder_decode(d, codes, N_FRAMES, wav, err, sizeof err)) fail_msg("%s", err);
    qve_decoder_free(d);
}

static size_t spf(void) {
    char err[512];
    qvm_ckpt *ck_d = test_ckpt_open(g_model);
    qve_decoder *d = qve_decoder_load(ck_d, err, sizeof err);
    qvm_ckpt_free(ck_d);
    if (!d) fail_msg("%s", err);
    size_t n = (size_t)qve_decoder_samples_per_frame(d);
    qve_decoder_free(d);
    return n;
}

/* The path of the one cache file of kind in the scratch cache ("" when none). */
static const char *cache_file(const char *kind, char *out, size_t n) {
    char err[512];
    qvm_st *st = NULL;
    if (!strcmp(kind, "decoder")) {
        char p[1100];
        snprintf(p, sizeof p, "%s/speech_tokenizer/model.safetensors", g_model);
        st = qvm_st_open(p, err, sizeof err);
    } else {
        st = qvm_st_open_dir(g_model, "model", err, sizeof err);
    }
    if (!st) fail_msg("%s", err);
    qvm_prep_id id;
    assert_int_equal(qvm_prep_id_make(&id, kind, st, "", 0), 0);
    qvm_st_close(st);
    char *slash = strrchr(id.path, '/');
    snprintf(out, n, "%.*s", (int)(slash - id.path), id.path);
    /* the file name depends only on the kind and the checkpoint's location */
    snprintf(out + strlen(out), n - strlen(out), "%s", slash);
    struct stat sb;
    return stat(out, &sb) == 0 ? out : "";
}

static void test_decoder_cached(void **state) {
    (void)state;
    const size_t n = N_FRAMES * spf();
    float *fresh = malloc(n * sizeof *fresh), *mapped = malloc(n * sizeof *mapped);
    assert_non_null(fresh);
    assert_non_null(mapped);
    char path[4200];
    decode(fresh, n); /* prepares, saves */
    assert_string_not_equal(cache_file("decoder", path, sizeof path), "");
    struct stat a, b;
    assert_int_equal(stat(path, &a), 0);
    decode(mapped, n); /* maps */
    assert_memory_equal(fresh, mapped, n * sizeof *fresh);
    assert_int_equal(stat(path, &b), 0);
    assert_int_equal(a.st_ino, b.st_ino); /* used, not rewritten */

    /* a truncated file, then a foreign one: ignored, the weights prepared again and saved */
    assert_int_equal(truncate(path, a.st_size / 2), 0);
    decode(mapped, n);
    assert_memory_equal(fresh, mapped, n * sizeof *fresh);
    assert_int_equal(stat(path, &b), 0);
    assert_int_equal(b.st_size, a.st_size);
    char junk[4096];
    memset(junk, 'x', sizeof junk);
    memcpy(junk, "QVPREP01", 8);
    tmp_write(path, junk, sizeof junk);
    decode(mapped, n);
    assert_memory_equal(fresh, mapped, n * sizeof *fresh);
    assert_int_equal(stat(path, &b), 0);
    assert_int_equal(b.st_size, a.st_size);
    printf("decoder: %lld-byte cache file, mapped decode identical\n", (long long)a.st_size);
    free(fresh);
    free(mapped);
}

/* The int8 view of a fresh model load: a copy of its bytes, and whether it was mapped. */
static void int8_view(uint8_t **q, float **s, size_t *n_q, size_t *n_s, int *mapped) {
    qv_model *m;
    if (qv_model_load(&m, g_model)) fail_msg("%s", qv_last_error());
    qvk_pool *pool = qvk_pool_create(2);
    assert_non_null(pool);
    assert_int_equal(qve_model_quantize(m, QV_QUANT_INT8, pool), 0);
    const struct qve_view *v = m->q8;
    const qve_talker *t = qve_model_talker(m, QV_QUANT_INT8);
    const qvm_stack_config *c = &t->stack.cfg;
    *n_q = v->n_bytes;
    *n_s = 0;
    /* every row scale, in the view's order, read through the matrices that point at them */
    const qve_mat *w0 = &t->stack.layers[0].down_proj; /* tiny: the first with n_in % 128 == 0 */
    assert_non_null(w0->q8);
    *q = malloc(*n_q);
    assert_non_null(*q);
    memcpy(*q, w0->q8, *n_q); /* the matrices are one block, the first matrix at its start */
    const int rows = c->hidden_size;
    *s = malloc(sizeof **s * (size_t)rows);
    memcpy(*s, w0->q8_scale, sizeof **s * (size_t)rows);
    *n_s = (size_t)rows;
    *mapped = v->cache != NULL;
    qvk_pool_free(pool);
    qv_model_free(m);
}

static void test_int8_cached(void **state) {
    (void)state;
    uint8_t *q1, *q2;
    float *s1, *s2;
    size_t nq1, nq2, ns1, ns2;
    int m1, m2;
    char path[4200];
    int8_view(&q1, &s1, &nq1, &ns1, &m1);
    assert_false(m1);
    assert_string_not_equal(cache_file("int8", path, sizeof path), "");
    int8_view(&q2, &s2, &nq2, &ns2, &m2);
    assert_true(m2);
    assert_int_equal(nq1, nq2);
    assert_memory_equal(q1, q2, nq1);
    assert_memory_equal(s1, s2, ns1 * sizeof *s1);
    printf("int8: %zu quantized bytes mapped from the cache, identical\n", nq1);
    free(q1), free(q2), free(s1), free(s2);
}

/* The q4 view of a fresh model load: its quantized bytes, the first matrix's group scales and
 * biases, the text projection's rounding (fc1 then fc2) as copies, and whether it was mapped. */
typedef struct {
    uint8_t *q;
    uint16_t *sb, *text;
    size_t n_q, n_sb, n_text;
    int mapped;
} q4_copy;

static q4_copy q4_view(void) {
    qv_model *m;
    if (qv_model_load(&m, g_model)) fail_msg("%s", qv_last_error());
    qvk_pool *pool = qvk_pool_create(2);
    assert_non_null(pool);
    assert_int_equal(qve_model_quantize(m, QV_QUANT_Q4, pool), 0);
    const qve_talker *t = qve_model_talker(m, QV_QUANT_Q4);
    const qvm_stack_config *c = &t->stack.cfg;
    const qve_mat *w0 = &t->stack.layers[0].q_proj; /* the first matrix of the view */
    assert_non_null(w0->q4);
    q4_copy r = {.n_q = m->q4->n_bytes, .mapped = m->q4->cache != NULL};
    const size_t n_g = (size_t)c->num_attention_heads * c->head_dim * (c->hidden_size / 64);
    r.n_sb = 2 * n_g; /* scales, then biases: adjacent for one matrix */
    r.n_text = (size_t)m->ck->cfg.text_hidden_size * (m->ck->cfg.text_hidden_size + c->hidden_size);
    r.q = malloc(r.n_q), r.sb = malloc(2 * r.n_sb), r.text = malloc(2 * r.n_text);
    assert_true(r.q && r.sb && r.text);
    assert_ptr_equal(w0->q4_b, w0->q4_s + n_g);
    memcpy(r.q, w0->q4, r.n_q);
    memcpy(r.sb, w0->q4_s, 2 * r.n_sb);
    assert_ptr_equal(t->fc2,
                     t->fc1 + (size_t)m->ck->cfg.text_hidden_size * m->ck->cfg.text_hidden_size);
    assert_ptr_not_equal(t->fc1, m->talker.fc1); /* the view's q4 rounding, not the file's */
    memcpy(r.text, t->fc1, 2 * r.n_text);
    qvk_pool_free(pool);
    qv_model_free(m);
    return r;
}

/* --quant q4 as int8: the second load maps what the first quantized, byte for byte. */
static void test_q4_cached(void **state) {
    (void)state;
    char path[4200];
    q4_copy a = q4_view();
    assert_false(a.mapped);
    assert_string_not_equal(cache_file("q4", path, sizeof path), "");
    q4_copy b = q4_view();
    assert_true(b.mapped);
    assert_int_equal(a.n_q, b.n_q);
    assert_memory_equal(a.q, b.q, a.n_q);
    assert_memory_equal(a.sb, b.sb, 2 * a.n_sb);
    assert_memory_equal(a.text, b.text, 2 * a.n_text);
    printf("q4: %zu quantized bytes and the text rounding mapped from the cache, identical\n",
           a.n_q);
    free(a.q), free(a.sb), free(a.text), free(b.q), free(b.sb), free(b.text);
}

/* A cache file as the writer lays it out: its header only (prepared.c). */
static void write_header(const char *path, const char *magic, const char *source) {
    struct {
        char magic[8];
        uint32_t n_arrays, zero;
        uint8_t key[32];
        uint64_t file_size;
        char source[4096];
    } h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, magic, 8);
    h.file_size = sizeof h;
    snprintf(h.source, sizeof h.source, "%s", source);
    tmp_write(path, &h, sizeof h);
}

/* Saving removes the files of its kind whose checkpoint is gone, or of an older layout; it keeps
 * those of existing checkpoints and of other kinds. */
static void test_sweep(void **state) {
    (void)state;
    char path[4200], real[1100], gone[4300], old[4300], kept[4300], other[4300];
    const size_t n = N_FRAMES * spf();
    float *wav = malloc(n * sizeof *wav);
    assert_non_null(wav);
    decode(wav, n); /* the file exists */
    cache_file("decoder", path, sizeof path);
    snprintf(real, sizeof real, "%s/config.json", g_model);
    snprintf(gone, sizeof gone, "%.*s/decoder-00000000000000aa.qvprep",
             (int)(strrchr(path, '/') - path), path);
    snprintf(old, sizeof old, "%.*s/decoder-00000000000000bb.qvprep",
             (int)(strrchr(path, '/') - path), path);
    snprintf(kept, sizeof kept, "%.*s/decoder-00000000000000cc.qvprep",
             (int)(strrchr(path, '/') - path), path);
    snprintf(other, sizeof other, "%.*s/int8-00000000000000dd.qvprep",
             (int)(strrchr(path, '/') - path), path);
    write_header(gone, "QVPREP02", "/nonexistent/model.safetensors");
    write_header(old, "QVPREP01", real);
    write_header(kept, "QVPREP02", real);
    write_header(other, "QVPREP02", "/nonexistent/model.safetensors");
    assert_int_equal(remove(path), 0);
    decode(wav, n); /* prepares and saves: sweeps */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_not_equal(stat(gone, &sb), 0);
    assert_int_not_equal(stat(old, &sb), 0);
    assert_int_equal(stat(kept, &sb), 0);
    assert_int_equal(stat(other, &sb), 0);
    remove(kept), remove(other);
    free(wav);
}

static void test_off(void **state) {
    (void)state;
    char path[4200];
    setenv("QVOICE_CACHE", "", 1);
    qvm_prep_id id;
    char err[512];
    qvm_st *st = qvm_st_open_dir(g_model, "model", err, sizeof err);
    assert_non_null(st);
    assert_int_equal(qvm_prep_id_make(&id, "int8", st, "", 0), -1);
    qvm_st_close(st);
    setenv("QVOICE_CACHE", tmp_dir, 1);
    assert_int_equal(remove(cache_file("int8", path, sizeof path)), 0);
    setenv("QVOICE_CACHE", "", 1);
    uint8_t *q;
    float *s;
    size_t nq, ns;
    int mapped;
    int8_view(&q, &s, &nq, &ns, &mapped);
    assert_false(mapped);
    setenv("QVOICE_CACHE", tmp_dir, 1);
    assert_string_equal(cache_file("int8", path, sizeof path), ""); /* nothing written */
    free(q), free(s);
}

QVT_MAIN(setup, tmpdir_teardown, test_decoder_cached, test_int8_cached, test_q4_cached, test_sweep,
         test_off)
