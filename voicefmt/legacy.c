/* legacy.c — legacy v1–v3 .qvoice and raw .bin x-vectors (docs/qvoice-format.md §7), read with
 * the same bounds-checked cursor as v4, and the byte-compatible v3 writer.
 * Reading keeps the legacy engine's semantics (positional probes that consume their tag, WDLT
 * header heuristic, bytes after the last section ignored) but refuses what it read unchecked: short
 * sections, oversize lengths, raw records whose size disagrees, zlib encodings 2/3.
 */
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
#include "voicefmt/legacy.h"

/* Bounds on what a legacy LZ4 record may decode to, checked when the file is read, before anything
 * is decoded (a v3 → v4 rewrite decodes each record whole, qvf_tensor_reblock). The largest tensor
 * of either legacy talker is the text embedding, [151936 × 2048] bf16 (docs/qvoice-format.md §8.4).
 * Real WDELTA streams decode to ≈2.3× their LZ4 bytes (0.6B: ≈1.7 GiB from 769 MB) and ≈1.35×
 * (1.7B: ≈3.6 GiB from 2,876 MB), an unchanged tensor (zeros, ≈255×) being a small part of them; a
 * stream that expands more than 8× its compressed bytes (plus 1 MiB for tiny test models) is an
 * amplification, not a voice: 8 MB of zeros claiming 2 GB would otherwise be decoded in full. */
#define LEGACY_MAX_DELTA_BYTES (151936ull * 2048 * 2)
#define LEGACY_MAX_EXPANSION 8ull
#define LEGACY_EXPANSION_ALLOWANCE (1ull << 20)

#define NEED(c, k, what)                                                                           \
    do {                                                                                           \
        if (!cur_has((c), (k)))                                                                    \
            return qvf_fail(err, es, QVF_E_TRUNCATED, name,                                        \
                            "%s at offset %zu: truncated (need %llu bytes, %zu left)", (what),     \
                            (c)->off, (unsigned long long)(k), cur_left(c));                       \
    } while (0)

static uint32_t take32(qvf_cur *c) {
    uint32_t x = rd32(c->p + c->off);
    c->off += 4;
    return x;
}

/* Probe = the engine's fread of a 4-byte tag: consumes the bytes even when they do not match. */
static int probe(qvf_cur *c, const char *tag) {
    if (cur_left(c) < 4) {
        c->off = c->n;
        return 0;
    }
    int match = !memcmp(c->p + c->off, tag, 4);
    c->off += 4;
    return match;
}

static int fixed_string(const uint8_t *p, size_t cap, char **out) {
    size_t len = 0;
    while (len < cap && p[len])
        len++;
    if (!qvf_utf8_valid(p, len)) return QVF_E_UTF8;
    if (!len) return QVF_OK;
    return (*out = strndup((const char *)p, len)) ? QVF_OK : QVF_E_NOMEM;
}

static int read_meta(qvf_cur *c, const char *name, qvf_voice *v, char *err, size_t es) {
    NEED(c, 100, "META");
    const uint8_t *p = c->p + c->off;
    char *lang = NULL, *vname = NULL, buf[32];
    int rc = fixed_string(p + 4, 16, &lang);
    if (!rc) rc = fixed_string(p + 32, 64, &vname);
    if (rc) {
        free(lang);
        return qvf_fail(err, es, rc, name, "META: %s",
                        rc == QVF_E_UTF8 ? "language or voice name is not UTF-8" : "out of memory");
    }
    uint32_t lang_id = rd32(p), model_size = rd32(p + 20), flags = rd32(p + 96);
    float ref_dur;
    memcpy(&ref_dur, p + 28, 4);
    v->has_meta = 1;
    if (vname) rc = qvf_meta_set(v, "name", vname);
    if (!rc && lang) rc = qvf_meta_set(v, "language", lang);
    snprintf(buf, sizeof buf, "%u", lang_id);
    if (!rc && lang_id) rc = qvf_meta_set(v, "language_id", buf);
    snprintf(buf, sizeof buf, "%.9g", (double)ref_dur);
    if (!rc) rc = qvf_meta_set(v, "max_ref_duration_s", buf);
    snprintf(buf, sizeof buf, "%u", flags);
    if (!rc) rc = qvf_meta_set(v, "v3_flags", buf);
    free(lang);
    free(vname);
    if (rc) return qvf_fail(err, es, rc, name, "META: %s", qvf_strerror(rc));
    v->source.hidden_size = model_size;
    if (flags & 4) v->source.variant = QVF_VARIANT_BASE;
    c->off += 100;
    return QVF_OK;
}

/* TPAD and WOVR as in v4 but packed (chunk.c); their dims also fill in the source identity. */
static int read_tpad(qvf_cur *c, const char *name, qvf_voice *v, char *err, size_t es) {
    qvf_chunk_ctx x = {name, "TPAD", c->off, err, es};
    uint64_t used;
    int rc = qvf_tpad_read(&x, c->p + c->off, cur_left(c), 0, v, &used);
    if (rc) return rc;
    c->off += used;
    if (!v->source.hidden_size) v->source.hidden_size = v->tpad_hidden;
    return QVF_OK;
}

static int read_wovr(qvf_cur *c, const char *name, qvf_voice *v, char *err, size_t es) {
    qvf_chunk_ctx x = {name, "WOVR", c->off, err, es};
    uint64_t used;
    int rc = qvf_wovr_read(&x, c->p + c->off, cur_left(c), 0, v, &used);
    if (rc) return rc;
    c->off += used;
    if (!v->source.text_hidden_size) v->source.text_hidden_size = v->wovr_th;
    return QVF_OK;
}

/* Legacy records carry no dtype: norms and biases are f32, everything else bf16
 * (qvoice-format.md §7). */
static uint32_t guess_dtype(const char *n) {
    size_t l = strlen(n);
    if ((l >= 4 && !strcmp(n + l - 4, "bias")) || (l >= 11 && !strcmp(n + l - 11, "norm.weight")))
        return QVF_DTYPE_F32;
    return QVF_DTYPE_BF16;
}

static int read_record(qvf_cur *c, const char *name, uint32_t idx, qvf_tensor *t, char *err,
                       size_t es) {
    NEED(c, 2, "tensor record");
    uint16_t nl = rd16(c->p + c->off);
    c->off += 2;
    if (nl < 1 || nl > QVF_MAX_NAME_BYTES)
        return qvf_fail(err, es, QVF_E_LIMIT, name,
                        "weight record %u: name of %u bytes (expected 1..%u)", idx, nl,
                        QVF_MAX_NAME_BYTES);
    NEED(c, nl + 9ull, "tensor record");
    const uint8_t *np = c->p + c->off;
    for (uint32_t i = 0; i < nl; i++)
        if (np[i] < 0x21 || np[i] > 0x7E)
            return qvf_fail(err, es, QVF_E_RANGE, name, "weight record %u: name has byte 0x%02x",
                            idx, np[i]);
    c->off += nl;
    uint32_t raw = take32(c);
    uint8_t enc = c->p[c->off++];
    uint32_t pb = take32(c);
    if (!(t->name = strndup((const char *)np, nl)))
        return qvf_fail(err, es, QVF_E_NOMEM, name, "tensor name");
    NEED(c, pb, t->name);
    if (enc == 2 || enc == 3)
        return qvf_fail(err, es, QVF_E_UNSUPPORTED, name,
                        "tensor %s: legacy zlib encoding %u (recreate the voice)", t->name, enc);
    if (raw == 0) return qvf_fail(err, es, QVF_E_RANGE, name, "tensor %s: raw_bytes 0", t->name);
    if (enc == 4) {
        if (raw % 2)
            return qvf_fail(err, es, QVF_E_MISMATCH, name,
                            "tensor %s: odd raw_bytes %u for a bf16 delta", t->name, raw);
        /* LZ4 expands at most ~255x: a larger claim is a lie we must not allocate for */
        if (raw > LZ4_MAX_INPUT_SIZE || pb < 1 || pb > (uint32_t)LZ4_compressBound((int)raw) ||
            raw > 255ull * pb + 64)
            return qvf_fail(err, es, QVF_E_RANGE, name,
                            "tensor %s: compressed size %u for %u bytes", t->name, pb, raw);
        if (raw > LEGACY_MAX_DELTA_BYTES)
            return qvf_fail(err, es, QVF_E_LIMIT, name,
                            "tensor %s: delta decodes to %u bytes, more than the largest tensor of "
                            "any model (%llu)",
                            t->name, raw, LEGACY_MAX_DELTA_BYTES);
        t->dtype = QVF_DTYPE_BF16;
        t->encoding = QVF_ENC_DELTA16_LZ4;
        t->block_bytes = raw;
        t->n_blocks = 1;
        if (!(t->block_offsets = malloc(2 * sizeof *t->block_offsets)))
            return qvf_fail(err, es, QVF_E_NOMEM, name, "tensor");
        t->block_offsets[0] = 0;
        t->block_offsets[1] = pb;
    } else { /* 0, and the codes the engine treats as raw (1, 5, ...) */
        if (pb != raw)
            return qvf_fail(err, es, QVF_E_MISMATCH, name,
                            "tensor %s: raw record of %u bytes declares raw_bytes %u", t->name, pb,
                            raw);
        t->dtype = guess_dtype(t->name);
        if (raw % (t->dtype == QVF_DTYPE_F32 ? 4 : 2)) t->dtype = QVF_DTYPE_BF16;
        if (raw % 2)
            return qvf_fail(err, es, QVF_E_MISMATCH, name, "tensor %s: odd raw_bytes %u", t->name,
                            raw);
        t->encoding = QVF_ENC_RAW;
    }
    t->n_dims = 1;
    t->shape[0] = raw / (t->dtype == QVF_DTYPE_F32 ? 4 : 2);
    t->raw_bytes = raw;
    t->data = c->p + c->off;
    t->data_bytes = pb;
    c->off += pb;
    return QVF_OK;
}

static int read_weights(qvf_cur *c, const char *name, qvf_voice *v, char *err, size_t es) {
    if (cur_left(c) < 5) return QVF_OK;
    const uint8_t *p = c->p + c->off;
    uint32_t kind;
    if (!memcmp(p, "WDLT", 4)) {
        c->off += 4;
        NEED(c, 4, "WDLT header");
        uint32_t x = take32(c);
        if (x == 1024 || x == 2048) { /* the legacy engine's heuristic, qvoice-format.md §7 */
            kind = QVF_WKIND_DELTA;
            v->target.hidden_size = x;
            v->target.variant = QVF_VARIANT_CUSTOM_VOICE;
            NEED(c, 4, "WDLT header");
        } else {
            kind = QVF_WKIND_DELTA_NOHIDDEN;
            c->off -= 4;
        }
    } else if (!memcmp(p, "WFULL", 5)) {
        c->off += 5;
        NEED(c, 4, "WFULL header");
        kind = QVF_WKIND_FULL;
    } else {
        return QVF_OK; /* trailing data: the engine's one extension point */
    }
    uint32_t k = take32(c);
    if (k > QVF_MAX_TENSORS)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "weight stream: %u tensors (maximum %u)", k,
                        QVF_MAX_TENSORS);
    if (11ull * k > cur_left(c))
        return qvf_fail(err, es, QVF_E_TRUNCATED, name,
                        "weight stream: truncated: %u tensors cannot fit in %zu bytes", k,
                        cur_left(c));
    if (k && !(v->tensors = calloc(k, sizeof *v->tensors)))
        return qvf_fail(err, es, QVF_E_NOMEM, name, "tensor table");
    v->has_wdelta = 1;
    v->wdelta_kind = kind;
    uint64_t packed = 0, unpacked = 0; /* over the LZ4 records */
    for (uint32_t i = 0; i < k; i++) {
        v->n_tensors = i + 1;
        int rc = read_record(c, name, i, &v->tensors[i], err, es);
        if (rc) return rc;
        if (v->tensors[i].encoding == QVF_ENC_DELTA16_LZ4) {
            packed += v->tensors[i].data_bytes;
            unpacked += v->tensors[i].raw_bytes;
        }
    }
    if (unpacked > LEGACY_MAX_EXPANSION * packed + LEGACY_EXPANSION_ALLOWANCE)
        return qvf_fail(err, es, QVF_E_LIMIT, name,
                        "weight stream: %llu bytes of LZ4 deltas decode to %llu bytes (%.0fx; no "
                        "real voice expands more than %llux)",
                        (unsigned long long)packed, (unsigned long long)unpacked,
                        (double)unpacked / (double)packed, LEGACY_MAX_EXPANSION);
    return QVF_OK;
}

/* ---------------------------------------------------------------- QV4X trailer
 * What v3 cannot hold (model identities, extra META keys, tensor dtypes/shapes/hashes) is appended
 * after the last section, the legacy engine's one ignored extension point (docs/qvoice-format.md
 * §7): "QV4X", u32 length L, payload, u32 CRC over tag, length and payload. Payload: the v4 HEAD
 * payload (128 B), u32 meta_bytes + a v4 META payload, u32 n_tensors + per tensor: u32 name_bytes,
 * name, u32 dtype, u32 n_dims, u64 shape[4], target SHA-256, result SHA-256. */

/* The trailer's HEAD copy (h): the model identity fields the v4 chunks left zero. */
static int trailer_identity(const uint8_t *h, qvf_voice *v, const char *name, char *err, size_t es) {
    qvf_model_id src, tgt;
    memcpy(&src, &v->source, sizeof src);
    memcpy(&tgt, &v->target, sizeof tgt);
    uint32_t *s_f[3] = {&src.hidden_size, &src.text_hidden_size, &src.enc_dim},
             *t_f[4] = {&tgt.hidden_size, &tgt.text_hidden_size, &tgt.enc_dim, &tgt.variant};
    for (int i = 0; i < 3; i++)
        if (!*s_f[i]) *s_f[i] = rd32(h + 16 + 4 * i);
    if (!src.variant) src.variant = rd32(h + 28);
    memcpy(src.fingerprint, h + 32, 32);
    if (v->has_wdelta) {
        for (int i = 0; i < 4; i++)
            if (!*t_f[i]) *t_f[i] = rd32(h + 64 + 4 * i);
        memcpy(tgt.fingerprint, h + 80, 32);
    }
    if (src.variant > QVF_VARIANT_VOICE_DESIGN || tgt.variant > QVF_VARIANT_VOICE_DESIGN ||
        src.enc_dim != v->enc_dim)
        return qvf_fail(err, es, QVF_E_MISMATCH, name,
                        "QV4X trailer: model identity does not match the file");
    v->source = src;
    v->target = tgt;
    return QVF_OK;
}

/* The trailer's META (at the cursor): keys the v4 chunks did not set. */
static int trailer_meta(qvf_cur *c, qvf_voice *v, const char *name, char *err, size_t es) {
    uint32_t mb = take32(c);
    NEED(c, mb, "QV4X META");
    if (mb) {
        qvf_voice *m = qvf_voice_new();
        if (!m) return qvf_fail(err, es, QVF_E_NOMEM, name, "QV4X");
        qvf_chunk_ctx x = {name, "QV4X", 0, err, es};
        int rc = qvf_meta_parse(&x, c->p + c->off, mb, m);
        for (int i = 0; !rc && i < m->n_meta; i++)
            if (!qvf_meta_get(v, m->meta[i].key))
                rc = qvf_meta_set(v, m->meta[i].key, m->meta[i].value);
        qvf_voice_free(m);
        if (rc) return rc == QVF_E_NOMEM ? qvf_fail(err, es, rc, name, "QV4X META") : rc;
        c->off += mb;
    }
    return QVF_OK;
}

/* One trailer tensor entry (p: name of nl bytes, then dtype, dims, shape, digests): the dtype,
 * shape and digests of the WDTN tensor of that name. */
static int trailer_tensor(const uint8_t *p, uint32_t nl, qvf_voice *v, const char *name, char *err,
                          size_t es) {
    uint32_t dtype = rd32(p + nl), nd = rd32(p + nl + 4);
    uint64_t shape[4];
    for (int j = 0; j < 4; j++)
        shape[j] = rd64(p + nl + 8 + 8 * j);
    for (uint32_t j = 0; j < v->n_tensors; j++) {
        qvf_tensor *t = &v->tensors[j];
        if (strlen(t->name) != nl || memcmp(t->name, p, nl)) continue;
        uint64_t esz = dtype == QVF_DTYPE_BF16 ? 2 : 4, el = qvf_shape_elems(nd, shape);
        if ((dtype != QVF_DTYPE_BF16 && dtype != QVF_DTYPE_F32) || !el ||
            el > t->raw_bytes / esz || el * esz != t->raw_bytes ||
            (t->encoding == QVF_ENC_DELTA16_LZ4 && dtype != QVF_DTYPE_BF16))
            return qvf_fail(err, es, QVF_E_MISMATCH, name,
                            "QV4X trailer: tensor %s: dtype/shape do not match %llu bytes",
                            t->name, (unsigned long long)t->raw_bytes);
        for (uint32_t d = nd; d < 4; d++)
            if (shape[d])
                return qvf_fail(err, es, QVF_E_RESERVED, name,
                                "QV4X trailer: tensor %s: unused shape entry not zero",
                                t->name);
        t->dtype = dtype;
        t->n_dims = nd;
        memcpy(t->shape, shape, sizeof shape);
        memcpy(t->target_sha256, p + nl + 40, 32);
        memcpy(t->result_sha256, p + nl + 72, 32);
    }
    return QVF_OK;
}

static int read_trailer(const uint8_t *buf, size_t n, size_t off, const char *name, qvf_voice *v,
                        char *err, size_t es) {
    if (n - off < 8 || memcmp(buf + off, "QV4X", 4)) return QVF_OK;
    uint32_t len = rd32(buf + off + 4);
    if ((uint64_t)len + 4 > n - off - 8)
        return qvf_fail(err, es, QVF_E_TRUNCATED, name,
                        "QV4X trailer at offset %zu: truncated (%u bytes + CRC, %zu left)", off,
                        len, n - off - 8);
    uint32_t crc = qvf_crc32c(0, buf + off, 8ull + len);
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    if (crc != rd32(buf + off + 8 + len))
        return qvf_fail(err, es, QVF_E_CRC, name,
                        "QV4X trailer at offset %zu: CRC mismatch (stored 0x%08x, computed 0x%08x)",
                        off, rd32(buf + off + 8 + len), crc);
#endif
    qvf_cur cur = {buf + off + 8, len, 0}, *c = &cur;
    NEED(c, QVF_HEAD_BYTES + 4, "QV4X HEAD");
    const uint8_t *h = c->p;
    int rc = trailer_identity(h, v, name, err, es);
    if (rc) return rc;
    c->off += QVF_HEAD_BYTES;
    if ((rc = trailer_meta(c, v, name, err, es))) return rc;
    NEED(c, 4, "QV4X tensor table");
    uint32_t k = take32(c);
    for (uint32_t i = 0; i < k; i++) {
        NEED(c, 4, "QV4X tensor entry");
        uint32_t nl = take32(c);
        NEED(c, nl + 112ull, "QV4X tensor entry");
        const uint8_t *p = c->p + c->off;
        c->off += nl + 112ull;
        if ((rc = trailer_tensor(p, nl, v, name, err, es))) return rc;
    }
    return QVF_OK;
}

int qvf_legacy_read(const uint8_t *buf, size_t n, const char *name, uint32_t hint, qvf_voice *v,
                    char *err, size_t es) {
    qvf_cur cur = {buf, n, 4}, *c = &cur;
    uint32_t ver = take32(c), d;
    v->file_version = (int)ver;
    if (ver >= 2) {
        NEED(c, 4, "enc_dim");
        d = take32(c);
    } else {
        d = hint ? hint : 1024; /* v1 writers always wrote 1024 floats (qvoice-format.md §7) */
    }
    if (d < 1 || d > QVF_MAX_DIM)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "enc_dim %u (expected 1..%u)", d, QVF_MAX_DIM);
    NEED(c, 4ull * d, "x-vector");
    if (!(v->xvector = malloc(4ull * d))) return qvf_fail(err, es, QVF_E_NOMEM, name, "x-vector");
    memcpy(v->xvector, c->p + c->off, 4ull * d);
    c->off += 4ull * d;
    v->enc_dim = v->source.enc_dim = d;
    NEED(c, 4, "ref_text_len");
    uint32_t l = take32(c);
    if (l > QVF_MAX_TEXT_BYTES)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "ref_text of %u bytes (maximum %u)", l,
                        QVF_MAX_TEXT_BYTES);
    NEED(c, l, "ref_text");
    if (!qvf_utf8_valid(c->p + c->off, l) || memchr(c->p + c->off, 0, l))
        return qvf_fail(err, es, QVF_E_UTF8, name, "ref_text is not UTF-8 text");
    if (l && !(v->transcript = strndup((const char *)c->p + c->off, l)))
        return qvf_fail(err, es, QVF_E_NOMEM, name, "ref_text");
    v->transcript_bytes = l;
    c->off += l;
    NEED(c, 4, "n_ref_frames");
    uint32_t f = take32(c);
    if (f > QVF_MAX_FRAMES)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "%u ref frames (maximum %u)", f,
                        QVF_MAX_FRAMES);
    NEED(c, 64ull * f, "ref_codes");
    if (f && !(v->codes = malloc(32ull * f))) return qvf_fail(err, es, QVF_E_NOMEM, name, "codes");
    for (uint64_t i = 0; i < 16ull * f; i++) {
        uint32_t code = rd32(c->p + c->off + 4 * i);
        if (code >= QVF_CODE_LIMIT)
            return qvf_fail(err, es, QVF_E_RANGE, name,
                            "ref frame %llu codebook %llu: code %d (expected 0..%u)",
                            (unsigned long long)(i / 16), (unsigned long long)(i % 16), (int)code,
                            QVF_CODE_LIMIT - 1);
        v->codes[i] = (uint16_t)code;
    }
    v->n_frames = f;
    c->off += 64ull * f;
    if (ver < 3) return QVF_OK; /* v1/v2: anything after the core is ignored, as the engine does */
    int rc;
    size_t end = c->off; /* end of the last section parsed: where a QV4X trailer may start */
    if (probe(c, "META")) {
        if ((rc = read_meta(c, name, v, err, es))) return rc;
        end = c->off;
    }
    if (probe(c, "TPAD")) {
        if ((rc = read_tpad(c, name, v, err, es))) return rc;
        end = c->off;
    }
    if (probe(c, "WOVR")) {
        if ((rc = read_wovr(c, name, v, err, es))) return rc;
        end = c->off;
    }
    size_t before = c->off;
    if ((rc = read_weights(c, name, v, err, es))) return rc;
    if (c->off != before) end = c->off;
    return read_trailer(buf, n, end, name, v, err, es);
}

int qvf_bin_read(const uint8_t *buf, size_t n, const char *name, uint32_t hint, qvf_voice *v,
                 char *err, size_t es) {
    if (n == 0 || n % 4)
        return qvf_fail(err, es, QVF_E_CHUNK_SIZE, name,
                        "raw x-vector of %zu bytes (expected a multiple of 4)", n);
    if (n / 4 > QVF_MAX_DIM)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "raw x-vector of %zu floats (maximum %u)",
                        n / 4, QVF_MAX_DIM);
    if (hint && n != 4ull * hint)
        return qvf_fail(err, es, QVF_E_MISMATCH, name, "raw x-vector of %zu floats (expected %u)",
                        n / 4, hint);
    v->file_version = 0;
    if (!(v->xvector = malloc(n))) return qvf_fail(err, es, QVF_E_NOMEM, name, "x-vector");
    memcpy(v->xvector, buf, n);
    v->enc_dim = v->source.enc_dim = (uint32_t)(n / 4);
    return QVF_OK;
}

/* ---------------------------------------------------------------- v3 writer */

int qvf_legacy_check_v3(const qvf_voice *v, const char *name, char *err, size_t es) {
    if (!v->xvector || !v->enc_dim)
        return qvf_fail(err, es, QVF_E_ARG, name, "voice has no x-vector");
    if (v->wovr_h && !v->tpad_hidden)
        return qvf_fail(err, es, QVF_E_UNSUPPORTED, name,
                        "v3 cannot hold WOVR without TPAD (positional sections)");
    if (v->n_styles)
        return qvf_fail(err, es, QVF_E_UNSUPPORTED, name,
                        "v3 cannot hold a palette (%d entries; voicefmt palette rm them first)",
                        v->n_styles);
    if (v->has_wdelta && (!v->tpad_hidden || !v->wovr_h))
        return qvf_fail(
            err, es, QVF_E_UNSUPPORTED, name,
            "v3 cannot hold a weight stream without TPAD and WOVR (positional sections)");
    if (v->has_wdelta && v->wdelta_kind == QVF_WKIND_DELTA && v->target.hidden_size != 1024 &&
        v->target.hidden_size != 2048)
        return qvf_fail(err, es, QVF_E_UNSUPPORTED, name,
                        "v3 WDLT needs target hidden 1024 or 2048, found %u",
                        v->target.hidden_size);
    if (v->has_wdelta && v->wdelta_kind == QVF_WKIND_DELTA_NOHIDDEN &&
        (v->n_tensors == 1024 || v->n_tensors == 2048))
        return qvf_fail(err, es, QVF_E_UNSUPPORTED, name,
                        "v3 WDLT without hidden cannot hold %u tensors", v->n_tensors);
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        const qvf_tensor *t = &v->tensors[i];
        if (t->raw_bytes > UINT32_MAX ||
            (t->encoding == QVF_ENC_DELTA16_LZ4 && t->raw_bytes > LZ4_MAX_INPUT_SIZE))
            return qvf_fail(err, es, QVF_E_LIMIT, name, "tensor %s: %llu bytes too large for v3",
                            t->name, (unsigned long long)t->raw_bytes);
        if (strlen(t->name) > QVF_MAX_NAME_BYTES)
            return qvf_fail(err, es, QVF_E_LIMIT, name, "tensor name too long");
    }
    return QVF_OK;
}

/* s (valid UTF-8) NUL-padded into a field of cap bytes; a longer s is cut at a character's start,
 * so that the reader, which checks the field's UTF-8, takes it back. */
static void put_fixed(qvf_out *o, const char *s, size_t cap) {
    char b[64] = {0};
    size_t l = s ? strlen(s) : 0;
    if (l > cap - 1) {
        l = cap - 1;
        while (l > 0 && ((unsigned char)s[l] & 0xC0) == 0x80) l--;
    }
    if (l) memcpy(b, s, l);
    qvf_out_write(o, b, cap);
}

static int write_record(const qvf_tensor *t, qvf_out *o, const char *name, char *err, size_t es) {
    uint8_t h[2];
    size_t nl = strlen(t->name);
    wr16(h, (uint16_t)nl);
    qvf_out_write(o, h, 2);
    qvf_out_write(o, t->name, nl);
    qvf_out_put32(o, (uint32_t)t->raw_bytes);
    uint8_t enc = t->encoding == QVF_ENC_RAW ? 0 : 4;
    qvf_out_write(o, &enc, 1);
    if (t->encoding == QVF_ENC_RAW || t->n_blocks == 1) { /* one LZ4 block already: copy verbatim */
        qvf_out_put32(o, (uint32_t)t->data_bytes);
        qvf_out_write(o, t->data, t->data_bytes);
        return QVF_OK;
    }
    int cap = LZ4_compressBound((int)t->raw_bytes);
    uint8_t *delta = malloc(t->raw_bytes), *z = malloc((size_t)cap);
    int rc = (!delta || !z) ? qvf_fail(err, es, QVF_E_NOMEM, name, "tensor %s", t->name)
                            : qvf_tensor_decode_delta(t, delta, err, es);
    if (rc) qvf_err_rename(err, es, name);
    if (!rc) {
        int zn = LZ4_compress_default((const char *)delta, (char *)z, (int)t->raw_bytes, cap);
        if (zn <= 0)
            rc = qvf_fail(err, es, QVF_E_LZ4, name, "tensor %s: LZ4 compression failed", t->name);
        else {
            qvf_out_put32(o, (uint32_t)zn);
            qvf_out_write(o, z, (size_t)zn);
        }
    }
    free(delta);
    free(z);
    return rc;
}

/* The trailer is written only when it carries something v3 cannot, so a legacy file read and
 * written back stays byte-identical. */
static int needs_trailer(const qvf_voice *v, uint32_t flags) {
    static const char *const v3_keys[] = {"name", "language", "language_id", "max_ref_duration_s",
                                          "v3_flags"};
    if (!qvf_is_zero(v->source.fingerprint, 32) || !qvf_is_zero(v->target.fingerprint, 32))
        return 1;
    if (v->source.text_hidden_size != v->wovr_th ||
        v->source.variant != ((flags & 4) ? QVF_VARIANT_BASE : 0))
        return 1;
    if (v->has_wdelta &&
        (v->target.text_hidden_size || v->target.enc_dim ||
         v->target.variant != (v->wdelta_kind == QVF_WKIND_DELTA ? QVF_VARIANT_CUSTOM_VOICE : 0)))
        return 1;
    for (int i = 0; i < v->n_meta; i++) {
        size_t k = 0;
        while (k < 5 && strcmp(v->meta[i].key, v3_keys[k]))
            k++;
        if (k == 5) return 1;
    }
    for (uint32_t i = 0; v->has_wdelta && i < v->n_tensors; i++) {
        const qvf_tensor *t = &v->tensors[i];
        if (t->n_dims != 1 || !qvf_is_zero(t->target_sha256, 32) ||
            !qvf_is_zero(t->result_sha256, 32))
            return 1;
        if (t->encoding == QVF_ENC_RAW && t->dtype != guess_dtype(t->name)) return 1;
    }
    return 0;
}

static void write_trailer(const qvf_voice *v, qvf_out *o) {
    uint64_t mb = qvf_out_meta_len(v);
    uint64_t len = QVF_HEAD_BYTES + 4 + mb + 4;
    for (uint32_t i = 0; v->has_wdelta && i < v->n_tensors; i++)
        len += 4 + strlen(v->tensors[i].name) + 112;
    qvf_out_write(o, "QV4X", 4);
    o->crc = qvf_crc32c(0, "QV4X", 4);
    qvf_out_put32(o, (uint32_t)len);
    uint8_t head[QVF_HEAD_BYTES] = {0};
    const qvf_model_id *ids[2] = {&v->source, &v->target};
    wr32(head, QVF_FORMAT_VERSION);
    for (int k = 0; k < 2; k++) {
        uint8_t *p = head + 16 + 48 * k;
        wr32(p, ids[k]->hidden_size);
        wr32(p + 4, ids[k]->text_hidden_size);
        wr32(p + 8, k ? ids[k]->enc_dim : v->enc_dim);
        wr32(p + 12, ids[k]->variant);
        memcpy(p + 16, ids[k]->fingerprint, 32);
    }
    qvf_out_write(o, head, sizeof head);
    qvf_out_put32(o, (uint32_t)mb);
    qvf_out_meta(o, v);
    qvf_out_put32(o, v->has_wdelta ? v->n_tensors : 0);
    for (uint32_t i = 0; v->has_wdelta && i < v->n_tensors; i++) {
        const qvf_tensor *t = &v->tensors[i];
        uint8_t e[112] = {0};
        wr32(e, t->dtype);
        wr32(e + 4, t->n_dims);
        for (int j = 0; j < 4; j++)
            wr64(e + 8 + 8 * j, j < (int)t->n_dims ? t->shape[j] : 0);
        memcpy(e + 40, t->target_sha256, 32);
        memcpy(e + 72, t->result_sha256, 32);
        qvf_out_put32(o, (uint32_t)strlen(t->name));
        qvf_out_write(o, t->name, strlen(t->name));
        qvf_out_write(o, e, sizeof e);
    }
    uint8_t b[4];
    wr32(b, o->crc);
    qvf_out_write(o, b, 4);
}

int qvf_legacy_write_v3(const qvf_voice *v, qvf_out *o, const char *name, char *err, size_t es) {
    int rc = qvf_legacy_check_v3(v, name, err, es);
    if (rc) return rc;
    qvf_out_write(o, "QVCE", 4);
    qvf_out_put32(o, 3);
    qvf_out_put32(o, v->enc_dim);
    qvf_out_write(o, v->xvector, 4ull * v->enc_dim);
    qvf_out_put32(o, v->transcript_bytes);
    qvf_out_write(o, v->transcript, v->transcript_bytes);
    qvf_out_put32(o, v->n_frames);
    for (uint64_t i = 0; i < 16ull * v->n_frames; i++)
        qvf_out_put32(o, v->codes[i]);
    /* META (the engine always writes it; needed positionally before TPAD) */
    const char *s;
    uint32_t flags = (v->n_frames ? 2 : 0) | (v->source.variant == QVF_VARIANT_BASE ? 4 : 0);
    if ((s = qvf_meta_get(v, "v3_flags"))) flags = (uint32_t)strtoul(s, NULL, 10);
    float ref_dur = 30.0f;
    if ((s = qvf_meta_get(v, "max_ref_duration_s"))) ref_dur = strtof(s, NULL);
    qvf_out_write(o, "META", 4);
    qvf_out_put32(o, (s = qvf_meta_get(v, "language_id")) ? (uint32_t)strtoul(s, NULL, 10) : 0);
    put_fixed(o, qvf_meta_get(v, "language"), 16);
    qvf_out_put32(o, v->source.hidden_size);
    qvf_out_put32(o, v->enc_dim);
    qvf_out_write(o, &ref_dur, 4);
    put_fixed(o, qvf_meta_get(v, "name"), 64);
    qvf_out_put32(o, flags);
    if (v->tpad_hidden) {
        qvf_out_write(o, "TPAD", 4);
        qvf_out_put32(o, v->tpad_hidden);
        qvf_out_write(o, v->tpad, 12ull * v->tpad_hidden);
    }
    if (v->wovr_h) {
        qvf_out_write(o, "WOVR", 4);
        qvf_wovr_write(o, v, 0);
    }
    if (v->has_wdelta) {
        if (v->wdelta_kind == QVF_WKIND_FULL)
            qvf_out_write(o, "WFULL", 5);
        else
            qvf_out_write(o, "WDLT", 4);
        if (v->wdelta_kind == QVF_WKIND_DELTA) qvf_out_put32(o, v->target.hidden_size);
        qvf_out_put32(o, v->n_tensors);
        for (uint32_t i = 0; i < v->n_tensors; i++)
            if ((rc = write_record(&v->tensors[i], o, name, err, es))) return rc;
    }
    if (needs_trailer(v, flags)) write_trailer(v, o);
    return QVF_OK;
}
