/* test_fileio.c — util/fileio: the atomic writer leaves nothing behind when its process is killed
 * mid-write (new file and overwrite), replaces an old file only on commit, removes temp files of
 * dead writers and keeps those of live ones; on the fallback path (no /proc: run under unshare
 * with /proc hidden, when allowed) a killed writer's temp file is removed by the next write; the
 * whole-file reader on files, pipes and limits; SHA-256 (FIPS 180-2 known answers, one-shot and
 * streamed alike); the large-buffered stream writes what it is given, in pieces of any size.
 * `test_fileio --write PATH` and
 * `--write-slowly PATH` are the writers those runs use.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"
#include "util/fileio.h"
#include "util/sha256.h"

static char err[4400];
static const char *self; /* this binary (argv[0]): the writer the fallback test runs */

/* Entries of dir other than . and .., as one space-separated string. */
static const char *listing(const char *dir) {
    static char out[4096];
    out[0] = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", out[0] ? " " : "", e->d_name);
    closedir(d);
    return out;
}

static void write_all(int fd, const void *p, size_t n) {
    assert_int_equal(write(fd, p, n), (ssize_t)n);
}

static void mkdir_fresh(const char *dir) {
    assert_int_equal(mkdir(dir, 0755), 0);
}

/* A child writes path through the writer without end (1 MiB, then 64 KiB every millisecond); the
 * parent kills it with SIGKILL once 1 MiB is written. */
static void kill_mid_write(const char *path) {
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        static char block[1 << 16];
        memset(block, 'k', sizeof block);
        qvu_wfile *w;
        if (qvu_wfile_open(&w, path, err, sizeof err)) _exit(1);
        for (int i = 0; i < 16; i++)
            if (write(qvu_wfile_fd(w), block, sizeof block) != (ssize_t)sizeof block) _exit(1);
        if (write(ready[1], "r", 1) != 1) _exit(1);
        for (;;) {
            if (write(qvu_wfile_fd(w), block, sizeof block) != (ssize_t)sizeof block) _exit(1);
            usleep(1000);
        }
    }
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1); /* the child is mid-write */
    close(ready[0]);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void test_kill_leaves_nothing(void **state) {
    (void)state;
    const char *dir = tmp_path("kill");
    mkdir_fresh(dir);
    char path[256];
    snprintf(path, sizeof path, "%s/big.qvoice", dir);
    kill_mid_write(path);
    printf("after a kill mid-write of a new file: [%s]\n", listing(dir));
    assert_string_equal(listing(dir), "");

    /* an old file stays as it was, and nothing is left beside it */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("old", f);
    fclose(f);
    kill_mid_write(path);
    assert_string_equal(listing(dir), "big.qvoice");
    size_t n;
    char *b = qvu_read_file(path, 100, &n, err, sizeof err);
    assert_non_null(b);
    assert_string_equal(b, "old");
    free(b);
}

static void test_overwrite_on_commit_only(void **state) {
    (void)state;
    const char *dir = tmp_path("over");
    mkdir_fresh(dir);
    char path[256];
    snprintf(path, sizeof path, "%s/v.wav", dir);
    qvu_wfile *w;
    /* new file: appears only on commit, with umask-respecting permissions */
    mode_t um = umask(022);
    assert_int_equal(qvu_wfile_open(&w, path, err, sizeof err), 0);
    write_all(qvu_wfile_fd(w), "first", 5);
    assert_string_equal(listing(dir), "");
    assert_int_equal(qvu_wfile_commit(w, err, sizeof err), 0);
    umask(um);
    struct stat a, b;
    assert_int_equal(stat(path, &a), 0);
    assert_int_equal(a.st_mode & 0777, 0644);
    /* overwrite: the old file is untouched (same inode, same bytes) until commit */
    assert_int_equal(qvu_wfile_open(&w, path, err, sizeof err), 0);
    FILE *f = qvu_wfile_stream(w);
    assert_non_null(f);
    fputs("second version", f);
    fflush(f);
    size_t n;
    char *r = qvu_read_file(path, 100, &n, err, sizeof err);
    assert_string_equal(r, "first");
    free(r);
    assert_int_equal(stat(path, &b), 0);
    assert_int_equal(a.st_ino, b.st_ino);
    assert_int_equal(qvu_wfile_commit(w, err, sizeof err), 0);
    r = qvu_read_file(path, 100, &n, err, sizeof err);
    assert_string_equal(r, "second version");
    assert_int_equal(n, 14);
    free(r);
    assert_string_equal(listing(dir), "v.wav");
    /* abort: old file kept, nothing beside it */
    assert_int_equal(qvu_wfile_open(&w, path, err, sizeof err), 0);
    write_all(qvu_wfile_fd(w), "third", 5);
    qvu_wfile_abort(w);
    r = qvu_read_file(path, 100, &n, err, sizeof err);
    assert_string_equal(r, "second version");
    free(r);
    assert_string_equal(listing(dir), "v.wav");
    /* a directory that does not exist: one line naming the path */
    snprintf(path, sizeof path, "%s/missing/v.wav", dir);
    assert_int_equal(qvu_wfile_open(&w, path, err, sizeof err), -1);
    printf("%s\n", err);
    assert_non_null(strstr(err, path));
}

/* Temp files of a writer that died on the fallback path are removed by the next write to that
 * path; those of a live process and of other destinations are kept. */
static void test_stale_temp_removed(void **state) {
    (void)state;
    const char *dir = tmp_path("stale");
    mkdir_fresh(dir);
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0) _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    char p[512];
    const char *names[3] = {".v.wav.tmp.%ld.0", ".v.wav.tmp.%ld.3", ".other.wav.tmp.%ld.0"};
    long pids[3] = {(long)dead, (long)getpid(), (long)dead};
    for (int i = 0; i < 3; i++) {
        char name[128];
        snprintf(name, sizeof name, names[i], pids[i]);
        snprintf(p, sizeof p, "%s/%s", dir, name);
        tmp_write(p, "x", 1);
    }
    snprintf(p, sizeof p, "%s/v.wav", dir);
    tmp_write(p, "old", 3); /* an overwrite also cleans up on the O_TMPFILE path */
    qvu_wfile *w;
    assert_int_equal(qvu_wfile_open(&w, p, err, sizeof err), 0);
    write_all(qvu_wfile_fd(w), "new", 3);
    assert_int_equal(qvu_wfile_commit(w, err, sizeof err), 0);
    char dead_name[128], live[128], other[128];
    snprintf(dead_name, sizeof dead_name, names[0], pids[0]);
    snprintf(live, sizeof live, names[1], pids[1]);
    snprintf(other, sizeof other, names[2], pids[2]);
    const char *got = listing(dir);
    printf("after the write: [%s]\n", got);
    assert_null(strstr(got, dead_name));
    assert_non_null(strstr(got, live));
    assert_non_null(strstr(got, other));
    int n_tmp = 0;
    for (const char *q = got; (q = strstr(q, ".v.wav.tmp.")); q++) n_tmp++;
    assert_int_equal(n_tmp, 1); /* the live one: the write itself left none */
    size_t n;
    char *r = qvu_read_file(p, 10, &n, err, sizeof err);
    assert_string_equal(r, "new");
    free(r);
}

static void test_read_file(void **state) {
    (void)state;
    const char *p = tmp_path("r.txt");
    tmp_write(p, "hello\nworld", 11);
    size_t n = 0;
    char *b = qvu_read_file(p, 11, &n, err, sizeof err);
    assert_non_null(b);
    assert_int_equal(n, 11);
    assert_int_equal(b[11], 0);
    assert_memory_equal(b, "hello\nworld", 11);
    free(b);
    /* one byte over the limit */
    assert_null(qvu_read_file(p, 10, &n, err, sizeof err));
    assert_int_equal(errno, EFBIG);
    printf("%s\n", err);
    assert_non_null(strstr(err, "r.txt: file too large"));
    /* missing file: ENOENT, so callers can treat an optional file as absent */
    assert_null(qvu_read_file(tmp_path("none"), 10, &n, err, sizeof err));
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err, "none: cannot open"));
    /* a directory is a read error, not a crash */
    assert_null(qvu_read_file(tmp_dir, 10, &n, err, sizeof err));
    assert_non_null(strstr(err, "read error"));
    /* a pipe larger than the first buffer (the size is not known in advance) */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        static char big[200000];
        for (size_t i = 0; i < sizeof big; i++) big[i] = (char)('a' + i % 26);
        _exit(write(fds[1], big, sizeof big) == (ssize_t)sizeof big ? 0 : 1);
    }
    close(fds[1]);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
    b = qvu_read_file(path, 1 << 20, &n, err, sizeof err);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    assert_non_null(b);
    assert_int_equal(n, 200000);
    assert_int_equal(b[199999], 'a' + 199999 % 26);
    free(b);
}

/* Runs this binary as a writer of path with /proc hidden (a private mount namespace), so the
 * writer takes its fallback path. Returns the child's pid (it keeps that pid through exec). */
static pid_t spawn_hidden_proc(const char *mode, const char *path) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mount -t tmpfs none /proc && exec %s %s %s", self, mode, path);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execlp("unshare", "unshare", "-m", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void test_fallback_path(void **state) {
    (void)state;
    if (sh("unshare -m sh -c 'mount -t tmpfs none /proc' 2>/dev/null")) {
        printf("  cannot hide /proc here (unshare needs privileges): skipped\n");
        skip();
    }
    const char *dir = tmp_path("fallback");
    mkdir_fresh(dir);
    char path[256], tmp_name[64];
    snprintf(path, sizeof path, "%s/v.wav", dir);
    pid_t pid = spawn_hidden_proc("--write-slowly", path);
    snprintf(tmp_name, sizeof tmp_name, ".v.wav.tmp.%ld.", (long)pid);
    /* wait (bounded) until the named temp file holds the first MiB */
    int seen = 0;
    for (int i = 0; i < 2000 && !seen; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s0", dir, tmp_name);
        struct stat st;
        seen = stat(p, &st) == 0 && st.st_size >= (1 << 20);
        if (!seen) usleep(5000);
    }
    assert_int_equal(kill(pid, SIGKILL), 0);
    waitpid(pid, NULL, 0);
    assert_true(seen);
    printf("  fallback writer killed: [%s]\n", listing(dir));
    assert_non_null(strstr(listing(dir), tmp_name)); /* a named temp file cannot vanish by itself */
    /* the next write to that path (fallback again) removes it */
    pid = spawn_hidden_proc("--write", path);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("  after the next write: [%s]\n", listing(dir));
    assert_string_equal(listing(dir), "v.wav");
    size_t n;
    char *b = qvu_read_file(path, 100, &n, err, sizeof err);
    assert_non_null(b);
    assert_string_equal(b, "done");
    free(b);
}

static void test_sha256(void **state) {
    (void)state;
    uint8_t d[32], s[32];
    char hex[65];
    assert_int_equal(qvu_sha256("abc", 3, d), 0);
    assert_string_equal(qvu_hex(d, 32, hex),
                        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_int_equal(qvu_sha256(NULL, 0, d), 0);
    assert_string_equal(qvu_hex(d, 32, hex),
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    qvu_sha256_ctx *c = qvu_sha256_begin();
    for (size_t i = 0; i < strlen(m); i += 5) /* pieces of 5 and an empty add */
        assert_int_equal(qvu_sha256_add(c, m + i, strlen(m) - i < 5 ? strlen(m) - i : 5), 0);
    assert_int_equal(qvu_sha256_add(c, NULL, 0), 0);
    assert_int_equal(qvu_sha256_end(c, s), 0);
    assert_int_equal(qvu_sha256(m, strlen(m), d), 0);
    assert_memory_equal(s, d, 32);
    assert_string_equal(qvu_hex(s, 32, hex),
                        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    assert_int_equal(qvu_sha256_add(NULL, "x", 1), -1);
    assert_int_equal(qvu_sha256_end(NULL, s), -1);
}

/* qvu_wfile_stream_large: 5 MiB + 3 in pieces of odd sizes (through the 2 MB buffer and past
 * it), read back the same; asked for after the plain stream was made, it refuses. */
static void test_large_stream(void **state) {
    (void)state;
    const size_t n = (5 << 20) + 3;
    unsigned char *data = malloc(n);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)(i * 2654435761u >> 13);
    const char *path = tmp_path("large.bin");
    qvu_wfile *w;
    assert_int_equal(qvu_wfile_open(&w, path, err, sizeof err), 0);
    FILE *f = qvu_wfile_stream_large(w);
    assert_non_null(f);
    assert_ptr_equal(qvu_wfile_stream_large(w), f); /* same stream on a second call */
    static const size_t piece[] = {4160, 1, 3 << 20, 77, 65536};
    for (size_t at = 0, k = 0; at < n; k++) {
        size_t m = piece[k % 5] < n - at ? piece[k % 5] : n - at;
        assert_int_equal(fwrite(data + at, 1, m, f), m);
        at += m;
    }
    assert_int_equal(qvu_wfile_commit(w, err, sizeof err), 0);
    size_t got;
    char *b = qvu_read_file(path, n + 1, &got, err, sizeof err);
    assert_non_null(b);
    assert_int_equal(got, n);
    assert_memory_equal(b, data, n);
    free(b);
    free(data);
    assert_int_equal(qvu_wfile_open(&w, path, err, sizeof err), 0);
    assert_non_null(qvu_wfile_stream(w));
    assert_null(qvu_wfile_stream_large(w)); /* its buffer must come before any I/O */
    qvu_wfile_abort(w);
}

/* The writers test_fallback_path runs: --write commits "done", --write-slowly never ends. */
static int writer_main(const char *mode, const char *path) {
    static char block[1 << 16];
    qvu_wfile *w;
    if (qvu_wfile_open(&w, path, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    if (!strcmp(mode, "--write")) {
        write_all(qvu_wfile_fd(w), "done", 4);
        return qvu_wfile_commit(w, err, sizeof err) ? (fprintf(stderr, "%s\n", err), 1) : 0;
    }
    memset(block, 's', sizeof block);
    for (int i = 0;; i++) {
        if (write(qvu_wfile_fd(w), block, sizeof block) != (ssize_t)sizeof block) return 1;
        if (i >= 16) usleep(1000);
    }
}

int main(int argc, char **argv) {
    self = argv[0];
    /* _exit: no exit handlers, whose LeakSanitizer (make asan) cannot work without /proc */
    if (argc == 3) _exit(writer_main(argv[1], argv[2]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_leaves_nothing),
        cmocka_unit_test(test_overwrite_on_commit_only),
        cmocka_unit_test(test_stale_temp_removed),
        cmocka_unit_test(test_fallback_path),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_large_stream),
    };
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
