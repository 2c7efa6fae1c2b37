/* bench_watermark.c — cost of the audio watermark (features/watermark.c) on one core:
 *   build/bench/bench_watermark [AUDIO]   (default tests/audio/en_ohenry_chenevert.wav)
 * Marks the clip (ms of CPU per second of audio, against the 80 ms a synthesis frame lasts) and
 * runs the detector on the marked samples (times real time; issue 28 asks for >= 100x).
 *   build/bench/bench_watermark --channels [AUDIO...]   (default: both bundled clips)
 * What the lossy channels of issue 28 leave of the mark (docs/provenance.md): the clips are
 * marked, then sent through MP3 64 kbit/s (lame), Opus 32 kbit/s (opusenc/opusdec) and white
 * noise at 20 dB SNR. In two tile grids (the current mark's tile, one of 12 log-spaced bands over
 * 188 Hz - 6.8 kHz x one 512-point frame, and the first design's, 2 bins x 4 frames of 1024 over
 * 422 Hz - 6.8 kHz), per class of tile loudness against its row's mean over the input, it prints the
 * mark's size in log energy, the share of it the channel delivers (the same channel applied to
 * the unmarked clip is the reference), the channel's own change of a tile's log energy (its
 * static spectral tilt removed), and the z a detector with the host fully cancelled could reach
 * on 3 s: sqrt(tiles per 3 s x (gain x mark / change)^2), summed over the classes of each tile
 * row (band, or band and frame) apart.
 *   build/bench/bench_watermark --false-positives [N]
 * N (default 10,000) non-overlapping 3 s windows of unmarked speech - espeak-ng in eight voices
 * at varied rates and pitches reading texts of their own seeds - each detected on its own: how
 * many are found marked (issue 28 allows 1 in 10,000), the highest score and how many come within
 * 1.0 and 0.5 of presence (QV_WATERMARK_PRESENT); and each file detected whole: how many have a
 * range found by the windows longer than 3 s alone (none of its 3 s windows over presence).
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
#include "tests/unit/helpers/noise.h"
#include "tests/unit/helpers/speech_text.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Two tile grids to measure in, both in blocks of 2560 samples: the old mark's 2 bins x 4 frames
 * of a 1024-point STFT, and the current one's log-spaced band x one 512-point frame. */
enum { MAX_TILES = 136, CLASSES = 4 };
typedef struct {
    const char *name;
    int nf, frames, per_frame; /* FFT size, frames in a block, 1: a tile per frame and band */
    int n_bands, edge[MAX_TILES + 1];
} layout;

static int n_tiles(const layout *ly) { return ly->per_frame ? ly->n_bands * ly->frames : ly->n_bands; }

/* Log energies of every block's tiles: l[block * n_tiles + tile]; returns the blocks. */
static int64_t tiles(const layout *ly, const float *x, int64_t n, double **l) {
    const int hop = ly->nf / 2, nt = n_tiles(ly), block = (ly->frames + 1) * hop;
    const int64_t nbk = n / block - 1;
    float *in = fftwf_alloc_real(ly->nf);
    fftwf_complex *out = fftwf_alloc_complex(ly->nf / 2 + 1);
    fftwf_plan p = fftwf_plan_dft_r2c_1d(ly->nf, in, out, FFTW_ESTIMATE);
    *l = calloc((size_t)(nbk > 0 ? nbk : 1) * nt, sizeof **l);
    for (int64_t b = 0; b < nbk; b++)
        for (int j = 0; j < ly->frames; j++) {
            for (int i = 0; i < ly->nf; i++)
                in[i] = (float)(x[b * block + j * hop + i] * sqrt(0.5 - 0.5 * cos(2 * M_PI * i / ly->nf)));
            fftwf_execute(p);
            for (int t = 0; t < ly->n_bands; t++)
                for (int k = ly->edge[t]; k < ly->edge[t + 1]; k++)
                    (*l)[b * nt + (ly->per_frame ? j * ly->n_bands : 0) + t] +=
                        (double)out[k][0] * out[k][0] + (double)out[k][1] * out[k][1];
        }
    for (int64_t i = 0; i < nbk * nt; i++) (*l)[i] = log((*l)[i] + 1e-12);
    fftwf_destroy_plan(p), fftwf_free(in), fftwf_free(out);
    return nbk;
}

static void write_wav(const char *path, const float *x, int64_t n) {
    SF_INFO si = {.samplerate = QVA_SAMPLE_RATE_HZ, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &si);
    if (!f || sf_writef_float(f, x, n) != n) fprintf(stderr, "%s: cannot write\n", path), exit(1);
    sf_close(f);
}

/* u, m: the clean and marked log tiles; cu, cm: after the channel. */
static void survival(const layout *ly, const char *what, const double *u, const double *m,
                     const double *cu, const double *cm, int64_t nbk) {
    const int nt = n_tiles(ly);
    static const char *const cls[CLASSES] = {">= 0 dB", "-10..0 dB", "-20..-10 dB", "< -20 dB"};
    double band[MAX_TILES] = {0}, nband[MAX_TILES] = {0}, row[MAX_TILES] = {0}, dd[CLASSES] = {0},
           dc[CLASSES] = {0}, rr[CLASSES] = {0}, cnt[CLASSES] = {0};
    for (int64_t i = 0; i < nbk * nt; i++) row[i % nt] += exp(u[i]) / (double)nbk;
    for (int t = 0; t < nt; t++) row[t] = log(row[t] + 1e-30);
    for (int64_t i = 0; i < nbk * nt; i++) /* the channel's static tilt, from its loud tiles */
        if (u[i] - row[i % nt] >= -2.3) band[i % nt] += cm[i] - m[i], nband[i % nt]++;
    for (int t = 0; t < nt; t++) band[t] /= nband[t] > 0 ? nband[t] : 1.0;
    for (int64_t b = 0; b < nbk; b++) {
        for (int t = 0; t < nt; t++) {
            const int64_t i = b * nt + t;
            const double rel = u[i] - row[t];
            const int c = rel >= 0.0 ? 0 : rel >= -2.3 ? 1 : rel >= -4.6 ? 2 : 3;
            const double d = m[i] - u[i], r = cm[i] - m[i] - band[t];
            dd[c] += d * d, dc[c] += d * (cm[i] - cu[i]), rr[c] += r * r, cnt[c]++;
        }
    }
    /* The bound: each tile row (a band, or a band and frame) and class apart, so that rows the
     * channel barely touches are not averaged with rows it rewrites. */
    double z2 = 0.0, z2_pooled = 0.0;
    const double per3 = 3.0 * QVA_SAMPLE_RATE_HZ / ((ly->frames + 1) * ly->nf / 2) / (double)nbk;
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < CLASSES; c++) {
            double sdd = 0.0, sdc = 0.0, srr = 0.0, n = 0.0;
            for (int64_t b = 0; b < nbk; b++) {
                const int64_t i = b * nt + t;
                const double rel = u[i] - row[t];
                if ((rel >= 0.0 ? 0 : rel >= -2.3 ? 1 : rel >= -4.6 ? 2 : 3) != c) continue;
                const double d = m[i] - u[i], r = cm[i] - m[i] - band[t];
                sdd += d * d, sdc += d * (cm[i] - cu[i]), srr += r * r, n++;
            }
            if (n >= 8 && srr > 0.0 && sdd > 0.0) z2 += n * per3 * (sdc * sdc / sdd) / srr;
        }
    for (int c = 0; c < CLASSES; c++) {
        if (cnt[c] == 0) continue;
        const double mark = sqrt(dd[c] / cnt[c]), gain = dc[c] / dd[c], ch = sqrt(rr[c] / cnt[c]);
        z2_pooled += cnt[c] * per3 * pow(gain * mark / ch, 2.0);
        printf("  %-8s %-12s %3.0f %% of tiles: mark %.3f, delivered %4.2f, channel %.3f\n", what,
               cls[c], 100.0 * cnt[c] / (double)(nbk * nt), mark, gain, ch);
    }
    printf("watermark channel %s, %s: best 3 s z with the host cancelled %.1f (classes pooled over "
           "the rows: %.1f)\n", what, ly->name, sqrt(z2), sqrt(z2_pooled));
}

static int channels(int argc, char **argv) {
    static const char *const dflt[] = {"tests/audio/en_ohenry_chenevert.wav",
                                       "tests/audio/it_galatea_fasol.wav"};
    const char *const *paths = argc > 0 ? (const char *const *)argv : dflt;
    const int np = argc > 0 ? argc : 2;
    float *x = NULL;
    int64_t n = 0, *start = malloc((size_t)(np + 1) * sizeof *start); /* clip i from start[i] */
    if (!start) return fprintf(stderr, "out of memory\n"), 1;
    for (int i = 0; i < np; i++) { /* the clips back to back */
        start[i] = n;
        qva_audio a;
        char err[512];
        if (qva_audio_load(&a, paths[i], 0, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
        x = realloc(x, (size_t)(n + a.n_samples) * sizeof *x);
        memcpy(x + n, a.samples, (size_t)a.n_samples * sizeof *x);
        n += a.n_samples;
        qva_audio_free(&a);
    }
    start[np] = n;
    float *m = malloc((size_t)n * sizeof *m);
    memcpy(m, x, (size_t)n * sizeof *m);
    if (qv_watermark_mark(0x8abcdef1u, m, n)) return fprintf(stderr, "%s\n", qv_last_error()), 1;
    /* each channel's output for the unmarked [0] and the marked [1] clips */
    enum { N_CH = 3 };
    static const char *const what[N_CH] = {"noise", "mp3", "opus"};
    float *ch[N_CH][2] = {{0}};
    int64_t ch_n[N_CH][2] = {{0}};
    for (int v = 0; v < 2; v++) {
        ch[0][v] = malloc((size_t)n * sizeof(float));
        for (int i = 0; i < np; i++) /* under each clip's own power, as test_watermark */
            add_white_noise((v ? m : x) + start[i], ch[0][v] + start[i],
                            start[i + 1] - start[i], 20.0);
        ch_n[0][v] = n;
    }
    char dir[] = "/tmp/qvwmXXXXXX", cmd[512];
    if (!mkdtemp(dir)) return fprintf(stderr, "cannot make a temporary directory\n"), 1;
    char um[300], mm[300];
    snprintf(um, sizeof um, "%s/u.wav", dir), snprintf(mm, sizeof mm, "%s/m.wav", dir);
    write_wav(um, x, n), write_wav(mm, m, n);
    static const char *const make[] = {
        "cd %s && lame --quiet -b 64 u.wav u.mp3 && lame --quiet -b 64 m.wav m.mp3",
        "cd %s && for f in u m; do opusenc --quiet --bitrate 32 $f.wav $f.opus && "
        "opusdec --quiet $f.opus $f.o.wav; done"};
    static const char *const out[][2] = {{"u.mp3", "m.mp3"}, {"u.o.wav", "m.o.wav"}};
    for (int c = 1; c < N_CH; c++) {
        snprintf(cmd, sizeof cmd, make[c - 1], dir);
        if (system(cmd) != 0) {
            printf("watermark channel %s: lame/opus-tools missing (scripts/deps.sh)\n", what[c]);
            continue;
        }
        for (int v = 0; v < 2; v++) {
            qva_audio a;
            char err[512], path[300];
            snprintf(path, sizeof path, "%s/%s", dir, out[c - 1][v]);
            if (qva_audio_load(&a, path, 0, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
            ch[c][v] = a.samples, ch_n[c][v] = a.n_samples; /* the caller frees a's samples */
        }
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "%s: not removed\n", dir);
    static layout ly[2] = {{.name = "2 bins x 4 frames of 1024 (the old tile)", .nf = 1024,
                            .frames = 4, .n_bands = 136},
                           {.name = "band from 188 Hz x 1 frame of 512 (the current tile)",
                            .nf = 512, .frames = 9, .per_frame = 1, .n_bands = 12}};
    for (int t = 0; t <= 136; t++) ly[0].edge[t] = 18 + 2 * t; /* 422 Hz - 6.8 kHz */
    static const int band_edge[13] = {4, 6, 8, 11, 14, 18, 24, 33, 44, 59, 80, 108, 146};
    memcpy(ly[1].edge, band_edge, sizeof band_edge); /* features/watermark.c's bands */
    for (int l = 0; l < 2; l++) {
        double *lu, *lm;
        const int64_t nbk = tiles(&ly[l], x, n, &lu);
        tiles(&ly[l], m, n, &lm);
        for (int c = 0; c < N_CH; c++) {
            if (!ch[c][0]) continue;
            double *lc[2];
            int64_t k = nbk;
            for (int v = 0; v < 2; v++) {
                const int64_t kb = tiles(&ly[l], ch[c][v], ch_n[c][v], &lc[v]);
                if (kb < k) k = kb;
            }
            survival(&ly[l], what[c], lu, lm, lc[0], lc[1], k);
            free(lc[0]), free(lc[1]);
        }
        free(lu), free(lm);
    }
    for (int c = 0; c < N_CH; c++) free(ch[c][0]), free(ch[c][1]);
    free(x), free(m), free(start);
    return 0;
}

static int false_positives(int argc, char **argv) {
    const long want = argc > 0 ? atol(argv[0]) : 10000;
    static const char *const voices[] = {"en-us", "en+f3", "de", "fr-fr+m3",
                                         "es+f2", "it", "en-gb-scotland+m4", "da+f4"};
    char dir[] = "/tmp/qvwmfpXXXXXX", txt[300], wav[300], cmd[800];
    if (!mkdtemp(dir)) return fprintf(stderr, "cannot make a temporary directory\n"), 1;
    snprintf(txt, sizeof txt, "%s/t.txt", dir), snprintf(wav, sizeof wav, "%s/t.wav", dir);
    long windows = 0, found = 0, near1 = 0, near05 = 0, files = 0, long_only = 0;
    double top = 0.0, seconds = 0.0, cpu = 0.0;
    for (int f = 0; windows < want; f++) {
        snprintf(cmd, sizeof cmd, "espeak-ng -v %s -s %d -p %d -f %s -w %s", voices[f % 8],
                 130 + 7 * (f % 9), 25 + 6 * (f % 9), txt, wav);
        if (write_speech_text(txt, 1001 + (uint64_t)f) || system(cmd) != 0)
            return fprintf(stderr, "espeak-ng could not read %s (scripts/deps.sh)\n", txt), 1;
        qva_audio a;
        char err[512];
        if (qva_audio_load(&a, wav, 0, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
        qv_watermark_report whole = qv_watermark_default_report();
        if (qv_watermark_detect(a.samples, a.n_samples, &whole))
            return fprintf(stderr, "%s\n", qv_last_error()), 1;
        files++, long_only += whole.n_ranges > 0 && whole.score < QV_WATERMARK_PRESENT;
        for (int64_t at = 0; at + 3 * QVA_SAMPLE_RATE_HZ <= a.n_samples && windows < want;
             at += 3 * QVA_SAMPLE_RATE_HZ, windows++) {
            qv_watermark_report r = qv_watermark_default_report();
            const double t0 = cpu_s();
            if (qv_watermark_detect(a.samples + at, 3 * QVA_SAMPLE_RATE_HZ, &r))
                return fprintf(stderr, "%s\n", qv_last_error()), 1;
            cpu += cpu_s() - t0;
            found += r.present, near1 += r.score >= QV_WATERMARK_PRESENT - 1.0;
            near05 += r.score >= QV_WATERMARK_PRESENT - 0.5;
            if (r.score > top) top = r.score;
            seconds += 3.0;
        }
        qva_audio_free(&a);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "%s: not removed\n", dir);
    printf("watermark false positives: %ld non-overlapping 3 s windows of unmarked espeak-ng speech "
           "(%.0f s), %ld found marked (presence %.1f); best score %.2f, %ld at %.1f or more, %ld at "
           "%.1f or more; detector %.0fx real time\n",
           windows, seconds, found, QV_WATERMARK_PRESENT, top, near1, QV_WATERMARK_PRESENT - 1.0,
           near05, QV_WATERMARK_PRESENT - 0.5,
           seconds / cpu);
    printf("watermark false positives: the %ld files detected whole, %ld with a range found by the "
           "windows longer than 3 s alone\n", files, long_only);
    return found > 0 || long_only > 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--channels")) return channels(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "--false-positives")) return false_positives(argc - 2, argv + 2);
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
    if (qv_watermark_mark(QV_WATERMARK_DEFAULT, a.samples, a.n_samples))
        return fprintf(stderr, "%s\n", qv_last_error()), 1;
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
