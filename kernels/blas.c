/* blas.c — the only caller of OpenBLAS (cblas_sgemm) and the one place setting its thread count:
 * once, to 1, before its first sgemm. The library's pools share the work out and each piece runs a
 * single-threaded sgemm, so OpenBLAS never competes with them for cores and no call changes
 * process-wide state (a server's slots each run their own synthesis).
 */
#include <cblas.h>
#include <pthread.h>

#include "kernels/kernels.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void single_threaded(void) {
    openblas_set_num_threads(1);
}

void qvk_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
               const float *b, int ldb, float beta, float *c, int ldc) {
    pthread_once(&g_once, single_threaded); /* before OpenBLAS's first use, whoever calls first */
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void add_bias(float *y, const float *bias, int n_rows, int n_out) {
    if (!bias) return;
    for (int r = 0; r < n_rows; r++)
        for (int o = 0; o < n_out; o++)
            y[(size_t)r * n_out + o] += bias[o];
}

void qvk_linear_f32(float *restrict y, const float *restrict x, const float *restrict w,
                    const float *restrict bias, int n_rows, int n_in, int n_out) {
    qvk_sgemm(0, 1, n_rows, n_out, n_in, 1.0f, x, n_in, w, n_in, 0.0f, y, n_out);
    add_bias(y, bias, n_rows, n_out);
}
