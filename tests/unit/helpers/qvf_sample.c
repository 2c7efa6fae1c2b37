/* qvf_sample.c — deterministic sample voices shared by the voicefmt tests (see qvf_sample.h). */
#include "tests/unit/helpers/qvf_sample.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "voicefmt/qvf_impl.h"

static uint32_t lcg(uint32_t *s) {
    return *s = *s * 1664525u + 1013904223u;
}

void qvf_sample_bf16(uint16_t *out, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++)
        out[i] = (uint16_t)(0x3C00 + (lcg(&seed) >> 24)); /* small positive bf16 */
}

static void fill_f32(float *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)(lcg(&seed) >> 16) - 32768) / 4096.0f;
}

qvf_voice *qvf_sample_voice(int with_wdelta) {
    qvf_voice *v = qvf_voice_new();
    if (!v) return NULL;
    float x[16];
    fill_f32(x, 16, 1);
    uint16_t codes[3 * 16];
    for (int i = 0; i < 48; i++)
        codes[i] = (uint16_t)((i * 997) % 2048);
    v->source = (qvf_model_id){64, 96, 16, QVF_VARIANT_BASE, {0}};
    for (int i = 0; i < 32; i++)
        v->source.fingerprint[i] = (uint8_t)(i + 1);
    if (qvf_voice_set_xvector(v, x, 16) ||
        qvf_voice_set_icl(v, "h\xc3\xa9llo w\xc3\xb6rld", codes, 3))
        goto fail;
    const char *kv[][2] = {{"name", "Sample"},      {"language", "English"},
                           {"language_id", "2050"}, {"created_utc", "2026-11-22T00:00:00Z"},
                           {"tool", "qvoice test"}, {"max_ref_duration_s", "30"},
                           {"v3_flags", "6"},       {"license", "CC0, consent on file"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (qvf_meta_set(v, kv[i][0], kv[i][1])) goto fail;
    uint32_t h = 64, th = 96, cv = 40;
    v->tpad_hidden = h;
    v->tpad = malloc(12 * h);
    v->wovr_h = h;
    v->wovr_th = th;
    v->wovr_cv = cv;
    v->wovr_fc1_w = malloc(2 * th * th);
    v->wovr_fc1_b = malloc(4 * th);
    v->wovr_fc2_w = malloc(2 * h * th);
    v->wovr_fc2_b = malloc(4 * h);
    v->wovr_codec = malloc(2 * cv * h);
    if (!v->tpad || !v->wovr_fc1_w || !v->wovr_fc1_b || !v->wovr_fc2_w || !v->wovr_fc2_b ||
        !v->wovr_codec)
        goto fail;
    fill_f32(v->tpad, 3 * h, 2);
    qvf_sample_bf16(v->wovr_fc1_w, th * th, 3);
    fill_f32(v->wovr_fc1_b, th, 4);
    qvf_sample_bf16(v->wovr_fc2_w, h * th, 5);
    fill_f32(v->wovr_fc2_b, h, 6);
    qvf_sample_bf16(v->wovr_codec, cv * h, 7);
    if (with_wdelta) {
        static uint16_t tgt[QVF_SAMPLE_N_ELEMS], res[QVF_SAMPLE_N_ELEMS];
        float norm[64];
        qvf_sample_bf16(tgt, QVF_SAMPLE_N_ELEMS, 8);
        memcpy(res, tgt, sizeof res);
        uint32_t s = 9;
        for (int i = 0; i < QVF_SAMPLE_N_ELEMS; i += 1 + (int)(lcg(&s) % 3))
            res[i] = (uint16_t)(res[i] + (lcg(&s) >> 28) - 8);
        fill_f32(norm, 64, 10);
        v->tensors = calloc(2, sizeof *v->tensors);
        if (!v->tensors) goto fail;
        v->has_wdelta = 1;
        v->wdelta_kind = QVF_WKIND_DELTA;
        v->target = (qvf_model_id){1024, 96, 0, QVF_VARIANT_CUSTOM_VOICE, {0}};
        for (int i = 0; i < 32; i++)
            v->target.fingerprint[i] = (uint8_t)(0xA0 + i);
        const uint64_t s2[2] = {96, 64}, s1[1] = {64};
        v->n_tensors = 2;
        if (qvf_wdelta_encode("talker.model.layers.0.mlp.up_proj.weight", QVF_DTYPE_BF16, 2, s2,
                              res, tgt, 4096, &v->tensors[0], NULL, 0) ||
            qvf_wdelta_encode("talker.model.norm.weight", QVF_DTYPE_F32, 1, s1, norm, NULL, 0,
                              &v->tensors[1], NULL, 0))
            goto fail;
    }
    return v;
fail:
    qvf_voice_free(v);
    return NULL;
}

#define DIFF(...)                                                                                  \
    do {                                                                                           \
        snprintf(why, why_size, __VA_ARGS__);                                                      \
        return 0;                                                                                  \
    } while (0)

static int same_bytes(const void *a, const void *b, size_t n) {
    if (!n) return 1;
    return a && b && !memcmp(a, b, n);
}

int qvf_sample_equal(const qvf_voice *a, const qvf_voice *b, int ids, char *why, size_t why_size) {
    if (a->enc_dim != b->enc_dim || !same_bytes(a->xvector, b->xvector, 4ull * a->enc_dim))
        DIFF("x-vector");
    if (ids && (memcmp(&a->source, &b->source, sizeof a->source) ||
                memcmp(&a->target, &b->target, sizeof a->target)))
        DIFF("model identity");
    if (a->transcript_bytes != b->transcript_bytes ||
        !same_bytes(a->transcript, b->transcript, a->transcript_bytes))
        DIFF("transcript");
    if (a->n_frames != b->n_frames || !same_bytes(a->codes, b->codes, 32ull * a->n_frames))
        DIFF("codes");
    if (a->n_meta != b->n_meta) DIFF("META count %d vs %d", a->n_meta, b->n_meta);
    for (int i = 0; i < a->n_meta; i++) {
        const char *o = qvf_meta_get(b, a->meta[i].key);
        if (!o || strcmp(o, a->meta[i].value)) DIFF("META %s", a->meta[i].key);
    }
    if (a->tpad_hidden != b->tpad_hidden || !same_bytes(a->tpad, b->tpad, 12ull * a->tpad_hidden))
        DIFF("TPAD");
    if (a->n_styles != b->n_styles) DIFF("palette of %d vs %d entries", a->n_styles, b->n_styles);
    for (int i = 0; i < a->n_styles; i++)
        if (strcmp(a->styles[i].name, b->styles[i].name) ||
            a->styles[i].kind != b->styles[i].kind ||
            !same_bytes(&a->styles[i].strength, &b->styles[i].strength, 4) ||
            !same_bytes(a->styles[i].vec, b->styles[i].vec, 4ull * a->enc_dim))
            DIFF("palette entry %s", a->styles[i].name);
    uint64_t h = a->wovr_h, th = a->wovr_th, cv = a->wovr_cv;
    if (h != b->wovr_h || th != b->wovr_th || cv != b->wovr_cv ||
        !same_bytes(a->wovr_fc1_w, b->wovr_fc1_w, 2 * th * th) ||
        !same_bytes(a->wovr_fc1_b, b->wovr_fc1_b, 4 * th) ||
        !same_bytes(a->wovr_fc2_w, b->wovr_fc2_w, 2 * h * th) ||
        !same_bytes(a->wovr_fc2_b, b->wovr_fc2_b, 4 * h) ||
        !same_bytes(a->wovr_codec, b->wovr_codec, 2 * cv * h))
        DIFF("WOVR");
    if (a->has_wdelta != b->has_wdelta || a->n_tensors != b->n_tensors ||
        a->wdelta_kind != b->wdelta_kind)
        DIFF("weight stream");
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const qvf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->encoding != y->encoding ||
            x->n_dims != y->n_dims || memcmp(x->shape, y->shape, sizeof x->shape) ||
            x->raw_bytes != y->raw_bytes || memcmp(x->target_sha256, y->target_sha256, 32) ||
            memcmp(x->result_sha256, y->result_sha256, 32))
            DIFF("tensor %s header", x->name);
        uint8_t *dx = malloc(x->raw_bytes), *dy = malloc(y->raw_bytes);
        int ok = dx && dy && !qvf_tensor_decode_delta(x, dx, NULL, 0) &&
                 !qvf_tensor_decode_delta(y, dy, NULL, 0) && !memcmp(dx, dy, x->raw_bytes);
        free(dx);
        free(dy);
        if (!ok) DIFF("tensor %s data", x->name);
    }
    return 1;
}

uint8_t *qvf_sample_serialize(const qvf_voice *v, int version, size_t *n_bytes) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    int rc = qvf_write_stream(v, f, version, "mem", NULL, 0);
    fclose(f);
    if (rc) {
        free(buf);
        return NULL;
    }
    *n_bytes = n;
    return (uint8_t *)buf;
}

int qvf_sample_decode_all(const qvf_voice *v, char *err, size_t err_size) {
    int rc = 0;
    for (uint32_t i = 0; !rc && i < v->n_tensors; i++) {
        const qvf_tensor *t = &v->tensors[i];
        void *z = calloc(1, t->raw_bytes), *o = malloc(t->raw_bytes);
        rc = qvf_wdelta_apply(t, z, o, 0, err, err_size);
        free(z);
        free(o);
    }
    return rc;
}

void qvf_sample_fix_crcs(uint8_t *b, size_t n) {
    qvf_chunk_info ch[64];
    int nc = 0;
    char err[512];
    uint32_t c0 = qvf_crc32c(0, b, 12);
    memcpy(b + 12, &c0, 4);
    if (qvf_list_chunks(b, n, "t", ch, 64, &nc, err, sizeof err)) return;
    for (int i = 0; i < nc && i < 64; i++) {
        uint8_t *h = b + ch[i].offset;
        uint32_t c = qvf_crc32c(0, h, 16 + (size_t)ch[i].payload_bytes);
        memcpy(h + 16 + ch[i].payload_bytes, &c, 4); /* little-endian host */
    }
}
