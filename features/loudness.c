/* loudness.c — integrated loudness (EBU R128 / ITU-R BS.1770) via libebur128: one meter for
 * clone's level normalisation and the output's (speak --loudness, batch jobs), and the one gain
 * that brings an output to a target. */
#include <ebur128.h>
#include <math.h>

#include "features/features.h"
#include "include/qvoice.h"
#include "util/api.h"

enum qv_status qv_loudness_lufs(const float *pcm, int64_t n_samples, double *lufs) {
    ebur128_state *st = ebur128_init(1, QVA_SAMPLE_RATE_HZ, EBUR128_MODE_I);
    int ok = st && ebur128_add_frames_float(st, pcm, (size_t)n_samples) == EBUR128_SUCCESS &&
             ebur128_loudness_global(st, lufs) == EBUR128_SUCCESS;
    if (st) ebur128_destroy(&st);
    return ok ? QV_OK : qvu_fail(QV_E_NOMEM, "loudness: out of memory");
}

enum qv_status qv_loudness_normalize(float *pcm, int64_t n_samples, double target_lufs,
                                     int64_t *n_clipped, double *lufs) {
    *n_clipped = 0, *lufs = -HUGE_VAL;
    if (target_lufs != 0 &&
        !(target_lufs >= QV_LOUDNESS_MIN_LUFS && target_lufs <= QV_LOUDNESS_MAX_LUFS))
        return qvu_failf(QV_E_INVALID, "loudness: expected %g..%g LUFS, found %g",
                         QV_LOUDNESS_MIN_LUFS, QV_LOUDNESS_MAX_LUFS, target_lufs);
    double in;
    enum qv_status st = qv_loudness_lufs(pcm, n_samples, &in);
    if (st) return st;
    if (target_lufs == 0) return *lufs = in, QV_OK;
    if (!isfinite(in))
        return qvu_fail(QV_E_AUDIO, "loudness: nothing to measure (silent, or shorter than one "
                                    "0.4 s EBU R128 block)");
    const float g = (float)pow(10.0, (target_lufs - in) / 20.0);
    for (int64_t i = 0; i < n_samples; i++) {
        float v = pcm[i] * g;
        if (fabsf(v) > 1.0f) v = v > 0 ? 1.0f : -1.0f, ++*n_clipped;
        pcm[i] = v;
    }
    return qv_loudness_lufs(pcm, n_samples, lufs);
}
