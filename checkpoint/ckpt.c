/* ckpt.c — opens a model directory once (ckpt.h): config.json is read once and both parsed and
 * fingerprinted from the same bytes; the two safetensors maps stay open for the handle's life.
 */
#include "checkpoint/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "checkpoint/fingerprint.h"
#include "util/fileio.h"

#define CONFIG_MAX_BYTES ((size_t)16 << 20) /* as config.c: real configs are < 10 kB */

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void qvm_tok_files_find(qvm_tok_files *f, const char *dir) {
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    snprintf(f->vocab_json, sizeof f->vocab_json, "%s/vocab.json", dir);
    snprintf(f->merges_txt, sizeof f->merges_txt, "%s/merges.txt", dir);
    snprintf(f->tokenizer_json, sizeof f->tokenizer_json, "%s/tokenizer.json", dir);
    snprintf(f->tokenizer_config_json, sizeof f->tokenizer_config_json,
             "%s/tokenizer_config.json", dir);
    f->vocab_merges = is_file(f->vocab_json) && is_file(f->merges_txt);
    f->has_tokenizer_json = is_file(f->tokenizer_json);
    f->has_config = is_file(f->tokenizer_config_json);
}

qvm_ckpt *qvm_ckpt_open(const char *dir, char *err, size_t err_size) {
    qvm_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) {
        snprintf(err, err_size, "%s: out of memory", dir);
        return NULL;
    }
    ck->n_refs = 1;
    snprintf(ck->dir, sizeof ck->dir, "%s", dir);
    qvm_tok_files_find(&ck->tok_files, dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n_cfg = 0;
    char *cfg = qvu_read_file(path, CONFIG_MAX_BYTES, &n_cfg, err, err_size);
    const int bad =
        !cfg || qvm_model_config_parse(&ck->cfg, dir, cfg, n_cfg, err, err_size) ||
        qvm_generation_config_load(&ck->gen, dir, err, err_size) ||
        qvm_codec_config_load(&ck->codec, dir, err, err_size) ||
        !(ck->st = qvm_st_open_dir(dir, "model", err, err_size)) ||
        !(ck->codec_st = qvm_st_open_dir(dir, "speech_tokenizer/model", err, err_size)) ||
        qvm_fingerprint_st(ck->st, cfg, n_cfg, QVM_FINGERPRINT_TABLE, ck->fingerprint, err,
                           err_size);
    free(cfg);
    if (bad) {
        qvm_ckpt_free(ck);
        return NULL;
    }
    return ck;
}

qvm_ckpt *qvm_ckpt_ref(qvm_ckpt *ck) {
    __atomic_add_fetch(&ck->n_refs, 1, __ATOMIC_RELAXED);
    return ck;
}

void qvm_ckpt_free(qvm_ckpt *ck) {
    if (!ck || __atomic_sub_fetch(&ck->n_refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    qvm_st_close(ck->st);
    qvm_st_close(ck->codec_st);
    free(ck);
}
