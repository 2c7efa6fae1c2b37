/* bench_decoder.c — speech decoder speed on the full-size synthetic tokenizer: ms of compute per
 * 80 ms frame of audio (CPU time), one-shot and through the decoder thread (OpenBLAS 1 thread),
 * then with a 2-thread pool lent to the stream (wall time is the figure there).
 * Usage: bench_decoder [MODEL_DIR [N_FRAMES]] (default $QVOICE_CACHE/q06b-base, 100 frames).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"
#include "engine/speech_decoder.h"
#include "tests/bench/helpers/measure.h"

static int sink(void *user, const float *pcm, int n) {
    (void)pcm;
    *(long *)user += n;
    return 0;
}

int main(int argc, char **argv) {
    char dir[1024], err[512];
    const char *cache = getenv("QVOICE_CACHE");
    if (argc > 1)
        snprintf(dir, sizeof dir, "%s", argv[1]);
    else
        snprintf(dir, sizeof dir, "%s/q06b-base", cache && *cache ? cache : "cache");
    int n = argc > 2 ? atoi(argv[2]) : 100;
    if (n < 1) n = 1;
    qvk_init();
    qvm_ckpt *ck = qvm_ckpt_open(dir, err, sizeof err);
    qve_decoder *d = ck ? qve_decoder_load(ck, err, sizeof err) : NULL;
    qvm_ckpt_free(ck);
    if (!d) {
        fprintf(stderr, "bench_decoder: %s\n", err);
        return 1;
    }
    int nq = qve_decoder_n_codebooks(d), spf = qve_decoder_samples_per_frame(d);
    int32_t *codes = malloc((size_t)n * nq * sizeof *codes);
    float *wav = malloc((size_t)n * spf * sizeof *wav);
    if (!codes || !wav) return 1;
    unsigned x = 12345;
    for (size_t i = 0; i < (size_t)n * nq; i++) {
        x = x * 1103515245u + 12345u;
        codes[i] = (int)((x >> 8) % (unsigned)qve_decoder_codebook_size(d));
    }
    double t0 = bench_clock_s(CLOCK_MONOTONIC), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (qve_decoder_decode(d, codes, n, wav, err, sizeof err) != 0) {
        fprintf(stderr, "bench_decoder: %s\n", err);
        return 1;
    }
    double t1 = bench_clock_s(CLOCK_MONOTONIC), c1 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    long got = 0;
    qve_dec_stream *s = qve_dec_stream_start(d, 1, sink, &got, err, sizeof err);
    for (int f = 0; s && f < n; f++)
        qve_dec_stream_push(s, codes + (size_t)f * nq);
    if (!s || qve_dec_stream_finish(s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_decoder: %s\n", err);
        return 1;
    }
    double t2 = bench_clock_s(CLOCK_MONOTONIC), c2 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    /* first-audio latency: a synchronous stream decodes frame 0 alone inside the first push */
    double c3 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    long first = 0;
    s = qve_dec_stream_start(d, 0, sink, &first, err, sizeof err);
    if (!s || qve_dec_stream_push(s, codes) != 0) {
        fprintf(stderr, "bench_decoder: first block failed\n");
        return 1;
    }
    double c4 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    qve_dec_stream_finish(s, err, sizeof err);
    /* the same with a 2-thread pool: all frames, then the first block alone (wall time) */
    qvk_pool *pool = qvk_pool_create(2);
    long got2 = 0, first2 = 0;
    double t5 = bench_clock_s(CLOCK_MONOTONIC), c5 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    s = pool ? qve_dec_stream_start(d, 0, sink, &got2, err, sizeof err) : NULL;
    if (s) qve_dec_stream_set_pool(s, pool);
    for (int f = 0; s && f < n; f++)
        qve_dec_stream_push(s, codes + (size_t)f * nq);
    if (!s || qve_dec_stream_finish(s, err, sizeof err) != 0) {
        fprintf(stderr, "bench_decoder: pooled stream failed\n");
        return 1;
    }
    double t6 = bench_clock_s(CLOCK_MONOTONIC), c6 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    s = qve_dec_stream_start(d, 0, sink, &first2, err, sizeof err);
    if (s) qve_dec_stream_set_pool(s, pool);
    double t7 = bench_clock_s(CLOCK_MONOTONIC);
    if (!s || qve_dec_stream_push(s, codes) != 0) {
        fprintf(stderr, "bench_decoder: first pooled block failed\n");
        return 1;
    }
    double t8 = bench_clock_s(CLOCK_MONOTONIC);
    qve_dec_stream_finish(s, err, sizeof err);
    qvk_pool_free(pool);
    printf("speech decoder (%s kernels, block %d frames): %d frames\n", qvk_variant(),
           QVE_DEC_BLOCK_FRAMES, n);
    /* CPU time is the figure that matters on a shared machine; wall time shown alongside */
    printf("  one-shot : %7.1f ms CPU/frame (%.1f wall), %.2f× realtime\n", (c1 - c0) * 1e3 / n,
           (t1 - t0) * 1e3 / n, (c1 - c0) / (n * 0.08));
    printf("  streamed : %7.1f ms CPU/frame (%.1f wall), %ld samples\n", (c2 - c1) * 1e3 / n,
           (t2 - t1) * 1e3 / n, got);
    printf("  first audio (%ld samples) after one frame: %.1f ms CPU\n", first, (c4 - c3) * 1e3);
    printf("  2 threads: %7.1f ms wall/frame (%.1f CPU), %ld samples\n", (t6 - t5) * 1e3 / n,
           (c6 - c5) * 1e3 / n, got2);
    printf("  2 threads, first audio (%ld samples): %.1f ms wall\n", first2, (t8 - t7) * 1e3);
    free(codes);
    free(wav);
    qve_decoder_free(d);
    return 0;
}
