/* mel.c — the speaker encoder's log-mel front end (§5.1): reflect pad 384, periodic Hann,
 * 1024-point real FFT (FFTW, planned once per context through fft.c), magnitude with the 1e-9
 * term, librosa's Slaney filterbank, ln(max(mel, 1e-5)). The filterbank is built in double and
 * rounded to f32 in the same two steps as librosa.filters.mel(dtype=float32), so the weights
 * match it bit for bit.
 */
#include "features/features.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "features/fft.h"
#include "kernels/kernels.h"

#define N_BINS (QVA_MEL_N_FFT / 2 + 1)
#define PAD ((QVA_MEL_N_FFT - QVA_MEL_HOP) / 2)
/* frames transformed per batch: bounds the spectrum scratch */
#define BATCH 256

struct qva_mel {
    fftwf_plan plan;
    float *window;   /* [1024] periodic Hann */
    float *fbank;    /* [128, 513] */
    float *frames;   /* [BATCH, 1024] windowed input (FFTW-aligned) */
    fftwf_complex *spec; /* [BATCH, 513] */
    float *mag;      /* [BATCH, 513] */
};

/* librosa.hz_to_mel / mel_to_hz with htk=False (Slaney: linear below 1 kHz, log above). */
static double hz_to_mel(double f) {
    const double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, logstep = log(6.4) / 27.0;
    if (f >= min_log_hz) return min_log_hz / f_sp + log(f / min_log_hz) / logstep;
    return f / f_sp;
}

static double mel_to_hz(double m) {
    const double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, logstep = log(6.4) / 27.0;
    const double min_log_mel = min_log_hz / f_sp;
    if (m >= min_log_mel) return min_log_hz * exp(logstep * (m - min_log_mel));
    return f_sp * m;
}

enum { N_PTS = QVA_MEL_BINS + 2 }; /* filter edges: bin m spans points m..m+2, peaks at m+1 */

/* Point i of the filterbank's edges in Hz. */
static double edge_hz(int i) {
    double lo = hz_to_mel(0.0), hi = hz_to_mel(QVA_SAMPLE_RATE_HZ / 2.0);
    double step = (hi - lo) / (N_PTS - 1);      /* numpy.linspace: i·step + start, last = stop */
    return mel_to_hz(i == N_PTS - 1 ? hi : i * step + lo);
}

double qva_mel_bin_hz(int bin) {
    return edge_hz(bin + 1);
}

static void build_fbank(float *fb) {
    double mel_f[N_PTS], fdiff[N_PTS - 1], fft_hz[N_BINS];
    for (int i = 0; i < N_PTS; i++) mel_f[i] = edge_hz(i);
    for (int i = 0; i < N_PTS - 1; i++) fdiff[i] = mel_f[i + 1] - mel_f[i];
    for (int k = 0; k < N_BINS; k++) fft_hz[k] = k * ((double)QVA_SAMPLE_RATE_HZ / QVA_MEL_N_FFT);
    for (int m = 0; m < QVA_MEL_BINS; m++) {
        double enorm = 2.0 / (mel_f[m + 2] - mel_f[m]);
        for (int k = 0; k < N_BINS; k++) {
            double lower = -(mel_f[m] - fft_hz[k]) / fdiff[m];
            double upper = (mel_f[m + 2] - fft_hz[k]) / fdiff[m + 1];
            double tri = fmax(0.0, fmin(lower, upper));
            /* librosa stores the triangle in the f32 array, then scales it in place */
            fb[m * N_BINS + k] = (float)((double)(float)tri * enorm);
        }
    }
}

qva_mel *qva_mel_create(void) {
    qva_mel *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->window = qvk_alloc(QVA_MEL_N_FFT * sizeof(float));
    m->fbank = qvk_alloc((size_t)QVA_MEL_BINS * N_BINS * sizeof(float));
    m->frames = fftwf_alloc_real((size_t)BATCH * QVA_MEL_N_FFT);
    m->spec = fftwf_alloc_complex((size_t)BATCH * N_BINS);
    m->mag = qvk_alloc((size_t)BATCH * N_BINS * sizeof(float));
    if (!m->window || !m->fbank || !m->frames || !m->spec || !m->mag) {
        qva_mel_free(m);
        return NULL;
    }
    if (!(m->plan = qva_fft_plan_r2c(QVA_MEL_N_FFT, BATCH, m->frames, m->spec))) {
        qva_mel_free(m);
        return NULL;
    }
    for (int i = 0; i < QVA_MEL_N_FFT; i++)
        m->window[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / QVA_MEL_N_FFT));
    build_fbank(m->fbank);
    return m;
}

void qva_mel_free(qva_mel *m) {
    if (!m) return;
    qva_fft_destroy(m->plan);
    fftwf_free(m->frames);
    fftwf_free(m->spec);
    qvk_free(m->window);
    qvk_free(m->fbank);
    qvk_free(m->mag);
    free(m);
}

int qva_mel_n_frames(int64_t n_samples) {
    if (n_samples <= PAD) return 0;   /* reflect padding needs n > 384 */
    return (int)((n_samples + 2 * PAD - QVA_MEL_N_FFT) / QVA_MEL_HOP + 1);
}

int qva_mel_compute(qva_mel *m, float *out, const float *x, int64_t n) {
    int n_frames = qva_mel_n_frames(n);
    if (n_frames <= 0) return -1;
    for (int f0 = 0; f0 < n_frames; f0 += BATCH) {
        int nb = n_frames - f0 < BATCH ? n_frames - f0 : BATCH;
        for (int b = 0; b < BATCH; b++) {
            float *fr = m->frames + (size_t)b * QVA_MEL_N_FFT;
            if (b >= nb) {
                memset(fr, 0, QVA_MEL_N_FFT * sizeof(float));
                continue;
            }
            int64_t p0 = (int64_t)(f0 + b) * QVA_MEL_HOP - PAD;
            for (int i = 0; i < QVA_MEL_N_FFT; i++) {
                int64_t p = p0 + i;
                if (p < 0) p = -p;
                else if (p >= n) p = 2 * (n - 1) - p;
                fr[i] = x[p] * m->window[i];
            }
        }
        fftwf_execute(m->plan);
        for (size_t i = 0; i < (size_t)nb * N_BINS; i++) {
            float re = m->spec[i][0], im = m->spec[i][1];
            m->mag[i] = sqrtf(re * re + im * im + 1e-9f);
        }
        /* out[f, mel] = Σ_k mag[f, k] · fbank[mel, k] */
        float *o = out + (size_t)f0 * QVA_MEL_BINS;
        qvk_sgemm(0, 1, nb, QVA_MEL_BINS, N_BINS, 1.0f, m->mag, N_BINS, m->fbank, N_BINS, 0.0f, o,
                  QVA_MEL_BINS);
        for (size_t i = 0; i < (size_t)nb * QVA_MEL_BINS; i++) o[i] = logf(fmaxf(o[i], 1e-5f));
    }
    return 0;
}
