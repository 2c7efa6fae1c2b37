/* speech_encoder.h — speech-tokenizer (Mimi) codes of reference audio, the voice's ICL prompt (prefix qva_).
 * Audio loading, mel and x-vector live in features/features.h.
 */
#ifndef QV_CLONE_H
#define QV_CLONE_H

#include <stddef.h>
#include <stdint.h>

#include "features/features.h"
#include "include/qvoice.h"

/* ---- speech-tokenizer (Mimi) encoder (§6.2) --------------------------------------------- */

typedef struct qva_speech_encoder qva_speech_encoder;
/* Loads encoder.* from ck's speech tokenizer (F32, borrowed from its mmap: the encoder holds a
 * reference to ck; codebooks embed_sum / max(cluster_usage, 1e-5) are computed once). NULL with
 * err on failure. */
qva_speech_encoder *qva_speech_encoder_load(struct qvm_ckpt *ck, char *err, size_t err_size);
void qva_speech_encoder_free(qva_speech_encoder *se);
/* Attention window in 25 Hz frames: 0 = plain causal (default, what the official eager path
 * computes), otherwise query i sees keys i−window < j ≤ i (flash-attention behaviour). */
void qva_speech_encoder_set_window(qva_speech_encoder *se, int window);
/* ⌈n_samples / 1920⌉. */
int qva_speech_encoder_n_frames(int64_t n_samples);
/* x [n] mono 24 kHz → codes [n_frames, 16] (frame-major, codebook 0 = semantic). Returns 0, or -1
 * with err on allocation failure / empty input. */
int qva_speech_encoder_encode(const qva_speech_encoder *se, qvk_pool *pool, int32_t *codes,
                              const float *x, int64_t n, char *err, size_t err_size);

#endif
