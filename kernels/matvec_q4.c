/* matvec_q4.c — 4-bit affine matvecs (q4.h): weight quantization (load time / compress tool),
 * activation preparation (per call), the scalar reference row kernel, and the pool split (rows
 * handed out in ~256 KB chunks from a shared counter, as on the int8 path). The ISA follows
 * qvk_variant().
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/q4_impl.h"

#define ROW_ALIGN 16

static void split_rows(int n, int ith, int nth, int *r0, int *r1) {
    int per = (n + nth - 1) / nth;
    per = (per + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
    long a = (long)per * ith, b = a + per;
    *r0 = a < n ? (int)a : n;
    *r1 = b < n ? (int)b : n;
}

static qvk_q4_rows_fn by_name(const char *v) {
    if (!strcmp(v, "avx512")) return qvk_q4_rows_avx512;
    if (!strcmp(v, "avx2")) return qvk_q4_rows_avx2;
    if (!strcmp(v, "scalar")) return qvk_q4_rows_scalar;
    return NULL;
}

void qvk_q4_rows_scalar(const qvk_q4_mv *mv, const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict xsum, int r0, int r1, int n_in) {
    const int n_g = n_in / QVK_Q4_GROUP;
    for (int r = r0; r < r1; r++) {
        const uint8_t *q = mv->q + (size_t)r * (n_in / 2);
        const uint16_t *s = mv->s + (size_t)r * n_g, *b = mv->b + (size_t)r * n_g;
        float acc = 0;
        for (int g = 0; g < n_g; g++) {
            const uint8_t *qg = q + g * (QVK_Q4_GROUP / 2);
            const int8_t *xg = xq + g * QVK_Q4_GROUP;
            int32_t d = 0;
            for (int k = 0; k < QVK_Q4_GROUP / 2; k++)
                d += (qg[k] & 15) * xg[k] + (qg[k] >> 4) * xg[k + QVK_Q4_GROUP / 2];
            acc += qvk_bf16_to_f32_1(s[g]) * xs[g] * (float)d + qvk_bf16_to_f32_1(b[g]) * xsum[g];
        }
        mv->y[r] = mv->bias ? acc + mv->bias[r] : acc;
    }
}

/* ---- quantization ----------------------------------------------------------------------- */

/* rint for |v| <= 2^22 in the default rounding mode, inline: lrintf is a libm call at the
 * baseline ISA (with fmaxf/fminf it took 7 % of a 1.7B q4 run's samples). */
static inline float round_even(float v) {
    const float m = 12582912.0f; /* 1.5 · 2^23 */
    return (v + m) - m;
}


static uint16_t to_bf16(float v) {
    uint16_t h;
    qvk_f32_to_bf16(&h, &v, 1);
    return h;
}

void qvk_q4_quantize_row(uint8_t *restrict q, uint16_t *restrict s, uint16_t *restrict b,
                         const float *restrict w, int n_in) {
    for (int g = 0; g < n_in / QVK_Q4_GROUP; g++) {
        const float *wg = w + g * QVK_Q4_GROUP;
        float lo = wg[0], hi = wg[0];
        for (int i = 1; i < QVK_Q4_GROUP; i++)
            lo = fminf(lo, wg[i]), hi = fmaxf(hi, wg[i]);
        s[g] = to_bf16((hi - lo) / 15.0f), b[g] = to_bf16(lo);
        const float sg = qvk_bf16_to_f32_1(s[g]), bg = qvk_bf16_to_f32_1(b[g]);
        uint8_t *qg = q + g * (QVK_Q4_GROUP / 2);
        /* rint inline and the clamp by comparisons (NaN -> 0): the compiler vectorizes the
         * divisions, the bytes are those of rintf */
        uint8_t v[QVK_Q4_GROUP];
        for (int i = 0; i < QVK_Q4_GROUP; i++) {
            const float t = sg > 0 ? round_even((wg[i] - bg) / sg) : 0.0f;
            v[i] = (uint8_t)(t >= 0 ? (t <= 15 ? (int)t : 15) : 0);
        }
        for (int k = 0; k < QVK_Q4_GROUP / 2; k++)
            qg[k] = (uint8_t)(v[2 * k] | v[2 * k + 1] << 4);
    }
}

struct wq_job {
    uint8_t *q;
    uint16_t *s, *b;
    const uint16_t *w;
    int n_out, n_in;
};

static void wq_run(int ith, int nth, void *p) {
    const struct wq_job *j = p;
    int r0, r1;
    split_rows(j->n_out, ith, nth, &r0, &r1);
    float row[QVK_Q4_MAX_IN];
    const int n_g = j->n_in / QVK_Q4_GROUP;
    for (int r = r0; r < r1; r++) {
        qvk_bf16_to_f32(row, j->w + (size_t)r * j->n_in, (size_t)j->n_in);
        qvk_q4_quantize_row(j->q + (size_t)r * (j->n_in / 2), j->s + (size_t)r * n_g,
                            j->b + (size_t)r * n_g, row, j->n_in);
    }
}

int qvk_q4_quantize_bf16(qvk_pool *pool, uint8_t *restrict q, uint16_t *restrict s,
                         uint16_t *restrict b, const uint16_t *restrict w, int n_out, int n_in) {
    if (n_in <= 0 || n_in % QVK_Q4_GROUP || n_in > QVK_Q4_MAX_IN) return -1;
    struct wq_job j = {q, s, b, w, n_out, n_in};
    qvk_pool_run(pool, wq_run, &j);
    return 0;
}

void qvk_q4_dequantize(float *restrict dst, const uint8_t *restrict q, const uint16_t *restrict s,
                       const uint16_t *restrict b, size_t n_rows, int n_in) {
    const size_t n_g = n_rows * (size_t)(n_in / QVK_Q4_GROUP);
    for (size_t g = 0; g < n_g; g++) {
        const float sg = qvk_bf16_to_f32_1(s[g]), bg = qvk_bf16_to_f32_1(b[g]);
        for (int k = 0; k < QVK_Q4_GROUP / 2; k++) {
            const uint8_t v = q[g * (QVK_Q4_GROUP / 2) + (size_t)k];
            dst[g * QVK_Q4_GROUP + 2 * (size_t)k] = sg * (float)(v & 15) + bg;
            dst[g * QVK_Q4_GROUP + 2 * (size_t)k + 1] = sg * (float)(v >> 4) + bg;
        }
    }
}

static inline int8_t to_q(float v, float inv) {
    v *= inv;
    v = v > -127.0f ? v : -127.0f; /* NaN -> -127, as no input may make a conversion overflow */
    v = v < 127.0f ? v : 127.0f;
    return (int8_t)(int)round_even(v);
}

/* Sixteen independent lanes (max and sum), combined in a fixed order: the compiler vectorizes
 * them at any ISA without reassociating, so every variant prepares the same bytes. */
void qvk_q4_prepare_x(int8_t *restrict xq, float *restrict xs, float *restrict xsum,
                      const float *restrict x, int n_in) {
    enum { L = 16 };
    for (int g = 0; g < n_in / QVK_Q4_GROUP; g++) {
        const float *xg = x + g * QVK_Q4_GROUP;
        float m[L] = {0}, p[L] = {0};
        for (int i = 0; i < QVK_Q4_GROUP; i += L)
            for (int j = 0; j < L; j++) {
                const float v = xg[i + j], a = v < 0 ? -v : v;
                m[j] = a > m[j] ? a : m[j];
                p[j] += v;
            }
        for (int w = L / 2; w > 0; w /= 2)
            for (int j = 0; j < w; j++)
                m[j] = m[j + w] > m[j] ? m[j + w] : m[j], p[j] += p[j + w];
        xs[g] = m[0] / 127.0f, xsum[g] = p[0];
        const float inv = m[0] > 0 ? 127.0f / m[0] : 0.0f;
        int8_t *q = xq + g * QVK_Q4_GROUP;
        for (int k = 0; k < QVK_Q4_GROUP / 2; k++) /* even elements first, then odd */
            q[k] = to_q(xg[2 * k], inv), q[k + QVK_Q4_GROUP / 2] = to_q(xg[2 * k + 1], inv);
    }
}

/* ---- matvec ----------------------------------------------------------------------------- */

struct mv_job {
    qvk_q4_rows_fn rows;
    int batch;        /* the AVX-512 batched kernel (xq in its pair layout) */
    const int8_t *xq; /* [n_x, n_in] */
    const float *xs, *xsum; /* [n_x, n_in / 64] */
    const qvk_q4_mv *mv;
    int n_mv, n_in, n_x;
    qvk_row_queue queue; /* over the rows of all matrices, concatenated */
};

/* Rows [a, b) of one matrix for every x: the batched kernel (QVK_Q4_BATCH_MAX_X x at a time),
 * else a block of rows at a time through the one-vector kernel. */
static void mv_rows(const struct mv_job *j, const qvk_q4_mv *mv, int a, int b) {
    const int n_g = j->n_in / QVK_Q4_GROUP;
    if (j->batch) {
        for (int k = 0; k < j->n_x; k += QVK_Q4_BATCH_MAX_X) {
            qvk_q4_mv m = *mv;
            m.y = mv->y + (size_t)k * mv->n_out;
            const int n = j->n_x - k < QVK_Q4_BATCH_MAX_X ? j->n_x - k : QVK_Q4_BATCH_MAX_X;
            qvk_q4_rows_batch_avx512(&m, j->xq + (size_t)k * j->n_in, j->xs + (size_t)k * n_g,
                                     j->xsum + (size_t)k * n_g, n, a, b, j->n_in);
        }
        return;
    }
    const int blk = j->n_x > 1 ? qvk_batch_block_rows((size_t)j->n_in / 2) : b - a;
    for (int r = a; r < b; r += blk) {
        const int e = b - r < blk ? b : r + blk;
        for (int k = 0; k < j->n_x; k++) {
            qvk_q4_mv m = *mv;
            m.y = mv->y + (size_t)k * mv->n_out;
            j->rows(&m, j->xq + (size_t)k * j->n_in, j->xs + (size_t)k * n_g,
                    j->xsum + (size_t)k * n_g, r, e, j->n_in);
        }
    }
}

static void mv_run(int ith, int nth, void *p) {
    struct mv_job *j = p;
    int r0, r1;
    (void)ith;
    while (qvk_row_queue_take(&j->queue, nth, &r0, &r1)) {
        int base = 0;
        for (int m = 0; m < j->n_mv && base < r1; m++) {
            const qvk_q4_mv *mv = &j->mv[m];
            int a = r0 > base ? r0 - base : 0;
            int b = r1 - base < mv->n_out ? r1 - base : mv->n_out;
            if (a < b) mv_rows(j, mv, a, b);
            base += mv->n_out;
        }
    }
}

size_t qvk_q4_batch_scratch(int n_x, int n_in) {
    return (size_t)n_x * (size_t)n_in + 2 * sizeof(float) * (size_t)n_x * (size_t)(n_in / QVK_Q4_GROUP);
}

/* n_x vectors prepared into xq (64-byte aligned), xs and xsum, then one dispatch. */
static void batch(qvk_pool *pool, const float *restrict x, int n_x, int n_in, const qvk_q4_mv *mv,
                  int n_mv, int8_t *xq, float *xs, float *xsum) {
    const int n_g = n_in / QVK_Q4_GROUP;
    for (int k = 0; k < n_x; k++) /* each vector prepared as it would be alone */
        qvk_q4_prepare_x(xq + (size_t)k * n_in, xs + (size_t)k * n_g, xsum + (size_t)k * n_g,
                         x + (size_t)k * n_in, n_in);
    const qvk_q4_rows_fn rows = by_name(qvk_variant());
    struct mv_job j = {.rows = rows, .batch = rows == qvk_q4_rows_avx512, .xq = xq, .xs = xs,
                       .xsum = xsum, .mv = mv, .n_mv = n_mv, .n_in = n_in, .n_x = n_x};
    if (j.batch) qvk_q4_pair_layout_avx512(xq, n_x, n_in);
    int n_total = 0;
    for (int m = 0; m < n_mv; m++)
        n_total += mv[m].n_out;
    /* chunks by work, not bytes: a prompt's rows cost n_x times more each, and a last 256 KB
     * chunk of 50 positions would keep one thread busy while the other waits */
    qvk_row_queue_init(&j.queue, n_total, ((size_t)n_in / 2 + (size_t)n_g * 4) * (size_t)n_x);
    qvk_pool_run_queued(pool, mv_run, &j);
}

void qvk_q4_matvec_batch(qvk_pool *pool, const float *restrict x, int n_x, int n_in,
                         const qvk_q4_mv *mv, int n_mv, void *scratch) {
    if (scratch) {
        int8_t *xq = scratch;
        float *xs = (float *)(void *)(xq + (size_t)n_x * n_in), *xsum = xs + (size_t)n_x * (n_in / QVK_Q4_GROUP);
        batch(pool, x, n_x, n_in, mv, n_mv, xq, xs, xsum);
        return;
    }
    _Alignas(64) int8_t xq[QVK_Q4_BATCH_MAX_IN];
    float xs[QVK_Q4_BATCH_MAX_IN / QVK_Q4_GROUP], xsum[QVK_Q4_BATCH_MAX_IN / QVK_Q4_GROUP];
    const int per = QVK_Q4_BATCH_MAX_IN / n_in; /* >= 4: n_in <= QVK_Q4_MAX_IN */
    for (int k = 0; k < n_x; k += per) {
        qvk_q4_mv m[4];
        for (int i = 0; i < n_mv; i++)
            m[i] = mv[i], m[i].y = mv[i].y + (size_t)k * mv[i].n_out;
        batch(pool, x + (size_t)k * n_in, n_x - k < per ? n_x - k : per, n_in, m, n_mv, xq, xs,
              xsum);
    }
}

void qvk_q4_matvec_multi(qvk_pool *pool, const float *restrict x, int n_in, const qvk_q4_mv *mv,
                         int n_mv) {
    qvk_q4_matvec_batch(pool, x, 1, n_in, mv, n_mv, NULL);
}

int qvk_q4_rows(const char *variant, const qvk_q4_mv *mv, const int8_t *xq, const float *xs,
                const float *xsum, int r0, int r1, int n_in) {
    const char *cur = qvk_variant();
    if (variant && strcmp(variant, cur)) {
        if (qvk_set_variant(variant)) return -1; /* unsupported: illegal instructions otherwise */
        qvk_set_variant(cur);
    }
    qvk_q4_rows_fn f = by_name(variant ? variant : cur);
    if (!f) return -1;
    f(mv, xq, xs, xsum, r0, r1, n_in);
    return 0;
}
