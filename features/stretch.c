/* stretch.c — speed without a pitch change: Rubber Band's real-time time stretcher (Debian
 * librubberband) over the samples as they leave a synthesis, in blocks of any size, so a stream
 * and a whole file get the same treatment. Its start pad and start delay are handled here, and
 * the output is cut or padded to exactly round(n_in / speed) samples at the end.
 */
#include <math.h>
#include <rubberband/rubberband-c.h>
#include <stdlib.h>
#include <string.h>

#include "features/features.h"
#include "include/qvoice.h"

/* ==== constants ============================================================================== */

#define BLOCK 2048 /* samples handed to Rubber Band per call (its max process size) */

static const float zeros[BLOCK]; /* the start pad, and the end's padding */

/* ==== types ================================================================================== */

struct qva_stretch {
    RubberBandState rb;
    double speed;
    int64_t n_in, n_out;  /* samples taken, samples handed on */
    int64_t skip;         /* output samples still to drop (the start delay) */
    float out[4 * BLOCK]; /* one retrieval */
};

/* ==== helpers ================================================================================ */

/* Hands on what Rubber Band has ready, after the start delay and never past limit (< 0: none).
 * fn's non-zero return is passed back. */
static int drain(qva_stretch *t, int64_t limit, qva_stretch_fn fn, void *user) {
    int a;
    while ((a = rubberband_available(t->rb)) > 0) {
        float *o = t->out;
        unsigned n = rubberband_retrieve(t->rb, &o, a < 4 * BLOCK ? (unsigned)a : 4 * BLOCK);
        if (!n) break;
        int64_t from = t->skip < n ? t->skip : n;
        t->skip -= from;
        int64_t k = (int64_t)n - from;
        if (limit >= 0 && t->n_out + k > limit) k = limit - t->n_out;
        if (k > 0) {
            int rc = fn(user, t->out + from, (int)k);
            t->n_out += k;
            if (rc) return rc;
        }
    }
    return 0;
}

/* ==== API ==================================================================================== */

qva_stretch *qva_stretch_new(double speed) {
    if (!(speed >= QV_SPEED_MIN && speed <= QV_SPEED_MAX)) return NULL;
    qva_stretch *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->speed = speed;
    /* real-time mode: output follows input block by block (streams); the pitch stays */
    t->rb =
        rubberband_new(QVA_SAMPLE_RATE_HZ, 1, RubberBandOptionProcessRealTime, 1.0 / speed, 1.0);
    if (!t->rb) return free(t), NULL;
    rubberband_set_max_process_size(t->rb, BLOCK);
    /* the pad primes the stretcher so the first input sample is the first output sample once
     * the start delay is dropped */
    const float *z = zeros;
    for (unsigned pad = rubberband_get_preferred_start_pad(t->rb); pad > 0;) {
        unsigned n = pad < BLOCK ? pad : BLOCK;
        rubberband_process(t->rb, &z, n, 0);
        pad -= n;
    }
    t->skip = rubberband_get_start_delay(t->rb);
    return t;
}

int qva_stretch_run(qva_stretch *t, const float *x, int64_t n, int final, qva_stretch_fn fn,
                    void *user) {
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i += BLOCK) {
        const float *p = x + i;
        const unsigned k = (unsigned)(n - i < BLOCK ? n - i : BLOCK);
        rubberband_process(t->rb, &p, k, 0);
        t->n_in += k;
        rc = drain(t, -1, fn, user);
    }
    if (rc || !final) return rc;
    const int64_t want = llround((double)t->n_in / t->speed);
    const float *z = zeros;
    rubberband_process(t->rb, &z, 0, 1);
    if ((rc = drain(t, want, fn, user))) return rc;
    /* what the stretcher keeps back at its end is short of the exact length: silence */
    while (t->n_out < want && !rc) {
        const int k = (int)(want - t->n_out < BLOCK ? want - t->n_out : BLOCK);
        rc = fn(user, zeros, k);
        t->n_out += k;
    }
    return rc;
}

void qva_stretch_free(qva_stretch *t) {
    if (!t) return;
    rubberband_delete(t->rb);
    free(t);
}
