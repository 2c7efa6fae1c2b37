/* matvec_q8.c — int8 matvecs: quantization of weights (load time) and activations (per call),
 * the scalar reference row kernel, and the pool split (matvecs: chunks from a shared counter as
 * in matvec.c; a row's arithmetic never depends on the thread count). The ISA follows qvk_variant().
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/q8.h"
#include "kernels/q8_impl.h"

static qvk_q8_rows_fn by_name(const char *v) {
    if (!strcmp(v, "avx512")) return qvk_q8_rows_avx512;
    if (!strcmp(v, "avx2")) return qvk_q8_rows_avx2;
    if (!strcmp(v, "scalar")) return qvk_q8_rows_scalar;
    return NULL;
}

void qvk_q8_rows_scalar(float *restrict y, const int8_t *restrict q, const float *restrict scale,
                        const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict bias, int r0, int r1, int n_in) {
    for (int r = r0; r < r1; r++) {
        const int8_t *w = q + (size_t)r * n_in;
        float acc = 0;
        for (int g = 0; g < n_in / QVK_Q8_GROUP; g++) {
            int32_t d = 0;
            for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i++)
                d += (int32_t)w[i] * xq[i];
            acc += xs[g] * (float)d;
        }
        y[r] = bias ? acc * scale[r] + bias[r] : acc * scale[r];
    }
}

/* ---- quantization ----------------------------------------------------------------------- */

static void quantize_row(int8_t *restrict q, float *restrict s, const float *restrict x, int n) {
    float amax = 0;
    for (int i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    *s = amax / 127.0f;
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    for (int i = 0; i < n; i++) { /* round half away from zero; |v| <= 127 by construction */
        float v = x[i] * inv;
        v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
        q[i] = (int8_t)(int)(v + (v < 0 ? -0.5f : 0.5f));
    }
}

void qvk_q8_quantize_x(int8_t *restrict xq, float *restrict xs, const float *restrict x, int n_in) {
    if (by_name(qvk_variant()) == qvk_q8_rows_avx512) {
        qvk_q8_quantize_x_avx512(xq, xs, x, n_in);
        return;
    }
    for (int g = 0; g < n_in / QVK_Q8_GROUP; g++)
        quantize_row(xq + g * QVK_Q8_GROUP, xs + g, x + g * QVK_Q8_GROUP, QVK_Q8_GROUP);
}

struct wq_job {
    const qvk_q8_quant *m;
    size_t n_chunks;
    _Atomic size_t next;
};

/* Rows per chunk: ~256 KB of bf16, so the pool balances on a shared machine. */
static int wq_chunk_rows(const qvk_q8_quant *m) {
    return ((256 << 10) / (2 * m->n_in) + 15) & ~15;
}

static size_t wq_chunks(const qvk_q8_quant *m) {
    return ((size_t)m->n_out + wq_chunk_rows(m) - 1) / wq_chunk_rows(m);
}

static void wq_run(int ith, int nth, void *p) {
    struct wq_job *j = p;
    const int avx512 = !strcmp(qvk_variant(), "avx512");
    float row[QVK_Q8_MAX_IN];
    size_t c;
    while ((c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_chunks) {
        const qvk_q8_quant *m = j->m;
        while (c >= wq_chunks(m))
            c -= wq_chunks(m++);
        const int cr = wq_chunk_rows(m);
        int r1 = (int)(c + 1) * cr < m->n_out ? (int)(c + 1) * cr : m->n_out;
        for (int r = (int)c * cr; r < r1; r++) {
            int8_t *q = m->q + (size_t)r * m->n_in;
            const uint16_t *w = m->w + (size_t)r * m->n_in;
            if (avx512) {
                qvk_q8_quantize_row_avx512(q, m->scale + r, w, m->n_in);
            } else {
                qvk_bf16_to_f32(row, w, (size_t)m->n_in);
                quantize_row(q, m->scale + r, row, m->n_in);
            }
        }
    }
}

int qvk_q8_quantize_multi(qvk_pool *pool, const qvk_q8_quant *m, int n) {
    struct wq_job j = {m, 0, 0};
    for (int k = 0; k < n; k++) {
        if (m[k].n_in <= 0 || m[k].n_in % QVK_Q8_GROUP || m[k].n_in > QVK_Q8_MAX_IN) return -1;
        j.n_chunks += wq_chunks(&m[k]);
    }
    qvk_pool_run(pool, wq_run, &j);
    return 0;
}

int qvk_q8_quantize_bf16(qvk_pool *pool, int8_t *restrict q, float *restrict scale,
                         const uint16_t *restrict w, int n_out, int n_in) {
    qvk_q8_quant m = {q, scale, w, n_out, n_in};
    return qvk_q8_quantize_multi(pool, &m, 1);
}

/* ---- matvec ----------------------------------------------------------------------------- */

struct mv_job {
    qvk_q8_rows_fn rows;
    qvk_q8_rows_batch_fn rows_batch; /* NULL: rows per x */
    const int8_t *xq; /* [n_x, n_in] */
    const int32_t *xc; /* rows_batch's corrections, [n_x, n_in / QVK_Q8_GROUP, 16] */
    const float *xs;  /* [n_x, n_in / QVK_Q8_GROUP] */
    const qvk_q8_mv *mv;
    int n_mv, n_in, n_x;
    qvk_row_queue queue; /* over the rows of all matrices, concatenated */
};

/* Rows [a, b) of one matrix for every x: the batched kernel, else a block of rows at a time
 * through the one-vector kernel (matvec.c). */
static void mv_rows(const struct mv_job *j, const qvk_q8_mv *mv, int a, int b) {
    if (j->n_x > 1 && j->rows_batch) {
        j->rows_batch(mv->y, mv->n_out, mv->q, mv->scale, j->xq, j->xc, j->xs, j->n_x, mv->bias, a,
                      b, j->n_in);
        return;
    }
    const int blk = j->n_x > 1 ? qvk_batch_block_rows((size_t)j->n_in) : b - a;
    const int n_g = j->n_in / QVK_Q8_GROUP;
    for (int r = a; r < b; r += blk) {
        const int e = b - r < blk ? b : r + blk;
        for (int k = 0; k < j->n_x; k++)
            j->rows(mv->y + (size_t)k * mv->n_out, mv->q, mv->scale, j->xq + (size_t)k * j->n_in,
                    j->xs + (size_t)k * n_g, mv->bias, r, e, j->n_in);
    }
}

static void mv_run(int ith, int nth, void *p) {
    struct mv_job *j = p;
    int r0, r1;
    while (qvk_row_queue_take(&j->queue, nth, &r0, &r1)) {
        int base = 0;
        for (int m = 0; m < j->n_mv && base < r1; m++) {
            const qvk_q8_mv *mv = &j->mv[m];
            int a = r0 > base ? r0 - base : 0;
            int b = r1 - base < mv->n_out ? r1 - base : mv->n_out;
            if (a < b) mv_rows(j, mv, a, b);
            base += mv->n_out;
        }
    }
}

void qvk_q8_matvec_batch(qvk_pool *pool, const float *restrict x, int n_x, int n_in,
                         const qvk_q8_mv *mv, int n_mv) {
    _Alignas(64) int8_t xq[QVK_Q8_BATCH_MAX_IN];
    float xs[QVK_Q8_BATCH_MAX_IN / QVK_Q8_GROUP];
    for (int k = 0; k < n_x; k++) /* each vector quantized as it would be alone */
        qvk_q8_quantize_x(xq + (size_t)k * n_in, xs + (size_t)k * (n_in / QVK_Q8_GROUP),
                          x + (size_t)k * n_in, n_in);
    const qvk_q8_rows_fn rows = by_name(qvk_variant());
    struct mv_job j = {.rows = rows, .xq = xq, .xs = xs, .mv = mv, .n_mv = n_mv, .n_in = n_in,
                       .n_x = n_x};
    _Alignas(64) int32_t xc[QVK_Q8_BATCH_MAX_IN / QVK_Q8_GROUP * 16];
    if (n_x > 1 && rows == qvk_q8_rows_avx512) {
        qvk_q8_batch_corr_avx512(xc, xq, n_x, n_in);
        j.rows_batch = qvk_q8_rows_batch_avx512, j.xc = xc;
    }
    int n_total = 0;
    for (int m = 0; m < n_mv; m++)
        n_total += mv[m].n_out;
    qvk_row_queue_init(&j.queue, n_total, (size_t)n_in);
    qvk_pool_run_queued(pool, mv_run, &j);
}

void qvk_q8_matvec_multi(qvk_pool *pool, const float *restrict x, int n_in, const qvk_q8_mv *mv,
                         int n_mv) {
    qvk_q8_matvec_batch(pool, x, 1, n_in, mv, n_mv);
}

int qvk_q8_rows(const char *variant, float *restrict y, const int8_t *restrict q,
                const float *restrict scale, const int8_t *restrict xq, const float *restrict xs,
                const float *restrict bias, int r0, int r1, int n_in) {
    const char *cur = qvk_variant();
    if (variant && strcmp(variant, cur)) {
        if (qvk_set_variant(variant)) return -1; /* unsupported: illegal instructions otherwise */
        qvk_set_variant(cur);
    }
    qvk_q8_rows_fn f = by_name(variant ? variant : cur);
    if (!f) return -1;
    f(y, q, scale, xq, xs, bias, r0, r1, n_in);
    return 0;
}
