/* sibling.h — is a voice's source checkpoint the model's sibling (prefix qvm_)?
 * A Base and a CustomVoice checkpoint of one release share their text side: the same text
 * embedding and a text projection that differs only in low bits, so the rows a voice file
 * carries from its source (TPAD: tts_pad/bos/eos through the projection; WOVR: the projection's
 * biases) agree with the model's own to cosine ≈ 0.9999 (measured on the real 0.6B pair), while
 * an unrelated checkpoint of the same size gives unrelated rows. An x-vector alone carries no
 * such trace: a voice without TPAD and WOVR cannot be judged.
 */
#ifndef QV_SIBLING_H
#define QV_SIBLING_H

#include <stddef.h>

/* Lowest row cosine still taken for a sibling. Real and synthetic pairs sit above 0.999;
 * unrelated checkpoints near 0. */
#define QVM_SIBLING_MIN_COS 0.99

/* Text-side rows of a checkpoint; any pointer may be NULL (not carried). */
typedef struct {
    const float *tpad;     /* [3][hidden]: tts_pad, tts_bos, tts_eos through the text projection */
    const float *fc1_bias; /* [text_hidden]: talker.text_projection.linear_fc1.bias */
    const float *fc2_bias; /* [hidden]: talker.text_projection.linear_fc2.bias */
} qvm_text_rows;

enum qvm_kinship {
    QVM_KIN_SIBLING, /* every row pair present agrees to >= QVM_SIBLING_MIN_COS */
    QVM_KIN_FOREIGN, /* some row pair does not */
    QVM_KIN_UNKNOWN, /* no row present on both sides: cannot tell */
};

/* Compares the rows present in both voice and model (both of the model's hidden and
 * text_hidden sizes: callers check sizes first). *min_cos (may be NULL) gets the lowest cosine
 * (1 when unknown); why (may be NULL) gets a one-line reason naming the rows and that cosine.
 * Thread-safe; reads only. */
enum qvm_kinship qvm_sibling_judge(const qvm_text_rows *voice, const qvm_text_rows *model,
                                   int hidden, int text_hidden, double *min_cos, char *why,
                                   size_t why_size);

#endif
