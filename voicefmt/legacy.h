/* legacy.h — the legacy formats (legacy.c): v1–v3 .qvoice and raw .bin x-vectors. Included by
 * reader.c (file-type dispatch) and writer.c (v3 output) only; legacy.c itself depends only on
 * chunk.c, so the format files form no cycle.
 */
#ifndef QVF_LEGACY_H
#define QVF_LEGACY_H

#include "voicefmt/qvf_impl.h"

/* Parse v1..v3 core + sections, or a raw .bin x-vector, into v. */
int qvf_legacy_read(const uint8_t *buf, size_t n, const char *name, uint32_t enc_dim_hint,
                    qvf_voice *v, char *err, size_t err_size);
int qvf_bin_read(const uint8_t *buf, size_t n, const char *name, uint32_t enc_dim_hint,
                 qvf_voice *v, char *err, size_t err_size);
/* v3 serialisation to o; returns 0 or a code (validation before writing). */
int qvf_legacy_check_v3(const qvf_voice *v, const char *name, char *err, size_t err_size);
int qvf_legacy_write_v3(const qvf_voice *v, qvf_out *o, const char *name, char *err,
                        size_t err_size);

#endif
