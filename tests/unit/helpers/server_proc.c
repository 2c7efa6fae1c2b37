/* server_proc.c — see server_proc.h. */
#include "tests/unit/helpers/server_proc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/helpers/tmpdir.h"
#include "util/slowdown.h"

void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

void slurp(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
}

int server_start(server *sv, const char *name, const char *args) {
    char cmd[4096];
    if (sv->pid > 0) server_stop(sv); /* one left running by a failed test */
    snprintf(sv->log, sizeof sv->log, "%s/%s.log", tmp_dir, name);
    /* stdout to /dev/null: a server must never hold the test runner's pipe open */
    snprintf(cmd, sizeof cmd, "exec bin/qvoice-server %s --listen 127.0.0.1:0 >/dev/null 2>%s", args,
             sv->log);
    unlink(sv->log);
    sv->pid = fork();
    if (sv->pid == 0) { /* the shell execs the server: sv->pid is the server's */
        setenv("LSAN_OPTIONS", "suppressions=tests/server/lsan.supp", 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 600 * QVU_SLOWDOWN; i++) { /* 60 s: model load on a busy machine */
        char text[4096];
        slurp(sv->log, text, sizeof text);
        const char *p = strstr(text, "listening on ");
        if (p && strchr(p, '\n')) {
            sv->port = atoi(strchr(p + 13, ':') + 1);
            sleep_ms(100); /* the probe line follows at once */
            slurp(sv->log, text, sizeof text);
            p = strstr(text, "probes on ");
            sv->probe = p ? atoi(strchr(p + 10, ':') + 1) : 0;
            return sv->port > 0 ? 0 : -1;
        }
        if (waitpid(sv->pid, NULL, WNOHANG) == sv->pid) return -1;
        sleep_ms(100);
    }
    return -1;
}

int server_wait(server *sv) {
    if (sv->pid <= 0) return -1;
    int st = 0;
    for (int i = 0; i < 300 * QVU_SLOWDOWN; i++) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) {
            sv->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        sleep_ms(100);
    }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, &st, 0);
    sv->pid = 0;
    return -1;
}

int server_stop(server *sv) {
    if (sv->pid <= 0) return -1;
    kill(sv->pid, SIGTERM);
    return server_wait(sv);
}
