/* test_safetensors.c — the safetensors reader on small files written by the test itself:
 * one valid file, sharded checkpoints, and one malformed file per check, each of which must fail
 * with its own one-line error (asserted by substring) and no crash.
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

#include "kernels/kernels.h"
#include "checkpoint/safetensors.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/tmpdir.h"

/* Opens path expecting failure; asserts every substring in the NULL-terminated list. */
static void expect_fail(const char *path, ...) {
    char err[512] = "";
    qvm_st *st = qvm_st_open(path, err, sizeof err);
    if (st) qvm_st_close(st);
    assert_null(st);
    printf("    error: %s\n", err);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, path));
    va_list ap;
    va_start(ap, path);
    for (const char *s; (s = va_arg(ap, const char *));) {
        if (!strstr(err, s)) fail_msg("error \"%s\" lacks \"%s\"", err, s);
    }
    va_end(ap);
}

/* bf16 1.0, -2.0 | f32 0.5 x3 | f16 1.0, -0.5 | i64 7 */
static uint8_t g_data[32];
static const char *g_hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                           "\"a.bf16\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                           "\"b.f32\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[4,16]},"
                           "\"c.f16\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[16,20]},"
                           "\"d.i64\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32]}}";

static void fill_data(void) {
    uint16_t bf[2] = {0x3F80, 0xC000};
    float f[3] = {0.5f, 0.5f, 0.5f};
    uint16_t h[2] = {0x3C00, 0xB800};
    int64_t i = 7;
    memset(g_data, 0, sizeof g_data);
    memcpy(g_data, bf, 4);
    memcpy(g_data + 4, f, 12);
    memcpy(g_data + 16, h, 4);
    memcpy(g_data + 24, &i, 8); /* 20..24 is an unused gap: allowed */
}

static void test_valid(void **state) {
    (void)state;
    fill_data();
    const char *p = tmp_path("valid.safetensors");
    tmp_write_st(p, g_hdr, g_data, 32);
    char err[256] = "";
    qvm_st *st = qvm_st_open(p, err, sizeof err);
    if (!st) fail_msg("%s", err);
    assert_int_equal(qvm_st_count(st), 4);
    assert_string_equal(qvm_st_at(st, 0)->name, "a.bf16"); /* header order, metadata skipped */
    assert_string_equal(qvm_st_at(st, 3)->name, "d.i64");
    assert_null(qvm_st_at(st, 4));
    assert_null(qvm_st_at(st, -1));
    assert_string_equal(qvm_st_at_sorted(st, 1)->name, "b.f32"); /* name order (= header here) */
    assert_null(qvm_st_at_sorted(st, 4));
    const qvm_tensor *b = qvm_st_find(st, "b.f32");
    assert_non_null(b);
    assert_int_equal(b->n_dims, 2);
    assert_int_equal(b->shape[1], 3);
    assert_int_equal(b->n_bytes, 12);
    assert_null(qvm_st_find(st, "nope"));
    assert_string_equal(qvm_st_file(st, b), p);

    float *a = qvm_tensor_to_f32(qvm_st_find(st, "a.bf16"));
    assert_non_null(a);
    assert_true(a[0] == 1.0f && a[1] == -2.0f);
    qvk_free(a);
    float *c = qvm_tensor_to_f32(qvm_st_find(st, "c.f16"));
    assert_true(c[0] == 1.0f && c[1] == -0.5f);
    qvk_free(c);
    float *bb = qvm_tensor_to_f32(b);
    assert_true(bb[0] == 0.5f && bb[2] == 0.5f);
    qvk_free(bb);
    const qvm_tensor *d = qvm_st_find(st, "d.i64");
    assert_int_equal(d->n_dims, 0);
    assert_null(qvm_tensor_to_f32(d));
    int64_t v;
    memcpy(&v, d->data, 8);
    assert_int_equal(v, 7);

    int64_t good[2] = {1, 3}, bad[2] = {3, 1};
    assert_non_null(qvm_st_expect(st, "b.f32", QVM_DTYPE_F32, 2, good, err, sizeof err));
    assert_null(qvm_st_expect(st, "b.f32", QVM_DTYPE_BF16, 2, bad, err, sizeof err));
    printf("    error: %s\n", err);
    assert_non_null(strstr(err, "tensor b.f32: expected [3, 1] BF16, found [1, 3] F32"));
    assert_null(qvm_st_expect(st, "zz", QVM_DTYPE_F32, 2, good, err, sizeof err));
    assert_non_null(strstr(err, "tensor zz: missing"));
    qvm_st_close(st);
    qvm_st_close(NULL);
}

static void test_memory(void **state) {
    (void)state;
    fill_data();
    size_t n = strlen(g_hdr), padded = (n + 7) & ~(size_t)7;
    uint8_t *buf = calloc(1, 8 + padded + 32);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, g_hdr, n);
    memset(buf + 8 + n, ' ', padded - n);
    memcpy(buf + 8 + padded, g_data, 32);
    char err[256];
    qvm_st *st = qvm_st_open_memory(buf, 8 + padded + 32, "mem", err, sizeof err);
    assert_non_null(st);
    assert_int_equal(qvm_st_count(st), 4);
    qvm_st_close(st);
    assert_null(qvm_st_open_memory(buf, 7, "mem", err, sizeof err));
    assert_non_null(strstr(err, "mem: truncated file"));
    free(buf);
}

static void test_truncated(void **state) {
    (void)state;
    const char *p = tmp_path("trunc.safetensors");
    tmp_write(p, "\x10\0\0", 3);
    expect_fail(p, "truncated file", "expected at least 8 bytes, found 3", NULL);
    /* Data cut short: the last tensor's range now ends past the file. */
    fill_data();
    tmp_write_st(p, g_hdr, g_data, 20);
    expect_fail(p, "tensor d.i64", "data_offsets out of range", "expected end <= 20, found 32",
                NULL);
    expect_fail(tmp_path("does-not-exist.safetensors"), "cannot open", NULL);
}

static void test_header_len(void **state) {
    (void)state;
    const char *p = tmp_path("hlen.safetensors");
    uint8_t b[16] = {0xF0, 0x00};
    memcpy(b + 8, "{}      ", 8);
    tmp_write(p, b, 16);
    expect_fail(p, "header length exceeds file", "expected <= 8, found 240", NULL);
    uint8_t big[16] = {0, 0, 0, 0, 0, 0, 0, 0x80};
    tmp_write(p, big, 16);
    expect_fail(p, "header length over limit", NULL);
}

static void test_bad_json(void **state) {
    (void)state;
    const char *p = tmp_path("json.safetensors");
    tmp_write_st(p, "{\"a\":{\"dtype\":\"F32\",", NULL, 0);
    expect_fail(p, "header is not valid JSON", NULL);
    tmp_write_st(p, "[1,2]", NULL, 0);
    expect_fail(p, "header is not a JSON object", NULL);
    tmp_write_st(p, "{}x", NULL, 0);
    expect_fail(p, "trailing bytes after JSON header", NULL);
    tmp_write_st(p,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 "\0\0\0\0\0\0\0\0", 8);
    expect_fail(p, "duplicate tensor a", NULL);
    tmp_write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", NULL, 0);
    expect_fail(p, "tensor a: bad shape entry 0", NULL);
    tmp_write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}",
                 NULL, 0);
    expect_fail(p, "tensor a: too many dimensions (expected <= 4, found 5)", NULL);
    tmp_write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", NULL, 0);
    expect_fail(p, "tensor a: bad data_offsets", NULL);
    tmp_write_st(p, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 0);
    expect_fail(p, "tensor a: missing or non-string dtype", NULL);
}

static void test_dtype(void **state) {
    (void)state;
    const char *p = tmp_path("dtype.safetensors");
    tmp_write_st(p, "{\"w.q\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                 "\0\0\0\0", 4);
    expect_fail(p, "tensor w.q: unsupported dtype", "found F8_E4M3", NULL);
}

static void test_offsets(void **state) {
    (void)state;
    uint8_t z[64] = {0};
    const char *p = tmp_path("off.safetensors");
    tmp_write_st(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[48,64]}}", z, 32);
    expect_fail(p, "tensor x: data_offsets out of range", "expected end <= 32, found 64", NULL);
    tmp_write_st(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", z, 32);
    expect_fail(p, "tensor x: data_offsets reversed", NULL);
    tmp_write_st(p,
                 "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                 "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                 z, 32);
    expect_fail(p, "overlap", "expected y to start at >= 16, found 8", NULL);
    tmp_write_st(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", z, 32);
    expect_fail(p, "tensor x: data not aligned", NULL);
    tmp_write_st(p,
                 "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                 "\"data_offsets\":[0,16]}}",
                 z, 32);
    expect_fail(p, "tensor x: shape", "overflows", NULL);
}

static void test_shape_size(void **state) {
    (void)state;
    uint8_t z[32] = {0};
    const char *p = tmp_path("shape.safetensors");
    tmp_write_st(p, "{\"m\":{\"dtype\":\"BF16\",\"shape\":[3,4],\"data_offsets\":[0,16]}}", z, 32);
    expect_fail(p, "tensor m: byte range does not match shape [3, 4] BF16",
                "expected 24 bytes, found 16", NULL);
}

static void write_index(const char *path, const char *json) {
    tmp_write(path, json, strlen(json));
}

static void test_sharded(void **state) {
    (void)state;
    uint8_t z[16] = {0};
    float one = 1.0f;
    memcpy(z, &one, 4);
    tmp_write_st(tmp_path("m-1.safetensors"),
                 "{\"p\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                 z, 16);
    tmp_write_st(tmp_path("m-2.safetensors"),
                 "{\"r\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", z, 4);
    const char *idx = tmp_path("model.safetensors.index.json");
    write_index(idx,
                "{\"metadata\":{\"total_size\":20},\"weight_map\":{"
                "\"p\":\"m-1.safetensors\",\"q\":\"m-1.safetensors\",\"r\":\"m-2.safetensors\"}}");
    char err[512] = "";
    qvm_st *st = qvm_st_open(idx, err, sizeof err);
    if (!st) fail_msg("%s", err);
    assert_int_equal(qvm_st_count(st), 3);
    const qvm_tensor *r = qvm_st_find(st, "r");
    assert_non_null(r);
    assert_non_null(strstr(qvm_st_file(st, r), "m-2.safetensors"));
    assert_true(((const float *)qvm_st_find(st, "p")->data)[0] == 1.0f);
    qvm_st_close(st);

    write_index(idx, "{\"weight_map\":{\"p\":\"m-1.safetensors\",\"q\":\"m-1.safetensors\","
                     "\"r\":\"m-3.safetensors\"}}");
    {
        char e2[512];
        assert_null(qvm_st_open(idx, e2, sizeof e2));
        printf("    error: %s\n", e2);
        assert_non_null(strstr(e2, "m-3.safetensors: cannot open"));
    }
    write_index(idx, "{\"weight_map\":{\"p\":\"m-1.safetensors\",\"q\":\"m-1.safetensors\","
                     "\"r\":\"m-2.safetensors\",\"s\":\"m-2.safetensors\"}}");
    {
        char e2[512];
        assert_null(qvm_st_open(idx, e2, sizeof e2));
        printf("    error: %s\n", e2);
        assert_non_null(strstr(e2, "m-2.safetensors: tensor s missing"));
        assert_non_null(strstr(e2, "model.safetensors.index.json"));
    }
    write_index(idx, "{\"weight_map\":{\"p\":\"m-1.safetensors\",\"r\":\"m-2.safetensors\"}}");
    {
        char e2[512];
        assert_null(qvm_st_open(idx, e2, sizeof e2));
        printf("    error: %s\n", e2);
        assert_non_null(strstr(e2, "tensor q not listed in"));
    }
    write_index(idx, "{\"weight_map\":{\"p\":\"../m-1.safetensors\"}}");
    expect_fail(idx, "shard must be a file name", NULL);
    write_index(idx, "{\"metadata\":{}}");
    expect_fail(idx, "missing key weight_map", NULL);
    write_index(idx, "{\"weight_map\":{\"p\":\"m-1.safetensors\",\"q\":\"m-2.safetensors\","
                     "\"r\":\"m-2.safetensors\"}}");
    expect_fail(idx, "tensor q", NULL);
}

/* Every committed hostile file fails with its expected one-line error (tests/hostile/safetensors).
 */
static void test_hostile(void **state) {
    (void)state;
    const char *dir = "tests/hostile/safetensors";
    char path[1024], line[512];
    snprintf(path, sizeof path, "%s/expected.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s (tests run from the repo root)", path);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = 0;
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = 0;
        snprintf(path, sizeof path, "%s/%s", dir, line);
        expect_fail(path, tab + 1, NULL);
        n++;
    }
    fclose(f);
    printf("    %d hostile files rejected as expected\n", n);
    assert_true(n >= 20);
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_valid, test_memory, test_truncated, test_header_len,
         test_bad_json, test_dtype, test_offsets, test_shape_size, test_sharded, test_hostile)
