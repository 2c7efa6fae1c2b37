/* kernels.h — numeric kernels of qvoice (project-internal API, prefix qvk_).
 * Key design: kernels that take a qvk_pool split *output rows* (never the reduction axis), so
 * results are bit-identical for any thread count (pool == NULL runs on the caller); qvk_init()
 * picks scalar / AVX2 / AVX-512 from CPUID once (QV_KERNELS=scalar|avx2|avx512 forces one), and
 * every variant is tested against the scalar one and a double-precision reference.
 */
#ifndef QV_KERNELS_H
#define QV_KERNELS_H

/* Layout conventions: matrices are row-major [out, in] as PyTorch stores Linear weights, so a
 * matvec is y[o] = sum_i W[o*in + i] * x[i]. Sequences are time-major [T, C] for transformer
 * stages and the speech decoder's convolutions, channels-first [C, T] for the others (as the
 * PyTorch modules hold them).
 * Weights may sit in an mmap and are only as aligned as their element type: kernels use
 * unaligned loads. Activation buffers the caller allocates should be 64-byte aligned
 * (qvk_alloc). No kernel allocates: the ones that need scratch take it as an argument and say
 * how much.
 *
 * Accuracy: dot products accumulate in f32 with a variant-specific order (within n·2⁻²⁴·Σ|wᵢxᵢ|
 * of the exact value; measured ~1e-3 of that bound); SIMD exp / sin (softmax, silu, swiglu,
 * snakebeta) are within ~2 ulp of libm; norms accumulate their statistics in double.
 */

#include <stddef.h>
#include <stdint.h>

/* ---- setup ------------------------------------------------------------------------------ */

/* Picks the kernel variant (idempotent, thread-safe). Called implicitly by qvk_pool_create. */
void qvk_init(void);
/* "scalar", "avx2" or "avx512": the variant in use. */
const char *qvk_variant(void);
/* Switches to the named variant; -1 if unknown or this CPU lacks it (variant unchanged).
 * For tests and benchmarks: not safe while kernels run on other threads. */
int qvk_set_variant(const char *name);

/* 64-byte aligned allocation of n bytes (rounded up); NULL on failure. Free with qvk_free.
 * From 4 MB up the block is 2 MB aligned and advised for transparent huge pages (KV caches). */
void *qvk_alloc(size_t n_bytes);
/* Frees a qvk_alloc block; accepts NULL. */
void qvk_free(void *p);

/* Reads n_bytes at p (any alignment) at full vector width and returns a checksum (XOR of the
 * 64-bit words, tail bytes zero-extended): the read-bandwidth probe that benchmarks compare
 * matvec throughput with. */
uint64_t qvk_mem_read(const void *p, size_t n_bytes);
/* Runs n_iter rounds of independent f32 FMAs at the variant's full vector width and returns the
 * multiply-adds done (0 when the variant has no probe): the compute-peak probe that benchmarks
 * compare the prefill GEMM with. */
uint64_t qvk_fma_probe(long n_iter);

/* ---- thread pool ------------------------------------------------------------------------ */

typedef struct qvk_pool qvk_pool;
/* A job: called once per thread with ith in [0, nth); the calling thread runs ith = 0. */
typedef void (*qvk_job)(int ith, int nth, void *arg);

/* Persistent pool of n_threads (>= 1, the caller counts as one). NULL on failure. */
qvk_pool *qvk_pool_create(int n_threads);
/* Accepts NULL. Joins the workers. */
void qvk_pool_free(qvk_pool *pool);
/* Polling before a waiting thread sleeps: iters pause loops (0: sleep at once, < 0: the default,
 * ~20-50 µs). A pool that shares its cores with a background thread (the speech decoder beside
 * generation) sets 0, so that every wait hands the core to that thread. */
void qvk_pool_set_spin(qvk_pool *pool, int iters);
/* Threads in the pool (1 for NULL). */
int qvk_pool_threads(const qvk_pool *pool);
/* Runs fn on every thread and returns when all are done. Not re-entrant. */
void qvk_pool_run(qvk_pool *pool, qvk_job fn, void *arg);
/* qvk_pool_run for a job whose threads take all their work from a shared queue (any thread may
 * do any part, a thread finding none left returns): when the caller's fn returns, only the workers
 * that have already started are waited for, and a worker still waking up skips the job. A late
 * worker (asleep, or preempted on a busy machine) then costs the caller nothing. */
void qvk_pool_run_queued(qvk_pool *pool, qvk_job fn, void *arg);

/* ---- conversions ------------------------------------------------------------------------ */

static inline float qvk_bf16_to_f32_1(uint16_t b) {
    union { uint32_t u; float f; } v = { (uint32_t)b << 16 };
    return v.f;
}
/* dst[i] = bf16 src[i] widened (exact). */
void qvk_bf16_to_f32(float *restrict dst, const uint16_t *restrict src, size_t n);
/* Round-to-nearest-even to bf16 (NaN stays NaN). */
void qvk_f32_to_bf16(uint16_t *restrict dst, const float *restrict src, size_t n);
/* IEEE half to f32 (for F16 checkpoints). */
void qvk_f16_to_f32(float *restrict dst, const uint16_t *restrict src, size_t n);
/* f32 to IEEE half, round-to-nearest-even (|x| ≥ 65520 becomes ±inf, NaN stays NaN). */
void qvk_f32_to_f16(uint16_t *restrict dst, const float *restrict src, size_t n);

/* ---- matrix-vector products (decode path; memory-bound) -------------------------------- */

/* y[n_out] = W[n_out, n_in] (bf16) · x[n_in] (+ bias[n_out] if bias != NULL), f32 accumulate. */
void qvk_matvec_bf16(qvk_pool *pool, float *restrict y, const uint16_t *restrict w,
                     const float *restrict x, const float *restrict bias, int n_out, int n_in);
/* Same with f32 weights. */
void qvk_matvec_f32(qvk_pool *pool, float *restrict y, const float *restrict w,
                    const float *restrict x, const float *restrict bias, int n_out, int n_in);

/* Several bf16 matrices applied to the same x in one pool dispatch (QKV, gate/up): all threads
 * stay busy across the whole set of rows and the pool is woken once. */
typedef struct {
    float *y;            /* [n_out] */
    const uint16_t *w;   /* [n_out, n_in] */
    const float *bias;   /* [n_out] or NULL */
    int n_out;
} qvk_mv;
void qvk_matvec_bf16_multi(qvk_pool *pool, const float *restrict x, int n_in,
                           const qvk_mv *mv, int n_mv);

/* Several vectors through the same matrices (the frame step of concurrent sessions, B <=
 * QVK_BATCH_MAX): y_k = W·x_k for x [n_x, n_in], each mv.y being [n_x, n_out], row-major. Each
 * block of W rows streams from memory once and is re-read from cache for the other vectors;
 * every y_k is bit-identical to qvk_matvec_bf16_multi of x_k alone. */
#define QVK_BATCH_MAX 8
void qvk_matvec_bf16_batch(qvk_pool *pool, const float *restrict x, int n_x, int n_in,
                           const qvk_mv *mv, int n_mv);

/* ---- batched linear layers (prefill, codec, encoders; compute-bound) --------------------- */

/* Y[n_rows, n_out] = X[n_rows, n_in] · W[n_out, n_in]^T (+ bias). f32 weights, cblas_sgemm. */
void qvk_linear_f32(float *restrict y, const float *restrict x, const float *restrict w,
                    const float *restrict bias, int n_rows, int n_in, int n_out);
/* Y_m[n_rows, n_out_m] = X[n_rows, n_in] · W_mᵀ (+ bias_m) for bf16 matrices sharing X (QKV,
 * gate/up; mv[m].y is [n_rows, n_out]) in one pool dispatch, output columns split over the pool,
 * each W read once for all rows; bit-identical for any pool size. Up to
 * QVK_LINEAR_DIRECT_MAX_ROWS rows every element is bit-identical to qvk_matvec_bf16 of its row.
 * Above, the variant's GEMM: AVX-512 splits X into bf16 hi + lo for vdpbf16ps (X kept to 2⁻¹⁶
 * relative, exact products, f32 sums: gemm_avx512.c); AVX2 widens W in registers for f32 FMAs
 * (gemm_avx2.c); scalar widens W chunk by chunk into scratch for sgemm (each pool thread calls
 * single-threaded OpenBLAS). scratch:
 * qvk_linear_bf16_scratch(n_rows, n_in, largest n_out) floats (the GEMMs touch only the
 * n_rows·n_in part holding the packed X). */
#define QVK_LINEAR_DIRECT_MAX_ROWS 8
size_t qvk_linear_bf16_scratch(int n_rows, int n_in, int n_out);
void qvk_linear_bf16_multi(qvk_pool *pool, const float *restrict x, int n_rows, int n_in,
                           const qvk_mv *mv, int n_mv, float *restrict scratch);
/* The same for one matrix. */
void qvk_linear_bf16(qvk_pool *pool, float *restrict y, const float *restrict x,
                     const uint16_t *restrict w, const float *restrict bias, int n_rows,
                     int n_in, int n_out, float *restrict scratch);
/* General sgemm passthrough: C[M,N] = alpha·op(A)·op(B) + beta·C, row-major, like cblas; always
 * single-threaded (parallelism is the caller's pool). */
void qvk_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* ---- element-wise and normalisation (in place allowed: y may equal x) ------------------ */

/* y = w ⊙ x / sqrt(mean(x²) + eps), mean in f32 like the reference (double accumulate ok). */
void qvk_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* y = (x − mean)/sqrt(var + eps) ⊙ w + b (population variance); b may be NULL. */
void qvk_layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps);
void qvk_softmax(float *x, int n);                 /* in place, max-subtracted */
void qvk_silu(float *x, int n);                    /* x·sigmoid(x) */
void qvk_gelu_erf(float *x, int n);                /* 0.5·x·(1 + erf(x/√2)) */
void qvk_elu(float *x, size_t n);                  /* alpha = 1; SIMD ≤ 2 ulp from expm1f */
/* Cosine similarity of two vectors (double accumulate); 0 when either is zero. */
double qvk_cosine(const float *a, const float *b, int n);
/* x[T, C] (time-major, row stride ldx) in place: x + sin²(exp(a_c)·x) / (exp(b_c) + 1e-9); a, b
 * are log-space per channel. */
void qvk_snakebeta(float *x, int64_t ldx, int n_t, int n_ch, const float *log_alpha,
                   const float *log_beta);
/* y[i] = silu(g[i]) * u[i] (SwiGLU join). */
void qvk_swiglu(float *y, const float *g, const float *u, int n);

/* ---- RoPE (split-half / NeoX rotate_half) ---------------------------------------------- */

/* cos/sin tables for one position: c[i] = cos(pos·f_i), s[i] = sin(pos·f_i), i < head_dim/2,
 * f_i = 1/theta^(2i/head_dim) computed in f32 like the reference. */
void qvk_rope_table(float *c, float *s, int head_dim, int pos, float theta);
/* x[n_heads, head_dim] in place: y[i] = x[i]c − x[i+h]s, y[i+h] = x[i+h]c + x[i]s, h = head_dim/2. */
void qvk_rope_apply(float *x, int n_heads, int head_dim, const float *c, const float *s);

/* ---- attention -------------------------------------------------------------------------- */

/* One query position over a cache of n_ctx keys/values, GQA (query head j uses kv head
 * j / (n_heads/n_kv_heads)). q [n_heads*hd]; k, v [n_ctx, n_kv_heads*hd] with row stride
 * kv_stride floats; out [n_heads*hd]. Softmax in f32. scratch: n_heads*n_ctx floats.
 * KV-head groups are split across the pool (bit-identical for any thread count). */
void qvk_attend(qvk_pool *pool, float *restrict out, const float *restrict q,
                const float *k, const float *v, int n_ctx, int kv_stride, int n_heads,
                int n_kv_heads, int head_dim, float scale, float *restrict scratch);

/* ---- 1-D convolutions (conv.c) ------------------------------------------------------------ */

enum qvk_pad { QVK_PAD_ZERO, QVK_PAD_REFLECT, QVK_PAD_REPLICATE };
enum qvk_act { QVK_ACT_NONE, QVK_ACT_RELU, QVK_ACT_ELU };

typedef struct {
    int c_in, c_out, k, stride, dilation;
    int pad_left, pad_right;  /* samples added before/after (reflect excludes the edge sample) */
    enum qvk_pad pad;
    /* the chunked convs only: */
    enum qvk_act act_in;      /* applied to the (padded) input before the conv */
    enum qvk_act act_out;     /* applied after bias */
    int residual;             /* 1: y = y + (conv + bias), the residual read from y itself */
} qvk_conv;

/* Output length: (t_in + pad_left + pad_right − dilation·(k−1) − 1) / stride + 1 (0 if < 1). */
int64_t qvk_conv1d_out_len(const qvk_conv *cv, int64_t t_in);
/* Causal "MimiConv1d" geometry: left pad K_eff − stride, right pad so that t_out = ⌈t_in/stride⌉. */
void qvk_conv_causal(qvk_conv *cv, int64_t t_in);
/* "same" geometry for odd effective kernels (ECAPA): pad = dilation·(k−1)/2 each side. */
void qvk_conv_same(qvk_conv *cv);

/* Transposed conv, W [c_in, c_out, k] (PyTorch ConvTranspose1d), b [c_out] or NULL:
 * y[o, t·stride + j] += Σ_i x[i, t]·W[i, o, j] over the full length (t_in−1)·stride + k,
 * of which the first t_in·stride + k − stride − trim_right samples are kept (trim_right = k − stride
 * gives the causal "right trim only" of the speech decoder). Returns the kept length.
 * scratch: qvk_conv_transpose1d_scratch() floats. */
size_t qvk_conv_transpose1d_scratch(int c_in, int c_out, int k, int t_in);
int qvk_conv_transpose1d(float *restrict y, const float *restrict x, int c_in, int c_out,
                         int t_in, int k, int stride, int trim_right, const float *restrict w,
                         const float *restrict b, float *restrict scratch);

/* Long inputs in chunks, shared by a pool (NULL = caller only). Scratch floats one thread needs (independent of t_in); with a pool, scratch
 * holds qvk_pool_threads(pool) such slices. */
size_t qvk_conv_chunk_scratch(const qvk_conv *cv);
/* y[c_out, t_out] (row stride ldy) = conv(x[c_in, t_in] (row stride ldx)); W [c_out, c_in, k]
 * (PyTorch Conv1d), bias [c_out] or NULL. Each chunk's padded input window is gathered (and
 * activated once), unfolded (im2col) and multiplied with one sgemm. Bit-identical for any
 * thread count. */
void qvk_conv1d_chunked(qvk_pool *pool, const qvk_conv *cv, float *y, int64_t ldy, const float *x,
                        int64_t ldx, int64_t t_in, const float *w, const float *bias,
                        float *scratch);
/* Time-major: x [t_in, c_in] (row stride ldx), y [t_out, c_out] (row stride ldy), W [c_out, k,
 * c_in] (taps outermost: qvk_conv_weights_tm permutes a PyTorch weight once). The gathered
 * window is one contiguous block per chunk and each unfolded row is k contiguous copies; this is
 * the layout the speech encoder runs in. */
void qvk_conv1d_chunked_tm(qvk_pool *pool, const qvk_conv *cv, float *y, int64_t ldy,
                           const float *x, int64_t ldx, int64_t t_in, const float *w,
                           const float *bias, float *scratch);
/* dst [c_out, k, c_in] ← src [c_out, c_in, k]. */
void qvk_conv_weights_tm(float *dst, const float *src, int c_out, int c_in, int k);
/* Short time-major windows with no padding (the caller keeps the context rows in front): x
 * [w_in, c_in] → y [n, c_out], n = w_in − k + 1. Dense: y[t] = bias + Σ_j x[t + j] · W_jᵀ, one
 * sgemm per tap on a shifted view, W tap-major [k, c_out, c_in]. */
void qvk_conv1d_taps_tm(float *y, const float *x, int w_in, int c_in, int c_out, int k,
                        const float *wt, const float *bias);
/* To one channel: Z[r, j] = x[r] · W_j over all w_in rows (one sgemm into z [w_in, k] floats),
 * y[t] = Σ_j Z[t + j, j] + bias; W [k, c_in] (PyTorch's [1, c_in, k] with taps outermost). */
void qvk_conv1d_to1_tm(float *y, const float *x, int w_in, int c_in, int k, const float *w,
                       float bias, float *z);
/* Depthwise: y[t, c] = Σ_j w[c, j]·x[t + j, c] + b[c] for x [n + k − 1, ch], w as PyTorch holds
 * it ([ch, 1, k]). */
void qvk_conv1d_depthwise_tm(float *y, const float *x, int n, int ch, int k, const float *w,
                             const float *b);
/* Weights packed once in 48-column panels for the AVX-512 micro-kernel (the speech decoder's
 * per-frame products, where sgemm would repack the weights on every call). A [k, n] matrix
 * (row stride ldw; trans: w is [n, k]) → qvk_p48_size floats. */
size_t qvk_p48_size(int k, int n);
void qvk_p48_pack(float *dst, const float *w, int k, int n, int64_t ldw, int trans);
/* The same panels in IEEE half (qvk_p48_size elements, each rounded to nearest even: exact for a
 * matrix stored in f16, the --decoder-f16 speech decoder's), half the bytes. */
void qvk_p48_pack_f16(uint16_t *dst, const float *w, int k, int n, int64_t ldw, int trans);
/* Packed panels of either kind: exactly one of f32, f16 is set (borrowed). */
typedef struct {
    const float *f32;
    const uint16_t *f16;
} qvk_p48w;
/* y[r, :n] = x[r, :k] · W for r < n_rows (row strides ldy ≥ n, ldx ≥ k). Half panels are widened
 * exactly and every element is one FMA chain from zero over k in order, in every variant: the
 * bits of the avx512 variant's f32 panels holding the same values (the f32 panels of the avx2 and
 * scalar variants run sgemm, whose order is OpenBLAS's). */
void qvk_p48w_matmul(float *y, int64_t ldy, const float *x, int64_t ldx, qvk_p48w w, int k, int n,
                     int n_rows);
void qvk_p48_matmul(float *y, int64_t ldy, const float *x, int64_t ldx, const float *wp, int k,
                    int n, int n_rows);
/* qvk_conv_transpose1d time-major, x [t_in, c_in] (row stride ldx) → y [kept, c_out] (row stride
 * ldy), with W packed as qvk_p48_pack(W viewed as [c_in, c_out·k]) (or its f16 form, qvk_p48w):
 * the speech decoder's activations, whose products need no transpose then. */
size_t qvk_conv_transpose1d_p48_scratch(int c_in, int c_out, int k, int t_in);
int qvk_conv_transpose1d_p48w(float *restrict y, int64_t ldy, const float *restrict x,
                              int64_t ldx, int c_in, int c_out, int t_in, int k, int stride,
                              int trim_right, qvk_p48w wp, const float *restrict b,
                              float *restrict scratch);
int qvk_conv_transpose1d_p48(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                             int c_in, int c_out, int t_in, int k, int stride, int trim_right,
                             const float *wp, const float *restrict b, float *restrict scratch);
/* Winograd minimal filtering F(m, k) for stride-1 dense convs (the speech decoder's k = 7 convs):
 * each tile of m outputs (spaced by the dilation) costs α = m + k − 1 products per channel pair
 * instead of m·k, as α products [tiles, c_in] by [c_in, c_out] (packed panels). The filter
 * transform runs in double at load; k = 7, m = 5 is 3.2× fewer products. */
#define QVK_WINO_MAX_A 16
typedef struct {
    int m, k, alpha;
    float bt[QVK_WINO_MAX_A * QVK_WINO_MAX_A]; /* input transform [α, α] */
    float at[QVK_WINO_MAX_A * QVK_WINO_MAX_A]; /* output transform [m, α] */
    double g[QVK_WINO_MAX_A * QVK_WINO_MAX_A]; /* filter transform [α, k] */
} qvk_wino;
/* Transforms for F(m, k); -1 when m + k − 1 exceeds the supported point set. */
int qvk_wino_init(qvk_wino *wn, int m, int k);
/* U ← W [c_out, c_in, k] (PyTorch Conv1d) through the filter transform, packed in 48-column
 * panels per point; qvk_wino_weights_size floats. */
size_t qvk_wino_weights_size(const qvk_wino *wn, int c_out, int c_in);
void qvk_wino_weights(const qvk_wino *wn, float *u, const float *w, int c_out, int c_in);
/* Scratch floats qvk_conv1d_wino needs for n outputs at dilation dil. */
size_t qvk_wino_scratch(const qvk_wino *wn, int c_in, int c_out, int n, int dil);
/* Time-major (the speech decoder's layout: the tiles' rows are read and written in place, no
 * transposes): y[n, c_out] with y[t, :] = bias + Σ_j W_j · x[t + j·dil, :] for x [w_in, c_in]
 * holding the causal context first (n = w_in − (k − 1)·dil), W given as U from
 * qvk_wino_weights. */
void qvk_conv1d_wino(const qvk_wino *wn, float *y, const float *x, int w_in, int c_in, int c_out,
                     int dil, const float *u, const float *bias, float *scratch);
/* Causal ConvTranspose1d with kernel 2r, stride r (the decoder blocks' upsampling) as a 2-tap
 * Winograd conv over [context row | new inputs] whose r·c_out product channels are the output
 * phases: with F(4, 2), 1.25 products per input step instead of 2. Time-major: x [w_in, c_in]
 * (one context row first), y [(w_in − 1)·r, c_out] = the new samples only, plus bias; U from
 * qvk_wino_weights_ct (W [c_in, c_out, 2r] as PyTorch stores it; qvk_wino_weights_size(wn,
 * r·c_out, c_in) floats), scratch qvk_wino_scratch(wn, c_in, r·c_out, w_in − 1, 1). wn: k = 2. */
void qvk_wino_weights_ct(const qvk_wino *wn, float *u, const float *w, int c_in, int c_out, int r);
void qvk_conv_transpose1d_wino(const qvk_wino *wn, float *y, const float *x, int w_in, int c_in,
                               int c_out, int r, const float *u, const float *bias,
                               float *scratch);
/* Channels [c0, c1) of y only, of qvk_conv1d_wino (ph = 1, dil) or qvk_conv_transpose1d_wino
 * (ph = r, dil = 1; c_out is y's channels): the other columns of y are not written and these get
 * the whole call's bits, so a pool can share one conv out by channel ranges (each part redoes
 * the input transform). c0 and c1 are multiples of QVK_P48_NR (c1 may be c_out); with ph > 1
 * so must c_out be, unless [c0, c1) is all of it. scratch: the whole call's, one per part. */
#define QVK_P48_NR 48
void qvk_wino_part(const qvk_wino *wn, float *y, const float *x, int w_in, int c_in, int c_out,
                   int ph, int dil, const float *u, const float *bias, float *scratch, int c0,
                   int c1);
/* y[r, :n] += v[:n] per row, and y[r, :n] += x[r, :n] (exact: same bits in every variant). */
void qvk_add_bias(float *y, int64_t ldy, const float *v, int64_t n_rows, int n);
void qvk_add_rows(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n);

#endif
