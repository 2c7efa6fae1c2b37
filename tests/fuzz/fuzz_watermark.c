/* fuzz_watermark.c — libFuzzer target: the watermark detector (features/watermark.c) on hostile
 * samples, and the marker on the same samples. Byte 0 picks the sample format (bit 0: f32, else
 * s16, both little-endian; NaN and infinities reach the detector as they are), byte 1 a tiling
 * factor: the samples after the 2-byte header repeat 16·(byte 1 + 1) times, at most 12 s, so a
 * small input reaches the 3 s windows, the longer windows (12 s holds 112 blocks: windows of 54
 * blocks from 108) and the range merging while each run stays short enough under ASan for many
 * executions. Anything but QV_OK aborts, and so do ranges out of the input or out of time order.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "include/qvoice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int is_f32 = data[0] & 1;
    size_t width = is_f32 ? 4 : 2, n_in = (size - 2) / width;
    if (n_in == 0) return 0;
    size_t n = n_in * 16 * ((size_t)data[1] + 1);
    if (n > 12 * 24000) n = 12 * 24000;
    float *x = malloc(n * sizeof *x);
    if (!x) return 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = data + 2 + (i % n_in) * width;
        if (is_f32) {
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            memcpy(&x[i], &u, 4);
        } else {
            x[i] = (float)(int16_t)(p[0] | p[1] << 8) / 32768.0f;
        }
    }
    qv_watermark_report r = qv_watermark_default_report();
    if (qv_watermark_detect(x, (int64_t)n, &r) != QV_OK) abort();
    if (r.n_ranges < 0 || r.n_ranges > QV_WATERMARK_MAX_RANGES) abort();
    for (int i = 0; i < r.n_ranges; i++)
        if (!(r.ranges[i].start_s >= 0.0 && r.ranges[i].end_s <= r.seconds + 1e-9) ||
            (i > 0 && r.ranges[i].start_s < r.ranges[i - 1].start_s))
            abort();
    qv_watermark *w;
    if (qv_watermark_new(&w, 0x8abcdef1u) != QV_OK) abort();
    static float out[24000 + QV_WATERMARK_DELAY];
    const int64_t m = (int64_t)(n < 24000 ? n : 24000);
    if (qv_watermark_apply(w, x, m, out) > m) abort(); /* a new marker holds nothing back */
    if (qv_watermark_flush(w, out) >= QV_WATERMARK_DELAY) abort();
    qv_watermark_free(w);
    free(x);
    return 0;
}
