/* qvf_impl.h — internals shared by the voicefmt library files (not installed).
 * The cursor is the only way parsers touch file bytes: every read checks the bytes left first and
 * decodes little-endian byte by byte (style rule 25). Writers go through qvf_out, which tracks the
 * position and a running CRC so chunk framing is computed in one place.
 */
#ifndef QVF_IMPL_H
#define QVF_IMPL_H

#include <stdio.h>
#include "voicefmt/qvf.h"

/* Limits of docs/qvoice-format.md §5. */
#define QVF_MAX_DIM 16384u
#define QVF_MAX_CV 65536u
#define QVF_MAX_META_BYTES (1u << 20)
#define QVF_MAX_META_ENTRIES 256u
#define QVF_MAX_KEY_BYTES 64u
#define QVF_MAX_VALUE_BYTES 65536u
#define QVF_MAX_TEXT_BYTES (1u << 20)
#define QVF_MAX_FRAMES 1000000u
#define QVF_MAX_TENSORS 4096u
#define QVF_MAX_NAME_BYTES 255u
#define QVF_MAX_TENSOR_BYTES (8ull << 30)
#define QVF_MIN_BLOCK_BYTES 4096u
#define QVF_MAX_BLOCK_BYTES (16u << 20)
#define QVF_HEAD_BYTES 128u
#define QVF_WDHD_BYTES 64u
#define QVF_CODE_LIMIT 2048u

typedef struct {
    const uint8_t *p; /* start of the region */
    size_t n;         /* region size */
    size_t off;       /* read position, always <= n */
} qvf_cur;

static inline size_t cur_left(const qvf_cur *c) {
    return c->n - c->off;
}
static inline int cur_has(const qvf_cur *c, uint64_t k) {
    return k <= (uint64_t)cur_left(c);
}
static inline uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t rd64(const uint8_t *p) {
    return rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}
static inline void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline void wr64(uint8_t *p, uint64_t v) {
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* Formats "name: msg" into err (if err) and returns code. */
int qvf_fail(char *err, size_t err_size, int code, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Table-only CRC-32C (the fallback path), for tests. */
uint32_t qvf_crc32c_sw(uint32_t crc, const void *buf, size_t n_bytes);
/* Tensor decode errors start "WDELTA: " (the decoder knows no file); writers replace that prefix
 * with the file name. */
void qvf_err_rename(char *err, size_t err_size, const char *name);
int qvf_utf8_valid(const uint8_t *s, size_t n);
int qvf_is_zero(const uint8_t *p, size_t n);
/* Number of elements of a shape, or 0 on overflow / zero dims. */
uint64_t qvf_shape_elems(uint32_t n_dims, const uint64_t *shape);

/* ---- chunk.c: what every format file shares (reader.c, legacy.c and writer.c depend on it and
 * not on each other; legacy.h is included by reader.c and writer.c only). */

/* A chunk being parsed, for messages "NAME: chunk TAG at offset N: problem". */
typedef struct {
    const char *name; /* file name for messages */
    char tag[5];
    uint64_t off; /* chunk offset */
    char *err;
    size_t err_size;
} qvf_chunk_ctx;
int qvf_chunk_fail(const qvf_chunk_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define QVF_FAIL(c, code, ...) qvf_chunk_fail((c), (code), __VA_ARGS__)

/* Output stream with position and CRC. */
typedef struct {
    FILE *f;
    uint64_t pos;
    uint32_t crc;
    int failed;
} qvf_out;
void qvf_out_write(qvf_out *o, const void *buf, size_t n);
void qvf_out_zero(qvf_out *o, uint64_t n);
void qvf_out_put32(qvf_out *o, uint32_t x); /* little-endian */
void qvf_out_put64(qvf_out *o, uint64_t x);
/* Zeros up to the next multiple of align counted from payload_start. */
void qvf_out_pad(qvf_out *o, uint64_t payload_start, uint64_t align);

/* The META table both formats write (v4 META chunk, v3 QV4X trailer): u32 entry count, u32 0,
 * then per entry u32 key bytes, u32 value bytes, key, value, zero-padded to 8 from the table's
 * start; qvf_out_meta_len is its size. qvf_meta_parse reads one into v. */
uint64_t qvf_out_meta_len(const qvf_voice *v);
void qvf_out_meta(qvf_out *o, const qvf_voice *v);
int qvf_meta_parse(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, qvf_voice *v);

/* palette.c: the PALT chunk (§4.10) and the style-name rule. */
int qvf_style_name_ok(const char *name);
uint64_t qvf_palt_len(const qvf_voice *v);
void qvf_out_palt(qvf_out *o, const qvf_voice *v);
int qvf_palt_parse(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, qvf_voice *v);

/* TPAD (u32 hidden, then [3][hidden] f32) and WOVR (u32 h, th, cv, then fc1_w, fc1_b, fc2_w,
 * fc2_b, codec rows): v4 puts the dims in a 64-byte header with reserved zeros and aligns each
 * WOVR array to 64; v3 (v4 = 0) packs them. The readers take p[0..n) (v4: exactly the payload;
 * v3: what is left of the file), copy into v and set *n_used (may be NULL). Offsets in
 * qvf_wovr_layout count from the dims. */
int qvf_tpad_read(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, int v4, qvf_voice *v,
                  uint64_t *n_used);
void qvf_wovr_layout(uint64_t h, uint64_t th, uint64_t cv, int v4, uint64_t off[5],
                     uint64_t len[5]);
int qvf_wovr_read(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, int v4, qvf_voice *v,
                  uint64_t *n_used);
void qvf_wovr_write(qvf_out *o, const qvf_voice *v, int v4); /* dims + arrays */

/* ---- writer.c, wdelta.c */

/* Serialises v to an open stream (no atomicity): tests and the round-trip fuzzer. */
int qvf_write_stream(const qvf_voice *v, FILE *f, int version, const char *name, char *err,
                     size_t err_size);
/* Whole-tensor decode into a new buffer of raw_bytes (the delta itself for encoding 1 when target
 * is NULL). Used by converters. */
int qvf_tensor_decode_delta(const qvf_tensor *t, uint8_t *out, char *err, size_t err_size);
/* Re-encode an encoding-1 tensor with the given block size (owned data). */
int qvf_tensor_reblock(const qvf_tensor *src, uint64_t block_bytes, qvf_tensor *dst, char *err,
                       size_t err_size);

#endif
