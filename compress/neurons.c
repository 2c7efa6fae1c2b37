/* neurons.c — MLP neuron pruning by calibration (seed technique 4, docs/compression.md).
 *
 * A few English texts are spoken greedily through the engine's own forward (prefill and frames,
 * the model's own weights) while the talker records, per layer and SwiGLU neuron, the largest
 * |silu(gate)·up| it produced. A neuron whose maximum stays below the threshold never moved
 * down_proj's input by more than that, so its gate/up rows and down column are dropped; the first
 * layers (10 by default, as in the seed work) keep every neuron, and each width is rounded up to a
 * multiple of 64 (q4's group) by keeping the strongest of the neurons below the threshold.
 */
#include <stdlib.h>
#include <string.h>

#include "compress/compress_impl.h"
#include "compress/qvz.h"
#include "engine/model.h"

#define WIDTH_ALIGN 64

static const char *const CALIB_TEXTS[] = {
    "The old lighthouse keeper climbed the narrow stairs every evening and lit the great lamp.",
    "Could you tell me how to get to the train station? I think I'm completely lost!",
    "In 1969, three astronauts flew to the Moon; two of them walked on its dusty surface.",
};

int qvz_calibrate(qvm_ckpt *ck, int n_threads, int n_frames, float *act_max, char *err,
                  size_t es) {
    const char *dir = ck->dir;
    qv_model *m;
    if (qve_model_new(&m, ck, err, es)) return -1;
    const qvm_stack_config *c = &m->ck->cfg.talker;
    memset(act_max, 0,
           sizeof(float) * (size_t)c->num_hidden_layers * (size_t)c->intermediate_size);
    qv_params p = qv_model_params(m);
    p.n_threads = n_threads, p.do_sample = 0, p.subtalker_do_sample = 0, p.max_frames = n_frames;
    qv_session *s = NULL;
    int rc = qv_session_new(&s, m, &p) ? -1 : 0;
    if (rc) snprintf(err, es, "%s: cannot start a calibration session: %s", dir, qv_last_error());
    for (size_t t = 0; !rc && t < sizeof CALIB_TEXTS / sizeof CALIB_TEXTS[0]; t++) {
        qv_request r = qv_default_request();
        r.text = CALIB_TEXTS[t], r.language = "english";
        if (qv_model_n_speakers(m) > 0) r.speaker = qv_model_speaker(m, 0);
        s->act_max = act_max;
        int32_t codes[QV_N_CODEBOOKS];
        int done = 0;
        enum qv_status st = qv_session_start(s, &r);
        for (int f = 0; st == QV_OK && !done && f < n_frames; f++)
            st = qv_session_next_frame(s, codes, &done);
        if (st != QV_OK) {
            snprintf(err, es, "%s: calibration: %s", dir, qv_last_error());
            rc = -1;
        }
    }
    qv_session_free(s);
    qv_model_free(m);
    return rc;
}

struct neuron {
    float v;
    int32_t i;
};

static int by_strength(const void *a, const void *b) { /* strongest first, then by index */
    const struct neuron *x = a, *y = b;
    return x->v < y->v ? 1 : x->v > y->v ? -1 : x->i - y->i;
}

static int ascending(const void *a, const void *b) {
    return *(const int32_t *)a - *(const int32_t *)b;
}

int qvz_neuron_select(const float *act_max, const qvm_stack_config *c, int n_layers, int protect,
                      float threshold, int32_t **keep, int *width) {
    for (int l = 0; l < n_layers; l++) {
        const int I = qvm_layer_intermediate(c, l);
        const float *v = act_max + (size_t)l * (size_t)c->intermediate_size;
        int32_t *k = malloc(sizeof *k * (size_t)I);
        struct neuron *by = malloc(sizeof *by * (size_t)I);
        if (!k || !by) {
            free(k), free(by);
            return -1;
        }
        keep[l] = k;
        for (int i = 0; i < I; i++)
            k[i] = i, by[i] = (struct neuron){v[i], i};
        int n = 0;
        for (int i = 0; i < I; i++)
            n += !(v[i] < threshold);
        n = l < protect ? I : (n + WIDTH_ALIGN - 1) / WIDTH_ALIGN * WIDTH_ALIGN;
        if (n < WIDTH_ALIGN) n = WIDTH_ALIGN;
        width[l] = n < I ? n : I;
        if (n < I) {
            qsort(by, (size_t)I, sizeof *by, by_strength);
            for (int i = 0; i < n; i++)
                k[i] = by[i].i;
            qsort(k, (size_t)n, sizeof *k, ascending);
        }
        free(by);
    }
    return 0;
}
