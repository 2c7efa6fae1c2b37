/* clone_impl.h — internals shared by the clone/ files: the chunked 1-D convolution that the
 * speaker encoder and the speech-tokenizer encoder run on (channels-first [C, T]).
 */
#ifndef QV_CLONE_IMPL_H
#define QV_CLONE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

enum qvc_pad { QVC_PAD_ZERO, QVC_PAD_REFLECT, QVC_PAD_REPLICATE };
enum qvc_act { QVC_ACT_NONE, QVC_ACT_RELU, QVC_ACT_ELU };

typedef struct {
    int c_in, c_out, k, stride, dilation;
    int pad_left, pad_right;   /* reflect excludes the edge sample (PyTorch "reflect") */
    enum qvc_pad pad;
    enum qvc_act act_in;       /* applied to the (padded) input before the conv */
    enum qvc_act act_out;      /* applied after bias */
    int residual;              /* 1: y = y + (conv + bias), the residual read from y itself */
} qvc_conv;

/* Output length: (t_in + pad_left + pad_right − dilation·(k−1) − 1)/stride + 1, or 0. */
int64_t qvc_conv_out_len(const qvc_conv *cv, int64_t t_in);
/* Scratch floats one thread of qvc_conv1d / qvc_conv1d_tm needs (independent of t_in: time is
 * processed in chunks); with a pool, scratch holds qvk_pool_threads(pool) such slices. */
size_t qvc_conv_scratch(const qvc_conv *cv);
/* y[c_out, t_out] (row stride ldy) = conv(x[c_in, t_in] (row stride ldx)); W [c_out, c_in, k]
 * (PyTorch Conv1d), bias [c_out] or NULL. Time is cut into chunks: each chunk's padded input
 * window is gathered (and activated once), unfolded (im2col) and multiplied with one sgemm.
 * pool (NULL = caller only) shares the chunks; OpenBLAS should then run single-threaded. */
void qvc_conv1d(qvk_pool *pool, const qvc_conv *cv, float *y, int64_t ldy, const float *x,
                int64_t ldx, int64_t t_in, const float *w, const float *bias, float *scratch);

/* Time-major variant: x [t_in, c_in] (row stride ldx), y [t_out, c_out] (row stride ldy),
 * W [c_out, k, c_in] (taps outermost: qvc_conv_weights_tm permutes a PyTorch weight once).
 * The gathered window is one contiguous block per chunk and each unfolded row is k contiguous
 * copies, so no strided gathers; this is the layout the speech encoder runs in. */
void qvc_conv1d_tm(qvk_pool *pool, const qvc_conv *cv, float *y, int64_t ldy, const float *x,
                   int64_t ldx, int64_t t_in, const float *w, const float *bias, float *scratch);
/* dst [c_out, k, c_in] ← src [c_out, c_in, k]. */
void qvc_conv_weights_tm(float *dst, const float *src, int c_out, int c_in, int k);

/* 1-input-channel stride-1 conv product (no bias) from an activated window; see conv_avx512.c. */
void qvc_conv_c1_avx512(float *y, int64_t ldy, const float *win, int64_t n, const float *w, int k,
                        int c_out);
/* y[r, :n] += v[:n] per row, and y[r, :n] += x[r, :n]; AVX2 when available (exact either way). */
void qvc_add_bias(float *y, int64_t ldy, const float *v, int64_t n_rows, int n);
void qvc_add_rows(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n);
void qvc_add_bias_avx2(float *y, int64_t ldy, const float *v, int64_t n_rows, int n);
void qvc_add_rows_avx2(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n);

/* qvk_alloc for large activation buffers, with the 2 MB-aligned interior advised as transparent
 * huge pages: first-touch page faults were ~8 % of the speech encoder with 4 kB pages. Free with
 * qvk_free. NULL on failure. */
void *qvc_alloc_large(size_t n_bytes);

/* Causal "MimiConv1d" geometry: left pad K_eff − stride, right pad so that t_out = ⌈t_in/stride⌉. */
void qvc_conv_causal(qvc_conv *cv, int64_t t_in);
/* "same" geometry for odd effective kernels (ECAPA): pad = dilation·(k−1)/2 each side. */
void qvc_conv_same(qvc_conv *cv);

#endif
