/* fuzz_roundtrip.c — libFuzzer target: whatever the reader accepts must write back and read again
 * unchanged: v4 exactly (identities, META, every array, tensors decoded), v3 (when v3 can hold it)
 * in content. A difference or a refused re-read is a bug: abort() so the fuzzer reports it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "voicefmt/qvf_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int rt_same(const void *a, const void *b, uint64_t n) {
    return !n || (a && b && !memcmp(a, b, n));
}

static int rt_tensors_equal(const qvf_tensor *x, const qvf_tensor *y) {
    if (strcmp(x->name, y->name) || x->raw_bytes != y->raw_bytes || x->dtype != y->dtype ||
        x->encoding != y->encoding)
        return 0;
    uint8_t *a = malloc(x->raw_bytes), *b = malloc(x->raw_bytes);
    int ok = a && b;
    if (ok) { /* a corrupt block must fail the same way in both */
        int ra = qvf_tensor_decode_delta(x, a, NULL, 0),
            rb = qvf_tensor_decode_delta(y, b, NULL, 0);
        ok = ra == rb && (ra || !memcmp(a, b, x->raw_bytes));
    }
    free(a);
    free(b);
    return ok;
}

static int rt_equal(const qvf_voice *a, const qvf_voice *b, int exact) {
    if (a->enc_dim != b->enc_dim || !rt_same(a->xvector, b->xvector, 4ull * a->enc_dim)) return 0;
    if (a->transcript_bytes != b->transcript_bytes ||
        !rt_same(a->transcript, b->transcript, a->transcript_bytes))
        return 0;
    if (a->n_frames != b->n_frames || !rt_same(a->codes, b->codes, 32ull * a->n_frames)) return 0;
    if (a->tpad_hidden != b->tpad_hidden || !rt_same(a->tpad, b->tpad, 12ull * a->tpad_hidden))
        return 0;
    uint64_t h = a->wovr_h, th = a->wovr_th, cv = a->wovr_cv;
    if (h != b->wovr_h || th != b->wovr_th || cv != b->wovr_cv ||
        !rt_same(a->wovr_fc1_w, b->wovr_fc1_w, 2 * th * th) ||
        !rt_same(a->wovr_fc1_b, b->wovr_fc1_b, 4 * th) ||
        !rt_same(a->wovr_fc2_w, b->wovr_fc2_w, 2 * h * th) ||
        !rt_same(a->wovr_fc2_b, b->wovr_fc2_b, 4 * h) ||
        !rt_same(a->wovr_codec, b->wovr_codec, 2 * cv * h))
        return 0;
    if (a->has_wdelta != b->has_wdelta || a->n_tensors != b->n_tensors ||
        a->wdelta_kind != b->wdelta_kind)
        return 0;
    for (uint32_t i = 0; i < a->n_tensors; i++)
        if (!rt_tensors_equal(&a->tensors[i], &b->tensors[i])) return 0;
    if (!exact) return 1;
    if (memcmp(&a->source, &b->source, sizeof a->source) ||
        memcmp(&a->target, &b->target, sizeof a->target))
        return 0;
    if (a->n_meta != b->n_meta) return 0;
    for (int i = 0; i < a->n_meta; i++) {
        const char *o = qvf_meta_get(b, a->meta[i].key);
        if (!o || strcmp(o, a->meta[i].value)) return 0;
    }
    if (a->n_styles != b->n_styles) return 0; /* v3 refuses a palette: v4 only */
    for (int i = 0; i < a->n_styles; i++) {
        const qvf_style *x = &a->styles[i], *y = &b->styles[i];
        if (strcmp(x->name, y->name) || x->kind != y->kind ||
            memcmp(&x->strength, &y->strength, 4) || !rt_same(x->vec, y->vec, 4ull * a->enc_dim))
            return 0;
    }
    return 1;
}

static void rt_check(const qvf_voice *v, int version) {
    char *buf = NULL, err[256];
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return;
    int rc = qvf_write_stream(v, f, version, "rt", err, sizeof err);
    fclose(f);
    /* v3 may refuse what it cannot hold; re-blocking a legacy tensor decodes it, and the reader
     * indexes compressed blocks without decoding them, so a corrupt block surfaces here */
    if (rc == QVF_E_NOMEM || rc == QVF_E_LZ4 || (rc && version == 3)) {
        free(buf);
        return;
    }
    if (rc) {
        fprintf(stderr, "v%d write refused a voice the reader accepted: %s\n", version, err);
        abort();
    }
    qvf_voice *w = NULL;
    if (qvf_read_mem(buf, n, "rt.qvoice", v->file_version == 1 ? v->enc_dim : 0, &w, err,
                     sizeof err)) {
        fprintf(stderr, "v%d re-read failed: %s\n", version, err);
        abort();
    }
    if (!rt_equal(v, w, version == 4)) {
        fprintf(stderr, "v%d round trip changed the voice\n", version);
        abort();
    }
    qvf_voice_free(w);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    qvf_voice *v = NULL;
    const char *name = size >= 4 && !memcmp(data, "QVCE", 4) ? "fuzz.qvoice" : "fuzz.bin";
    if (qvf_read_mem(data, size, name, 0, &v, err, sizeof err)) return 0;
    uint64_t raw = 0;
    for (uint32_t i = 0; i < v->n_tensors; i++)
        raw += v->tensors[i].raw_bytes;
    if (raw <= (16u << 20)) {
        rt_check(v, 4);
        rt_check(v, 3);
    }
    qvf_voice_free(v);
    return 0;
}
