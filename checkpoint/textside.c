/* textside.c — a checkpoint's text side: bind, project (see textside.h). */
#include "checkpoint/textside.h"

#include <stdio.h>
#include <string.h>

#include "checkpoint/prepared.h"
#include "kernels/q4.h"

static const uint16_t *matrix(const qvm_st *st, const char *name, int64_t rows, int64_t cols,
                              char *err, size_t err_size) {
    const int64_t shape[2] = {rows, cols};
    const qvm_tensor *t = qvm_st_expect(st, name, QVM_DTYPE_BF16, 2, shape, err, err_size);
    return t ? (const uint16_t *)t->data : NULL;
}

/* dst[rows, cols] = s·q + b of a q4 matrix rounded to bf16: the one widening of a q4 text
 * projection (a q4 checkpoint's, and --quant q4's through qvm_textside_round_q4). -1 when out of
 * memory. */
static int widen_q4(uint16_t *dst, const uint8_t *q, const uint16_t *s, const uint16_t *b,
                    int64_t rows, int64_t cols) {
    float *row = qvk_alloc((size_t)cols * sizeof *row);
    if (!row) return -1;
    const int64_t ng = cols / QVK_Q4_GROUP;
    for (int64_t r = 0; r < rows; r++) {
        qvk_q4_dequantize(row, q + r * cols / 2, s + r * ng, b + r * ng, 1, (int)cols);
        qvk_f32_to_bf16(dst + r * cols, row, (size_t)cols);
    }
    qvk_free(row);
    return 0;
}

/* A text-projection weight [rows, cols]: bf16 from the mmap, or MLX q4 (NAME.scales present;
 * MLX's quantize writes every linear so, and so does qvoice-compress --q4) widened into copy as
 * bf16, or taken as cached (its widening from the prepared cache) once the tensors are checked.
 * The projection runs once per text token, and the prompt rows, TPAD and WOVR bridges all
 * read bf16, so one widened copy serves them; rounding s·q + b to bf16 adds 2^-9 relative to
 * q4's own error. The manifest has fixed the q4 tensors' shapes and their bf16 scales. */
static const uint16_t *linear(const qvm_st *st, const qvm_model_config *c, const char *name,
                              int64_t rows, int64_t cols, uint16_t *copy, const uint16_t *cached,
                              char *err, size_t err_size) {
    char sn[96], bn[96];
    const size_t n = strlen(name) - strlen(".weight");
    snprintf(sn, sizeof sn, "%.*s.scales", (int)n, name);
    snprintf(bn, sizeof bn, "%.*s.biases", (int)n, name);
    const qvm_tensor *s = c->quant_bits ? qvm_st_find(st, sn) : NULL, *b = qvm_st_find(st, bn);
    if (!s) return matrix(st, name, rows, cols, err, err_size);
    const int64_t shape[2] = {rows, cols / 8};
    const qvm_tensor *q = qvm_st_expect(st, name, QVM_DTYPE_U32, 2, shape, err, err_size);
    if (q && b && cached) return cached;
    if (q && b && !widen_q4(copy, q->data, s->data, b->data, rows, cols)) return copy;
    if (q) snprintf(err, err_size, "%s: %s: %s", qvm_st_file(st, q), name,
                    b ? "out of memory" : "q4 biases missing");
    return NULL;
}

int qvm_textside_round_q4(qvk_pool *pool, uint16_t *dst, const uint16_t *w, int rows, int cols) {
    const size_t ng = (size_t)rows * (size_t)(cols / QVK_Q4_GROUP);
    uint8_t *q = qvk_alloc((size_t)rows * (size_t)cols / 2);
    uint16_t *sb = qvk_alloc(2 * ng * sizeof *sb);
    const int rc = q && sb && !qvk_q4_quantize_bf16(pool, q, sb, sb + ng, w, rows, cols)
                       ? widen_q4(dst, q, sb, sb + ng, rows, cols)
                       : -1;
    qvk_free(q);
    qvk_free(sb);
    return rc;
}

/* A 1-D float tensor of n elements widened into dst. */
static int vector(const qvm_st *st, const char *name, int64_t n, float *dst, char *err,
                  size_t err_size) {
    const qvm_tensor *t = qvm_st_find(st, name);
    if (!t || t->n_dims != 1 || t->shape[0] != n || !qvm_dtype_is_float(t->dtype)) {
        if (!t)
            snprintf(err, err_size, "%s: tensor %s: missing", qvm_st_file(st, NULL), name);
        else
            snprintf(err, err_size, "%s: tensor %s: expected [%lld] float, found %d-d %s",
                     qvm_st_file(st, t), name, (long long)n, t->n_dims, qvm_dtype_name(t->dtype));
        return -1;
    }
    float *f = qvm_tensor_to_f32(t);
    if (!f) {
        snprintf(err, err_size, "%s: out of memory converting %s", qvm_st_file(st, t), name);
        return -1;
    }
    memcpy(dst, f, (size_t)n * sizeof(float));
    qvk_free(f);
    return 0;
}

/* The prepared-cache id of st's widened q4 text projection; its probe is a fixed q4 row widened
 * by widen_q4 (a change of the rounding makes old files stale). 0, or -1: not cached. */
static int text_id(const qvm_st *st, qvm_prep_id *id) {
    uint8_t q[QVK_Q4_GROUP / 2];
    const uint16_t s = 0x3c00, b = 0xbb80; /* 2^-7 and -2^-8 in bf16 */
    uint16_t out[QVK_Q4_GROUP];
    for (int i = 0; i < QVK_Q4_GROUP / 2; i++)
        q[i] = (uint8_t)(i * 37 + 11);
    return widen_q4(out, q, &s, &b, 1, QVK_Q4_GROUP) ||
                   qvm_prep_id_make(id, "text", st, out, sizeof out)
               ? -1
               : 0;
}

int qvm_textside_bind(qvm_textside *ts, const qvm_st *st, const qvm_model_config *c, char *err,
                      size_t err_size) {
    memset(ts, 0, sizeof *ts);
    const int64_t TH = c->text_hidden_size, H = c->talker.hidden_size;
    ts->text_hidden = (int)TH, ts->hidden = (int)H;
    ts->text_vocab = c->text_vocab_size, ts->codec_vocab = c->talker.vocab_size;
    const int q4 = c->quant_bits && (qvm_st_find(st, "talker.text_projection.linear_fc1.scales") ||
                                     qvm_st_find(st, "talker.text_projection.linear_fc2.scales"));
    /* a q4 projection's widening: mapped from the prepared cache (widening the 1.7B's into new
       memory was ~30 ms of CPU on the main thread at every load, mostly the kernel zeroing it),
       else made here and saved there */
    const size_t n_w = (size_t)(TH + H) * (size_t)TH * sizeof(uint16_t);
    qvm_prep_id id;
    const int cacheable = q4 && !text_id(st, &id);
    const uint16_t *cached = cacheable && (ts->cache = qvm_prep_open(&id))
                                 ? qvm_prep_take(ts->cache, n_w)
                                 : NULL;
    if (ts->cache && !cached) qvm_prep_close(ts->cache), ts->cache = NULL; /* another layout */
    if (!(ts->owned = qvk_alloc((size_t)(TH + H) * sizeof(float))) ||
        (q4 && !cached && !(ts->owned_w = qvk_alloc(n_w)))) {
        qvm_textside_free(ts);
        snprintf(err, err_size, "%s: out of memory", qvm_st_file(st, NULL));
        return -1;
    }
    ts->fc1_bias = ts->owned, ts->fc2_bias = ts->owned + TH;
    const qvm_tensor *map = qvm_st_find(st, "talker.model.text_token_map");
    const qvm_tensor *emb = qvm_st_find(st, "talker.model.text_embedding.weight");
    ts->n_text_rows = map && emb && emb->n_dims == 2 && emb->shape[0] >= 1 &&
                              emb->shape[0] <= ts->text_vocab
                          ? (int)emb->shape[0]
                          : ts->text_vocab;
    if (map && (map->dtype != QVM_DTYPE_I32 || map->n_dims != 1 || map->shape[0] != ts->text_vocab)) {
        snprintf(err, err_size, "%s: tensor talker.model.text_token_map: expected [%d] I32",
                 qvm_st_file(st, map), ts->text_vocab);
        qvm_textside_free(ts);
        return -1;
    }
    for (int i = 0; map && i < ts->text_vocab; i++) {
        const int32_t r = ((const int32_t *)map->data)[i];
        if (r < 0 || r >= ts->n_text_rows) {
            snprintf(err, err_size,
                     "%s: tensor talker.model.text_token_map: entry %d is %d (expected 0..%d)",
                     qvm_st_file(st, map), i, r, ts->n_text_rows - 1);
            qvm_textside_free(ts);
            return -1;
        }
    }
    ts->text_token_map = map ? map->data : NULL;
    if (!(ts->text_embedding = matrix(st, "talker.model.text_embedding.weight", ts->n_text_rows,
                                      TH, err, err_size)) ||
        !(ts->fc1 = linear(st, c, "talker.text_projection.linear_fc1.weight", TH, TH, ts->owned_w,
                           cached, err, err_size)) ||
        vector(st, "talker.text_projection.linear_fc1.bias", TH, ts->owned, err, err_size) ||
        !(ts->fc2 = linear(st, c, "talker.text_projection.linear_fc2.weight", H, TH,
                           ts->owned_w ? ts->owned_w + TH * TH : NULL,
                           cached ? cached + TH * TH : NULL, err, err_size)) ||
        vector(st, "talker.text_projection.linear_fc2.bias", H, ts->owned + TH, err, err_size) ||
        !(ts->codec_embedding = matrix(st, "talker.model.codec_embedding.weight", ts->codec_vocab,
                                       H, err, err_size))) {
        qvm_textside_free(ts);
        return -1;
    }
    if (cacheable && !cached && ts->owned_w && ts->fc1 == ts->owned_w)
        qvm_prep_save(&id, (qvm_prep_array[]){{ts->owned_w, n_w}}, 1); /* a failure costs time only */
    return 0;
}

void qvm_textside_free(qvm_textside *ts) {
    if (!ts) return;
    qvk_free(ts->owned);
    qvk_free(ts->owned_w);
    qvm_prep_close(ts->cache);
    memset(ts, 0, sizeof *ts);
}

void qvm_textside_project(const qvm_textside *ts, qvk_pool *pool, float *out, const int32_t *ids,
                          int n, float *tmp, float *wscratch) {
    const int TH = ts->text_hidden, H = ts->hidden;
    float *e = tmp, *f = tmp + (size_t)n * TH;
    for (int i = 0; i < n; i++) {
        const int32_t row = ts->text_token_map ? ts->text_token_map[ids[i]] : ids[i];
        qvk_bf16_to_f32(e + (size_t)i * TH, ts->text_embedding + (size_t)row * TH, (size_t)TH);
    }
    qvk_linear_bf16(pool, f, e, ts->fc1, ts->fc1_bias, n, TH, TH, wscratch);
    qvk_silu(f, n * TH);
    qvk_linear_bf16(pool, out, f, ts->fc2, ts->fc2_bias, n, TH, H, wscratch);
}

int qvm_textside_special(const qvm_textside *ts, const qvm_model_config *c, qvk_pool *pool,
                         float *out) {
    const size_t TH = (size_t)ts->text_hidden, H = (size_t)ts->hidden;
    const int32_t ids[3] = {c->tts_pad_token_id, c->tts_bos_token_id, c->tts_eos_token_id};
    float *tmp = qvk_alloc(2 * 3 * TH * sizeof(float));
    float *wscratch = qvk_alloc(qvk_linear_bf16_scratch(3, (int)TH, (int)(TH > H ? TH : H)) *
                                sizeof(float));
    int rc = tmp && wscratch ? 0 : -1;
    if (!rc) qvm_textside_project(ts, pool, out, ids, 3, tmp, wscratch);
    qvk_free(tmp);
    qvk_free(wscratch);
    return rc;
}
