/* fingerprint.c — model and tensor SHA-256 (util/sha256.c). The stream hashed is specified in
 * fingerprint.h; every integer is serialised byte by byte (explicit little-endian) so the value is
 * the same on any host. Tensors are visited in name order, not header order, so re-serialising
 * or re-sharding a checkpoint leaves the fingerprint unchanged.
 */
#include "checkpoint/fingerprint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fileio.h"
#include "util/sha256.h"

#define CONFIG_MAX_BYTES ((size_t)16 << 20)
static const char k_tag[] = "qvoice-model-fingerprint-v1";

/* ==== helpers =============================================================================== */

static int put(qvu_sha256_ctx *ctx, const void *p, size_t n) {
    return qvu_sha256_add(ctx, p, n);
}

static int put_le(qvu_sha256_ctx *ctx, uint64_t v, int n_bytes) {
    uint8_t b[8];
    for (int i = 0; i < n_bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    return put(ctx, b, (size_t)n_bytes);
}

int qvm_tensor_sha256(const qvm_tensor *t, uint8_t out[32]) {
    return qvu_sha256(t->data, t->n_bytes, out);
}

/* ==== API =================================================================================== */

int qvm_fingerprint_st(const qvm_st *st, const void *config_json, size_t config_n_bytes,
                       enum qvm_fingerprint_mode mode, uint8_t out[32], char *err,
                       size_t err_size) {
    qvu_sha256_ctx *ctx = qvu_sha256_begin();
    if (!ctx) {
        snprintf(err, err_size, "%s: fingerprint: out of memory or SHA-256 unavailable",
                 qvm_st_file(st, NULL));
        return -1;
    }
    uint8_t m = mode == QVM_FINGERPRINT_CONTENT ? 1 : 0;
    int n = qvm_st_count(st), bad = 0;
    bad |= put(ctx, k_tag, sizeof k_tag - 1);
    bad |= put(ctx, &m, 1);
    bad |= put_le(ctx, config_n_bytes, 8);
    bad |= put(ctx, config_json, config_n_bytes);
    bad |= put_le(ctx, (uint64_t)n, 4);
    for (int i = 0; i < n && !bad; i++) {
        const qvm_tensor *t = qvm_st_at_sorted(st, i);
        size_t name_len = strlen(t->name);
        const char *dt = qvm_dtype_name(t->dtype);
        uint8_t dt_len = (uint8_t)strlen(dt), nd = (uint8_t)t->n_dims;
        bad |= put_le(ctx, name_len, 4);
        bad |= put(ctx, t->name, name_len);
        bad |= put(ctx, &dt_len, 1);
        bad |= put(ctx, dt, dt_len);
        bad |= put(ctx, &nd, 1);
        for (int k = 0; k < t->n_dims; k++) bad |= put_le(ctx, (uint64_t)t->shape[k], 8);
        if (m) {
            uint8_t h[32];
            bad |= qvm_tensor_sha256(t, h);
            bad |= put(ctx, h, 32);
        }
    }
    if (qvu_sha256_end(ctx, out) || bad) {
        snprintf(err, err_size, "%s: fingerprint: SHA-256 failed", qvm_st_file(st, NULL));
        return -1;
    }
    return 0;
}

int qvm_fingerprint_model(const char *dir, enum qvm_fingerprint_mode mode, uint8_t out[32],
                          char *err, size_t err_size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n_cfg;
    char *cfg = qvu_read_file(path, CONFIG_MAX_BYTES, &n_cfg, err, err_size);
    if (!cfg) return -1;
    qvm_st *st = qvm_st_open_dir(dir, "model", err, err_size);
    int rc = st ? qvm_fingerprint_st(st, cfg, n_cfg, mode, out, err, err_size) : -1;
    qvm_st_close(st);
    free(cfg);
    return rc;
}
