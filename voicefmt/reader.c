/* reader.c — the v4 .qvoice reader (docs/qvoice-format.md) and file-type dispatch.
 * One pass over the chunk sequence through a bounds-checked cursor: each length is checked against
 * the bytes left and the chunk type's limit, the CRC is verified, and only then is the payload
 * parsed (into owned copies, except WDELTA tensor data which stays in the mapping). Fuzz builds
 * (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) skip the CRC comparison so the fuzzer reaches the
 * parsers.
 */
#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "voicefmt/legacy.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "voicefmt copies little-endian arrays directly; big-endian hosts are not supported"
#endif

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define CHECK_CRC 0
#else
#define CHECK_CRC 1
#endif

/* ---------------------------------------------------------------- chunk table */

enum { R_HEAD = 1, R_XVEC, R_META, R_ICLR, R_TPAD, R_WOVR, R_PALT, R_WDHD, R_WDTN, R_QEND };

typedef struct {
    char tag[5];
    int rank, critical, fixed; /* fixed: payload size is exactly max_bytes */
    uint64_t max_bytes;
} chunk_kind;

static const chunk_kind kinds[] = {
    {"HEAD", R_HEAD, 1, 1, QVF_HEAD_BYTES},
    {"XVEC", R_XVEC, 1, 0, 64 + 4ull * QVF_MAX_DIM},
    {"META", R_META, 0, 0, QVF_MAX_META_BYTES},
    {"ICLR", R_ICLR, 0, 0, 64 + 32ull * QVF_MAX_FRAMES + 64 + QVF_MAX_TEXT_BYTES},
    {"TPAD", R_TPAD, 0, 0, 64 + 12ull * QVF_MAX_DIM},
    {"WOVR", R_WOVR, 0, 0,
     64 + 5 * 64 + 2ull * QVF_MAX_DIM *QVF_MAX_DIM * 2 + 8ull * QVF_MAX_DIM +
         2ull * QVF_MAX_CV *QVF_MAX_DIM},
    {"PALT", R_PALT, 0, 0, 64 + 64ull * QVF_MAX_STYLES * (1 + QVF_MAX_DIM / 16)},
    {"WDHD", R_WDHD, 1, 1, QVF_WDHD_BYTES},
    {"WDTN", R_WDTN, 1, 0, 2 * QVF_MAX_TENSOR_BYTES},
    {"QEND", R_QEND, 1, 1, 0},
};

static const chunk_kind *find_kind(const uint8_t *tag) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!memcmp(kinds[i].tag, tag, 4)) return &kinds[i];
    return NULL;
}

static void tag_text(const uint8_t *t, char out[5]) {
    for (int i = 0; i < 4; i++)
        out[i] = (t[i] >= 0x20 && t[i] < 0x7F) ? (char)t[i] : '?';
    out[4] = 0;
}

/* ---------------------------------------------------------------- payload parsers */

static void read_id(const uint8_t *p, qvf_model_id *id) {
    id->hidden_size = rd32(p);
    id->text_hidden_size = rd32(p + 4);
    id->enc_dim = rd32(p + 8);
    id->variant = rd32(p + 12);
    memcpy(id->fingerprint, p + 16, 32);
}

static int parse_head(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, qvf_voice *v) {
    if (n != QVF_HEAD_BYTES)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (expected %u)",
                        (unsigned long long)n, QVF_HEAD_BYTES);
    if (rd32(p) != QVF_FORMAT_VERSION)
        return QVF_FAIL(c, QVF_E_VERSION, "format version %u (expected %d)", rd32(p),
                        QVF_FORMAT_VERSION);
    if (rd32(p + 8) || rd32(p + 12) || !qvf_is_zero(p + 112, 16))
        return QVF_FAIL(c, QVF_E_RESERVED, "reserved fields not zero");
    read_id(p + 16, &v->source);
    read_id(p + 64, &v->target);
    if (v->source.variant > QVF_VARIANT_VOICE_DESIGN ||
        v->target.variant > QVF_VARIANT_VOICE_DESIGN)
        return QVF_FAIL(c, QVF_E_RANGE, "model variant %u/%u (expected 0..3)", v->source.variant,
                        v->target.variant);
    return QVF_OK;
}

static int parse_xvec(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, qvf_voice *v) {
    if (n < 64)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (minimum 64)",
                        (unsigned long long)n);
    uint32_t d = rd32(p);
    if (d < 1 || d > QVF_MAX_DIM)
        return QVF_FAIL(c, QVF_E_LIMIT, "enc_dim %u (expected 1..%u)", d, QVF_MAX_DIM);
    if (n != 64 + 4ull * d)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (expected %llu for enc_dim %u)",
                        (unsigned long long)n, 64 + 4ull * d, d);
    if (!qvf_is_zero(p + 4, 60))
        return QVF_FAIL(c, QVF_E_RESERVED, "reserved bytes 4..63 not zero");
    if (v->source.enc_dim != d)
        return QVF_FAIL(c, QVF_E_MISMATCH, "enc_dim %u but HEAD says %u", d, v->source.enc_dim);
    if (!(v->xvector = malloc(4ull * d))) return QVF_FAIL(c, QVF_E_NOMEM, "x-vector");
    memcpy(v->xvector, p + 64, 4ull * d);
    v->enc_dim = d;
    return QVF_OK;
}

static int parse_iclr(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, qvf_voice *v) {
    if (n < 64)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (minimum 64)",
                        (unsigned long long)n);
    uint32_t t = rd32(p), f = rd32(p + 4), cb = rd32(p + 8);
    if (t > QVF_MAX_TEXT_BYTES)
        return QVF_FAIL(c, QVF_E_LIMIT, "transcript of %u bytes (maximum %u)", t,
                        QVF_MAX_TEXT_BYTES);
    if (f > QVF_MAX_FRAMES)
        return QVF_FAIL(c, QVF_E_LIMIT, "%u frames (maximum %u)", f, QVF_MAX_FRAMES);
    if (cb != QVF_N_CODEBOOKS) return QVF_FAIL(c, QVF_E_RANGE, "%u codebooks (expected 16)", cb);
    if (!qvf_is_zero(p + 12, 52))
        return QVF_FAIL(c, QVF_E_RESERVED, "reserved bytes 12..63 not zero");
    uint64_t codes_end = 64 + 32ull * f, text_off = align_up(codes_end, 64);
    if (n != text_off + t)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE,
                        "payload is %llu bytes (expected %llu for %u frames and %u text bytes)",
                        (unsigned long long)n, (unsigned long long)(text_off + t), f, t);
    if (!qvf_is_zero(p + codes_end, text_off - codes_end))
        return QVF_FAIL(c, QVF_E_RESERVED, "padding after the codes not zero");
    for (uint64_t i = 0; i < 16ull * f; i++) {
        uint16_t code = rd16(p + 64 + 2 * i);
        if (code >= QVF_CODE_LIMIT)
            return QVF_FAIL(c, QVF_E_RANGE, "frame %llu codebook %llu: code %u (expected < %u)",
                            (unsigned long long)(i / 16), (unsigned long long)(i % 16), code,
                            QVF_CODE_LIMIT);
    }
    if (!qvf_utf8_valid(p + text_off, t) || memchr(p + text_off, 0, t))
        return QVF_FAIL(c, QVF_E_UTF8, "transcript is not UTF-8 text");
    if (f && !(v->codes = malloc(32ull * f))) return QVF_FAIL(c, QVF_E_NOMEM, "codes");
    if (f) memcpy(v->codes, p + 64, 32ull * f);
    v->n_frames = f;
    if (t && !(v->transcript = strndup((const char *)p + text_off, t)))
        return QVF_FAIL(c, QVF_E_NOMEM, "transcript");
    v->transcript_bytes = t;
    return QVF_OK;
}

/* Smallest possible WDTN chunk on disk: header 16 + fixed 128 + name 8 + CRC 4. */
#define MIN_WDTN_CHUNK 156ull

static int parse_wdhd(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, uint64_t bytes_left,
                      qvf_voice *v) {
    if (n != QVF_WDHD_BYTES)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (expected %u)",
                        (unsigned long long)n, QVF_WDHD_BYTES);
    uint32_t k = rd32(p), kind = rd32(p + 4);
    if (k > QVF_MAX_TENSORS)
        return QVF_FAIL(c, QVF_E_LIMIT, "%u tensors (maximum %u)", k, QVF_MAX_TENSORS);
    if (kind > QVF_WKIND_FULL) return QVF_FAIL(c, QVF_E_RANGE, "kind %u (expected 0..2)", kind);
    if (!qvf_is_zero(p + 8, 56))
        return QVF_FAIL(c, QVF_E_RESERVED, "reserved bytes 8..63 not zero");
    if (k * MIN_WDTN_CHUNK > bytes_left)
        return QVF_FAIL(c, QVF_E_TRUNCATED,
                        "truncated: %u tensors cannot fit in the %llu bytes left", k,
                        (unsigned long long)bytes_left);
    if (k && !(v->tensors = calloc(k, sizeof *v->tensors)))
        return QVF_FAIL(c, QVF_E_NOMEM, "tensor table");
    v->has_wdelta = 1;
    v->wdelta_kind = kind;
    v->n_tensors = 0; /* counts parsed WDTN chunks; must reach k */
    return QVF_OK;
}

/* A WDTN's shape (4 u64 at p): nd entries non-zero, the rest zero. */
static int read_shape(const qvf_chunk_ctx *c, const uint8_t *p, uint32_t nd, uint64_t shape[4]) {
    for (int i = 0; i < 4; i++)
        shape[i] = rd64(p + 8 * i);
    for (uint32_t i = nd; i < 4; i++)
        if (shape[i]) return QVF_FAIL(c, QVF_E_RESERVED, "unused shape entry %u not zero", i);
    for (uint32_t i = 0; i < nd; i++)
        if (!shape[i]) return QVF_FAIL(c, QVF_E_RANGE, "shape entry %u is zero", i);
    return QVF_OK;
}

/* The LZ4 block table at tab (nblk u32 compressed sizes, blocks of bb raw bytes out of raw) into
 * t->block_offsets: every size plausible for its block, the sizes summing to data_bytes. */
static int read_block_table(const qvf_chunk_ctx *c, const uint8_t *tab, uint32_t nblk, uint32_t bb,
                            uint64_t raw, uint64_t data_bytes, qvf_tensor *t) {
    if (!(t->block_offsets = malloc(8ull * (nblk + 1))))
        return QVF_FAIL(c, QVF_E_NOMEM, "block table");
    uint64_t sum = 0;
    for (uint32_t i = 0; i < nblk; i++) {
        uint32_t cs = rd32(tab + 4ull * i);
        uint64_t blk = (i + 1 < nblk) ? bb : raw - (uint64_t)bb * (nblk - 1);
        if (cs < 1 || cs > (uint64_t)LZ4_compressBound((int)blk) ||
            blk > 255ull * cs + 64) /* LZ4 expands <= ~255x */
            return QVF_FAIL(c, QVF_E_RANGE, "block %u: compressed size %u (expected 1..%d)", i, cs,
                            LZ4_compressBound((int)blk));
        t->block_offsets[i] = sum;
        sum += cs;
    }
    t->block_offsets[nblk] = sum;
    if (sum != data_bytes)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "blocks total %llu bytes, data is %llu",
                        (unsigned long long)sum, (unsigned long long)data_bytes);
    return QVF_OK;
}

static int parse_wdtn(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, qvf_tensor *t) {
    if (n < 136)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (minimum 136)",
                        (unsigned long long)n);
    uint32_t nb = rd32(p), dtype = rd32(p + 4), enc = rd32(p + 8), nd = rd32(p + 12);
    if (nb < 1 || nb > QVF_MAX_NAME_BYTES)
        return QVF_FAIL(c, QVF_E_LIMIT, "name of %u bytes (expected 1..%u)", nb,
                        QVF_MAX_NAME_BYTES);
    if (dtype != QVF_DTYPE_BF16 && dtype != QVF_DTYPE_F32)
        return QVF_FAIL(c, QVF_E_RANGE, "dtype %u (expected 1 bf16 or 2 f32)", dtype);
    if (enc != QVF_ENC_RAW && enc != QVF_ENC_DELTA16_LZ4)
        return QVF_FAIL(c, QVF_E_RANGE, "encoding %u (expected 0 or 1)", enc);
    if (enc == QVF_ENC_DELTA16_LZ4 && dtype != QVF_DTYPE_BF16)
        return QVF_FAIL(c, QVF_E_MISMATCH, "bit-delta encoding on a non-bf16 tensor");
    if (nd < 1 || nd > 4) return QVF_FAIL(c, QVF_E_RANGE, "%u dims (expected 1..4)", nd);
    uint64_t shape[4];
    int rc = read_shape(c, p + 16, nd, shape);
    if (rc) return rc;
    uint64_t elems = qvf_shape_elems(nd, shape), esz = dtype == QVF_DTYPE_BF16 ? 2 : 4;
    if (!elems || elems > QVF_MAX_TENSOR_BYTES)
        return QVF_FAIL(c, QVF_E_OVERFLOW, "shape product overflows");
    uint64_t raw = rd64(p + 48);
    if (raw != elems * esz)
        return QVF_FAIL(c, QVF_E_MISMATCH, "raw_bytes %llu (expected %llu from the shape)",
                        (unsigned long long)raw, (unsigned long long)(elems * esz));
    if (raw > QVF_MAX_TENSOR_BYTES)
        return QVF_FAIL(c, QVF_E_LIMIT, "tensor of %llu bytes (maximum %llu)",
                        (unsigned long long)raw, QVF_MAX_TENSOR_BYTES);
    uint32_t bb = rd32(p + 56), nblk = rd32(p + 60);
    if (enc == QVF_ENC_RAW && (bb || nblk))
        return QVF_FAIL(c, QVF_E_RESERVED, "block fields of a raw tensor not zero");
    if (enc == QVF_ENC_DELTA16_LZ4) {
        if (bb < QVF_MIN_BLOCK_BYTES || bb > QVF_MAX_BLOCK_BYTES || bb % 4)
            return QVF_FAIL(c, QVF_E_LIMIT, "block_bytes %u (expected %u..%u, multiple of 4)", bb,
                            QVF_MIN_BLOCK_BYTES, QVF_MAX_BLOCK_BYTES);
        if (nblk != (raw + bb - 1) / bb)
            return QVF_FAIL(c, QVF_E_MISMATCH, "%u blocks (expected %llu)", nblk,
                            (unsigned long long)((raw + bb - 1) / bb));
    }
    uint64_t name_end = 128 + (uint64_t)nb, tab = align_up(name_end, 8);
    if (tab + 4ull * nblk > n)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "name and block table run past the chunk end");
    const uint8_t *np = p + 128;
    for (uint32_t i = 0; i < nb; i++)
        if (np[i] < 0x21 || np[i] > 0x7E)
            return QVF_FAIL(c, QVF_E_RANGE,
                            "tensor name has byte 0x%02x (expected printable ASCII)", np[i]);
    if (!qvf_is_zero(p + name_end, tab - name_end))
        return QVF_FAIL(c, QVF_E_RESERVED, "padding after the name not zero");
    uint64_t tab_end = tab + 4ull * nblk, data = align_up(tab_end, 64);
    if (data > n) return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "block table runs past the chunk end");
    if (!qvf_is_zero(p + tab_end, data - tab_end))
        return QVF_FAIL(c, QVF_E_RESERVED, "padding after the block table not zero");
    uint64_t data_bytes = n - data;
    if (enc == QVF_ENC_RAW) {
        if (data_bytes != raw)
            return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "raw data of %llu bytes (expected %llu)",
                            (unsigned long long)data_bytes, (unsigned long long)raw);
    } else if ((rc = read_block_table(c, p + tab, nblk, bb, raw, data_bytes, t))) {
        return rc;
    }
    if (!(t->name = strndup((const char *)np, nb))) return QVF_FAIL(c, QVF_E_NOMEM, "name");
    t->dtype = dtype;
    t->encoding = enc;
    t->n_dims = nd;
    memcpy(t->shape, shape, sizeof shape);
    t->raw_bytes = raw;
    t->block_bytes = bb;
    t->n_blocks = nblk;
    t->data = p + data;
    t->data_bytes = data_bytes;
    memcpy(t->target_sha256, p + 64, 32);
    memcpy(t->result_sha256, p + 96, 32);
    return QVF_OK;
}

/* ---------------------------------------------------------------- framing */

/* Reads the chunk header at *off; fills tag/flags/len, checks the payload and CRC fit. */
static int frame(const uint8_t *b, size_t n, uint64_t off, const char *name, uint32_t *flags,
                 uint64_t *len, char *err, size_t es) {
    if (n - off < 16)
        return qvf_fail(err, es, QVF_E_TRUNCATED, name,
                        "chunk header at offset %llu: truncated (%llu of 16 bytes present)",
                        (unsigned long long)off, (unsigned long long)(n - off));
    char tag[5];
    tag_text(b + off, tag);
    *flags = rd32(b + off + 4);
    *len = rd64(b + off + 8);
    uint64_t left = n - off - 16;
    if (*len > left || left - *len < 4)
        return qvf_fail(err, es, QVF_E_TRUNCATED, name,
                        "chunk %s at offset %llu: truncated (payload of %llu bytes + CRC, only "
                        "%llu bytes left)",
                        tag, (unsigned long long)off, (unsigned long long)*len,
                        (unsigned long long)left);
    return QVF_OK;
}

static uint64_t pad_after(uint64_t end) {
    return (48 + 64 - end % 64) % 64;
}

static int check_file_header(const uint8_t *b, size_t n, const char *name, char *err, size_t es) {
    if (n < 48)
        return qvf_fail(err, es, QVF_E_TRUNCATED, name,
                        "file header: truncated (%zu of 48 bytes present)", n);
    if (rd32(b + 8))
        return qvf_fail(err, es, QVF_E_RESERVED, name, "file header: flags 0x%x (expected 0)",
                        rd32(b + 8));
    uint32_t crc = qvf_crc32c(0, b, 12);
    if (CHECK_CRC && crc != rd32(b + 12))
        return qvf_fail(err, es, QVF_E_CRC, name,
                        "file header: CRC mismatch (stored 0x%08x, computed 0x%08x)", rd32(b + 12),
                        crc);
    if (!qvf_is_zero(b + 16, 32))
        return qvf_fail(err, es, QVF_E_RESERVED, name, "file header: padding not zero");
    return QVF_OK;
}

int qvf_list_chunks(const void *buf, size_t n, const char *name, qvf_chunk_info *chunks,
                    int max_chunks, int *n_chunks, char *err, size_t es) {
    const uint8_t *b = buf;
    *n_chunks = 0;
    if (n < 8 || memcmp(b, "QVCE", 4))
        return qvf_fail(err, es, QVF_E_MAGIC, name, "not a .qvoice file");
    if (rd32(b + 4) != 4)
        return qvf_fail(err, es, QVF_E_VERSION, name, "version %u is not chunked (v4)",
                        rd32(b + 4));
    int rc = check_file_header(b, n, name, err, es);
    if (rc && rc != QVF_E_CRC) return rc;
    uint64_t off = 48;
    for (;;) {
        uint32_t flags;
        uint64_t len;
        if ((rc = frame(b, n, off, name, &flags, &len, err, es))) return rc;
        if (*n_chunks < max_chunks) {
            qvf_chunk_info *ci = &chunks[*n_chunks];
            tag_text(b + off, ci->tag);
            ci->flags = flags;
            ci->offset = off;
            ci->payload_bytes = len;
            ci->crc_ok = qvf_crc32c(0, b + off, 16 + len) == rd32(b + off + 16 + len);
        }
        (*n_chunks)++;
        uint64_t end = off + 16 + len + 4;
        if (!memcmp(b + off, "QEND", 4)) {
            if (end != n)
                return qvf_fail(err, es, QVF_E_TRAILING, name, "%llu bytes after QEND",
                                (unsigned long long)(n - end));
            return QVF_OK;
        }
        if (n - end < pad_after(end))
            return qvf_fail(err, es, QVF_E_TRUNCATED, name,
                            "padding after the chunk at offset %llu: truncated",
                            (unsigned long long)off);
        off = end + pad_after(end);
    }
}

/* A chunk's frame: flags known, the kind's criticality and size, then the CRC over tag, length
 * and payload (p: the payload, len bytes, the stored CRC after it). */
static int check_chunk_frame(const qvf_chunk_ctx *c, const chunk_kind *k, uint32_t flags,
                             uint64_t len, const uint8_t *chunk, const uint8_t *p) {
    if (flags & ~1u) return QVF_FAIL(c, QVF_E_RESERVED, "flags 0x%x has reserved bits set", flags);
    if (!k && (flags & 1)) return QVF_FAIL(c, QVF_E_UNKNOWN_CRITICAL, "unknown critical chunk");
    if (k && (int)(flags & 1) != k->critical)
        return QVF_FAIL(c, QVF_E_FLAGS, "marked %s (expected %s)",
                        (flags & 1) ? "critical" : "ancillary",
                        k->critical ? "critical" : "ancillary");
    if (k && k->fixed && len != k->max_bytes)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload of %llu bytes (expected %llu)",
                        (unsigned long long)len, (unsigned long long)k->max_bytes);
    if (k && len > k->max_bytes)
        return QVF_FAIL(c, QVF_E_LIMIT, "payload of %llu bytes (maximum %llu)",
                        (unsigned long long)len, (unsigned long long)k->max_bytes);
    uint32_t crc = qvf_crc32c(0, chunk, 16 + len), stored = rd32(p + len);
    if (CHECK_CRC && crc != stored)
        return QVF_FAIL(c, QVF_E_CRC, "CRC mismatch (stored 0x%08x, computed 0x%08x)", stored,
                        crc);
    return QVF_OK;
}

/* A known chunk's place: ranks never go back, one of each but WDTN, WDTNs after their WDHD
 * and all of them before the next kind, XVEC before anything ranked after it. */
static int check_chunk_order(const qvf_chunk_ctx *c, const chunk_kind *k, int last_rank,
                             const qvf_voice *v, uint32_t wdtn_expected) {
    if (k->rank < last_rank) return QVF_FAIL(c, QVF_E_ORDER, "comes after a later chunk");
    if (k->rank == last_rank && k->rank != R_WDTN)
        return QVF_FAIL(c, QVF_E_DUPLICATE, "second %s chunk", k->tag);
    if (k->rank == R_WDTN && !v->has_wdelta)
        return QVF_FAIL(c, QVF_E_ORDER, "WDTN without a WDHD before it");
    if (last_rank == R_WDHD || last_rank == R_WDTN) {
        if (k->rank != R_WDTN && v->n_tensors < wdtn_expected)
            return QVF_FAIL(c, QVF_E_MISSING, "only %u of %u WDTN chunks before it", v->n_tensors,
                            wdtn_expected);
    }
    if (k->rank > R_XVEC && last_rank < R_XVEC)
        return QVF_FAIL(c, QVF_E_MISSING, "no XVEC chunk before it");
    return QVF_OK;
}

/* A WDTN chunk into the next of the tensors WDHD announced; names are unique. */
static int add_wdtn(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t len, qvf_voice *v,
                    uint32_t wdtn_expected) {
    if (v->n_tensors >= wdtn_expected)
        return QVF_FAIL(c, QVF_E_DUPLICATE, "more WDTN chunks than WDHD announced (%u)",
                        wdtn_expected);
    int rc = parse_wdtn(c, p, len, &v->tensors[v->n_tensors]);
    v->n_tensors++; /* counted even on failure so qvf_voice_free releases it */
    if (!rc)
        for (uint32_t i = 0; i + 1 < v->n_tensors; i++)
            if (!strcmp(v->tensors[i].name, v->tensors[v->n_tensors - 1].name))
                return QVF_FAIL(c, QVF_E_DUPLICATE, "tensor %s appears twice", v->tensors[i].name);
    return rc;
}

/* A known chunk's payload p (len bytes; rest: the file's bytes after the chunk) into v. */
static int parse_chunk(const qvf_chunk_ctx *c, const chunk_kind *k, const uint8_t *p, uint64_t len,
                       uint64_t rest, qvf_voice *v, uint32_t *wdtn_expected) {
    switch (k->rank) {
    case R_HEAD:
        return parse_head(c, p, len, v);
    case R_XVEC:
        return parse_xvec(c, p, len, v);
    case R_META:
        return qvf_meta_parse(c, p, len, v);
    case R_ICLR:
        return parse_iclr(c, p, len, v);
    case R_TPAD:
        return qvf_tpad_read(c, p, len, 1, v, NULL);
    case R_WOVR:
        return qvf_wovr_read(c, p, len, 1, v, NULL);
    case R_PALT:
        return qvf_palt_parse(c, p, len, v);
    case R_WDHD: {
        int rc = parse_wdhd(c, p, len, rest, v);
        *wdtn_expected = rd32(p);
        return rc;
    }
    case R_WDTN:
        return add_wdtn(c, p, len, v, *wdtn_expected);
    case R_QEND:
        if (len)
            return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (expected 0)",
                            (unsigned long long)len);
        return QVF_OK;
    default:
        return QVF_OK;
    }
}

static int parse_v4(const uint8_t *b, size_t n, const char *name, qvf_voice *v, char *err,
                    size_t es) {
    int rc = check_file_header(b, n, name, err, es);
    if (rc) return rc;
    v->file_version = 4;
    uint64_t off = 48;
    int last_rank = 0, n_chunks = 0;
    uint32_t wdtn_expected = 0;
    for (;;) {
        uint32_t flags;
        uint64_t len;
        if ((rc = frame(b, n, off, name, &flags, &len, err, es))) return rc;
        qvf_chunk_ctx c = {name, "", off, err, es};
        tag_text(b + off, c.tag);
        const uint8_t *p = b + off + 16;
        const chunk_kind *k = find_kind(b + off);
        if ((rc = check_chunk_frame(&c, k, flags, len, b + off, p))) return rc;
        if (n_chunks == 0 && (!k || k->rank != R_HEAD))
            return QVF_FAIL(&c, QVF_E_ORDER, "first chunk must be HEAD");
        n_chunks++;
        if (k) {
            if ((rc = check_chunk_order(&c, k, last_rank, v, wdtn_expected))) return rc;
            last_rank = k->rank;
            if ((rc = parse_chunk(&c, k, p, len, n - (off + 20 + len), v, &wdtn_expected)))
                return rc;
        }
        uint64_t end = off + 16 + len + 4;
        if (k && k->rank == R_QEND) {
            if (end != n)
                return qvf_fail(err, es, QVF_E_TRAILING, name, "%llu bytes after QEND",
                                (unsigned long long)(n - end));
            break;
        }
        uint64_t pad = pad_after(end);
        if (n - end < pad)
            return qvf_fail(err, es, QVF_E_TRUNCATED, name,
                            "padding after chunk %s at offset %llu: truncated", c.tag,
                            (unsigned long long)off);
        if (!qvf_is_zero(b + end, pad))
            return QVF_FAIL(&c, QVF_E_RESERVED, "padding after the chunk not zero");
        off = end + pad;
    }
    int has_target = !qvf_is_zero((const uint8_t *)&v->target, sizeof v->target);
    if (has_target && !v->has_wdelta)
        return qvf_fail(err, es, QVF_E_MISMATCH, name,
                        "chunk HEAD: target model identity set but there is no WDHD");
    return QVF_OK;
}

/* ---------------------------------------------------------------- entry points */

static int read_any(const uint8_t *b, size_t n, const char *name, uint32_t hint, qvf_voice *v,
                    char *err, size_t es) {
    if (n >= 4 && !memcmp(b, "QVCE", 4)) {
        if (n < 8)
            return qvf_fail(err, es, QVF_E_TRUNCATED, name,
                            "header: truncated (%zu of 8 bytes present)", n);
        uint32_t ver = rd32(b + 4);
        if (ver == 4) return parse_v4(b, n, name, v, err, es);
        if (ver >= 1 && ver <= 3) return qvf_legacy_read(b, n, name, hint, v, err, es);
        return qvf_fail(err, es, QVF_E_VERSION, name, "version %u (expected 1..4)", ver);
    }
    if (qvf_file_kind(name, NULL, 0) == QVF_KIND_QVOICE)
        return qvf_fail(err, es, QVF_E_MAGIC, name, "does not start with QVCE");
    return qvf_bin_read(b, n, name, hint, v, err, es);
}

int qvf_read_mem(const void *buf, size_t n, const char *name, uint32_t hint, qvf_voice **out,
                 char *err, size_t es) {
    *out = NULL;
    if (!buf && n) return qvf_fail(err, es, QVF_E_ARG, name, "NULL buffer");
    qvf_voice *v = qvf_voice_new();
    if (!v) return qvf_fail(err, es, QVF_E_NOMEM, name, "voice");
    int rc = read_any(buf ? buf : (const void *)"", n, name, hint, v, err, es);
    if (rc) {
        qvf_voice_free(v);
        return rc;
    }
    *out = v;
    return QVF_OK;
}

int qvf_read_file(const char *path, uint32_t hint, qvf_voice **out, char *err, size_t es) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qvf_fail(err, es, QVF_E_IO, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return qvf_fail(err, es, QVF_E_IO, path, "not a regular file");
    }
    size_t n = (size_t)st.st_size;
    void *m = NULL;
    if (n) {
        m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return qvf_fail(err, es, QVF_E_IO, path, "cannot map: %s", strerror(errno));
        }
    }
    close(fd);
    qvf_voice *v = qvf_voice_new();
    if (!v) {
        if (m) munmap(m, n);
        return qvf_fail(err, es, QVF_E_NOMEM, path, "voice");
    }
    if (m) {
        v->backing_ = m;
        v->backing_bytes_ = n;
        v->backing_kind_ = 1;
    }
    int rc = read_any(m ? m : (const void *)"", n, path, hint, v, err, es);
    if (rc) {
        qvf_voice_free(v);
        return rc;
    }
    *out = v;
    return QVF_OK;
}
