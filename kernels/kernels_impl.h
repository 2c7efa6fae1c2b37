/* kernels_impl.h — what the per-ISA files of kernels/ share: one table of row kernels per variant.
 * The public kernels (matvec.c, nn.c) split work and call through the table chosen by dispatch.c;
 * every entry computes each output row independently of how rows are grouped, which is what makes
 * results bit-identical for any thread count.
 */
#ifndef QV_KERNELS_IMPL_H
#define QV_KERNELS_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    /* y[r] = W[r, :]·x (+ bias[r]) for r in [r0, r1); W row stride n_in. */
    void (*mv_bf16)(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int r0, int r1, int n_in);
    /* y[k·ldy + r] = W[r, :]·x[k·n_in + :] (+ bias[r]) for r in [r0, r1), k < n_x (several
     * vectors through the same rows, each widened weight used for all of them), every element
     * bit-identical to mv_bf16's; NULL when the variant has none (matvec.c runs mv_bf16 per x). */
    void (*mvb_bf16)(float *restrict y, int ldy, const uint16_t *restrict w,
                     const float *restrict x, int n_x, const float *restrict bias, int r0, int r1,
                     int n_in);
    /* Y[r, o] = W[o, :]·X[r, :] (+ bias[o]) for o in [o0, o1), r < n_rows; Y row stride n_out.
     * Each element is computed exactly as mv_bf16 computes row o for x = X[r] (bit-identical),
     * while W streams from memory once for all rows. */
    void (*mm_bf16)(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int o0, int o1, int n_in, int n_out, int n_rows);
    /* The prefill GEMM (gemm.c); both NULL when the variant widens W for sgemm instead (scalar).
     * gemm_pack writes rows [r0, r1) of X[*, n_in] into xp in the kernel's layout (n_in rounded
     * up to 32 floats' room per row); gemm_bf16 computes Y[r, o] = W[o, :]·X[r, :] (+ bias[o])
     * for o in [o0, o1), r < n_rows, Y row stride ldy, each element the same whatever range
     * it is computed in. */
    void (*gemm_pack)(void *restrict xp, const float *restrict x, int r0, int r1, int n_in);
    void (*gemm_bf16)(float *restrict y, int ldy, const uint16_t *restrict w,
                      const void *restrict xp, const float *restrict bias, int o0, int o1,
                      int n_rows, int n_in);
    /* n_iter rounds of independent FMAs; returns the multiply-adds done (FMA-peak probe). */
    uint64_t (*fma_probe)(long n_iter);
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
    /* x[c] += inv_b[c]·sin²(a[c]·x[c]) (SnakeBeta, one time step of n channels). */
    void (*snake)(float *x, int n, const float *a, const float *inv_b);
    /* x[i] = ELU(x[i]), alpha 1 (the speech encoder's activation). */
    void (*elu)(float *x, size_t n);
    /* XOR of the n_bytes / 8 whole 64-bit words at p (bandwidth probe). */
    uint64_t (*xor64)(const void *p, size_t n_bytes);
    /* y[r, :n] += v[:n] and y[r, :n] += x[r, :n] for n_rows rows (conv bias, residual). */
    void (*add_bias)(float *y, int64_t ldy, const float *v, int64_t n_rows, int n);
    void (*add_rows)(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n);
    /* 1-input-channel stride-1 conv product y[i, o] = Σ_j w[o, j]·win[i + j] (no bias), k <= 16,
     * c_out a multiple of 16 up to 256, bit-identical to the sgemm it replaces; NULL when the
     * variant has none (conv.c then runs the sgemm). */
    void (*conv_c1)(float *y, int64_t ldy, const float *win, int64_t n, const float *w, int k,
                    int c_out);
    /* y[i·ldy + l] = Σ_j a[i·cols + j]·x[j·ldx + l] for i < rows, l < n, zero a skipped, j in
     * order (the Winograd transforms); NULL when the variant has none (conv.c's scalar loop). */
    void (*mix_rows)(float *restrict y, int64_t ldy, const float *a, int rows, int cols,
                     const float *restrict x, int64_t ldx, int n);
    /* y[r, p·48 + l] = Σ_i x[r, i]·w[p, i, l] for r < n_rows and columns p·48 + l < n:
     * weights pre-packed in 48-column panels [n_panels, k, 48] (the Winograd products); NULL when
     * the variant has none (conv.c runs one sgemm per panel). */
    void (*gemm_p48)(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                     const float *restrict w, int k, int n_rows, int n);
    /* gemm_p48 with IEEE-half panels (qvk_p48_pack_f16): each element one FMA chain from zero
     * over i in order, on exactly widened weights, which is the avx512 gemm_p48's arithmetic on
     * f32 panels of the same values (same bits); NULL when the variant has none (conv.c's scalar
     * loop, the same chain with fmaf). */
    void (*gemm_p48_f16)(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                         const uint16_t *restrict w, int k, int n_rows, int n);
} qvk_impl;

extern const qvk_impl qvk_impl_scalar;
extern const qvk_impl qvk_impl_avx2;
extern const qvk_impl qvk_impl_avx512;

/* Table entries defined in conv*.c. */
void qvk_add_bias_avx2(float *y, int64_t ldy, const float *v, int64_t n_rows, int n);
void qvk_add_rows_avx2(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n);
void qvk_conv_c1_avx512(float *y, int64_t ldy, const float *win, int64_t n, const float *w, int k,
                        int c_out);
void qvk_mix_rows_avx512(float *restrict y, int64_t ldy, const float *a, int rows, int cols,
                         const float *restrict x, int64_t ldx, int n);
void qvk_gemm_p48_avx512(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                         const float *restrict w, int k, int n_rows, int n);
void qvk_gemm_p48_f16_avx512(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                             const uint16_t *restrict w, int k, int n_rows, int n);
void qvk_gemm_p48_f16_avx2(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                           const uint16_t *restrict w, int k, int n_rows, int n);

void qvk_gemm_pack_avx2(void *restrict xp, const float *restrict x, int r0, int r1, int n_in);
void qvk_gemm_bf16_avx2(float *restrict y, int ldy, const uint16_t *restrict w,
                        const void *restrict xp, const float *restrict bias, int o0, int o1,
                        int n_rows, int n_in);
void qvk_gemm_pack_avx512(void *restrict xp, const float *restrict x, int r0, int r1, int n_in);
void qvk_gemm_bf16_avx512(float *restrict y, int ldy, const uint16_t *restrict w,
                          const void *restrict xp, const float *restrict bias, int o0, int o1,
                          int n_rows, int n_in);
uint64_t qvk_fma_probe_avx2(long n_iter);
uint64_t qvk_fma_probe_avx512(long n_iter);

/* The variant in use (qvk_init() is run first if needed). */
const qvk_impl *qvk_impl_get(void);

/* ---- row split of the memory-bound matvecs ---------------------------------------------- */

/* Output rows are handed out in chunks of ~256 KB of weights (a multiple of 16 rows) from a shared
 * counter, so a thread the shared machine preempts does not hold the others up at the end of a
 * call; a row's arithmetic never depends on the thread that runs it (bit-identical for any
 * thread count). One thread takes all rows as one range (its row kernel prefetches across
 * blocks unbroken). */
typedef struct {
    _Atomic int next;
    int chunk, n;
} qvk_row_queue;

static inline void qvk_row_queue_init(qvk_row_queue *q, int n_rows, size_t row_bytes) {
    size_t c = (((size_t)256 << 10) / (row_bytes ? row_bytes : 1) + 15) & ~(size_t)15;
    q->chunk = c < 16 ? 16 : c > (size_t)n_rows ? (n_rows > 0 ? n_rows : 1) : (int)c;
    q->n = n_rows;
    atomic_init(&q->next, 0);
}

/* Claims the next range [*r0, *r1) for a thread of a pool of nth; 0 when none is left. */
static inline int qvk_row_queue_take(qvk_row_queue *q, int nth, int *r0, int *r1) {
    int c = atomic_fetch_add_explicit(&q->next, 1, memory_order_relaxed);
    long a = (long)c * (nth > 1 ? q->chunk : q->n), b = a + (nth > 1 ? q->chunk : q->n);
    if (a >= q->n) return 0;
    *r0 = (int)a;
    *r1 = b < q->n ? (int)b : q->n;
    return 1;
}

/* Rows of a block in the batched matvecs (several x through one matrix): ~16 KB of weights, a
 * multiple of 8, so the block read from memory for the first x is still in L1 for the others. */
static inline int qvk_batch_block_rows(size_t row_bytes) {
    size_t r = ((size_t)16 << 10) / (row_bytes ? row_bytes : 1) & ~(size_t)7;
    return r < 8 ? 8 : (int)r;
}

/* ---- row-block matvec kernels ------------------------------------------------------------ */

/* Prefetches n_bytes at p into L2 (prefetcht1). A kernel streaming a block of rows calls this
 * every step for its share of the next block (one contiguous range): the hardware prefetcher
 * serves one linear stream per core well but the block's interleaved row streams badly (~50 %
 * of the read probe), and prefetching into L1 evicts the current block once rows pass ~2 KB.
 * always_inline: GCC 12 deemed an earlier side-effect-free prefetch helper const and deleted
 * the calls. */
static inline __attribute__((always_inline)) void qvk_prefetch_l2(const char *p, int n_bytes) {
#pragma GCC unroll 8
    for (int l = 0; l < n_bytes; l += 64)
        __builtin_prefetch(p + l, 0, 2);
}

#endif
