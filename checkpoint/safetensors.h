/* safetensors.h — read-only, bounds-checked safetensors access on mmap (internal, prefix qvm_st_).
 * A qvm_st opens one model directory's checkpoint: a single `<name>.safetensors` or a sharded set
 * listed in `<name>.safetensors.index.json`. Key design: tensor data stays in the mapping; returned
 * pointers are borrowed and valid until qvm_st_close.
 */
#ifndef QV_SAFETENSORS_H
#define QV_SAFETENSORS_H

/* Every header is validated before use: header length against file size, dtype in {BF16, F16,
 * F32, I64, I32, U32} (the integer ones: token map and packed 4-bit weights), shape × dtype size == byte range, every range inside the file and no two ranges
 * overlapping. */

#include <stddef.h>
#include <stdint.h>

enum qvm_dtype {
    QVM_DTYPE_BF16,
    QVM_DTYPE_F16,
    QVM_DTYPE_F32,
    QVM_DTYPE_I64,
    QVM_DTYPE_I32,
    QVM_DTYPE_U32
};

typedef struct {
    const char *name;        /* borrowed */
    enum qvm_dtype dtype;
    int n_dims;              /* 0..4 */
    int64_t shape[4];
    const void *data;        /* borrowed, inside the mmap; only dtype-aligned */
    size_t n_bytes;
} qvm_tensor;

typedef struct qvm_st qvm_st;

/* Opens path = a .safetensors file or a .safetensors.index.json. On failure returns NULL and
 * writes one line "FILE: problem (expected X, found Y)" into err (err_size bytes). */
qvm_st *qvm_st_open(const char *path, char *err, size_t err_size);
/* Opens dir/stem.safetensors.index.json if it exists, else dir/stem.safetensors
 * (stem e.g. "model" or "speech_tokenizer/model"). */
qvm_st *qvm_st_open_dir(const char *dir, const char *stem, char *err, size_t err_size);
/* Same checks on a single safetensors image in memory (borrowed: buf must outlive the qvm_st);
 * label names it in errors. Used by the fuzz target and by tests. */
qvm_st *qvm_st_open_memory(const void *buf, size_t n_bytes, const char *label, char *err,
                           size_t err_size);
void qvm_st_close(qvm_st *st); /* accepts NULL */
/* Safetensors files this process has opened so far (each shard counts): how tests check that a
 * model directory is opened once (ckpt.h). */
unsigned long qvm_st_n_opened(void);

int qvm_st_count(const qvm_st *st);
/* i-th tensor (0 <= i < count) in header order; NULL if out of range. */
const qvm_tensor *qvm_st_at(const qvm_st *st, int i);
/* i-th tensor (0 <= i < count) in strcmp order of the names (names are unique); NULL if out of
 * range. Costs nothing: the order is the one qvm_st_find searches. */
const qvm_tensor *qvm_st_at_sorted(const qvm_st *st, int i);
/* Tensor by exact name, or NULL. */
const qvm_tensor *qvm_st_find(const qvm_st *st, const char *name);
/* Path of the file holding t (the shard for sharded checkpoints); the opened path if t is NULL
 * or not from st. Borrowed. */
const char *qvm_st_file(const qvm_st *st, const qvm_tensor *t);

/* Find `name` and check its dtype and shape (n_dims entries of shape). Returns the tensor, or NULL
 * with "FILE: tensor NAME: expected [a, b] BF16, found [c, d] F32" (or "missing") in err. */
const qvm_tensor *qvm_st_expect(const qvm_st *st, const char *name, enum qvm_dtype dtype,
                                int n_dims, const int64_t *shape, char *err, size_t err_size);

/* Copies a tensor of any float dtype into newly allocated f32 (caller frees with qvk_free).
 * NULL on allocation failure. */
float *qvm_tensor_to_f32(const qvm_tensor *t);

/* For tensor bytes of a file-backed qvm_st (not qvm_st_open_memory) that were copied and will not
 * be read again: drops the whole pages inside [data, data + n_bytes) from the resident set (they
 * would be read from the file again if touched). Used after widening F16 / q4 scales to owned
 * f32 or reordering conv weights, so RSS does not hold both forms. */
void qvm_st_drop_pages(const void *data, size_t n_bytes);

/* Safetensors name of a dtype ("BF16", "F16", "F32", "I64", "I32", "U32"; "?" otherwise). */
const char *qvm_dtype_name(enum qvm_dtype d);
/* Bytes per element (0 if not a known dtype). */
size_t qvm_dtype_size(enum qvm_dtype d);
/* 1 for BF16, F16, F32. */
int qvm_dtype_is_float(enum qvm_dtype d);

#endif
