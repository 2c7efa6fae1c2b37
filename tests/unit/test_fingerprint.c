/* test_fingerprint.c — model fingerprint and per-tensor SHA-256.
 * The fingerprint is checked against an independent re-statement of the byte stream documented in
 * fingerprint.h (hashed here with EVP directly), for its invariances (header order, sharding) and
 * sensitivities (config bytes, weight bytes in content mode only); tensor hashes against the
 * reference checksums of the synthetic 0.6B checkpoints when they are in $QVOICE_CACHE.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "checkpoint/fingerprint.h"
#include "checkpoint/safetensors.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/tmpdir.h"
#include "util/sha256.h"

static const char k_config[] = "{\"tts_model_type\": \"base\"}\n";

/* Tensors: "b.w" F32 [2] = {1, 2}; "a.x" BF16 [1, 2] = {0x3F80, 0x4000}. */
static uint8_t g_b[8], g_a[4];

/* Writes model.safetensors from g_b and g_a, in header order b, a (or a, b with metadata). */
static void write_model(int swapped) {
    uint8_t data[16] = {0};
    if (!swapped) {
        memcpy(data, g_b, 8);
        memcpy(data + 8, g_a, 4);
        tmp_write_st(tmp_path("model.safetensors"),
                     "{\"b.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"a.x\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]}}",
                     data, 16);
    } else {
        memcpy(data, g_a, 4);
        memcpy(data + 8, g_b, 8);
        tmp_write_st(tmp_path("model.safetensors"),
                     "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"a.x\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[0,4]},"
                     "\"b.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                     data, 16);
    }
}

static void make_model(int swapped) {
    float b[2] = {1, 2};
    uint16_t a[2] = {0x3F80, 0x4000};
    memcpy(g_b, b, 8);
    memcpy(g_a, a, 4);
    write_model(swapped);
    tmp_write(tmp_path("config.json"), k_config, strlen(k_config));
}

static void le(EVP_MD_CTX *c, uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    EVP_DigestUpdate(c, b, (size_t)n);
}

static void sha(const void *p, size_t n, uint8_t out[32]) {
    unsigned int k;
    EVP_Digest(p, n, out, &k, EVP_sha256(), NULL);
}

/* One tensor's record in the documented stream: name, dtype, shape, [SHA-256 of the data]. */
static void put_tensor(EVP_MD_CTX *c, const char *name, const char *dtype, int n_dims,
                       const uint64_t *shape, const void *data, size_t n_bytes, int content) {
    le(c, strlen(name), 4);
    EVP_DigestUpdate(c, name, strlen(name));
    le(c, strlen(dtype), 1);
    EVP_DigestUpdate(c, dtype, strlen(dtype));
    le(c, (uint64_t)n_dims, 1);
    for (int k = 0; k < n_dims; k++)
        le(c, shape[k], 8);
    if (content) {
        uint8_t h[32];
        sha(data, n_bytes, h);
        EVP_DigestUpdate(c, h, 32);
    }
}

/* The documented stream, written out independently of fingerprint.c. */
static void expected_fp(int content, uint8_t out[32]) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    EVP_DigestUpdate(c, "qvoice-model-fingerprint-v1", 27);
    uint8_t m = (uint8_t)content;
    EVP_DigestUpdate(c, &m, 1);
    le(c, strlen(k_config), 8);
    EVP_DigestUpdate(c, k_config, strlen(k_config));
    le(c, 2, 4);
    /* "a.x" < "b.w" */
    put_tensor(c, "a.x", "BF16", 2, (const uint64_t[]){1, 2}, g_a, 4, content);
    put_tensor(c, "b.w", "F32", 1, (const uint64_t[]){2}, g_b, 8, content);
    unsigned int k;
    EVP_DigestFinal_ex(c, out, &k);
    EVP_MD_CTX_free(c);
}

static void fp(enum qvm_fingerprint_mode mode, uint8_t out[32]) {
    char err[256];
    if (qvm_fingerprint_model(tmp_dir, mode, out, err, sizeof err) != 0) fail_msg("%s", err);
}

static void test_tensor_sha(void **state) {
    (void)state;
    qvm_tensor t = {.name = "x", .dtype = QVM_DTYPE_F32, .data = "abc", .n_bytes = 3};
    uint8_t h[32];
    char hex[65];
    assert_int_equal(qvm_tensor_sha256(&t, h), 0);
    assert_string_equal(qvu_hex(h, 32, hex),
                        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    t.n_bytes = 0;
    assert_int_equal(qvm_tensor_sha256(&t, h), 0);
    assert_string_equal(qvu_hex(h, 32, hex),
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_stream(void **state) {
    (void)state;
    uint8_t got[32], want[32];
    char hg[65], hw[65];
    make_model(0);
    for (int content = 0; content <= 1; content++) {
        fp(content ? QVM_FINGERPRINT_CONTENT : QVM_FINGERPRINT_TABLE, got);
        expected_fp(content, want);
        printf("    mode %d: %s\n", content, qvu_hex(got, 32, hg));
        assert_string_equal(hg, qvu_hex(want, 32, hw));
    }
    /* Header order, offsets and __metadata__ do not matter. */
    make_model(1);
    fp(QVM_FINGERPRINT_CONTENT, got);
    expected_fp(1, want);
    assert_memory_equal(got, want, 32);
    /* Sharding does not matter either. */
    char p[256];
    snprintf(p, sizeof p, "%s/model.safetensors", tmp_dir);
    unlink(p);
    tmp_write_st(tmp_path("s1.safetensors"),
                 "{\"b.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", g_b, 8);
    tmp_write_st(tmp_path("s2.safetensors"),
                 "{\"a.x\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[0,4]}}", g_a, 4);
    const char *idx = "{\"weight_map\":{\"a.x\":\"s2.safetensors\",\"b.w\":\"s1.safetensors\"}}";
    tmp_write(tmp_path("model.safetensors.index.json"), idx, strlen(idx));
    fp(QVM_FINGERPRINT_CONTENT, got);
    assert_memory_equal(got, want, 32);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", tmp_dir);
    unlink(p);
}

static void test_sensitivity(void **state) {
    (void)state;
    uint8_t t0[32], c0[32], t1[32], c1[32];
    make_model(0);
    fp(QVM_FINGERPRINT_TABLE, t0);
    fp(QVM_FINGERPRINT_CONTENT, c0);
    assert_memory_not_equal(t0, c0, 32);
    /* One weight byte: only the content fingerprint changes. */
    g_b[0] ^= 1;
    write_model(0);
    fp(QVM_FINGERPRINT_TABLE, t1);
    fp(QVM_FINGERPRINT_CONTENT, c1);
    assert_memory_equal(t0, t1, 32);
    assert_memory_not_equal(c0, c1, 32);
    /* One config byte: both change. */
    make_model(0);
    tmp_write(tmp_path("config.json"), "{\"tts_model_type\": \"base\"} \n", strlen(k_config) + 1);
    fp(QVM_FINGERPRINT_TABLE, t1);
    fp(QVM_FINGERPRINT_CONTENT, c1);
    assert_memory_not_equal(t0, t1, 32);
    assert_memory_not_equal(c0, c1, 32);
    char err[256];
    assert_int_equal(
        qvm_fingerprint_model("/nonexistent-dir", QVM_FINGERPRINT_TABLE, t1, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/config.json: cannot open"));
}

/* Reference tensor hashes from tests/golden/checksums.txt (docs/synthetic-checkpoints.md v1). */
static void test_golden_tensors(void **state) {
    (void)state;
    const char *cache = test_cache_dir();
    static const struct {
        const char *dir, *name, *hex;
    } ref[] = {
        {"q06b-base", "talker.model.norm.weight",
         "01a46c15eaa29a7431a6c758d4d3cf0cc7adb136df2e12e50843570bde528d45"},
        {"q06b-base", "speaker_encoder.fc.weight",
         "22886995b5e5078d487023da026b5976c5a1b4c987bb753a742ad9ee4a400a16"},
        {"q06b-cv", "talker.model.layers.0.self_attn.q_proj.weight",
         "e6361407b86414a17021fb728ffe7bc6af89348338de217d7eded9a5b61dc358"},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        char dir[1024], err[512], hex[65];
        snprintf(dir, sizeof dir, "%s/%s", cache, ref[i].dir);
        char p[1100];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        if (access(p, R_OK) != 0) {
            printf("    note: %s absent (run `make models-full`), skipped\n", dir);
            continue;
        }
        qvm_st *st = qvm_st_open_dir(dir, "model", err, sizeof err);
        if (!st) fail_msg("%s", err);
        const qvm_tensor *t = qvm_st_find(st, ref[i].name);
        assert_non_null(t);
        uint8_t h[32];
        assert_int_equal(qvm_tensor_sha256(t, h), 0);
        assert_string_equal(qvu_hex(h, 32, hex), ref[i].hex);
        qvm_st_close(st);
        n++;
    }
    printf("    %d reference tensor hashes matched\n", n);
    /* Base and CustomVoice tiny models must not share a fingerprint. */
    char d1[1024], d2[1024], err[512], hex[65];
    snprintf(d1, sizeof d1, "%s/tiny-base", cache);
    snprintf(d2, sizeof d2, "%s/tiny-cv", cache);
    uint8_t f1[32], f2[32];
    if (qvm_fingerprint_model(d1, QVM_FINGERPRINT_CONTENT, f1, err, sizeof err) == 0 &&
        qvm_fingerprint_model(d2, QVM_FINGERPRINT_CONTENT, f2, err, sizeof err) == 0) {
        printf("    tiny-base %s\n", qvu_hex(f1, 32, hex));
        printf("    tiny-cv   %s\n", qvu_hex(f2, 32, hex));
        assert_memory_not_equal(f1, f2, 32);
    } else {
        printf("    note: tiny models absent (%s), skipped\n", err);
    }
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_tensor_sha, test_stream, test_sensitivity,
         test_golden_tensors)
