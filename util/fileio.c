/* fileio.c — atomic file writing (O_TMPFILE + linkat, or a named temp file + rename) and
 * whole-file reading. An O_TMPFILE has no name until commit links it in, so a kill at any point
 * before that leaves nothing; the kernel frees it with the last descriptor. linkat through
 * /proc/self/fd needs /proc; AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "include/qvoice.h"
#include "util/api.h"
#include "util/fileio.h"

struct qvu_wfile {
    int fd;
    FILE *f;    /* stream on fd, or NULL */
    char *buf;  /* f's buffer (qvu_wfile_stream_large), or NULL: freed after f is closed */
    char *path; /* destination */
    char *dir;  /* its directory */
    char *tmp;  /* the named temp file (fallback), or NULL for an O_TMPFILE */
};

static void fail(char *err, size_t es, const char *path, const char *what, int e) {
    if (err && es) snprintf(err, es, "%s: %s (%s)", path, what, strerror(e));
}

/* "DIR/.BASE.tmp." — the temp-name prefix of path; the PID and a sequence number follow. */
static char *temp_prefix(const char *dir, const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(dir) + strlen(base) + 8;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/.%s.tmp.", dir, base);
    return p;
}

/* A new name "DIR/.BASE.tmp.PID.N" (unique in this process; O_EXCL settles the rest). */
static char *temp_name(const char *dir, const char *path) {
    static unsigned seq;
    char *pre = temp_prefix(dir, path);
    if (!pre) return NULL;
    size_t n = strlen(pre) + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%ld.%u", pre, (long)getpid(),
                 __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
    free(pre);
    return p;
}

/* Removes temp files of path left by processes that no longer exist (killed writers on the
 * fallback path). Only names made by temp_name for this destination are touched. */
static void remove_stale(const char *dir, const char *path) {
    char *pre = temp_prefix(dir, path);
    DIR *d = pre ? opendir(dir) : NULL;
    if (d) {
        const char *name_pre = pre + strlen(dir) + 1;
        size_t np = strlen(name_pre);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, name_pre, np)) continue;
            char *end;
            long pid = strtol(e->d_name + np, &end, 10);
            if (pid <= 0 || *end != '.' || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
            (void)unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
    }
    free(pre);
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* orders the new name after the data; the file is complete either way */
        close(fd);
    }
}

static void wfile_free(qvu_wfile *w) {
    if (w->f)
        fclose(w->f);
    else if (w->fd >= 0)
        close(w->fd);
    free(w->buf);
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    free(w->dir);
    free(w->path);
    free(w);
}

int qvu_wfile_open(qvu_wfile **out, const char *path, char *err, size_t es) {
    *out = NULL;
    qvu_wfile *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path)) || !(w->dir = dir_of(path))) {
        if (w) free(w->path);
        free(w);
        fail(err, es, path, "cannot write", ENOMEM);
        return -1;
    }
    w->fd = -1;
    if (access("/proc/self/fd", X_OK) == 0)
        w->fd = open(w->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
    if (w->fd < 0) { /* no O_TMPFILE on this file system (or no /proc): a named temp file */
        remove_stale(w->dir, path);
        for (int i = 0; i < 100 && w->fd < 0; i++) {
            free(w->tmp);
            if (!(w->tmp = temp_name(w->dir, path))) break;
            w->fd = open(w->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (w->fd < 0 && errno != EEXIST) break;
        }
        if (w->fd < 0) {
            int e = w->tmp ? errno : ENOMEM;
            free(w->tmp);
            w->tmp = NULL;
            wfile_free(w);
            fail(err, es, path, "cannot create a temporary file next to it", e);
            return -1;
        }
    }
    *out = w;
    return 0;
}

int qvu_wfile_fd(const qvu_wfile *w) {
    return w->fd;
}

FILE *qvu_wfile_stream(qvu_wfile *w) {
    if (!w->f) w->f = fdopen(w->fd, "wb");
    return w->f;
}

FILE *qvu_wfile_stream_large(qvu_wfile *w) {
    enum { FOLIO = 2 << 20 }; /* x86-64's huge page: the page cache's largest folio */
    if (!w->buf && !w->f && (w->buf = malloc(FOLIO)) &&
        (!qvu_wfile_stream(w) || setvbuf(w->f, w->buf, _IOFBF, FOLIO)))
        return NULL;
    return w->buf ? w->f : NULL;
}

/* Puts the unnamed file at w->path: a direct link when the path is free, else a link to a temp
 * name renamed over the old file (a rename is the only atomic replace). */
static int link_tmpfile(qvu_wfile *w) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", w->fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, w->path, AT_SYMLINK_FOLLOW) == 0) return 0;
    if (errno != EEXIST) return -1;
    remove_stale(w->dir, w->path);
    for (int i = 0; i < 100; i++) {
        char *tmp = temp_name(w->dir, w->path);
        if (!tmp) return errno = ENOMEM, -1;
        int rc = linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW);
        if (rc == 0) {
            rc = rename(tmp, w->path);
            int e = errno;
            if (rc) unlink(tmp);
            free(tmp);
            errno = e;
            return rc;
        }
        free(tmp);
        if (errno != EEXIST) return -1;
    }
    return -1;
}

int qvu_wfile_commit(qvu_wfile *w, char *err, size_t es) {
    int rc = 0;
    if (w->f && (fflush(w->f) || ferror(w->f))) {
        fail(err, es, w->path, "write failed", errno ? errno : EIO);
        rc = -1;
    } else if (fsync(w->fd)) {
        fail(err, es, w->path, "write failed", errno);
        rc = -1;
    } else if (w->tmp ? rename(w->tmp, w->path) : link_tmpfile(w)) {
        fail(err, es, w->path, "cannot put the file in place", errno);
        rc = -1;
    } else {
        free(w->tmp);
        w->tmp = NULL; /* now the destination: not to be unlinked */
        sync_dir(w->dir);
    }
    wfile_free(w);
    return rc;
}

void qvu_wfile_abort(qvu_wfile *w) {
    if (w) wfile_free(w);
}

char *qvu_read_file(const char *path, size_t max_bytes, size_t *n_bytes, char *err, size_t es) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        fail(err, es, path, "cannot open", e);
        errno = e;
        return NULL;
    }
    struct stat st;
    size_t cap = 65536;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size < cap)
        cap = (size_t)st.st_size + 1; /* one more to see the end without a regrow */
    char *buf = malloc(cap + 1);
    size_t n = 0;
    int e = buf ? 0 : ENOMEM;
    while (!e) {
        if (n == cap) {
            if (cap > max_bytes) {
                e = EFBIG;
                break;
            }
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                e = ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            e = errno;
        else if (got == 0)
            break;
        else
            n += (size_t)got;
    }
    close(fd);
    if (!e && n > max_bytes) e = EFBIG;
    if (e) {
        if (e == EFBIG) {
            if (err && es)
                snprintf(err, es, "%s: file too large (expected <= %zu bytes)", path, max_bytes);
        } else {
            fail(err, es, path, e == ENOMEM ? "cannot read" : "read error", e);
        }
        free(buf);
        errno = e;
        return NULL;
    }
    buf[n] = 0;
    *n_bytes = n;
    return buf;
}

/* ---------------------------------------------------------------- public names (qvoice.h) */

enum qv_status qv_outfile_open(qv_outfile **out, const char *path) {
    char err[QVU_DETAIL_SIZE];
    return qvu_wfile_open((qvu_wfile **)out, path, err, sizeof err) ? qvu_fail(QV_E_IO, err)
                                                                    : QV_OK;
}

int qv_outfile_fd(const qv_outfile *f) {
    return qvu_wfile_fd((const qvu_wfile *)f);
}

FILE *qv_outfile_stream(qv_outfile *f) {
    return qvu_wfile_stream((qvu_wfile *)f);
}

enum qv_status qv_outfile_commit(qv_outfile *f) {
    char err[QVU_DETAIL_SIZE];
    return qvu_wfile_commit((qvu_wfile *)f, err, sizeof err) ? qvu_fail(QV_E_IO, err) : QV_OK;
}

void qv_outfile_abort(qv_outfile *f) {
    qvu_wfile_abort((qvu_wfile *)f);
}

enum qv_status qv_file_read(const char *path, size_t max_bytes, char **data, size_t *n_bytes) {
    char err[QVU_DETAIL_SIZE];
    *data = qvu_read_file(path, max_bytes, n_bytes, err, sizeof err);
    if (*data) return QV_OK;
    return qvu_fail(errno == EFBIG ? QV_E_LIMIT : errno == ENOMEM ? QV_E_NOMEM : QV_E_IO, err);
}
