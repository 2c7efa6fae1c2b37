/* test_layers.c — scripts/check-layers.sh (make check-layers) on small trees copied beside the
 * real docs/architecture.md: an include against the layers table, an include that does not name
 * its folder and a tool including an internal header each fail naming the file; so do two files
 * of a folder that include or call each other in a circle, and a call into a folder the table
 * does not allow; a clean tree passes, and so does the repository itself.
 * scripts/check-functions.sh fails naming a library, server or tool function over 100 lines, and
 * passes one of exactly 100 (and the same length outside the folders it covers).
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

/* Two kernels/ files that include each other: a circle, named. */
static void test_include_cycle_fails(void **state) {
    (void)state;
    const char *root = tmp_path("cyc");
    assert_int_equal(run_on("cyc", "kernels/a.h", "#include \"kernels/b.h\""), 0);
    assert_int_equal(sh("printf '#include \"kernels/a.h\"\\n' > %s/kernels/b.h", root), 0);
    assert_int_equal(sh("B=%s/build %s/scripts/check-layers.sh > %s 2>&1", root, root,
                        tmp_path("out")), 1);
    sh("sed 's/^/    /' %s", tmp_path("out"));
    assert_true(file_has(tmp_path("out"), "include each other in a circle"));
    assert_true(file_has(tmp_path("out"), "kernels/a"));
}

/* Objects: kernels/a.o and kernels/b.o calling each other, then kernels/c.o calling engine/. */
/* Compiles root/src (written from code) to root/build/obj. */
static int object(const char *root, const char *src, const char *obj, const char *code) {
    return sh("cd %s && printf '%%s\\n' '%s' > %s && cc -c %s -o build/%s", root, code, src, src, obj);
}

static void test_call_rules_fail(void **state) {
    (void)state;
    const char *root = tmp_path("calls"), *out = tmp_path("out");
    assert_int_equal(run_on("calls", NULL, NULL), 0);
    assert_int_equal(sh("mkdir -p %s/build/kernels %s/build/engine %s/engine", root, root, root), 0);
    assert_int_equal(object(root, "kernels/a.c", "kernels/a.o",
                            "void qvk_b(void); void qvk_a(void) { qvk_b(); }"), 0);
    assert_int_equal(object(root, "kernels/b.c", "kernels/b.o",
                            "void qvk_a(void); void qvk_b(void) { qvk_a(); }"), 0);
    assert_int_equal(sh("B=%s/build %s/scripts/check-layers.sh > %s 2>&1", root, root, out), 1);
    sh("sed 's/^/    /' %s", out);
    assert_true(file_has(out, "call each other in a circle"));
    assert_int_equal(object(root, "kernels/b.c", "kernels/b.o",
                            "void qve_up(void); void qvk_b(void) { qve_up(); }"), 0);
    assert_int_equal(object(root, "engine/up.c", "engine/up.o", "void qve_up(void) {}"), 0);
    assert_int_equal(sh("B=%s/build %s/scripts/check-layers.sh > %s 2>&1", root, root, out), 1);
    sh("sed 's/^/    /' %s", out);
    assert_true(file_has(out, "kernels/b.o calls qve_up, defined in engine/"));
    /* engine/up.c deleted, its object left behind in the build dir: that stale object is not read */
    assert_int_equal(sh("rm %s/engine/up.c", root), 0);
    assert_int_equal(sh("B=%s/build %s/scripts/check-layers.sh > %s 2>&1", root, root, out), 0);
}

/* dir/long.c holding one function of n lines, signature to closing brace; tests/ too. */
static int long_function(const char *name, const char *dir, int n) {
    const char *root = tmp_path(name);
    if (sh("mkdir -p %s/scripts %s/%s %s/tests && cp scripts/check-functions.sh %s/scripts/ && "
           "{ echo 'static int f(int x) {'; i=2; while [ $i -lt %d ]; do echo '    x++;'; "
           "i=$((i+1)); done; echo '}'; } > %s/%s/long.c && "
           "cp %s/%s/long.c %s/tests/ok.c",
           root, root, dir, root, root, n, root, dir, root, dir, root))
        fail_msg("cannot set up %s", root);
    int rc = sh("%s/scripts/check-functions.sh > %s 2>&1", root, tmp_path("out"));
    sh("sed 's/^/    /' %s", tmp_path("out"));
    return rc;
}

static void test_long_function_fails(void **state) {
    (void)state;
    assert_int_equal(long_function("fn100", "engine", 100), 0);
    assert_true(file_has(tmp_path("out"), "check-functions: ok"));
    assert_int_equal(long_function("fn101", "engine", 101), 1);
    assert_true(file_has(tmp_path("out"), "engine/long.c:1: f is 101 lines"));
    /* the server is an application, outside the library, and held to the same length */
    assert_int_equal(long_function("srv101", "server", 101), 1);
    assert_true(file_has(tmp_path("out"), "server/long.c:1: f is 101 lines"));
}

/* The repository itself passes both (the build's objects, when they are there, included). */
static void test_repository(void **state) {
    (void)state;
    const char *out = tmp_path("repo.out");
    int rc = sh("scripts/check-layers.sh > %s 2>&1", out);
    sh("sed 's/^/    /' %s", out);
    assert_int_equal(rc, 0);
    rc = sh("scripts/check-functions.sh > %s 2>&1", out);
    sh("sed 's/^/    /' %s", out);
    assert_int_equal(rc, 0);
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_clean_tree_passes, test_bad_includes_fail,
         test_include_cycle_fails, test_call_rules_fail, test_long_function_fails, test_repository)
