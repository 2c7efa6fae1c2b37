/* compress_impl.h — what the files of compress/ share. */
#ifndef QV_COMPRESS_IMPL_H
#define QV_COMPRESS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/config.h"

/* Marks keep[id] = 1 (keep has n_vocab entries, text_vocab_size) for every token id the corpus of
 * vocab ("english", "english-small" or a file, qvz.h) can produce, plus the ids always kept
 * (docs/compression.md):
 * integers 0–9999, printable ASCII, the 256 byte tokens, the chat-template pieces and
 * [151600, n_vocab). Tokenizer from ck's files. Returns the number kept, or -1 with err. */
int qvz_vocab_keep(const qvm_ckpt *ck, const char *vocab, uint8_t *keep, int n_vocab, char *err,
                   size_t err_size);

/* Greedy speech of a few built-in texts (n_frames each) through ck's talker, recording
 * act_max[l][i] = max |SwiGLU output| of neuron i of layer l (row stride: the config's
 * talker.intermediate_size, the widest layer). 0, or -1 with err. */
int qvz_calibrate(qvm_ckpt *ck, int n_threads, int n_frames, float *act_max, char *err,
                  size_t err_size);

/* Per layer l < n_layers of c: width[l] and keep[l] (malloc'd, ascending neuron indices; its first
 * width[l] entries count): every neuron for l < protect, else those with act_max >= threshold,
 * rounded up to a multiple of 64 with the strongest below it. -1 when out of memory (the keep[]
 * made so far are the caller's to free). */
int qvz_neuron_select(const float *act_max, const qvm_stack_config *c, int n_layers, int protect,
                      float threshold, int32_t **keep, int *width);

#endif
