/* manifest.h — the expected-tensor tables of a Qwen3-TTS checkpoint, built from its configs
 * (internal, prefix qve_manifest_). Shapes derive from config values only (architecture doc §2),
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

#define QVE_MANIFEST_NAME_MAX 128

typedef struct {
    char name[QVE_MANIFEST_NAME_MAX];
    int n_dims;
    int64_t shape[4];
    enum qve_dtype dtype; /* as published: BF16 (model), F32 (codec). Checks accept any float. */
} qve_manifest_entry;

typedef struct {
    qve_manifest_entry *entries; /* owned, in a fixed order (talker, code predictor, speaker enc.) */
    int n_entries;
    int *by_name;                /* owned: entry indices sorted by name */
} qve_manifest;

/* Build a table; 0 on success, -1 with a one-line error (bad config arithmetic, no memory).
 * Free with qve_manifest_free (accepts a zeroed or half-built manifest). */
int qve_manifest_model(qve_manifest *m, const qve_model_config *c, char *err, size_t err_size);
int qve_manifest_codec(qve_manifest *m, const qve_codec_config *c, char *err, size_t err_size);
void qve_manifest_free(qve_manifest *m);

/* The tensors of one Qwen3 decoder layer (§2.1), in the order of qve_layer's fields: the one
 * name table the manifest, the model loader and the weight-delta loader walk. */
#define QVE_LAYER_N_TENSORS 11
/* Tensor k (0 <= k < QVE_LAYER_N_TENSORS) of layer i of stack s under prefix ("talker.model"):
 * writes "PREFIX.layers.I.SUFFIX" to name and its shape to shape[2] ([n] or [rows, cols]);
 * returns the number of dims (1 for a norm vector, 2 for a bf16 matrix). */
int qve_layer_tensor(const qve_stack_config *s, const char *prefix, int i, int k, char *name,
                     size_t name_size, int64_t shape[2]);

/* Entry by exact name, or NULL. */
const qve_manifest_entry *qve_manifest_find(const qve_manifest *m, const char *name);

/* Checks st against m: every entry present with its shape and a float dtype; with exact != 0
 * also no tensor beyond the table. -1 with "FILE: tensor NAME: expected [a, b] float, found
 * [c] I64", "FILE: tensor NAME: missing (expected [a, b])" or "FILE: unexpected tensor NAME
 * (expected 402 tensors, found 403)". */
int qve_manifest_check_st(const qve_manifest *m, const qve_st *st, int exact, char *err,
                          size_t err_size);

/* Both files at once: main exactly against the model table, codec (may be NULL, then only main
 * is checked) against the codec table. 0 or -1 with a one-line error. */
int qve_manifest_check(const qve_model_config *mc, const qve_codec_config *cc, const qve_st *main,
                       const qve_st *codec, char *err, size_t err_size);

#endif
