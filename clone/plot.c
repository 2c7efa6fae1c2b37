/* plot.c — log-mel spectrogram to PNG through libpng's simplified write API (no setjmp).
 * Colour map: lightness rises linearly in OKLab (so equal steps in level look like equal steps in
 * brightness) while the hue turns purple → red → yellow; each entry's chroma is reduced until it
 * fits sRGB, which keeps the lightness ramp exact.
 */
#include "clone/plot.h"

#include <float.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/speech_encoder.h"
#include "util/fileio.h"

#define RANGE_DB 80.0
#define NATS_PER_DB (M_LN10 / 20.0) /* mel values are ln(magnitude): 20·log10(e) dB per nat */
#define LN_FLOOR (-11.512925465)    /* ln(1e-5), the §5.1 clamp: digital silence */
#define DIM_KEEP 0.35               /* outside the used part: colour × this + DIM_GREY */
#define DIM_GREY 18.0

static const uint8_t line_rgb[3] = {0, 255, 255};
static const uint8_t axis_bg_rgb[3] = {28, 28, 28};
static const uint8_t tick_rgb[3] = {200, 200, 200};

/* ---- colour map ------------------------------------------------------------------------- */

static double srgb_encode(double x) {
    return x <= 0.0031308 ? 12.92 * x : 1.055 * pow(x, 1.0 / 2.4) - 0.055;
}

/* OKLab → linear sRGB; returns 1 when all three are inside [0, 1]. */
static int oklab_to_linear(double l, double a, double b, double rgb[3]) {
    double l_ = l + 0.3963377774 * a + 0.2158037573 * b;
    double m_ = l - 0.1055613458 * a - 0.0638541728 * b;
    double s_ = l - 0.0894841775 * a - 1.2914855480 * b;
    double lc = l_ * l_ * l_, mc = m_ * m_ * m_, sc = s_ * s_ * s_;
    rgb[0] = 4.0767416621 * lc - 3.3077115913 * mc + 0.2309699292 * sc;
    rgb[1] = -1.2684380046 * lc + 2.6097574011 * mc - 0.3413193965 * sc;
    rgb[2] = -0.0041960863 * lc - 0.7034186147 * mc + 1.7076147010 * sc;
    for (int i = 0; i < 3; i++)
        if (rgb[i] < 0.0 || rgb[i] > 1.0) return 0;
    return 1;
}

static void colour_map(uint8_t lut[256][3]) {
    for (int i = 0; i < 256; i++) {
        double t = i / 255.0, l = 0.16 + 0.80 * t;
        double hue = (300.0 + 170.0 * t) * M_PI / 180.0;
        double c = 0.05 + 0.13 * sin(M_PI * t), rgb[3];
        /* bisection on chroma: the largest c' <= c that is inside the gamut (c' = 0 always is) */
        if (!oklab_to_linear(l, c * cos(hue), c * sin(hue), rgb)) {
            double lo = 0.0, hi = c;
            for (int k = 0; k < 30; k++) {
                double mid = 0.5 * (lo + hi);
                if (oklab_to_linear(l, mid * cos(hue), mid * sin(hue), rgb)) lo = mid;
                else hi = mid;
            }
            oklab_to_linear(l, lo * cos(hue), lo * sin(hue), rgb);
        }
        for (int k = 0; k < 3; k++) {
            double v = srgb_encode(fmin(fmax(rgb[k], 0.0), 1.0)) * 255.0 + 0.5;
            lut[i][k] = (uint8_t)(v > 255.0 ? 255.0 : v);
        }
    }
}

/* ---- geometry --------------------------------------------------------------------------- */

static int frames_per_column(int n_frames) {
    return n_frames <= QVC_PLOT_MAX_WIDTH ? 1 : (n_frames + QVC_PLOT_MAX_WIDTH - 1) / QVC_PLOT_MAX_WIDTH;
}

void qvc_plot_size(int n_frames, int *width_px, int *height_px) {
    int k = frames_per_column(n_frames > 0 ? n_frames : 1);
    *width_px = n_frames > 0 ? (n_frames + k - 1) / k : 0;
    *height_px = QVA_MEL_BINS * QVC_PLOT_BIN_PX + QVC_PLOT_AXIS_PX;
}

int qvc_plot_column(int n_frames, int frame) {
    int w, h;
    qvc_plot_size(n_frames, &w, &h);
    int x = frame / frames_per_column(n_frames);
    return x < w - 1 ? x : w - 1;
}

static void put(uint8_t *img, int width, int x, int y, const uint8_t rgb[3]) {
    memcpy(img + ((size_t)y * (size_t)width + (size_t)x) * 3, rgb, 3);
}

/* ---- rendering -------------------------------------------------------------------------- */

static void render(uint8_t *img, int width, const float *mel, int n_frames, int used_start,
                   int used_end) {
    const int k = frames_per_column(n_frames), spec_h = QVA_MEL_BINS * QVC_PLOT_BIN_PX;
    uint8_t lut[256][3];
    colour_map(lut);

    float vmax = (float)LN_FLOOR;
    for (size_t i = 0; i < (size_t)n_frames * QVA_MEL_BINS; i++)
        if (isfinite(mel[i]) && mel[i] > vmax) vmax = mel[i];
    /* a quiet clip keeps its 80 dB window above the clamp floor, so silence stays dark */
    const double range = RANGE_DB * NATS_PER_DB;
    const double top = fmax((double)vmax, LN_FLOOR + range), bottom = top - range;

    for (int x = 0; x < width; x++) {
        int f0 = x * k, f1 = f0 + k < n_frames ? f0 + k : n_frames;
        int used = f1 > used_start && f0 < used_end;
        for (int bin = 0; bin < QVA_MEL_BINS; bin++) {
            double v = -HUGE_VAL;  /* max over the pooled frames: short clicks stay visible */
            for (int f = f0; f < f1; f++) {
                float m = mel[(size_t)f * QVA_MEL_BINS + (size_t)bin];
                if (isfinite(m) && m > v) v = m;
            }
            double t = (v - bottom) / range;
            int idx = t <= 0.0 ? 0 : t >= 1.0 ? 255 : (int)(t * 255.0 + 0.5);
            uint8_t rgb[3];
            for (int c = 0; c < 3; c++)
                rgb[c] = used ? lut[idx][c] : (uint8_t)(lut[idx][c] * DIM_KEEP + DIM_GREY + 0.5);
            int y0 = spec_h - (bin + 1) * QVC_PLOT_BIN_PX; /* bin 0 at the bottom */
            for (int dy = 0; dy < QVC_PLOT_BIN_PX; dy++) put(img, width, x, y0 + dy, rgb);
        }
        for (int y = spec_h; y < spec_h + QVC_PLOT_AXIS_PX; y++) put(img, width, x, y, axis_bg_rgb);
    }

    /* ticks: one per second of audio (hop 256 at 24 kHz = 93.75 frames/s), full height every 5 s */
    const double frames_per_s = (double)QVA_SAMPLE_RATE_HZ / QVA_MEL_HOP;
    for (int s = 1; s * frames_per_s < n_frames; s++) {
        int x = qvc_plot_column(n_frames, (int)(s * frames_per_s + 0.5));
        int len = s % 5 ? QVC_PLOT_AXIS_PX / 2 : QVC_PLOT_AXIS_PX;
        for (int y = spec_h; y < spec_h + len; y++) put(img, width, x, y, tick_rgb);
    }
    const int lines[2] = {qvc_plot_column(n_frames, used_start), qvc_plot_column(n_frames, used_end)};
    for (int i = 0; i < 2; i++)
        for (int y = 0; y < spec_h + QVC_PLOT_AXIS_PX; y++) put(img, width, lines[i], y, line_rgb);
}

/* ---- write -------------------------------------------------------------------------------- */

static int write_png(const char *path, const uint8_t *img, int width, int height, char *err,
                     size_t err_size) {
    qvu_wfile *w;
    if (qvu_wfile_open(&w, path, err, err_size)) return -1;
    FILE *f = qvu_wfile_stream(w);
    if (!f) {
        qvu_wfile_abort(w);
        snprintf(err, err_size, "%s: out of memory", path);
        return -1;
    }
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    image.width = (png_uint_32)width;
    image.height = (png_uint_32)height;
    image.format = PNG_FORMAT_RGB;
    int ok = png_image_write_to_stdio(&image, f, 0, img, width * 3, NULL);
    if (!ok) snprintf(err, err_size, "%s: libpng: %s", path, image.message);
    png_image_free(&image);
    if (!ok) {
        qvu_wfile_abort(w);
        return -1;
    }
    return qvu_wfile_commit(w, err, err_size);
}

int qvc_plot_mel_png(const char *path, const float *mel, int n_frames, int used_start_frame,
                     int used_end_frame, char *err, size_t err_size) {
    if (!path || !*path || !mel) {
        snprintf(err, err_size, "%s: no output path or no mel data", path ? path : "(null)");
        return -1;
    }
    if (n_frames <= 0 || used_start_frame < 0 || used_start_frame >= used_end_frame ||
        used_end_frame > n_frames) {
        snprintf(err, err_size,
                 "%s: bad frame range (expected 0 <= used start < used end <= %d frames, found "
                 "%d..%d)",
                 path, n_frames, used_start_frame, used_end_frame);
        return -1;
    }
    int width, height;
    qvc_plot_size(n_frames, &width, &height);
    uint8_t *img = malloc((size_t)width * (size_t)height * 3);
    if (!img) {
        snprintf(err, err_size, "%s: out of memory (%d x %d image)", path, width, height);
        return -1;
    }
    render(img, width, mel, n_frames, used_start_frame, used_end_frame);
    int rc = write_png(path, img, width, height, err, err_size);
    free(img);
    return rc;
}
