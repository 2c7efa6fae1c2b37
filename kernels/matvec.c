/* matvec.c — bf16/f32 matrix-vector products, split by output rows across the pool (bf16
 * matvecs: chunks from a shared counter, kernels_impl.h; the others: fixed ranges). Row ranges are multiples of ROW_ALIGN so each thread streams whole cache lines
 * and the row kernels can block rows; a row's arithmetic never depends on the split
 * (bit-identical for any thread count).
 */
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

#define ROW_ALIGN 16

/* [r0, r1) of n rows for thread ith of nth. */
static void split_rows(int n, int ith, int nth, int *r0, int *r1) {
    int per = (n + nth - 1) / nth;
    per = (per + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
    long a = (long)per * ith, b = a + per;
    *r0 = a < n ? (int)a : n;
    *r1 = b < n ? (int)b : n;
}

struct mv_job {
    const qvk_impl *impl;
    float *y;
    const float *w;
    const float *x;
    const float *bias;
    int n_out, n_in;
};

/* f32 matrices are small (ECAPA SE and output layers): no row-blocked kernel, a dot per row. */
static void mv_f32_run(int ith, int nth, void *p) {
    const struct mv_job *j = p;
    int r0, r1;
    split_rows(j->n_out, ith, nth, &r0, &r1);
    for (int r = r0; r < r1; r++) {
        float s = j->impl->dot(j->w + (size_t)r * j->n_in, j->x, j->n_in);
        j->y[r] = j->bias ? s + j->bias[r] : s;
    }
}

void qvk_matvec_f32(qvk_pool *pool, float *restrict y, const float *restrict w,
                    const float *restrict x, const float *restrict bias, int n_out, int n_in) {
    struct mv_job j = {qvk_impl_get(), y, w, x, bias, n_out, n_in};
    qvk_pool_run(pool, mv_f32_run, &j);
}

struct multi_job {
    const qvk_impl *impl;
    const float *x; /* [n_x, n_in] */
    const qvk_mv *mv;
    int n_mv, n_in, n_x;
    qvk_row_queue rows; /* over the rows of all matrices, concatenated */
};

/* Rows [a, b) of one matrix for every x: the variant's batched row kernel when it has one, else
 * a block of rows at a time through the one-vector kernel, streamed from memory for the first x
 * and re-read from cache for the others (qvk_batch_block_rows). */
static void mv_rows(const struct multi_job *j, const qvk_mv *mv, int a, int b) {
    if (j->n_x > 1 && j->impl->mvb_bf16) {
        j->impl->mvb_bf16(mv->y, mv->n_out, mv->w, j->x, j->n_x, mv->bias, a, b, j->n_in);
        return;
    }
    const int blk = j->n_x > 1 ? qvk_batch_block_rows((size_t)j->n_in * 2) : b - a;
    for (int r = a; r < b; r += blk) {
        const int e = b - r < blk ? b : r + blk;
        for (int k = 0; k < j->n_x; k++)
            j->impl->mv_bf16(mv->y + (size_t)k * mv->n_out, mv->w, j->x + (size_t)k * j->n_in,
                             mv->bias, r, e, j->n_in);
    }
}

static void multi_run(int ith, int nth, void *p) {
    struct multi_job *j = p;
    int r0, r1;
    while (qvk_row_queue_take(&j->rows, nth, &r0, &r1)) {
        int base = 0;
        for (int m = 0; m < j->n_mv && base < r1; m++) {
            const qvk_mv *mv = &j->mv[m];
            int a = r0 > base ? r0 - base : 0;
            int b = r1 - base < mv->n_out ? r1 - base : mv->n_out;
            if (a < b) mv_rows(j, mv, a, b);
            base += mv->n_out;
        }
    }
}

void qvk_matvec_bf16_batch(qvk_pool *pool, const float *restrict x, int n_x, int n_in,
                           const qvk_mv *mv, int n_mv) {
    struct multi_job j = {
        .impl = qvk_impl_get(), .x = x, .mv = mv, .n_mv = n_mv, .n_in = n_in, .n_x = n_x};
    int n_total = 0;
    for (int m = 0; m < n_mv; m++)
        n_total += mv[m].n_out;
    qvk_row_queue_init(&j.rows, n_total, (size_t)n_in * 2);
    qvk_pool_run_queued(pool, multi_run, &j);
}

void qvk_matvec_bf16_multi(qvk_pool *pool, const float *restrict x, int n_in, const qvk_mv *mv,
                           int n_mv) {
    qvk_matvec_bf16_batch(pool, x, 1, n_in, mv, n_mv);
}

void qvk_matvec_bf16(qvk_pool *pool, float *restrict y, const uint16_t *restrict w,
                     const float *restrict x, const float *restrict bias, int n_out, int n_in) {
    qvk_mv mv = {y, w, bias, n_out};
    qvk_matvec_bf16_multi(pool, x, n_in, &mv, 1);
}
