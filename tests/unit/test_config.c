/* test_config.c — config.json / generation_config.json / speech_tokenizer/config.json parsing.
 * Reads the shipped 0.6B Base and CustomVoice configs (tests/golden/configs/q06b-*, the
 * synthetic-checkpoint reference) and mutated copies written to a temp dir: each broken copy must
 * fail with its specific one-line error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>
#include <cmocka.h>

#include "checkpoint/config.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/tmpdir.h"

#define GOLD "tests/golden/configs"

static void spit(const char *dir, const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/speech_tokenizer", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    tmp_write(p, text, strlen(text));
}

static void spit_json(const char *dir, const char *name, const cJSON *j) {
    char *t = cJSON_Print(j);
    spit(dir, name, t);
    free(t);
}

/* tmp_dir/name := the file at path, byte for byte. */
static void spit_copy(const char *path, const char *name) {
    char *t = tmp_read(path, NULL);
    spit(tmp_dir, name, t);
    free(t);
}

static cJSON *parse_file(const char *path) {
    char *t = tmp_read(path, NULL);
    cJSON *j = cJSON_Parse(t);
    free(t);
    assert_non_null(j);
    return j;
}

/* A fresh copy of GOLD/variant in tmp_dir; returns the parsed config.json for mutation. */
static cJSON *fresh(const char *variant) {
    char p[256];
    snprintf(p, sizeof p, GOLD "/%s/speech_tokenizer/config.json", variant);
    spit_copy(p, "speech_tokenizer/config.json");
    snprintf(p, sizeof p, GOLD "/%s/generation_config.json", variant);
    spit_copy(p, "generation_config.json");
    snprintf(p, sizeof p, GOLD "/%s/config.json", variant);
    return parse_file(p);
}

static void expect_model_fail(const cJSON *j, const char *want) {
    spit_json(tmp_dir, "config.json", j);
    qvm_model_config c;
    char err[512] = "";
    assert_int_equal(qvm_model_config_load(&c, tmp_dir, err, sizeof err), -1);
    printf("    error: %s\n", err);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "/config.json: "));
    if (!strstr(err, want)) fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static void test_base(void **state) {
    (void)state;
    qvm_model_config c;
    char err[512] = "";
    if (qvm_model_config_load(&c, GOLD "/q06b-base", err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.size, QVM_SIZE_0B6);
    assert_int_equal(c.variant, QVF_VARIANT_BASE);
    assert_int_equal(c.tts_pad_token_id, 151671);
    assert_int_equal(c.assistant_token_id, 77091);
    assert_int_equal(c.talker.hidden_size, 1024);
    assert_int_equal(c.talker.head_dim, 128);
    assert_int_equal(c.talker.num_hidden_layers, 28);
    assert_int_equal(c.talker.vocab_size, 3072);
    assert_true(c.talker.rope_theta == 1000000.0f && c.talker.rms_norm_eps == 1e-6f);
    assert_int_equal(c.text_vocab_size, 151936);
    assert_int_equal(c.codec_eos_token_id, 2150);
    assert_int_equal(c.codec_think_eos_id, 2157);
    assert_int_equal(c.code_predictor.num_hidden_layers, 5);
    assert_int_equal(c.code_predictor.vocab_size, 2048);
    assert_int_equal(c.code_predictor.max_position_embeddings, 65536);
    assert_int_equal(c.n_languages, 12);
    assert_int_equal(qvm_language_id(&c, "English"), 2050);
    assert_int_equal(qvm_language_id(&c, "sichuan_dialect"), 2062);
    assert_int_equal(qvm_language_id(&c, "klingon"), -1);
    assert_int_equal(c.n_speakers, 0);
    assert_true(c.has_speaker_encoder);
    assert_int_equal(c.enc_dim, 1024);
    assert_int_equal(c.enc_channels[4], 1536);
    assert_int_equal(c.enc_dilations[3], 4);
    assert_int_equal(c.enc_res2net_scale, 8);
}

static void test_custom_voice(void **state) {
    (void)state;
    qvm_model_config c;
    char err[512] = "";
    if (qvm_model_config_load(&c, GOLD "/q06b-cv", err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.variant, QVF_VARIANT_CUSTOM_VOICE);
    assert_int_equal(c.size, QVM_SIZE_0B6);
    assert_false(c.has_speaker_encoder);
    assert_int_equal(c.n_speakers, 9);
    const qvm_speaker *s = qvm_speaker_find(&c, "Ryan");
    assert_non_null(s);
    assert_int_equal(s->id, 3061);
    assert_string_equal(s->dialect, "");
    s = qvm_speaker_find(&c, "eric");
    assert_string_equal(s->dialect, "sichuan_dialect");
    assert_int_equal(qvm_speaker_find(&c, "dylan")->id, 2878);
    assert_null(qvm_speaker_find(&c, "nobody"));
}

static void test_17b(void **state) {
    (void)state;
    qvm_model_config c;
    char err[512] = "";
    if (qvm_model_config_load(&c, GOLD "/q17b-base", err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.size, QVM_SIZE_1B7);
    assert_int_equal(c.variant, QVF_VARIANT_BASE);
    assert_int_equal(c.talker.hidden_size, 2048);
    assert_int_equal(c.code_predictor.hidden_size, 1024);
    assert_int_equal(c.enc_dim, 2048);
    if (qvm_model_config_load(&c, GOLD "/q17b-cv", err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.size, QVM_SIZE_1B7);
    assert_int_equal(c.variant, QVF_VARIANT_CUSTOM_VOICE);
    assert_int_equal(c.talker.intermediate_size, 6144);
}

static void test_variant_and_size(void **state) {
    (void)state;
    qvm_model_config c;
    char err[512] = "";
    /* CustomVoice type with an empty spk_id map: VoiceDesign. */
    cJSON *j = fresh("q06b-cv");
    cJSON *tc = cJSON_GetObjectItem(j, "talker_config");
    cJSON_ReplaceItemInObject(tc, "spk_id", cJSON_CreateObject());
    cJSON_ReplaceItemInObject(tc, "spk_is_dialect", cJSON_CreateObject());
    spit_json(tmp_dir, "config.json", j);
    assert_int_equal(qvm_model_config_load(&c, tmp_dir, err, sizeof err), 0);
    assert_int_equal(c.variant, QVF_VARIANT_VOICE_DESIGN);
    cJSON_ReplaceItemInObject(j, "tts_model_type", cJSON_CreateString("voice_design"));
    spit_json(tmp_dir, "config.json", j);
    assert_int_equal(qvm_model_config_load(&c, tmp_dir, err, sizeof err), 0);
    assert_int_equal(c.variant, QVF_VARIANT_VOICE_DESIGN);
    /* Tiny dimensions with a "0b6" label: OTHER. */
    cJSON_ReplaceItemInObject(tc, "hidden_size", cJSON_CreateNumber(64));
    cJSON_ReplaceItemInObject(tc, "num_hidden_layers", cJSON_CreateNumber(2));
    spit_json(tmp_dir, "config.json", j);
    assert_int_equal(qvm_model_config_load(&c, tmp_dir, err, sizeof err), 0);
    assert_int_equal(c.size, QVM_SIZE_OTHER);
    assert_int_equal(c.talker.hidden_size, 64);
    cJSON_ReplaceItemInObject(j, "tts_model_type", cJSON_CreateString("karaoke"));
    expect_model_fail(j, "key tts_model_type: unknown model type");
    cJSON_Delete(j);
}

static void test_missing_key(void **state) {
    (void)state;
    cJSON *j = fresh("q06b-base");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "talker_config"), "hidden_size");
    expect_model_fail(j, "missing key talker_config.hidden_size");
    cJSON_Delete(j);
    j = fresh("q06b-base");
    cJSON *cp =
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "talker_config"), "code_predictor_config");
    cJSON_DeleteItemFromObject(cp, "num_key_value_heads");
    expect_model_fail(j, "missing key talker_config.code_predictor_config.num_key_value_heads");
    cJSON_Delete(j);
    j = fresh("q06b-base");
    cJSON_DeleteItemFromObject(j, "tts_eos_token_id");
    expect_model_fail(j, "missing key tts_eos_token_id");
    cJSON_Delete(j);
    j = fresh("q06b-base");
    cJSON_DeleteItemFromObject(j, "speaker_encoder_config");
    expect_model_fail(j, "missing key speaker_encoder_config");
    cJSON_Delete(j);
    j = fresh("q06b-cv");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "talker_config"), "spk_id");
    expect_model_fail(j, "missing key talker_config.spk_id");
    cJSON_Delete(j);
}

static void test_wrong_type(void **state) {
    (void)state;
    cJSON *j = fresh("q06b-base");
    cJSON *tc = cJSON_GetObjectItem(j, "talker_config");
    cJSON_ReplaceItemInObject(tc, "hidden_size", cJSON_CreateString("1024"));
    expect_model_fail(j,
                      "key talker_config.hidden_size: wrong type (expected integer, found string)");
    cJSON_ReplaceItemInObject(tc, "hidden_size", cJSON_CreateNumber(1024.5));
    expect_model_fail(j,
                      "key talker_config.hidden_size: wrong type (expected integer, found 1024.5)");
    cJSON_ReplaceItemInObject(tc, "hidden_size", cJSON_CreateNumber(-4));
    expect_model_fail(j, "key talker_config.hidden_size: out of range");
    cJSON_ReplaceItemInObject(tc, "hidden_size", cJSON_CreateNumber(1024));
    cJSON_ReplaceItemInObject(tc, "codec_language_id", cJSON_CreateArray());
    expect_model_fail(
        j, "key talker_config.codec_language_id: wrong type (expected object, found array)");
    cJSON_Delete(j);
    j = fresh("q06b-base");
    cJSON_ReplaceItemInObject(j, "talker_config", cJSON_CreateNull());
    expect_model_fail(j, "key talker_config: wrong type (expected object, found null)");
    cJSON_Delete(j);
    j = fresh("q06b-base");
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "speaker_encoder_config"), "enc_channels",
                              cJSON_CreateIntArray((const int[]){512, 512}, 2));
    expect_model_fail(
        j, "key speaker_encoder_config.enc_channels: wrong length (expected 5, found 2)");
    cJSON_Delete(j);
    spit(tmp_dir, "config.json", "{\n\"talker_config\": {\n,}\n");
    qvm_model_config c;
    char err[256];
    assert_int_equal(qvm_model_config_load(&c, tmp_dir, err, sizeof err), -1);
    printf("    error: %s\n", err);
    assert_non_null(strstr(err, "config.json: not valid JSON (error near line 3)"));
    assert_int_equal(qvm_model_config_load(&c, "/nonexistent-dir", err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/config.json: cannot open"));
}

static void test_generation(void **state) {
    (void)state;
    qvm_generation_config g;
    char err[256] = "";
    assert_int_equal(qvm_generation_config_load(&g, GOLD "/q06b-base", err, sizeof err), 0);
    assert_true(g.do_sample && g.subtalker_dosample);
    assert_int_equal(g.top_k, 50);
    assert_true(g.temperature == 0.9f && g.repetition_penalty == 1.05f && g.top_p == 1.0f);
    assert_int_equal(g.max_new_tokens, 8192);
    /* Missing keys take the wrapper's fallbacks: max_new_tokens 2048, not the file's 8192. */
    spit(tmp_dir, "generation_config.json", "{\"do_sample\": false, \"top_k\": 7}");
    assert_int_equal(qvm_generation_config_load(&g, tmp_dir, err, sizeof err), 0);
    assert_false(g.do_sample);
    assert_int_equal(g.top_k, 7);
    assert_int_equal(g.max_new_tokens, 2048);
    assert_true(g.subtalker_temperature == 0.9f);
    /* No file at all: every fallback. */
    assert_int_equal(qvm_generation_config_load(&g, "/nonexistent-dir", err, sizeof err), 0);
    assert_int_equal(g.max_new_tokens, 2048);
    spit(tmp_dir, "generation_config.json", "{\"top_k\": \"many\"}");
    assert_int_equal(qvm_generation_config_load(&g, tmp_dir, err, sizeof err), -1);
    printf("    error: %s\n", err);
    assert_non_null(strstr(
        err, "generation_config.json: key top_k: wrong type (expected integer, found string)"));
}

static void test_codec(void **state) {
    (void)state;
    qvm_codec_config c;
    char err[512] = "";
    if (qvm_codec_config_load(&c, GOLD "/q06b-base", err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.encoder_valid_num_quantizers, 16);
    assert_int_equal(c.decode_upsample_rate, 1920);
    assert_int_equal(c.decoder.codebook_dim, 512);
    assert_int_equal(c.decoder.latent_dim, 1024);
    assert_int_equal(c.decoder.decoder_dim, 1536);
    assert_int_equal(c.decoder.sliding_window, 72);
    assert_int_equal(c.decoder.upsample_rates[0], 8);
    assert_int_equal(c.decoder.upsample_rates[3], 3);
    assert_int_equal(c.decoder.upsampling_ratios[1], 2);
    assert_true(c.decoder.rms_norm_eps == 1e-5f && c.decoder.layer_scale_initial_scale == 0.01f);
    assert_int_equal(c.encoder.num_filters, 64);
    assert_int_equal(c.encoder.upsampling_ratios[0], 8);
    assert_int_equal(c.encoder.upsampling_ratios[3], 4);
    assert_int_equal(c.encoder.num_quantizers, 32);
    assert_int_equal(c.encoder.codebook_dim, 256);
    assert_int_equal(c.encoder.sliding_window, 250);
    assert_int_equal(c.encoder.intermediate_size, 2048);

    cJSON *j = parse_file(GOLD "/q06b-base/speech_tokenizer/config.json");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "encoder_config"), "num_filters");
    spit_json(tmp_dir, "speech_tokenizer/config.json", j);
    assert_int_equal(qvm_codec_config_load(&c, tmp_dir, err, sizeof err), -1);
    printf("    error: %s\n", err);
    assert_non_null(
        strstr(err, "speech_tokenizer/config.json: missing key encoder_config.num_filters"));
    cJSON_Delete(j);
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_base, test_custom_voice, test_17b,
         test_variant_and_size, test_missing_key, test_wrong_type, test_generation, test_codec)
