/* bench_watermark.c — cost of the audio watermark (features/watermark.c) on one core:
 *   build/bench/bench_watermark [AUDIO]   (default tests/audio/en_ohenry_chenevert.wav)
 * Marks the clip (ms of CPU per second of audio, against the 80 ms a synthesis frame lasts) and
 * runs the detector on the marked samples (times real time; issue 28 asks for >= 100x).
 *   build/bench/bench_watermark --channels [AUDIO...]   (default: both bundled clips)
 * What the lossy channels of issue 28 leave of the mark (docs/provenance.md): the clips are
 * marked, then sent through MP3 64 kbit/s (lame), Opus 32 kbit/s (opusenc/opusdec) and white
 * noise at 20 dB SNR. Per class of tile loudness (the mark's tile: 2 bins x 4 frames of a
 * 1024-point STFT at hop 512, 422 Hz - 6.8 kHz, against its row's mean over the input), it prints the
 * mark's size in log energy, the share of it the channel delivers (the same channel applied to
 * the unmarked clip is the reference), the channel's own change of a tile's log energy (its
 * static spectral tilt removed), and the z a detector with the host fully cancelled could reach
 * on 3 s: sqrt(tiles per 3 s x (gain x mark / change)^2), summed over the classes.
 */
#include <fftw3.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "features/features.h"
#include "include/qvoice.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The mark's tile grid, as a yardstick: blocks of 5 hops, 4 frames each. */
enum { NF = 1024, HOP = 512, BLOCK_HOPS = 5, LO = 18, TILES = 136, TB = 2, CLASSES = 4 };

/* Log energies of every block's tiles: l[block * TILES + tile]; returns the blocks. */
static int64_t tiles(const float *x, int64_t n, double **l) {
    const int64_t nbk = n / (BLOCK_HOPS * HOP) - 1;
    float *in = fftwf_alloc_real(NF);
    fftwf_complex *out = fftwf_alloc_complex(NF / 2 + 1);
    fftwf_plan p = fftwf_plan_dft_r2c_1d(NF, in, out, FFTW_ESTIMATE);
    *l = calloc((size_t)(nbk > 0 ? nbk : 1) * TILES, sizeof **l);
    for (int64_t b = 0; b < nbk; b++)
        for (int j = 0; j < BLOCK_HOPS - 1; j++) {
            for (int i = 0; i < NF; i++)
                in[i] = (float)(x[(b * BLOCK_HOPS + j) * HOP + i] * sqrt(0.5 - 0.5 * cos(2 * M_PI * i / NF)));
            fftwf_execute(p);
            for (int k = 0; k < TILES * TB; k++)
                (*l)[b * TILES + k / TB] += (double)out[LO + k][0] * out[LO + k][0] +
                                            (double)out[LO + k][1] * out[LO + k][1];
        }
    for (int64_t i = 0; i < nbk * TILES; i++) (*l)[i] = log((*l)[i] + 1e-12);
    fftwf_destroy_plan(p), fftwf_free(in), fftwf_free(out);
    return nbk;
}

static void write_wav(const char *path, const float *x, int64_t n) {
    SF_INFO si = {.samplerate = QVA_SAMPLE_RATE_HZ, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &si);
    if (!f || sf_writef_float(f, x, n) != n) fprintf(stderr, "%s: cannot write\n", path), exit(1);
    sf_close(f);
}

static void add_noise(const float *x, float *y, int64_t n, double snr_db) {
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) e += (double)x[i] * x[i];
    const double sd = sqrt(e / (double)n / pow(10.0, snr_db / 10.0));
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        double u1 = (double)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 11);
        double u2 = (double)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 11);
        u1 = u1 * 0x1.0p-53 + 1e-300, u2 *= 0x1.0p-53;
        y[i] = (float)(x[i] + sd * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
}

/* u, m: the clean and marked log tiles; cu, cm: after the channel. */
static void survival(const char *what, const double *u, const double *m, const double *cu,
                     const double *cm, int64_t nbk) {
    static const char *const cls[CLASSES] = {">= 0 dB", "-10..0 dB", "-20..-10 dB", "< -20 dB"};
    double band[TILES] = {0}, nband[TILES] = {0}, row[TILES] = {0}, dd[CLASSES] = {0},
           dc[CLASSES] = {0}, rr[CLASSES] = {0}, cnt[CLASSES] = {0};
    for (int64_t i = 0; i < nbk * TILES; i++) row[i % TILES] += exp(u[i]) / (double)nbk;
    for (int t = 0; t < TILES; t++) row[t] = log(row[t] + 1e-30);
    for (int64_t i = 0; i < nbk * TILES; i++) /* the channel's static tilt, from its loud tiles */
        if (u[i] - row[i % TILES] >= -2.3) band[i % TILES] += cm[i] - m[i], nband[i % TILES]++;
    for (int t = 0; t < TILES; t++) band[t] /= nband[t] > 0 ? nband[t] : 1.0;
    for (int64_t b = 0; b < nbk; b++) {
        for (int t = 0; t < TILES; t++) {
            const int64_t i = b * TILES + t;
            const double rel = u[i] - row[t];
            const int c = rel >= 0.0 ? 0 : rel >= -2.3 ? 1 : rel >= -4.6 ? 2 : 3;
            const double d = m[i] - u[i], r = cm[i] - m[i] - band[t];
            dd[c] += d * d, dc[c] += d * (cm[i] - cu[i]), rr[c] += r * r, cnt[c]++;
        }
    }
    double z2 = 0.0;
    const double per3 = 3.0 * QVA_SAMPLE_RATE_HZ / (BLOCK_HOPS * HOP) / (double)nbk;
    for (int c = 0; c < CLASSES; c++) {
        if (cnt[c] == 0) continue;
        const double mark = sqrt(dd[c] / cnt[c]), gain = dc[c] / dd[c], ch = sqrt(rr[c] / cnt[c]);
        z2 += cnt[c] * per3 * pow(gain * mark / ch, 2.0);
        printf("  %-8s %-12s %3.0f %% of tiles: mark %.3f, delivered %4.2f, channel %.3f\n", what,
               cls[c], 100.0 * cnt[c] / (double)(nbk * TILES), mark, gain, ch);
    }
    printf("watermark channel %s: best 3 s z with the host cancelled %.1f\n", what, sqrt(z2));
}

static int channels(int argc, char **argv) {
    static const char *const dflt[] = {"tests/audio/en_ohenry_chenevert.wav",
                                       "tests/audio/it_galatea_fasol.wav"};
    const char *const *paths = argc > 0 ? (const char *const *)argv : dflt;
    const int np = argc > 0 ? argc : 2;
    float *x = NULL;
    int64_t n = 0;
    for (int i = 0; i < np; i++) { /* the clips back to back */
        qva_audio a;
        char err[512];
        if (qva_audio_load(&a, paths[i], 0, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
        x = realloc(x, (size_t)(n + a.n_samples) * sizeof *x);
        memcpy(x + n, a.samples, (size_t)a.n_samples * sizeof *x);
        n += a.n_samples;
        qva_audio_free(&a);
    }
    float *m = malloc((size_t)n * sizeof *m), *y = malloc((size_t)n * sizeof *y);
    memcpy(m, x, (size_t)n * sizeof *m);
    if (qv_watermark_mark(0x8abcdef1u, m, n)) return fprintf(stderr, "%s\n", qv_last_error()), 1;
    double *lu, *lm, *cu, *cm;
    const int64_t nbk = tiles(x, n, &lu);
    tiles(m, n, &lm);
    add_noise(x, y, n, 20.0);
    tiles(y, n, &cu);
    add_noise(m, y, n, 20.0);
    tiles(y, n, &cm);
    survival("noise", lu, lm, cu, cm, nbk);
    free(cu), free(cm);
    char dir[] = "/tmp/qvwmXXXXXX", cmd[512];
    if (!mkdtemp(dir)) return fprintf(stderr, "cannot make a temporary directory\n"), 1;
    char um[300], mm[300];
    snprintf(um, sizeof um, "%s/u.wav", dir), snprintf(mm, sizeof mm, "%s/m.wav", dir);
    write_wav(um, x, n), write_wav(mm, m, n);
    static const char *const what[] = {"mp3", "opus"};
    static const char *const make[] = {
        "cd %s && lame --quiet -b 64 u.wav u.mp3 && lame --quiet -b 64 m.wav m.mp3",
        "cd %s && for f in u m; do opusenc --quiet --bitrate 32 $f.wav $f.opus && "
        "opusdec --quiet $f.opus $f.o.wav; done"};
    static const char *const out[][2] = {{"u.mp3", "m.mp3"}, {"u.o.wav", "m.o.wav"}};
    for (int c = 0; c < 2; c++) {
        snprintf(cmd, sizeof cmd, make[c], dir);
        if (system(cmd) != 0) {
            printf("watermark channel %s: lame/opus-tools missing (scripts/deps.sh)\n", what[c]);
            continue;
        }
        double *l[2];
        int64_t k = nbk;
        for (int v = 0; v < 2; v++) {
            qva_audio a;
            char err[512], path[300];
            snprintf(path, sizeof path, "%s/%s", dir, out[c][v]);
            if (qva_audio_load(&a, path, 0, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
            const int64_t kb = tiles(a.samples, a.n_samples, &l[v]);
            if (kb < k) k = kb;
            qva_audio_free(&a);
        }
        survival(what[c], lu, lm, l[0], l[1], k);
        free(l[0]), free(l[1]);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "%s: not removed\n", dir);
    free(x), free(m), free(y), free(lu), free(lm);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--channels")) return channels(argc - 2, argv + 2);
    const char *path = argc > 1 ? argv[1] : "tests/audio/en_ohenry_chenevert.wav";
    qva_audio a;
    char err[512];
    if (qva_audio_load(&a, path, 0, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    const double sec = (double)a.n_samples / QVA_SAMPLE_RATE_HZ;
    qv_watermark *w;
    if (qv_watermark_new(&w, QV_WATERMARK_DEFAULT)) return fprintf(stderr, "%s\n", qv_last_error()), 1;
    double t0 = cpu_s();
    float out[QV_SAMPLES_PER_FRAME + QV_WATERMARK_DELAY];
    for (int64_t i = 0; i < a.n_samples; i += QV_SAMPLES_PER_FRAME) /* frame by frame, as streamed */
        qv_watermark_apply(w, a.samples + i,
                           a.n_samples - i < QV_SAMPLES_PER_FRAME ? a.n_samples - i : QV_SAMPLES_PER_FRAME,
                           out);
    const double t_mark = cpu_s() - t0;
    qv_watermark_free(w);
    qv_watermark_report r = qv_watermark_default_report();
    t0 = cpu_s();
    if (qv_watermark_detect(a.samples, a.n_samples, &r)) return fprintf(stderr, "%s\n", qv_last_error()), 1;
    const double t_detect = cpu_s() - t0;
    printf("watermark: mark %.2f ms CPU per s of audio (%.2f %% of real time); "
           "detect %.0fx real time on one core (%.1f s in %.3f s CPU, whole-input score %.1f)\n",
           1000.0 * t_mark / sec, 100.0 * t_mark / sec, sec / t_detect, sec, t_detect, r.score_all);
    qva_audio_free(&a);
    return 0;
}
