/* convert.c — bf16 / f16 / f32 conversions (exact widening; round-to-nearest-even narrowing). */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

void qvk_bf16_to_f32(float *restrict dst, const uint16_t *restrict src, size_t n) {
    qvk_impl_get()->widen_bf16(dst, src, n);
}

void qvk_f32_to_bf16(uint16_t *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            dst[i] = (uint16_t)((u >> 16) | 0x40); /* quiet NaN, sign and payload top kept */
        else
            dst[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

static float f16_to_f32_1(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else {
        /* subnormal: normalise the mantissa */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void qvk_f16_to_f32(float *restrict dst, const uint16_t *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = f16_to_f32_1(src[i]);
}

static uint16_t f32_to_f16_1(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00; /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00; /* ≥ 65520 rounds to infinity */
    if (a < 0x38800000u) {                      /* below 2^-14: subnormal, units of 2^-24 */
        float v;
        memcpy(&v, &a, 4);
        return sign | (uint16_t)lrintf(v * 16777216.0f); /* exact product, nearest-even */
    }
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u; /* rebias 127 -> 15 */
    return sign | (uint16_t)(r >> 13);
}

void qvk_f32_to_f16(uint16_t *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_f16_1(src[i]);
}
