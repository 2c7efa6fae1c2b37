/* test_docs.c — what a new user reads first: every target `make help` names exists in the
 * Makefile; no committed file names a path of the machine it was written on (its work, root
 * or home directories); LICENSE is the Apache-2.0 text; the README has the download commands (hf, ModelScope),
 * the build-only line and a "Source layout" naming every folder of docs/architecture.md's layers
 * table that exists; every pointer of the docs resolves (scripts/check-doc-pointers.sh), and that
 * check fails, naming file and line, on a tree with a broken link or anchor, a moved file named
 * in backticks, a missing brace alternative, a pointer outside the tree, or (in a git tree) a
 * source comment naming a missing docs/ document. Runs with cwd = repo root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

#define MAKE "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory"

static void test_make_help_targets_exist(void **st) {
    (void)st;
    /* targets named at the start of a help line, minus those the database lacks */
    int rc = sh(MAKE " help | sed -n 's/^make \\([a-z][a-z-]*\\).*/\\1/p' | sort -u > /tmp/qv_help_$$ "
                "&& " MAKE " -pRrq : 2>/dev/null | sed -n 's/^\\([a-z][a-z-]*\\):.*/\\1/p' "
                "| sort -u > /tmp/qv_targets_$$ "
                "&& test \"$(wc -l < /tmp/qv_help_$$)\" -ge 5 "
                "&& missing=$(comm -23 /tmp/qv_help_$$ /tmp/qv_targets_$$) "
                "; rm -f /tmp/qv_help_$$ /tmp/qv_targets_$$; "
                "[ -z \"$missing\" ] || { echo \"make help names missing targets: $missing\"; exit 1; }");
    assert_int_equal(rc, 0);
}

static void test_no_machine_paths(void **st) {
    (void)st;
    if (sh("git rev-parse --is-inside-work-tree >/dev/null 2>&1")) skip();
    /* this file names the patterns, so it is left out */
    assert_int_equal(sh("! git grep -n -I -E '/(work|root|home)/' -- . ':!tests/unit/test_docs.c'"),
                     0);
}

static void test_license(void **st) {
    (void)st;
    assert_true(file_has("LICENSE", "Apache License"));
    assert_true(file_has("LICENSE", "Version 2.0, January 2004"));
    assert_true(file_bytes("LICENSE") > 10000); /* the full text, not a pointer to it */
}

static void test_readme(void **st) {
    (void)st;
    assert_int_equal(sh("grep -q 'hf download Qwen/Qwen3-TTS-12Hz-' README.md"), 0);
    assert_int_equal(sh("grep -q 'modelscope download --model Qwen/Qwen3-TTS-12Hz-' README.md"), 0);
    assert_int_equal(sh("! grep -q 'huggingface-cli' README.md"), 0);
    assert_int_equal(sh("grep -q '^ *make deps && make' README.md"), 0);
    /* each folder of the layers table appears in the README's Source layout table */
    assert_int_equal(sh("sed -n '/^## Source layout/,/^## /p' README.md > /tmp/qv_layout_$$; "
                        "rc=0; for d in $(sed -n '/^<!-- layers -->/,/^<!-- \\/layers -->/p' "
                        "docs/architecture.md | sed -n 's/^| `\\([a-z]*\\)` |.*/\\1/p'); do "
                        "[ -d \"$d\" ] || continue; "
                        "grep -q \"^| \\`$d/\\`\" /tmp/qv_layout_$$ || { echo \"README: no $d/\"; rc=1; }; "
                        "done; rm -f /tmp/qv_layout_$$; exit $rc"),
                     0);
}

static void test_doc_pointers_resolve(void **st) {
    (void)st;
    assert_int_equal(sh("scripts/check-doc-pointers.sh"), 0);
}

/* A small tree (no git) whose docs/a.md holds the good pointers plus `bad`: 0 when bad is empty,
 * else the check must fail and name docs/a.md:4 and the pointer. */
static int pointers_on(const char *name, const char *bad) {
    const char *root = tmp_path(name), *out = tmp_path("ptr.out");
    if (sh("mkdir -p %s/docs %s/engine %s/build && printf 'x\\n' > %s/engine/synth.c && "
           "printf 'x\\n' > %s/engine/synth.h && printf '# R\\n' > %s/README.md && "
           "printf '%%s\\n' '# A' 'See [the readme](../README.md#r), [A](#a), `engine/synth.c` `qve_x`,' "
           "'`engine/synth.{h,c}`, `build/x.o`, `engine/<name>.c`, [web](https://x.org/a).' "
           "'%s' > %s/docs/a.md",
           root, root, root, root, root, root, bad, root))
        fail_msg("cannot set up %s", root);
    int rc = sh("scripts/check-doc-pointers.sh %s > %s 2>&1", root, out);
    sh("sed 's/^/    /' %s", out);
    if (bad[0] && !file_has(out, "docs/a.md:4:")) return -2;
    return rc;
}

static void test_doc_pointer_check_fails(void **st) {
    (void)st;
    assert_int_equal(pointers_on("good", ""), 0);
    assert_int_equal(pointers_on("link", "[gone](../docs/gone.md)"), 1);
    assert_true(file_has(tmp_path("ptr.out"), "gone.md"));
    assert_int_equal(pointers_on("moved", "`engine/vad.c` moved"), 1);
    assert_true(file_has(tmp_path("ptr.out"), "engine/vad.c"));
    assert_int_equal(pointers_on("brace", "`engine/synth.{c,py}`"), 1);
    assert_int_equal(pointers_on("bare", "`legacy-spec.md`"), 1);
    assert_int_equal(pointers_on("outside", "`../shared/docs/spec.md`"), 1);
    assert_int_equal(pointers_on("outlink", "[up](../../spec.md)"), 1);
    assert_int_equal(pointers_on("anchor", "[gone](../README.md#gone)"), 1);
    assert_true(file_has(tmp_path("ptr.out"), "no heading with that anchor"));
}

/* In a git tree the source files are read too: a comment naming a docs/ document that is not
 * there fails, naming the file and line. */
static void test_doc_pointer_check_reads_code(void **st) {
    (void)st;
    assert_int_equal(pointers_on("code", ""), 0);
    const char *root = tmp_path("code"), *out = tmp_path("ptr.out");
    if (sh("cd %s && git init -q . && printf '/* see docs/a.md */\\n' > engine/ok.c", root))
        fail_msg("cannot make %s a git tree", root);
    assert_int_equal(sh("scripts/check-doc-pointers.sh %s > %s 2>&1", root, out), 0);
    if (sh("printf 'x\\n/* as docs/gone.md says */\\n' > %s/engine/bad.c", root))
        fail_msg("cannot write %s/engine/bad.c", root);
    assert_int_equal(sh("scripts/check-doc-pointers.sh %s > %s 2>&1", root, out), 1);
    sh("sed 's/^/    /' %s", out);
    assert_true(file_has(out, "engine/bad.c:2: `docs/gone.md`"));
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_make_help_targets_exist, test_no_machine_paths,
         test_license, test_readme, test_doc_pointers_resolve, test_doc_pointer_check_fails,
         test_doc_pointer_check_reads_code)
