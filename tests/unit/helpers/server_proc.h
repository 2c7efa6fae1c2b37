/* server_proc.h — bin/qvoice-server as a child process for the tests that talk to it over HTTP
 * (test_server, test_studio): started on 127.0.0.1 with a free port it picks (--listen
 * 127.0.0.1:0, read from its log in tmp_dir), stopped with SIGTERM, then SIGKILL.
 */
#ifndef QV_TEST_SERVER_PROC_H
#define QV_TEST_SERVER_PROC_H
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port, probe; /* probe: --probe-listen's port, 0 without */
    char log[512];   /* its stderr: tmp_dir/NAME.log */
} server;

/* Starts bin/qvoice-server with args (a running sv is stopped first); fills sv. 0, or -1 when it
 * did not start listening within 60 s (times QVU_SLOWDOWN, util/slowdown.h). */
int server_start(server *sv, const char *name, const char *args);
/* SIGTERM, then waits up to 30 s times QVU_SLOWDOWN (then SIGKILL); the exit status, or -1 when killed or not
 * running. */
int server_stop(server *sv);
/* Waits as server_stop does, without a signal: for a server already sent its SIGTERM (a second
 * one, while it exits, can reach a thread that does not block it, such as ThreadSanitizer's,
 * and kill it). */
int server_wait(server *sv);
/* The file's first size - 1 bytes, NUL-terminated ("" when it cannot be read). */
void slurp(const char *path, char *buf, size_t size);
void sleep_ms(int ms);
#endif
