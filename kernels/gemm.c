/* gemm.c — batched bf16 linear layers (prefill, text projection): Y = X·Wᵀ for several rows of
 * X, output columns split over the pool from a shared counter (kernels_impl.h), W streamed once
 * for all rows. Every output element is computed the same way whichever thread and range take
 * it: bit-identical for any thread count.
 *
 * Up to QVK_LINEAR_DIRECT_MAX_ROWS rows the product is memory-bound and runs the matvec row
 * kernel's arithmetic (mm_bf16). Above, it is compute-bound: the variant's GEMM on X packed once
 * per call (gemm_avx512.c, gemm_avx2.c), or, for the scalar variant, W widened one chunk of ~1 MB
 * at a time into scratch and multiplied by sgemm while still in L2 (the f32 copy never travels
 * to DRAM; chunk boundaries depend only on n_in).
 */
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

static size_t pad32(int n) {
    return ((size_t)n + 31) & ~(size_t)31;
}

size_t qvk_linear_bf16_scratch(int n_rows, int n_in, int n_out) {
    const size_t packed = (size_t)n_rows * pad32(n_in); /* X as bf16 hi/lo pairs */
    const size_t widened = (size_t)n_out * n_in;        /* W in f32 (scalar: sgemm) */
    return packed > widened ? packed : widened;
}

struct lin_job {
    const qvk_impl *impl;
    const float *x;
    void *xp; /* packed X when the variant's GEMM runs */
    const qvk_mv *mv;
    int n_mv, n_rows, n_in;
    qvk_row_queue cols; /* over the output columns of all matrices, concatenated */
};

static void pack_run(int ith, int nth, void *p) {
    const struct lin_job *j = p;
    const int per = (j->n_rows + nth - 1) / nth;
    const int r0 = per * ith < j->n_rows ? per * ith : j->n_rows;
    const int r1 = r0 + per < j->n_rows ? r0 + per : j->n_rows;
    if (r0 < r1) j->impl->gemm_pack(j->xp, j->x, r0, r1, j->n_in);
}

static void cols_run(int ith, int nth, void *p) {
    struct lin_job *j = p;
    int c0, c1;
    while (qvk_row_queue_take(&j->cols, nth, &c0, &c1)) {
        int base = 0;
        for (int m = 0; m < j->n_mv && base < c1; m++) {
            const qvk_mv *mv = &j->mv[m];
            const int a = c0 > base ? c0 - base : 0;
            const int b = c1 - base < mv->n_out ? c1 - base : mv->n_out;
            if (a < b && j->xp)
                j->impl->gemm_bf16(mv->y, mv->n_out, mv->w, j->xp, mv->bias, a, b, j->n_rows,
                                   j->n_in);
            else if (a < b)
                j->impl->mm_bf16(mv->y, mv->w, j->x, mv->bias, a, b, j->n_in, mv->n_out, j->n_rows);
            base += mv->n_out;
        }
    }
}

/* ---- the scalar variant: widen + sgemm ---------------------------------------------------- */

struct sgemm_job {
    const qvk_impl *impl;
    const float *x;
    const qvk_mv *mv;
    float *wf;
    int n_rows, n_in;
};

/* W rows per widened chunk: about 1 MB of f32 (L2 is 1 MB per core here). */
static int chunk_rows(int n_in) {
    int c = (262144 / (n_in > 0 ? n_in : 1)) & ~15;
    return c < 16 ? 16 : c > 256 ? 256 : c;
}

static void sgemm_run(int ith, int nth, void *p) {
    const struct sgemm_job *j = p;
    const int cr = chunk_rows(j->n_in), n_out = j->mv->n_out;
    const int n_chunks = (n_out + cr - 1) / cr;
    for (int c = ith; c < n_chunks; c += nth) {
        const int o0 = c * cr, n = n_out - o0 < cr ? n_out - o0 : cr;
        float *wf = j->wf + (size_t)o0 * j->n_in, *y = j->mv->y;
        j->impl->widen_bf16(wf, j->mv->w + (size_t)o0 * j->n_in, (size_t)n * j->n_in);
        qvk_sgemm(0, 1, j->n_rows, n, j->n_in, 1.0f, j->x, j->n_in, wf, j->n_in, 0.0f, y + o0,
                  n_out);
        if (j->mv->bias)
            for (int r = 0; r < j->n_rows; r++)
                for (int o = o0; o < o0 + n; o++)
                    y[(size_t)r * n_out + o] += j->mv->bias[o];
    }
}

/* ---- entry points ------------------------------------------------------------------------- */

void qvk_linear_bf16_multi(qvk_pool *pool, const float *restrict x, int n_rows, int n_in,
                           const qvk_mv *mv, int n_mv, float *restrict scratch) {
    const qvk_impl *impl = qvk_impl_get();
    if (n_rows == 1) { /* the same arithmetic as mm_bf16, with the matvec's prefetching */
        qvk_matvec_bf16_multi(pool, x, n_in, mv, n_mv);
        return;
    }
    if (n_rows > QVK_LINEAR_DIRECT_MAX_ROWS && !impl->gemm_bf16) {
        for (int m = 0; m < n_mv; m++) {
            struct sgemm_job s = {impl, x, &mv[m], scratch, n_rows, n_in};
            qvk_pool_run(pool, sgemm_run, &s);
        }
        return;
    }
    struct lin_job j = {impl, x, NULL, mv, n_mv, n_rows, n_in, {0}};
    int n_total = 0;
    for (int m = 0; m < n_mv; m++)
        n_total += mv[m].n_out;
    qvk_row_queue_init(&j.cols, n_total, (size_t)n_in * 2);
    if (n_rows > QVK_LINEAR_DIRECT_MAX_ROWS) {
        j.xp = scratch;
        qvk_pool_run(pool, pack_run, &j);
    }
    qvk_pool_run(pool, cols_run, &j);
}

void qvk_linear_bf16(qvk_pool *pool, float *restrict y, const float *restrict x,
                     const uint16_t *restrict w, const float *restrict bias, int n_rows, int n_in,
                     int n_out, float *restrict scratch) {
    const qvk_mv mv = {y, w, bias, n_out};
    qvk_linear_bf16_multi(pool, x, n_rows, n_in, &mv, 1, scratch);
}
