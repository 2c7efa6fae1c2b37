/* test_docs.c — what a new user reads first: every target `make help` names exists in the
 * Makefile; no committed file names a path of the machine it was written on (its work, root
 * or home directories); LICENSE is the Apache-2.0 text; the README has the download commands (hf, ModelScope),
 * the build-only line and a "Source layout" naming every folder of docs/architecture.md's layers
 * table that exists. Runs with cwd = repo root.
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

QVT_MAIN(NULL, NULL, test_make_help_targets_exist, test_no_machine_paths, test_license, test_readme)
