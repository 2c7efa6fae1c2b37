/* npy.c — NumPy .npy reader for tests: reads the whole file, parses the header dictionary by
 * key, checks the declared shape × dtype against the bytes present, and copies the payload out.
 */
#include "tests/unit/helpers/npy.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/fileio.h"

#define NPY_MAX_FILE_BYTES ((size_t)1 << 31)

static int refuse(char *err, size_t err_len, const char *path, const char *fmt, ...) {
    if (err && err_len) {
        int n = snprintf(err, err_len, "%s: ", path);
        if (n >= 0 && (size_t)n < err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* Finds 'key' in the header dict; returns a pointer just past the following ':' or NULL. */
static const char *find_key(const char *h, size_t n, const char *key) {
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 2 <= n; i++) {
        if (h[i] == '\'' && memcmp(h + i + 1, key, kl) == 0 && h[i + 1 + kl] == '\'') {
            size_t j = i + kl + 2;
            while (j < n && h[j] == ' ')
                j++;
            if (j < n && h[j] == ':') return h + j + 1;
            return NULL;
        }
    }
    return NULL;
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static int parse_header(const char *h, size_t n, npy_array *a, const char **why) {
    const char *end = h + n;
    const char *p = find_key(h, n, "descr");
    if (!p) return *why = "header has no 'descr'", -1;
    p = skip_ws(p, end);
    if (end - p >= 5 && memcmp(p, "'<f4'", 5) == 0)
        a->dtype = NPY_F32;
    else if (end - p >= 5 && memcmp(p, "'<i8'", 5) == 0)
        a->dtype = NPY_I64;
    else
        return *why = "unsupported dtype (expected '<f4' or '<i8')", -1;

    p = find_key(h, n, "fortran_order");
    if (!p) return *why = "header has no 'fortran_order'", -1;
    p = skip_ws(p, end);
    if (!(end - p >= 5 && memcmp(p, "False", 5) == 0))
        return *why = "Fortran order not supported (expected fortran_order False)", -1;

    p = find_key(h, n, "shape");
    if (!p) return *why = "header has no 'shape'", -1;
    p = skip_ws(p, end);
    if (p >= end || *p != '(') return *why = "malformed shape (expected a tuple)", -1;
    p++;
    a->n_dims = 0;
    a->n_elems = 1;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end) return *why = "malformed shape (unterminated tuple)", -1;
        if (*p == ')') break;
        if (*p < '0' || *p > '9') return *why = "malformed shape (expected a dimension)", -1;
        int64_t d = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (d > (INT64_MAX - 9) / 10) return *why = "dimension too large", -1;
            d = d * 10 + (*p - '0');
            p++;
        }
        if (a->n_dims == NPY_MAX_DIMS) return *why = "too many dimensions (max 8)", -1;
        a->shape[a->n_dims++] = d;
        if (d != 0 && a->n_elems > SIZE_MAX / (size_t)d) return *why = "shape overflows", -1;
        a->n_elems *= (size_t)d;
        p = skip_ws(p, end);
        if (p < end && *p == ',') p++;
    }
    return 0;
}

int npy_read(const char *path, npy_array *a, char *err, size_t err_len) {
    memset(a, 0, sizeof *a);
    size_t size;
    unsigned char *buf = (unsigned char *)qvu_read_file(path, NPY_MAX_FILE_BYTES, &size, err, err_len);
    if (!buf) return -1;

    int rc = -1;
    const char *why = NULL;
    if (size < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        refuse(err, err_len, path, "not a .npy file (bad magic)");
        goto out;
    }
    unsigned major = buf[6];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        hoff = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12) {
            refuse(err, err_len, path, "truncated header");
            goto out;
        }
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        hoff = 12;
    } else {
        refuse(err, err_len, path, "unsupported .npy version %u (expected 1, 2 or 3)", major);
        goto out;
    }
    if (hlen > size - hoff) {
        refuse(err, err_len, path, "header length %zu exceeds file size %zu", hlen, size);
        goto out;
    }
    if (parse_header((const char *)buf + hoff, hlen, a, &why) != 0) {
        refuse(err, err_len, path, "%s", why);
        goto out;
    }
    size_t elem = a->dtype == NPY_F32 ? 4 : 8;
    size_t data_off = hoff + hlen;
    if (a->n_elems > (size - data_off) / elem || a->n_elems * elem != size - data_off) {
        refuse(err, err_len, path, "payload is %zu bytes (expected %zu elements of %zu bytes)",
             size - data_off, a->n_elems, elem);
        goto out;
    }
    a->data = malloc(a->n_elems ? a->n_elems * elem : 1);
    if (!a->data) {
        refuse(err, err_len, path, "out of memory");
        goto out;
    }
    /* little-endian payload decoded byte by byte, independent of host order */
    const unsigned char *src = buf + data_off;
    for (size_t i = 0; i < a->n_elems; i++) {
        uint64_t u = 0;
        for (size_t b = 0; b < elem; b++)
            u |= (uint64_t)src[i * elem + b] << (8 * b);
        if (elem == 4) {
            uint32_t u32 = (uint32_t)u;
            memcpy((float *)a->data + i, &u32, 4);
        } else {
            memcpy((int64_t *)a->data + i, &u, 8);
        }
    }
    rc = 0;
out:
    free(buf);
    if (rc != 0) {
        free(a->data);
        memset(a, 0, sizeof *a);
    }
    return rc;
}

int npy_read_typed(const char *path, enum npy_dtype want, npy_array *a, char *err, size_t err_len) {
    if (npy_read(path, a, err, err_len) != 0) return -1;
    if (a->dtype != want) {
        npy_free(a);
        return refuse(err, err_len, path, "dtype is %s (expected %s)",
                    want == NPY_F32 ? "<i8" : "<f4", want == NPY_F32 ? "<f4" : "<i8");
    }
    return 0;
}

void npy_load(const char *path, enum npy_dtype want, npy_array *a) {
    char err[600];
    if (npy_read_typed(path, want, a, err, sizeof err)) fail_msg("%s", err);
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    a->data = NULL;
    a->n_elems = 0;
}
