/* test_plot.c — clone/plot: a PNG written from a generated log-mel and read back with libpng:
 * size, the cyan boundary columns and green bar of the kept span, the ICL window's blue bar and
 * lines (dashed when only suggested), labelled axes and the legend, low bins at the bottom,
 * dimming outside the used part, pooling of long inputs, the real clip's mel, and bad arguments /
 * unwritable paths leaving no file.
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

static int is_blue(const uint8_t *p) { return p[0] == 64 && p[1] == 140 && p[2] == 255; }
static int is_green(const uint8_t *p) { return p[0] == 76 && p[1] == 217 && p[2] == 100; }
static int is_text(const uint8_t *p) { return p[0] == 225 && p[1] == 225 && p[2] == 225; }

/* Text-coloured pixels in the rectangle [x0, x1) × [y0, y1). */
static int n_text(const image *im, int x0, int x1, int y0, int y1) {
    int n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) n += is_text(px(im, x, y));
    return n;
}

static void test_png_marks(void **state) {
    (void)state;
    const int n = 500, used0 = 100, used1 = 400, icl0 = 150, icl1 = 300;
    char path[128], err[256] = "";
    snprintf(path, sizeof path, "%s/mel.png", g_dir);
    float *mel = make_mel(n);
    qvc_plot_marks k = {used0, used1, icl0, icl1, 1};
    assert_int_equal(qvc_plot_mel_png(path, mel, n, &k, err, sizeof err), 0);
    image im = read_png(path);
    int w, h;
    qvc_plot_size(n, &w, &h);
    const int spec_h = QVA_MEL_BINS * QVC_PLOT_BIN_PX, T = QVC_PLOT_TOP_PX, L = QVC_PLOT_LEFT_PX;
    printf("plot: %d x %d px\n", im.w, im.h);
    assert_int_equal(im.w, L + n + QVC_PLOT_RIGHT_PX);
    assert_int_equal(im.w, w);
    assert_int_equal(im.h, T + spec_h + QVC_PLOT_AXIS_PX);
    assert_int_equal(im.h, h);

    /* the kept span: cyan lines at its ends over the whole spectrogram, a green bar above */
    int x0 = qvc_plot_column(n, used0), x1 = qvc_plot_column(n, used1);
    assert_int_equal(x0, L + used0);
    assert_int_equal(x1, L + used1);
    for (int y = T; y < T + spec_h; y++) {
        assert_true(is_cyan(px(&im, x0, y)));
        assert_true(is_cyan(px(&im, x1, y)));
    }
    int n_cyan = 0; /* nowhere else: the colour map never produces cyan */
    for (int x = 0; x < im.w; x++) n_cyan += is_cyan(px(&im, x, T + spec_h / 2));
    assert_int_equal(n_cyan, 2);
    assert_true(is_green(px(&im, L + 250, T - 11)));
    assert_false(is_green(px(&im, L + 50, T - 11))); /* only over the kept span */
    /* the ICL window: a solid blue bar and solid blue lines (it is used) */
    int i0 = qvc_plot_column(n, icl0), i1 = qvc_plot_column(n, icl1), n_blue = 0;
    for (int x = i0; x <= i1; x++) n_blue += is_blue(px(&im, x, T - 5));
    assert_int_equal(n_blue, i1 - i0 + 1);
    assert_false(is_blue(px(&im, i1 + 5, T - 5)));
    for (int y = T; y < T + spec_h; y++) assert_true(is_blue(px(&im, i0, y)));

    /* labels: the legend above, frequencies on the left, seconds under the ticks */
    assert_true(n_text(&im, L, im.w, 0, 20) > 100);
    assert_true(n_text(&im, 0, L - 4, T, T + spec_h) > 100);
    int tick1 = qvc_plot_column(n, 94); /* 1 s = 93.75 frames */
    assert_int_equal(px(&im, tick1, T + spec_h + 1)[0], 200);
    assert_true(n_text(&im, tick1 - 20, tick1 + 30, T + spec_h + 10, im.h) > 20);

    /* low bins at the bottom: the loud band is bright at the bottom, dark at the top */
    int x_in = L + 250, x_out = L + 450;
    int bottom = luma(px(&im, x_in, T + spec_h - 1)), top = luma(px(&im, x_in, T));
    printf("plot: used column luma bottom %d, top %d; dimmed column bottom %d\n", bottom, top,
           luma(px(&im, x_out, T + spec_h - 1)));
    assert_true(bottom > top + 800);
    /* the same data outside the used part is dimmed */
    assert_true(luma(px(&im, x_out, T + spec_h - 1)) < bottom / 2);
    /* silence (the clamp floor) is darker than -60 dB (both dimmed) */
    assert_true(luma(px(&im, L + 20, T + spec_h - 1)) < luma(px(&im, x_out, T)));
    free(im.rgb);

    /* only suggested: the ICL lines are dashed */
    k.icl_used = 0;
    assert_int_equal(qvc_plot_mel_png(path, mel, n, &k, err, sizeof err), 0);
    im = read_png(path);
    n_blue = 0;
    for (int y = T; y < T + spec_h; y++) n_blue += is_blue(px(&im, i0, y));
    printf("plot: suggested window line %d of %d px\n", n_blue, spec_h);
    assert_true(n_blue > spec_h / 2 && n_blue < spec_h);
    free(im.rgb);
    free(mel);
}

static void test_long_input_pooled(void **state) {
    (void)state;
    const int n = 4000;
    char path[128], err[256] = "";
    snprintf(path, sizeof path, "%s/long.png", g_dir);
    float *mel = make_mel(n);
    qvc_plot_marks k = {0, 3200, 0, -1, 0};
    assert_int_equal(qvc_plot_mel_png(path, mel, n, &k, err, sizeof err), 0);
    image im = read_png(path);
    const int cols = im.w - QVC_PLOT_LEFT_PX - QVC_PLOT_RIGHT_PX;
    printf("plot: %d frames -> %d columns\n", n, cols);
    assert_true(cols <= QVC_PLOT_MAX_WIDTH);
    assert_int_equal(cols, 1334); /* 3 frames per column */
    assert_true(is_cyan(px(&im, qvc_plot_column(n, 3200), QVC_PLOT_TOP_PX + 5)));
    assert_true(is_cyan(px(&im, QVC_PLOT_LEFT_PX, QVC_PLOT_TOP_PX + 5)));
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
    qvc_plot_marks k = {0, used_end, qva_mel_n_frames(3 * QVA_SAMPLE_RATE_HZ),
                        qva_mel_n_frames(15 * QVA_SAMPLE_RATE_HZ), 1};
    assert_int_equal(qvc_plot_mel_png(path, mel, n, &k, err, sizeof err), 0);
    if (getenv("QVOICE_PLOT_KEEP"))
        assert_int_equal(qvc_plot_mel_png(getenv("QVOICE_PLOT_KEEP"), mel, n, &k, err, sizeof err),
                         0);
    image im = read_png(path);
    printf("plot: clip %d mel frames -> %d x %d px\n", n, im.w, im.h);
    assert_true(is_cyan(px(&im, qvc_plot_column(n, used_end), QVC_PLOT_TOP_PX + 3)));
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
    qvc_plot_marks k = {5, 5, 0, -1, 0};
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, &k, err, sizeof err), -1);
    printf("plot: %s\n", err);
    assert_non_null(strstr(err, "bad frame range"));
    k.used_start = 0, k.used_end = 11;
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, &k, err, sizeof err), -1);
    k.used_end = 0;
    assert_int_equal(qvc_plot_mel_png(path, mel, 0, &k, err, sizeof err), -1);
    k.used_end = 10;
    assert_int_equal(access(path, F_OK), -1);

    snprintf(path, sizeof path, "%s/no/such/dir.png", g_dir);
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, &k, err, sizeof err), -1);
    printf("plot: %s\n", err);
    assert_non_null(strstr(err, path));

    /* an existing file is replaced whole; no temporary is left next to it */
    snprintf(path, sizeof path, "%s/again.png", g_dir);
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, &k, err, sizeof err), 0);
    k.used_start = 2, k.used_end = 8;
    assert_int_equal(qvc_plot_mel_png(path, mel, 10, &k, err, sizeof err), 0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", g_dir);
    assert_int_not_equal(system(cmd), 0);
}

QVT_MAIN(setup, teardown, test_png_marks, test_long_input_pooled, test_real_clip,
         test_errors_leave_nothing)
