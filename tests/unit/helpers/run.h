/* run.h — the one main() of a cmocka test file: QVT_MAIN(setup, teardown, test_a, test_b, ...)
 * runs the listed tests in order as one group (setup/teardown: group fixtures or NULL), with each
 * test named by its function as cmocka_unit_test would, with $SOURCE_DATE_EPOCH set (when unset)
 * so that outputs are reproducible. Include after <cmocka.h>.
 */
#ifndef QV_TEST_RUN_H
#define QV_TEST_RUN_H

#include <stddef.h>

typedef void (*qvt_test_fn)(void **state);
typedef int (*qvt_fixture_fn)(void **state);

/* Runs fns[0..n) named by names (the stringised list "a, b, c"); cmocka's exit status. */
int qvt_run(const qvt_test_fn *fns, size_t n, const char *names, qvt_fixture_fn setup,
            qvt_fixture_fn teardown);

/* Skips the running test in an AddressSanitizer build (make asan): for the tests that install the
 * library or load it into plain programs (make install, pip, Python), which an ASan build cannot. */
#if defined(__SANITIZE_ADDRESS__)
#define QVT_SKIP_IF_SANITIZED() skip()
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QVT_SKIP_IF_SANITIZED() skip()
#endif
#endif
#ifndef QVT_SKIP_IF_SANITIZED
#define QVT_SKIP_IF_SANITIZED() ((void)0)
#endif

#define QVT_MAIN(setup, teardown, ...)                                                      \
    int main(void) {                                                                        \
        static const qvt_test_fn fns[] = {__VA_ARGS__};                                     \
        return qvt_run(fns, sizeof fns / sizeof *fns, #__VA_ARGS__, setup, teardown);       \
    }

#endif
