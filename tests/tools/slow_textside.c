/* slow_textside.c — an LD_PRELOAD shim for test_server's text-side race: unlink() of a shared text
 * side (a path with "/.textside/" ending in ".qvoice-part") first creates $QV_SLOW_TEXTSIDE_MARK,
 * then sleeps $QV_SLOW_TEXTSIDE_MS, then unlinks. The window between a server's decision to remove
 * a text side and the removal, microseconds in production, becomes one the test can aim into,
 * without a line of the server changed. Built without sanitizers (it runs in front of them).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int unlink(const char *path) {
    static int (*real_unlink)(const char *);
    if (!real_unlink) *(void **)&real_unlink = dlsym(RTLD_NEXT, "unlink");
    static const char suffix[] = ".qvoice-part";
    size_t n = strlen(path);
    const char *mark = getenv("QV_SLOW_TEXTSIDE_MARK"), *ms = getenv("QV_SLOW_TEXTSIDE_MS");
    if (strstr(path, "/.textside/") && n >= sizeof suffix - 1 &&
        !strcmp(path + n - (sizeof suffix - 1), suffix)) {
        if (mark) {
            int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd >= 0) close(fd);
        }
        long t = ms ? atol(ms) : 0;
        struct timespec d = {t / 1000, (t % 1000) * 1000000};
        nanosleep(&d, NULL);
    }
    return real_unlink(path);
}
