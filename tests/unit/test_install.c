/* test_install.c — make install into a temporary prefix, then use it the way a packager or a user
 * would: the shared library has its soname and exports exactly the public headers' functions
 * (scripts/exports.sh), examples/model_info.c builds with nothing but `pkg-config --cflags --libs
 * qvoice` and runs against libqvoice.so (LD_LIBRARY_PATH) and, with `pkg-config --static` and the
 * shared library removed, against libqvoice.a; DESTDIR stages, make uninstall removes everything.
 * Runs with cwd = repo root; skipped in sanitizer builds (an ASan .so cannot load into a plain
 * program).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

/* make from inside make test: the outer make's jobserver and flags must not leak in. */
#define MAKE "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -s"

static char prefix[128], cache[1024];

static int group_setup(void **st) {
    if (tmpdir_setup(st)) return -1;
    snprintf(prefix, sizeof prefix, "%s", tmp_path("prefix"));
    snprintf(cache, sizeof cache, "%s", test_cache_dir());
    return 0;
}

static void test_install_layout(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    assert_int_equal(sh(MAKE " install PREFIX=%s >%s 2>&1", prefix, tmp_path("install.log")), 0);
    const char *files[] = {"bin/speak", "bin/clone", "bin/voicefmt", "lib/libqvoice.a",
                           "lib/libqvoice.so.0.1.0", "lib/libqvoice.so.0", "lib/libqvoice.so",
                           "include/qvoice.h", "include/qvf.h", "lib/pkgconfig/qvoice.pc",
                           "share/man/man1/speak.1", "share/man/man1/clone.1",
                           "share/man/man1/voicefmt.1"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", prefix, files[i]);
        if (access(p, R_OK)) fail_msg("make install did not install %s", files[i]);
    }
    assert_int_equal(sh("readelf -d %s/lib/libqvoice.so.0.1.0 | grep -q 'SONAME.*\\[libqvoice.so.0\\]'",
                        prefix), 0);
    assert_int_equal(sh("test \"$(readlink %s/lib/libqvoice.so)\" = libqvoice.so.0", prefix), 0);
    /* the man page was made from --help: it documents an option speak has */
    assert_true(file_has(tmp_path("prefix/share/man/man1/speak.1"), "\\-\\-seed"));
}

/* Defined dynamic symbols = the version script's list of public functions, minus any not yet
 * implemented; and no internal prefix leaks. */
static void test_exports(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    assert_int_equal(sh("scripts/exports.sh include/qvoice.h voicefmt/qvf.h | sed -n 's/^ *\\(qv.*\\);$/\\1/p' "
                        "> %s", tmp_path("public.txt")), 0);
    assert_int_equal(sh("nm -D --defined-only %s/lib/libqvoice.so | awk '$2 ~ /^[TDBRW]$/ {print $3}' "
                        "| sed 's/@.*//' | sort -u > %s", prefix, tmp_path("exported.txt")), 0);
    /* exported but not public: must be empty */
    assert_int_equal(sh("! grep -vxF -f %s %s", tmp_path("public.txt"), tmp_path("exported.txt")), 0);
    assert_int_equal(sh("grep -qx qv_model_load %s && grep -qx qvf_read_file %s",
                        tmp_path("exported.txt"), tmp_path("exported.txt")), 0);
    assert_int_equal(sh("! grep -q '^qv[ecku]_\\|^qvf_fail$' %s", tmp_path("exported.txt")), 0);
}

static void test_pkgconfig_shared(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    const char *ex = tmp_path("model_info");
    assert_int_equal(sh("PKG_CONFIG_PATH=%s/lib/pkgconfig; export PKG_CONFIG_PATH; "
                        "cc examples/model_info.c $(pkg-config --cflags --libs qvoice) -o %s",
                        prefix, ex), 0);
    /* the binary needs the installed libqvoice.so.0 */
    assert_int_equal(sh("LD_LIBRARY_PATH=%s/lib ldd %s | grep -q '%s/lib/libqvoice.so.0'", prefix,
                        ex, prefix), 0);
    assert_int_equal(sh("LD_LIBRARY_PATH=%s/lib %s %s/tiny-cv > %s", prefix, ex, cache,
                        tmp_path("shared.out")), 0);
    assert_true(file_has(tmp_path("shared.out"), "qvoice 0.1.0, qvf 0.1.0"));
    assert_true(file_has(tmp_path("shared.out"), "custom_voice"));
    assert_true(file_has(tmp_path("shared.out"), "speaker "));
    /* an error comes back as a status and one line, not a crash */
    assert_int_equal(sh("LD_LIBRARY_PATH=%s/lib %s %s 2>/dev/null >&2", prefix, ex, tmp_dir), 1);
}

static void test_pkgconfig_static(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    const char *ex = tmp_path("model_info_static");
    assert_int_equal(sh("rm -f %s/lib/libqvoice.so*", prefix), 0);
    assert_int_equal(sh("PKG_CONFIG_PATH=%s/lib/pkgconfig; export PKG_CONFIG_PATH; "
                        "cc examples/model_info.c $(pkg-config --static --cflags --libs qvoice) -o %s",
                        prefix, ex), 0);
    assert_int_equal(sh("! ldd %s | grep -q libqvoice", ex), 0);
    assert_int_equal(sh("%s %s/tiny-cv > %s", ex, cache, tmp_path("static.out")), 0);
    assert_true(file_has(tmp_path("static.out"), "custom_voice"));
}

static void test_destdir_uninstall(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    const char *stage = tmp_path("stage");
    assert_int_equal(sh(MAKE " install DESTDIR=%s PREFIX=/opt/qv >/dev/null 2>&1", stage), 0);
    assert_true(file_has(tmp_path("stage/opt/qv/lib/pkgconfig/qvoice.pc"), "prefix=/opt/qv\n"));
    assert_int_equal(sh(MAKE " uninstall DESTDIR=%s PREFIX=/opt/qv >/dev/null", stage), 0);
    assert_int_equal(sh("test -z \"$(find %s ! -type d)\"", stage), 0);
    /* the first prefix too (its shared library was removed by the static test) */
    assert_int_equal(sh(MAKE " uninstall PREFIX=%s >/dev/null", prefix), 0);
    assert_int_equal(sh("test -z \"$(find %s ! -type d)\"", prefix), 0);
}

QVT_MAIN(group_setup, tmpdir_teardown, test_install_layout, test_exports, test_pkgconfig_shared,
         test_pkgconfig_static, test_destdir_uninstall)
