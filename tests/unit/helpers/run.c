/* run.c — QVT_MAIN's runner: turns the stringised list of test functions back into names and
 * hands cmocka the same table cmocka_unit_test would have built.
 */
#include "tests/unit/helpers/run.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

int qvt_run(const qvt_test_fn *fns, size_t n, const char *names, qvt_fixture_fn setup,
            qvt_fixture_fn teardown) {
    struct CMUnitTest *t = calloc(n, sizeof *t);
    char *list = strdup(names), *save = NULL;
    if (!t || !list) {
        fprintf(stderr, "qvt_run: out of memory\n");
        return 1;
    }
    char *name = strtok_r(list, ", \t\n", &save);
    for (size_t i = 0; i < n; i++, name = strtok_r(NULL, ", \t\n", &save)) {
        t[i].name = name ? name : "?";
        t[i].test_func = fns[i];
    }
    /* outputs name their creation time (docs/provenance.md): fixed, so that two runs' files
     * compare byte for byte across a second's turn */
    setenv("SOURCE_DATE_EPOCH", "1700000000", 0);
    /* QVT_FILTER="test_a*": only the matching tests (the group fixtures still run), for a
     * subset run under a sanitizer (make tsan) or by hand */
    if (getenv("QVT_FILTER")) cmocka_set_test_filter(getenv("QVT_FILTER"));
    int rc = _cmocka_run_group_tests("tests", t, n, setup, teardown);
    free(list);
    free(t);
    return rc;
}
