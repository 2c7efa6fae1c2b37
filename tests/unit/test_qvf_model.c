/* test_qvf_model.c — WDELTA on the synthetic tiny Base/CustomVoice pair ($QVOICE_CACHE/tiny-*):
 * every shared talker/code-predictor tensor is encoded (bf16 bit deltas, f32 raw) through the
 * streaming writer, read back and applied to the CustomVoice tensor, which must give the Base bits
 * exactly; then `voicefmt verify --model` accepts the target and the source Base and refuses another
 * checkpoint.
 * This is also the recipe clone --target-cv follows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/shell.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "checkpoint/config.h"
#include "checkpoint/fingerprint.h"
#include "voicefmt/qvf.h"
#include "checkpoint/safetensors.h"

static char err[512], base_dir[512], cv_dir[512];

static int setup(void **state) {
    (void)state;
    const char *c = test_cache_dir();
    snprintf(base_dir, sizeof base_dir, "%s/tiny-base", c);
    snprintf(cv_dir, sizeof cv_dir, "%s/tiny-cv", c);
    return 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void id_of(const char *dir, const qvm_model_config *cfg, qvf_model_id *id) {
    memset(id, 0, sizeof *id);
    id->hidden_size = (uint32_t)cfg->talker.hidden_size;
    id->text_hidden_size = (uint32_t)cfg->text_hidden_size;
    id->enc_dim = cfg->has_speaker_encoder ? (uint32_t)cfg->enc_dim : 0;
    id->variant = cfg->variant;
    assert_int_equal(
        qvm_fingerprint_model(dir, QVM_FINGERPRINT_TABLE, id->fingerprint, err, sizeof err), 0);
}

static void test_wdelta_tiny_pair(void **state) {
    (void)state;
    if (access(base_dir, R_OK) || access(cv_dir, R_OK)) {
        printf("no %s / %s (run make models): skipped\n", base_dir, cv_dir);
        skip();
    }
    qvm_model_config bc, cc;
    assert_int_equal(qvm_model_config_load(&bc, base_dir, err, sizeof err), 0);
    assert_int_equal(qvm_model_config_load(&cc, cv_dir, err, sizeof err), 0);
    qvm_st *bs = qvm_st_open_dir(base_dir, "model", err, sizeof err),
           *cs = qvm_st_open_dir(cv_dir, "model", err, sizeof err);
    assert_non_null(bs);
    assert_non_null(cs);

    qvf_voice *v = qvf_voice_new();
    float *x = calloc((size_t)bc.enc_dim, sizeof *x);
    for (int i = 0; i < bc.enc_dim; i++)
        x[i] = (float)(i % 7) - 3.0f;
    assert_int_equal(qvf_voice_set_xvector(v, x, (uint32_t)bc.enc_dim), 0);
    free(x);
    id_of(base_dir, &bc, &v->source);
    id_of(cv_dir, &cc, &v->target);
    assert_int_equal(qvf_meta_set(v, "name", "tiny heavy"), 0);

    /* the tensor set: talker.* present in both with the same dtype and shape */
    int n = 0, *pick = calloc((size_t)qvm_st_count(bs), sizeof *pick);
    for (int i = 0; i < qvm_st_count(bs); i++) {
        const qvm_tensor *b = qvm_st_at(bs, i), *c = qvm_st_find(cs, b->name);
        if (strncmp(b->name, "talker.", 7) || !c || c->dtype != b->dtype ||
            c->n_bytes != b->n_bytes || (b->dtype != QVM_DTYPE_BF16 && b->dtype != QVM_DTYPE_F32))
            continue;
        pick[i] = 1;
        n++;
    }
    assert_true(n > 10);
    char path[] = "/tmp/qvf_tiny_heavy_XXXXXX.qvoice";
    int fd = mkstemps(path, 7);
    assert_true(fd >= 0);
    close(fd);
    qvf_writer *w;
    double t0 = now_s();
    assert_int_equal(qvf_writer_open(&w, path, v, (uint32_t)n, QVF_WKIND_DELTA, err, sizeof err),
                     0);
    uint64_t raw = 0, stored = 0;
    for (int i = 0; i < qvm_st_count(bs); i++) {
        if (!pick[i]) continue;
        const qvm_tensor *b = qvm_st_at(bs, i), *c = qvm_st_find(cs, b->name);
        uint64_t shape[4] = {0};
        for (int d = 0; d < b->n_dims; d++)
            shape[d] = (uint64_t)b->shape[d];
        qvf_tensor t;
        int bf = b->dtype == QVM_DTYPE_BF16;
        if (qvf_wdelta_encode(b->name, bf ? QVF_DTYPE_BF16 : QVF_DTYPE_F32, (uint32_t)b->n_dims,
                              shape, b->data, bf ? c->data : NULL, 0, &t, err, sizeof err))
            fail_msg("%s", err);
        raw += t.raw_bytes;
        stored += t.data_bytes;
        if (qvf_writer_add_tensor(w, &t, err, sizeof err)) fail_msg("%s", err);
        qvf_tensor_free(&t);
    }
    if (qvf_writer_commit(w, err, sizeof err)) fail_msg("%s", err);
    double t1 = now_s();

    qvf_voice *r = NULL;
    if (qvf_read_file(path, 0, &r, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(r->n_tensors, (uint32_t)n);
    assert_memory_equal(r->target.fingerprint, v->target.fingerprint, 32);
    int n_exact = 0;
    for (uint32_t i = 0; i < r->n_tensors; i++) {
        const qvf_tensor *t = &r->tensors[i];
        const qvm_tensor *b = qvm_st_find(bs, t->name), *c = qvm_st_find(cs, t->name);
        assert_non_null(b);
        void *out = malloc(t->raw_bytes);
        if (qvf_wdelta_apply(t, c->data, out, 1, err, sizeof err)) fail_msg("%s", err);
        if (!memcmp(out, b->data, t->raw_bytes))
            n_exact++;
        else
            printf("tensor %s differs from Base after the delta\n", t->name);
        free(out);
    }
    double t2 = now_s();
    printf("tiny WDELTA: %d tensors, %.2f MB raw -> %.2f MB stored, %d/%d bit-exact after apply "
           "(max |bits diff| 0), create %.2f s, read+apply+verify %.2f s\n",
           n, raw / 1e6, stored / 1e6, n_exact, n, t1 - t0, t2 - t1);
    assert_int_equal(n_exact, n);

    /* the tool, with the engine's rule (qve_voice_wdelta_fits): fits the CustomVoice it was made
     * for and the Base it came from (there the delta is not needed); refuses another checkpoint */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "bin/voicefmt verify --deep --model %s %s >/dev/null 2>&1", cv_dir,
             path);
    assert_int_equal(sh("%s", cmd), 0);
    snprintf(cmd, sizeof cmd, "bin/voicefmt verify --model %s %s >/dev/null 2>&1", base_dir, path);
    assert_int_equal(sh("%s", cmd), 0);
    r->target.fingerprint[0] ^= 1;
    char other[] = "/tmp/qvf_tiny_other_XXXXXX.qvoice";
    fd = mkstemps(other, 7);
    close(fd);
    if (qvf_write_file(r, other, 4, err, sizeof err)) fail_msg("%s", err);
    snprintf(cmd, sizeof cmd,
             "bin/voicefmt verify --model %s %s 2>&1 | grep -q 'weight delta was made for another checkpoint'", cv_dir,
             other);
    assert_int_equal(sh("%s", cmd), 0);
    unlink(other);
    unlink(path);
    qvf_voice_free(r);
    qvf_voice_free(v);
    free(pick);
    qvm_st_close(bs);
    qvm_st_close(cs);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_wdelta_tiny_pair)};
    return cmocka_run_group_tests_name("qvf_model", tests, setup, NULL);
}
