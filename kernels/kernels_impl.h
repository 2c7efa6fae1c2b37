/* kernels_impl.h — what the per-ISA files of kernels/ share: one table of row kernels per variant.
 * The public kernels (matvec.c, nn.c) split work and call through the table chosen by dispatch.c;
 * every entry computes each output row independently of how rows are grouped, which is what makes
 * results bit-identical for any thread count.
 */
#ifndef QV_KERNELS_IMPL_H
#define QV_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    /* y[r] = W[r, :]·x (+ bias[r]) for r in [r0, r1); W row stride n_in. */
    void (*mv_bf16)(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int r0, int r1, int n_in);
    /* Y[r, o] = W[o, :]·X[r, :] (+ bias[o]) for o in [o0, o1), r < n_rows; Y row stride n_out.
     * Each element is computed exactly as mv_bf16 computes row o for x = X[r] (bit-identical),
     * while W streams from memory once for all rows. */
    void (*mm_bf16)(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int o0, int o1, int n_in, int n_out, int n_rows);
    /* Σ a[i]·b[i] (the f32 matvec and attention scores run it row by row). */
    float (*dot)(const float *a, const float *b, int n);
    /* y += a·x */
    void (*axpy)(float *restrict y, float a, const float *restrict x, int n);
    /* Σ x² accumulated in double (rmsnorm). */
    double (*sumsq)(const float *x, int n);
    /* dst[i] = bf16 src[i] widened to f32 (exact). */
    void (*widen_bf16)(float *restrict dst, const uint16_t *restrict src, size_t n);
    /* max of x[0..n), n ≥ 1 (NaNs after x[0] ignored). */
    float (*maxf)(const float *x, int n);
    /* x[i] = exp(x[i] − m); returns Σ of the results in double (softmax). */
    double (*exp_sub_sum)(float *x, int n, float m);
    /* y[i] = silu(g[i])·(u ? u[i] : 1) (y may equal g). */
    void (*silu_mul)(float *y, const float *g, const float *u, int n);
    /* x[i] += inv_b·sin²(a·x[i]) (SnakeBeta, one channel). */
    void (*snake)(float *x, int n, float a, float inv_b);
    /* XOR of the n_bytes / 8 whole 64-bit words at p (bandwidth probe). */
    uint64_t (*xor64)(const void *p, size_t n_bytes);
} qvk_impl;

extern const qvk_impl qvk_impl_scalar;
extern const qvk_impl qvk_impl_avx2;
extern const qvk_impl qvk_impl_avx512;

/* The variant in use (qvk_init() is run first if needed). */
const qvk_impl *qvk_impl_get(void);

#endif
