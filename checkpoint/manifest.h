/* manifest.h — the expected-tensor tables of a Qwen3-TTS checkpoint, built from its configs
 * (internal, prefix qvm_manifest_). Shapes derive from config values only (architecture doc §2),
 * so the tiny synthetic configs and both published sizes use the same code.
 */
#ifndef QV_MANIFEST_H
#define QV_MANIFEST_H

/* model.safetensors must hold exactly the model table (402/404 CustomVoice/VoiceDesign, 478/480
 * Base); speech_tokenizer/model.safetensors must hold at least the codec table (the whole decoder
 * plus the encoder parts §6.2 uses; unused encoder tensors such as acoustic layers >= 15 or
 * `codebook.initialized` may be present). */

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/config.h"
#include "checkpoint/safetensors.h"

#define QVM_MANIFEST_NAME_MAX 128

typedef struct {
    char name[QVM_MANIFEST_NAME_MAX];
    int n_dims;
    int64_t shape[4];
    enum qvm_dtype dtype; /* as published: BF16 (model), F32 (codec). Checks accept any float. */
} qvm_manifest_entry;

typedef struct {
    qvm_manifest_entry *entries; /* owned, in a fixed order (talker, code predictor, speaker enc.) */
    int n_entries;
    int *by_name;                /* owned: entry indices sorted by name */
} qvm_manifest;

/* Build a table; 0 on success, -1 with a one-line error (bad config arithmetic, no memory).
 * Free with qvm_manifest_free (accepts a zeroed or half-built manifest). */
int qvm_manifest_model(qvm_manifest *m, const qvm_model_config *c, char *err, size_t err_size);
int qvm_manifest_codec(qvm_manifest *m, const qvm_codec_config *c, char *err, size_t err_size);
void qvm_manifest_free(qvm_manifest *m);

/* Adapts a model table to the compressed layouts st uses (docs/compression.md): with
 * c->quant_bits set, each non-embedding `X.weight` matrix [o, i] whose `X.scales` st holds becomes
 * X.weight U32 [o, i·bits/32] + X.scales, X.biases [o, i/group]; with
 * `talker.model.text_token_map` in st the text embedding has the rows st holds (1..text_vocab_size)
 * and the map is expected as I32 [text_vocab_size]. 0, or -1 with a one-line error (m unchanged). */
int qvm_manifest_compressed(qvm_manifest *m, const qvm_model_config *c, const qvm_st *st,
                            char *err, size_t err_size);

/* The tensors of one Qwen3 decoder layer (§2.1), in the order of qvm_layer's fields: the one
 * name table the manifest, the model loader and the weight-delta loader walk. */
#define QVM_LAYER_N_TENSORS 11
/* Tensor k (0 <= k < QVM_LAYER_N_TENSORS) of layer i of stack s under prefix ("talker.model"):
 * writes "PREFIX.layers.I.SUFFIX" to name and its shape to shape[2] ([n] or [rows, cols]);
 * returns the number of dims (1 for a norm vector, 2 for a bf16 matrix). */
int qvm_layer_tensor(const qvm_stack_config *s, const char *prefix, int i, int k, char *name,
                     size_t name_size, int64_t shape[2]);

/* The tensor names of the speaker encoder (ECAPA), the speech decoder and the Mimi encoder: the
 * one spelling, used by the tables above and by the loaders (features/ecapa.c,
 * engine/speech_decoder.c, features/speech_encoder.c). A MODULE kind names a conv whose tensors
 * are MODULE.weight and MODULE.bias. i, j: the indices the comment gives (others ignored). */
enum qvm_tensor_kind {
    /* speaker encoder modules (§5.2): b = SE-Res2Net block 1..3, j = Res2Net branch */
    QVM_T_ECAPA_BLOCK0, QVM_T_ECAPA_TDNN1 /* b */, QVM_T_ECAPA_RES2NET /* b, j */,
    QVM_T_ECAPA_TDNN2 /* b */, QVM_T_ECAPA_SE1 /* b */, QVM_T_ECAPA_SE2 /* b */, QVM_T_ECAPA_MFA,
    QVM_T_ECAPA_ASP_TDNN, QVM_T_ECAPA_ASP_CONV, QVM_T_ECAPA_FC,
    /* speech decoder (§6.1): split RVQ (codebook i), pre-conv, pre-transformer (layer i) */
    QVM_T_DEC_FIRST_SUM, QVM_T_DEC_FIRST_USAGE, QVM_T_DEC_REST_SUM, QVM_T_DEC_REST_USAGE,
    QVM_T_DEC_FIRST_IN, QVM_T_DEC_FIRST_OUT, QVM_T_DEC_REST_IN, QVM_T_DEC_REST_OUT,
    QVM_T_DEC_PRE_CONV_W, QVM_T_DEC_PRE_CONV_B, QVM_T_DEC_IN_PROJ_W, QVM_T_DEC_IN_PROJ_B,
    QVM_T_DEC_ATTN_NORM, QVM_T_DEC_Q, QVM_T_DEC_K, QVM_T_DEC_V, QVM_T_DEC_O, QVM_T_DEC_ATTN_SCALE,
    QVM_T_DEC_MLP_NORM, QVM_T_DEC_GATE, QVM_T_DEC_UP, QVM_T_DEC_DOWN, QVM_T_DEC_MLP_SCALE,
    QVM_T_DEC_NORM, QVM_T_DEC_OUT_PROJ_W, QVM_T_DEC_OUT_PROJ_B,
    /* ConvNeXt upsample stage i */
    QVM_T_DEC_UP_CONV_W, QVM_T_DEC_UP_CONV_B, QVM_T_DEC_UP_DW_W, QVM_T_DEC_UP_DW_B,
    QVM_T_DEC_UP_NORM_W, QVM_T_DEC_UP_NORM_B, QVM_T_DEC_UP_PW1_W, QVM_T_DEC_UP_PW1_B,
    QVM_T_DEC_UP_PW2_W, QVM_T_DEC_UP_PW2_B, QVM_T_DEC_UP_GAMMA,
    /* first conv, SnakeBeta block i (1..4) and its residual unit j (2..4), last SnakeBeta + conv */
    QVM_T_DEC_CONV0_W, QVM_T_DEC_CONV0_B, QVM_T_DEC_BLK_ALPHA, QVM_T_DEC_BLK_BETA,
    QVM_T_DEC_BLK_UP_W, QVM_T_DEC_BLK_UP_B, QVM_T_DEC_RES_ALPHA1, QVM_T_DEC_RES_BETA1,
    QVM_T_DEC_RES_CONV1_W, QVM_T_DEC_RES_CONV1_B, QVM_T_DEC_RES_ALPHA2, QVM_T_DEC_RES_BETA2,
    QVM_T_DEC_RES_CONV2_W, QVM_T_DEC_RES_CONV2_B, QVM_T_DEC_LAST_ALPHA, QVM_T_DEC_LAST_BETA,
    QVM_T_DEC_LAST_W, QVM_T_DEC_LAST_B,
    /* Mimi encoder (§6.2): SEANet modules (layer i, residual block conv j = 1 or 3), transformer
     * layer i, downsample, split RVQ (codebook i) */
    QVM_T_MIMI_CONV /* i */, QVM_T_MIMI_RES /* i, j */,
    QVM_T_MIMI_LN1_W, QVM_T_MIMI_LN1_B, QVM_T_MIMI_LN2_W, QVM_T_MIMI_LN2_B, QVM_T_MIMI_Q,
    QVM_T_MIMI_K, QVM_T_MIMI_V, QVM_T_MIMI_O, QVM_T_MIMI_FC1, QVM_T_MIMI_FC2,
    QVM_T_MIMI_ATTN_SCALE, QVM_T_MIMI_MLP_SCALE, QVM_T_MIMI_DOWNSAMPLE,
    QVM_T_MIMI_SEM_IN, QVM_T_MIMI_SEM_OUT, QVM_T_MIMI_ACO_IN, QVM_T_MIMI_ACO_OUT,
    QVM_T_MIMI_SEM_SUM, QVM_T_MIMI_SEM_USAGE, QVM_T_MIMI_ACO_SUM, QVM_T_MIMI_ACO_USAGE,
    QVM_T_N
};
/* Writes the name of kind k with indices i, j into name (name_size bytes, 160 is enough);
 * returns name. */
const char *qvm_tensor_name(char *name, size_t name_size, enum qvm_tensor_kind k, int i, int j);

/* Entry by exact name, or NULL. */
const qvm_manifest_entry *qvm_manifest_find(const qvm_manifest *m, const char *name);

/* Checks st against m: every entry present with its shape and a float dtype; with exact != 0
 * also no tensor beyond the table. -1 with "FILE: tensor NAME: expected [a, b] float, found
 * [c] I64", "FILE: tensor NAME: missing (expected [a, b])" or "FILE: unexpected tensor NAME
 * (expected 402 tensors, found 403)". */
int qvm_manifest_check_st(const qvm_manifest *m, const qvm_st *st, int exact, char *err,
                          size_t err_size);

/* Both files at once: main exactly against the model table, codec (may be NULL, then only main
 * is checked) against the codec table. 0 or -1 with a one-line error. */
int qvm_manifest_check(const qvm_model_config *mc, const qvm_codec_config *cc, const qvm_st *main,
                       const qvm_st *codec, char *err, size_t err_size);

#endif
