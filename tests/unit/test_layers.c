/* test_layers.c — scripts/check-layers.sh (make check-layers) on small trees copied beside the
 * real docs/architecture.md: an include against the layers table, an include that does not name
 * its folder and a tool including an internal header each fail naming the file; a clean tree
 * passes. On the repository itself, only tools not yet thinned may be reported.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

/* A tree with the real script and layers table plus one source file holding `line`. */
static int run_on(const char *name, const char *file, const char *line) {
    const char *root = tmp_path(name), *out = tmp_path("out");
    if (sh("mkdir -p %s/scripts %s/docs %s/kernels %s/tools %s/build && "
           "cp scripts/check-layers.sh %s/scripts/ && cp docs/architecture.md %s/docs/ && "
           "printf '#include \"kernels/kernels.h\"\\n#include \"util/fileio.h\"\\n' > "
           "%s/kernels/ok.c && printf '#include \"include/qvoice.h\"\\n' > %s/tools/ok.c",
           root, root, root, root, root, root, root, root, root))
        fail_msg("cannot set up %s", root);
    if (file && sh("printf '%%s\\n' '%s' > %s/%s", line, root, file)) fail_msg("cannot write %s", file);
    int rc = sh("B=%s/build %s/scripts/check-layers.sh > %s 2>&1", root, root, out);
    sh("sed 's/^/    /' %s", out);
    return rc;
}

static void test_clean_tree_passes(void **state) {
    (void)state;
    assert_int_equal(run_on("clean", NULL, NULL), 0);
    assert_true(file_has(tmp_path("out"), "check-layers: ok"));
}

static void test_bad_includes_fail(void **state) {
    (void)state;
    /* kernels may include util and include only */
    assert_int_equal(run_on("up", "kernels/bad.c", "#include \"engine/model.h\""), 1);
    assert_true(file_has(tmp_path("out"), "kernels/bad.c:1: kernels/ may not include \"engine/model.h\""));
    /* an include must name its folder */
    assert_int_equal(run_on("bare", "kernels/bare.c", "#include \"model.h\""), 1);
    assert_true(file_has(tmp_path("out"), "does not name its folder"));
    /* tools may include only the public headers */
    assert_int_equal(run_on("tool", "tools/bad.c", "#include \"checkpoint/config.h\""), 1);
    assert_true(file_has(tmp_path("out"), "tools/bad.c:1: tools/ may not include"));
}

/* The repository: every library folder is clean; a report may name only speak.c or clone.c,
 * which other branches are thinning (then this can become `make check-layers` in make test). */
static void test_repository(void **state) {
    (void)state;
    const char *out = tmp_path("repo.out");
    int rc = sh("B=%s scripts/check-layers.sh > %s 2>&1", tmp_dir, out);
    sh("sed 's/^/    /' %s", out);
    assert_int_equal(sh("grep 'may not include\\|does not name' %s | "
                        "grep -v '^check-layers: tools/\\(speak\\|clone\\)\\.c:' | grep -q .",
                        out),
                     1);
    assert_true(rc == 0 || rc == 1);
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_clean_tree_passes, test_bad_includes_fail,
         test_repository)
