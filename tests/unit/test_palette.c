/* test_palette.c — the emotion palette (docs/markup.md, docs/qvoice-format.md §4.9): the
 * palette arithmetic against its definition (norm restored, variant interpolation, s = 0 and
 * s = 1 ends); the PALT chunk round trip, skipped by a reader that does not know it (the tag
 * renamed: every other field reads the same) and refused when hostile; a [style] tag and a
 * request style render, under greedy decoding, exactly a voice whose x-vector is the styled one
 * (palette first, then a generic direction), plus the tag's instruct on a model that takes one; voicefmt palette derive on synthetic pairs of three
 * speakers recovers the shared direction; voicefmt palette add/rm/list; dialogue scripts.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/qvf_sample.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"
#include "voicefmt/qvf.h"
#include "tests/unit/helpers/run.h"

enum { DIM = 64 }; /* the tiny models' x-vector */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double rnd(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) / (double)(1ull << 52) - 1.0;
}
static void fill(float *x, int n, double scale) {
    for (int i = 0; i < n; i++)
        x[i] = (float)(scale * rnd());
}
static double dot(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}
static double norm(const float *a, int n) {
    return sqrt(dot(a, a, n));
}

/* ==== arithmetic ============================================================================= */

static void test_arithmetic(void **state) {
    (void)state;
    float x[DIM], d[DIM], v[DIM], out[DIM], y[DIM];
    fill(x, DIM, 0.3), fill(d, DIM, 2.0), fill(v, DIM, 0.5);
    const double nx = norm(x, DIM), nd = norm(d, DIM), nv = norm(v, DIM);
    /* direction: y = x + s|x| d/|d|, out = y |x|/|y| */
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.25f, x, d, DIM, out), 0);
    for (int i = 0; i < DIM; i++)
        y[i] = (float)(x[i] + 0.25 * nx * d[i] / nd);
    double c = dot(out, y, DIM) / (norm(out, DIM) * norm(y, DIM));
    printf("  direction 0.25: |out| %.9f |x| %.9f, cos(out, y) 1 - %.2e, cos(out, x) %.4f\n",
           norm(out, DIM), nx, 1 - c, dot(out, x, DIM) / (nx * norm(out, DIM)));
    assert_true(fabs(norm(out, DIM) - nx) <= 1e-6 * nx);
    assert_true(1 - c <= 1e-6);
    /* the shift's size: cos(out, x) = (1 + s cos(x,d)) / |x/|x| + s d/|d|| */
    const double cxd = dot(x, d, DIM) / (nx * nd);
    const double want = (1 + 0.25 * cxd) / sqrt(1 + 0.0625 + 0.5 * cxd);
    assert_true(fabs(dot(out, x, DIM) / (nx * nx) - want) <= 1e-6);
    /* s = 0 is the voice itself */
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0, x, d, DIM, out), 0);
    for (int i = 0; i < DIM; i++)
        assert_true(fabsf(out[i] - x[i]) <= 1e-7f * (float)nx);
    /* variant: y = x + s(v - x), norm (1-s)|x| + s|v|; s = 1 is v, s = 0 is x */
    assert_int_equal(qvf_style_apply(QVF_STYLE_VARIANT, 1, x, v, DIM, out), 0);
    for (int i = 0; i < DIM; i++)
        assert_true(fabsf(out[i] - v[i]) <= 1e-6f * (float)nv);
    assert_int_equal(qvf_style_apply(QVF_STYLE_VARIANT, 0.5f, x, v, DIM, out), 0);
    assert_true(fabs(norm(out, DIM) - (0.5 * nx + 0.5 * nv)) <= 1e-6 * nx);
    for (int i = 0; i < DIM; i++)
        y[i] = (x[i] + v[i]) / 2;
    assert_true(1 - dot(out, y, DIM) / (norm(out, DIM) * norm(y, DIM)) <= 1e-6);
    /* in place */
    memcpy(y, x, sizeof x);
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.25f, y, d, DIM, y), 0);
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.25f, x, d, DIM, out), 0);
    assert_memory_equal(y, out, sizeof y);
    /* refused */
    float z[DIM] = {0};
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 4.5f, x, d, DIM, out), QVF_E_ARG);
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.2f, x, z, DIM, out), QVF_E_ARG);
    assert_int_equal(qvf_style_apply(7, 0.2f, x, d, DIM, out), QVF_E_ARG);
    /* one pair's direction: unit, and the shift ratio */
    double ratio;
    for (int i = 0; i < DIM; i++)
        y[i] = x[i] + 0.2f * d[i];
    assert_int_equal(qvf_style_direction(x, y, DIM, out, &ratio), 0);
    assert_true(fabs(norm(out, DIM) - 1) <= 1e-6);
    assert_true(1 - dot(out, d, DIM) / nd <= 1e-6);
    assert_true(fabs(ratio - 0.2 * nd / nx) <= 1e-5 * ratio);
    assert_int_equal(qvf_style_direction(x, x, DIM, out, &ratio), QVF_E_ARG);
}

/* ==== the PALT chunk ========================================================================= */

/* The offset of the first chunk tagged tag in a v4 buffer (asserts it is there). */
static size_t chunk_at(const uint8_t *b, size_t n, const char *tag, qvf_chunk_info *info) {
    qvf_chunk_info ch[32];
    int k;
    char err[256];
    assert_int_equal(qvf_list_chunks(b, n, "t", ch, 32, &k, err, sizeof err), 0);
    for (int i = 0; i < k && i < 32; i++)
        if (!strcmp(ch[i].tag, tag)) {
            if (info) *info = ch[i];
            return (size_t)ch[i].offset;
        }
    fail_msg("no %s chunk", tag);
    return 0;
}

static void recrc(uint8_t *b, size_t off) {
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = len << 8 | b[off + 8 + i];
    uint32_t crc = qvf_crc32c(0, b + off, 16 + len);
    for (int i = 0; i < 4; i++)
        b[off + 16 + len + i] = (uint8_t)(crc >> (8 * i));
}

static qvf_voice *palette_voice(void) {
    qvf_voice *v = qvf_sample_voice(0);
    assert_non_null(v);
    float a[64], b[64];
    fill(a, (int)v->enc_dim, 1), fill(b, (int)v->enc_dim, 1);
    assert_int_equal(qvf_palette_set(v, "sad", QVF_STYLE_VARIANT, 1, a), 0);
    assert_int_equal(qvf_palette_set(v, "joy", QVF_STYLE_DIRECTION, 0.25f, b), 0);
    assert_int_equal(qvf_palette_set(v, "Bad", QVF_STYLE_DIRECTION, 0.25f, b), QVF_E_ARG);
    assert_int_equal(qvf_palette_set(v, "sad", QVF_STYLE_DIRECTION, 0, b), QVF_E_ARG);
    return v;
}

static void test_chunk(void **state) {
    (void)state;
    qvf_voice *v = palette_voice(), *plain = qvf_sample_voice(0), *r;
    size_t n;
    uint8_t *b = qvf_sample_serialize(v, 4, &n);
    assert_non_null(b);
    char err[256];
    assert_int_equal(qvf_read_mem(b, n, "p", 0, &r, err, sizeof err), 0);
    assert_int_equal(r->n_styles, 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(r->styles[i].name, v->styles[i].name);
        assert_int_equal(r->styles[i].kind, v->styles[i].kind);
        assert_memory_equal(&r->styles[i].strength, &v->styles[i].strength, 4);
        assert_memory_equal(r->styles[i].vec, v->styles[i].vec, 4 * v->enc_dim);
    }
    qvf_voice_free(r);
    /* ancillary, and a reader that does not know the tag reads everything else the same */
    qvf_chunk_info info;
    size_t off = chunk_at(b, n, "PALT", &info);
    assert_int_equal(info.flags, 0);
    memcpy(b + off, "pALX", 4);
    recrc(b, off);
    assert_int_equal(qvf_read_mem(b, n, "p", 0, &r, err, sizeof err), 0);
    assert_int_equal(r->n_styles, 0);
    char why[256];
    assert_true(qvf_sample_equal(plain, r, 1, why, sizeof why));
    qvf_voice_free(r);
    memcpy(b + off, "PALT", 4);
    recrc(b, off);
    /* hostile payloads, each with a valid CRC: the specific code */
    const struct {
        size_t at;
        uint32_t val;
        int code;
    } bad[] = {
        {0, 2, QVF_E_VERSION},            /* version */
        {4, 65, QVF_E_LIMIT},             /* n_entries over the limit */
        {8, 63, QVF_E_MISMATCH},          /* dim */
        {12, 1, QVF_E_RESERVED},          /* reserved */
        {64, 0x00646153, QVF_E_RANGE},    /* name "Sad" */
        {64 + 32, 3, QVF_E_RANGE},        /* kind */
        {64 + 36, 0x7FC00000, QVF_E_RANGE}, /* strength NaN */
        {128, 0x00646173, QVF_E_RANGE},   /* second name repeats "sad" */
        {64 + 50, 1, QVF_E_RESERVED},     /* record reserved bytes */
        {192, 0x7F800000, QVF_E_RANGE},   /* an infinite value */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        for (int k = 0; k < 4; k++)
            c[off + 16 + bad[i].at + k] = (uint8_t)(bad[i].val >> (8 * k));
        recrc(c, off);
        err[0] = 0;
        int rc = qvf_read_mem(c, n, "p", 0, &r, err, sizeof err);
        printf("  PALT +%zu = 0x%x -> %s: %s\n", bad[i].at, bad[i].val, qvf_errname(rc), err);
        assert_int_equal(rc, bad[i].code);
        assert_non_null(strstr(err, "chunk PALT"));
        free(c);
    }
    /* v3 cannot hold it */
    assert_int_equal(qvf_write_file(v, tmp_path("v3.qvoice"), 3, err, sizeof err),
                     QVF_E_UNSUPPORTED);
    free(b);
    qvf_voice_free(v);
    qvf_voice_free(plain);
}

/* ==== synthesis ============================================================================== */

typedef struct {
    int32_t *codes;
    int n;
} codes_log;

static void on_chunk(void *user, const qv_chunk_info *c) {
    codes_log *g = user;
    g->codes = realloc(g->codes, (size_t)(g->n + c->n_frames) * QV_N_CODEBOOKS * 4);
    memcpy(g->codes + (size_t)g->n * QV_N_CODEBOOKS, c->codes,
           (size_t)c->n_frames * QV_N_CODEBOOKS * 4);
    g->n += c->n_frames;
}

static codes_log run(qv_model *m, qv_synth_request r, enum qv_status want, char *warning) {
    qv_params p = qv_model_params(m);
    p.do_sample = p.subtalker_do_sample = 0;
    p.max_frames = 8;
    p.n_threads = 2;
    qv_synth *s;
    codes_log g = {0};
    assert_int_equal(qv_synth_new(&s, m, &p), QV_OK);
    qv_synth_set_chunk_fn(s, on_chunk, &g);
    r.guard = 0;
    r.codes_only = 1;
    qv_synth_stats st = {.struct_size = sizeof st};
    enum qv_status rc = qv_synth_run(s, &r, NULL, NULL, &st);
    if (rc != want) fail_msg("%s", rc ? qv_last_error() : "ok");
    if (warning) strcpy(warning, st.warning);
    qv_synth_free(s);
    return g;
}

static void write_voice(const char *path, const float *x, const qvf_voice *styles) {
    qvf_voice *v = qvf_voice_new();
    assert_non_null(v);
    assert_int_equal(qvf_voice_set_xvector(v, x, DIM), 0);
    v->source.enc_dim = DIM;
    for (int i = 0; styles && i < styles->n_styles; i++)
        assert_int_equal(qvf_palette_set(v, styles->styles[i].name, styles->styles[i].kind,
                                         styles->styles[i].strength, styles->styles[i].vec),
                         0);
    char err[256];
    if (qvf_write_file(v, path, 4, err, sizeof err)) fail_msg("%s", err);
    qvf_voice_free(v);
}

static void expect_same(codes_log a, codes_log b, int line) {
    printf("  line %d: %d frames, the same codes\n", line, a.n);
    assert_true(a.n > 0);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.codes, b.codes, (size_t)a.n * QV_N_CODEBOOKS * 4);
    free(a.codes), free(b.codes);
}

static void test_synthesis(void **state) {
    (void)state;
    qv_model *m = test_model_load("tiny-cv");
    float x[DIM], d[DIM], styled[DIM], dir2[DIM];
    fill(x, DIM, 0.2), fill(d, DIM, 1), fill(dir2, DIM, 1);
    qvf_voice *pal = qvf_voice_new();
    pal->enc_dim = DIM;
    assert_int_equal(qvf_palette_set(pal, "sad", QVF_STYLE_DIRECTION, 0.3f, d), 0);
    write_voice(tmp_path("pal.qvoice"), x, pal);
    qvf_voice_free(pal);
    /* the styled voice, computed by the same arithmetic: what the tag must render */
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.3f, x, d, DIM, styled), 0);
    write_voice(tmp_path("styled.qvoice"), styled, NULL);
    qv_synth_request r = qv_synth_default_request(), q = r;
    r.voice_path = tmp_path("pal.qvoice");
    q.voice_path = tmp_path("styled.qvoice");
    q.text = "Hello there.";
    codes_log want, plain;
    r.text = "[sad] Hello there.";
    char warn[512];
    expect_same(run(m, r, QV_OK, warn), run(m, q, QV_OK, NULL), __LINE__);
    assert_string_equal(warn, ""); /* the palette honoured it: no warning */
    r.text = "Hello there.";
    r.style = "sad";
    expect_same(run(m, r, QV_OK, NULL), run(m, q, QV_OK, NULL), __LINE__);
    /* the tag's styles differ from the plain voice */
    r.style = NULL;
    plain = run(m, r, QV_OK, NULL);
    want = run(m, q, QV_OK, NULL);
    assert_memory_not_equal(plain.codes, want.codes, (size_t)want.n * QV_N_CODEBOOKS * 4);
    free(plain.codes), free(want.codes);
    /* --style-strength overrides the entry's */
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.6f, x, d, DIM, styled), 0);
    write_voice(tmp_path("styled.qvoice"), styled, NULL);
    r.style = "sad";
    r.style_strength = 0.6f;
    expect_same(run(m, r, QV_OK, NULL), run(m, q, QV_OK, NULL), __LINE__);
    /* the palette first, then a generic direction: "sad" stays the palette's, "grumpy" is the
       direction's */
    qv_style_dir dirs[2] = {{sizeof *dirs, "sad", dir2, DIM, 0.5f},
                            {sizeof *dirs, "grumpy", dir2, DIM, 0.5f}};
    r.style_dirs = dirs, r.n_style_dirs = 2, r.style_strength = 0;
    r.style = NULL;
    r.text = "[sad] Hello there.";
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.3f, x, d, DIM, styled), 0);
    write_voice(tmp_path("styled.qvoice"), styled, NULL);
    expect_same(run(m, r, QV_OK, NULL), run(m, q, QV_OK, NULL), __LINE__);
    r.text = "[grumpy] Hello there.";
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.5f, x, dir2, DIM, styled), 0);
    write_voice(tmp_path("styled.qvoice"), styled, NULL);
    expect_same(run(m, r, QV_OK, NULL), run(m, q, QV_OK, NULL), __LINE__);
    /* a voice switched to mid-text: [style:NAME] reaches its palette (bare [NAME] tags know the
       request voice's names only) */
    r.style_dirs = NULL, r.n_style_dirs = 0;
    r.voice_path = NULL;
    r.speaker = "ryan";
    char text[1200];
    snprintf(text, sizeof text, "[voice:%s][style:Sad] Hello there.", tmp_path("pal.qvoice"));
    r.text = text;
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.3f, x, d, DIM, styled), 0);
    write_voice(tmp_path("styled.qvoice"), styled, NULL);
    expect_same(run(m, r, QV_OK, warn), run(m, q, QV_OK, NULL), __LINE__);
    assert_null(strstr(warn, "not applied"));
    r.voice_path = tmp_path("pal.qvoice");
    r.speaker = NULL;
    /* without either: the explicit error (a request style) */
    r.n_style_dirs = 0;
    r.text = "Hello there.";
    r.style = "grumpy";
    codes_log none = run(m, r, QV_E_UNSUPPORTED, NULL);
    free(none.codes);
    qv_model_free(m);

    /* a model that takes instruct: the tag's instruct text and the palette entry both apply */
    m = test_model_load("tiny-vd");
    r = qv_synth_default_request();
    r.voice_path = tmp_path("pal.qvoice");
    r.text = "[sad] Hello there.";
    assert_int_equal(qvf_style_apply(QVF_STYLE_DIRECTION, 0.3f, x, d, DIM, styled), 0);
    write_voice(tmp_path("styled.qvoice"), styled, NULL);
    q.instruct = "Speak in a sad, sorrowful tone.";
    expect_same(run(m, r, QV_OK, NULL), run(m, q, QV_OK, NULL), __LINE__);
    q.voice_path = tmp_path("pal.qvoice"); /* the instruct alone is not the same */
    codes_log both = run(m, r, QV_OK, NULL), ins_only = run(m, q, QV_OK, NULL);
    assert_memory_not_equal(both.codes, ins_only.codes, (size_t)both.n * QV_N_CODEBOOKS * 4);
    free(both.codes), free(ins_only.codes);
    qv_model_free(m);
}

/* ==== voicefmt palette ======================================================================= */

static void write_bin(const char *path, const float *x) {
    tmp_write(path, x, DIM * sizeof *x);
}

/* Three speakers; each emotional x-vector is the neutral one shifted by 0.2 of its norm along a
 * shared direction plus a speaker-specific part: derive recovers the shared direction. */
static void test_derive(void **state) {
    (void)state;
    float d[DIM], n[DIM], e[DIM], noise[DIM], out[DIM];
    fill(d, DIM, 1);
    const double nd = norm(d, DIM);
    char pairs[2048] = "";
    double pair_cos = 0; /* mean cosine of one pair's direction to the shared one */
    for (int s = 0; s < 3; s++) {
        fill(n, DIM, 0.3), fill(noise, DIM, 1);
        const double nn = norm(n, DIM), nz = norm(noise, DIM);
        for (int i = 0; i < DIM; i++)
            e[i] = (float)(n[i] + 0.2 * nn * (0.8 * d[i] / nd + 0.6 * noise[i] / nz));
        float one[DIM];
        assert_int_equal(qvf_style_direction(n, e, DIM, one, NULL), 0);
        pair_cos += dot(one, d, DIM) / nd / 3;
        char a[32], b[32];
        snprintf(a, sizeof a, "n%d.bin", s), snprintf(b, sizeof b, "e%d.bin", s);
        write_bin(tmp_path(a), n), write_bin(tmp_path(b), e);
        snprintf(pairs + strlen(pairs), sizeof pairs - strlen(pairs), " %s:%s", tmp_path(a),
                 tmp_path(b));
    }
    const char *log = tmp_path("derive.txt");
    assert_int_equal(sh("bin/voicefmt palette derive -o %s%s > %s", tmp_path("dir.bin"), pairs, log),
                     0);
    assert_true(file_has(log, "agreement  pair 1 vs 2: cosine"));
    assert_true(file_has(log, "mean cosine between pairs' directions"));
    assert_true(file_has(log, "pair 3  "));
    FILE *f = fopen(tmp_path("dir.bin"), "rb");
    assert_non_null(f);
    assert_int_equal(fread(out, sizeof *out, DIM, f), DIM);
    fclose(f);
    const double c = dot(out, d, DIM) / nd;
    printf("  derived direction: |d| %.6f, cosine to the shared direction %.4f (one pair's: "
           "%.4f on average)\n", norm(out, DIM), c, pair_cos);
    assert_true(fabs(norm(out, DIM) - 1) <= 1e-6);
    assert_true(c > pair_cos + 0.05); /* averaging cancels the speaker-specific parts */
    assert_int_equal(sh("bin/voicefmt palette derive -o %s %s 2>/dev/null", tmp_path("x.bin"),
                        "nocolon.bin"),
                     1);
}

static void test_tool(void **state) {
    (void)state;
    float x[DIM];
    fill(x, DIM, 0.2);
    char v[128], log[128]; /* tmp_path's buffers rotate */
    snprintf(v, sizeof v, "%s", tmp_path("t.qvoice"));
    snprintf(log, sizeof log, "%s", tmp_path("t.txt"));
    write_voice(v, x, NULL);
    assert_int_equal(sh("bin/voicefmt palette add %s -n calm -d %s -s 0.4", v, tmp_path("dir.bin")),
                     0);
    assert_int_equal(sh("bin/voicefmt palette list %s > %s", v, log), 0);
    assert_true(file_has(log, "calm             direction strength 0.4"));
    assert_int_equal(sh("bin/voicefmt palette add %s -n Calm -d %s 2>%s", v, tmp_path("dir.bin"),
                        log),
                     1);
    assert_true(file_has(log, "name [a-z][a-z0-9_-]*"));
    assert_int_equal(sh("bin/voicefmt palette add %s -n x 2>/dev/null", v), 2); /* usage */
    assert_int_equal(sh("bin/voicefmt verify %s > /dev/null", v), 0);
    assert_int_equal(sh("bin/voicefmt inspect %s > %s", v, log), 0);
    assert_true(file_has(log, "  palette: calm (direction 0.4)"));
    assert_int_equal(sh("bin/voicefmt inspect --json %s > %s", v, log), 0);
    assert_true(file_has(log, "\"kind\":\t\"direction\""));
    assert_int_equal(sh("bin/voicefmt palette rm %s -n calm -o %s", v, tmp_path("u.qvoice")), 0);
    assert_int_equal(sh("bin/voicefmt palette list %s > %s", tmp_path("u.qvoice"), log), 0);
    assert_true(file_has(log, "(no palette)"));
    /* --from: the x-vector of a recording, refused when it is not the voice's speaker */
    const char *cache = test_cache_dir();
    assert_int_equal(sh("bin/clone -m %s/tiny-base -s 6 tests/audio/en_ohenry_chenevert.wav -o %s "
                        "> /dev/null 2>&1",
                        cache, v),
                     0);
    assert_int_equal(sh("bin/voicefmt palette add %s -n sad -m %s/tiny-base -f "
                        "tests/audio/it_galatea_fasol.wav --min-similarity 1 > /dev/null 2> %s",
                        v, cache, log),
                     1);
    assert_true(file_has(log, "not the same voice?"));
    assert_int_equal(sh("bin/voicefmt palette add %s -n sad -m %s/tiny-base -f "
                        "tests/audio/en_ohenry_chenevert.wav > %s",
                        v, cache, log),
                     0);
    assert_true(file_has(log, "speaker similarity"));
    assert_int_equal(sh("bin/voicefmt palette list %s > %s", v, log), 0);
    assert_true(file_has(log, "sad              variant   strength 1"));
    /* speak --batch: a job's "style" uses the voice's palette; a preset speaker has none */
    char jobs[2048];
    int n = snprintf(jobs, sizeof jobs,
                     "{\"text\":\"Hi.\",\"output\":\"%s\",\"voice\":\"%s\",\"style\":\"sad\"}\n"
                     "{\"text\":\"Hi.\",\"output\":\"%s\",\"speaker\":\"ryan\",\"style\":\"sad\"}\n",
                     tmp_path("j1.wav"), v, tmp_path("j2.wav"));
    tmp_write(tmp_path("jobs.jsonl"), jobs, (size_t)n);
    assert_int_equal(sh("bin/speak -m %s/tiny-cv --batch %s --max-frames 4 --no-guard -j 2 > %s "
                        "2>/dev/null",
                        cache, tmp_path("jobs.jsonl"), log),
                     1);
    assert_true(file_has(log, "{\"line\":1,\"ok\":true"));
    assert_true(file_has(log, "{\"line\":2,\"ok\":false,\"error\":\"style \\\"sad\\\": not applied"));
}

/* ==== scripts ================================================================================ */

static void test_script(void **state) {
    (void)state;
    char *mk;
    int *off, *line, n;
    assert_int_equal(qv_script_to_markup("# title\nryan: Hello. [sad] Oh.\n\n\n  alice :Hi\n",
                                         500, &mk, &off, &line, &n),
                     QV_OK);
    assert_string_equal(mk, "[voice:ryan][neutral]Hello. [sad] Oh.\n\n[pause:500ms]\n\n"
                            "[voice:alice][neutral]Hi\n\n");
    assert_int_equal(n, 2);
    assert_int_equal(off[0], 0), assert_int_equal(line[0], 2);
    assert_int_equal(off[1], 54), assert_int_equal(line[1], 5);
    assert_memory_equal(mk + off[1], "[voice:alice]", 13);
    qv_free(mk), qv_free(off), qv_free(line);
    const char *bad[] = {"ryan: ok\nno colon here\n", "two words: x\n", "ryan:   \n", "\n# c\n"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(qv_script_to_markup(bad[i], 500, &mk, &off, &line, &n), QV_E_INVALID);
        printf("  %s\n", qv_last_error());
        assert_null(mk);
    }
    assert_non_null(strstr(qv_last_error(), "no \"NAME: text\" line"));
    /* speak --script: one output, a progress line per script line */
    const char *cache = test_cache_dir();
    const char *s = tmp_path("pod.txt"), *log = tmp_path("pod.log");
    const char script[] = "ryan: Welcome back.\n\nserena: [whisper] Thanks.\nryan: Bye!\n";
    tmp_write(s, script, sizeof script - 1);
    assert_int_equal(sh("bin/speak -m %s/tiny-cv --script %s --greedy --max-frames 4 -j 2 -o %s "
                        "2> %s",
                        cache, s, tmp_path("pod.wav"), log),
                     0);
    assert_true(file_has(log, "script line 1 (1/3)"));
    assert_true(file_has(log, "script line 3 (2/3)"));
    assert_true(file_has(log, "script line 4 (3/3)"));
    assert_true(file_has(log, "warning: tag [whisper]")); /* 0.6B: named, not silent */
    assert_true(file_bytes(tmp_path("pod.wav")) > 44 + 2 * 3 * 1920);
    assert_int_equal(sh("bin/speak -m %s/tiny-cv --script %s --strict-markup --no-guard --max-frames 4 "
                        "-o %s 2> %s", cache,
                        s, tmp_path("pod2.wav"), log),
                     1);
    assert_true(file_has(log, "tag [whisper]"));
    assert_int_equal(file_bytes(tmp_path("pod2.wav")), -1);
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_arithmetic, test_chunk, test_synthesis, test_derive,
         test_tool, test_script)
