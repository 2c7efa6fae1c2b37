/* audio.c — reference audio in: any format libsndfile reads → mono f32 at 24 kHz.
 * Channels are averaged, then libsamplerate (SRC_SINC_BEST_QUALITY) resamples; no trimming or
 * normalisation (the reference speaker encoder sees the signal as is). The checks a clone needs
 * (too short, silent, clipped, too long) are made here and reported as errors or flags.
 */
#include "features/features.h"

#include <math.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_err(char *err, size_t err_size, const char *name, const char *msg) {
    if (err && err_size) snprintf(err, err_size, "%s: %s", name, msg);
}

/* mono x[n] at rate → 24 kHz copy in *out. */
static int resample(float **out, int64_t *n_out, const float *x, int64_t n, int rate, char *why,
                    size_t why_size) {
    double ratio = (double)QVC_SAMPLE_RATE_HZ / rate;
    int64_t cap = (int64_t)ceil(n * ratio) + 16;
    float *y = malloc((size_t)cap * sizeof(float));
    if (!y) {
        snprintf(why, why_size, "out of memory resampling");
        return -1;
    }
    SRC_DATA d = {0};
    d.data_in = x;
    d.input_frames = (long)n;
    d.data_out = y;
    d.output_frames = (long)cap;
    d.src_ratio = ratio;
    int rc = src_simple(&d, SRC_SINC_BEST_QUALITY, 1);
    if (rc) {
        snprintf(why, why_size, "resampling from %d Hz failed (%s)", rate, src_strerror(rc));
        free(y);
        return -1;
    }
    *out = y;
    *n_out = d.output_frames_gen;
    return 0;
}

static int finish(qvc_audio *a, const char *name, char *err, size_t err_size) {
    double sum2 = 0.0, peak = 0.0;
    int64_t n_bad = 0;
    for (int64_t i = 0; i < a->n_samples; i++) {
        double v = a->samples[i];
        if (!isfinite(v)) {
            n_bad++;
            continue;
        }
        sum2 += v * v;
        if (fabs(v) > peak) peak = fabs(v);
    }
    double rms = a->n_samples ? sqrt(sum2 / (double)a->n_samples) : 0.0;
    a->peak = peak;
    a->rms_dbfs = rms > 0.0 ? 20.0 * log10(rms) : -INFINITY;
    char msg[160];
    if (n_bad) {
        snprintf(msg, sizeof msg, "%lld samples are NaN or infinite (expected finite audio)",
                 (long long)n_bad);
        goto fail;
    }
    if (a->used_seconds < QVC_MIN_SECONDS) {
        snprintf(msg, sizeof msg, "too short (expected at least %.0f s of audio, found %.2f s)",
                 QVC_MIN_SECONDS, a->used_seconds);
        goto fail;
    }
    if (peak == 0.0) {
        snprintf(msg, sizeof msg, "digital silence (every sample is zero)");
        goto fail;
    }
    if (a->rms_dbfs < QVC_SILENCE_RMS_DBFS) {
        snprintf(msg, sizeof msg, "near-silence (RMS %.1f dBFS, expected at least %.0f dBFS)",
                 a->rms_dbfs, QVC_SILENCE_RMS_DBFS);
        goto fail;
    }
    a->short_warning = a->used_seconds < QVC_SHORT_SECONDS;
    a->clip_warning = a->clipped_fraction >= QVC_CLIP_WARN_FRACTION;
    return 0;
fail:
    set_err(err, err_size, name, msg);
    qvc_audio_free(a);
    return -1;
}

static int from_mono_owned(qvc_audio *a, float *mono, int64_t n, int rate, const char *name,
                           char *err, size_t err_size) {
    if (rate != QVC_SAMPLE_RATE_HZ && n > 0) {
        char why[128];
        float *y;
        int64_t ny;
        if (resample(&y, &ny, mono, n, rate, why, sizeof why)) {
            free(mono);
            set_err(err, err_size, name, why);
            return -1;
        }
        free(mono);
        mono = y;
        n = ny;
        a->resampled = 1;
    }
    a->samples = mono;
    a->n_samples = n;
    return finish(a, name, err, err_size);
}

int qvc_audio_from_mono(qvc_audio *a, const float *x, int64_t n, int rate_hz, const char *name,
                        char *err, size_t err_size) {
    memset(a, 0, sizeof *a);
    if (rate_hz <= 0 || n < 0) {
        set_err(err, err_size, name, "invalid sample rate or length");
        return -1;
    }
    float *copy = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!copy) {
        set_err(err, err_size, name, "out of memory");
        return -1;
    }
    memcpy(copy, x, (size_t)n * sizeof(float));
    int64_t clipped = 0;
    for (int64_t i = 0; i < n; i++) clipped += fabsf(x[i]) >= QVC_CLIP_LEVEL;
    a->src_rate_hz = rate_hz;
    a->src_channels = 1;
    snprintf(a->src_format, sizeof a->src_format, "memory");
    a->src_seconds = a->used_seconds = (double)n / rate_hz;
    a->clipped_fraction = n ? (double)clipped / (double)n : 0.0;
    return from_mono_owned(a, copy, n, rate_hz, name, err, err_size);
}

int qvc_audio_load(qvc_audio *a, const char *path, double max_seconds, char *err,
                   size_t err_size) {
    memset(a, 0, sizeof *a);
    SF_INFO info = {0};
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    if (!sf) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot read audio (%s)", sf_strerror(NULL));
        set_err(err, err_size, path, msg);
        return -1;
    }
    if (info.samplerate <= 0 || info.channels <= 0 || info.frames <= 0) {
        sf_close(sf);
        set_err(err, err_size, path, "no audio frames in the file");
        return -1;
    }
    SF_FORMAT_INFO major = {.format = info.format & SF_FORMAT_TYPEMASK};
    SF_FORMAT_INFO sub = {.format = info.format & SF_FORMAT_SUBMASK};
    if (sf_command(NULL, SFC_GET_FORMAT_INFO, &major, sizeof major) == 0 && major.name) {
        if (sf_command(NULL, SFC_GET_FORMAT_INFO, &sub, sizeof sub) == 0 && sub.name)
            snprintf(a->src_format, sizeof a->src_format, "%s, %s", major.name, sub.name);
        else
            snprintf(a->src_format, sizeof a->src_format, "%s", major.name);
    }
    a->src_rate_hz = info.samplerate;
    a->src_channels = info.channels;
    a->src_seconds = (double)info.frames / info.samplerate;
    int64_t n = info.frames;
    if (max_seconds > 0 && n > (int64_t)(max_seconds * info.samplerate)) {
        n = (int64_t)(max_seconds * info.samplerate);
        a->truncated = 1;
    }
    if ((uint64_t)n * (uint64_t)info.channels > (uint64_t)1 << 31) {
        sf_close(sf);
        set_err(err, err_size, path, "too long to load (use --max-seconds)");
        return -1;
    }
    float *inter = malloc((size_t)n * info.channels * sizeof(float));
    float *mono = malloc((size_t)n * sizeof(float));
    if (!inter || !mono) {
        free(inter);
        free(mono);
        sf_close(sf);
        set_err(err, err_size, path, "out of memory");
        return -1;
    }
    sf_count_t got = sf_readf_float(sf, inter, n);
    sf_close(sf);
    if (got <= 0) {
        free(inter);
        free(mono);
        set_err(err, err_size, path, "cannot decode audio frames");
        return -1;
    }
    n = got;
    int64_t clipped = 0;
    for (int64_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (int c = 0; c < info.channels; c++) {
            float v = inter[i * info.channels + c];
            clipped += fabsf(v) >= QVC_CLIP_LEVEL;
            s += v;
        }
        mono[i] = info.channels == 1 ? s : s / (float)info.channels;
    }
    free(inter);
    a->clipped_fraction = (double)clipped / ((double)n * info.channels);
    a->used_seconds = (double)n / info.samplerate;
    return from_mono_owned(a, mono, n, info.samplerate, path, err, err_size);
}

void qvc_audio_free(qvc_audio *a) {
    if (!a) return;
    free(a->samples);
    a->samples = NULL;
    a->n_samples = 0;
}

double qvc_l2norm(const float *a, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

