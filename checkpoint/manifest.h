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
