/* bench_watermark.c — cost of the audio watermark (features/watermark.c) on one core:
 *   build/bench/bench_watermark [AUDIO]   (default tests/audio/en_ohenry_chenevert.wav)
 * Marks the clip (ms of CPU per second of audio, against the 80 ms a synthesis frame lasts) and
 * runs the detector on the marked samples (times real time; issue 28 asks for >= 100x).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "features/features.h"
#include "include/qvoice.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
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
