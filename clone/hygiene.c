/* hygiene.c — reference-audio hygiene (see hygiene.h). Every step works on 10 ms frames from
 * features/vad, so trim, level, window choice and the transcript check agree on what "voiced"
 * means. The second-speaker scan clusters window vectors instead of comparing them with the
 * whole-clip vector: attentive statistics pooling adds the between-speaker spread to a mixed
 * clip's vector, which then resembles neither speaker (measured in docs/robustness.md).
 */
#include "clone/hygiene.h"
#include "include/qvoice.h"

#include <cJSON.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define SR ((double)QVA_SAMPLE_RATE_HZ)

qvc_hygiene_params qvc_hygiene_default_params(void) {
    qvc_hygiene_params p = {
        .vad = qva_vad_default_params(),
        .preroll_s = 0.020,
        .target_lufs = -20.0,
        .peak_cap_dbfs = -1.0,
        .max_gain_db = 30.0,
        .clip_level = QVA_CLIP_LEVEL,
        .clip_warn_fraction = QVA_CLIP_WARN_FRACTION,
        .min_voiced_s = QVA_MIN_SECONDS,
        .icl_mode = QVC_ICL_FULL,
        .icl_max_s = 30.0,
        .icl_min_s = QVA_MIN_SECONDS,
        .window_min_s = 10.0,
        .window_max_s = 15.0,
        .min_snr_db = 25.0,
        .tail_silence_s = 0.5,
        .units_per_s_min = 4.0,
        .units_per_s_max = 35.0,
        .spk_window_s = 3.0,
        .spk_hop_s = 1.5,
        .spk_threshold = 0.5,
        .spk_min_voiced = 0.5,
    };
    return p;
}

/* ==== frames ================================================================================ */

typedef struct {
    int64_t n;  /* frames */
    int fs;     /* samples per frame */
    float *db;  /* [n] */
    uint8_t *v; /* [n] voiced */
    int64_t n_voiced;
    double floor_db, thr_db;
} frames;

static void frames_free(frames *f) {
    free(f->db);
    free(f->v);
}

static int frames_make(frames *f, const float *x, int64_t n, const qvc_hygiene_params *p, char *err,
                       size_t err_size) {
    memset(f, 0, sizeof *f);
    f->fs = p->vad.frame_samples;
    f->n = qva_vad_n_frames(n, f->fs);
    f->db = malloc((size_t)(f->n + 1) * sizeof *f->db);
    f->v = malloc((size_t)(f->n + 1));
    if (f->db && f->v) {
        qva_vad_frame_db(f->db, x, n, f->fs);
        f->n_voiced = qva_vad_label(f->v, f->db, f->n, &p->vad, &f->floor_db, &f->thr_db);
        if (f->n_voiced >= 0) return 0;
    }
    snprintf(err, err_size, "reference: out of memory (%lld frames)", (long long)f->n);
    frames_free(f);
    return -1;
}

/* ==== trim, voiced seconds ================================================================== */

int qvc_trim_silence(qvc_trim_report *r, const float *x, int64_t n, const qvc_hygiene_params *p,
                     char *err, size_t err_size) {
    memset(r, 0, sizeof *r);
    frames f;
    if (frames_make(&f, x, n, p, err, err_size)) return -1;
    r->floor_dbfs = f.floor_db;
    r->threshold_dbfs = f.thr_db;
    r->in_seconds = (double)n / SR;
    r->voiced_seconds = (double)f.n_voiced * f.fs / SR;
    int64_t first, end;
    qva_vad_bounds(f.v, f.n, &first, &end);
    frames_free(&f);
    if (end == 0) {
        snprintf(err, err_size,
                 "reference: no speech found (no 10 ms frame above %.1f dBFS; noise floor %.1f "
                 "dBFS)",
                 r->threshold_dbfs, r->floor_dbfs);
        return -1;
    }
    int64_t pre = (int64_t)lround(p->preroll_s * SR);
    r->start = first * f.fs - pre;
    r->end = end * f.fs + pre;
    if (r->start < 0) r->start = 0;
    if (r->end > n) r->end = n;
    r->out_seconds = (double)(r->end - r->start) / SR;
    r->lead_trimmed_s = (double)r->start / SR;
    r->trail_trimmed_s = (double)(n - r->end) / SR;
    return 0;
}

int qvc_check_voiced(const qvc_trim_report *r, const qvc_hygiene_params *p, char *err,
                     size_t err_size) {
    if (r->voiced_seconds >= p->min_voiced_s) return 0;
    snprintf(err, err_size,
             "reference: only %.2f s of voiced speech (%.1f s needed) in %.2f s of audio",
             r->voiced_seconds, p->min_voiced_s, r->in_seconds);
    return -1;
}

/* ==== level ================================================================================= */

static double to_db(double amp) {
    return amp > 0 ? 20.0 * log10(amp) : QVK_VAD_FLOOR_DBFS;
}

int qvc_level_normalize(qvc_level_report *r, float *x, int64_t n, const qvc_hygiene_params *p,
                        char *err, size_t err_size) {
    memset(r, 0, sizeof *r);
    frames f;
    if (frames_make(&f, x, n, p, err, err_size)) return -1;
    double peak = 0, act = 0;
    int64_t n_act = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = fabs(x[i]);
        if (a > peak) peak = a;
        if (a >= p->clip_level) r->n_clipped++;
        if (f.v[i / f.fs]) act += a * a, n_act++;
    }
    frames_free(&f);
    r->clipped_fraction = n > 0 ? (double)r->n_clipped / (double)n : 0;
    r->clip_warning = r->clipped_fraction >= p->clip_warn_fraction;
    if (n_act == 0) {
        snprintf(err, err_size, "reference: no voiced frame to measure the level on");
        return -1;
    }
    if (qv_loudness_lufs(x, n, &r->in_lufs)) {
        snprintf(err, err_size, "reference: out of memory (loudness meter)");
        return -1;
    }
    if (!isfinite(r->in_lufs)) {
        snprintf(err, err_size, "reference: too quiet: nothing above the EBU R128 gate (-70 LUFS)");
        return -1;
    }
    r->in_active_dbfs = to_db(sqrt(act / (double)n_act));
    r->in_peak_dbfs = to_db(peak);
    double g = p->target_lufs - r->in_lufs;
    if (g > p->peak_cap_dbfs - r->in_peak_dbfs) {
        g = p->peak_cap_dbfs - r->in_peak_dbfs;
        r->peak_limited = 1;
    }
    if (g > p->max_gain_db) {
        g = p->max_gain_db;
        r->gain_limited = 1;
        r->peak_limited = 0;
    }
    r->gain_db = g;
    float s = (float)pow(10.0, g / 20.0);
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
    r->out_lufs = r->in_lufs + g; /* loudness scales with the gain (BS.1770 is linear + gates) */
    r->out_active_dbfs = r->in_active_dbfs + g;
    r->out_peak_dbfs = r->in_peak_dbfs + g;
    return 0;
}

/* ==== ICL window ============================================================================ */

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Score of window [s, e) in frames from the prefix sums (see qvc_pick_window). */
typedef struct {
    const double *pv, *pc, *pa, *pb; /* voiced frames, clipped samples, voiced power, block floor */
    int fs, blk;
} sums;

static double window_score(const sums *z, int64_t s, int64_t e, const qvc_hygiene_params *p,
                           double *vf_out, double *cf_out, double *snr_out) {
    double len = (double)(e - s), nv = z->pv[e] - z->pv[s];
    double vf = nv / len, cf = (z->pc[e] - z->pc[s]) / (len * z->fs);
    double act = nv > 0 ? (z->pa[e] - z->pa[s]) / nv : 0;
    int64_t b0 = s / z->blk, b1 = (e - 1) / z->blk + 1;
    double noise = (z->pb[b1] - z->pb[b0]) / (double)(b1 - b0);
    double snr = 10.0 * log10((act + 1e-12) / (noise + 1e-12));
    if (vf_out) *vf_out = vf, *cf_out = cf, *snr_out = snr;
    return vf - 20.0 * cf - 0.1 * fmax(0.0, p->min_snr_db - snr) +
           0.01 * (len * z->fs / SR - p->window_min_s);
}

/* Searches the best window (search = 1) or measures [start, end) (in samples). */
static int window_run(qvc_window_report *r, const float *x, int64_t n, int search, int64_t start,
                      int64_t end, const qvc_hygiene_params *p, char *err, size_t err_size) {
    memset(r, 0, sizeof *r);
    r->tail_silence_s = p->tail_silence_s;
    frames f;
    if (frames_make(&f, x, n, p, err, err_size)) return -1;
    /* prefix sums per frame (voiced frames, clipped samples, voiced power) and per 1 s block
     * (noise floor = 10th percentile of the block's frame levels, as power) */
    int64_t m = f.n, blk = (int64_t)(SR / f.fs), nb = (m + blk - 1) / blk;
    double *pv = calloc((size_t)(m + 1) * 3 + (size_t)(nb + 1), sizeof *pv);
    float *tmp = malloc((size_t)blk * sizeof *tmp);
    if (!pv || !tmp) {
        free(pv);
        free(tmp);
        frames_free(&f);
        snprintf(err, err_size, "reference: out of memory (%lld frames)", (long long)m);
        return -1;
    }
    double *pc = pv + (m + 1), *pa = pc + (m + 1), *pb = pa + (m + 1);
    for (int64_t k = 0; k < m; k++) {
        int64_t a = k * f.fs, b = a + f.fs < n ? a + f.fs : n, clipped = 0;
        for (int64_t i = a; i < b; i++)
            clipped += fabsf(x[i]) >= p->clip_level;
        pv[k + 1] = pv[k] + f.v[k];
        pc[k + 1] = pc[k] + (double)clipped;
        pa[k + 1] = pa[k] + (f.v[k] ? pow(10.0, f.db[k] / 10.0) : 0);
    }
    for (int64_t b = 0; b < nb; b++) {
        int64_t a = b * blk, e = a + blk < m ? a + blk : m;
        for (int64_t k = a; k < e; k++)
            tmp[k - a] = f.db[k];
        qsort(tmp, (size_t)(e - a), sizeof *tmp, cmp_float);
        pb[b + 1] = pb[b] + pow(10.0, tmp[(e - a) / 10] / 10.0);
    }
    free(tmp);
    sums z = {pv, pc, pa, pb, f.fs, (int)blk};
    int64_t best_s = 0, best_e = m;
    if (search) {
        int64_t wmin = (int64_t)ceil(p->window_min_s * SR / f.fs);
        int64_t wmax = (int64_t)floor(p->window_max_s * SR / f.fs);
        double best = -INFINITY;
        if ((double)n <= p->window_max_s * SR || wmin > m) {
            r->whole = 1;
        } else {
            for (int64_t s = 0; s + wmin <= m; s++) {
                if (s > 0 && f.v[s]) continue; /* start on silence (or the clip start) */
                for (int64_t e = s + wmin; e <= s + wmax && e <= m; e++) {
                    if (e < m && f.v[e - 1]) continue; /* end on silence (or the clip end) */
                    double sc = window_score(&z, s, e, p, NULL, NULL, NULL);
                    if (sc > best) best = sc, best_s = s, best_e = e;
                }
            }
            if (best == -INFINITY) r->whole = 1; /* no silent boundaries in range: use all */
        }
        if (r->whole) best_s = 0, best_e = m;
        r->start = best_s * f.fs;
        r->end = best_e * f.fs < n ? best_e * f.fs : n;
    } else {
        best_s = start / f.fs, best_e = (end + f.fs - 1) / f.fs;
        if (best_e > m) best_e = m;
        if (best_e <= best_s) best_e = best_s + 1;
        r->start = start, r->end = end;
        r->whole = start == 0 && end == n;
    }
    r->score =
        window_score(&z, best_s, best_e, p, &r->voiced_fraction, &r->clipped_fraction, &r->snr_db);
    r->voiced_seconds = (pv[best_e] - pv[best_s]) * f.fs / SR;
    free(pv);
    frames_free(&f);
    return 0;
}

int qvc_pick_window(qvc_window_report *r, const float *x, int64_t n, const qvc_hygiene_params *p,
                    char *err, size_t err_size) {
    if (window_run(r, x, n, 1, 0, n, p, err, err_size)) return -1;
    r->mode = QVC_ICL_AUTO;
    return 0;
}

int qvc_measure_window(qvc_window_report *r, const float *x, int64_t n, int64_t start,
                       int64_t end, const qvc_hygiene_params *p, char *err, size_t err_size) {
    if (window_run(r, x, n, 0, start, end, p, err, err_size)) return -1;
    r->mode = QVC_ICL_RANGE;
    return 0;
}

float *qvc_window_extract(const qvc_window_report *r, const float *x, int64_t *n_out) {
    int64_t len = r->end - r->start, pad = (int64_t)lround(r->tail_silence_s * SR);
    float *y = calloc((size_t)(len + pad > 0 ? len + pad : 1), sizeof *y);
    if (!y) return NULL;
    memcpy(y, x + r->start, (size_t)len * sizeof *y);
    *n_out = len + pad;
    return y;
}

/* ==== transcript ============================================================================ */

static double cp_weight(int32_t c) {
    utf8proc_category_t cat = utf8proc_category(c);
    switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        if ((c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
            (c >= 0x20000 && c <= 0x3134F) || (c >= 0xF900 && c <= 0xFAFF))
            return 3.0;                             /* CJK ideograph: one syllable ≈ 3 letters */
        if (c >= 0xAC00 && c <= 0xD7A3) return 2.5; /* Hangul syllable */
        if ((c >= 0x3040 && c <= 0x30FF) || (c >= 0x31F0 && c <= 0x31FF) ||
            (c >= 0xFF66 && c <= 0xFF9F))
            return 1.5; /* kana: one mora */
        return 1.0;
    case UTF8PROC_CATEGORY_ND:
        return 3.0; /* a digit is read as a word */
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        return 1.0;
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
        return 0.0;
    }
    return 0.0;
}

double qvc_text_units(const char *text, int *n_counted) {
    utf8proc_ssize_t len = (utf8proc_ssize_t)strlen(text), p = 0;
    double units = 0;
    int n = 0;
    while (p < len) {
        int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + p, len - p, &c);
        if (k <= 0) return -1;
        double w = cp_weight(c);
        units += w;
        n += w > 0;
        p += k;
    }
    if (n_counted) *n_counted = n;
    return units;
}

int qvc_check_transcript(qvc_transcript_report *r, const char *text, double voiced_seconds,
                         int allow_fallback, const qvc_hygiene_params *p, char *err,
                         size_t err_size) {
    memset(r, 0, sizeof *r);
    r->voiced_seconds = voiced_seconds;
    r->units = qvc_text_units(text, &r->n_counted);
    if (r->units < 0) {
        snprintf(err, err_size, "transcript: invalid UTF-8");
        return -1;
    }
    r->units_per_s = voiced_seconds > 0 ? r->units / voiced_seconds : INFINITY;
    if (r->units_per_s >= p->units_per_s_min && r->units_per_s <= p->units_per_s_max) {
        r->plausible = 1;
        return 0;
    }
    int too_long = r->units_per_s > p->units_per_s_max;
    snprintf(r->reason, sizeof r->reason,
             "transcript: %.0f letter-equivalents (%d counted characters) for %.2f s of voiced "
             "speech in the ICL span = %.1f/s, %s (plausible %.0f-%.0f/s): %s",
             r->units, r->n_counted, voiced_seconds, r->units_per_s,
             too_long ? "far too long" : "far too short", p->units_per_s_min, p->units_per_s_max,
             too_long ? "the transcript must say exactly what is spoken in the ICL span, nothing "
                        "more (or choose the span it describes: --icl-window)"
                      : "the transcript should cover everything said in the ICL span");
    if (allow_fallback) {
        r->fallback = 1;
        return 1;
    }
    snprintf(err, err_size, "%s", r->reason);
    return -1;
}

/* ==== second speaker ======================================================================== */

int qvc_ecapa_xvector(void *ctx, const float *x, int64_t n, float *xvec, char *err,
                      size_t err_size) {
    const qvc_ecapa_ctx *c = ctx;
    int nf = qva_mel_n_frames(n);
    if (nf < 5) {
        snprintf(err, err_size,
                 "reference: window of %lld samples too short for the speaker "
                 "encoder",
                 (long long)n);
        return -1;
    }
    float *mel = malloc((size_t)nf * QVA_MEL_BINS * sizeof *mel);
    if (!mel) {
        snprintf(err, err_size, "reference: out of memory (mel of %d frames)", nf);
        return -1;
    }
    int rc = qva_mel_compute(c->mel, mel, x, n);
    if (!rc)
        rc = qva_ecapa_forward(c->ecapa, c->pool, xvec, mel, nf, err, err_size);
    else
        snprintf(err, err_size, "reference: mel failed for a %lld-sample window", (long long)n);
    free(mel);
    return rc;
}

/* The ECAPA's windows shared out whole across the pool's threads (each with its own mel context,
 * single-threaded inside): a 3 s window is too short to split well. The vectors are the same
 * bits as the sequential path (the ECAPA's result does not depend on its pool). */
typedef struct {
    const qvc_ecapa_ctx *c;
    qva_mel **mels;
    const float *x;
    const int *idx;
    int n, dim;
    int64_t hop, wl;
    float *v;
    _Atomic int failed;
    char err[256];
} windows_job;

static void windows_run(int ith, int nth, void *arg) {
    windows_job *j = arg;
    qvc_ecapa_ctx one = {j->c->ecapa, j->mels[ith], NULL};
    char e[256];
    for (int w = ith; w < j->n && !j->failed; w += nth)
        if (qvc_ecapa_xvector(&one, j->x + (int64_t)j->idx[w] * j->hop, j->wl,
                              j->v + (size_t)w * j->dim, e, sizeof e)) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&j->failed, &expected, 1))
                snprintf(j->err, sizeof j->err, "%s", e);
        }
}

static int ecapa_windows(const qvc_ecapa_ctx *c, const float *x, const int *idx, int n,
                         int64_t hop, int64_t wl, float *v, int dim, char *err, size_t err_size) {
    int nt = qvk_pool_threads(c->pool), rc = -1;
    windows_job j = {.c = c, .x = x, .idx = idx, .n = n, .dim = dim, .hop = hop, .wl = wl, .v = v};
    j.mels = calloc((size_t)nt, sizeof *j.mels);
    int ok = j.mels != NULL;
    for (int t = 0; ok && t < nt; t++) ok = (j.mels[t] = qva_mel_create()) != NULL;
    if (!ok) {
        snprintf(err, err_size, "reference: out of memory (mel contexts)");
    } else {
        qvk_pool_run(c->pool, windows_run, &j);
        if (j.failed) snprintf(err, err_size, "%s", j.err);
        else rc = 0;
    }
    for (int t = 0; j.mels && t < nt; t++) qva_mel_free(j.mels[t]);
    free(j.mels);
    return rc;
}

static void normalize(float *v, int dim) {
    double s = 0;
    for (int i = 0; i < dim; i++)
        s += (double)v[i] * v[i];
    float inv = s > 0 ? (float)(1.0 / sqrt(s)) : 0.0f;
    for (int i = 0; i < dim; i++)
        v[i] *= inv;
}

static void centroid(float *c, const float *v, const int *lab, int want, int nw, int dim) {
    memset(c, 0, (size_t)dim * sizeof *c);
    for (int w = 0; w < nw; w++)
        if (lab[w] == want)
            for (int i = 0; i < dim; i++)
                c[i] += v[(size_t)w * dim + i];
    normalize(c, dim);
}

/* 2-means of the ns unit vectors v [ns, dim] on the unit sphere, seeded with the two most
 * dissimilar: centroids c[0], c[1] and each vector's label lab [ns]. */
static void two_means(const float *v, int ns, int dim, float *c[2], int *lab) {
    int s0 = 0, s1 = 1;
    double lo = 2;
    for (int a = 0; a < ns; a++)
        for (int b = a + 1; b < ns; b++) {
            double cab = qvk_cosine(v + (size_t)a * dim, v + (size_t)b * dim, dim);
            if (cab < lo) lo = cab, s0 = a, s1 = b;
        }
    memcpy(c[0], v + (size_t)s0 * dim, (size_t)dim * sizeof *v);
    memcpy(c[1], v + (size_t)s1 * dim, (size_t)dim * sizeof *v);
    for (int it = 0; it < 20; it++) {
        int changed = 0;
        for (int w = 0; w < ns; w++) {
            int l = qvk_cosine(v + (size_t)w * dim, c[1], dim) >
                    qvk_cosine(v + (size_t)w * dim, c[0], dim);
            changed |= it == 0 || l != lab[w];
            lab[w] = l;
        }
        if (!changed) break;
        centroid(c[0], v, lab, 0, ns, dim);
        centroid(c[1], v, lab, 1, ns, dim);
    }
}

/* The windows scored below threshold (cs [ns], window w at idx[w] * hop, wl samples) as time
 * ranges in r, windows whose spans touch merged into one. */
static void flag_ranges(qvc_speaker_report *r, const double *cs, const int *idx, int ns,
                        int64_t hop, int64_t wl, double threshold) {
    for (int w = 0; w < ns; w++) {
        if (cs[w] >= threshold) continue;
        r->warning = 1;
        double a = (double)idx[w] * hop / SR, b = a + (double)wl / SR;
        qvc_time_range *last = r->n_ranges ? &r->ranges[r->n_ranges - 1] : NULL;
        if (last && a <= last->end_s) {
            last->end_s = b;
            if (cs[w] < last->min_cos) last->min_cos = cs[w];
        } else if (r->n_ranges < QVC_SPK_MAX_RANGES) {
            r->ranges[r->n_ranges++] = (qvc_time_range){a, b, cs[w]};
        }
    }
}

int qvc_speaker_scan(qvc_speaker_report *r, const float *x, int64_t n, int dim, qvc_xvector_fn fn,
                     void *ctx, const qvc_hygiene_params *p, char *err, size_t err_size) {
    memset(r, 0, sizeof *r);
    r->threshold = p->spk_threshold;
    r->min_cos = 1.0;
    r->centroid_cos = 1.0;
    int64_t wl = (int64_t)lround(p->spk_window_s * SR), hop = (int64_t)lround(p->spk_hop_s * SR);
    if (n < 2 * wl || hop <= 0 || dim <= 0) return 0;
    int nw = (int)((n - wl) / hop + 1);
    frames f;
    if (frames_make(&f, x, n, p, err, err_size)) return -1;
    float *v = malloc((size_t)nw * dim * sizeof *v), *c[2];
    c[0] = malloc((size_t)dim * sizeof *v);
    c[1] = malloc((size_t)dim * sizeof *v);
    int *lab = malloc((size_t)nw * sizeof *lab), *idx = malloc((size_t)nw * sizeof *idx);
    double *cs = malloc((size_t)nw * sizeof *cs);
    int rc = -1;
    if (!v || !c[0] || !c[1] || !lab || !idx || !cs) {
        snprintf(err, err_size, "reference: out of memory (%d speaker windows)", nw);
        goto done;
    }
    /* vectors of the voiced-enough windows */
    int ns = 0;
    for (int w = 0; w < nw; w++) {
        int64_t a = (int64_t)w * hop, fa = a / f.fs, fb = (a + wl) / f.fs, nv = 0;
        for (int64_t k = fa; k < fb && k < f.n; k++)
            nv += f.v[k];
        if ((double)nv >= p->spk_min_voiced * (double)(fb - fa)) idx[ns++] = w;
    }
    if (fn == qvc_ecapa_xvector && qvk_pool_threads(((const qvc_ecapa_ctx *)ctx)->pool) > 1) {
        if (ecapa_windows(ctx, x, idx, ns, hop, wl, v, dim, err, err_size)) goto done;
    } else {
        for (int w = 0; w < ns; w++)
            if (fn(ctx, x + (int64_t)idx[w] * hop, wl, v + (size_t)w * dim, err, err_size)) goto done;
    }
    for (int w = 0; w < ns; w++)
        normalize(v + (size_t)w * dim, dim);
    r->n_windows = nw;
    r->n_scored = ns;
    if (ns < 2) {
        rc = 0;
        goto done;
    }
    two_means(v, ns, dim, c, lab);
    int n1 = 0;
    for (int w = 0; w < ns; w++)
        n1 += lab[w];
    int main_lab = n1 > ns - n1 || (n1 == ns - n1 && lab[0] == 1);
    r->n_main = main_lab ? n1 : ns - n1;
    r->n_other = ns - r->n_main;
    r->centroid_cos = r->n_other ? qvk_cosine(c[0], c[1], dim) : 1.0;
    const float *ref = c[main_lab];
    for (int w = 0; w < ns; w++) {
        cs[w] = qvk_cosine(v + (size_t)w * dim, ref, dim);
        if (cs[w] < r->min_cos) r->min_cos = cs[w];
    }
    flag_ranges(r, cs, idx, ns, hop, wl, p->spk_threshold);
    rc = 0;
done:
    free(v);
    free(c[0]);
    free(c[1]);
    free(lab);
    free(idx);
    free(cs);
    frames_free(&f);
    return rc;
}

/* ==== all steps ============================================================================= */

/* The ICL span of p->icl_mode on the clean clip (see qvc_hygiene_run). */
static int icl_span(qvc_hygiene_report *r, const qvc_hygiene_params *p, char *err,
                    size_t err_size) {
    const double t0 = r->trim.start / SR, len = r->n_clean / SR;
    if (p->icl_mode == QVC_ICL_AUTO)
        return qvc_pick_window(&r->window, r->clean, r->n_clean, p, err, err_size);
    if (p->icl_mode == QVC_ICL_FULL) {
        if (len > p->icl_max_s + 1e-9) {
            snprintf(err, err_size,
                     "reference: the trimmed clip (%.2f-%.2f s) is %.2f s, over the %.0f s ICL "
                     "cap: use --icl-window auto or START-END, or a shorter clip",
                     t0, t0 + len, len, p->icl_max_s);
            return -1;
        }
        int rc = qvc_measure_window(&r->window, r->clean, r->n_clean, 0, r->n_clean, p, err,
                                    err_size);
        r->window.mode = QVC_ICL_FULL;
        return rc;
    }
    double a = fmax(p->icl_start_s, t0), b = fmin(p->icl_end_s, t0 + len);
    if (!(b - a >= p->icl_min_s) || b - a > p->icl_max_s + 1e-9) {
        snprintf(err, err_size,
                 "reference: ICL window %.2f-%.2f s holds %.2f s of the trimmed clip (%.2f-%.2f "
                 "s); it needs %.0f-%.0f s",
                 p->icl_start_s, p->icl_end_s, b > a ? b - a : 0.0, t0, t0 + len, p->icl_min_s,
                 p->icl_max_s);
        return -1;
    }
    int64_t s0 = (int64_t)llround((a - t0) * SR), s1 = (int64_t)llround((b - t0) * SR);
    if (s1 > r->n_clean) s1 = r->n_clean;
    return qvc_measure_window(&r->window, r->clean, r->n_clean, s0, s1, p, err, err_size);
}

int qvc_hygiene_run(qvc_hygiene_report *r, const float *x, int64_t n, const char *transcript,
                    int allow_fallback, qvc_xvector_fn fn, void *ctx, int dim,
                    const qvc_hygiene_params *p, char *err, size_t err_size) {
    memset(r, 0, sizeof *r);
    qvc_hygiene_params dp = qvc_hygiene_default_params();
    if (!p) p = &dp;
    if (qvc_trim_silence(&r->trim, x, n, p, err, err_size)) return -1;
    r->has_trim = 1;
    if (qvc_check_voiced(&r->trim, p, err, err_size)) return -1;
    r->n_clean = r->trim.end - r->trim.start;
    r->clean = malloc((size_t)r->n_clean * sizeof *r->clean);
    if (!r->clean) {
        snprintf(err, err_size, "reference: out of memory (%lld samples)", (long long)r->n_clean);
        return -1;
    }
    memcpy(r->clean, x + r->trim.start, (size_t)r->n_clean * sizeof *r->clean);
    if (qvc_level_normalize(&r->level, r->clean, r->n_clean, p, err, err_size)) return -1;
    r->has_level = 1;
    if (transcript || p->icl_mode == QVC_ICL_AUTO) {
        if (icl_span(r, p, err, err_size)) return -1;
        r->has_window = 1;
    }
    if (transcript) {
        int t = qvc_check_transcript(&r->transcript, transcript, r->window.voiced_seconds,
                                     allow_fallback, p, err, err_size);
        r->has_transcript = 1;
        if (t < 0) return -1;
        if (t == 0) {
            r->icl = qvc_window_extract(&r->window, r->clean, &r->n_icl);
            if (!r->icl) {
                snprintf(err, err_size, "reference: out of memory (ICL window)");
                return -1;
            }
            r->has_icl = 1;
        }
    }
    if (fn) {
        if (qvc_speaker_scan(&r->speaker, r->clean, r->n_clean, dim, fn, ctx, p, err, err_size))
            return -1;
        r->has_speaker = 1;
    }
    return 0;
}

void qvc_hygiene_report_free(qvc_hygiene_report *r) {
    if (!r) return;
    free(r->clean);
    free(r->icl);
    r->clean = r->icl = NULL;
    r->n_clean = r->n_icl = 0;
}

/* ==== reporting ============================================================================= */

const char *qvc_icl_mode_name(enum qvc_icl_mode m) {
    return m == QVC_ICL_AUTO ? "auto" : m == QVC_ICL_RANGE ? "range" : "full";
}

#define APPEND(...)                                                                                \
    do {                                                                                           \
        if (w < size) w += (size_t)snprintf(buf + w, size - w, __VA_ARGS__);                       \
    } while (0)

void qvc_hygiene_summary(const qvc_hygiene_report *r, char *buf, size_t size) {
    size_t w = 0;
    if (size) buf[0] = 0;
    const qvc_trim_report *t = &r->trim;
    if (!r->has_trim) return;
    APPEND("trim: kept %.2f-%.2f s of %.2f s (cut %.2f s lead, %.2f s tail); %.2f s voiced "
           "(VAD threshold %.1f dBFS, floor %.1f dBFS)\n",
           t->start / SR, t->end / SR, t->in_seconds, t->lead_trimmed_s, t->trail_trimmed_s,
           t->voiced_seconds, t->threshold_dbfs, t->floor_dbfs);
    const qvc_level_report *l = &r->level;
    if (r->has_level)
        APPEND("level: %.1f LUFS, peak %.1f dBFS, gain %+.1f dB%s -> %.1f LUFS, peak %.1f "
               "dBFS; clipped %.4f%% of samples%s\n",
               l->in_lufs, l->in_peak_dbfs, l->gain_db,
               l->peak_limited   ? " (limited by the peak cap)"
               : l->gain_limited ? " (limited by the max gain)"
                                 : "",
               l->out_lufs, l->out_peak_dbfs, 100.0 * l->clipped_fraction,
               l->clip_warning ? " (WARNING: clipped)" : "");
    if (r->has_window) {
        const qvc_window_report *v = &r->window;
        APPEND("icl window: %.2f-%.2f s (%s), %.2f s, %.0f%% voiced (%.2f s), SNR %.1f dB, "
               "clipped %.4f%%, +%.2f s silence\n",
               (t->start + v->start) / SR, (t->start + v->end) / SR, qvc_icl_mode_name(v->mode),
               (v->end - v->start) / SR, 100.0 * v->voiced_fraction, v->voiced_seconds, v->snr_db,
               100.0 * v->clipped_fraction, v->tail_silence_s);
    }
    if (r->has_transcript) {
        const qvc_transcript_report *tr = &r->transcript;
        if (tr->fallback)
            APPEND("transcript: WARNING: %s; falling back to x-vector only\n", tr->reason);
        else if (tr->plausible)
            APPEND("transcript: %.0f letter-equivalents for %.2f s voiced = %.1f/s (ok)\n",
                   tr->units, tr->voiced_seconds, tr->units_per_s);
        else
            APPEND("transcript: %.0f letter-equivalents for %.2f s voiced = %.1f/s (refused)\n",
                   tr->units, tr->voiced_seconds, tr->units_per_s);
    }
    if (r->has_speaker) {
        const qvc_speaker_report *s = &r->speaker;
        if (!s->n_scored) {
            APPEND("speakers: not checked (clip too short for two windows, or too little voice)\n");
        } else if (!s->warning) {
            APPEND("speakers: one (%d windows, lowest cosine to the main speaker %.3f)\n",
                   s->n_scored, s->min_cos);
        } else {
            APPEND("speakers: WARNING: another voice? windows below cosine %.2f at", s->threshold);
            for (int i = 0; i < s->n_ranges; i++)
                APPEND(" %.1f-%.1f s (%.3f)", t->start / SR + s->ranges[i].start_s,
                       t->start / SR + s->ranges[i].end_s, s->ranges[i].min_cos);
            APPEND("\n");
        }
    }
}

/* 4 decimals: the JSON goes into META and --json, where 17 digits are noise. */
static double r4(double x) { return round(x * 1e4) / 1e4; }

char *qvc_hygiene_json(const qvc_hygiene_report *r) {
    cJSON *o = cJSON_CreateObject(), *t = cJSON_AddObjectToObject(o, "trim"),
          *l = cJSON_AddObjectToObject(o, "level");
    if (!o || !t || !l) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddNumberToObject(t, "start_s", r4(r->trim.start / SR));
    cJSON_AddNumberToObject(t, "end_s", r4(r->trim.end / SR));
    cJSON_AddNumberToObject(t, "in_s", r4(r->trim.in_seconds));
    cJSON_AddNumberToObject(t, "voiced_s", r4(r->trim.voiced_seconds));
    cJSON_AddNumberToObject(t, "vad_threshold_dbfs", r4(r->trim.threshold_dbfs));
    cJSON_AddNumberToObject(t, "floor_dbfs", r4(r->trim.floor_dbfs));
    cJSON_AddNumberToObject(l, "in_active_dbfs", r4(r->level.in_active_dbfs));
    cJSON_AddNumberToObject(l, "in_peak_dbfs", r4(r->level.in_peak_dbfs));
    cJSON_AddNumberToObject(l, "gain_db", r4(r->level.gain_db));
    cJSON_AddBoolToObject(l, "peak_limited", r->level.peak_limited);
    cJSON_AddNumberToObject(l, "clipped_fraction", r4(r->level.clipped_fraction));
    cJSON_AddBoolToObject(l, "clip_warning", r->level.clip_warning);
    cJSON_AddNumberToObject(l, "in_lufs", r4(r->level.in_lufs));
    cJSON_AddNumberToObject(l, "out_lufs", r4(r->level.out_lufs));
    cJSON_AddNumberToObject(l, "out_peak_dbfs", r4(r->level.out_peak_dbfs));
    cJSON *w = r->has_window ? cJSON_AddObjectToObject(o, "icl_window") : NULL;
    if (w) {
        cJSON_AddStringToObject(w, "mode", qvc_icl_mode_name(r->window.mode));
        cJSON_AddNumberToObject(w, "start_s", r4(r->trim.start / SR + r->window.start / SR));
        cJSON_AddNumberToObject(w, "end_s", r4(r->trim.start / SR + r->window.end / SR));
        cJSON_AddNumberToObject(w, "seconds", r4((r->window.end - r->window.start) / SR));
        cJSON_AddNumberToObject(w, "voiced_s", r4(r->window.voiced_seconds));
        cJSON_AddNumberToObject(w, "voiced_fraction", r4(r->window.voiced_fraction));
        cJSON_AddNumberToObject(w, "snr_db", r4(r->window.snr_db));
        cJSON_AddNumberToObject(w, "tail_silence_s", r4(r->window.tail_silence_s));
    }
    cJSON *tr = r->has_transcript ? cJSON_AddObjectToObject(o, "transcript") : NULL;
    if (tr) {
        cJSON_AddNumberToObject(tr, "units", r4(r->transcript.units));
        cJSON_AddNumberToObject(tr, "voiced_s", r4(r->transcript.voiced_seconds));
        cJSON_AddNumberToObject(tr, "units_per_voiced_s", r4(r->transcript.units_per_s));
        cJSON_AddBoolToObject(tr, "plausible", r->transcript.plausible);
        cJSON_AddBoolToObject(tr, "fallback_xvector_only", r->transcript.fallback);
    }
    if (r->has_speaker) {
        cJSON *s = cJSON_AddObjectToObject(o, "speakers"),
              *a = s ? cJSON_AddArrayToObject(s, "flagged_s") : NULL;
        if (s) {
            cJSON_AddNumberToObject(s, "windows", r4(r->speaker.n_scored));
            cJSON_AddNumberToObject(s, "min_cos", r4(r->speaker.min_cos));
            cJSON_AddNumberToObject(s, "threshold", r4(r->speaker.threshold));
        }
        /* ranges are in seconds of the trimmed clip; add trim.start for the source file */
        for (int i = 0; a && i < r->speaker.n_ranges; i++) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(
                pair, cJSON_CreateNumber(r4(r->trim.start / SR + r->speaker.ranges[i].start_s)));
            cJSON_AddItemToArray(
                pair, cJSON_CreateNumber(r4(r->trim.start / SR + r->speaker.ranges[i].end_s)));
            cJSON_AddItemToArray(a, pair);
        }
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
