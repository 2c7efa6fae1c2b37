/* slowdown.h — QVU_SLOWDOWN: how many times slower this build runs than a plain one (1, or the
 * sanitizer's factor: make tsan, make asan). Waits for real work (a server's drain, a test's wait
 * for a reply or for a server to stop) are multiplied by it, so a sanitizer build runs the same
 * checks instead of running out of time. ThreadSanitizer: a drained stream of the tiny model took
 * ~8x its plain time here; 10 leaves a margin. Set QVU_SLOWDOWN=N at build time to override.
 */
#ifndef QVU_SLOWDOWN_H
#define QVU_SLOWDOWN_H

#ifndef QVU_SLOWDOWN
#if defined(__SANITIZE_THREAD__)
#define QVU_SLOWDOWN 10
#elif defined(__SANITIZE_ADDRESS__)
#define QVU_SLOWDOWN 3
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QVU_SLOWDOWN 10
#elif __has_feature(address_sanitizer)
#define QVU_SLOWDOWN 3
#endif
#endif
#endif
#ifndef QVU_SLOWDOWN
#define QVU_SLOWDOWN 1
#endif

#endif
