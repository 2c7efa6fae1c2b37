/* voice_verify.h — a voice file against a loaded model (prefix qve_); the public side is
 * qv_voice_file_verify (include/qvoice.h).
 */
#ifndef QVE_VOICE_VERIFY_H
#define QVE_VOICE_VERIFY_H

#include <stddef.h>

#include "checkpoint/sibling.h"
#include "include/qvoice.h"
#include "voicefmt/qvf.h"

/* Whether v was made with m's sibling checkpoint, judged from the TPAD/WOVR rows v carries
 * against m's own (checkpoint/sibling.h): QVM_KIN_SIBLING, QVM_KIN_FOREIGN or QVM_KIN_UNKNOWN
 * (no rows of m's size), or -1 when out of memory. why gets the one-line reason. Reads only;
 * safe on a model shared by other threads. */
int qve_voice_kinship(const qv_model *m, const qvf_voice *v, char *why, size_t why_size);

#endif
