/* bench_q8_quality.c — how far int8 (or q4) weights move the outputs from bf16 on a full-size model:
 * relative error of the talker's codec-head logits after the same prefill and of the code
 * predictor's 15 logit vectors for the same inputs (teacher-forced on the bf16 codes), argmax
 * agreement there, and greedy free-running code agreement over FRAMES frames.
 * usage: bench_q8_quality MODEL_DIR [FRAMES [THREADS [int8|q4]]]  (defaults 300, 2, int8).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"

struct forced {
    const int32_t *codes; /* bf16 codes c1..c15 of the frame */
    int g;
};

static int pick_forced(const float *l, int n, void *ctx) {
    (void)l, (void)n;
    struct forced *f = ctx;
    return f->codes[1 + f->g++];
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static int pick_argmax(const float *l, int n, void *ctx) {
    (void)ctx;
    return argmax(l, n);
}

static double rel_err(const float *a, const float *ref, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++)
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]), den += (double)ref[i] * ref[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_q8_quality MODEL_DIR [FRAMES [THREADS [int8|q4]]]\n");
        return 2;
    }
    const int frames = argc > 2 ? atoi(argv[2]) : 300, threads = argc > 3 ? atoi(argv[3]) : 2;
    const int quant = argc > 4 && !strcmp(argv[4], "q4") ? QV_QUANT_Q4 : QV_QUANT_INT8;
    const char *qname = quant == QV_QUANT_Q4 ? "q4" : "int8";
    qv_model *m;
    if (qv_model_load(&m, argv[1])) {
        fprintf(stderr, "bench_q8_quality: %s\n", qv_last_error());
        return 1;
    }
    qv_params p = qv_model_params(m);
    p.n_threads = threads, p.do_sample = 0, p.subtalker_do_sample = 0, p.max_frames = frames;
    p.ignore_eos = 1;
    qv_session *s[2];
    for (int k = 0; k < 2; k++) {
        p.quant = k ? quant : QV_QUANT_BF16;
        if (qv_session_new(&s[k], m, &p)) return 1;
    }
    int32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = 1000 + 37 * i;
    qv_request r = qv_default_request();
    r.text_ids = ids, r.n_text_ids = 40, r.language = "english";
    if (qv_model_n_speakers(m) > 0) r.speaker = qv_model_speaker(m, 0);
    for (int k = 0; k < 2; k++)
        if (qv_session_start(s[k], &r)) return 1;
    const int V = m->ck->cfg.talker.vocab_size, CV = m->ck->cfg.code_predictor.vocab_size;
    printf("%s vs bf16 on %s\n", qname, argv[1]);
    printf("  talker codec-head logits after prefill: rel. L2 error %.4f, argmax %s\n",
           rel_err(s[1]->logits_raw, s[0]->logits_raw, V),
           argmax(s[1]->logits_raw, V) == argmax(s[0]->logits_raw, V) ? "same" : "differs");

    /* free-running greedy, and per frame the code predictor teacher-forced on bf16's codes */
    int32_t *c[2];
    c[0] = calloc((size_t)frames * QV_N_CODEBOOKS, sizeof(int32_t));
    c[1] = calloc((size_t)frames * QV_N_CODEBOOKS, sizeof(int32_t));
    float *ref = malloc(sizeof(float) * (QV_N_CODEBOOKS - 1) * (size_t)CV);
    qve_cp_state cp8;
    if (!c[0] || !c[1] || !ref || qve_cp_state_init(&cp8, m)) return 1;
    qve_cp_state_use(&cp8, qve_model_cp(m, quant));
    double cp_err = 0, cp_err_max = 0;
    long cp_same = 0, cp_n = 0;
    int n = 0;
    for (; n < frames; n++) {
        int done[2];
        qv_session_next_frame(s[0], c[0] + (size_t)n * QV_N_CODEBOOKS, &done[0]);
        if (done[0]) break;
        memcpy(ref, s[0]->cp.logits, sizeof(float) * (QV_N_CODEBOOKS - 1) * (size_t)CV);
        struct forced f = {c[0] + (size_t)n * QV_N_CODEBOOKS, 0};
        int32_t tmp[QV_N_CODEBOOKS];
        qve_cp_frame(&cp8, m, &s[0]->tw, s[0]->pool, s[0]->z_frame, f.codes[0], tmp, pick_forced,
                     &f);
        for (int g = 0; g < QV_N_CODEBOOKS - 1; g++) {
            double e = rel_err(cp8.logits + (size_t)g * CV, ref + (size_t)g * CV, CV);
            cp_err += e, cp_n++;
            if (e > cp_err_max) cp_err_max = e;
            cp_same += argmax(cp8.logits + (size_t)g * CV, CV) == f.codes[1 + g];
        }
        qv_session_next_frame(s[1], c[1] + (size_t)n * QV_N_CODEBOOKS, &done[1]);
        if (done[1]) break;
    }
    (void)pick_argmax;
    long same = 0, same0 = 0;
    int first = -1;
    for (int i = 0; i < n; i++) {
        for (int g = 0; g < QV_N_CODEBOOKS; g++)
            same += c[0][i * QV_N_CODEBOOKS + g] == c[1][i * QV_N_CODEBOOKS + g];
        same0 += c[0][i * QV_N_CODEBOOKS] == c[1][i * QV_N_CODEBOOKS];
        if (first < 0 && memcmp(c[0] + i * QV_N_CODEBOOKS, c[1] + i * QV_N_CODEBOOKS,
                                sizeof(int32_t) * QV_N_CODEBOOKS))
            first = i;
    }
    printf("  code predictor logits, same inputs (%ld vectors): rel. L2 error mean %.4f, max %.4f;"
           " argmax agrees %.1f %%\n",
           cp_n, cp_n ? cp_err / cp_n : 0, cp_err_max, cp_n ? 100.0 * cp_same / cp_n : 0);
    printf("  greedy free-running, %d frames: codes identical %.1f %% (c0 %.1f %%), first "
           "differing frame %d\n",
           n, n ? 100.0 * same / ((double)n * QV_N_CODEBOOKS) : 0, n ? 100.0 * same0 / n : 0, first);
    qve_cp_state_free(&cp8);
    free(c[0]), free(c[1]), free(ref);
    qv_session_free(s[0]), qv_session_free(s[1]);
    qv_model_free(m);
    return 0;
}
