/* wdelta.c — WDELTA tensors: int16 bit deltas (result − target, mod 2^16; qvoice-format.md §4.8)
 * compressed as independent LZ4 blocks of bounded size, so applying a delta needs one block of scratch memory
 * whatever the tensor size. Operates on raw bf16 arrays: no dependency on the engine.
 */
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
#include "util/sha256.h"
#include "voicefmt/qvf_impl.h"

static uint64_t block_len(const qvf_tensor *t, uint32_t i) {
    return i + 1 < t->n_blocks ? t->block_bytes
                               : t->raw_bytes - t->block_bytes * (uint64_t)(t->n_blocks - 1);
}

/* Compresses raw_bytes of deltas into t (owned data). src is the delta itself (target NULL) or the
 * result, with deltas computed per block against target. */
static int compress_blocks(qvf_tensor *t, const uint16_t *src, const uint16_t *target, uint64_t bb,
                           const char *name, char *err, size_t es) {
    uint64_t raw = t->raw_bytes;
    uint32_t nblk = (uint32_t)((raw + bb - 1) / bb);
    int bound = LZ4_compressBound((int)bb);
    uint64_t cap = (uint64_t)bound * nblk;
    uint16_t *scratch = target ? malloc(bb) : NULL;
    t->owned_data = malloc(cap ? cap : 1);
    t->block_offsets = malloc(8ull * (nblk + 1));
    if ((target && !scratch) || !t->owned_data || !t->block_offsets) {
        free(scratch);
        return qvf_fail(err, es, QVF_E_NOMEM, name, "tensor %s: %llu bytes for compression",
                        t->name, (unsigned long long)cap);
    }
    uint64_t pos = 0;
    for (uint32_t i = 0; i < nblk; i++) {
        uint64_t off = (uint64_t)i * bb, len = i + 1 < nblk ? bb : raw - off;
        const uint16_t *in = src + off / 2;
        if (target) {
            const uint16_t *tg = target + off / 2;
            for (uint64_t j = 0; j < len / 2; j++)
                scratch[j] = (uint16_t)(in[j] - tg[j]);
            in = scratch;
        }
        int z =
            LZ4_compress_default((const char *)in, (char *)t->owned_data + pos, (int)len, bound);
        if (z <= 0) {
            free(scratch);
            return qvf_fail(err, es, QVF_E_LZ4, name, "tensor %s: LZ4 compression failed", t->name);
        }
        t->block_offsets[i] = pos;
        pos += (uint64_t)z;
    }
    t->block_offsets[nblk] = pos;
    free(scratch);
    uint8_t *shrunk = realloc(t->owned_data, pos ? pos : 1);
    if (shrunk) t->owned_data = shrunk;
    t->data = t->owned_data;
    t->data_bytes = pos;
    t->encoding = QVF_ENC_DELTA16_LZ4;
    t->block_bytes = bb;
    t->n_blocks = nblk;
    return QVF_OK;
}

int qvf_wdelta_encode(const char *name, uint32_t dtype, uint32_t n_dims, const uint64_t *shape,
                      const void *result, const void *target, uint64_t block_bytes, qvf_tensor *out,
                      char *err, size_t es) {
    memset(out, 0, sizeof *out);
    uint64_t elems = qvf_shape_elems(n_dims, shape), esz = dtype == QVF_DTYPE_BF16 ? 2 : 4;
    size_t nl = name ? strlen(name) : 0;
    if (nl < 1 || nl > QVF_MAX_NAME_BYTES || (dtype != QVF_DTYPE_BF16 && dtype != QVF_DTYPE_F32) ||
        !elems || elems > QVF_MAX_TENSOR_BYTES / esz || !result)
        return qvf_fail(err, es, QVF_E_ARG, name, "invalid tensor description");
    if (!block_bytes) block_bytes = QVF_BLOCK_BYTES_DEFAULT;
    if (block_bytes < QVF_MIN_BLOCK_BYTES || block_bytes > QVF_MAX_BLOCK_BYTES || block_bytes % 4)
        return qvf_fail(err, es, QVF_E_ARG, name,
                        "block_bytes %llu (expected %u..%u, multiple of 4)",
                        (unsigned long long)block_bytes, QVF_MIN_BLOCK_BYTES, QVF_MAX_BLOCK_BYTES);
    if (!(out->name = strdup(name))) return qvf_fail(err, es, QVF_E_NOMEM, name, "name");
    out->dtype = dtype;
    out->n_dims = n_dims;
    memcpy(out->shape, shape, n_dims * sizeof *shape);
    out->raw_bytes = elems * esz;
    int rc = qvu_sha256(result, out->raw_bytes, out->result_sha256) ? QVF_E_NOMEM : QVF_OK;
    if (!rc && dtype == QVF_DTYPE_BF16 && target) {
        rc = qvu_sha256(target, out->raw_bytes, out->target_sha256) ? QVF_E_NOMEM : QVF_OK;
        if (!rc)
            rc = compress_blocks(out, result, target, block_bytes, name, err, es);
        else
            qvf_fail(err, es, rc, name, "SHA-256");
    } else if (!rc) {
        if (!(out->owned_data = malloc(out->raw_bytes)))
            rc = qvf_fail(err, es, QVF_E_NOMEM, name, "raw tensor");
        else {
            memcpy(out->owned_data, result, out->raw_bytes);
            out->data = out->owned_data;
            out->data_bytes = out->raw_bytes;
            out->encoding = QVF_ENC_RAW;
        }
    } else {
        qvf_fail(err, es, rc, name, "SHA-256");
    }
    if (rc) qvf_tensor_free(out);
    return rc;
}

static int decode_block(const qvf_tensor *t, uint32_t i, uint8_t *dst, char *err, size_t es) {
    uint64_t len = block_len(t, i), a = t->block_offsets[i], b = t->block_offsets[i + 1];
    if (b < a || b > t->data_bytes || b - a > INT32_MAX)
        return qvf_fail(err, es, QVF_E_LZ4, "WDELTA", "tensor %s: block %u: bad offsets", t->name, i);
    int got = LZ4_decompress_safe((const char *)t->data + a, (char *)dst, (int)(b - a), (int)len);
    if (got < 0 || (uint64_t)got != len)
        return qvf_fail(err, es, QVF_E_LZ4, "WDELTA",
                        "tensor %s: block %u: LZ4 decode gave %d bytes (expected %llu)", t->name,
                        i, got, (unsigned long long)len);
    return QVF_OK;
}

int qvf_tensor_decode_delta(const qvf_tensor *t, uint8_t *out, char *err, size_t es) {
    if (t->encoding == QVF_ENC_RAW) {
        memcpy(out, t->data, t->raw_bytes);
        return QVF_OK;
    }
    for (uint32_t i = 0; i < t->n_blocks; i++) {
        int rc = decode_block(t, i, out + (uint64_t)i * t->block_bytes, err, es);
        if (rc) return rc;
    }
    return QVF_OK;
}

static int check_hash(const void *buf, uint64_t n, const uint8_t want[32], const char *name,
                      const char *what, char *err, size_t es) {
    uint8_t got[32];
    if (qvf_is_zero(want, 32)) return QVF_OK;
    if (qvu_sha256(buf, n, got)) return qvf_fail(err, es, QVF_E_NOMEM, name, "SHA-256");
    if (memcmp(got, want, 32))
        return qvf_fail(err, es, QVF_E_HASH, name,
                        "%s tensor SHA-256 differs from the one recorded", what);
    return QVF_OK;
}

int qvf_wdelta_apply(const qvf_tensor *t, const void *target, void *out, int verify, char *err,
                     size_t es) {
    if (!t || !out ||
        (t->encoding == QVF_ENC_DELTA16_LZ4 &&
         (!target || ((uintptr_t)target | (uintptr_t)out) % 2)))
        return qvf_fail(err, es, QVF_E_ARG, t ? t->name : NULL, "NULL or misaligned buffer");
    int rc;
    if (t->encoding == QVF_ENC_RAW) {
        memmove(out, t->data, t->raw_bytes);
        return verify ? check_hash(out, t->raw_bytes, t->result_sha256, t->name, "result", err, es)
                      : QVF_OK;
    }
    if (t->encoding != QVF_ENC_DELTA16_LZ4)
        return qvf_fail(err, es, QVF_E_ARG, t->name, "encoding %u", t->encoding);
    if (verify &&
        (rc = check_hash(target, t->raw_bytes, t->target_sha256, t->name, "target", err, es)))
        return rc;
    uint16_t *scratch = malloc(t->block_bytes < t->raw_bytes ? t->block_bytes : t->raw_bytes);
    if (!scratch) return qvf_fail(err, es, QVF_E_NOMEM, t->name, "block scratch");
    const uint16_t *tg = target;
    uint16_t *o = out;
    for (uint32_t i = 0; i < t->n_blocks; i++) {
        if ((rc = decode_block(t, i, (uint8_t *)scratch, err, es))) {
            free(scratch);
            return rc;
        }
        uint64_t base = (uint64_t)i * t->block_bytes / 2, n = block_len(t, i) / 2;
        for (uint64_t j = 0; j < n; j++)
            o[base + j] = (uint16_t)(tg[base + j] + scratch[j]);
    }
    free(scratch);
    return verify ? check_hash(out, t->raw_bytes, t->result_sha256, t->name, "result", err, es)
                  : QVF_OK;
}

int qvf_tensor_reblock(const qvf_tensor *src, uint64_t bb, qvf_tensor *dst, char *err, size_t es) {
    memset(dst, 0, sizeof *dst);
    uint8_t *delta = malloc(src->raw_bytes ? src->raw_bytes : 1);
    if (!delta)
        return qvf_fail(err, es, QVF_E_NOMEM, src->name, "%llu bytes",
                        (unsigned long long)src->raw_bytes);
    int rc = qvf_tensor_decode_delta(src, delta, err, es);
    if (!rc && !(dst->name = strdup(src->name)))
        rc = qvf_fail(err, es, QVF_E_NOMEM, src->name, "name");
    if (!rc) {
        dst->dtype = src->dtype;
        dst->n_dims = src->n_dims;
        memcpy(dst->shape, src->shape, sizeof dst->shape);
        dst->raw_bytes = src->raw_bytes;
        memcpy(dst->target_sha256, src->target_sha256, 32);
        memcpy(dst->result_sha256, src->result_sha256, 32);
        rc = compress_blocks(dst, (const uint16_t *)delta, NULL, bb, src->name, err, es);
    }
    free(delta);
    if (rc) qvf_tensor_free(dst);
    return rc;
}
