/* test_mkmodel — the synthetic checkpoints in $QVOICE_CACHE against synthetic-checkpoints.md v1:
 * every SHA-256 of tests/golden/checksums*.txt (whole files and single tensors), byte-identical
 * reference configs, the tiny models' layout, and single elements against values worked out by hand
 * from the spec's formulas (an independent Python transcription, numbers pasted below).
 * Tests whose models are absent are skipped with a message (make test generates them first).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "checkpoint/config.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/tmpdir.h"
#include "util/sha256.h"

static char cache_dir[1024];

static void path_in_cache(char *out, size_t n, const char *rel) {
    if ((size_t)snprintf(out, n, "%s/%s", cache_dir, rel) >= n) fail_msg("path too long: %s", rel);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Skips the test (with a reason) unless every listed model dir has finished generating. */
static int have_models(const char *first, ...) {
    va_list ap;
    va_start(ap, first);
    for (const char *m = first; m; m = va_arg(ap, const char *)) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s/.mkmodel-stamp", cache_dir, m);
        if (!exists(p)) {
            va_end(ap);
            print_message("model %s/%s not generated (run make models / models-full)\n", cache_dir, m);
            return 0;
        }
    }
    va_end(ap);
    return 1;
}

static void sha256_bytes(const void *data, size_t n, char out[65]) {
    uint8_t md[32];
    assert_int_equal(qvu_sha256(data, n, md), 0);
    qvu_hex(md, 32, out);
}

/* Streamed: the 1.7B checkpoints are larger than a test should hold in memory. */
static void sha256_file(const char *path, char out[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open", path);
    enum { BUF = 8 << 20 };
    unsigned char *buf = malloc(BUF);
    uint8_t md[32];
    assert_non_null(buf);
    qvu_sha256_ctx *c = qvu_sha256_begin();
    size_t n;
    while ((n = fread(buf, 1, BUF, f)) > 0) assert_int_equal(qvu_sha256_add(c, buf, n), 0);
    fclose(f);
    free(buf);
    assert_int_equal(qvu_sha256_end(c, md), 0);
    qvu_hex(md, 32, out);
}

static qvm_st *open_st(const char *rel) {
    char p[1200], err[512];
    path_in_cache(p, sizeof p, rel);
    qvm_st *st = qvm_st_open(p, err, sizeof err);
    if (!st) fail_msg("%s", err);
    return st;
}

/* Checks one checksums file: lines "HASH  DIR/FILE" and "KIND TENSOR HASH" where KIND is
 * base / customvoice / speech_tokenizer of the model dirs named by prefix (q06b / q17b). */
static void check_checksums(const char *list, const char *prefix) {
    FILE *f = fopen(list, "r");
    if (!f) fail_msg("%s: cannot open", list);
    char line[1024];
    int n_files = 0, n_tensors = 0, n_bad = 0;
    while (fgets(line, sizeof line, f)) {
        char a[512], b[512], c[512], got[65];
        if (line[0] == '#' || line[0] == '\n') continue;
        int k = sscanf(line, "%511s %511s %511s", a, b, c);
        if (k == 2) {
            char p[1200];
            path_in_cache(p, sizeof p, b);
            sha256_file(p, got);
            n_files++;
            if (strcmp(got, a)) {
                n_bad++;
                print_error("%s: sha256 %s, expected %s\n", p, got, a);
            }
        } else if (k == 3) {
            char rel[600];
            if (!strcmp(a, "base")) snprintf(rel, sizeof rel, "%s-base/model.safetensors", prefix);
            else if (!strcmp(a, "customvoice")) snprintf(rel, sizeof rel, "%s-cv/model.safetensors", prefix);
            else if (!strcmp(a, "speech_tokenizer"))
                snprintf(rel, sizeof rel, "%s-base/speech_tokenizer/model.safetensors", prefix);
            else fail_msg("%s: unknown kind %s", list, a);
            qvm_st *st = open_st(rel);
            const qvm_tensor *t = qvm_st_find(st, b);
            if (!t) fail_msg("%s: tensor %s missing", rel, b);
            sha256_bytes(t->data, t->n_bytes, got);
            qvm_st_close(st);
            n_tensors++;
            if (strcmp(got, c)) {
                n_bad++;
                print_error("%s %s: sha256 %s, expected %s\n", rel, b, got, c);
            }
        } else {
            fail_msg("%s: malformed line: %s", list, line);
        }
    }
    fclose(f);
    print_message("%s: %d files, %d tensors checked, %d mismatches\n", list, n_files, n_tensors, n_bad);
    assert_true(n_files >= 3 && n_bad == 0);
}

static void test_checksums_06b(void **state) {
    (void)state;
    if (!have_models("q06b-base", "q06b-cv", NULL)) skip();
    check_checksums("tests/golden/checksums.txt", "q06b");
}

/* 1.7B models are opt-in (QVOICE_MODELS_17B=1 makes them); hashing them costs 7.7 GB of reads. */
static void test_checksums_17b(void **state) {
    (void)state;
    const char *on = getenv("QVOICE_MODELS_17B");
    if (!on || strcmp(on, "1")) {
        print_message("QVOICE_MODELS_17B != 1: 1.7B checksums not checked\n");
        skip();
    }
    if (!have_models("q17b-base", "q17b-cv", NULL)) skip();
    check_checksums("tests/golden/checksums-1.7b.txt", "q17b");
}


static void check_configs(const char *model) {
    static const char *const files[] = {"config.json",
                                        "generation_config.json",
                                        "preprocessor_config.json",
                                        "speech_tokenizer/config.json",
                                        "speech_tokenizer/preprocessor_config.json",
                                        "speech_tokenizer/configuration.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char ref[1200], got[1200];
        size_t n_ref, n_got;
        snprintf(ref, sizeof ref, "tests/golden/configs/%s/%s", model, files[i]);
        snprintf(got, sizeof got, "%s/%s/%s", cache_dir, model, files[i]);
        char *a = tmp_read(ref, &n_ref), *b = tmp_read(got, &n_got);
        if (n_ref != n_got || memcmp(a, b, n_ref)) fail_msg("%s differs from %s", got, ref);
        free(a);
        free(b);
    }
}

static void test_configs_identical(void **state) {
    (void)state;
    if (!have_models("q06b-base", "q06b-cv", NULL)) skip();
    check_configs("q06b-base");
    check_configs("q06b-cv");
    const char *on = getenv("QVOICE_MODELS_17B");
    if (on && !strcmp(on, "1") && have_models("q17b-base", "q17b-cv", NULL)) {
        check_configs("q17b-base");
        check_configs("q17b-cv");
    }
}

static uint16_t bf16_at(const qvm_tensor *t, size_t i) {
    assert_int_equal(t->dtype, QVM_DTYPE_BF16);
    assert_true((i + 1) * 2 <= t->n_bytes);
    uint16_t v;
    memcpy(&v, (const char *)t->data + 2 * i, 2);
    return v;
}

static uint32_t f32_bits_at(const qvm_tensor *t, size_t i) {
    assert_int_equal(t->dtype, QVM_DTYPE_F32);
    assert_true((i + 1) * 4 <= t->n_bytes);
    uint32_t v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

static const qvm_tensor *find(const qvm_st *st, const char *name) {
    const qvm_tensor *t = qvm_st_find(st, name);
    if (!t) fail_msg("tensor %s missing", name);
    return t;
}

/* Hand-computed values (§1): FNV-1a of the name, SplitMix64 finaliser, v = base + r * 2^(1-e),
 * BF16 round-to-nearest-even. Tiny q_proj is [64, 64]: fan_in 64 -> e = 3. */
static void test_elements_by_hand(void **state) {
    (void)state;
    if (!have_models("tiny-base", "tiny-cv", "tiny-vd", NULL)) skip();
    qvm_st *st = open_st("tiny-base/model.safetensors");
    const qvm_tensor *q = find(st, "talker.model.layers.0.self_attn.q_proj.weight");
    assert_int_equal(bf16_at(q, 0), 0xbc66);
    assert_int_equal(bf16_at(q, 1), 0x3e11);
    assert_int_equal(bf16_at(q, 4095), 0x3dd6);
    const qvm_tensor *n = find(st, "talker.model.norm.weight"); /* base 1, e = 4 */
    assert_int_equal(bf16_at(n, 0), 0x3f88);
    assert_int_equal(bf16_at(n, 63), 0x3f85);
    const qvm_tensor *ce = find(st, "talker.model.codec_embedding.weight");
    assert_int_equal(bf16_at(ce, 5 * 64), 0xbe5f);
    assert_int_equal(bf16_at(ce, 3066 * 64), 0x3e0a);
    assert_int_equal(bf16_at(ce, 2500 * 64 + 3), 0xbe2b);
    qvm_st_close(st);

    /* CustomVoice: row 5 copied, row 3066 (serena) a preset drawn with seed 2, row 2500 perturbed
     * by d = (z >> 61) - 3. VoiceDesign: no presets, so row 3066 is perturbed too. */
    st = open_st("tiny-cv/model.safetensors");
    ce = find(st, "talker.model.codec_embedding.weight");
    assert_int_equal(bf16_at(ce, 5 * 64), 0xbe5f);
    assert_int_equal(bf16_at(ce, 3066 * 64), 0x3ec9);
    assert_int_equal(bf16_at(ce, 2500 * 64 + 3), 0xbe2a);
    assert_null(qvm_st_find(st, "speaker_encoder.fc.weight"));
    qvm_st_close(st);
    st = open_st("tiny-vd/model.safetensors");
    ce = find(st, "talker.model.codec_embedding.weight");
    assert_int_equal(bf16_at(ce, 3066 * 64), 0x3e0e);
    qvm_st_close(st);

    st = open_st("tiny-base/speech_tokenizer/model.safetensors");
    const qvm_tensor *cu = find(st, "decoder.quantizer.rvq_first.vq.layers.0._codebook.cluster_usage");
    assert_int_equal(f32_bits_at(cu, 0), 0x3f968745u);    /* 1.1760031 */
    assert_int_equal(f32_bits_at(cu, 2047), 0x3f68074au); /* 0.9063612 */
    const qvm_tensor *init = find(st, "encoder.quantizer.acoustic_residual_vector_quantizer.layers.30.codebook.initialized");
    assert_int_equal(f32_bits_at(init, 0), 0x3f800000u);
    qvm_st_close(st);
}

/* CustomVoice keeps text embedding and norms bit for bit; everything else differs in low bits. */
static void test_cv_derivation(void **state) {
    (void)state;
    if (!have_models("tiny-base", "tiny-cv", NULL)) skip();
    qvm_st *b = open_st("tiny-base/model.safetensors"), *c = open_st("tiny-cv/model.safetensors");
    int n_copy = 0, n_diff = 0;
    for (int i = 0; i < qvm_st_count(c); i++) {
        const qvm_tensor *tc = qvm_st_at(c, i), *tb = qvm_st_find(b, tc->name);
        assert_non_null(tb);
        assert_int_equal(tb->n_bytes, tc->n_bytes);
        int same = memcmp(tb->data, tc->data, tb->n_bytes) == 0;
        int must_copy = !strcmp(tc->name, "talker.model.text_embedding.weight") || strstr(tc->name, "norm.weight");
        if (must_copy && !same) fail_msg("%s: CustomVoice differs from Base", tc->name);
        if (!must_copy && same) fail_msg("%s: CustomVoice identical to Base", tc->name);
        n_copy += must_copy, n_diff += !must_copy;
    }
    print_message("tiny-cv: %d tensors copied, %d perturbed\n", n_copy, n_diff);
    assert_int_equal(qvm_st_count(b) - qvm_st_count(c), 76);
    qvm_st_close(b);
    qvm_st_close(c);
}

/* §2 header layout: 8-byte length, metadata first, names in byte order, packed offsets, padding. */
static void check_layout(const char *rel, int n_expected) {
    char p[1200];
    path_in_cache(p, sizeof p, rel);
    FILE *f = fopen(p, "rb");
    if (!f) fail_msg("%s: cannot open", p);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    assert_true(hlen % 8 == 0 && hlen < (64u << 20));
    char *h = malloc(hlen + 1);
    assert_non_null(h);
    assert_int_equal(fread(h, 1, hlen, f), hlen);
    fclose(f);
    h[hlen] = 0;
    assert_memory_equal(h, "{\"__metadata__\":{\"format\":\"pt\"},\"", 33);
    qvm_st *st = open_st(rel);
    assert_int_equal(qvm_st_count(st), n_expected);
    const char *prev = "";
    const char *data0 = NULL;
    size_t expect_off = 0;
    for (int i = 0; i < qvm_st_count(st); i++) {
        const qvm_tensor *t = qvm_st_at(st, i);
        if (!data0) data0 = t->data;
        assert_true(strcmp(prev, t->name) < 0);
        assert_true((size_t)((const char *)t->data - data0) == expect_off);
        expect_off += t->n_bytes;
        prev = t->name;
    }
    free(h);
    qvm_st_close(st);
}

static void test_tiny_layout(void **state) {
    (void)state;
    if (!have_models("tiny-base", "tiny-cv", NULL)) skip();
    /* tiny talker: 6 + 2 x 11 + 2 = 30; code predictor: 2 x 11 + 1 + 2 x 15 = 53; ECAPA 76 */
    check_layout("tiny-base/model.safetensors", 30 + 53 + 76);
    check_layout("tiny-cv/model.safetensors", 30 + 53);
    /* decoder 36 + 2 + (2 + 2 x 11 + 3) + 22 + 2 + 112 + 4; encoder 28 + 2 x 12 + 1 + 100 */
    check_layout("tiny-base/speech_tokenizer/model.safetensors", 36 + 2 + 27 + 22 + 2 + 112 + 4 + 28 + 24 + 1 + 100);
}

/* The generated dirs parse with the engine's config reader and match its expected-tensor tables
 * (checkpoint/manifest.c, written independently from the same spec). */
static void check_manifest(const char *model) {
    char dir[1200], p[1300], err[512];
    path_in_cache(dir, sizeof dir, model);
    qvm_model_config mc;
    qvm_codec_config cc;
    if (qvm_model_config_load(&mc, dir, err, sizeof err)) fail_msg("%s", err);
    if (qvm_codec_config_load(&cc, dir, err, sizeof err)) fail_msg("%s", err);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    qvm_st *m = qvm_st_open(p, err, sizeof err);
    if (!m) fail_msg("%s", err);
    snprintf(p, sizeof p, "%s/speech_tokenizer/model.safetensors", dir);
    qvm_st *c = qvm_st_open(p, err, sizeof err);
    if (!c) fail_msg("%s", err);
    if (qvm_manifest_check(&mc, &cc, m, c, err, sizeof err)) fail_msg("%s", err);
    print_message("%s: %d + %d tensors match the engine manifest\n", model, qvm_st_count(m), qvm_st_count(c));
    qvm_st_close(m);
    qvm_st_close(c);
}

static void test_engine_manifest(void **state) {
    (void)state;
    if (!have_models("tiny-base", "tiny-cv", "tiny-vd", NULL)) skip();
    check_manifest("tiny-base");
    check_manifest("tiny-cv");
    check_manifest("tiny-vd");
    if (have_models("q06b-base", "q06b-cv", NULL)) {
        check_manifest("q06b-base");
        check_manifest("q06b-cv");
    }
    if (have_models("q17b-base", "q17b-cv", "q17b-vd", NULL)) { /* headers only: cheap */
        check_manifest("q17b-base");
        check_manifest("q17b-cv");
        check_manifest("q17b-vd");
    }
}

int main(void) {
    snprintf(cache_dir, sizeof cache_dir, "%s", test_cache_dir());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elements_by_hand), cmocka_unit_test(test_cv_derivation),
        cmocka_unit_test(test_tiny_layout),      cmocka_unit_test(test_engine_manifest),
        cmocka_unit_test(test_configs_identical),
        cmocka_unit_test(test_checksums_06b),    cmocka_unit_test(test_checksums_17b),
    };
    return cmocka_run_group_tests_name("mkmodel", tests, NULL, NULL);
}
