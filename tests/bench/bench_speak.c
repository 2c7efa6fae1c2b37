/* bench_speak.c — where the time of one synthesis goes, through the library on a full-size model:
 * load, prefill of a 40-token text (qv_session_start: text projection, KV-cache allocation, the
 * stack over every prompt position, the codec head), ms per frame (whole frame and code predictor
 * alone; the talker is the difference), achieved weight GB/s, and the start-up pieces of the time
 * to first audio: decoder weights prepared vs mapped from the prepared cache (checkpoint/prepared.h),
 * tokenizer open, the first one-frame decoder block, the int8 or q4 view quantized vs mapped. (Time to
 * first audio as a user sees it: bench_ttfa on speak --stream.), and the speech decoder's CPU per
 * frame alone and its wall per frame on THREADS threads.
 * usage: bench_speak MODEL_DIR [THREADS [FRAMES [RUNS [QUANT]]]]  (defaults 2, 30, 3, bf16;
 * QUANT bf16, int8 or q4; q4 for a directory written with --q4)
 * bf16 runs first measure the read bandwidth (1 GiB, THREADS threads). Prints "key value" lines
 * (medians over RUNS) for scripts/bench.sh. No assertions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model.h"
#include "engine/speech_decoder.h"
#include "tests/bench/helpers/measure.h"

static int pick_argmax(const float *l, int n, void *ctx) {
    (void)ctx;
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static double stack_bytes(const qvm_stack_config *c) {
    const double H = c->hidden_size, I = c->intermediate_size;
    const double qd = (double)c->num_attention_heads * c->head_dim;
    const double kvd = (double)c->num_key_value_heads * c->head_dim;
    return c->num_hidden_layers *
           (qd * H * 2 * 2 + kvd * H * 2 * 2 + I * H * 2 * 3); /* q,o k,v mlp */
}

/* Read bandwidth with `threads` threads over a 1 GiB buffer (above this VM's L3), median of 5. */
static double read_bandwidth(int threads) {
    const size_t n = (size_t)1 << 30;
    char *buf = qvk_alloc(n);
    qvk_pool *pool = qvk_pool_create(threads);
    if (!buf || !pool) return 0;
    memset(buf, 1, n);
    const double gbs = bench_read_gbs(pool, buf, n, 5);
    qvk_pool_free(pool);
    qvk_free(buf);
    return gbs;
}

/* Start-up pieces: "KEY wall" and "KEY_cpu CPU" (process CPU, all threads) in ms, so that a
 * loaded machine still shows the work done. */
typedef struct {
    double w, c;
} stamp;

static stamp mark(void) {
    return (stamp){bench_clock_s(CLOCK_MONOTONIC), bench_clock_s(CLOCK_PROCESS_CPUTIME_ID)};
}

static void print_since(const char *key, stamp t) {
    const stamp e = mark();
    printf("%s %.1f\n%s_cpu %.1f\n", key, 1e3 * (e.w - t.w), key, 1e3 * (e.c - t.c));
}

static int drop_audio(void *user, const float *pcm, int n) {
    (void)user, (void)pcm, (void)n;
    return 0;
}

/* The first one-frame block of a fresh stream (what streaming waits for before its first audio)
 * and a second one, as KEY and second_KEY: decoded on this thread from untouched state (cold), or
 * on a stream's thread that was started 0.2 s earlier (as synth.c starts it before the prefill:
 * it writes its state meanwhile) and is waited for with sync (wall only for that one: its CPU is
 * the process's). */
static void first_block(const qve_decoder *dec, int threaded, const char *key) {
    char err[256], k2[64];
    int32_t frame[QV_N_CODEBOOKS];
    for (int g = 0; g < QV_N_CODEBOOKS; g++)
        frame[g] = 100 + 37 * g;
    qve_dec_stream *st = qve_dec_stream_start(dec, threaded, drop_audio, NULL, err, sizeof err);
    if (threaded) nanosleep(&(struct timespec){0, 200000000}, NULL);
    snprintf(k2, sizeof k2, "second_%s", key);
    for (int k = 0; st && k < 2; k++) {
        const stamp t = mark();
        qve_dec_stream_push(st, frame); /* blocks of 1, 1, 2, ... frames: each push decodes */
        qve_dec_stream_sync(st);
        print_since(k ? k2 : key, t);
    }
    if (!st || qve_dec_stream_finish(st, err, sizeof err)) fprintf(stderr, "bench_speak: %s\n", err);
}

/* The speech decoder's steady cost per 80 ms frame: 24 frames in three full blocks, after the
 * start-up blocks of 1, 1, 2, 4 and 8 frames, decoded on this thread (CPU per frame: what the
 * decoder takes from generation when they share the cores) and then on a pool of `threads` (wall
 * per frame: how fast the frames still queued when generation ends are decoded). */
static void decoder_rate(const qve_decoder *dec, int threads) {
    char err[256];
    int32_t frame[QV_N_CODEBOOKS];
    qvk_pool *pool = threads > 1 ? qvk_pool_create(threads) : NULL;
    for (int k = 0; k < 2; k++) {
        qve_dec_stream *st = qve_dec_stream_start(dec, 0, drop_audio, NULL, err, sizeof err);
        if (st && k) qve_dec_stream_set_pool(st, pool);
        stamp t = mark();
        for (int f = 0; st && f < 40; f++) {
            if (f == 16) t = mark();
            for (int g = 0; g < QV_N_CODEBOOKS; g++)
                frame[g] = (100 + 37 * g + 11 * f) % qve_decoder_codebook_size(dec);
            qve_dec_stream_push(st, frame);
        }
        const stamp e = mark();
        if (k) printf("decoder_frame_pool_ms %.1f\n", 1e3 * (e.w - t.w) / 24);
        else printf("decoder_frame_ms_cpu %.1f\n", 1e3 * (e.c - t.c) / 24);
        if (!st || qve_dec_stream_finish(st, err, sizeof err))
            fprintf(stderr, "bench_speak: %s\n", err);
    }
    qvk_pool_free(pool);
}

static void fill_request(qv_request *r, const qv_model *m, int32_t *ids) {
    for (int i = 0; i < 40; i++)
        ids[i] = 1000 + 37 * i; /* 40 ordinary text tokens */
    *r = qv_default_request();
    r->text_ids = ids;
    r->n_text_ids = 40;
    r->language = "english";
    if (qv_model_n_speakers(m) > 0) r->speaker = qv_model_speaker(m, 0);
    r->layout = QV_LAYOUT_NON_STREAMING;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_speak MODEL_DIR [THREADS [FRAMES [RUNS [QUANT]]]]\n");
        return 2;
    }
    const char *dir = argv[1];
    const int threads = argc > 2 ? atoi(argv[2]) : 2, frames = argc > 3 ? atoi(argv[3]) : 30,
              runs = argc > 4 ? atoi(argv[4]) : 3;
    const char *quant = argc > 5 ? argv[5] : "bf16";
    char err[1024];
    if (!strcmp(quant, "bf16")) printf("read_gbs %.1f\n", read_bandwidth(threads));

    /* the decoder prepared here (cache off), then mapped (a first load makes the file if none) */
    const char *cache = getenv("QVOICE_CACHE");
    char *saved = cache ? strdup(cache) : NULL;
    setenv("QVOICE_CACHE", "", 1);
    qvm_ckpt *ck = qvm_ckpt_open(dir, err, sizeof err);
    if (!ck) {
        fprintf(stderr, "bench_speak: %s\n", err);
        return 1;
    }
    stamp t0 = mark();
    qve_decoder *dec = qve_decoder_load(ck, err, sizeof err);
    print_since("decoder_prepare_ms", t0);
    if (saved) setenv("QVOICE_CACHE", saved, 1);
    else unsetenv("QVOICE_CACHE");
    free(saved);
    qve_decoder_free(dec);
    qve_decoder_free(dec = qve_decoder_load(ck, err, sizeof err));
    const double t1 = bench_clock_s(CLOCK_MONOTONIC);
    t0 = mark();
    dec = qve_decoder_load(ck, err, sizeof err);
    print_since("decoder_mapped_ms", t0);
    qvm_ckpt_free(ck);
    qv_model *m = NULL;
    if (!dec || qv_model_load(&m, dir)) {
        fprintf(stderr, "bench_speak: %s\n", qv_last_error());
        return 1;
    }
    printf("load_s %.3f\n", bench_clock_s(CLOCK_MONOTONIC) - t1);
    first_block(dec, 0, "first_block_cold_ms");
    first_block(dec, 1, "first_block_ms");
    decoder_rate(dec, threads);
    qve_decoder_free(dec);
    qv_params p = qv_model_params(m);
    /* the model's frame budget, as speak has it: the prefill then allocates and first-touches
     * the KV cache a user's does (a 30-frame cache hid ~20-40 ms of page zeroing) */
    p.do_sample = 0, p.subtalker_do_sample = 0;
    p.quant = !strcmp(quant, "int8") ? QV_QUANT_INT8 : !strcmp(quant, "q4") ? QV_QUANT_Q4 : QV_QUANT_BF16;
    int32_t ids[40], codes[QV_N_CODEBOOKS], done = 0;
    qv_request r;
    fill_request(&r, m, ids);
    if (p.quant != QV_QUANT_BF16) { /* the int8 / q4 view quantized (cache off), then mapped */
        qvk_pool *pool = qvk_pool_create(threads);
        const char *c = getenv("QVOICE_CACHE");
        char *keep = c ? strdup(c) : NULL;
        setenv("QVOICE_CACHE", "", 1);
        stamp t = mark();
        qve_model_quantize(m, p.quant, pool);
        print_since("quantize_ms", t);
        if (keep) setenv("QVOICE_CACHE", keep, 1);
        else unsetenv("QVOICE_CACHE");
        free(keep);
        qve_model_drop_views(m);
        qve_model_quantize(m, p.quant, pool); /* makes the cache file if none */
        qve_model_drop_views(m);
        t = mark();
        qve_model_quantize(m, p.quant, pool);
        print_since("quantize_mapped_ms", t);
        qvk_pool_free(pool);
    }

    qv_session *s;
    p.n_threads = threads;
    if (qv_session_new(&s, m, &p)) {
        fprintf(stderr, "bench_speak: cannot create a session\n");
        return 1;
    }
    {
        int32_t *tid;
        int n_tid;
        const stamp t = mark();
        if (qv_session_tokenize(s, "Hello.", &tid, &n_tid) == QV_OK) free(tid);
        print_since("tokenizer_open_ms", t);
    }
    double *pre = calloc((size_t)runs, sizeof(double)), *fw = calloc((size_t)runs, sizeof(double));
    double *fc = calloc((size_t)runs, sizeof(double)), *cw = calloc((size_t)runs, sizeof(double));
    double *cc = calloc((size_t)runs, sizeof(double));
    qve_cp_state cps;
    if (!pre || !fw || !fc || !cw || !cc || qve_cp_state_init(&cps, m)) return 1;
    qve_cp_state_use(&cps, qve_model_cp(m, p.quant));
    const int H = qv_model_hidden_size(m);
    float *z = calloc((size_t)H, sizeof(float));
    for (int i = 0; i < H; i++)
        z[i] = (float)((i * 7919) % 201 - 100) / 100.0f;
    for (int k = 0; k < runs; k++) {
        double t = bench_clock_s(CLOCK_MONOTONIC);
        if (qv_session_start(s, &r)) {
            fprintf(stderr, "bench_speak: %s\n", qv_last_error());
            return 1;
        }
        pre[k] = bench_clock_s(CLOCK_MONOTONIC) - t;
        double c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        t = bench_clock_s(CLOCK_MONOTONIC);
        int n = 0;
        while (n < frames && !qv_session_next_frame(s, codes, &done) && !done)
            n++;
        fw[k] = (bench_clock_s(CLOCK_MONOTONIC) - t) / n;
        fc[k] = (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / n;
        const int n_cp = 10;
        c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        t = bench_clock_s(CLOCK_MONOTONIC);
        for (int i = 0; i < n_cp; i++)
            qve_cp_frame(&cps, m, &m->talker, s->pool, z, 7 * i, codes, pick_argmax, NULL);
        cw[k] = (bench_clock_s(CLOCK_MONOTONIC) - t) / n_cp;
        cc[k] = (bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / n_cp;
    }
    const double frame_w = bench_median(fw, runs), cp_w = bench_median(cw, runs);
    /* weight bytes relative to bf16 (q4: 4 bits + a bf16 scale and bias per 64) */
    const double bpw = !strcmp(quant, "int8") ? 0.5 : !strcmp(quant, "q4") ? 0.28125 : 1.0;
    const double talker_gb =
        (stack_bytes(&m->ck->cfg.talker) + 2.0 * m->ck->cfg.talker.vocab_size * m->ck->cfg.talker.hidden_size) *
        bpw / 1e9;
    const double cp_gb =
        (15.0 * stack_bytes(&m->ck->cfg.code_predictor) + /* positions 0 and 1 read it once */
         15.0 * 2 * m->ck->cfg.code_predictor.vocab_size * m->ck->cfg.code_predictor.hidden_size) *
        bpw / 1e9;
    printf("prefill_ms %.1f\n", 1e3 * bench_median(pre, runs));
    printf("prefill_positions %d\n", s->n_prefill);
    printf("frame_ms %.1f\n", 1e3 * frame_w);
    printf("frame_cpu_ms %.1f\n", 1e3 * bench_median(fc, runs));
    printf("cp_ms %.1f\n", 1e3 * cp_w);
    printf("cp_cpu_ms %.1f\n", 1e3 * bench_median(cc, runs));
    printf("talker_ms %.1f\n", 1e3 * (frame_w - cp_w));
    printf("talker_gb_per_frame %.3f\n", talker_gb);
    printf("cp_gb_per_frame %.3f\n", cp_gb);
    printf("talker_gbs %.1f\n", talker_gb / (frame_w - cp_w));
    printf("cp_gbs %.1f\n", cp_gb / cp_w);
    qve_cp_state_free(&cps);
    qv_session_free(s);
    qv_model_free(m);
    free(z), free(pre), free(fw), free(fc), free(cw), free(cc);
    return 0;
}
