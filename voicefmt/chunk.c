/* chunk.c — the pieces both file formats share, so that the v4 reader (reader.c), the legacy
 * reader and v3 writer (legacy.c) and the v4 writer (writer.c) depend on this file and not on
 * each other: the output stream with its running CRC, chunk error messages, the META table, and
 * the TPAD and WOVR arrays (packed in v3, behind a 64-byte header and 64-aligned in v4).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "voicefmt/qvf_impl.h"

/* ---------------------------------------------------------------- output stream */

void qvf_out_write(qvf_out *o, const void *buf, size_t n) {
    if (!n) return;
    o->crc = qvf_crc32c(o->crc, buf, n);
    o->pos += n;
    if (!o->failed && fwrite(buf, 1, n, o->f) != n) o->failed = errno ? errno : EIO;
}

void qvf_out_zero(qvf_out *o, uint64_t n) {
    static const uint8_t z[64];
    while (n) {
        size_t k = n < 64 ? (size_t)n : 64;
        qvf_out_write(o, z, k);
        n -= k;
    }
}

void qvf_out_put32(qvf_out *o, uint32_t x) {
    uint8_t b[4];
    wr32(b, x);
    qvf_out_write(o, b, 4);
}

void qvf_out_put64(qvf_out *o, uint64_t x) {
    uint8_t b[8];
    wr64(b, x);
    qvf_out_write(o, b, 8);
}

void qvf_out_pad(qvf_out *o, uint64_t payload_start, uint64_t align) {
    uint64_t rel = o->pos - payload_start;
    qvf_out_zero(o, align_up(rel, align) - rel);
}

/* ---------------------------------------------------------------- chunk errors */

int qvf_chunk_fail(const qvf_chunk_ctx *c, int code, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qvf_fail(c->err, c->err_size, code, c->name, "chunk %s at offset %llu: %s", c->tag,
                    (unsigned long long)c->off, msg);
}

/* ---------------------------------------------------------------- META */

uint64_t qvf_out_meta_len(const qvf_voice *v) {
    uint64_t len = 8;
    for (int i = 0; i < v->n_meta; i++)
        len = align_up(len + 8 + strlen(v->meta[i].key) + strlen(v->meta[i].value), 8);
    return len;
}

void qvf_out_meta(qvf_out *o, const qvf_voice *v) {
    uint64_t start = o->pos;
    qvf_out_put32(o, (uint32_t)v->n_meta);
    qvf_out_put32(o, 0);
    for (int i = 0; i < v->n_meta; i++) {
        size_t kl = strlen(v->meta[i].key), vl = strlen(v->meta[i].value);
        qvf_out_put32(o, (uint32_t)kl);
        qvf_out_put32(o, (uint32_t)vl);
        qvf_out_write(o, v->meta[i].key, kl);
        qvf_out_write(o, v->meta[i].value, vl);
        qvf_out_pad(o, start, 8);
    }
}

int qvf_meta_parse(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, qvf_voice *v) {
    if (n < 8)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (minimum 8)",
                        (unsigned long long)n);
    uint32_t k = rd32(p);
    if (k > QVF_MAX_META_ENTRIES)
        return QVF_FAIL(c, QVF_E_LIMIT, "%u entries (maximum %u)", k, QVF_MAX_META_ENTRIES);
    if (rd32(p + 4)) return QVF_FAIL(c, QVF_E_RESERVED, "reserved field not zero");
    if (16ull * k > n - 8)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "%u entries cannot fit in %llu bytes", k,
                        (unsigned long long)n);
    v->has_meta = 1;
    if (k && !(v->meta = calloc(k, sizeof *v->meta))) return QVF_FAIL(c, QVF_E_NOMEM, "entries");
    uint64_t o = 8;
    for (uint32_t i = 0; i < k; i++) {
        if (n - o < 8) return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "entry %u runs past the chunk end", i);
        uint32_t kb = rd32(p + o), vb = rd32(p + o + 4);
        if (kb < 1 || kb > QVF_MAX_KEY_BYTES)
            return QVF_FAIL(c, QVF_E_LIMIT, "entry %u: key of %u bytes (expected 1..%u)", i, kb,
                            QVF_MAX_KEY_BYTES);
        if (vb > QVF_MAX_VALUE_BYTES)
            return QVF_FAIL(c, QVF_E_LIMIT, "entry %u: value of %u bytes (maximum %u)", i, vb,
                            QVF_MAX_VALUE_BYTES);
        o += 8;
        uint64_t end = align_up(o + kb + vb, 8);
        if (end > n) return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "entry %u runs past the chunk end", i);
        const uint8_t *kp = p + o, *vp = p + o + kb;
        for (uint32_t j = 0; j < kb; j++)
            if (!((kp[j] >= 'a' && kp[j] <= 'z') || (kp[j] >= '0' && kp[j] <= '9') ||
                  kp[j] == '_' || kp[j] == '.'))
                return QVF_FAIL(c, QVF_E_RANGE,
                                "entry %u: key has a byte 0x%02x outside [a-z0-9_.]", i, kp[j]);
        if (!qvf_utf8_valid(vp, vb) || memchr(vp, 0, vb))
            return QVF_FAIL(c, QVF_E_UTF8, "entry %u: value is not UTF-8 text", i);
        if (!qvf_is_zero(p + o + kb + vb, end - (o + kb + vb)))
            return QVF_FAIL(c, QVF_E_RESERVED, "entry %u: padding not zero", i);
        for (uint32_t j = 0; j < i; j++)
            if (strlen(v->meta[j].key) == kb && !memcmp(v->meta[j].key, kp, kb))
                return QVF_FAIL(c, QVF_E_DUPLICATE, "key \"%.*s\" appears twice", (int)kb,
                                (const char *)kp);
        if (!(v->meta[i].key = strndup((const char *)kp, kb)) ||
            !(v->meta[i].value = strndup((const char *)vp, vb))) {
            v->n_meta = (int)i + 1;
            return QVF_FAIL(c, QVF_E_NOMEM, "entry %u", i);
        }
        v->n_meta = (int)i + 1;
        o = end;
    }
    if (o != n)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "%llu bytes after the last entry",
                        (unsigned long long)(n - o));
    return QVF_OK;
}

/* ---------------------------------------------------------------- TPAD and WOVR */

int qvf_tpad_read(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, int v4, qvf_voice *v,
                  uint64_t *n_used) {
    const uint64_t head = v4 ? 64 : 4;
    const int short_code = v4 ? QVF_E_CHUNK_SIZE : QVF_E_TRUNCATED;
    if (n < head)
        return QVF_FAIL(c, short_code, "%llu bytes (minimum %llu)", (unsigned long long)n,
                        (unsigned long long)head);
    uint32_t h = rd32(p);
    if (h < 1 || h > QVF_MAX_DIM)
        return QVF_FAIL(c, QVF_E_LIMIT, "hidden %u (expected 1..%u)", h, QVF_MAX_DIM);
    const uint64_t end = head + 12ull * h;
    if (v4 ? n != end : n < end)
        return QVF_FAIL(c, short_code, "%llu bytes (expected %llu for hidden %u)",
                        (unsigned long long)n, (unsigned long long)end, h);
    if (v4 && !qvf_is_zero(p + 4, 60))
        return QVF_FAIL(c, QVF_E_RESERVED, "reserved bytes 4..63 not zero");
    if (!(v->tpad = malloc(12ull * h))) return QVF_FAIL(c, QVF_E_NOMEM, "TPAD");
    memcpy(v->tpad, p + head, 12ull * h);
    v->tpad_hidden = h;
    if (n_used) *n_used = end;
    return QVF_OK;
}

void qvf_wovr_layout(uint64_t h, uint64_t th, uint64_t cv, int v4, uint64_t off[5],
                     uint64_t len[5]) {
    len[0] = 2 * th * th;
    len[1] = 4 * th;
    len[2] = 2 * h * th;
    len[3] = 4 * h;
    len[4] = 2 * cv * h;
    uint64_t o = v4 ? 64 : 12;
    for (int i = 0; i < 5; i++) {
        off[i] = v4 ? align_up(o, 64) : o;
        o = off[i] + len[i];
    }
}

int qvf_wovr_read(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, int v4, qvf_voice *v,
                  uint64_t *n_used) {
    const uint64_t head = v4 ? 64 : 12;
    const int short_code = v4 ? QVF_E_CHUNK_SIZE : QVF_E_TRUNCATED;
    if (n < head)
        return QVF_FAIL(c, short_code, "%llu bytes (minimum %llu)", (unsigned long long)n,
                        (unsigned long long)head);
    uint32_t h = rd32(p), th = rd32(p + 4), cv = rd32(p + 8);
    if (h < 1 || h > QVF_MAX_DIM || th < 1 || th > QVF_MAX_DIM || cv < 1 || cv > QVF_MAX_CV)
        return QVF_FAIL(c, QVF_E_LIMIT, "dims h %u th %u cv %u (expected 1..%u, cv 1..%u)", h, th,
                        cv, QVF_MAX_DIM, QVF_MAX_CV);
    if (v4 && !qvf_is_zero(p + 12, 52))
        return QVF_FAIL(c, QVF_E_RESERVED, "reserved bytes 12..63 not zero");
    uint64_t off[5], len[5];
    qvf_wovr_layout(h, th, cv, v4, off, len);
    const uint64_t end = off[4] + len[4];
    if (v4 ? n != end : n < end)
        return QVF_FAIL(c, short_code, "%llu bytes (expected %llu for h %u th %u cv %u)",
                        (unsigned long long)n, (unsigned long long)end, h, th, cv);
    for (int i = 1; v4 && i < 5; i++)
        if (!qvf_is_zero(p + off[i - 1] + len[i - 1], off[i] - off[i - 1] - len[i - 1]))
            return QVF_FAIL(c, QVF_E_RESERVED, "padding before array %d not zero", i);
    void *a[5];
    for (int i = 0; i < 5; i++) {
        if (!(a[i] = malloc(len[i]))) {
            for (int j = 0; j < i; j++)
                free(a[j]);
            return QVF_FAIL(c, QVF_E_NOMEM, "WOVR");
        }
        memcpy(a[i], p + off[i], len[i]);
    }
    v->wovr_fc1_w = a[0];
    v->wovr_fc1_b = a[1];
    v->wovr_fc2_w = a[2];
    v->wovr_fc2_b = a[3];
    v->wovr_codec = a[4];
    v->wovr_h = h;
    v->wovr_th = th;
    v->wovr_cv = cv;
    if (n_used) *n_used = end;
    return QVF_OK;
}

void qvf_wovr_write(qvf_out *o, const qvf_voice *v, int v4) {
    uint64_t off[5], len[5], start = o->pos;
    const void *a[5] = {v->wovr_fc1_w, v->wovr_fc1_b, v->wovr_fc2_w, v->wovr_fc2_b, v->wovr_codec};
    qvf_wovr_layout(v->wovr_h, v->wovr_th, v->wovr_cv, v4, off, len);
    qvf_out_put32(o, v->wovr_h);
    qvf_out_put32(o, v->wovr_th);
    qvf_out_put32(o, v->wovr_cv);
    for (int i = 0; i < 5; i++) {
        qvf_out_zero(o, off[i] - (o->pos - start));
        qvf_out_write(o, a[i], len[i]);
    }
}
