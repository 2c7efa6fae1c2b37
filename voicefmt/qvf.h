/* qvf.h — public API of the .qvoice voice-file library (prefix qvf_); format:
 * docs/qvoice-format.md.
 *
 * Usage:
 *     qvf_voice *v; char err[256];
 *     if (qvf_read_file("alice.qvoice", 0, &v, err, sizeof err)) { fprintf(stderr, "%s\n", err);
 * ... } use v->xvector[0..v->enc_dim-1], v->codes, v->transcript, qvf_meta_get(v, "name") ...
 *     qvf_voice_free(v);
 * Writing: fill a qvf_voice (qvf_voice_new + the fields), then qvf_write_file (atomic).
 * Thread safety: no global state; a qvf_voice may be read by several threads, modified by one.
 * Errors: functions return 0 or a QVF_E_* code and write one line "FILE: chunk XXXX: problem" into
 * err. The library never prints, exits or aborts on bad input, and depends on no other qvoice
 * module.
 */
#ifndef QVF_H
#define QVF_H

#include <stddef.h>
#include <stdint.h>

#define QVF_VERSION_STRING "0.1.0"
#define QVF_FORMAT_VERSION 4
#define QVF_N_CODEBOOKS 16
#define QVF_BLOCK_BYTES_DEFAULT (1u << 20)

/* Error codes: X(NAME, "text"); qvf_strerror(code) returns the text. */
#define QVF_ERRORS(X)                                                                              \
    X(OK, "ok")                                                                                    \
    X(IO, "I/O error")                                                                             \
    X(NOMEM, "out of memory")                                                                      \
    X(ARG, "invalid argument")                                                                     \
    X(MAGIC, "not a .qvoice file (bad magic)")                                                     \
    X(VERSION, "unsupported version")                                                              \
    X(TRUNCATED, "truncated")                                                                      \
    X(CRC, "CRC mismatch")                                                                         \
    X(CHUNK_SIZE, "wrong chunk or field size")                                                     \
    X(UNKNOWN_CRITICAL, "unknown critical chunk")                                                  \
    X(DUPLICATE, "duplicate chunk")                                                                \
    X(ORDER, "chunk out of order")                                                                 \
    X(MISSING, "required chunk missing")                                                           \
    X(FLAGS, "wrong chunk flags")                                                                  \
    X(RESERVED, "reserved field or padding not zero")                                              \
    X(LIMIT, "over limit")                                                                         \
    X(OVERFLOW, "size overflow")                                                                   \
    X(RANGE, "value out of range")                                                                 \
    X(UTF8, "invalid UTF-8")                                                                       \
    X(MISMATCH, "inconsistent sizes")                                                              \
    X(LZ4, "corrupt compressed block")                                                             \
    X(HASH, "SHA-256 mismatch")                                                                    \
    X(TRAILING, "trailing bytes after the last chunk")                                             \
    X(UNSUPPORTED, "unsupported feature")                                                         \
    X(SIGNATURE, "signature does not verify")

#define QVF_ENUM_(name, text) QVF_E_##name,
enum qvf_status { QVF_ERRORS(QVF_ENUM_) QVF_E_COUNT_ };
#undef QVF_ENUM_
#define QVF_OK QVF_E_OK

/* Text for a code, e.g. "CRC mismatch"; "unknown error" for an invalid code. Never NULL. */
const char *qvf_strerror(int code);
/* Symbolic name for a code, e.g. "QVF_E_CRC"; "QVF_E_?" for an invalid code. */
const char *qvf_errname(int code);
/* Library version string (QVF_VERSION_STRING). */
const char *qvf_version(void);

/* The model variants, the one enum (checkpoint/config.h uses it too). A voice file records
 * them by number; their names are config.json's tts_model_type values. */
enum qvf_variant {
    QVF_VARIANT_UNKNOWN,
    QVF_VARIANT_BASE,
    QVF_VARIANT_CUSTOM_VOICE,
    QVF_VARIANT_VOICE_DESIGN
};
/* "base", "custom_voice", "voice_design"; "unknown" for QVF_VARIANT_UNKNOWN, "invalid" for any
 * other number (a hostile file's). */
const char *qvf_variant_name(uint32_t variant);
/* The variant called name (case-sensitive, as in config.json); QVF_VARIANT_UNKNOWN for any other
 * name or NULL. */
enum qvf_variant qvf_variant_from_name(const char *name);

/* Identity of a checkpoint; zero fields mean unknown. fingerprint = qvm_fingerprint_model(). */
typedef struct {
    uint32_t hidden_size, text_hidden_size, enc_dim, variant;
    uint8_t fingerprint[32];
} qvf_model_id;

enum qvf_dtype { QVF_DTYPE_BF16 = 1, QVF_DTYPE_F32 = 2 };
enum qvf_encoding { QVF_ENC_RAW = 0, QVF_ENC_DELTA16_LZ4 = 1 };
/* Weight-stream kind (WDHD.kind): deltas, deltas from a legacy WDLT without target hidden, full
 * weights. */
enum qvf_wkind { QVF_WKIND_DELTA = 0, QVF_WKIND_DELTA_NOHIDDEN = 1, QVF_WKIND_FULL = 2 };

/* One WDELTA record. data points into the file mapping (borrowed from the voice) or to owned_data.
 */
typedef struct {
    char *name; /* owned, NUL-terminated */
    uint32_t dtype, encoding, n_dims;
    uint64_t shape[4];
    uint64_t raw_bytes;   /* decoded tensor size */
    uint64_t block_bytes; /* decoded bytes per block (encoding 1); a legacy tensor is one block */
    uint32_t n_blocks;
    uint64_t *block_offsets; /* owned, n_blocks + 1 offsets into data */
    const uint8_t *data;     /* raw tensor (encoding 0) or the compressed blocks */
    uint64_t data_bytes;
    uint8_t target_sha256[32]; /* zero = unknown */
    uint8_t result_sha256[32]; /* zero = unknown */
    uint8_t *owned_data;       /* non-NULL when data was produced by qvf_wdelta_encode */
} qvf_tensor;

typedef struct {
    char *key, *value;
} qvf_meta_entry; /* owned, NUL-terminated */

/* An emotion palette entry (PALT chunk, docs/qvoice-format.md §4.9): a named style of the voice.
 * VARIANT: the x-vector of this voice performing the style (strength 1 = that x-vector);
 * DIRECTION: a unit shift in x-vector space added to the voice's (strength ~0.25). */
enum qvf_style_kind { QVF_STYLE_VARIANT = 1, QVF_STYLE_DIRECTION = 2 };
#define QVF_STYLE_NAME_MAX 31 /* bytes: [a-z][a-z0-9_-]* */
#define QVF_MAX_STYLES 64
typedef struct {
    char name[QVF_STYLE_NAME_MAX + 1];
    uint32_t kind;  /* enum qvf_style_kind */
    float strength; /* default strength, (0, 4] */
    float *vec;     /* [enc_dim], owned */
} qvf_style;

/* A voice in memory. Every pointer is owned by the voice (freed by qvf_voice_free), except
 * tensors[i].data, which may borrow the file mapping the voice also owns. To build a voice, set
 * fields directly with malloc'd buffers (the voice takes ownership; e.g. v->tpad = malloc(12 * h),
 * v->tpad_hidden = h) or use the qvf_voice_set_* / qvf_meta_set helpers. */
typedef struct {
    int file_version; /* version read: 1..4, 0 = raw .bin x-vector */
    qvf_model_id source, target;
    uint32_t enc_dim;
    float *xvector;   /* [enc_dim] */
    char *transcript; /* NUL-terminated UTF-8, NULL if none */
    uint32_t transcript_bytes;
    uint32_t n_frames;
    uint16_t *codes; /* [n_frames * 16], frame-major */
    int n_meta;
    qvf_meta_entry *meta;
    int has_meta;                      /* META chunk present (legacy v3: META section present) */
    uint32_t tpad_hidden;              /* 0 = no TPAD */
    float *tpad;                       /* [3 * tpad_hidden]: tts_pad, tts_bos, tts_eos */
    uint32_t wovr_h, wovr_th, wovr_cv; /* 0 = no WOVR */
    uint16_t *wovr_fc1_w;              /* bf16 [th * th] */
    float *wovr_fc1_b;                 /* [th] */
    uint16_t *wovr_fc2_w;              /* bf16 [h * th] */
    float *wovr_fc2_b;                 /* [h] */
    uint16_t *wovr_codec;              /* bf16 [cv * h] */
    int n_styles;      /* PALT entries (0 = no PALT chunk) */
    qvf_style *styles; /* [n_styles], each vec of enc_dim floats */
    int has_wdelta;
    uint32_t wdelta_kind; /* enum qvf_wkind */
    uint32_t n_tensors;
    qvf_tensor *tensors; /* [n_tensors] */
    void *backing_;      /* private: the file mapping tensors borrow from */
    size_t backing_bytes_;
    int backing_kind_;
} qvf_voice;

/* ---- voice ---- */
/* Empty voice (all zero), or NULL on allocation failure. */
qvf_voice *qvf_voice_new(void);
/* Frees everything, including the mapping; accepts NULL. */
void qvf_voice_free(qvf_voice *v);
/* Value of META key, borrowed, or NULL. */
const char *qvf_meta_get(const qvf_voice *v, const char *key);
/* A voice's consent record (META consent.*, docs/qvoice-format.md §4.3), values borrowed from v
 * (NULL when not recorded). A file from before the record carries only the legacy note
 * (`consent`, `consent_by`, `consent_utc`): it reads as method "note" with legacy = 1, a typed
 * statement nobody signed for. method NULL: no consent at all. */
typedef struct {
    const char *method; /* "typed", "recording", "note" (legacy), or NULL */
    const char *statement, *speaker, *scope, *utc, *collected_by, *recording_sha256;
    int legacy;
} qvf_consent;
qvf_consent qvf_consent_get(const qvf_voice *v);
/* Sets (replaces) META key to value (copied). value NULL removes the key. 0 or QVF_E_NOMEM/ARG. */
int qvf_meta_set(qvf_voice *v, const char *key, const char *value);
/* Helpers that copy into owned buffers (replacing old contents). 0 or QVF_E_NOMEM/QVF_E_LIMIT. */
int qvf_voice_set_xvector(qvf_voice *v, const float *x, uint32_t enc_dim);
int qvf_voice_set_icl(qvf_voice *v, const char *transcript, const uint16_t *codes,
                      uint32_t n_frames);
/* Adds or replaces the palette entry name (a copy of vec[v->enc_dim]). 0, QVF_E_ARG (bad name,
 * kind or strength, no x-vector), QVF_E_LIMIT (QVF_MAX_STYLES), QVF_E_NOMEM. */
int qvf_palette_set(qvf_voice *v, const char *name, uint32_t kind, float strength,
                    const float *vec);
/* The entry named name (case-sensitive, as stored), or NULL. Borrowed. */
const qvf_style *qvf_palette_find(const qvf_voice *v, const char *name);
/* Removes an entry; 0, or QVF_E_ARG when there is none of that name. */
int qvf_palette_remove(qvf_voice *v, const char *name);
/* The palette arithmetic, in double, the result rounded once to f32 (out may alias x):
 * DIRECTION d: y = x + s·|x|·d/|d|, out = y·|x|/|y| (the voice's norm restored);
 * VARIANT v:   y = x + s·(v − x), out = y·((1−s)|x| + s|v|)/|y| (the norm interpolated too),
 * so s = 0 gives x and a variant at s = 1 gives v. 0, or QVF_E_ARG (unknown kind, zero vector,
 * s outside [0, 4]). */
int qvf_style_apply(uint32_t kind, float strength, const float *x, const float *vec, uint32_t dim,
                    float *out);
/* The unit direction of one neutral -> emotional pair: out = (e − n)/|e − n|; *shift_ratio (may
 * be NULL) = |e − n|/|n|. 0, or QVF_E_ARG when the two are equal or n is zero. */
int qvf_style_direction(const float *neutral, const float *emotional, uint32_t dim, float *out,
                        double *shift_ratio);

/* Removes the weight stream (and zeroes v->target) / the ICL transcript and codes. */
void qvf_voice_drop_wdelta(qvf_voice *v);
void qvf_voice_drop_icl(qvf_voice *v);

/* ---- reading ----
 * Reads a v4 file, a legacy v1..v3 .qvoice or a raw .bin x-vector (any file not starting with QVCE
 * whose name does not end in .qvoice). enc_dim_hint: the enc_dim to assume for v1 files (0 = 1024)
 * and the size a .bin must have (0 = file size / 4). Everything is validated before use (bounds,
 * limits, CRCs, order); WDELTA payloads are indexed, not decoded (qvf_wdelta_apply decodes them).
 * The file is mapped read-only; *out owns the mapping. Returns 0, or a code with err = "FILE: chunk
 * XXXX: problem". */
int qvf_read_file(const char *path, uint32_t enc_dim_hint, qvf_voice **out, char *err,
                  size_t err_size);
/* Same from memory (name is used in messages). The voice borrows buf for tensor data: keep buf
 * alive and unchanged until qvf_voice_free. */
int qvf_read_mem(const void *buf, size_t n_bytes, const char *name, uint32_t enc_dim_hint,
                 qvf_voice **out, char *err, size_t err_size);

/* Per-chunk report for `voicefmt inspect`: walks a v4 buffer without stopping at CRC errors. */
typedef struct {
    char tag[5];
    uint32_t flags;
    uint64_t offset, payload_bytes;
    int crc_ok;
} qvf_chunk_info;
/* Fills up to max_chunks entries, sets *n_chunks (may exceed max_chunks). Returns 0 if the chunk
 * framing is intact (CRC errors are only reported in crc_ok), else the framing error code. */
int qvf_list_chunks(const void *buf, size_t n_bytes, const char *name, qvf_chunk_info *chunks,
                    int max_chunks, int *n_chunks, char *err, size_t err_size);

/* ---- writing ----
 * Writes v atomically (an unnamed temp file linked into place on success, fsync of file and
 * directory); on any failure or kill the destination is untouched and no temp file remains. version 4 (native) or 3 (legacy, byte-compatible with
 * the legacy engine; refuses what v3 cannot hold). */
int qvf_write_file(const qvf_voice *v, const char *path, int version, char *err, size_t err_size);

/* Streaming writer for large weight streams (clone --target-cv): writes every chunk of v (v must
 * have no tensors), then a WDHD for n_tensors; add exactly n_tensors tensors, then commit. Only one
 * tensor needs to be in memory at a time. After a failed add the writer is bad: later adds and
 * commit return that error; commit (failing or not) and abort free w; only a successful commit
 * leaves a file at path. */
typedef struct qvf_writer qvf_writer;
int qvf_writer_open(qvf_writer **w, const char *path, const qvf_voice *v, uint32_t n_tensors,
                    uint32_t wdelta_kind, char *err, size_t err_size);
int qvf_writer_add_tensor(qvf_writer *w, const qvf_tensor *t, char *err, size_t err_size);
int qvf_writer_commit(qvf_writer *w, char *err, size_t err_size); /* frees w */
void qvf_writer_abort(qvf_writer *w);                             /* frees w; accepts NULL */

/* ---- WDELTA ----
 * Encodes one tensor into *out (caller frees with qvf_tensor_free). dtype QVF_DTYPE_BF16 with
 * target != NULL: int16 bit deltas result − target, LZ4 in blocks of block_bytes (0 = default);
 * otherwise (f32 or target NULL) raw. result and target hold n_elems = product(shape) elements.
 * Records SHA-256 of target and result. */
int qvf_wdelta_encode(const char *name, uint32_t dtype, uint32_t n_dims, const uint64_t *shape,
                      const void *result, const void *target, uint64_t block_bytes, qvf_tensor *out,
                      char *err, size_t err_size);
/* Decodes t into out (t->raw_bytes bytes): raw copy, or out = target + delta block by block with
 * one block of scratch. target must hold t->raw_bytes bytes for encoding 1 (ignored for raw); out
 * may equal target (in place). verify: 1 checks target/result SHA-256 when recorded (QVF_E_HASH).
 */
int qvf_wdelta_apply(const qvf_tensor *t, const void *target, void *out, int verify, char *err,
                     size_t err_size);
/* Frees what a tensor owns and zeroes it; accepts NULL. */
void qvf_tensor_free(qvf_tensor *t);

/* What a file is, by the one rule every reader, lookup, upload and listing uses: QVF_KIND_QVOICE
 * when head (its first n_head bytes; NULL with 0 when unknown) starts with "QVCE" or name ends in
 * ".qvoice"; QVF_KIND_BIN when name ends in ".bin" (a raw x-vector); QVF_KIND_NONE otherwise (an
 * audio clip, or a voice by name). name may be NULL. */
enum qvf_file_kind { QVF_KIND_NONE, QVF_KIND_QVOICE, QVF_KIND_BIN };
enum qvf_file_kind qvf_file_kind(const char *name, const void *head, size_t n_head);

/* ---- voice library ----
 * Resolves what a user typed for --voice: an existing file path (contains '/' or ends in .qvoice /
 * .bin) is used as is; otherwise NAME is looked up as voices/NAME.qvoice, then DIR/NAME.qvoice for
 * each DIR of $QVOICE_PATH (colon-separated). Writes the path into path (path_size bytes).
 * Returns 0, QVF_E_ARG, or QVF_E_IO with the one text for a missing voice in err: "voice 'NAME'
 * not found; looked for voices/NAME.qvoice and, from $QVOICE_PATH, DIR/NAME.qvoice, ..." (or "...
 * ($QVOICE_PATH is not set)"), or "PATH: no such voice file".
 */
int qvf_voice_find(const char *name, char *path, size_t path_size, char *err, size_t err_size);
/* The i-th directory voice names are looked up in (the one parser of $QVOICE_PATH): 0 is
 * "voices", then each non-empty entry of $QVOICE_PATH (colon-separated). 0 with dir filled, or -1
 * past the last (or when dir is too small). */
int qvf_voice_dir(int i, char *dir, size_t dir_size);

/* ---- utilities ---- */
/* Lower-case hex of n bytes into out[2n + 1] (NUL-terminated), for key ids and fingerprints: the
 * library's one hex writer (qvu_hex), given to tools here. Returns out. */
char *qvf_hex(const uint8_t *bytes, size_t n, char *out);

/* ---- signatures (docs/qvoice-format.md §4.10) ----
 * An optional SIGN chunk, last before QEND: Ed25519 over every byte before it plus its own fixed
 * fields and signer name. Keys are PEM files (OpenSSL's PKCS#8 / SubjectPublicKeyInfo; `openssl
 * genpkey -algorithm ed25519` makes one too); a loaded key is an opaque handle. */
#define QVF_MAX_SIGNER_BYTES 256u
typedef struct {
    int present;            /* the file has a SIGN chunk */
    int valid;              /* it verifies with the public key it carries */
    uint8_t key_id[8];      /* first 8 bytes of SHA-256 of the public key */
    uint8_t public_key[32]; /* raw Ed25519 public key */
    uint64_t signed_utc;    /* seconds since 1970 */
    char signer[QVF_MAX_SIGNER_BYTES + 1]; /* UTF-8, may be empty */
} qvf_signature;
/* Loads a PEM key (private_key 1: a private key, else a public one): *key for qvf_sign, pub its
 * raw public key. */
int qvf_key_load(const char *path, int private_key, void **key, uint8_t pub[32], char *err,
                 size_t err_size);
void qvf_key_free(void *key); /* accepts NULL */
/* Makes a key pair: the private key (mode 0600) and the public key, both written atomically. */
int qvf_keygen(const char *private_path, const char *public_path, uint8_t id[8], char *err,
               size_t err_size);
/* A signed copy of the v4 file in buf (an existing signature is replaced): *out (free()) holds
 * *out_n bytes. Legacy v1-v3 files cannot be signed (convert them first). */
int qvf_sign(const void *buf, size_t n_bytes, const char *name, void *key, const char *signer,
             uint64_t signed_utc, void **out, size_t *out_n, char *err, size_t err_size);
/* Reads and checks the signature of the v4 file in buf. 0 with sig->present = 0 (unsigned) or
 * sig->valid = 1; QVF_E_SIGNATURE when it does not verify (any edit after signing); a framing
 * error code when the chunks themselves are damaged. */
int qvf_signature_read(const void *buf, size_t n_bytes, const char *name, qvf_signature *sig,
                       char *err, size_t err_size);
/* 1 when sig is valid and made with one of the n_keys raw public keys. */
int qvf_signature_trusted(const qvf_signature *sig, const uint8_t (*keys)[32], int n_keys);

uint32_t qvf_crc32c(uint32_t crc, const void *buf, size_t n_bytes); /* crc = 0 to start */

#endif
