/* test_qvf.c — voicefmt library: CRC-32C known answers, v4 and v3 round trips, WDELTA encode/apply,
 * legacy v1/v2/v3/.bin files built from the byte maps of docs/qvoice-format.md §8, atomic writes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/unit/helpers/qvf_sample.h"
#include <lz4.h>
#include "voicefmt/qvf_impl.h"

static char err[512];

static void test_crc32c_known_answer(void **state) {
    (void)state;
    assert_int_equal(qvf_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(qvf_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(qvf_crc32c(qvf_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    uint8_t big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = (uint8_t)(i * 7);
    for (int off = 0; off < 9;
         off++) /* unaligned starts, odd tails: SSE4.2 path equals the table */
        assert_int_equal(qvf_crc32c(0, big + off, 1000 - 2 * off),
                         qvf_crc32c_sw(0, big + off, 1000 - 2 * off));
    assert_int_equal(qvf_crc32c(0, "", 0), 0);
}

/* The one "is this a voice file?" rule: magic first, then the name's ending. */
static void test_file_kind(void **state) {
    (void)state;
    assert_int_equal(qvf_file_kind("a/b.qvoice", NULL, 0), QVF_KIND_QVOICE);
    assert_int_equal(qvf_file_kind("upload.wav", "QVCE\4\0\0\0", 8), QVF_KIND_QVOICE);
    assert_int_equal(qvf_file_kind("upload.wav", "QVC", 3), QVF_KIND_NONE);
    assert_int_equal(qvf_file_kind("x.bin", NULL, 0), QVF_KIND_BIN);
    assert_int_equal(qvf_file_kind("x.bin", "QVCE", 4), QVF_KIND_QVOICE);
    assert_int_equal(qvf_file_kind(".qvoice", NULL, 0), QVF_KIND_NONE);
    assert_int_equal(qvf_file_kind("ryan", NULL, 0), QVF_KIND_NONE);
    assert_int_equal(qvf_file_kind("clip.qvoice.wav", NULL, 0), QVF_KIND_NONE);
    assert_int_equal(qvf_file_kind(NULL, NULL, 0), QVF_KIND_NONE);
}

/* The one table of variant names: every name maps back to its number, and no other does. */
static void test_variant_names(void **state) {
    (void)state;
    for (uint32_t v = QVF_VARIANT_BASE; v <= QVF_VARIANT_VOICE_DESIGN; v++)
        assert_int_equal(qvf_variant_from_name(qvf_variant_name(v)), v);
    assert_string_equal(qvf_variant_name(QVF_VARIANT_CUSTOM_VOICE), "custom_voice");
    assert_string_equal(qvf_variant_name(QVF_VARIANT_UNKNOWN), "unknown");
    assert_string_equal(qvf_variant_name(99), "invalid");
    assert_int_equal(qvf_variant_from_name("unknown"), QVF_VARIANT_UNKNOWN);
    assert_int_equal(qvf_variant_from_name("Base"), QVF_VARIANT_UNKNOWN);
    assert_int_equal(qvf_variant_from_name(NULL), QVF_VARIANT_UNKNOWN);
}

static void test_errors_named(void **state) {
    (void)state;
    assert_string_equal(qvf_errname(QVF_E_CRC), "QVF_E_CRC");
    assert_string_equal(qvf_strerror(QVF_E_TRUNCATED), "truncated");
    assert_string_equal(qvf_strerror(-1), "unknown error");
    assert_string_equal(qvf_strerror(QVF_E_COUNT_), "unknown error");
}

static void test_v4_roundtrip_memory(void **state) {
    (void)state;
    qvf_voice *v = qvf_sample_voice(1), *r = NULL;
    assert_non_null(v);
    size_t n;
    uint8_t *buf = qvf_sample_serialize(v, 4, &n);
    assert_non_null(buf);
    assert_int_equal(n % 1, 0);
    int rc = qvf_read_mem(buf, n, "rt.qvoice", 0, &r, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(r->file_version, 4);
    char why[128];
    if (!qvf_sample_equal(v, r, 1, why, sizeof why)) fail_msg("v4 round trip differs: %s", why);
    /* payload alignment: every chunk payload at a multiple of 64 */
    qvf_chunk_info ch[32];
    int nc;
    assert_int_equal(qvf_list_chunks(buf, n, "rt", ch, 32, &nc, err, sizeof err), 0);
    assert_int_equal(nc, 10); /* HEAD XVEC META ICLR TPAD WOVR WDHD WDTN WDTN QEND */
    for (int i = 0; i < nc; i++) {
        assert_int_equal((ch[i].offset + 16) % 64, 0);
        assert_true(ch[i].crc_ok);
    }
    assert_string_equal(ch[0].tag, "HEAD");
    assert_string_equal(ch[9].tag, "QEND");
    qvf_voice_free(r);
    qvf_voice_free(v);
    free(buf);
}

static void test_v4_v3_v4_keeps_everything(void **state) {
    (void)state;
    qvf_voice *v = qvf_sample_voice(1), *r3 = NULL, *r4 = NULL;
    size_t n3, n4;
    uint8_t *b3 = qvf_sample_serialize(v, 3, &n3);
    assert_non_null(b3);
    int rc = qvf_read_mem(b3, n3, "rt.qvoice", 0, &r3, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(r3->file_version, 3);
    uint8_t *b4 = qvf_sample_serialize(r3, 4, &n4);
    assert_non_null(b4);
    rc = qvf_read_mem(b4, n4, "rt.qvoice", 0, &r4, err, sizeof err);
    if (rc) fail_msg("%s", err);
    char why[128];
    if (!qvf_sample_equal(v, r4, 1, why, sizeof why)) fail_msg("v4->v3->v4 differs: %s", why);
    /* v3 export is a fixpoint: v3 -> read -> v3 gives the same bytes */
    size_t n33, n333;
    qvf_voice *r33 = NULL;
    uint8_t *b33 = qvf_sample_serialize(r3, 3, &n33);
    assert_int_equal(qvf_read_mem(b33, n33, "rt.qvoice", 0, &r33, err, sizeof err), 0);
    uint8_t *b333 = qvf_sample_serialize(r33, 3, &n333);
    assert_int_equal(n33, n333);
    assert_memory_equal(b33, b333, n33);
    qvf_voice_free(r33);
    free(b33);
    free(b333);
    free(b3);
    free(b4);
    qvf_voice_free(r3);
    qvf_voice_free(r4);
    qvf_voice_free(v);
}

/* v3's META holds the voice name in 64 bytes: a longer name is cut at a character's start, so
 * that the export reads back (a cut inside "ö" left invalid UTF-8: a fuzz_roundtrip finding). */
static void test_v3_name_cut_at_character(void **state) {
    (void)state;
    char name[80];
    memset(name, 'a', 62);
    strcpy(name + 62, "\xc3\xb6tail"); /* "ö" at bytes 62-63: the field keeps 63 */
    qvf_voice *v = qvf_sample_voice(1), *r = NULL;
    assert_int_equal(qvf_meta_set(v, "name", name), 0);
    size_t n;
    uint8_t *b = qvf_sample_serialize(v, 3, &n);
    assert_non_null(b);
    const int rc = qvf_read_mem(b, n, "rt.qvoice", 0, &r, err, sizeof err);
    if (rc) fail_msg("%s", err);
    name[62] = '\0'; /* the 62 bytes before the "ö" */
    assert_string_equal(qvf_meta_get(r, "name"), name);
    qvf_voice_free(r);
    qvf_voice_free(v);
    free(b);
}

static void test_wdelta_apply(void **state) {
    (void)state;
    enum { N = 10000 };
    static uint16_t tgt[N], res[N], out[N];
    qvf_sample_bf16(tgt, N, 1);
    qvf_sample_bf16(res, N, 2); /* unrelated values: every delta wraps arbitrarily */
    res[0] = 0xFFFF;
    tgt[0] = 0x0001;
    const uint64_t shape[2] = {100, 100};
    qvf_tensor t;
    assert_int_equal(
        qvf_wdelta_encode("w", QVF_DTYPE_BF16, 2, shape, res, tgt, 4096, &t, err, sizeof err), 0);
    assert_int_equal(t.encoding, QVF_ENC_DELTA16_LZ4);
    assert_int_equal(t.n_blocks, 5); /* 20000 bytes in 4096-byte blocks */
    assert_int_equal(qvf_wdelta_apply(&t, tgt, out, 1, err, sizeof err), 0);
    assert_memory_equal(out, res, sizeof res);
    memcpy(out, tgt, sizeof out); /* in place */
    assert_int_equal(qvf_wdelta_apply(&t, out, out, 1, err, sizeof err), 0);
    assert_memory_equal(out, res, sizeof res);
    uint16_t wrong[N];
    memcpy(wrong, tgt, sizeof wrong);
    wrong[77] ^= 1;
    assert_int_equal(qvf_wdelta_apply(&t, wrong, out, 1, err, sizeof err), QVF_E_HASH);
    assert_non_null(strstr(err, "target"));
    assert_int_equal(qvf_wdelta_apply(&t, wrong, out, 0, err, sizeof err),
                     0); /* unverified: applies */
    assert_int_equal(qvf_wdelta_apply(&t, (const uint8_t *)tgt + 1, out, 0, err, sizeof err),
                     QVF_E_ARG);
    /* corrupt compressed data: LZ4 error, never an overrun */
    ((uint8_t *)t.owned_data)[3] ^= 0xFF;
    ((uint8_t *)t.owned_data)[t.block_offsets[1] - 1] ^= 0x5A;
    int rc = qvf_wdelta_apply(&t, tgt, out, 0, err, sizeof err);
    assert_true(rc == QVF_E_LZ4 || rc == QVF_OK);
    qvf_tensor_free(&t);
    float f[7] = {1, 2, 3, 4, 5, 6, 7}, g[7];
    const uint64_t s1[1] = {7};
    assert_int_equal(qvf_wdelta_encode("n", QVF_DTYPE_F32, 1, s1, f, NULL, 0, &t, err, sizeof err),
                     0);
    assert_int_equal(t.encoding, QVF_ENC_RAW);
    assert_int_equal(qvf_wdelta_apply(&t, NULL, g, 1, err, sizeof err), 0);
    assert_memory_equal(f, g, sizeof f);
    qvf_tensor_free(&t);
    assert_int_equal(qvf_wdelta_encode("n", QVF_DTYPE_BF16, 1, s1, f, f, 100, &t, err, sizeof err),
                     QVF_E_ARG);
}

/* ---- legacy files from the byte maps of docs/qvoice-format.md §8 ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bb;
static void put(bb *b, const void *x, size_t k) {
    if (b->n + k > b->cap) {
        b->cap = (b->n + k) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, x, k);
    b->n += k;
}
static void put32v(bb *b, uint32_t x) {
    uint8_t q[4];
    wr32(q, x);
    put(b, q, 4);
}
static void putz(bb *b, size_t k) {
    while (k--)
        put(b, "", 1);
}

/* 0.6B graft (§8): QVCE 3 1024, x-vector, L=0, N=0, META, TPAD(1024), WOVR(1024, 2048, 2048). */
static bb graft06(void) {
    bb b = {0};
    put(&b, "QVCE", 4);
    put32v(&b, 3);
    put32v(&b, 1024);
    for (int i = 0; i < 1024; i++) {
        float x = (float)i * 0.01f;
        put(&b, &x, 4);
    }
    put32v(&b, 0);
    put32v(&b, 0);
    assert_int_equal(b.n, 4116);
    put(&b, "META", 4);
    put32v(&b, 2050);
    char lang[16] = "English", name[64] = "galatea";
    put(&b, lang, 16);
    put32v(&b, 1024);
    put32v(&b, 1024);
    float dur = 30.0f;
    put(&b, &dur, 4);
    assert_int_equal(b.n, 4152);
    put(&b, name, 64);
    assert_int_equal(b.n, 4216);
    put32v(&b, 4);
    assert_int_equal(b.n, 4220);
    put(&b, "TPAD", 4);
    put32v(&b, 1024);
    for (int i = 0; i < 3 * 1024; i++) {
        float x = (float)i;
        put(&b, &x, 4);
    }
    assert_int_equal(b.n, 16516);
    put(&b, "WOVR", 4);
    put32v(&b, 1024);
    put32v(&b, 2048);
    put32v(&b, 2048);
    assert_int_equal(b.n, 16532);
    size_t start = b.n;
    putz(&b, 16789520 - 16);
    for (size_t i = start; i < b.n; i += 4093)
        b.p[i] = (uint8_t)i; /* some content */
    assert_int_equal(b.n, 16806036);
    return b;
}

static void test_legacy_v3_graft_byte_map(void **state) {
    (void)state;
    bb b = graft06();
    qvf_voice *v = NULL;
    int rc = qvf_read_mem(b.p, b.n, "galatea_06b.qvoice", 0, &v, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(v->file_version, 3);
    assert_int_equal(v->enc_dim, 1024);
    assert_true(v->xvector[100] == 1.0f);
    assert_string_equal(qvf_meta_get(v, "name"), "galatea");
    assert_string_equal(qvf_meta_get(v, "language"), "English");
    assert_string_equal(qvf_meta_get(v, "language_id"), "2050");
    assert_string_equal(qvf_meta_get(v, "max_ref_duration_s"), "30");
    assert_int_equal(v->source.hidden_size, 1024);
    assert_int_equal(v->source.variant, QVF_VARIANT_BASE);
    assert_int_equal(v->tpad_hidden, 1024);
    assert_true(v->tpad[2048] == 2048.0f);
    assert_int_equal(v->wovr_h, 1024);
    assert_int_equal(v->wovr_th, 2048);
    assert_int_equal(v->wovr_cv, 2048);
    assert_int_equal(v->n_frames, 0);
    assert_false(v->has_wdelta);
    /* byte-identical v3 export */
    size_t n;
    uint8_t *out = qvf_sample_serialize(v, 3, &n);
    assert_non_null(out);
    assert_int_equal(n, b.n);
    assert_memory_equal(out, b.p, n);
    /* v4 of it and back to v3: still byte-identical */
    qvf_voice *v4 = NULL, *v3 = NULL;
    size_t n4, n3;
    uint8_t *b4 = qvf_sample_serialize(v, 4, &n4);
    assert_int_equal(qvf_read_mem(b4, n4, "g.qvoice", 0, &v4, err, sizeof err), 0);
    uint8_t *b3 = qvf_sample_serialize(v4, 3, &n3);
    assert_int_equal(n3, b.n);
    assert_memory_equal(b3, b.p, n3);
    /* truncated inside TPAD: an error naming TPAD (the engine read garbage here) */
    qvf_voice_free(v3);
    assert_int_equal(qvf_read_mem(b.p, 5000, "t.qvoice", 0, &v3, err, sizeof err), QVF_E_TRUNCATED);
    assert_non_null(strstr(err, "TPAD"));
    /* truncated exactly after TPAD: legal (positional omission), no WOVR */
    assert_int_equal(qvf_read_mem(b.p, 16516, "t.qvoice", 0, &v3, err, sizeof err), 0);
    assert_int_equal(v3->wovr_h, 0);
    assert_int_equal(v3->tpad_hidden, 1024);
    qvf_voice_free(v3);
    free(out);
    free(b4);
    free(b3);
    free(b.p);
    qvf_voice_free(v);
    qvf_voice_free(v4);
}

/* 1.7B graft (§8): x-vector 12..8203, ref_text_len 8204, frames 8208, META 8212, TPAD 8316, WOVR
 * 32900, total 25 215 124 — produced by our v3 writer from a voice with those dimensions. */
static void test_legacy_v3_graft_17b_offsets(void **state) {
    (void)state;
    qvf_voice *v = qvf_voice_new();
    static float x[2048];
    assert_int_equal(qvf_voice_set_xvector(v, x, 2048), 0);
    v->source.hidden_size = 2048;
    v->source.text_hidden_size = 2048;
    v->source.variant = QVF_VARIANT_BASE;
    assert_int_equal(qvf_meta_set(v, "v3_flags", "4"), 0);
    assert_int_equal(qvf_meta_set(v, "max_ref_duration_s", "30"), 0);
    v->tpad_hidden = 2048;
    v->tpad = calloc(3 * 2048, 4);
    v->wovr_h = v->wovr_th = v->wovr_cv = 2048;
    v->wovr_fc1_w = calloc(2048 * 2048, 2);
    v->wovr_fc1_b = calloc(2048, 4);
    v->wovr_fc2_w = calloc(2048 * 2048, 2);
    v->wovr_fc2_b = calloc(2048, 4);
    v->wovr_codec = calloc(2048 * 2048, 2);
    size_t n;
    uint8_t *b = qvf_sample_serialize(v, 3, &n);
    assert_non_null(b);
    assert_int_equal(n, 25215124);
    assert_memory_equal(b + 8212, "META", 4);
    assert_memory_equal(b + 8316, "TPAD", 4);
    assert_memory_equal(b + 32900, "WOVR", 4);
    assert_int_equal(rd32(b + 8212 + 24), 2048); /* model_size = hidden */
    assert_int_equal(rd32(b + 8212 + 100), 4);   /* flags: from Base */
    free(b);
    qvf_voice_free(v);
}

static bb core(uint32_t ver, uint32_t enc_dim, const char *text, uint32_t frames) {
    bb b = {0};
    put(&b, "QVCE", 4);
    put32v(&b, ver);
    if (ver >= 2) put32v(&b, enc_dim);
    for (uint32_t i = 0; i < enc_dim; i++) {
        float x = (float)i;
        put(&b, &x, 4);
    }
    put32v(&b, (uint32_t)strlen(text));
    put(&b, text, strlen(text));
    put32v(&b, frames);
    for (uint32_t i = 0; i < frames * 16; i++)
        put32v(&b, i % 2048);
    return b;
}

static void test_legacy_v1_v2_bin(void **state) {
    (void)state;
    qvf_voice *v = NULL;
    bb b = core(1, 1024, "hi there", 2);
    assert_int_equal(b.n, 8 + 4096 + 4 + 8 + 4 + 128); /* §5: core size, v1 4 bytes less */
    assert_int_equal(qvf_read_mem(b.p, b.n, "a.qvoice", 0, &v, err, sizeof err), 0);
    assert_int_equal(v->file_version, 1);
    assert_int_equal(v->enc_dim, 1024);
    assert_string_equal(v->transcript, "hi there");
    assert_int_equal(v->n_frames, 2);
    assert_int_equal(v->codes[17], 17);
    qvf_voice_free(v);
    free(b.p);
    b = core(1, 8, "", 0);
    assert_int_equal(qvf_read_mem(b.p, b.n, "a.qvoice", 8, &v, err, sizeof err),
                     0); /* enc_dim hint */
    assert_int_equal(v->enc_dim, 8);
    qvf_voice_free(v);
    free(b.p);
    b = core(2, 2048, "", 0);
    put(&b, "junk after the core is ignored for v2", 37);
    assert_int_equal(qvf_read_mem(b.p, b.n, "a.qvoice", 0, &v, err, sizeof err), 0);
    assert_int_equal(v->file_version, 2);
    assert_int_equal(v->enc_dim, 2048);
    qvf_voice_free(v);
    free(b.p);
    /* raw .bin */
    float x[1024];
    for (int i = 0; i < 1024; i++)
        x[i] = (float)i;
    assert_int_equal(qvf_read_mem(x, sizeof x, "aiden_joy.bin", 0, &v, err, sizeof err), 0);
    assert_int_equal(v->file_version, 0);
    assert_int_equal(v->enc_dim, 1024);
    qvf_voice_free(v);
    assert_int_equal(qvf_read_mem(x, sizeof x, "aiden_joy.bin", 2048, &v, err, sizeof err),
                     QVF_E_MISMATCH);
    assert_int_equal(qvf_read_mem(x, 4095, "odd.bin", 0, &v, err, sizeof err), QVF_E_CHUNK_SIZE);
    assert_int_equal(qvf_read_mem(x, sizeof x, "x.qvoice", 0, &v, err, sizeof err), QVF_E_MAGIC);
}

/* v3 with a weight stream: current WDLT, legacy WDLT (no hidden), WFULL. */
static bb heavy(int variant, uint16_t *tgt, uint16_t *res, size_t n_el) {
    bb b = core(3, 16, "ref", 1);
    put(&b, "META", 4);
    putz(&b, 20);
    put32v(&b, 4);  /* model_size = hidden */
    put32v(&b, 16); /* enc_dim */
    putz(&b, 72);
    put(&b, "TPAD", 4);
    put32v(&b, 4);
    putz(&b, 48);
    put(&b, "WOVR", 4);
    put32v(&b, 4);
    put32v(&b, 8);
    put32v(&b, 2);
    putz(&b, 2 * 64 + 4 * 8 + 2 * 32 + 4 * 4 + 2 * 8);
    if (variant == 2)
        put(&b, "WFULL", 5);
    else
        put(&b, "WDLT", 4);
    if (variant == 0) put32v(&b, 1024);
    put32v(&b, 2);
    const char *nm = "talker.model.layers.0.mlp.up_proj.weight";
    uint8_t h2[2];
    wr16(h2, (uint16_t)strlen(nm));
    put(&b, h2, 2);
    put(&b, nm, strlen(nm));
    put32v(&b, (uint32_t)(2 * n_el));
    if (variant == 2) {
        put(&b, "\0", 1);
        put32v(&b, (uint32_t)(2 * n_el));
        put(&b, res, 2 * n_el);
    } else {
        uint16_t *d = malloc(2 * n_el);
        for (size_t i = 0; i < n_el; i++)
            d[i] = (uint16_t)(res[i] - tgt[i]);
        int cap = LZ4_compressBound((int)(2 * n_el));
        char *z = malloc((size_t)cap);
        int zn = LZ4_compress_default((const char *)d, z, (int)(2 * n_el), cap);
        put(&b, "\4", 1);
        put32v(&b, (uint32_t)zn);
        put(&b, z, (size_t)zn);
        free(d);
        free(z);
    }
    const char *nn = "talker.model.norm.weight";
    wr16(h2, (uint16_t)strlen(nn));
    put(&b, h2, 2);
    put(&b, nn, strlen(nn));
    put32v(&b, 16);
    put(&b, "\0", 1);
    put32v(&b, 16);
    float f[4] = {1, 2, 3, 4};
    put(&b, f, 16);
    put(&b, "trailing bytes are ignored", 26);
    return b;
}

static void test_legacy_v3_weight_streams(void **state) {
    (void)state;
    enum { N = 3000 };
    static uint16_t tgt[N], res[N], out[N];
    qvf_sample_bf16(tgt, N, 5);
    qvf_sample_bf16(res, N, 6);
    for (int variant = 0; variant < 3; variant++) {
        bb b = heavy(variant, tgt, res, N);
        qvf_voice *v = NULL;
        int rc = qvf_read_mem(b.p, b.n, "heavy.qvoice", 0, &v, err, sizeof err);
        if (rc) fail_msg("variant %d: %s", variant, err);
        assert_true(v->has_wdelta);
        assert_int_equal(v->wdelta_kind, (uint32_t)variant);
        assert_int_equal(v->n_tensors, 2);
        assert_int_equal(v->target.hidden_size, variant == 0 ? 1024 : 0);
        assert_int_equal(v->tensors[1].dtype, QVF_DTYPE_F32);
        assert_int_equal(qvf_wdelta_apply(&v->tensors[0], tgt, out, 1, err, sizeof err), 0);
        assert_memory_equal(out, res, sizeof res);
        /* v3 -> v4 -> v3: same tensors; v3 -> v3 byte-identical up to the ignored trailing bytes */
        size_t n3, n4;
        uint8_t *b3 = qvf_sample_serialize(v, 3, &n3);
        assert_int_equal(n3, b.n - 26);
        assert_memory_equal(b3, b.p, n3);
        uint8_t *b4 = qvf_sample_serialize(v, 4, &n4);
        qvf_voice *w = NULL;
        assert_int_equal(qvf_read_mem(b4, n4, "h.qvoice", 0, &w, err, sizeof err), 0);
        char why[128];
        if (!qvf_sample_equal(v, w, 1, why, sizeof why)) fail_msg("variant %d: %s", variant, why);
        assert_int_equal(qvf_wdelta_apply(&w->tensors[0], tgt, out, 1, err, sizeof err), 0);
        assert_memory_equal(out, res, sizeof res);
        free(b3);
        free(b4);
        free(b.p);
        qvf_voice_free(v);
        qvf_voice_free(w);
    }
}

/* Found by fuzz_roundtrip: the reader indexes LZ4 blocks without decoding them, so a legacy tensor
 * with a corrupt block is only caught when v4 export re-blocks it: QVF_E_LZ4 naming file and tensor,
 * and nothing written. */
static void test_legacy_corrupt_block_export(void **state) {
    (void)state;
    enum { N = 1001 }; /* 2002 bytes: one legacy block smaller than a v4 block, so re-blocked */
    static uint16_t tgt[N], res[N];
    qvf_sample_bf16(tgt, N, 5);
    qvf_sample_bf16(res, N, 6);
    bb b = heavy(0, tgt, res, N);
    qvf_voice *v = NULL;
    assert_int_equal(qvf_read_mem(b.p, b.n, "c.qvoice", 0, &v, err, sizeof err), 0);
    qvf_tensor *t = &v->tensors[0];
    uint8_t *payload = b.p + (t->data - b.p);
    memset(payload, 0xFF, t->data_bytes); /* still "read" fine: blocks are not decoded at read */
    char path[] = "/tmp/qvf_corrupt_XXXXXX";
    assert_non_null(mkdtemp(path));
    char out[64];
    snprintf(out, sizeof out, "%s/o.qvoice", path);
    assert_int_equal(qvf_write_file(v, out, 4, err, sizeof err), QVF_E_LZ4);
    assert_non_null(strstr(err, out));
    assert_non_null(strstr(err, "up_proj"));
    assert_int_equal(access(out, F_OK), -1);
    assert_int_equal(rmdir(path), 0);
    qvf_voice_free(v);
    free(b.p);
}

static void test_atomic_write(void **state) {
    (void)state;
    char dir[] = "/tmp/qvf_test_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/v.qvoice", dir);
    qvf_voice *v = qvf_sample_voice(1), *r = NULL;
    assert_int_equal(qvf_write_file(v, path, 4, err, sizeof err), 0);
    assert_int_equal(qvf_read_file(path, 0, &r, err, sizeof err), 0);
    char why[128];
    if (!qvf_sample_equal(v, r, 1, why, sizeof why)) fail_msg("%s", why);
    qvf_voice_free(r);
    /* a failing write (voice that v3 cannot hold) leaves the destination untouched and no temp file
     */
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    free(v->tpad);
    v->tpad = NULL;
    v->tpad_hidden = 0;
    assert_int_equal(qvf_write_file(v, path, 3, err, sizeof err), QVF_E_UNSUPPORTED);
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(before.st_ino, after.st_ino);
    /* a streaming writer that is aborted leaves nothing */
    char p2[300];
    snprintf(p2, sizeof p2, "%s/w.qvoice", dir);
    qvf_writer *w;
    qvf_voice_drop_wdelta(v);
    assert_int_equal(qvf_writer_open(&w, p2, v, 3, QVF_WKIND_DELTA, err, sizeof err), 0);
    qvf_writer_abort(w);
    assert_int_equal(access(p2, F_OK), -1);
    assert_int_equal(qvf_writer_open(&w, p2, v, 1, QVF_WKIND_DELTA, err, sizeof err), 0);
    assert_int_equal(qvf_writer_commit(w, err, sizeof err), QVF_E_ARG); /* 0 of 1 tensors */
    assert_int_equal(access(p2, F_OK), -1);
    /* a refused tensor makes the writer bad: commit fails and leaves nothing */
    qvf_tensor bad = {0};
    assert_int_equal(qvf_writer_open(&w, p2, v, 1, QVF_WKIND_DELTA, err, sizeof err), 0);
    assert_int_equal(qvf_writer_add_tensor(w, &bad, err, sizeof err), QVF_E_ARG);
    assert_int_equal(qvf_writer_add_tensor(w, &bad, err, sizeof err), QVF_E_ARG);
    assert_int_equal(qvf_writer_commit(w, err, sizeof err), QVF_E_ARG);
    assert_int_equal(access(p2, F_OK), -1);
    assert_int_equal(qvf_read_file(p2, 0, &r, err, sizeof err), QVF_E_IO);
    assert_non_null(strstr(err, p2));
    snprintf(p2, sizeof p2, "rm -rf %s", dir);
    assert_int_equal(system(p2), 0);
    qvf_voice_free(v);
}

/* The consent record, and a file from before it: its legacy note reads as method "note". */
static void test_consent_record(void **state) {
    (void)state;
    qvf_voice *v = qvf_voice_new();
    assert_non_null(v);
    assert_null(qvf_consent_get(v).method);
    assert_int_equal(qvf_meta_set(v, "consent", "Alice agreed on the phone"), 0);
    assert_int_equal(qvf_meta_set(v, "consent_by", "bob"), 0);
    qvf_consent c = qvf_consent_get(v);
    assert_string_equal(c.method, "note");
    assert_true(c.legacy);
    assert_string_equal(c.statement, "Alice agreed on the phone");
    assert_string_equal(c.collected_by, "bob");
    assert_null(c.speaker);
    assert_int_equal(qvf_meta_set(v, "consent.method", "typed"), 0); /* the record wins */
    assert_int_equal(qvf_meta_set(v, "consent.statement", "I agree"), 0);
    c = qvf_consent_get(v);
    assert_string_equal(c.method, "typed");
    assert_false(c.legacy);
    assert_string_equal(c.statement, "I agree");
    assert_null(c.collected_by);
    qvf_voice_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_answer),
        cmocka_unit_test(test_consent_record),
        cmocka_unit_test(test_errors_named),
        cmocka_unit_test(test_file_kind),
        cmocka_unit_test(test_variant_names),
        cmocka_unit_test(test_v4_roundtrip_memory),
        cmocka_unit_test(test_v4_v3_v4_keeps_everything),
        cmocka_unit_test(test_v3_name_cut_at_character),
        cmocka_unit_test(test_wdelta_apply),
        cmocka_unit_test(test_legacy_v3_graft_byte_map),
        cmocka_unit_test(test_legacy_v3_graft_17b_offsets),
        cmocka_unit_test(test_legacy_v1_v2_bin),
        cmocka_unit_test(test_legacy_v3_weight_streams),
        cmocka_unit_test(test_legacy_corrupt_block_export),
        cmocka_unit_test(test_atomic_write),
    };
    return cmocka_run_group_tests_name("qvf", tests, NULL, NULL);
}
