/* bench_wdelta.c — size and speed of a heavy (WDELTA) voice for a Base/CustomVoice pair:
 *   build/bench/bench_wdelta BASE_DIR CV_DIR [OUT.qvoice]
 * Encodes every shared talker.* tensor (bf16 bit deltas, f32 raw) through the streaming writer,
 * then reads the file and applies every delta to the CustomVoice tensors (the load path of speak),
 * checking the result against Base bit for bit. Prints file size, create and load seconds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "voicefmt/qvf.h"
#include "checkpoint/safetensors.h"
#include "tests/bench/helpers/measure.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_wdelta BASE_DIR CV_DIR [OUT.qvoice]\n");
        return 2;
    }
    const char *out = argc > 3 ? argv[3] : "/tmp/bench_wdelta.qvoice";
    char err[512];
    qvm_st *bs = qvm_st_open_dir(argv[1], "model", err, sizeof err),
           *cs = bs ? qvm_st_open_dir(argv[2], "model", err, sizeof err) : NULL;
    if (!bs || !cs) {
        fprintf(stderr, "bench_wdelta: %s\n", err);
        return 1;
    }
    int n = 0;
    for (int i = 0; i < qvm_st_count(bs); i++) {
        const qvm_tensor *b = qvm_st_at(bs, i), *c = qvm_st_find(cs, b->name);
        n += !strncmp(b->name, "talker.", 7) && c && c->dtype == b->dtype &&
             c->n_bytes == b->n_bytes && (b->dtype == QVM_DTYPE_BF16 || b->dtype == QVM_DTYPE_F32);
    }
    qvf_voice *v = qvf_voice_new();
    float x[16] = {1};
    qvf_voice_set_xvector(v, x, 16);
    qvf_writer *w;
    double t0 = bench_clock_s(CLOCK_MONOTONIC);
    if (qvf_writer_open(&w, out, v, (uint32_t)n, QVF_WKIND_DELTA, err, sizeof err)) {
        fprintf(stderr, "bench_wdelta: %s\n", err);
        return 1;
    }
    uint64_t raw = 0;
    for (int i = 0; i < qvm_st_count(bs); i++) {
        const qvm_tensor *b = qvm_st_at(bs, i), *c = qvm_st_find(cs, b->name);
        if (strncmp(b->name, "talker.", 7) || !c || c->dtype != b->dtype ||
            c->n_bytes != b->n_bytes || (b->dtype != QVM_DTYPE_BF16 && b->dtype != QVM_DTYPE_F32))
            continue;
        uint64_t shape[4] = {0};
        for (int d = 0; d < b->n_dims; d++)
            shape[d] = (uint64_t)b->shape[d];
        qvf_tensor t;
        int bf = b->dtype == QVM_DTYPE_BF16;
        if (qvf_wdelta_encode(b->name, bf ? QVF_DTYPE_BF16 : QVF_DTYPE_F32, (uint32_t)b->n_dims,
                              shape, b->data, bf ? c->data : NULL, 0, &t, err, sizeof err) ||
            qvf_writer_add_tensor(w, &t, err, sizeof err)) {
            fprintf(stderr, "bench_wdelta: %s\n", err);
            qvf_writer_abort(w);
            return 1;
        }
        raw += t.raw_bytes;
        qvf_tensor_free(&t);
    }
    if (qvf_writer_commit(w, err, sizeof err)) {
        fprintf(stderr, "bench_wdelta: %s\n", err);
        return 1;
    }
    double t1 = bench_clock_s(CLOCK_MONOTONIC);
    qvf_voice *r;
    if (qvf_read_file(out, 0, &r, err, sizeof err)) {
        fprintf(stderr, "bench_wdelta: %s\n", err);
        return 1;
    }
    double t2 = bench_clock_s(CLOCK_MONOTONIC);
    int exact = 0;
    double t_apply = 0;
    for (uint32_t i = 0; i < r->n_tensors; i++) {
        const qvf_tensor *t = &r->tensors[i];
        void *o = malloc(t->raw_bytes);
        double a = bench_clock_s(CLOCK_MONOTONIC);
        if (!o || qvf_wdelta_apply(t, qvm_st_find(cs, t->name)->data, o, 0, err, sizeof err)) {
            fprintf(stderr, "bench_wdelta: %s\n", o ? err : "out of memory");
            return 1;
        }
        t_apply += bench_clock_s(CLOCK_MONOTONIC) - a;
        exact += !memcmp(o, qvm_st_find(bs, t->name)->data, t->raw_bytes);
        free(o);
    }
    struct stat st;
    stat(out, &st);
    printf("wdelta %s vs %s: %d tensors, %.1f MB raw -> file %.1f MB; create %.2f s; read (index + "
           "CRC) %.2f s,"
           " apply (LZ4 + add) %.2f s; %d/%d tensors bit-identical to Base\n",
           argv[1], argv[2], n, raw / 1e6, st.st_size / 1e6, t1 - t0, t2 - t1, t_apply, exact, n);
    qvf_voice_free(r);
    qvf_voice_free(v);
    qvm_st_close(bs);
    qvm_st_close(cs);
    return exact == n ? 0 : 1;
}
