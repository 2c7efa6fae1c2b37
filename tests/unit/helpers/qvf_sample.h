/* qvf_sample.h — deterministic sample voices for the voicefmt tests and the fuzz seed corpus. */
#ifndef QVF_SAMPLE_H
#define QVF_SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include "voicefmt/qvf.h"

#define QVF_SAMPLE_N_ELEMS (96 * 64)
/* Target (CustomVoice) and result (Base) bf16 arrays of the sample's delta tensor. */
void qvf_sample_bf16(uint16_t *out, size_t n, uint32_t seed);
/* A voice with every chunk: x-vector, META, ICL, TPAD, WOVR and (with_wdelta) two tensors (one
 * bf16 bit-delta in 3 blocks, one f32 raw) targeting hidden 1024. NULL on allocation failure. */
qvf_voice *qvf_sample_voice(int with_wdelta);
/* 1 if a and b hold the same voice content (tensors compared decoded); else 0 with the first
 * difference in why. ids: also compare model identities. */
int qvf_sample_equal(const qvf_voice *a, const qvf_voice *b, int ids, char *why, size_t why_size);
/* Decodes every tensor of v over a zero target, as `voicefmt verify` does: 0, or the first
 * error code with err set. */
int qvf_sample_decode_all(const qvf_voice *v, char *err, size_t err_size);
/* Recomputes the header's and every chunk's CRC of the v4 file b, as an attacker who edits a
 * file would (a file whose framing no longer parses keeps its CRCs). */
void qvf_sample_fix_crcs(uint8_t *b, size_t n);
/* Serialises v (version 3 or 4) into a malloc'd buffer; NULL on failure. */
uint8_t *qvf_sample_serialize(const qvf_voice *v, int version, size_t *n_bytes);

#endif
