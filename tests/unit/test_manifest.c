/* test_manifest.c — expected-tensor tables and the load-time check.
 * Counts come from the published configs (402/404 CustomVoice, 478/480 Base, 271 decoder
 * tensors); the check runs on small checkpoints written here from a reduced config (one missing,
 * one misshapen, one extra, one integer tensor) and on the synthetic models in $QVOICE_CACHE
 * (skipped with a note when `make models` has not run).
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

#include <cJSON.h>
#include <cmocka.h>

#include "checkpoint/config.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/tmpdir.h"

#define GOLD "tests/golden/configs"

static void load_configs(const char *dir, qvm_model_config *mc, qvm_codec_config *cc) {
    char err[512];
    if (qvm_model_config_load(mc, dir, err, sizeof err) != 0) fail_msg("%s", err);
    if (cc && qvm_codec_config_load(cc, dir, err, sizeof err) != 0) fail_msg("%s", err);
}

static int count_prefix(const qvm_manifest *m, const char *prefix) {
    int n = 0;
    for (int i = 0; i < m->n_entries; i++)
        n += strncmp(m->entries[i].name, prefix, strlen(prefix)) == 0;
    return n;
}

static void test_counts(void **state) {
    (void)state;
    static const struct {
        const char *dir;
        int n;
    } want[] = {{GOLD "/q06b-cv", 402},
                {GOLD "/q06b-base", 478},
                {GOLD "/q17b-cv", 404},
                {GOLD "/q17b-base", 480}};
    char err[256];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        qvm_model_config mc;
        qvm_codec_config cc;
        qvm_manifest m;
        load_configs(want[i].dir, &mc, &cc);
        assert_int_equal(qvm_manifest_model(&m, &mc, err, sizeof err), 0);
        printf("    %s: %d model tensors\n", want[i].dir, m.n_entries);
        assert_int_equal(m.n_entries, want[i].n);
        assert_int_equal(count_prefix(&m, "speaker_encoder."), mc.has_speaker_encoder ? 76 : 0);
        const qvm_manifest_entry *e =
            qvm_manifest_find(&m, "talker.model.layers.27.self_attn.q_proj.weight");
        assert_non_null(e);
        assert_int_equal(e->shape[0], 2048);
        assert_int_equal(e->shape[1], mc.talker.hidden_size);
        e = qvm_manifest_find(&m, "talker.code_predictor.model.codec_embedding.14.weight");
        assert_int_equal(e->shape[1], mc.talker.hidden_size); /* talker width, §2.1 */
        assert_int_equal(
            qvm_manifest_find(&m, "talker.code_predictor.small_to_mtp_projection.bias") != NULL,
            mc.talker.hidden_size != mc.code_predictor.hidden_size);
        if (mc.has_speaker_encoder) {
            e = qvm_manifest_find(&m, "speaker_encoder.fc.weight");
            assert_int_equal(e->shape[0], mc.enc_dim);
            assert_int_equal(e->shape[1], 3072);
            e = qvm_manifest_find(&m,
                                  "speaker_encoder.blocks.2.res2net_block.blocks.6.conv.weight");
            assert_true(e->shape[0] == 64 && e->shape[1] == 64 && e->shape[2] == 3);
        }
        assert_null(qvm_manifest_find(&m, "talker.model.layers.28.input_layernorm.weight"));
        qvm_manifest_free(&m);

        assert_int_equal(qvm_manifest_codec(&m, &cc, err, sizeof err), 0);
        assert_int_equal(count_prefix(&m, "decoder."), 271);
        /* Encoder: 2 + 4*(4+2) + 2 SEANet, 8*12 transformer, 1 downsample, 4 projections,
         * 1 semantic + 15 acoustic codebooks (2 each). */
        assert_int_equal(count_prefix(&m, "encoder."), 28 + 96 + 1 + 4 + 32);
        e = qvm_manifest_find(&m, "encoder.encoder.layers.12.conv.weight");
        assert_true(e->shape[0] == 1024 && e->shape[1] == 512 && e->shape[2] == 16);
        e = qvm_manifest_find(&m, "encoder.encoder.layers.14.conv.weight");
        assert_true(e->shape[0] == 512 && e->shape[1] == 1024 && e->shape[2] == 3);
        e = qvm_manifest_find(&m, "encoder.downsample.conv.weight");
        assert_true(e->shape[0] == 512 && e->shape[2] == 4);
        e = qvm_manifest_find(&m, "decoder.decoder.4.block.1.conv.weight");
        assert_true(e->shape[0] == 192 && e->shape[1] == 96 && e->shape[2] == 6);
        assert_non_null(qvm_manifest_find(
            &m,
            "encoder.quantizer.acoustic_residual_vector_quantizer.layers.14.codebook.embed_sum"));
        assert_null(qvm_manifest_find(
            &m,
            "encoder.quantizer.acoustic_residual_vector_quantizer.layers.15.codebook.embed_sum"));
        qvm_manifest_free(&m);
    }
}

/* ---- small checkpoints written from a manifest -------------------------------------------- */

/* Writes every entry of m (zeros) as path, with edits: skip `drop`, give `reshape` a wrong first
 * dimension, add `extra`, store `as_i64` as I64. */
static void write_from_manifest(const char *path, const qvm_manifest *m, const char *drop,
                                const char *reshape, const char *extra, const char *as_i64) {
    cJSON *h = cJSON_CreateObject();
    uint64_t off = 0;
    for (int i = 0; i <= m->n_entries; i++) {
        qvm_manifest_entry e;
        if (i == m->n_entries) {
            if (!extra) break;
            memset(&e, 0, sizeof e);
            snprintf(e.name, sizeof e.name, "%s", extra);
            e.n_dims = 1;
            e.shape[0] = 4;
            e.dtype = QVM_DTYPE_F32;
        } else
            e = m->entries[i];
        if (drop && strcmp(e.name, drop) == 0) continue;
        if (reshape && strcmp(e.name, reshape) == 0) e.shape[0] += 1;
        int i64 = as_i64 && strcmp(e.name, as_i64) == 0;
        uint64_t n = i64 ? 8 : qvm_dtype_size(e.dtype);
        for (int k = 0; k < e.n_dims; k++)
            n *= (uint64_t)e.shape[k];
        cJSON *t = cJSON_AddObjectToObject(h, e.name);
        cJSON_AddStringToObject(t, "dtype", i64 ? "I64" : qvm_dtype_name(e.dtype));
        cJSON *s = cJSON_AddArrayToObject(t, "shape");
        for (int k = 0; k < e.n_dims; k++)
            cJSON_AddItemToArray(s, cJSON_CreateNumber((double)e.shape[k]));
        cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + n)));
        off += (n + 7) & ~(uint64_t)7;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    tmp_write_st(path, js, NULL, off); /* sparse zeros */
    free(js);
}

/* A reduced Base config (tiny widths, 256-token text vocabulary) in tmp_dir. */
static void small_config(qvm_model_config *mc, qvm_codec_config *cc) {
    load_configs(GOLD "/q06b-base", mc, cc);
    mc->size = QVM_SIZE_OTHER;
    mc->text_vocab_size = 256;
    mc->text_hidden_size = 32;
    qvm_stack_config small = mc->talker;
    small.hidden_size = 32;
    small.intermediate_size = 64;
    small.num_hidden_layers = 2;
    small.num_attention_heads = 4;
    small.num_key_value_heads = 2;
    small.head_dim = 8;
    small.vocab_size = 128;
    mc->talker = small;
    small.hidden_size = 16; /* narrower code predictor: small_to_mtp_projection appears */
    small.vocab_size = 64;
    mc->code_predictor = small;
    mc->talker.num_code_groups = mc->code_predictor.num_code_groups = 4;
    int ch[5] = {16, 16, 16, 16, 48};
    memcpy(mc->enc_channels, ch, sizeof ch);
    mc->enc_res2net_scale = 4;
    mc->enc_attention_channels = 8;
    mc->enc_se_channels = 8;
    mc->enc_dim = 32;
}

static void expect_check_fail(const qvm_model_config *mc, const char *path, const char *want) {
    char err[512] = "";
    qvm_st *st = qvm_st_open(path, err, sizeof err);
    if (!st) fail_msg("%s", err);
    assert_int_equal(qvm_manifest_check(mc, NULL, st, NULL, err, sizeof err), -1);
    printf("    error: %s\n", err);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, path));
    if (!strstr(err, want)) fail_msg("error \"%s\" lacks \"%s\"", err, want);
    qvm_st_close(st);
}

static void test_check_small(void **state) {
    (void)state;
    qvm_model_config mc;
    qvm_codec_config cc;
    small_config(&mc, &cc);
    qvm_manifest m;
    char err[512];
    assert_int_equal(qvm_manifest_model(&m, &mc, err, sizeof err), 0);
    /* 6 + 2*11 + 2 talker, 2*11 + 1 + 3 + 3 + 2 code predictor, 2 + 3*(2+6+6) + 8 speaker enc. */
    assert_int_equal(m.n_entries, 30 + 31 + 52);
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", tmp_dir);

    write_from_manifest(path, &m, NULL, NULL, NULL, NULL);
    qvm_st *st = qvm_st_open(path, err, sizeof err);
    if (!st) fail_msg("%s", err);
    assert_int_equal(qvm_manifest_check(&mc, NULL, st, NULL, err, sizeof err), 0);
    qvm_st_close(st);

    write_from_manifest(path, &m, "talker.code_predictor.lm_head.2.weight", NULL, NULL, NULL);
    expect_check_fail(&mc, path,
                      "tensor talker.code_predictor.lm_head.2.weight: missing (expected [64, 16])");
    write_from_manifest(path, &m, NULL, "talker.model.layers.1.mlp.down_proj.weight", NULL, NULL);
    expect_check_fail(&mc, path,
                      "tensor talker.model.layers.1.mlp.down_proj.weight: expected [32, 64] float, "
                      "found [33, 64] BF16");
    write_from_manifest(path, &m, NULL, NULL, "talker.model.layers.2.input_layernorm.weight", NULL);
    expect_check_fail(&mc, path,
                      "unexpected tensor talker.model.layers.2.input_layernorm.weight (expected "
                      "113 tensors, found 114)");
    write_from_manifest(path, &m, NULL, NULL, NULL, "speaker_encoder.fc.bias");
    expect_check_fail(&mc, path,
                      "tensor speaker_encoder.fc.bias: expected [32] float, found [32] I64");
    qvm_manifest_free(&m);
}

/* ---- the synthetic checkpoints ------------------------------------------------------------- */

static void check_model_dir(const char *dir, int *n_checked) {
    char p[1024], err[512] = "";
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (access(p, R_OK) != 0) {
        printf("    note: %s absent (run `make models`), skipped\n", dir);
        return;
    }
    qvm_model_config mc;
    qvm_codec_config cc;
    load_configs(dir, &mc, &cc);
    qvm_st *st = qvm_st_open(p, err, sizeof err);
    if (!st) fail_msg("%s", err);
    snprintf(p, sizeof p, "%s/speech_tokenizer/model.safetensors", dir);
    qvm_st *codec = qvm_st_open(p, err, sizeof err);
    if (!codec) fail_msg("%s", err);
    if (qvm_manifest_check(&mc, &cc, st, codec, err, sizeof err) != 0) fail_msg("%s", err);
    printf("    %s: %d model tensors, %d codec tensors: manifest ok\n", dir, qvm_st_count(st),
           qvm_st_count(codec));
    qvm_st_close(st);
    qvm_st_close(codec);
    (*n_checked)++;
}

static void test_cache_models(void **state) {
    (void)state;
    const char *cache = test_cache_dir();
    static const char *const names[] = {"tiny-base", "tiny-cv",   "tiny-vd", "q06b-base",
                                        "q06b-cv",   "q17b-base", "q17b-cv", "q17b-vd"};
    int n = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", cache, names[i]);
        check_model_dir(dir, &n);
    }
    if (n == 0) printf("    note: no synthetic models in %s; nothing checked\n", cache);
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_counts, test_check_small, test_cache_models)
