/* test_qvf_hostile.c — the voicefmt reader on malformed files: one crafted file per error code,
 * truncation at every byte offset, every single-byte flip. Crafted v4 files are rebuilt with valid
 * CRCs so each reaches the check it targets. With QVF_WRITE_FIXTURES=DIR set, the crafted files
 * and the seed corpus are also written to DIR/hostile/qvf (+ expected.txt) and DIR/fuzz/corpus/.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tests/unit/helpers/qvf_sample.h"
#include "voicefmt/qvf_impl.h"

static char err[512];

/* ---- chunk-level editing of a v4 image ---- */

typedef struct {
    char tag[4];
    uint32_t flags;
    uint8_t *p;
    uint64_t n;
} chunk;

typedef struct {
    chunk c[32];
    int n;
} image;

static image split(const uint8_t *b, size_t n) {
    image im = {.n = 0};
    uint64_t off = 48;
    for (;;) {
        chunk *c = &im.c[im.n++];
        memcpy(c->tag, b + off, 4);
        c->flags = rd32(b + off + 4);
        c->n = rd64(b + off + 8);
        c->p = malloc(c->n + 1);
        memcpy(c->p, b + off + 16, c->n);
        uint64_t end = off + 20 + c->n;
        if (!memcmp(c->tag, "QEND", 4)) break;
        off = end + (48 + 64 - end % 64) % 64;
        assert_true(off < n);
    }
    return im;
}

static void image_free(image *im) {
    for (int i = 0; i < im->n; i++)
        free(im->c[i].p);
    im->n = 0;
}

static int find(const image *im, const char *tag) {
    for (int i = 0; i < im->n; i++)
        if (!memcmp(im->c[i].tag, tag, 4)) return i;
    fail_msg("no chunk %s", tag);
    return -1;
}

static void insert(image *im, int at, const char *tag, uint32_t flags, const void *p, uint64_t n) {
    memmove(&im->c[at + 1], &im->c[at], (size_t)(im->n - at) * sizeof(chunk));
    im->n++;
    chunk *c = &im->c[at];
    memcpy(c->tag, tag, 4);
    c->flags = flags;
    c->n = n;
    c->p = malloc(n + 1);
    if (n) memcpy(c->p, p, n);
}

static void drop(image *im, int at) {
    free(im->c[at].p);
    memmove(&im->c[at], &im->c[at + 1], (size_t)(im->n - at - 1) * sizeof(chunk));
    im->n--;
}

/* Reassembles with correct framing, padding and CRCs. */
static uint8_t *join(const image *im, size_t *n_out) {
    size_t cap = 48;
    for (int i = 0; i < im->n; i++)
        cap += im->c[i].n + 20 + 64;
    uint8_t *b = calloc(1, cap);
    memcpy(b, "QVCE", 4);
    wr32(b + 4, 4);
    wr32(b + 12, qvf_crc32c(0, b, 12));
    uint64_t off = 48;
    for (int i = 0; i < im->n; i++) {
        const chunk *c = &im->c[i];
        memcpy(b + off, c->tag, 4);
        wr32(b + off + 4, c->flags);
        wr64(b + off + 8, c->n);
        memcpy(b + off + 16, c->p, c->n);
        wr32(b + off + 16 + c->n, qvf_crc32c(0, b + off, 16 + c->n));
        off += 20 + c->n;
        if (i + 1 < im->n) off += (48 + 64 - off % 64) % 64;
    }
    *n_out = off;
    return b;
}

/* ---- fixtures ---- */

static FILE *expected;
static const char *fixture_dir(void) {
    return getenv("QVF_WRITE_FIXTURES");
}

static void save(const char *sub, const char *name, const void *b, size_t n) {
    const char *d = fixture_dir();
    if (!d) return;
    char path[1024];
    snprintf(path, sizeof path, "mkdir -p %s/%s", d, sub);
    assert_int_equal(system(path), 0);
    snprintf(path, sizeof path, "%s/%s/%s", d, sub, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Read + decode every tensor (what `voicefmt verify` does); returns the first error. */
static int read_all(const uint8_t *b, size_t n, const char *name) {
    qvf_voice *v = NULL;
    int rc = qvf_read_mem(b, n, name, 0, &v, err, sizeof err);
    if (!rc) rc = qvf_sample_decode_all(v, err, sizeof err);
    qvf_voice_free(v);
    return rc;
}

static void expect(const char *name, const uint8_t *b, size_t n, int code, const char *needle) {
    int rc = read_all(b, n, name);
    if (rc != code)
        fail_msg("%s: got %s (%s), expected %s", name, qvf_errname(rc), err, qvf_errname(code));
    if (needle && !strstr(err, needle))
        fail_msg("%s: message \"%s\" lacks \"%s\"", name, err, needle);
    if (rc && rc != QVF_E_LZ4)
        assert_non_null(strstr(err, name)); /* names the file (LZ4: the tensor) */
    save("hostile/qvf", name, b, n);
    if (expected) fprintf(expected, "%s %s\n", name, qvf_errname(code));
}

static uint8_t *base(size_t *n) {
    qvf_voice *v = qvf_sample_voice(1);
    uint8_t *b = qvf_sample_serialize(v, 4, n);
    qvf_voice_free(v);
    assert_non_null(b);
    return b;
}

/* Applies edit to the chunk list of the sample and checks the result fails with code. */
typedef void (*edit_fn)(image *im);
static void crafted(const char *name, edit_fn edit, int code, const char *needle) {
    size_t n, m;
    uint8_t *b = base(&n);
    image im = split(b, n);
    edit(&im);
    uint8_t *c = join(&im, &m);
    expect(name, c, m, code, needle);
    image_free(&im);
    free(b);
    free(c);
}

static void e_unknown_critical(image *im) {
    insert(im, 2, "ZZZZ", 1, "abc", 3);
}
static void e_unknown_ancillary(image *im) {
    insert(im, 2, "zzzz", 0, "abc", 3);
}
static void e_duplicate(image *im) {
    int i = find(im, "META");
    insert(im, i + 1, "META", 0, im->c[i].p, im->c[i].n);
}
static void e_order(image *im) {
    int i = find(im, "META"), j = find(im, "TPAD");
    chunk t = im->c[i];
    im->c[i] = im->c[j];
    im->c[j] = t;
}
static void e_missing_xvec(image *im) {
    drop(im, find(im, "XVEC"));
}
static void e_missing_wdtn(image *im) {
    drop(im, find(im, "WDTN"));
}
static void e_head_not_first(image *im) {
    chunk t = im->c[0];
    im->c[0] = im->c[1];
    im->c[1] = t;
}
static void e_flags(image *im) {
    im->c[find(im, "META")].flags = 1;
}
static void e_flags_reserved(image *im) {
    im->c[find(im, "META")].flags = 4;
}
static void e_xvec_size(image *im) {
    im->c[find(im, "XVEC")].n -= 4;
}
static void e_xvec_limit(image *im) {
    wr32(im->c[find(im, "XVEC")].p, 20000);
}
static void e_xvec_mismatch(image *im) {
    chunk *c = &im->c[find(im, "XVEC")];
    wr32(c->p, 15);
    c->n -= 4;
}
static void e_head_version(image *im) {
    wr32(im->c[0].p, 5);
}
static void e_head_reserved(image *im) {
    im->c[0].p[120] = 1;
}
static void e_head_variant(image *im) {
    wr32(im->c[0].p + 28, 9);
}
static void e_meta_key(image *im) {
    im->c[find(im, "META")].p[16] = 'A';
}
static void e_meta_limit(image *im) {
    wr32(im->c[find(im, "META")].p, 100000);
}
static void e_meta_dupkey(image *im) {
    uint8_t *p = im->c[find(im, "META")].p; /* entries 0 "name" and 1 "language" → both "name" */
    uint32_t kb0 = rd32(p + 8), vb0 = rd32(p + 12);
    uint64_t e1 = align_up(16 + kb0 + vb0, 8);
    uint32_t kb1 = rd32(p + e1), vb1 = rd32(p + e1 + 4);
    assert_int_equal(kb1, 8);
    memcpy(p + e1 + 8, "name_xyz", 8);
    memcpy(p + e1 + 8, "name", 4);
    (void)vb1;
    /* key "name_xyz" is fine; make it exactly "name" by shrinking key and growing value */
    wr32(p + e1, 4);
    wr32(p + e1 + 4, vb1 + 4);
}
static void e_icl_code(image *im) {
    wr16(im->c[find(im, "ICLR")].p + 64, 2048);
}
static void e_icl_utf8(image *im) {
    chunk *c = &im->c[find(im, "ICLR")];
    c->p[c->n - 1] = 0xC3;
}
static void e_icl_codebooks(image *im) {
    wr32(im->c[find(im, "ICLR")].p + 8, 8);
}
static void e_icl_padding(image *im) {
    im->c[find(im, "ICLR")].p[64 + 3 * 32 + 1] = 7;
}
static void e_tpad_limit(image *im) {
    wr32(im->c[find(im, "TPAD")].p, 0);
}
static void e_wovr_size(image *im) {
    wr32(im->c[find(im, "WOVR")].p + 8, 41);
}
static void e_wdhd_limit(image *im) {
    wr32(im->c[find(im, "WDHD")].p, 5000);
}
static void e_wdhd_kind(image *im) {
    wr32(im->c[find(im, "WDHD")].p + 4, 7);
}
static void e_wdhd_toomany(image *im) {
    int i = find(im, "WDTN");
    insert(im, i + 2, "WDTN", 1, im->c[i].p, im->c[i].n);
}
static void e_wdhd_announces_more(image *im) {
    wr32(im->c[find(im, "WDHD")].p, 4000);
}
static void e_wdtn_overflow(image *im) {
    uint8_t *p = im->c[find(im, "WDTN")].p;
    wr64(p + 16, 1ull << 40);
    wr64(p + 24, 1ull << 40);
}
static void e_wdtn_rawbytes(image *im) {
    wr64(im->c[find(im, "WDTN")].p + 48, 12290);
}
static void e_wdtn_dtype(image *im) {
    wr32(im->c[find(im, "WDTN")].p + 4, 3);
}
static void e_wdtn_f32_delta(image *im) {
    uint8_t *p = im->c[find(im, "WDTN")].p;
    wr32(p + 4, QVF_DTYPE_F32);
    wr64(p + 24, 32); /* 96 x 32 f32 = same bytes */
}
static void e_wdtn_block(image *im) {
    wr32(im->c[find(im, "WDTN")].p + 56, 100);
}
static void e_wdtn_nblocks(image *im) {
    wr32(im->c[find(im, "WDTN")].p + 60, 4);
}
static void e_wdtn_csize(image *im) {
    uint8_t *p = im->c[find(im, "WDTN")].p;
    uint64_t tab = align_up(128 + rd32(p), 8);
    wr32(p + tab, rd32(p + tab) + 1);
}
static void e_wdtn_csize_zero(image *im) {
    uint8_t *p = im->c[find(im, "WDTN")].p;
    wr32(p + align_up(128 + rd32(p), 8), 0);
}
static void e_wdtn_name(image *im) {
    im->c[find(im, "WDTN")].p[130] = ' ';
}
static void e_wdtn_dupname(image *im) {
    int i = find(im, "WDTN") + 1;
    insert(im, i + 1, "WDTN", 1, im->c[i].p, im->c[i].n);
    wr32(im->c[find(im, "WDHD")].p, 3);
}
static void e_wdtn_lz4(image *im) {
    chunk *c = &im->c[find(im, "WDTN")];
    for (uint64_t k = c->n - 40; k < c->n - 2; k++)
        c->p[k] ^= 0xA5;
}
static void e_wdtn_raw_size(image *im) {
    int i = find(im, "WDTN") + 1; /* the f32 raw tensor */
    im->c[i].n -= 4;
}
static void e_qend_payload(image *im) {
    chunk *c = &im->c[im->n - 1];
    free(c->p);
    c->p = calloc(1, 4);
    c->n = 4;
}
static void e_target_without_wdhd(image *im) {
    drop(im, find(im, "WDTN"));
    drop(im, find(im, "WDTN"));
    drop(im, find(im, "WDHD"));
}

static void test_crafted_chunks(void **state) {
    (void)state;
    const char *d = fixture_dir();
    if (d) {
        char p[1024];
        snprintf(p, sizeof p, "mkdir -p %s/hostile/qvf", d);
        assert_int_equal(system(p), 0);
        snprintf(p, sizeof p, "%s/hostile/qvf/expected.txt", d);
        expected = fopen(p, "w");
        assert_non_null(expected);
        fprintf(expected, "# file expected-error (qvf_read_file + decode of every WDELTA block)\n");
    }
    crafted("unknown_critical.qvoice", e_unknown_critical, QVF_E_UNKNOWN_CRITICAL, "ZZZZ");
    crafted("unknown_ancillary_ok.qvoice", e_unknown_ancillary, QVF_OK, NULL);
    crafted("duplicate_meta.qvoice", e_duplicate, QVF_E_DUPLICATE, "META");
    crafted("order_tpad_before_meta.qvoice", e_order, QVF_E_ORDER, NULL);
    crafted("missing_xvec.qvoice", e_missing_xvec, QVF_E_MISSING, "XVEC");
    crafted("missing_wdtn.qvoice", e_missing_wdtn, QVF_E_MISSING, "WDTN");
    crafted("head_not_first.qvoice", e_head_not_first, QVF_E_ORDER, "HEAD");
    crafted("meta_marked_critical.qvoice", e_flags, QVF_E_FLAGS, "META");
    crafted("flags_reserved_bit.qvoice", e_flags_reserved, QVF_E_RESERVED, "META");
    crafted("xvec_short.qvoice", e_xvec_size, QVF_E_CHUNK_SIZE, "XVEC");
    crafted("xvec_enc_dim_huge.qvoice", e_xvec_limit, QVF_E_LIMIT, "XVEC");
    crafted("xvec_vs_head.qvoice", e_xvec_mismatch, QVF_E_MISMATCH, "XVEC");
    crafted("head_version5.qvoice", e_head_version, QVF_E_VERSION, "HEAD");
    crafted("head_reserved.qvoice", e_head_reserved, QVF_E_RESERVED, "HEAD");
    crafted("head_variant.qvoice", e_head_variant, QVF_E_RANGE, "HEAD");
    crafted("meta_key_upper.qvoice", e_meta_key, QVF_E_RANGE, "META");
    crafted("meta_entries_limit.qvoice", e_meta_limit, QVF_E_LIMIT, "META");
    crafted("meta_duplicate_key.qvoice", e_meta_dupkey, QVF_E_DUPLICATE, "name");
    crafted("icl_code_2048.qvoice", e_icl_code, QVF_E_RANGE, "ICLR");
    crafted("icl_bad_utf8.qvoice", e_icl_utf8, QVF_E_UTF8, "ICLR");
    crafted("icl_codebooks.qvoice", e_icl_codebooks, QVF_E_RANGE, "ICLR");
    crafted("icl_padding.qvoice", e_icl_padding, QVF_E_RESERVED, "ICLR");
    crafted("tpad_hidden0.qvoice", e_tpad_limit, QVF_E_LIMIT, "TPAD");
    crafted("wovr_size.qvoice", e_wovr_size, QVF_E_CHUNK_SIZE, "WOVR");
    crafted("wdhd_limit.qvoice", e_wdhd_limit, QVF_E_LIMIT, "WDHD");
    crafted("wdhd_kind.qvoice", e_wdhd_kind, QVF_E_RANGE, "WDHD");
    crafted("wdtn_too_many.qvoice", e_wdhd_toomany, QVF_E_DUPLICATE, "WDTN");
    crafted("wdhd_announces_more.qvoice", e_wdhd_announces_more, QVF_E_TRUNCATED, "WDHD");
    crafted("wdtn_shape_overflow.qvoice", e_wdtn_overflow, QVF_E_OVERFLOW, "WDTN");
    crafted("wdtn_raw_bytes.qvoice", e_wdtn_rawbytes, QVF_E_MISMATCH, "WDTN");
    crafted("wdtn_dtype.qvoice", e_wdtn_dtype, QVF_E_RANGE, "WDTN");
    crafted("wdtn_f32_delta.qvoice", e_wdtn_f32_delta, QVF_E_MISMATCH, "WDTN");
    crafted("wdtn_block_small.qvoice", e_wdtn_block, QVF_E_LIMIT, "WDTN");
    crafted("wdtn_nblocks.qvoice", e_wdtn_nblocks, QVF_E_MISMATCH, "WDTN");
    crafted("wdtn_csize.qvoice", e_wdtn_csize, QVF_E_CHUNK_SIZE, "WDTN");
    crafted("wdtn_csize_zero.qvoice", e_wdtn_csize_zero, QVF_E_RANGE, "WDTN");
    crafted("wdtn_name_space.qvoice", e_wdtn_name, QVF_E_RANGE, "WDTN");
    crafted("wdtn_duplicate_name.qvoice", e_wdtn_dupname, QVF_E_DUPLICATE, "WDTN");
    crafted("wdtn_lz4_garbage.qvoice", e_wdtn_lz4, QVF_E_LZ4, "block");
    crafted("wdtn_raw_short.qvoice", e_wdtn_raw_size, QVF_E_CHUNK_SIZE, "WDTN");
    crafted("qend_payload.qvoice", e_qend_payload, QVF_E_CHUNK_SIZE, "QEND");
    crafted("target_without_wdhd.qvoice", e_target_without_wdhd, QVF_E_MISMATCH, "HEAD");
}

static void test_file_level(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = base(&n), *c = malloc(n + 8);
    memcpy(c, b, n);
    memcpy(c + n, "extra", 5);
    expect("trailing.qvoice", c, n + 5, QVF_E_TRAILING, "QEND");
    memcpy(c, b, n);
    wr32(c + 4, 5);
    expect("version5.qvoice", c, n, QVF_E_VERSION, "version");
    memcpy(c, b, n);
    wr32(c + 8, 1);
    wr32(c + 12, qvf_crc32c(0, c, 12));
    expect("file_flags.qvoice", c, n, QVF_E_RESERVED, "file header");
    memcpy(c, b, n);
    c[20] = 1;
    expect("file_padding.qvoice", c, n, QVF_E_RESERVED, "padding");
    memcpy(c, "QVCX", 4);
    expect("bad_magic.qvoice", c, n, QVF_E_MAGIC, NULL);
    memcpy(c, b, n);
    wr64(c + 48 + 8, 1ull << 62); /* HEAD length: more than the file */
    expect("head_length_huge.qvoice", c, n, QVF_E_TRUNCATED, "HEAD");
    memcpy(c, b, n);
    wr64(c + 48 + 8, 256); /* HEAD length 256: not its fixed size, refused before the CRC is read */
    expect("head_length_256.qvoice", c, n, QVF_E_CHUNK_SIZE, "HEAD");
    memcpy(c, b, n);
    c[48 + 16 + 20] ^= 1; /* a byte of the HEAD payload */
    expect("flipped_head.qvoice", c, n, QVF_E_CRC, "HEAD");
    /* legacy: zlib encodings and lies */
    uint8_t leg[64] = "QVCE";
    wr32(leg + 4, 3);
    wr32(leg + 8, 0);
    expect("legacy_enc_dim0.qvoice", leg, 12, QVF_E_LIMIT, "enc_dim");
    wr32(leg + 8, 2);
    wr32(leg + 20, 0xFFFFFFF0u);
    expect("legacy_text_len_huge.qvoice", leg, 28, QVF_E_LIMIT, "ref_text");
    wr32(leg + 20, 0);
    wr32(leg + 24, 2000000);
    expect("legacy_frames_huge.qvoice", leg, 28, QVF_E_LIMIT, "frames");
    wr32(leg + 24, 1);
    expect("legacy_frames_truncated.qvoice", leg, 60, QVF_E_TRUNCATED, "ref_codes");
    wr32(leg + 1, 0);
    memcpy(leg, "QVCE", 4);
    wr32(leg + 4, 0);
    expect("legacy_version0.qvoice", leg, 12, QVF_E_VERSION, NULL);
    /* legacy weight record with zlib encoding 3 */
    uint8_t h[256] = "QVCE";
    size_t k = 0;
    wr32(h + 4, 3);
    wr32(h + 8, 1);
    k = 16; /* x-vector 1 float at 12 */
    wr32(h + k, 0);
    k += 4; /* L */
    wr32(h + k, 0);
    k += 4; /* N */
    memcpy(h + k, "META", 4);
    k += 104;
    memcpy(h + k, "TPAD", 4);
    wr32(h + k + 4, 1);
    k += 20;
    memcpy(h + k, "WOVR", 4);
    wr32(h + k + 4, 1);
    wr32(h + k + 8, 1);
    wr32(h + k + 12, 1);
    k += 16 + 2 + 4 + 2 + 4 + 2;
    memcpy(h + k, "WDLT", 4);
    wr32(h + k + 4, 1024);
    wr32(h + k + 8, 1);
    k += 12;
    wr16(h + k, 1);
    h[k + 2] = 'w';
    wr32(h + k + 3, 4);
    h[k + 7] = 3;
    wr32(h + k + 8, 2);
    k += 12 + 2;
    expect("legacy_zlib_record.qvoice", h, k, QVF_E_UNSUPPORTED, "zlib");
    h[k - 2 - 5] = 0; /* encoding 0 (raw) with payload 2 != raw 4 */
    expect("legacy_raw_size.qvoice", h, k, QVF_E_MISMATCH, "raw");
    expect("bin_odd_size.bin", (const uint8_t *)"abcdefg", 7, QVF_E_CHUNK_SIZE, "multiple of 4");
    free(b);
    free(c);
    if (expected) {
        fclose(expected);
        expected = NULL;
    }
}

static void test_truncated_everywhere(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = base(&n);
    for (size_t k = 0; k < n; k++) {
        int rc = read_all(b, k, "t.qvoice");
        int want = k < 4 ? QVF_E_MAGIC : QVF_E_TRUNCATED;
        if (rc != want) fail_msg("prefix of %zu bytes: %s (%s)", k, qvf_errname(rc), err);
    }
    assert_int_equal(read_all(b, n, "t.qvoice"), QVF_OK);
    printf("truncation: %zu prefixes of a %zu-byte v4 file all refused\n", n, n);
    /* v3 export of the same voice: every prefix is an error or a valid positional omission */
    qvf_voice *v = qvf_sample_voice(1);
    size_t n3;
    uint8_t *b3 = qvf_sample_serialize(v, 3, &n3);
    size_t core_end = 12 + 64 + 4 + v->transcript_bytes + 4 + 64 * v->n_frames;
    for (size_t k = 0; k < n3; k++) {
        int rc = read_all(b3, k, "t.qvoice");
        if (k < core_end && rc == QVF_OK) fail_msg("v3 prefix %zu inside the core accepted", k);
    }
    qvf_voice_free(v);
    free(b3);
    free(b);
}

static void test_flipped_bytes(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = base(&n);
    image im = split(b, n);
    uint64_t off = 48;
    int n_crc = 0;
    for (int i = 0; i < im.n; i++) { /* every payload byte: CRC error naming the chunk */
        char tag[5] = {0};
        memcpy(tag, im.c[i].tag, 4);
        for (uint64_t k = 0; k < im.c[i].n; k++) {
            b[off + 16 + k] ^= 0x20;
            int rc = read_all(b, n, "f.qvoice");
            b[off + 16 + k] ^= 0x20;
            if (rc != QVF_E_CRC || !strstr(err, tag))
                fail_msg("flip at %llu in %s: %s", (unsigned long long)(off + 16 + k), tag, err);
            n_crc++;
        }
        uint64_t end = off + 20 + im.c[i].n;
        off = end + (48 + 64 - end % 64) % 64;
    }
    int n_other = 0;
    for (size_t k = 0; k < n; k++) { /* every byte at all: never accepted */
        b[k] ^= 0x01;
        int rc = read_all(b, n, "f.qvoice");
        b[k] ^= 0x01;
        if (rc == QVF_OK) fail_msg("flip of byte %zu accepted", k);
        n_other++;
    }
    printf("flips: %d payload bytes -> QVF_E_CRC naming the chunk; all %d bytes refused\n", n_crc,
           n_other);
    image_free(&im);
    free(b);
}

static void test_api_errors(void **state) {
    (void)state;
    qvf_voice *v = NULL;
    assert_int_equal(qvf_read_file("/nonexistent/x.qvoice", 0, &v, err, sizeof err), QVF_E_IO);
    assert_non_null(strstr(err, "/nonexistent/x.qvoice"));
    v = qvf_sample_voice(0);
    assert_int_equal(qvf_write_file(v, "/tmp/x.qvoice", 5, err, sizeof err), QVF_E_ARG);
    assert_int_equal(qvf_meta_set(v, "Bad Key", "x"), QVF_E_ARG);
    assert_int_equal(qvf_meta_set(v, "k", "\xff"), QVF_E_ARG);
    qvf_voice_free(v);
}

/* Seed corpus for the fuzz targets: valid files of each kind plus truncations. Runs only when
 * fixtures are being regenerated (fixture_dir() set), so a normal run neither skips nor counts it. */
static void write_seed_corpus(void **state) {
    (void)state;
    qvf_voice *full = qvf_sample_voice(1), *lite = qvf_sample_voice(0);
    qvf_voice *bare = qvf_voice_new();
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    qvf_voice_set_xvector(bare, x, 8);
    const qvf_voice *vs[3] = {full, lite, bare};
    const char *names[3] = {"full", "lite", "bare"};
    for (int i = 0; i < 3; i++)
        for (int ver = 3; ver <= 4; ver++) {
            size_t n;
            uint8_t *b = qvf_sample_serialize(vs[i], ver, &n);
            char nm[64];
            snprintf(nm, sizeof nm, "%s_v%d.qvoice", names[i], ver);
            save("fuzz/corpus/fuzz_roundtrip", nm, b, n);
            if (ver == 4) {
                save("fuzz/corpus/fuzz_qvf_read", nm, b, n);
                snprintf(nm, sizeof nm, "%s_v4_trunc.qvoice", names[i]);
                save("fuzz/corpus/fuzz_qvf_read", nm, b, n * 2 / 3);
            } else { /* the legacy target takes [version selector][body after the 8-byte header] */
                b[7] = 3;
                save("fuzz/corpus/fuzz_legacy_read", nm, b + 7, n - 7);
                snprintf(nm, sizeof nm, "%s_v3_trunc.qvoice", names[i]);
                save("fuzz/corpus/fuzz_legacy_read", nm, b + 7, (n - 7) * 2 / 3);
            }
            free(b);
        }
    uint8_t bin[1 + 32] = {0};
    memcpy(bin + 1, x, 32);
    save("fuzz/corpus/fuzz_legacy_read", "bin_8.bin", bin, sizeof bin);
    qvf_voice_free(full);
    qvf_voice_free(lite);
    qvf_voice_free(bare);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crafted_chunks),       cmocka_unit_test(test_file_level),
        cmocka_unit_test(test_truncated_everywhere), cmocka_unit_test(test_flipped_bytes),
        cmocka_unit_test(test_api_errors),
    };
    int failed = cmocka_run_group_tests_name("qvf_hostile", tests, NULL, NULL);
    if (fixture_dir()) {
        const struct CMUnitTest gen[] = {cmocka_unit_test(write_seed_corpus)};
        failed += cmocka_run_group_tests_name("qvf_fixtures", gen, NULL, NULL);
    }
    return failed;
}
