/* vad.c — frame-energy voice activity detection (see vad.h). The threshold adapts to the clip:
 * floor + margin finds speech above room tone; the cap below the loud frames keeps a clip that
 * is speech throughout (no silence to measure a floor from) from losing its quieter half.
 */
#include "features/vad.h"

#include <math.h>
#include <stdlib.h>

qva_vad_params qva_vad_default_params(void) {
    qva_vad_params p = {
        .frame_samples = 240,
        .floor_percentile = 10.0,
        .margin_db = 15.0,
        .headroom_db = 30.0,
        .abs_min_dbfs = -60.0,
        .min_run_frames = 3,
    };
    return p;
}

int64_t qva_vad_n_frames(int64_t n_samples, int frame_samples) {
    if (n_samples <= 0 || frame_samples <= 0) return 0;
    return (n_samples + frame_samples - 1) / frame_samples;
}

void qva_vad_frame_db(float *db, const float *x, int64_t n_samples, int frame_samples) {
    int64_t nf = qva_vad_n_frames(n_samples, frame_samples);
    for (int64_t f = 0; f < nf; f++) {
        int64_t a = f * frame_samples, b = a + frame_samples;
        if (b > n_samples) b = n_samples;
        double s = 0;
        for (int64_t i = a; i < b; i++)
            s += (double)x[i] * x[i];
        double ms = s / (double)(b - a);
        db[f] =
            ms > 0 ? (float)fmax(10.0 * log10(ms), QVK_VAD_FLOOR_DBFS) : (float)QVK_VAD_FLOOR_DBFS;
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double percentile(const float *sorted, int64_t n, double pct) {
    double pos = pct / 100.0 * (double)(n - 1);
    int64_t i = (int64_t)pos;
    if (i >= n - 1) return sorted[n - 1];
    return sorted[i] + (pos - (double)i) * (sorted[i + 1] - sorted[i]);
}

int64_t qva_vad_label(uint8_t *voiced, const float *db, int64_t n_frames, const qva_vad_params *p,
                      double *floor_dbfs, double *threshold_dbfs) {
    if (n_frames <= 0) {
        if (floor_dbfs) *floor_dbfs = QVK_VAD_FLOOR_DBFS;
        if (threshold_dbfs) *threshold_dbfs = p->abs_min_dbfs;
        return 0;
    }
    float *s = malloc((size_t)n_frames * sizeof *s);
    if (!s) return -1;
    for (int64_t i = 0; i < n_frames; i++)
        s[i] = db[i];
    qsort(s, (size_t)n_frames, sizeof *s, cmp_float);
    double floor_db = percentile(s, n_frames, p->floor_percentile);
    double loud_db = percentile(s, n_frames, 95.0);
    free(s);
    double thr = fmin(floor_db + p->margin_db, loud_db - p->headroom_db);
    thr = fmax(thr, p->abs_min_dbfs);
    if (floor_dbfs) *floor_dbfs = floor_db;
    if (threshold_dbfs) *threshold_dbfs = thr;

    int64_t n_voiced = 0;
    for (int64_t i = 0; i < n_frames;) {
        if (!(db[i] > thr)) {
            voiced[i++] = 0;
            continue;
        }
        int64_t j = i;
        while (j < n_frames && db[j] > thr)
            j++;
        uint8_t keep = j - i >= p->min_run_frames;
        for (int64_t k = i; k < j; k++)
            voiced[k] = keep;
        if (keep) n_voiced += j - i;
        i = j;
    }
    return n_voiced;
}

void qva_vad_bounds(const uint8_t *voiced, int64_t n_frames, int64_t *first, int64_t *end) {
    int64_t a = 0, b = n_frames;
    while (a < n_frames && !voiced[a])
        a++;
    while (b > a && !voiced[b - 1])
        b--;
    if (a == n_frames) a = b = 0;
    *first = a;
    *end = b;
}
