/* ckpt.h — one opened model directory (internal, prefix qvm_ckpt_): its three configs, its
 * fingerprint, both safetensors maps and its tokenizer's file names, read and validated once and shared by everything that
 * loads from the directory (model, speech decoder, tokenizer, ECAPA, speech encoder, cloner,
 * compressor, voice verification). Key design: refcounted and read-only once open, so each user
 * holds a reference for its own lifetime and frees it once; no user reopens the directory.
 */
#ifndef QV_CKPT_H
#define QV_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/config.h"
#include "checkpoint/safetensors.h"

/* The text tokenizer's files in a model directory (§7) and which form they take. */
typedef struct {
    char dir[1024];
    char vocab_json[1100], merges_txt[1100], tokenizer_json[1100], tokenizer_config_json[1100];
    int vocab_merges; /* vocab.json and merges.txt both exist (that form is read), else
                         tokenizer.json */
    int has_tokenizer_json, has_config;
} qvm_tok_files;

/* Names dir's tokenizer files and notes which exist (regular files): the one rule for which
 * form a tokenizer reads. */
void qvm_tok_files_find(qvm_tok_files *f, const char *dir);

typedef struct qvm_ckpt {
    char dir[1024];
    qvm_model_config cfg;      /* config.json */
    qvm_generation_config gen; /* generation_config.json (fallbacks when absent, §1.4) */
    qvm_codec_config codec;    /* speech_tokenizer/config.json */
    uint8_t fingerprint[32];   /* QVM_FINGERPRINT_TABLE of config.json + model.safetensors */
    qvm_st *st;                /* model.safetensors (or its shards) */
    qvm_st *codec_st;          /* speech_tokenizer/model.safetensors */
    qvm_tok_files tok_files;   /* read by the model's tokenizer (engine/tokenizer.h) */
    int n_refs;                /* atomic; the handle is freed when it drops to 0 */
} qvm_ckpt;

/* Opens dir: reads and checks the three configs, maps both safetensors files (headers
 * validated, safetensors.h), fingerprints the model and names the tokenizer files (the
 * tokenizer reads them when first used). Tensor tables are checked by the loaders
 * (manifest.h) since each needs its own part. Returns the handle with one reference, or NULL
 * with one line "FILE: problem" in err. */
qvm_ckpt *qvm_ckpt_open(const char *dir, char *err, size_t err_size);
/* One more reference (for a user that outlives its creator's); returns ck. Thread-safe. */
qvm_ckpt *qvm_ckpt_ref(qvm_ckpt *ck);
/* Drops one reference; the last one unmaps and frees. Accepts NULL. Thread-safe. */
void qvm_ckpt_free(qvm_ckpt *ck);

#endif
