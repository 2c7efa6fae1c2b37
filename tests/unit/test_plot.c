/* test_plot.c — clone/plot: a PNG written from a generated log-mel and read back with libpng:
 * size, the cyan boundary columns, low bins at the bottom, dimming outside the used part, pooling
 * of long inputs, the real clip's mel, and bad arguments / unwritable paths leaving no file.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <png.h>

#include "features/speech_encoder.h"
#include "clone/plot.h"
#include "tests/unit/helpers/run.h"

#define CLIP "tests/audio/en_ohenry_chenevert.wav"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/qvoice_test_plot.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct {
    uint8_t *rgb;
    int w, h;
} image;

static image read_png(const char *path) {
    image im = {0};
    png_image p;
    memset(&p, 0, sizeof p);
    p.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_file(&p, path));
    p.format = PNG_FORMAT_RGB;
    im.w = (int)p.width;
    im.h = (int)p.height;
    im.rgb = malloc(PNG_IMAGE_SIZE(p));
    assert_non_null(im.rgb);
    assert_true(png_image_finish_read(&p, NULL, im.rgb, 0, NULL));
    return im;
}

static const uint8_t *px(const image *im, int x, int y) { return im->rgb + ((size_t)y * im->w + x) * 3; }
static int luma(const uint8_t *p) { return p[0] * 3 + p[1] * 6 + p[2]; } /* ×10 */
static int is_cyan(const uint8_t *p) { return p[0] == 0 && p[1] == 255 && p[2] == 255; }

/* mel with one loud band (bins 0..9), the rest 60 dB lower, except quiet frames [0, 40) */
static float *make_mel(int n) {
    float *m = malloc(sizeof(float) * (size_t)n * QVA_MEL_BINS);
    for (int f = 0; f < n; f++)
        for (int b = 0; b < QVA_MEL_BINS; b++)
            m[(size_t)f * QVA_MEL_BINS + b] = f < 40 ? -11.5f : b < 10 ? 0.0f : -6.9f;
    return m;
}

static void test_png_marks(void **state) {
    (void)state;
    const int n = 500, used0 = 100, used1 = 400;
    char path[128], err[256] = "";
    snprintf(path, sizeof path, "%s/mel.png", g_dir);
    float *mel = make_mel(n);
    assert_int_equal(qvc_plot_mel_png(path, mel, n, used0, used1, err, sizeof err), 0);
    image im = read_png(path);
    int w, h;
    qvc_plot_size(n, &w, &h);
    printf("plot: %d x %d px (expected %d x %d)\n", im.w, im.h, n, QVA_MEL_BINS * QVC_PLOT_BIN_PX + QVC_PLOT_AXIS_PX);
    assert_int_equal(im.w, n);
    assert_int_equal(im.w, w);
    assert_int_equal(im.h, QVA_MEL_BINS * QVC_PLOT_BIN_PX + QVC_PLOT_AXIS_PX);
    assert_int_equal(im.h, h);

    const int spec_h = QVA_MEL_BINS * QVC_PLOT_BIN_PX;
    int x0 = qvc_plot_column(n, used0), x1 = qvc_plot_column(n, used1);
    assert_int_equal(x0, used0);
    assert_int_equal(x1, used1);
    for (int y = 0; y < im.h; y++) {
        assert_true(is_cyan(px(&im, x0, y)));
        assert_true(is_cyan(px(&im, x1, y)));
    }
    int n_cyan = 0; /* nowhere else: the colour map never produces cyan */
    for (int x = 0; x < im.w; x++) n_cyan += is_cyan(px(&im, x, spec_h / 2));
    assert_int_equal(n_cyan, 2);

    /* low bins at the bottom: the loud band is bright at the bottom, dark at the top */
    int x_in = 250, x_out = 450;
    int bottom = luma(px(&im, x_in, spec_h - 1)), top = luma(px(&im, x_in, 0));
    printf("plot: used column luma bottom %d, top %d; dimmed column bottom %d\n", bottom, top,
           luma(px(&im, x_out, spec_h - 1)));
    assert_true(bottom > top + 800);
    /* the same data outside the used part is dimmed */
    assert_true(luma(px(&im, x_out, spec_h - 1)) < bottom / 2);
    /* silence (the clamp floor) is darker than -60 dB (both dimmed) */
    assert_true(luma(px(&im, 20, spec_h - 1)) < luma(px(&im, x_out, 0)));
    /* a tick at 1 s (93.75 frames) in the axis strip */
    assert_int_equal(px(&im, qvc_plot_column(n, 94), spec_h + 1)[0], 200);
    free(im.rgb);
    free(mel);
}

static void test_long_input_pooled(void **state) {
    (void)state;
    const int n = 4000;
    char path[128], err[256] = "";
    snprintf(path, sizeof path, "%s/long.png", g_dir);
    float *mel = make_mel(n);
    assert_int_equal(qvc_plot_mel_png(path, mel, n, 0, 3200, err, sizeof err), 0);
    image im = read_png(path);
    printf("plot: %d frames -> %d columns\n", n, im.w);
    assert_true(im.w <= QVC_PLOT_MAX_WIDTH);
    assert_int_equal(im.w, 1334); /* 3 frames per column */
    assert_true(is_cyan(px(&im, qvc_plot_column(n, 3200), 5)));
    assert_true(is_cyan(px(&im, 0, 5)));
    free(im.rgb);
    free(mel);
}

/* The bundled clip's real log-mel, the first 20 s marked as used (kept for a visual check). */
static void test_real_clip(void **state) {
    (void)state;
    char err[256] = "", path[128];
    qva_audio a;
    assert_int_equal(qva_audio_load(&a, CLIP, 0.0, err, sizeof err), 0);
    int n = qva_mel_n_frames(a.n_samples);
    float *mel = malloc(sizeof(float) * (size_t)n * QVA_MEL_BINS);
    qva_mel *m = qva_mel_create();
    assert_non_null(m);
    assert_int_equal(qva_mel_compute(m, mel, a.samples, a.n_samples), 0);
    int used_end = qva_mel_n_frames(20 * QVA_SAMPLE_RATE_HZ);
    snprintf(path, sizeof path, "%s/clip.png", g_dir);
    assert_int_equal(qvc_plot_mel_png(path, mel, n, 0, used_end, err, sizeof err), 0);
    if (getenv("QVOICE_PLOT_KEEP")) {
        assert_int_equal(qvc_plot_mel_png(getenv("QVOICE_PLOT_KEEP"), mel, n, 0, used_end, err,
                                          sizeof err), 0);
    }
    image im = read_png(path);
    printf("plot: clip %d mel frames -> %d x %d px\n", n, im.w, im.h);
    assert_true(is_cyan(px(&im, qvc_plot_column(n, used_end), 3)));
    free(im.rgb);
    qva_mel_free(m);
    free(mel);
    qva_audio_free(&a);
}

static void test_errors_leave_nothing(void **state) {
    (void)state;
    char err[256] = "", path[160];
    float mel[10 * QVA_MEL_BINS] = {0};
    snprintf(path, sizeof path, "%s/bad.png", g_dir);
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, 5, 5, err, sizeof err), -1);
    printf("plot: %s\n", err);
    assert_non_null(strstr(err, "bad frame range"));
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, 0, 11, err, sizeof err), -1);
    assert_int_equal(qvc_plot_mel_png(path, mel, 0, 0, 0, err, sizeof err), -1);
    assert_int_equal(access(path, F_OK), -1);

    snprintf(path, sizeof path, "%s/no/such/dir.png", g_dir);
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, 0, 10, err, sizeof err), -1);
    printf("plot: %s\n", err);
    assert_non_null(strstr(err, path));

    /* an existing file is replaced whole; no temporary is left next to it */
    snprintf(path, sizeof path, "%s/again.png", g_dir);
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, 0, 10, err, sizeof err), 0);
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, 2, 8, err, sizeof err), 0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", g_dir);
    assert_int_not_equal(system(cmd), 0);
}

QVT_MAIN(setup, teardown, test_png_marks, test_long_input_pooled, test_real_clip,
         test_errors_leave_nothing)
