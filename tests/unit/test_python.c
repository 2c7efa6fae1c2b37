/* test_python.c — the Python package (python/qvoice) as a user gets it: pip-installed offline
 * into a fresh venv with Debian's python3 (--no-build-isolation; --system-site-packages for
 * Debian's wheel and numpy), carrying its own copy of build/libqvoice.so; then
 * tests/python/test_tiny.py (tiny synthetic models; once with numpy, once with numpy blocked so
 * that the array('f') path runs), test_official.py (the official package's README examples as
 * written, the hub ids in a local Hugging Face cache) and test_full.py (the full-size synthetic
 * 0.6B) run on it with unittest. Runs with cwd = repo root; skipped in sanitizer builds (an ASan
 * library cannot load into python3). PYTHON overrides the interpreter.
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

#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

static char repo[1024], python[256], venv[128];

static int group_setup(void **st) {
    if (tmpdir_setup(st) || !getcwd(repo, sizeof repo)) return -1;
    const char *p = getenv("PYTHON");
    snprintf(python, sizeof python, "%s",
             p ? p : access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3");
    snprintf(venv, sizeof venv, "%s", tmp_path("venv"));
    return 0;
}

/* The backend needs neither wheel nor a wheel-building setuptools: a venv without the system's
 * packages (pip only, as a pyenv or python.org interpreter makes it) installs offline too. */
static void test_pip_install_without_wheel(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    const char *bare = tmp_path("bare"), *log = tmp_path("bare.log");
    assert_int_equal(sh("%s -m venv %s > %s 2>&1", python, bare, log), 0);
    assert_int_not_equal(sh("%s/bin/python -c 'import wheel' 2>/dev/null", bare), 0);
    int rc = sh("%s/bin/pip install --no-index --no-build-isolation . >> %s 2>&1", bare, log);
    if (rc) {
        sh("tail -20 %s", log);
        fail_msg("pip install without wheel failed (%s)", log);
    }
    assert_int_equal(sh("cd %s && env -u QVOICE_LIB %s/bin/python -c 'import qvoice; "
                        "assert qvoice.version()' >> %s 2>&1",
                        tmp_dir, bare, log), 0);
    assert_int_equal(sh("%s/bin/pip uninstall -y qvoice >> %s 2>&1", bare, log), 0);
    assert_int_not_equal(sh("ls %s/lib/python3*/site-packages/qvoice 2>/dev/null", bare), 0);
}

static void test_pip_install(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    const char *log = tmp_path("pip.log");
    int rc = sh("%s -m venv --system-site-packages %s > %s 2>&1 && "
                "%s/bin/pip install --no-index --no-build-isolation . >> %s 2>&1",
                python, venv, log, venv, log);
    if (rc) {
        sh("tail -20 %s", log);
        fail_msg("pip install failed (%s)", log);
    }
    assert_int_equal(sh("ls %s/lib/python3*/site-packages/qvoice/libqvoice.so.0 >/dev/null", venv), 0);
}

/* Runs one test module with the venv's python from outside the source tree; prints unittest's
 * summary lines so that the run's log shows how many Python tests passed and skipped. */
static void run_module(const char *module, int block_numpy) {
    const char *log = tmp_path("unittest.log");
    int rc = sh("cd %s && env -u QVOICE_LIB QVOICE_EXPECT_PACKAGED_LIB=1 "
                "QVOICE_CACHE=\"${QVOICE_CACHE:-%s/cache}\" %s/bin/python -c \"import sys; %s"
                "import unittest; unittest.main(module=None, argv=['unittest', 'discover', '-v', "
                "'-s', '%s/tests/python', '-p', '%s'])\" > %s 2>&1",
                tmp_dir, repo, venv, block_numpy ? "sys.modules['numpy'] = None; " : "", repo,
                module, log);
    sh("grep -E '^(Ran |OK|FAILED)|(ERROR|FAIL|skipped)' %s | sed 's/^/  python: /'", log);
    if (rc) {
        sh("tail -40 %s", log);
        fail_msg("%s failed", module);
    }
}

static void test_tiny_models(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    run_module("test_tiny.py", 0);
}

static void test_tiny_models_without_numpy(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    run_module("test_tiny.py", 1);
}

/* The official qwen_tts README's examples, unchanged, on a local Hugging Face cache. */
static void test_official_readme(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    run_module("test_official.py", 0);
}

static void test_full_06b(void **st) {
    (void)st;
    QVT_SKIP_IF_SANITIZED();
    run_module("test_full.py", 0);
}

QVT_MAIN(group_setup, tmpdir_teardown, test_pip_install, test_pip_install_without_wheel,
         test_tiny_models,
         test_tiny_models_without_numpy, test_official_readme, test_full_06b)
