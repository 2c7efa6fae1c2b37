/* prepared.c — the on-disk cache of derived weights (prepared.h). File layout (native byte
 * order: the file never leaves the machine that wrote it, and the probe in the key would differ
 * on another anyway):
 *   "QVPREP02", u32 n_arrays, u32 0, key[32], u64 file size, the checkpoint file's real path
 *   (NUL-padded to 4096 bytes), n_arrays × (u64 offset, u64 size), then the arrays, each at a
 *   64-byte aligned offset.
 * Saving a file also removes the files of its kind whose checkpoint path no longer exists
 * (models made in temporary directories by tests and tools would otherwise leave ~0.5 GB each).
 * Files are written (qvu_wfile_stream_large) and read (MADV_HUGEPAGE) so that the page cache
 * holds them in 2 MB folios, which a mapping takes one page-table entry each.
 */
#include "checkpoint/prepared.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/fingerprint.h"
#include "util/fileio.h"
#include "util/sha256.h"

static const char k_magic[8] = {'Q', 'V', 'P', 'R', 'E', 'P', '0', '2'};
#define ALIGN 64
#define MAX_ARRAYS 4096

typedef struct {
    char magic[8];
    uint32_t n_arrays, zero;
    uint8_t key[32];
    uint64_t file_size;
    char source[4096];
} header;

struct qvm_prep {
    const uint8_t *map;
    size_t n;
    const uint64_t *tab; /* [n_arrays][2] */
    uint32_t n_arrays, next;
};

/* The cache directory into out; -1 when caching is off or nothing names one. */
static int cache_dir(char *out, size_t n) {
    const char *c = getenv("QVOICE_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int k;
    if (c) {
        if (!*c) return -1;
        k = snprintf(out, n, "%s/prepared", c);
    } else if (x && *x) {
        k = snprintf(out, n, "%s/qvoice/prepared", x);
    } else if (h && *h) {
        k = snprintf(out, n, "%s/.cache/qvoice/prepared", h);
    } else {
        return -1;
    }
    return k > 0 && (size_t)k < n ? 0 : -1;
}

static int mkdirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int bad = mkdir(path, 0777) && errno != EEXIST;
        *p = '/';
        if (bad) return -1;
    }
    return mkdir(path, 0777) && errno != EEXIST ? -1 : 0;
}

/* Adds a file's identity: it changes whenever the file is rewritten or replaced. */
static int put_ident(qvu_sha256_ctx *ctx, const char *path) {
    struct stat sb;
    uint64_t v[6] = {0};
    if (stat(path, &sb) == 0)
        v[0] = sb.st_dev, v[1] = sb.st_ino, v[2] = (uint64_t)sb.st_size,
        v[3] = (uint64_t)sb.st_mtim.tv_sec, v[4] = (uint64_t)sb.st_mtim.tv_nsec, v[5] = 1;
    return qvu_sha256_add(ctx, v, sizeof v);
}

int qvm_prep_id_files(qvm_prep_id *id, const char *kind, const char *source,
                      const char *const *files, int n_files, const void *extra, size_t n_extra) {
    char dir[3900];
    if (cache_dir(dir, sizeof dir) || !realpath(source, id->source)) return -1;
    uint8_t where[32];
    if (qvu_sha256(id->source, strlen(id->source), where)) return -1;
    qvu_sha256_ctx *ctx = qvu_sha256_begin();
    int bad = qvu_sha256_add(ctx, kind, strlen(kind) + 1);
    for (int i = 0; i < n_files && !bad; i++)
        bad = put_ident(ctx, files[i]);
    bad |= qvu_sha256_add(ctx, extra, n_extra);
    if (qvu_sha256_end(ctx, id->key) || bad) return -1;
    char hex[65];
    qvu_hex(where, 32, hex);
    int k = snprintf(id->path, sizeof id->path, "%s/%s-%.16s.qvprep", dir, kind, hex);
    return k > 0 && (size_t)k < sizeof id->path ? 0 : -1;
}

int qvm_prep_id_make(qvm_prep_id *id, const char *kind, const qvm_st *st, const void *extra,
                     size_t n_extra) {
    char real[PATH_MAX], cfg[PATH_MAX + 16];
    const char *file = qvm_st_file(st, NULL);
    if (!realpath(file, real)) return -1;
    /* the files: config.json beside the checkpoint, then every file of st */
    const char *slash = strrchr(real, '/');
    snprintf(cfg, sizeof cfg, "%.*s/config.json", (int)(slash ? slash - real : 1),
             slash ? real : ".");
    const char **files = malloc(sizeof *files * (size_t)(qvm_st_count(st) + 1));
    if (!files) return -1;
    int n = 0;
    files[n++] = cfg;
    for (int i = 0; i < qvm_st_count(st); i++) {
        const char *f = qvm_st_file(st, qvm_st_at(st, i));
        if (n > 1 && !strcmp(f, files[n - 1])) continue; /* shards come in runs */
        files[n++] = f;
    }
    const int rc = qvm_prep_id_files(id, kind, file, files, n, extra, n_extra);
    free(files);
    return rc;
}

qvm_prep *qvm_prep_open(const qvm_prep_id *id) {
    int fd = open(id->path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) return NULL;
    void *map = fstat(fd, &sb) == 0 && (size_t)sb.st_size >= sizeof(header)
                    ? mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) return NULL;
    const size_t n = (size_t)sb.st_size;
    /* Hints, so failure changes nothing: what is read from disk comes in as 2 MB folios (the
     * kernel then maps a whole folio per entry), and everything is mapped now, in one call,
     * rather than fault by fault while the model computes (as MAP_POPULATE did). */
    madvise(map, n, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_READ
    madvise(map, n, MADV_POPULATE_READ);
#endif
    const header *h = map;
    qvm_prep *p = NULL;
    int ok = !memcmp(h->magic, k_magic, sizeof k_magic) && h->n_arrays <= MAX_ARRAYS &&
             !memcmp(h->key, id->key, 32) && h->file_size == n &&
             sizeof *h + (size_t)h->n_arrays * 16 <= n;
    const uint64_t *tab = (const uint64_t *)(h + 1);
    for (uint32_t i = 0; ok && i < h->n_arrays; i++)
        ok = tab[2 * i] % ALIGN == 0 && tab[2 * i] <= n && tab[2 * i + 1] <= n - tab[2 * i];
    if (ok && (p = calloc(1, sizeof *p))) {
        *p = (qvm_prep){map, n, tab, h->n_arrays, 0};
        return p;
    }
    munmap(map, n);
    return NULL;
}

const void *qvm_prep_take(qvm_prep *p, size_t n_bytes) {
    if (!p || p->next >= p->n_arrays || p->tab[2 * p->next + 1] != n_bytes) return NULL;
    const void *a = p->map + p->tab[2 * p->next];
    p->next++;
    return a;
}

void qvm_prep_close(qvm_prep *p) {
    if (!p) return;
    munmap((void *)(uintptr_t)p->map, p->n);
    free(p);
}

static size_t aligned(size_t v) {
    return (v + ALIGN - 1) / ALIGN * ALIGN;
}

/* Removes the files of dir named like name ("KIND-HASH.qvprep", a different HASH) whose
 * checkpoint no longer exists, or that an older layout wrote. */
static void sweep(const char *dir, const char *name) {
    const char *dash = strrchr(name, '-');
    DIR *d = dash ? opendir(dir) : NULL;
    if (!d) return;
    const size_t n_kind = (size_t)(dash - name) + 1;
    for (const struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, name, n_kind) || len < 7 || strcmp(e->d_name + len - 7, ".qvprep") ||
            !strcmp(e->d_name, name))
            continue;
        char path[8192];
        header h;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        const int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        const int got = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
        close(fd);
        if (!got || memcmp(h.magic, k_magic, 6)) continue; /* not ours */
        h.source[sizeof h.source - 1] = 0;
        if (memcmp(h.magic, k_magic, sizeof k_magic) || (access(h.source, F_OK) && errno == ENOENT))
            unlink(path);
    }
    closedir(d);
}

int qvm_prep_save(const qvm_prep_id *id, const qvm_prep_array *a, int n) {
    if (n < 0 || n > MAX_ARRAYS) return -1;
    char dir[sizeof id->path], err[256];
    snprintf(dir, sizeof dir, "%s", id->path);
    char *slash = strrchr(dir, '/');
    if (!slash) return -1;
    *slash = 0;
    header h;
    memset(&h, 0, sizeof h);
    h.n_arrays = (uint32_t)n;
    memcpy(h.magic, k_magic, sizeof k_magic);
    memcpy(h.key, id->key, 32);
    snprintf(h.source, sizeof h.source, "%s", id->source);
    uint64_t *tab = malloc(sizeof *tab * 2 * (size_t)(n ? n : 1));
    if (!tab) return -1;
    size_t off = aligned(sizeof h + sizeof *tab * 2 * (size_t)n);
    for (int i = 0; i < n; i++) {
        tab[2 * i] = off, tab[2 * i + 1] = a[i].n_bytes;
        off = aligned(off + a[i].n_bytes);
    }
    h.file_size = off;
    qvu_wfile *w = NULL;
    FILE *f = NULL;
    /* large: written array by array through stdio's 4 KB buffer, the arrays' unaligned ends
     * broke the page cache's folios into small ones, mapped 4 KB at a time by every load */
    int bad = mkdirs(dir) || qvu_wfile_open(&w, id->path, err, sizeof err) ||
              !(f = qvu_wfile_stream_large(w)) || fwrite(&h, sizeof h, 1, f) != 1 ||
              fwrite(tab, sizeof *tab * 2, (size_t)n, f) != (size_t)n;
    static const char zeros[ALIGN];
    size_t at = sizeof h + sizeof *tab * 2 * (size_t)n;
    for (int i = 0; i < n && !bad; i++) {
        bad = fwrite(zeros, 1, tab[2 * i] - at, f) != tab[2 * i] - at ||
              fwrite(a[i].data, 1, a[i].n_bytes, f) != a[i].n_bytes;
        at = tab[2 * i] + a[i].n_bytes;
    }
    bad = bad || fwrite(zeros, 1, off - at, f) != off - at;
    free(tab);
    if (bad) {
        qvu_wfile_abort(w);
        return -1;
    }
    sweep(dir, slash + 1);
    return qvu_wfile_commit(w, err, sizeof err) ? -1 : 0;
}
