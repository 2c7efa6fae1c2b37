/* textside.h — a checkpoint's text side (prefix qvm_): the text embedding, the text projection
 * (Qwen3TTSTalkerResizeMLP, §3.1) and the codec-embedding rows, bound as views into the mmap,
 * and the projection of text-token rows with the kernels. One implementation for the engine
 * (every prompt's text rows) and for clone (a voice's TPAD, and its WOVR bridge tensors).
 *
 *     qvm_textside ts;
 *     qvm_textside_bind(&ts, st, &cfg, err, sizeof err);
 *     qvm_textside_special(&ts, &cfg, pool, tpad);      // [3][hidden]: pad, bos, eos
 *
 * Thread safety: read-only after bind; projections allocate nothing but the caller's buffers.
 */
#ifndef QV_TEXTSIDE_H
#define QV_TEXTSIDE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/config.h"
#include "checkpoint/safetensors.h"
#include "kernels/kernels.h"

typedef struct {
    int text_hidden, hidden, text_vocab, codec_vocab;
    const uint16_t *text_embedding;  /* [n_text_rows, text_hidden] talker.model.text_embedding */
    const int32_t *text_token_map;   /* [text_vocab] talker.model.text_token_map: id -> row (0 =
                                        the zero row of a pruned vocabulary), or NULL: row = id */
    int n_text_rows;                 /* text_vocab without a map */
    const uint16_t *fc1;             /* [text_hidden, text_hidden] text_projection.linear_fc1 */
    const float *fc1_bias;           /* [text_hidden] (f32 copy, owned) */
    const uint16_t *fc2;             /* [hidden, text_hidden] text_projection.linear_fc2 */
    const float *fc2_bias;           /* [hidden] (f32 copy, owned) */
    const uint16_t *codec_embedding; /* [codec_vocab, hidden] talker.model.codec_embedding */
    float *owned;                    /* the two bias copies, one allocation */
    uint16_t *owned_w;               /* fc1 then fc2 widened from MLX q4, or NULL (bf16 views) */
    struct qvm_prep *cache;          /* that widening mapped from the prepared cache, or NULL */
} qvm_textside;

/* Binds the tensors of st (bf16 matrices borrowed from the mmap, a q4 text projection widened to
 * bf16, biases of any float dtype widened to f32) with the shapes c gives; a vocabulary-pruned
 * checkpoint (docs/compression.md) has fewer embedding rows and a token map, each entry checked
 * to name a stored row. 0, or -1 with "FILE: tensor NAME: expected ..." in err. Free with
 * qvm_textside_free; the views live as long as st. */
int qvm_textside_bind(qvm_textside *ts, const qvm_st *st, const qvm_model_config *c, char *err,
                      size_t err_size);
void qvm_textside_free(qvm_textside *ts); /* accepts zeroed structs */

/* out[n, hidden] = fc2(silu(fc1(E[ids[i]]) + b1)) + b2 with qvk_linear_bf16 (bit-identical for
 * any pool size; ids must be < text_vocab). tmp: 2 n text_hidden floats; wscratch:
 * qvk_linear_bf16_scratch(n, text_hidden, max(text_hidden, hidden)) floats (used when
 * n > QVK_LINEAR_DIRECT_MAX_ROWS). */
void qvm_textside_project(const qvm_textside *ts, qvk_pool *pool, float *out, const int32_t *ids,
                          int n, float *tmp, float *wscratch);
/* dst[rows, cols] (bf16) = the q4 rounding of the bf16 matrix w as a q4 checkpoint of it binds:
 * quantized as qvoice-compress --q4 stores it (qvk_q4_quantize_bf16), widened back as bind widens
 * a q4 projection. So --quant q4 at load sees the text projection a q4 checkpoint gives. 0, or -1
 * when out of memory or cols is not a multiple of QVK_Q4_GROUP (dst untouched). */
int qvm_textside_round_q4(qvk_pool *pool, uint16_t *dst, const uint16_t *w, int rows, int cols);
/* out[3, hidden] = projections of tts_pad, tts_bos, tts_eos (a voice file's TPAD). 0, or -1 when
 * out of memory. */
int qvm_textside_special(const qvm_textside *ts, const qvm_model_config *c, qvk_pool *pool,
                         float *out);

#endif
