/* slowdown.h — QVU_SLOWDOWN: how many times slower this build runs than a plain one (1, or the
 * sanitizer's factor: make tsan, make asan). Waits for real work (a server's drain, a test's wait
 * for a reply or for a server to stop) are multiplied by it, so a sanitizer build runs the same
 * checks instead of running out of time. Measured on 2 shared cores at a load of ~20: under
 * ThreadSanitizer test_server took 16 min (plain: under 5 min with three more tests) and each
 * of the drain test's streams 150-280 s, past the 60 s drain and the 30 s stop. -DQVU_SLOWDOWN=N
 * overrides the factor.
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
