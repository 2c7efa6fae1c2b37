/* writer.c — atomic .qvoice writer: v4 chunks (docs/qvoice-format.md) or legacy v3 (legacy.c).
 * Output goes through util/fileio.c's atomic writer, so a crash, kill or full disk never leaves a
 * partial file at the destination (nor, where Linux allows it, a temporary one beside it).
 * Chunk lengths are computed before a chunk is written, so its CRC is accumulated while streaming.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "util/fileio.h"
#include "voicefmt/legacy.h"

/* ---------------------------------------------------------------- chunk framing */

/* Pads so the chunk header lands at ≡ 48 (mod 64), writes it and restarts the CRC. */
static void chunk_begin(qvf_out *o, const char *tag, int critical, uint64_t len) {
    qvf_out_zero(o, (48 + 64 - o->pos % 64) % 64);
    o->crc = 0;
    qvf_out_write(o, tag, 4);
    qvf_out_put32(o, critical ? 1 : 0);
    qvf_out_put64(o, len);
}

static void chunk_end(qvf_out *o) {
    uint8_t b[4];
    wr32(b, o->crc);
    o->pos += 4;
    if (!o->failed && fwrite(b, 1, 4, o->f) != 4) o->failed = errno ? errno : EIO;
}

/* ---------------------------------------------------------------- atomic file */

struct qvf_writer {
    qvf_out o;
    qvu_wfile *file;
    char *path;
    uint32_t n_expected, n_written;
    int bad; /* first failed add: the writer is unusable (style rule 23) */
};

static void writer_drop(qvf_writer *w) {
    if (!w) return;
    qvu_wfile_abort(w->file);
    free(w->path);
    free(w);
}

static int writer_create(qvf_writer **out, const char *path, char *err, size_t es) {
    *out = NULL;
    qvf_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        writer_drop(w);
        return qvf_fail(err, es, QVF_E_NOMEM, path, "writer");
    }
    if (qvu_wfile_open(&w->file, path, err, es)) {
        writer_drop(w);
        return QVF_E_IO;
    }
    if (!(w->o.f = qvu_wfile_stream(w->file))) {
        writer_drop(w);
        return qvf_fail(err, es, QVF_E_NOMEM, path, "writer");
    }
    *out = w;
    return QVF_OK;
}

static int writer_finish(qvf_writer *w, char *err, size_t es) {
    int rc = QVF_OK;
    if (w->o.failed) {
        rc = qvf_fail(err, es, QVF_E_IO, w->path, "write failed: %s", strerror(w->o.failed));
    } else {
        qvu_wfile *f = w->file;
        w->file = NULL; /* commit frees it, whatever the outcome */
        if (qvu_wfile_commit(f, err, es)) rc = QVF_E_IO;
    }
    writer_drop(w);
    return rc;
}

/* ---------------------------------------------------------------- v4 chunks */

static void put_id(qvf_out *o, const qvf_model_id *id) {
    qvf_out_put32(o, id->hidden_size);
    qvf_out_put32(o, id->text_hidden_size);
    qvf_out_put32(o, id->enc_dim);
    qvf_out_put32(o, id->variant);
    qvf_out_write(o, id->fingerprint, 32);
}

static int check_voice(const qvf_voice *v, const char *name, char *err, size_t es) {
    if (!v->xvector || v->enc_dim < 1 || v->enc_dim > QVF_MAX_DIM)
        return qvf_fail(err, es, QVF_E_ARG, name, "voice has no valid x-vector");
    if (v->source.enc_dim && v->source.enc_dim != v->enc_dim)
        return qvf_fail(err, es, QVF_E_MISMATCH, name, "source enc_dim %u but x-vector has %u",
                        v->source.enc_dim, v->enc_dim);
    if (v->transcript_bytes > QVF_MAX_TEXT_BYTES || v->n_frames > QVF_MAX_FRAMES)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "ICL data over limit");
    if ((unsigned)v->n_meta > QVF_MAX_META_ENTRIES)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "too many META entries");
    for (uint64_t i = 0; i < 16ull * v->n_frames; i++)
        if (v->codes[i] >= QVF_CODE_LIMIT)
            return qvf_fail(err, es, QVF_E_RANGE, name, "ICL code %u out of range", v->codes[i]);
    if (v->tpad_hidden > QVF_MAX_DIM || v->wovr_h > QVF_MAX_DIM || v->wovr_th > QVF_MAX_DIM ||
        v->wovr_cv > QVF_MAX_CV)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "TPAD/WOVR dims over limit");
    if (v->wovr_h && (!v->wovr_th || !v->wovr_cv))
        return qvf_fail(err, es, QVF_E_ARG, name, "WOVR dims incomplete");
    return QVF_OK;
}

static void write_v4_body(qvf_out *o, const qvf_voice *v, int with_wdhd, uint32_t n_tensors,
                          uint32_t kind) {
    qvf_out_write(o, "QVCE", 4);
    qvf_out_put32(o, QVF_FORMAT_VERSION);
    qvf_out_put32(o, 0);
    qvf_out_put32(o, o->crc);
    qvf_out_zero(o, 32);

    chunk_begin(o, "HEAD", 1, QVF_HEAD_BYTES);
    qvf_out_put32(o, QVF_FORMAT_VERSION);
    qvf_out_put32(o, 0);
    qvf_out_put32(o, 0);
    qvf_out_put32(o, 0);
    qvf_model_id src = v->source, tgt = v->target;
    src.enc_dim = v->enc_dim;
    if (!with_wdhd) memset(&tgt, 0, sizeof tgt);
    put_id(o, &src);
    put_id(o, &tgt);
    qvf_out_zero(o, 16);
    chunk_end(o);

    chunk_begin(o, "XVEC", 1, 64 + 4ull * v->enc_dim);
    qvf_out_put32(o, v->enc_dim);
    qvf_out_zero(o, 60);
    qvf_out_write(o, v->xvector, 4ull * v->enc_dim);
    chunk_end(o);

    if (v->has_meta || v->n_meta) {
        chunk_begin(o, "META", 0, qvf_out_meta_len(v));
        qvf_out_meta(o, v);
        chunk_end(o);
    }

    if (v->transcript_bytes || v->n_frames) {
        uint64_t text_off = align_up(64 + 32ull * v->n_frames, 64);
        chunk_begin(o, "ICLR", 0, text_off + v->transcript_bytes);
        uint64_t start = o->pos;
        qvf_out_put32(o, v->transcript_bytes);
        qvf_out_put32(o, v->n_frames);
        qvf_out_put32(o, QVF_N_CODEBOOKS);
        qvf_out_zero(o, 52);
        qvf_out_write(o, v->codes, 32ull * v->n_frames);
        qvf_out_pad(o, start, 64);
        qvf_out_write(o, v->transcript, v->transcript_bytes);
        chunk_end(o);
    }

    if (v->tpad_hidden) {
        chunk_begin(o, "TPAD", 0, 64 + 12ull * v->tpad_hidden);
        qvf_out_put32(o, v->tpad_hidden);
        qvf_out_zero(o, 60);
        qvf_out_write(o, v->tpad, 12ull * v->tpad_hidden);
        chunk_end(o);
    }

    if (v->wovr_h) {
        uint64_t off[5], len[5];
        qvf_wovr_layout(v->wovr_h, v->wovr_th, v->wovr_cv, 1, off, len);
        chunk_begin(o, "WOVR", 0, off[4] + len[4]);
        qvf_wovr_write(o, v, 1);
        chunk_end(o);
    }

    if (v->n_styles) {
        chunk_begin(o, "PALT", 0, qvf_palt_len(v));
        qvf_out_palt(o, v);
        chunk_end(o);
    }

    if (with_wdhd) {
        chunk_begin(o, "WDHD", 1, QVF_WDHD_BYTES);
        qvf_out_put32(o, n_tensors);
        qvf_out_put32(o, kind);
        qvf_out_zero(o, 56);
        chunk_end(o);
    }
}

static int check_tensor(const qvf_tensor *t, const char *name, char *err, size_t es) {
    size_t nl = t->name ? strlen(t->name) : 0;
    uint64_t esz = t->dtype == QVF_DTYPE_BF16 ? 2 : 4, elems = qvf_shape_elems(t->n_dims, t->shape);
    if (nl < 1 || nl > QVF_MAX_NAME_BYTES)
        return qvf_fail(err, es, QVF_E_ARG, name, "tensor name of %zu bytes", nl);
    if ((t->dtype != QVF_DTYPE_BF16 && t->dtype != QVF_DTYPE_F32) || !elems ||
        elems * esz != t->raw_bytes || t->raw_bytes > QVF_MAX_TENSOR_BYTES)
        return qvf_fail(err, es, QVF_E_ARG, name, "tensor %s: inconsistent dtype/shape/raw_bytes",
                        t->name);
    if (t->encoding == QVF_ENC_RAW && t->data_bytes != t->raw_bytes)
        return qvf_fail(err, es, QVF_E_ARG, name, "tensor %s: raw data size", t->name);
    if (t->encoding == QVF_ENC_DELTA16_LZ4 &&
        (t->dtype != QVF_DTYPE_BF16 || t->block_bytes < QVF_MIN_BLOCK_BYTES ||
         t->block_bytes > QVF_MAX_BLOCK_BYTES || t->block_bytes % 4 ||
         t->n_blocks != (t->raw_bytes + t->block_bytes - 1) / t->block_bytes))
        return qvf_fail(err, es, QVF_E_ARG, name, "tensor %s: invalid block layout", t->name);
    if (t->encoding != QVF_ENC_RAW && t->encoding != QVF_ENC_DELTA16_LZ4)
        return qvf_fail(err, es, QVF_E_ARG, name, "tensor %s: encoding %u", t->name, t->encoding);
    return QVF_OK;
}

static void write_tensor(qvf_out *o, const qvf_tensor *t) {
    uint32_t nb = (uint32_t)strlen(t->name), nblk = t->encoding == QVF_ENC_RAW ? 0 : t->n_blocks;
    uint64_t data = align_up(align_up(128 + nb, 8) + 4ull * nblk, 64);
    chunk_begin(o, "WDTN", 1, data + t->data_bytes);
    uint64_t start = o->pos;
    qvf_out_put32(o, nb);
    qvf_out_put32(o, t->dtype);
    qvf_out_put32(o, t->encoding);
    qvf_out_put32(o, t->n_dims);
    for (int i = 0; i < 4; i++)
        qvf_out_put64(o, i < (int)t->n_dims ? t->shape[i] : 0);
    qvf_out_put64(o, t->raw_bytes);
    qvf_out_put32(o, nblk ? (uint32_t)t->block_bytes : 0);
    qvf_out_put32(o, nblk);
    qvf_out_write(o, t->target_sha256, 32);
    qvf_out_write(o, t->result_sha256, 32);
    qvf_out_write(o, t->name, nb);
    qvf_out_pad(o, start, 8);
    for (uint32_t i = 0; i < nblk; i++)
        qvf_out_put32(o, (uint32_t)(t->block_offsets[i + 1] - t->block_offsets[i]));
    qvf_out_pad(o, start, 64);
    qvf_out_write(o, t->data, t->data_bytes);
    chunk_end(o);
}

/* ---------------------------------------------------------------- API */

int qvf_writer_open(qvf_writer **out, const char *path, const qvf_voice *v, uint32_t n_tensors,
                    uint32_t kind, char *err, size_t es) {
    *out = NULL;
    int rc = check_voice(v, path, err, es);
    if (rc) return rc;
    if (n_tensors > QVF_MAX_TENSORS || kind > QVF_WKIND_FULL)
        return qvf_fail(err, es, QVF_E_ARG, path, "weight stream of %u tensors, kind %u", n_tensors,
                        kind);
    if ((rc = writer_create(out, path, err, es))) return rc;
    (*out)->n_expected = n_tensors;
    write_v4_body(&(*out)->o, v, n_tensors > 0 || v->has_wdelta, n_tensors, kind);
    return QVF_OK;
}

int qvf_writer_add_tensor(qvf_writer *w, const qvf_tensor *t, char *err, size_t es) {
    if (w->bad)
        return qvf_fail(err, es, w->bad, w->path, "writer is unusable after an earlier error");
    int rc = check_tensor(t, w->path, err, es);
    if (!rc && w->n_written >= w->n_expected)
        rc = qvf_fail(err, es, QVF_E_ARG, w->path, "more tensors than announced (%u)",
                      w->n_expected);
    if (rc) return w->bad = rc;
    write_tensor(&w->o, t);
    w->n_written++;
    return QVF_OK;
}

int qvf_writer_commit(qvf_writer *w, char *err, size_t es) {
    if (w->bad) {
        int rc = qvf_fail(err, es, w->bad, w->path, "not written: an earlier tensor was refused");
        writer_drop(w);
        return rc;
    }
    if (w->n_written != w->n_expected) {
        int rc = qvf_fail(err, es, QVF_E_ARG, w->path, "%u of %u announced tensors written",
                          w->n_written, w->n_expected);
        writer_drop(w);
        return rc;
    }
    chunk_begin(&w->o, "QEND", 1, 0);
    chunk_end(&w->o);
    return writer_finish(w, err, es);
}

void qvf_writer_abort(qvf_writer *w) {
    writer_drop(w);
}

/* A tensor read from a legacy file is one LZ4 block of any size; v4 wants bounded blocks. */
static int needs_reblock(const qvf_tensor *t) {
    return t->encoding == QVF_ENC_DELTA16_LZ4 &&
           (t->block_bytes < QVF_MIN_BLOCK_BYTES || t->block_bytes > QVF_MAX_BLOCK_BYTES ||
            t->block_bytes % 4);
}

static int write_all(qvf_out *o, const qvf_voice *v, int version, const char *name, char *err,
                     size_t es) {
    int rc;
    if (version == 3) return qvf_legacy_write_v3(v, o, name, err, es);
    if (version != 4)
        return qvf_fail(err, es, QVF_E_ARG, name, "cannot write version %d (3 or 4)", version);
    if ((rc = check_voice(v, name, err, es))) return rc;
    if (v->has_wdelta && v->n_tensors > QVF_MAX_TENSORS)
        return qvf_fail(err, es, QVF_E_LIMIT, name, "%u tensors", v->n_tensors);
    write_v4_body(o, v, v->has_wdelta, v->n_tensors, v->wdelta_kind);
    for (uint32_t i = 0; i < v->n_tensors && v->has_wdelta; i++) {
        const qvf_tensor *t = &v->tensors[i];
        qvf_tensor tmp = {0};
        if (needs_reblock(t)) {
            if ((rc = qvf_tensor_reblock(t, QVF_BLOCK_BYTES_DEFAULT, &tmp, err, es))) {
                qvf_err_rename(err, es, name);
                return rc;
            }
            t = &tmp;
        }
        rc = check_tensor(t, name, err, es);
        if (!rc) write_tensor(o, t);
        qvf_tensor_free(&tmp);
        if (rc) return rc;
    }
    chunk_begin(o, "QEND", 1, 0);
    chunk_end(o);
    return QVF_OK;
}

int qvf_write_stream(const qvf_voice *v, FILE *f, int version, const char *name, char *err,
                     size_t es) {
    qvf_out o = {f, 0, 0, 0};
    int rc = write_all(&o, v, version, name, err, es);
    if (!rc && o.failed)
        rc = qvf_fail(err, es, QVF_E_IO, name, "write failed: %s", strerror(o.failed));
    return rc;
}

int qvf_write_file(const qvf_voice *v, const char *path, int version, char *err, size_t es) {
    qvf_writer *w;
    int rc;
    if (version == 3 && (rc = qvf_legacy_check_v3(v, path, err, es))) return rc;
    if (version != 3 && version != 4)
        return qvf_fail(err, es, QVF_E_ARG, path, "cannot write version %d (3 or 4)", version);
    if ((rc = writer_create(&w, path, err, es))) return rc;
    if ((rc = write_all(&w->o, v, version, path, err, es))) {
        writer_drop(w);
        return rc;
    }
    return writer_finish(w, err, es);
}
