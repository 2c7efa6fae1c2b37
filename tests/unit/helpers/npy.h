/* npy.h — minimal NumPy .npy reader for golden tests (format 1.0/2.0, C order, little-endian
 * '<f4' and '<i8' only). Every header field is bounds-checked against the file size.
 */
#ifndef QV_TEST_NPY_H
#define QV_TEST_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 8

enum npy_dtype { NPY_F32, NPY_I64 };

typedef struct {
    enum npy_dtype dtype;
    int n_dims; /* 0 for a scalar */
    int64_t shape[NPY_MAX_DIMS];
    size_t n_elems; /* product of shape (1 for a scalar) */
    void *data;     /* float[n_elems] or int64_t[n_elems]; owned, npy_free() */
} npy_array;

/* Reads path into *a. Returns 0, or -1 with a one-line "PATH: problem" in err (if err_len > 0);
 * on failure *a holds nothing to free. */
int npy_read(const char *path, npy_array *a, char *err, size_t err_len);
/* Same, but also fails unless the dtype is want (convenience for tests). */
int npy_read_typed(const char *path, enum npy_dtype want, npy_array *a, char *err, size_t err_len);
/* npy_read_typed for a file the test needs: fails the running test (cmocka) with the error. */
void npy_load(const char *path, enum npy_dtype want, npy_array *a);
/* Accepts a zeroed or already freed array. */
void npy_free(npy_array *a);

static inline const float *npy_f32(const npy_array *a) {
    return (const float *)a->data;
}
static inline const int64_t *npy_i64(const npy_array *a) {
    return (const int64_t *)a->data;
}

#endif
