/* bench_clone.c — clone/ speed on the 30 s bundled clip with the full-size synthetic 0.6B Base:
 * mel + ECAPA (target ≤ 0.3 s) and the speech-tokenizer encoder (target ≤ 1.0 s), a pool of 2
 * threads by default (argv[1] overrides; OpenBLAS single-threaded inside). Best of N runs, wall
 * and CPU time (all threads), and the calling thread's own CPU time: on a loaded machine wall time
 * says little, while max(caller CPU, workers' CPU) estimates the wall time on idle cores. No
 * assertions (see test_clone).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "checkpoint/ckpt.h"
#include "features/speech_encoder.h"
#include "kernels/kernels.h"
#include "tests/bench/helpers/measure.h"

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    const char *cache = getenv("QVOICE_CACHE");
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/q06b-base", cache && *cache ? cache : "cache");
    qvk_pool *pool = threads > 1 ? qvk_pool_create(threads) : NULL;
    qva_audio a;
    if (qva_audio_load(&a, "tests/audio/en_ohenry_chenevert.wav", 30.0, err, sizeof err)) {
        fprintf(stderr, "bench_clone: %s\n", err);
        return 1;
    }
    qvm_ckpt *ck = qvm_ckpt_open(dir, err, sizeof err);
    qva_ecapa *e = ck ? qva_ecapa_load(ck, err, sizeof err) : NULL;
    qva_speech_encoder *se = e ? qva_speech_encoder_load(ck, err, sizeof err) : NULL;
    qvm_ckpt_free(ck);
    if (!se) {
        fprintf(stderr, "bench_clone: %s\n", err);
        return 1;
    }
    int nf = qva_mel_n_frames(a.n_samples), n_codes = qva_speech_encoder_n_frames(a.n_samples);
    float *mel = malloc(sizeof(float) * QVA_MEL_BINS * (size_t)nf);
    float *xvec = malloc(sizeof(float) * (size_t)qva_ecapa_dim(e));
    int32_t *codes = malloc(sizeof(int32_t) * QV_N_CODEBOOKS * (size_t)n_codes);
    qva_mel *m = qva_mel_create();
    double best_w = 1e9, best_c = 0, best_m = 0, best_w2 = 1e9, best_c2 = 0, best_m2 = 0;
    for (int r = 0; r < 3; r++) {
        double w0 = bench_clock_s(CLOCK_MONOTONIC), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID),
               m0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
        qva_mel_compute(m, mel, a.samples, a.n_samples);
        if (qva_ecapa_forward(e, pool, xvec, mel, nf, err, sizeof err)) return 1;
        double w = bench_clock_s(CLOCK_MONOTONIC) - w0;
        if (w < best_w)
            best_w = w, best_c = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0,
            best_m = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - m0;
    }
    for (int r = 0; r < 3; r++) {
        double w0 = bench_clock_s(CLOCK_MONOTONIC), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID),
               m0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
        if (qva_speech_encoder_encode(se, pool, codes, a.samples, a.n_samples, err, sizeof err)) return 1;
        double w = bench_clock_s(CLOCK_MONOTONIC) - w0;
        if (w < best_w2)
            best_w2 = w, best_c2 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0,
            best_m2 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - m0;
    }
    printf("clone bench: 30 s clip, %d threads, kernels %s\n", threads, qvk_variant());
    printf("  mel + ECAPA      %.3f s wall (%.3f s CPU; caller %.3f s, workers %.3f s)   target <= 0.3 s\n",
           best_w, best_c, best_m, best_c - best_m);
    printf("  speech encoder   %.3f s wall (%.3f s CPU; caller %.3f s, workers %.3f s)   target <= 1.0 s\n",
           best_w2, best_c2, best_m2, best_c2 - best_m2);
    qva_mel_free(m);
    qvk_pool_free(pool);
    qva_ecapa_free(e);
    qva_speech_encoder_free(se);
    qva_audio_free(&a);
    free(mel);
    free(xvec);
    free(codes);
    return 0;
}
