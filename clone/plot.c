/* plot.c — log-mel spectrogram to PNG through libpng's simplified write API (no setjmp), with
 * axes, labels and a legend drawn in a built-in 5×7 pixel font (doubled).
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

#include "features/features.h"
#include "features/speech_encoder.h"
#include "util/fileio.h"

#define RANGE_DB 80.0
#define NATS_PER_DB (M_LN10 / 20.0) /* mel values are ln(magnitude): 20·log10(e) dB per nat */
#define LN_FLOOR (-11.512925465)    /* ln(1e-5), the §5.1 clamp: digital silence */
#define DIM_KEEP 0.35               /* outside the used part: colour × this + DIM_GREY */
#define DIM_GREY 18.0

static const uint8_t line_rgb[3] = {0, 255, 255};   /* the kept span's ends */
static const uint8_t kept_rgb[3] = {76, 217, 100};   /* the kept span's bar */
static const uint8_t icl_rgb[3] = {64, 140, 255};    /* the ICL window's bar and ends */
static const uint8_t axis_bg_rgb[3] = {28, 28, 28};
static const uint8_t tick_rgb[3] = {200, 200, 200};
static const uint8_t text_rgb[3] = {225, 225, 225};

#define FONT_SCALE 2
#define GLYPH_W (6 * FONT_SCALE) /* 5 columns and a gap */
#define GLYPH_H (7 * FONT_SCALE)

/* ---- text: the characters the labels use, 5×7, one row of 5 bits per byte (MSB left) ---- */

static const struct {
    char c;
    uint8_t rows[7];
} font[] = {
    {'0', {14, 17, 19, 21, 25, 17, 14}}, {'1', {4, 12, 4, 4, 4, 4, 14}},
    {'2', {14, 17, 1, 2, 4, 8, 31}},     {'3', {31, 2, 4, 2, 1, 17, 14}},
    {'4', {2, 6, 10, 18, 31, 2, 2}},     {'5', {31, 16, 30, 1, 1, 17, 14}},
    {'6', {6, 8, 16, 30, 17, 17, 14}},   {'7', {31, 1, 2, 4, 8, 8, 8}},
    {'8', {14, 17, 17, 14, 17, 17, 14}}, {'9', {14, 17, 17, 15, 1, 2, 12}},
    {'a', {0, 0, 14, 1, 15, 17, 15}},    {'c', {0, 0, 14, 16, 16, 17, 14}},
    {'d', {1, 1, 13, 19, 17, 17, 15}},   {'e', {0, 0, 14, 17, 31, 16, 14}},
    {'g', {0, 0, 15, 17, 15, 1, 14}},   {'h', {16, 16, 22, 25, 17, 17, 17}},
    {'i', {4, 0, 12, 4, 4, 4, 14}},
    {'k', {16, 16, 18, 20, 24, 20, 18}}, {'l', {12, 4, 4, 4, 4, 4, 14}},
    {'m', {0, 0, 26, 21, 21, 17, 17}},   {'n', {0, 0, 22, 25, 17, 17, 17}},
    {'o', {0, 0, 14, 17, 17, 17, 14}},   {'p', {0, 0, 30, 17, 30, 16, 16}},
    {'s', {0, 0, 14, 16, 14, 1, 30}},    {'t', {8, 8, 28, 8, 8, 9, 6}},
    {'u', {0, 0, 17, 17, 17, 19, 13}},   {'w', {0, 0, 17, 17, 21, 21, 10}},
    {'z', {0, 0, 31, 2, 4, 8, 31}},      {'C', {14, 17, 16, 16, 16, 17, 14}},
    {'H', {17, 17, 17, 31, 17, 17, 17}}, {'I', {14, 4, 4, 4, 4, 4, 14}},
    {'L', {16, 16, 16, 16, 16, 16, 31}}, {'(', {2, 4, 8, 8, 8, 4, 2}},
    {')', {8, 4, 2, 2, 2, 4, 8}},        {'-', {0, 0, 0, 31, 0, 0, 0}},
    {',', {0, 0, 0, 0, 12, 4, 8}},
};

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

static int n_columns(int n_frames) {
    int k = frames_per_column(n_frames > 0 ? n_frames : 1);
    return n_frames > 0 ? (n_frames + k - 1) / k : 0;
}

void qvc_plot_size(int n_frames, int *width_px, int *height_px) {
    *width_px = QVC_PLOT_LEFT_PX + n_columns(n_frames) + QVC_PLOT_RIGHT_PX;
    *height_px = QVC_PLOT_TOP_PX + QVA_MEL_BINS * QVC_PLOT_BIN_PX + QVC_PLOT_AXIS_PX;
}

int qvc_plot_column(int n_frames, int frame) {
    int x = frame / frames_per_column(n_frames), w = n_columns(n_frames);
    return QVC_PLOT_LEFT_PX + (x < w - 1 ? x : w - 1);
}

typedef struct {
    uint8_t *rgb;
    int w, h;
} canvas;

static void put(const canvas *c, int x, int y, const uint8_t rgb[3]) {
    if (x >= 0 && y >= 0 && x < c->w && y < c->h)
        memcpy(c->rgb + ((size_t)y * (size_t)c->w + (size_t)x) * 3, rgb, 3);
}

static void fill(const canvas *c, int x0, int y0, int w, int h, const uint8_t rgb[3]) {
    for (int y = y0; y < y0 + h; y++)
        for (int x = x0; x < x0 + w; x++) put(c, x, y, rgb);
}

/* A vertical line over the spectrogram; dashed: 6 px on, 4 off. */
static void vline(const canvas *c, int x, const uint8_t rgb[3], int dashed) {
    for (int y = 0; y < QVA_MEL_BINS * QVC_PLOT_BIN_PX; y++)
        if (!dashed || y % 10 < 6) put(c, x, QVC_PLOT_TOP_PX + y, rgb);
}

/* ---- text ------------------------------------------------------------------------------- */

static int text_width(const char *t) {
    return (int)strlen(t) * GLYPH_W - FONT_SCALE;
}

/* t with its top-left corner at (x, y); characters outside the font are blank. */
static void text(const canvas *c, int x, int y, const char *t, const uint8_t rgb[3]) {
    for (; *t; t++, x += GLYPH_W)
        for (size_t g = 0; g < sizeof font / sizeof *font; g++) {
            if (font[g].c != *t) continue;
            for (int r = 0; r < 7; r++)
                for (int b = 0; b < 5; b++)
                    if (font[g].rows[r] & (16 >> b))
                        fill(c, x + b * FONT_SCALE, y + r * FONT_SCALE, FONT_SCALE, FONT_SCALE,
                             rgb);
        }
}

/* ---- rendering -------------------------------------------------------------------------- */

static void spectrogram(const canvas *c, const float *mel, int n_frames, const qvc_plot_marks *k) {
    const int per = frames_per_column(n_frames), spec_h = QVA_MEL_BINS * QVC_PLOT_BIN_PX;
    uint8_t lut[256][3];
    colour_map(lut);
    float vmax = (float)LN_FLOOR;
    for (size_t i = 0; i < (size_t)n_frames * QVA_MEL_BINS; i++)
        if (isfinite(mel[i]) && mel[i] > vmax) vmax = mel[i];
    /* a quiet clip keeps its 80 dB window above the clamp floor, so silence stays dark */
    const double range = RANGE_DB * NATS_PER_DB;
    const double top = fmax((double)vmax, LN_FLOOR + range), bottom = top - range;
    for (int x = 0; x < n_columns(n_frames); x++) {
        int f0 = x * per, f1 = f0 + per < n_frames ? f0 + per : n_frames;
        int used = f1 > k->used_start && f0 < k->used_end;
        for (int bin = 0; bin < QVA_MEL_BINS; bin++) {
            double v = -HUGE_VAL; /* max over the pooled frames: short clicks stay visible */
            for (int f = f0; f < f1; f++) {
                float m = mel[(size_t)f * QVA_MEL_BINS + (size_t)bin];
                if (isfinite(m) && m > v) v = m;
            }
            double t = (v - bottom) / range;
            int idx = t <= 0.0 ? 0 : t >= 1.0 ? 255 : (int)(t * 255.0 + 0.5);
            uint8_t rgb[3];
            for (int ch = 0; ch < 3; ch++)
                rgb[ch] = used ? lut[idx][ch] : (uint8_t)(lut[idx][ch] * DIM_KEEP + DIM_GREY + 0.5);
            /* bin 0 at the bottom */
            fill(c, QVC_PLOT_LEFT_PX + x, QVC_PLOT_TOP_PX + spec_h - (bin + 1) * QVC_PLOT_BIN_PX, 1,
                 QVC_PLOT_BIN_PX, rgb);
        }
    }
}

/* Frequency ticks and labels on the left, seconds under the spectrogram. */
static void axes(const canvas *c, int n_frames) {
    const int spec_h = QVA_MEL_BINS * QVC_PLOT_BIN_PX, y_axis = QVC_PLOT_TOP_PX + spec_h;
    static const struct {
        double hz;
        const char *label;
    } freqs[] = {{500, "500"}, {1000, "1k"}, {2000, "2k"}, {4000, "4k"}, {8000, "8k"}};
    for (size_t i = 0; i < sizeof freqs / sizeof *freqs; i++) {
        int bin = 0;
        while (bin + 1 < QVA_MEL_BINS && qva_mel_bin_hz(bin + 1) <= freqs[i].hz) bin++;
        int y = y_axis - bin * QVC_PLOT_BIN_PX - QVC_PLOT_BIN_PX / 2;
        fill(c, QVC_PLOT_LEFT_PX - 5, y, 4, 1, tick_rgb);
        text(c, QVC_PLOT_LEFT_PX - 8 - text_width(freqs[i].label), y - GLYPH_H / 2,
             freqs[i].label, text_rgb);
    }
    text(c, 4, QVC_PLOT_TOP_PX, "Hz", text_rgb);
    /* one tick per second (hop 256 at 24 kHz = 93.75 frames/s); a label every `every` seconds,
       at least 64 px apart */
    const double frames_per_s = (double)QVA_SAMPLE_RATE_HZ / QVA_MEL_HOP;
    const double px_per_s = frames_per_s / frames_per_column(n_frames);
    static const int steps[] = {1, 2, 5, 10, 30, 60, 300, 600};
    int every = 600;
    for (size_t i = 0; i < sizeof steps / sizeof *steps && every == 600; i++)
        if (steps[i] * px_per_s >= 64) every = steps[i];
    for (int sec = 0; sec * frames_per_s <= n_frames; sec++) {
        int x = qvc_plot_column(n_frames, (int)(sec * frames_per_s + 0.5));
        int labelled = sec % every == 0;
        fill(c, x, y_axis, 1, labelled ? 8 : 4, tick_rgb);
        if (!labelled) continue;
        char t[24];
        snprintf(t, sizeof t, "%d s", sec);
        int tx = x - text_width(t) / 2;
        if (tx < QVC_PLOT_LEFT_PX - 8) tx = QVC_PLOT_LEFT_PX - 8;
        if (tx + text_width(t) > c->w) tx = c->w - text_width(t);
        text(c, tx, y_axis + 11, t, text_rgb);
    }
}

/* The kept span and the ICL window: bars above the spectrogram, lines at their ends; the legend. */
static void marks(const canvas *c, int n_frames, const qvc_plot_marks *k) {
    const int bar_y = QVC_PLOT_TOP_PX - 12;
    int x0 = qvc_plot_column(n_frames, k->used_start), x1 = qvc_plot_column(n_frames, k->used_end);
    fill(c, x0, bar_y, x1 - x0 + 1, 4, kept_rgb);
    if (k->icl_end > k->icl_start) {
        int a = k->icl_start < 0 ? 0 : k->icl_start;
        int b = k->icl_end > n_frames ? n_frames : k->icl_end;
        int i0 = qvc_plot_column(n_frames, a), i1 = qvc_plot_column(n_frames, b);
        for (int x = i0; x <= i1; x++)
            if (k->icl_used || (x - i0) % 10 < 6) fill(c, x, bar_y + 6, 1, 4, icl_rgb);
        vline(c, i0, icl_rgb, !k->icl_used);
        vline(c, i1, icl_rgb, !k->icl_used);
    }
    vline(c, x0, line_rgb, 0);
    vline(c, x1, line_rgb, 0);
    /* legend: swatch, then its words */
    const uint8_t dim_rgb[3] = {60, 44, 64};
    const struct {
        const uint8_t *rgb;
        const char *label;
    } items[] = {{kept_rgb, "kept span"},
                 {icl_rgb, k->icl_used ? "ICL window" : "ICL window (suggested, dashed)"},
                 {dim_rgb, "cut (dimmed)"}};
    int x = QVC_PLOT_LEFT_PX;
    for (size_t i = 0; i < sizeof items / sizeof *items; i++) {
        if (i == 1 && k->icl_end <= k->icl_start) continue;
        fill(c, x, 5, 16, 12, items[i].rgb);
        text(c, x + 22, 4, items[i].label, text_rgb);
        x += 22 + text_width(items[i].label) + 24;
    }
}

static void render(const canvas *c, const float *mel, int n_frames, const qvc_plot_marks *k) {
    fill(c, 0, 0, c->w, c->h, axis_bg_rgb);
    spectrogram(c, mel, n_frames, k);
    axes(c, n_frames);
    marks(c, n_frames, k);
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

int qvc_plot_mel_png(const char *path, const float *mel, int n_frames, const qvc_plot_marks *k,
                     char *err, size_t err_size) {
    if (!path || !*path || !mel || !k) {
        snprintf(err, err_size, "%s: no output path, mel data or marks", path ? path : "(null)");
        return -1;
    }
    if (n_frames <= 0 || k->used_start < 0 || k->used_start >= k->used_end ||
        k->used_end > n_frames) {
        snprintf(err, err_size,
                 "%s: bad frame range (expected 0 <= used start < used end <= %d frames, found "
                 "%d..%d)",
                 path, n_frames, k->used_start, k->used_end);
        return -1;
    }
    canvas c;
    qvc_plot_size(n_frames, &c.w, &c.h);
    if (!(c.rgb = malloc((size_t)c.w * (size_t)c.h * 3))) {
        snprintf(err, err_size, "%s: out of memory (%d x %d image)", path, c.w, c.h);
        return -1;
    }
    render(&c, mel, n_frames, k);
    int rc = write_png(path, c.rgb, c.w, c.h, err, err_size);
    free(c.rgb);
    return rc;
}
