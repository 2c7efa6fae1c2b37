/* bench_ttfa.c — time to first audio as a user sees it: from starting a command to the first
 * byte on its stdout (raw PCM of speak --stream, or another engine's equivalent), median of RUNS
 * runs after one unmeasured warm-up run (page cache). Its stderr goes to /dev/null; the rest of
 * stdout is read and dropped. Beside it the CPU the command had used by then (all its threads,
 * /proc/PID/stat, 10 ms ticks): on a loaded machine wall time swings, the work done does not.
 *
 *     bench_ttfa RUNS COMMAND [ARGS...]
 *     -> "ttfa 0.412 s (min 0.398, max 0.455), total 3.21 s, 307200 bytes: median of 3;
 *         CPU to the first byte 0.52 s"
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/bench/helpers/measure.h"

/* CPU seconds (user + system, every thread so far) of process pid; -1 if unreadable. */
static double cpu_of(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* One run: *first = seconds to the first stdout byte (-1 if none), *cpu = the command's CPU
 * seconds then, *total = to exit. */
static int run(char **cmd, double *first, double *cpu, double *total, long *bytes) {
    int fd[2];
    if (pipe(fd)) return -1;
    const double t0 = bench_clock_s(CLOCK_MONOTONIC);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int dn = open("/dev/null", O_WRONLY);
        dup2(fd[1], 1);
        if (dn >= 0) dup2(dn, 2);
        close(fd[0]);
        close(fd[1]);
        execvp(cmd[0], cmd);
        _exit(127);
    }
    close(fd[1]);
    char buf[65536];
    ssize_t n;
    *first = -1;
    *bytes = 0;
    while ((n = read(fd[0], buf, sizeof buf)) > 0) {
        if (*first < 0) *first = bench_clock_s(CLOCK_MONOTONIC) - t0, *cpu = cpu_of(pid);
        *bytes += n;
    }
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    *total = bench_clock_s(CLOCK_MONOTONIC) - t0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int runs = argc > 2 ? atoi(argv[1]) : 0;
    if (runs < 1 || runs > 100) {
        fprintf(stderr, "usage: bench_ttfa RUNS COMMAND [ARGS...]\n");
        return 2;
    }
    double f[100], c[100], t[100], ff, cc, tt;
    long bytes = 0;
    if (run(argv + 2, &ff, &cc, &tt, &bytes) || ff < 0) { /* warm-up */
        fprintf(stderr, "bench_ttfa: %s failed or printed nothing\n", argv[2]);
        return 1;
    }
    for (int i = 0; i < runs; i++)
        if (run(argv + 2, &f[i], &c[i], &t[i], &bytes) || f[i] < 0) {
            fprintf(stderr, "bench_ttfa: %s failed or printed nothing\n", argv[2]);
            return 1;
        }
    qsort(f, (size_t)runs, sizeof *f, cmp);
    qsort(c, (size_t)runs, sizeof *c, cmp);
    qsort(t, (size_t)runs, sizeof *t, cmp);
    printf("ttfa %.3f s (min %.3f, max %.3f), total %.2f s, %ld bytes: median of %d; CPU to the "
           "first byte %.2f s\n",
           f[runs / 2], f[0], f[runs - 1], t[runs / 2], bytes, runs, c[runs / 2]);
    return 0;
}
