/* fingerprint.h — SHA-256 identity of a model directory and of single tensors (internal, qvm_).
 * A voice file records the fingerprint of the model it was cloned for; a WDELTA chunk records
 * per-tensor hashes. Key design: tensors are hashed in name order with their dtype and shape, not
 * the header bytes, so re-serialising or re-sharding a checkpoint keeps the fingerprint; the
 * exact stream (v1) is specified below.
 */
#ifndef QV_FINGERPRINT_H
#define QV_FINGERPRINT_H

/* The fingerprint (v1) is SHA-256 over this byte stream, integers little-endian:
 *   "qvoice-model-fingerprint-v1" (27 bytes, no NUL), u8 mode (0 = table, 1 = content)
 *   u64 length of config.json, then config.json's bytes exactly as on disk
 *   u32 number of tensors N in model.safetensors (or the shards of model.safetensors.index.json)
 *   N records in byte-wise name order (strcmp), each:
 *     u32 name length, name bytes; u8 dtype length, dtype name ("BF16", "F16", "F32", "I64");
 *     u8 n_dims, n_dims × u64 dims;
 *     mode 1 only: the 32-byte SHA-256 of the tensor's raw data bytes (qvm_tensor_sha256).
 * Not hashed: the speech tokenizer (identical across models), generation_config.json, tokenizer
 * files, safetensors header layout/padding/offsets and __metadata__, file names and shard split.
 * Mode 0 ("table") reads ~5 kB + the header: instant. Mode 1 ("content") reads every weight byte
 * (~1-2 s for 1.8 GB with SHA-NI); it alone detects changed weight values.
 */

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/safetensors.h"

enum qvm_fingerprint_mode { QVM_FINGERPRINT_TABLE = 0, QVM_FINGERPRINT_CONTENT = 1 };

/* Fingerprint of dir (config.json + model.safetensors or model.safetensors.index.json).
 * 0, or -1 with a one-line "FILE: problem" error. */
int qvm_fingerprint_model(const char *dir, enum qvm_fingerprint_mode mode, uint8_t out[32],
                          char *err, size_t err_size);

/* Same from an already opened checkpoint and the config.json bytes (borrowed). */
int qvm_fingerprint_st(const qvm_st *st, const void *config_json, size_t config_n_bytes,
                       enum qvm_fingerprint_mode mode, uint8_t out[32], char *err,
                       size_t err_size);

/* SHA-256 of t's raw data bytes as stored (dtype, shape and name not included). 0 or -1. */
int qvm_tensor_sha256(const qvm_tensor *t, uint8_t out[32]);

#endif
