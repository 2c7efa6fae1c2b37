/* bench_batch.c — the batched frame step (engine/batch.c) against the same sessions one by one:
 * generation time per frame (talker + code predictor, no decoder) for B sessions stepped
 * together vs alone, on a pool of THREADS, median of ROUNDS rounds of FRAMES frames each; wall
 * time, and the process's CPU time per batched step (what a loaded server pays; the machine
 * is shared, so CPU time compares better across runs than wall time).
 *
 *     bench_batch MODEL_DIR THREADS QUANT(bf16|int8) B FRAMES ROUNDS
 *     -> "batch int8 B=4 threads=2: alone 61.2 ms/frame, batched 22.4 ms/frame (step 89.6 ms,
 *         CPU 160.3 ms), speed-up 2.73x (median of 3)"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model.h"
#include "tests/bench/helpers/measure.h"

static qv_session *start(const qv_model *m, int quant, int i, int frames) {
    qv_params p = qv_model_params(m);
    p.quant = quant, p.seed = (uint64_t)i, p.ignore_eos = 1, p.max_frames = frames;
    qv_session *s;
    qv_request r = qv_default_request();
    r.text = "The old lighthouse keeper climbed the narrow stairs every evening.";
    r.speaker = "ryan", r.language = "english";
    if (qv_session_new(&s, m, &p) || qv_session_start(s, &r)) {
        fprintf(stderr, "bench_batch: cannot start a session\n");
        exit(1);
    }
    return s;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: bench_batch MODEL_DIR THREADS bf16|int8 B FRAMES ROUNDS\n");
        return 2;
    }
    const int nth = atoi(argv[2]), quant = strcmp(argv[3], "int8") ? QV_QUANT_BF16 : QV_QUANT_INT8;
    const int B = atoi(argv[4]), frames = atoi(argv[5]), rounds = atoi(argv[6]);
    if (B < 1 || B > QV_BATCH_MAX_STREAMS || frames < 1 || rounds < 1 || rounds > 64) return 2;
    qv_model *m;
    if (qv_model_load(&m, argv[1])) {
        fprintf(stderr, "bench_batch: %s\n", qv_last_error());
        return 1;
    }
    qv_model_set_batching(m, QV_BATCH_MAX_STREAMS);
    qvk_pool *pool = qvk_pool_create(nth);
    double alone[64], batched[64], cpu[64];
    for (int r = 0; r < rounds; r++) {
        qv_session *s[QV_BATCH_MAX_STREAMS];
        int32_t codes[QV_BATCH_MAX_STREAMS][QV_N_CODEBOOKS];
        int done[QV_BATCH_MAX_STREAMS];
        enum qv_status st[QV_BATCH_MAX_STREAMS];
        for (int i = 0; i < B; i++)
            s[i] = start(m, quant, i, frames);
        double t0 = bench_clock_s(CLOCK_MONOTONIC);
        for (int i = 0; i < B; i++)
            for (int f = 0; f < frames; f++)
                qve_batch_step(m->batch, &s[i], 1, pool, &codes[i], &done[i], &st[i]);
        alone[r] = (bench_clock_s(CLOCK_MONOTONIC) - t0) / (B * frames);
        for (int i = 0; i < B; i++) {
            qv_session_free(s[i]);
            s[i] = start(m, quant, i, frames);
        }
        t0 = bench_clock_s(CLOCK_MONOTONIC);
        const double c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (int f = 0; f < frames; f++)
            qve_batch_step(m->batch, s, B, pool, codes, done, st);
        batched[r] = (bench_clock_s(CLOCK_MONOTONIC) - t0) / (B * frames);
        cpu[r] = (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / frames;
        for (int i = 0; i < B; i++)
            qv_session_free(s[i]);
    }
    const double a = bench_median(alone, rounds), b = bench_median(batched, rounds);
    printf("batch %s B=%d threads=%d: alone %.1f ms/frame, batched %.1f ms/frame (step %.1f ms, "
           "CPU %.1f ms), speed-up %.2fx (median of %d)\n",
           argv[3], B, nth, 1e3 * a, 1e3 * b, 1e3 * b * B, 1e3 * bench_median(cpu, rounds), a / b,
           rounds);
    qvk_pool_free(pool);
    qv_model_free(m);
    return 0;
}
