/* loudness.c — integrated loudness (EBU R128 / ITU-R BS.1770) via libebur128: one meter for
 * clone's level normalisation and speak --loudness. */
#include <ebur128.h>

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
