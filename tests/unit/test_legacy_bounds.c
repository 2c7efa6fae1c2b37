/* test_legacy_bounds.c — legacy v3 weight streams that expand beyond any real voice are refused
 * when read, before anything is decoded, and the read-then-rewrite-to-v4 path (what an upload of
 * a v3 voice without consent goes through) stays within 100 MB of peak RSS growth: ~8 MB of LZ4
 * zeros claiming 2 GB (more than the largest tensor of any model), ~2.4 MB claiming 600 MB (an
 * expansion of 255x), and a control: a delta shaped like a real one (small random steps) is
 * accepted and its v4 rewrite decodes to the same bytes. Each case prints the RSS growth.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>
#include <lz4.h>

#include "voicefmt/qvf_impl.h"
#include "tests/unit/helpers/run.h"

#define DIM 1024
#define NAME "talker.model.text_embedding.weight"

static char err[512];

typedef struct {
    char *p;
    size_t n;
} buf;

/* A v3 voice (qvoice-format.md §8.3): x-vector, no ICL, META (no consent), no TPAD/WOVR (the two
 * probes consume 4 bytes each), then a current WDLT stream of one LZ4 record. */
static buf legacy_file(uint32_t raw, const uint8_t *lz4, uint32_t lz4_bytes) {
    buf b = {0};
    qvf_out o = {open_memstream(&b.p, &b.n), 0, 0, 0};
    assert_non_null(o.f);
    qvf_out_write(&o, "QVCE", 4);
    qvf_out_put32(&o, 3);
    qvf_out_put32(&o, DIM);
    for (int i = 0; i < DIM; i++) {
        float x = 0.01f * (float)(i % 7);
        qvf_out_write(&o, &x, 4);
    }
    qvf_out_put32(&o, 0); /* ref_text_len */
    qvf_out_put32(&o, 0); /* n_ref_frames */
    uint8_t meta[100] = {0};
    meta[20] = 0x00, meta[21] = 0x04; /* model_size 1024 */
    memcpy(meta + 32, "hostile", 7);
    qvf_out_write(&o, "META", 4);
    qvf_out_write(&o, meta, sizeof meta);
    qvf_out_write(&o, "noneNONE", 8);
    qvf_out_write(&o, "WDLT", 4);
    qvf_out_put32(&o, 1024);
    qvf_out_put32(&o, 1);
    uint8_t nl[2] = {(uint8_t)strlen(NAME), 0};
    qvf_out_write(&o, nl, 2);
    qvf_out_write(&o, NAME, strlen(NAME));
    qvf_out_put32(&o, raw);
    qvf_out_write(&o, "\x04", 1);
    qvf_out_put32(&o, lz4_bytes);
    qvf_out_write(&o, lz4, lz4_bytes);
    assert_int_equal(fclose(o.f), 0);
    assert_int_equal(o.failed, 0);
    return b;
}

/* One valid LZ4 block that decodes to raw zero bytes with ~raw/255 bytes of input: a literal 0,
 * one match at offset 1 whose length runs on in 255-byte extensions, then the 5 literals the
 * format requires at the end. */
static uint8_t *zeros_block(uint32_t raw, uint32_t *n) {
    uint64_t ext = raw - 1 - 5 - 19; /* match length beyond the token's 4 + 15 */
    size_t cap = ext / 255 + 16;
    uint8_t *z = malloc(cap), *p = z;
    assert_non_null(z);
    *p++ = 0x1F, *p++ = 0, *p++ = 1, *p++ = 0;
    memset(p, 255, ext / 255);
    p += ext / 255;
    *p++ = (uint8_t)(ext % 255);
    *p++ = 0x50;
    memset(p, 0, 5);
    p += 5;
    *n = (uint32_t)(p - z);
    return z;
}

static long peak_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Reads the file as an upload does and, if it is accepted, rewrites it to v4 (to /dev/null, the
 * server writes a temp file). Returns the read status; *grown_mb = peak RSS growth. */
static int accept_and_rewrite(const buf *b, double *grown_mb, int *rewrite_rc) {
    long before = peak_rss_kb();
    qvf_voice *v = NULL;
    int rc = qvf_read_mem(b->p, b->n, "hostile.qvoice", 0, &v, err, sizeof err);
    *rewrite_rc = -1;
    if (!rc) {
        FILE *f = fopen("/dev/null", "wb");
        assert_non_null(f);
        *rewrite_rc = qvf_write_stream(v, f, 4, "rewrite.qvoice", err, sizeof err);
        fclose(f);
        qvf_voice_free(v);
    }
    *grown_mb = (double)(peak_rss_kb() - before) / 1024.0;
    return rc;
}

static void refused(uint32_t raw, const char *needle) {
    uint32_t zn;
    uint8_t *z = zeros_block(raw, &zn);
    assert_int_equal(LZ4_decompress_safe_partial((const char *)z, (char *)&(uint64_t){1}, (int)zn,
                                                 8, 8),
                     8); /* a well-formed block: only the bound can refuse it */
    buf b = legacy_file(raw, z, zn);
    free(z);
    double mb;
    int wrc, rc = accept_and_rewrite(&b, &mb, &wrc);
    printf("  %.1f MB file, one LZ4 block claiming %u bytes: %s (peak RSS +%.1f MB)\n",
           (double)b.n / 1e6, raw, rc ? err : "accepted", mb);
    free(b.p);
    assert_int_equal(rc, QVF_E_LIMIT);
    assert_non_null(strstr(err, needle));
    assert_true(mb < 100.0);
}

static void test_claims_2gb(void **state) {
    (void)state;
    refused(2000000000u, "more than the largest tensor of any model");
}

static void test_expands_255x(void **state) {
    (void)state;
    refused(600000000u, "no real voice expands");
}

/* A delta as a real voice has it (each bf16 pattern moved by a few steps: -3..4, as the synthetic
 * CustomVoice is made) compresses ~1.5x: accepted, and its rewrite decodes to the same bytes. */
static void test_real_shape_accepted(void **state) {
    (void)state;
    const uint32_t raw = 4u << 20;
    int16_t *d = malloc(raw);
    assert_non_null(d);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (uint32_t i = 0; i < raw / 2; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        d[i] = (int16_t)((int)(s >> 61) - 3);
    }
    int cap = LZ4_compressBound((int)raw);
    uint8_t *z = malloc((size_t)cap);
    int zn = LZ4_compress_default((const char *)d, (char *)z, (int)raw, cap);
    assert_true(zn > 0);
    buf b = legacy_file(raw, z, (uint32_t)zn);
    qvf_voice *v;
    assert_int_equal(qvf_read_mem(b.p, b.n, "real.qvoice", 0, &v, err, sizeof err), 0);
    printf("  real-shaped delta: %u bytes from %d (%.2fx): accepted\n", raw, zn,
           (double)raw / zn);
    char *out = NULL;
    size_t on = 0;
    FILE *f = open_memstream(&out, &on);
    assert_int_equal(qvf_write_stream(v, f, 4, "rewrite.qvoice", err, sizeof err), 0);
    fclose(f);
    qvf_voice *w;
    assert_int_equal(qvf_read_mem(out, on, "rewrite.qvoice", 0, &w, err, sizeof err), 0);
    assert_int_equal(w->n_tensors, 1);
    uint8_t *back = malloc(raw);
    assert_int_equal(qvf_tensor_decode_delta(&w->tensors[0], back, err, sizeof err), 0);
    assert_memory_equal(back, d, raw);
    free(back);
    qvf_voice_free(w);
    qvf_voice_free(v);
    free(out);
    free(b.p);
    free(z);
    free(d);
}

QVT_MAIN(NULL, NULL, test_claims_2gb, test_expands_255x, test_real_shape_accepted)
