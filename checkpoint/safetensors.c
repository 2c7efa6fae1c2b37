/* safetensors.c — bounds-checked safetensors reader on a read-only mmap.
 * Every header field is validated before a pointer into the data is formed: header length against
 * the file and HEADER_MAX_BYTES, dtype, shape × dtype size == byte range, range inside the data
 * area, element alignment, no overlaps (ranges sorted by offset), unique names. Shards are opened
 * as parts merged into one table; names are copied out of the cJSON tree so it is freed at once.
 */
#include "checkpoint/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "util/fileio.h"


/* ==== limits ================================================================================ */

#define HEADER_MAX_BYTES ((uint64_t)100 << 20) /* real headers are ~50 kB; 100 MB is generous */
#define INDEX_MAX_BYTES ((size_t)64 << 20)
#define JSON_INT_MAX 9007199254740992.0 /* 2^53: larger doubles are no longer exact integers */

/* ==== types ================================================================================= */

typedef struct {
    char *path;            /* owned; used in error messages */
    const uint8_t *base;   /* whole file image */
    size_t n_bytes;
    int mapped;            /* munmap on close (0: borrowed memory buffer) */
    char *names;           /* owned pool of this part's tensor names */
    qvm_tensor *tensors;   /* owned, header order */
    int n_tensors;
} part;

struct qvm_st {
    char *path;            /* as opened */
    part *parts;
    int n_parts;
    qvm_tensor *tensors;   /* merged table (points into the parts' name pools and data) */
    int *part_of;          /* part index of each tensor */
    int *by_name;          /* tensor indices sorted by name, for qvm_st_find */
    int n_tensors;
};

/* ==== helpers =============================================================================== */

static int fail(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_size, const char *fmt, ...) {
    if (err && err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

const char *qvm_dtype_name(enum qvm_dtype d) {
    switch (d) {
    case QVM_DTYPE_BF16: return "BF16";
    case QVM_DTYPE_F16: return "F16";
    case QVM_DTYPE_F32: return "F32";
    case QVM_DTYPE_I64: return "I64";
    case QVM_DTYPE_I32: return "I32";
    case QVM_DTYPE_U32: return "U32";
    }
    return "?";
}

size_t qvm_dtype_size(enum qvm_dtype d) {
    switch (d) {
    case QVM_DTYPE_BF16: return 2;
    case QVM_DTYPE_F16: return 2;
    case QVM_DTYPE_F32: return 4;
    case QVM_DTYPE_I64: return 8;
    case QVM_DTYPE_I32: return 4;
    case QVM_DTYPE_U32: return 4;
    }
    return 0;
}

int qvm_dtype_is_float(enum qvm_dtype d) {
    return d == QVM_DTYPE_BF16 || d == QVM_DTYPE_F16 || d == QVM_DTYPE_F32;
}

static int parse_dtype(const char *s, enum qvm_dtype *d) {
    static const enum qvm_dtype all[] = {QVM_DTYPE_BF16, QVM_DTYPE_F16, QVM_DTYPE_F32,
                                         QVM_DTYPE_I64,  QVM_DTYPE_I32, QVM_DTYPE_U32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, qvm_dtype_name(all[i])) == 0) {
            *d = all[i];
            return 0;
        }
    return -1;
}

/* "[a, b, c]" into buf. */
static const char *fmt_shape(char *buf, size_t n, int n_dims, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < n_dims && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

/* A JSON number that is an exact non-negative integer <= 2^53. */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= JSON_INT_MAX) || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

/* ==== one file ============================================================================== */

typedef struct {
    uint64_t begin, end;
    int idx;
} range;

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parses one tensor entry; on success fills t (except name) and *begin, *end. */
static int parse_entry(const part *pt, const char *name, const cJSON *e, uint64_t data_start,
                       uint64_t data_size, qvm_tensor *t, uint64_t *begin, uint64_t *end,
                       char *err, size_t err_size) {
    const char *f = pt->path;
    if (!cJSON_IsObject(e))
        return fail(err, err_size, "%s: tensor %s: header entry is not an object", f, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd))
        return fail(err, err_size, "%s: tensor %s: missing or non-string dtype", f, name);
    if (parse_dtype(jd->valuestring, &t->dtype) != 0)
        return fail(err, err_size,
                    "%s: tensor %s: unsupported dtype (expected BF16, F16, F32, I64, I32 or U32, found "
                    "%.32s)",
                    f, name, jd->valuestring);
    if (!cJSON_IsArray(js))
        return fail(err, err_size, "%s: tensor %s: missing or non-array shape", f, name);
    int n_dims = cJSON_GetArraySize(js);
    if (n_dims > 4)
        return fail(err, err_size, "%s: tensor %s: too many dimensions (expected <= 4, found %d)",
                    f, name, n_dims);
    t->n_dims = n_dims;
    uint64_t n_elem = 1;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, js) {
        uint64_t dim;
        if (json_u64(it, &dim) != 0 || dim > INT64_MAX)
            return fail(err, err_size,
                        "%s: tensor %s: bad shape entry %d (expected a non-negative integer)", f,
                        name, i);
        t->shape[i++] = (int64_t)dim;
        if (__builtin_mul_overflow(n_elem, dim, &n_elem))
            return fail(err, err_size, "%s: tensor %s: shape element count overflows", f, name);
    }
    for (; i < 4; i++) t->shape[i] = 0;
    uint64_t n_need;
    if (__builtin_mul_overflow(n_elem, (uint64_t)qvm_dtype_size(t->dtype), &n_need))
        return fail(err, err_size, "%s: tensor %s: shape byte size overflows", f, name);
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 ||
        json_u64(cJSON_GetArrayItem(jo, 0), begin) != 0 ||
        json_u64(cJSON_GetArrayItem(jo, 1), end) != 0)
        return fail(err, err_size,
                    "%s: tensor %s: bad data_offsets (expected [begin, end] non-negative integers)",
                    f, name);
    if (*begin > *end)
        return fail(err, err_size,
                    "%s: tensor %s: data_offsets reversed (expected begin <= end, found [%llu, %llu])",
                    f, name, (unsigned long long)*begin, (unsigned long long)*end);
    if (*end > data_size)
        return fail(err, err_size,
                    "%s: tensor %s: data_offsets out of range (expected end <= %llu, found %llu)",
                    f, name, (unsigned long long)data_size, (unsigned long long)*end);
    if (*end - *begin != n_need) {
        char sb[96];
        return fail(err, err_size,
                    "%s: tensor %s: byte range does not match shape %s %s (expected %llu bytes, "
                    "found %llu)",
                    f, name, fmt_shape(sb, sizeof sb, t->n_dims, t->shape),
                    qvm_dtype_name(t->dtype), (unsigned long long)n_need,
                    (unsigned long long)(*end - *begin));
    }
    if ((data_start + *begin) % qvm_dtype_size(t->dtype) != 0)
        return fail(err, err_size,
                    "%s: tensor %s: data not aligned to its %zu-byte %s elements (found file "
                    "offset %llu)",
                    f, name, qvm_dtype_size(t->dtype), qvm_dtype_name(t->dtype),
                    (unsigned long long)(data_start + *begin));
    t->data = pt->base + data_start + *begin;
    t->n_bytes = (size_t)n_need;
    return 0;
}

/* Validates pt's header and fills pt->tensors / names. */
/* The part's JSON header, checked: length within the file and the limit, valid JSON with
 * nothing but spaces after it, an object. NULL with err otherwise. */
static cJSON *parse_header(const part *pt, uint64_t *n_hdr_out, char *err, size_t err_size) {
    const char *f = pt->path;
    if (pt->n_bytes < 8) {
        fail(err, err_size, "%s: truncated file (expected at least 8 bytes, found %zu)", f,
             pt->n_bytes);
        return NULL;
    }
    uint64_t n_hdr = read_le64(pt->base);
    if (n_hdr > HEADER_MAX_BYTES) {
        fail(err, err_size, "%s: header length over limit (expected <= %llu, found %llu)", f,
             (unsigned long long)HEADER_MAX_BYTES, (unsigned long long)n_hdr);
        return NULL;
    }
    if (n_hdr > pt->n_bytes - 8) {
        fail(err, err_size, "%s: header length exceeds file (expected <= %zu, found %llu)", f,
             pt->n_bytes - 8, (unsigned long long)n_hdr);
        return NULL;
    }
    const char *hdr = (const char *)pt->base + 8;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)n_hdr, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr && end <= hdr + n_hdr ? (size_t)(end - hdr) : 0;
        fail(err, err_size, "%s: header is not valid JSON (error near header byte %zu)", f, at);
        return NULL;
    }
    for (const char *p = end; p < hdr + n_hdr; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            fail(err, err_size,
                 "%s: trailing bytes after JSON header (expected spaces, found 0x%02x at "
                 "header byte %zu)",
                 f, (unsigned)(uint8_t)*p, (size_t)(p - hdr));
            return NULL;
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        fail(err, err_size, "%s: header is not a JSON object", f);
        return NULL;
    }
    *n_hdr_out = n_hdr;
    return root;
}

/* Empty tensors own no bytes; a non-empty range must start at or after the previous end
 * (ranges [n] are sorted here). */
static int check_overlaps(const part *pt, range *ranges, int n, char *err, size_t err_size) {
    qsort(ranges, (size_t)n, sizeof *ranges, cmp_range);
    uint64_t prev_end = 0;
    int prev = -1;
    for (int k = 0; k < n; k++) {
        if (ranges[k].begin == ranges[k].end) continue;
        if (prev >= 0 && ranges[k].begin < prev_end)
            return fail(err, err_size,
                        "%s: tensors %s and %s overlap (expected %s to start at >= %llu, found "
                        "%llu)",
                        pt->path, pt->tensors[prev].name, pt->tensors[ranges[k].idx].name,
                        pt->tensors[ranges[k].idx].name, (unsigned long long)prev_end,
                        (unsigned long long)ranges[k].begin);
        prev_end = ranges[k].end;
        prev = ranges[k].idx;
    }
    return 0;
}

static int parse_part(part *pt, char *err, size_t err_size) {
    const char *f = pt->path;
    uint64_t n_hdr;
    cJSON *root = parse_header(pt, &n_hdr, err, err_size);
    if (!root) return -1;
    int n = 0;
    size_t n_name_bytes = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        n++;
        n_name_bytes += strlen(e->string) + 1;
    }
    uint64_t data_start = 8 + n_hdr, data_size = pt->n_bytes - data_start;
    range *ranges = malloc(sizeof *ranges * (size_t)(n ? n : 1));
    pt->tensors = calloc((size_t)(n ? n : 1), sizeof *pt->tensors);
    pt->names = malloc(n_name_bytes ? n_name_bytes : 1);
    int rc = -1;
    if (!ranges || !pt->tensors || !pt->names) {
        fail(err, err_size, "%s: out of memory for %d tensor entries", f, n);
        goto out;
    }
    char *np = pt->names;
    int i = 0;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        qvm_tensor *t = &pt->tensors[i];
        size_t len = strlen(e->string) + 1;
        memcpy(np, e->string, len);
        t->name = np;
        np += len;
        if (parse_entry(pt, t->name, e, data_start, data_size, t, &ranges[i].begin,
                        &ranges[i].end, err, err_size) != 0)
            goto out;
        ranges[i].idx = i;
        i++;
    }
    pt->n_tensors = n;
    rc = check_overlaps(pt, ranges, n, err, err_size);
out:
    free(ranges);
    cJSON_Delete(root);
    return rc;
}

static unsigned long g_n_opened; /* qvm_st_n_opened */

unsigned long qvm_st_n_opened(void) {
    return __atomic_load_n(&g_n_opened, __ATOMIC_RELAXED);
}

static int map_file(part *pt, char *err, size_t err_size) {
    __atomic_add_fetch(&g_n_opened, 1, __ATOMIC_RELAXED);
    int fd = open(pt->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(err, err_size, "%s: cannot open (%s)", pt->path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return fail(err, err_size, "%s: not a regular file", pt->path);
    }
    if ((uint64_t)sb.st_size < 8) {
        close(fd);
        return fail(err, err_size, "%s: truncated file (expected at least 8 bytes, found %lld)",
                    pt->path, (long long)sb.st_size);
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return fail(err, err_size, "%s: mmap failed (%s)", pt->path, strerror(errno));
    pt->base = p;
    pt->n_bytes = (size_t)sb.st_size;
    pt->mapped = 1;
    return 0;
}

/* ==== the table ============================================================================= */

/* Bottom-up merge sort of tensor indices by name (no global qsort context: thread-safe). */
static void sort_names(const qvm_tensor *t, int *idx, int *tmp, int n) {
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] = strcmp(t[idx[a]].name, t[idx[b]].name) <= 0 ? idx[a++] : idx[b++];
            while (a < mid) tmp[k++] = idx[a++];
            while (b < hi) tmp[k++] = idx[b++];
        }
        memcpy(idx, tmp, sizeof *idx * (size_t)n);
    }
}

/* Builds the merged table from the parts and rejects duplicate names. */
static int build_table(qvm_st *st, char *err, size_t err_size) {
    int n = 0;
    for (int p = 0; p < st->n_parts; p++) n += st->parts[p].n_tensors;
    st->tensors = malloc(sizeof *st->tensors * (size_t)(n ? n : 1));
    st->part_of = malloc(sizeof *st->part_of * (size_t)(n ? n : 1));
    st->by_name = malloc(sizeof *st->by_name * (size_t)(n ? n : 1));
    int *tmp = malloc(sizeof *tmp * (size_t)(n ? n : 1));
    if (!st->tensors || !st->part_of || !st->by_name || !tmp) {
        free(tmp);
        return fail(err, err_size, "%s: out of memory for %d tensors", st->path, n);
    }
    int k = 0;
    for (int p = 0; p < st->n_parts; p++)
        for (int i = 0; i < st->parts[p].n_tensors; i++) {
            st->tensors[k] = st->parts[p].tensors[i];
            st->part_of[k++] = p;
        }
    st->n_tensors = n;
    sort_names(st->tensors, st->by_name, tmp, n);
    free(tmp);
    for (int i = 1; i < n; i++) {
        const qvm_tensor *a = &st->tensors[st->by_name[i - 1]], *b = &st->tensors[st->by_name[i]];
        int pa = st->part_of[st->by_name[i - 1]], pb = st->part_of[st->by_name[i]];
        if (strcmp(a->name, b->name) == 0)
            return fail(err, err_size, "%s: duplicate tensor %s%s%s%s", st->parts[pb].path, b->name,
                        pa == pb ? "" : " (also in ", pa == pb ? "" : st->parts[pa].path,
                        pa == pb ? "" : ")");
    }
    return 0;
}

void qvm_st_close(qvm_st *st) {
    if (!st) return;
    for (int p = 0; p < st->n_parts; p++) {
        part *pt = &st->parts[p];
        if (pt->mapped && pt->base) munmap((void *)(uintptr_t)pt->base, pt->n_bytes);
        free(pt->path);
        free(pt->names);
        free(pt->tensors);
    }
    free(st->parts);
    free(st->tensors);
    free(st->part_of);
    free(st->by_name);
    free(st->path);
    free(st);
}

static qvm_st *new_st(const char *path, int n_parts) {
    qvm_st *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->path = dup_str(path);
    st->parts = calloc((size_t)n_parts, sizeof *st->parts);
    st->n_parts = n_parts;
    if (!st->path || !st->parts) {
        qvm_st_close(st);
        return NULL;
    }
    return st;
}

qvm_st *qvm_st_open_memory(const void *buf, size_t n_bytes, const char *label, char *err,
                           size_t err_size) {
    qvm_st *st = new_st(label, 1);
    if (!st) {
        fail(err, err_size, "%s: out of memory", label);
        return NULL;
    }
    part *pt = &st->parts[0];
    pt->path = dup_str(label);
    pt->base = buf;
    pt->n_bytes = n_bytes;
    if (!pt->path || parse_part(pt, err, err_size) != 0 || build_table(st, err, err_size) != 0) {
        if (!pt->path) fail(err, err_size, "%s: out of memory", label);
        qvm_st_close(st);
        return NULL;
    }
    return st;
}

/* ==== sharded checkpoints =================================================================== */

/* The distinct shard names of weight_map (each a plain file name) into shards, *n_shards. */
static int list_shards(const char *path, const cJSON *wm, const char **shards, int *n_shards,
                       char *err, size_t err_size) {
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e))
            return fail(err, err_size, "%s: weight_map entry %s is not a string", path, e->string);
        const char *s = e->valuestring;
        if (!*s || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
            return fail(err, err_size,
                        "%s: weight_map entry %s: shard must be a file name in the index's "
                        "directory (found \"%.64s\")",
                        path, e->string, s);
        int j = 0;
        while (j < n && strcmp(shards[j], s) != 0) j++;
        if (j == n) shards[n++] = s;
    }
    *n_shards = n;
    if (n == 0)
        return fail(err, err_size, "%s: weight_map is empty (expected at least one tensor)", path);
    return 0;
}

/* Maps and parses every shard, beside the index; an error names the index too. */
static int open_shards(qvm_st *st, const char *path, const char **shards, int n_shards, char *err,
                       size_t err_size) {
    const char *slash = strrchr(path, '/');
    size_t n_dir = slash ? (size_t)(slash - path) + 1 : 0;
    for (int j = 0; j < n_shards; j++) {
        part *pt = &st->parts[j];
        size_t n_name = strlen(shards[j]);
        pt->path = malloc(n_dir + n_name + 1);
        if (!pt->path) return fail(err, err_size, "%s: out of memory", path);
        memcpy(pt->path, path, n_dir);
        memcpy(pt->path + n_dir, shards[j], n_name + 1);
        if (map_file(pt, err, err_size) != 0 || parse_part(pt, err, err_size) != 0) {
            size_t used = err ? strnlen(err, err_size) : 0;
            if (err && used + 1 < err_size)
                snprintf(err + used, err_size - used, " (shard listed in %s)", path);
            return -1;
        }
    }
    return 0;
}

/* weight_map and the shards agree: every listed tensor is in its shard, once; none is unlisted. */
static int check_weight_map(const qvm_st *st, const char *path, const cJSON *wm,
                            const char **shards, int n_shards, char *err, size_t err_size) {
    unsigned char *listed = calloc((size_t)(st->n_tensors ? st->n_tensors : 1), 1);
    if (!listed) return fail(err, err_size, "%s: out of memory", path);
    int rc = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        const qvm_tensor *t = qvm_st_find(st, e->string);
        const char *want = NULL;
        for (int j = 0; j < n_shards; j++)
            if (strcmp(shards[j], e->valuestring) == 0) want = st->parts[j].path;
        if (!t) {
            fail(err, err_size, "%s: tensor %s missing (listed for this shard in %s)", want,
                 e->string, path);
            goto out;
        }
        int i = (int)(t - st->tensors);
        if (strcmp(st->parts[st->part_of[i]].path, want) != 0) {
            fail(err, err_size, "%s: tensor %s is in the wrong shard (expected %s, found %s)",
                 path, e->string, want, st->parts[st->part_of[i]].path);
            goto out;
        }
        if (listed[i]) {
            fail(err, err_size, "%s: tensor %s listed twice in weight_map", path, e->string);
            goto out;
        }
        listed[i] = 1;
    }
    for (int i = 0; i < st->n_tensors; i++)
        if (!listed[i]) {
            fail(err, err_size, "%s: tensor %s not listed in %s", st->parts[st->part_of[i]].path,
                 st->tensors[i].name, path);
            goto out;
        }
    rc = 0;
out:
    free(listed);
    return rc;
}

static qvm_st *open_index(const char *path, char *err, size_t err_size) {
    size_t n_text;
    char *text = qvu_read_file(path, INDEX_MAX_BYTES, &n_text, err, err_size);
    if (!text) return NULL;
    cJSON *root = cJSON_ParseWithLength(text, n_text);
    free(text);
    qvm_st *st = NULL;
    const char **shards = NULL;
    if (!root) {
        fail(err, err_size, "%s: not valid JSON", path);
        goto bad;
    }
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        fail(err, err_size, "%s: missing key weight_map (expected an object)", path);
        goto bad;
    }
    int n_entries = cJSON_GetArraySize(wm), n_shards = 0;
    shards = malloc(sizeof *shards * (size_t)(n_entries ? n_entries : 1));
    if (!shards) {
        fail(err, err_size, "%s: out of memory", path);
        goto bad;
    }
    if (list_shards(path, wm, shards, &n_shards, err, err_size) != 0) goto bad;
    st = new_st(path, n_shards);
    if (!st) {
        fail(err, err_size, "%s: out of memory", path);
        goto bad;
    }
    if (open_shards(st, path, shards, n_shards, err, err_size) != 0 ||
        build_table(st, err, err_size) != 0 ||
        check_weight_map(st, path, wm, shards, n_shards, err, err_size) != 0)
        goto bad;
    free(shards);
    cJSON_Delete(root);
    return st;
bad:
    free(shards);
    cJSON_Delete(root);
    qvm_st_close(st);
    return NULL;
}

/* ==== API =================================================================================== */

qvm_st *qvm_st_open(const char *path, char *err, size_t err_size) {
    size_t n = strlen(path);
    static const char idx_suffix[] = ".index.json";
    if (n >= sizeof idx_suffix - 1 && strcmp(path + n - (sizeof idx_suffix - 1), idx_suffix) == 0)
        return open_index(path, err, err_size);
    qvm_st *st = new_st(path, 1);
    if (!st) {
        fail(err, err_size, "%s: out of memory", path);
        return NULL;
    }
    part *pt = &st->parts[0];
    pt->path = dup_str(path);
    if (!pt->path) {
        fail(err, err_size, "%s: out of memory", path);
        qvm_st_close(st);
        return NULL;
    }
    if (map_file(pt, err, err_size) != 0 || parse_part(pt, err, err_size) != 0 ||
        build_table(st, err, err_size) != 0) {
        qvm_st_close(st);
        return NULL;
    }
    return st;
}

qvm_st *qvm_st_open_dir(const char *dir, const char *stem, char *err, size_t err_size) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s.safetensors.index.json", dir, stem);
    if (n < 0 || (size_t)n >= sizeof path) {
        fail(err, err_size, "%s: path too long", dir);
        return NULL;
    }
    if (access(path, F_OK) != 0) snprintf(path, sizeof path, "%s/%s.safetensors", dir, stem);
    return qvm_st_open(path, err, err_size);
}

int qvm_st_count(const qvm_st *st) { return st ? st->n_tensors : 0; }

const qvm_tensor *qvm_st_at(const qvm_st *st, int i) {
    if (!st || i < 0 || i >= st->n_tensors) return NULL;
    return &st->tensors[i];
}

const qvm_tensor *qvm_st_at_sorted(const qvm_st *st, int i) {
    if (!st || i < 0 || i >= st->n_tensors) return NULL;
    return &st->tensors[st->by_name[i]];
}

const qvm_tensor *qvm_st_find(const qvm_st *st, const char *name) {
    if (!st || !name) return NULL;
    int lo = 0, hi = st->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const qvm_tensor *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

const char *qvm_st_file(const qvm_st *st, const qvm_tensor *t) {
    if (!st) return "";
    if (t && t >= st->tensors && t < st->tensors + st->n_tensors)
        return st->parts[st->part_of[t - st->tensors]].path;
    return st->path;
}

const qvm_tensor *qvm_st_expect(const qvm_st *st, const char *name, enum qvm_dtype dtype,
                                int n_dims, const int64_t *shape, char *err, size_t err_size) {
    char want[96], got[96];
    const qvm_tensor *t = qvm_st_find(st, name);
    fmt_shape(want, sizeof want, n_dims, shape);
    if (!t) {
        fail(err, err_size, "%s: tensor %s: missing (expected %s %s)", qvm_st_file(st, NULL), name,
             want, qvm_dtype_name(dtype));
        return NULL;
    }
    int ok = t->dtype == dtype && t->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        fail(err, err_size, "%s: tensor %s: expected %s %s, found %s %s", qvm_st_file(st, t), name,
             want, qvm_dtype_name(dtype), fmt_shape(got, sizeof got, t->n_dims, t->shape),
             qvm_dtype_name(t->dtype));
        return NULL;
    }
    return t;
}

void qvm_st_drop_pages(const void *data, size_t n_bytes) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)data + page - 1) / page * page;
    const uintptr_t b = ((uintptr_t)data + n_bytes) / page * page;
    if (a < b) madvise((void *)a, b - a, MADV_DONTNEED); /* a hint: failure changes nothing */
}

float *qvm_tensor_to_f32(const qvm_tensor *t) {
    if (!t || !qvm_dtype_is_float(t->dtype)) return NULL;
    size_t n = t->n_bytes / qvm_dtype_size(t->dtype);
    if (n > SIZE_MAX / sizeof(float)) return NULL;
    float *out = qvk_alloc(n * sizeof(float));
    if (!out) return NULL;
    /* The reader enforced element alignment, so the mmap'd data may be read as uint16_t. */
    switch (t->dtype) {
    case QVM_DTYPE_BF16: qvk_bf16_to_f32(out, t->data, n); break;
    case QVM_DTYPE_F16: qvk_f16_to_f32(out, t->data, n); break;
    case QVM_DTYPE_F32: memcpy(out, t->data, n * sizeof(float)); break;
    case QVM_DTYPE_I64:
    case QVM_DTYPE_I32:
    case QVM_DTYPE_U32: break;
    }
    return out;
}
