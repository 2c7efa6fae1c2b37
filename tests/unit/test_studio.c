/* test_studio.c — the studio page served by bin/qvoice-server (GET /, issue 27): its routes and
 * Content-Security-Policy with curl, --no-studio, and the whole page in a real browser: Debian's
 * headless chromium driven by puppeteer-core (tests/server/studio.mjs, installed into
 * tests/server/node_modules by npm here). The browser records from a fake microphone fed the
 * bundled clip, clones with consent on tiny-base, finds the voice in the library, downloads it
 * (checked here with voicefmt verify), shows an XSS-named voice as text and deletes it (asked
 * twice), speaks with the clone on tiny-cv (playback under way before the stream ended), stops a
 * long take (qvoice_cancelled_total), and logs no console error; with bearer keys it asks once.
 * Screenshots go to build/studio-*.png.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/server_proc.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

#define CLIP "tests/audio/en_ohenry_chenevert.wav"
#define CHROMIUM "/usr/bin/chromium"

static char g_cv[512], g_base[512], g_xss[512];
static server g_srv;   /* tiny-cv speaking, tiny-base cloning, the studio on */
static server g_plain; /* the same with --no-studio */
static server g_keyed; /* tiny-cv with --api-key-file */
static int g_browser;  /* chromium and puppeteer-core are there */

/* GET (or -X METHOD) of path with curl: the status; headers and body go to tmp files. */
static int get(const server *sv, const char *method, const char *path) {
    char code[32];
    if (sh("curl -s --max-time 30 -X %s -D %s -o %s -w '%%{http_code}' http://127.0.0.1:%d%s > %s",
           method, tmp_path("headers"), tmp_path("body"), sv->port, path, tmp_path("code")))
        return 0;
    slurp(tmp_path("code"), code, sizeof code);
    return atoi(code);
}

static int group_setup(void **state) {
    if (tmpdir_setup(state)) return -1;
    snprintf(g_cv, sizeof g_cv, "%s/tiny-cv", test_cache_dir());
    snprintf(g_base, sizeof g_base, "%s/tiny-base", test_cache_dir());
    snprintf(g_xss, sizeof g_xss, "%s/xss.qvoice", tmp_dir);
    if (sh("bin/clone -m %s %s -o %s -n xss --consent test >/dev/null 2>&1", g_base, CLIP, g_xss))
        return -1;
    /* make deps installs chromium; a machine where it cannot be installed skips the browser test */
    if (access(CHROMIUM, X_OK) && getuid() == 0)
        sh("apt-get install -y -qq chromium >/dev/null 2>&1 || "
           "(apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1");
    g_browser = !access(CHROMIUM, X_OK) &&
                sh("cd tests/server && timeout 300 npm install --no-audit --no-fund --silent "
                   ">/dev/null 2>&1") == 0;
    if (!g_browser)
        fprintf(stderr, "test_studio: %s or the puppeteer-core npm package cannot be installed: "
                        "the browser test is skipped\n", CHROMIUM);
    char args[2048];
    snprintf(args, sizeof args, "-m %s --clone-model %s --voices %s/voices --timeout 60", g_cv,
             g_base, tmp_dir);
    if (server_start(&g_srv, "studio", args)) return -1;
    snprintf(args, sizeof args, "-m %s --voices %s/plain --no-studio", g_cv, tmp_dir);
    if (server_start(&g_plain, "plain", args)) return -1;
    tmp_write(tmp_path("keys"), "studio-key-1\n", 13);
    snprintf(args, sizeof args, "-m %s --voices %s/keyed --api-key-file %s", g_cv, tmp_dir,
             tmp_path("keys"));
    return server_start(&g_keyed, "keyed", args);
}

static int group_teardown(void **state) {
    server_stop(&g_srv);
    server_stop(&g_plain);
    server_stop(&g_keyed);
    return tmpdir_teardown(state);
}

/* GET / and /studio/NAME: the page with a strict CSP; unknown names, other methods, --no-studio. */
static void test_routes(void **state) {
    (void)state;
    assert_int_equal(get(&g_srv, "GET", "/"), 200);
    assert_true(file_has(tmp_path("body"), "<title>qvoice studio</title>"));
    assert_true(file_has(tmp_path("headers"), "Content-Type: text/html"));
    assert_true(file_has(tmp_path("headers"), "Content-Security-Policy: default-src 'self'"));
    assert_false(file_has(tmp_path("headers"), "unsafe-inline"));
    assert_false(file_has(tmp_path("headers"), "unsafe-eval"));
    assert_true(file_has(tmp_path("headers"), "X-Content-Type-Options: nosniff"));
    assert_int_equal(get(&g_srv, "GET", "/studio/studio.js"), 200);
    assert_true(file_has(tmp_path("headers"), "Content-Type: text/javascript"));
    assert_true(file_has(tmp_path("headers"), "Content-Security-Policy: "));
    assert_int_equal(get(&g_srv, "GET", "/studio/nope.js"), 404);
    assert_true(file_has(tmp_path("body"), "\"code\":\"not_found\""));
    assert_int_equal(get(&g_srv, "GET", "/studio/../server.c"), 404);
    assert_int_equal(get(&g_srv, "GET", "/studio/"), 404);
    assert_int_equal(get(&g_srv, "POST", "/"), 405);
    assert_int_equal(get(&g_plain, "GET", "/"), 404);
    assert_true(file_has(tmp_path("body"), "--no-studio"));
    assert_int_equal(get(&g_plain, "GET", "/studio/studio.js"), 404);
    assert_int_equal(get(&g_plain, "GET", "/health"), 200);
    /* no inline script and no inline handler in the page: the CSP would block them */
    assert_int_equal(sh("grep -Eq '<script( [^>]*)?>[^<]|<script>|[[:space:]]on[a-z]+=' "
                        "server/studio/*.html"),
                     1);
}

/* The whole page in chromium (tests/server/studio.mjs); then the downloaded voice is verified. */
static void test_browser(void **state) {
    (void)state;
    if (!g_browser) skip();
    char cwd[1024], out[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(out, sizeof out, "%s/downloads", tmp_dir);
    mkdir(out, 0755);
    mkdir("build", 0755);
    int rc = sh("timeout 600 node tests/server/studio.mjs http://127.0.0.1:%d %s/%s %s %s %s/build "
                "> %s",
                g_srv.port, cwd, CLIP, g_xss, out, cwd, tmp_path("figures"));
    char figures[4096];
    slurp(tmp_path("figures"), figures, sizeof figures);
    printf("studio: %s", figures); /* first sound after Speak, recording, clone time */
    if (rc) {
        char log[1 << 14];
        slurp(g_srv.log, log, sizeof log);
        fprintf(stderr, "server log:\n%s\n", log);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(sh("bin/voicefmt verify --model %s %s/studio-take.qvoice >/dev/null", g_cv, out),
                     0);
    assert_true(file_bytes("build/studio-speak.png") > 0);
    assert_true(file_bytes("build/studio-clone.png") > 0);
    assert_true(file_bytes("build/studio-library.png") > 0);
}

/* With bearer keys: the page asks once, then keeps the key for the tab (a reload does not ask). */
static void test_key(void **state) {
    (void)state;
    if (!g_browser) skip();
    assert_int_equal(get(&g_keyed, "GET", "/"), 200); /* the page itself needs no key */
    assert_int_equal(get(&g_keyed, "GET", "/v1/audio/voices"), 401);
    assert_int_equal(sh("timeout 300 node tests/server/studio.mjs http://127.0.0.1:%d --key "
                        "studio-key-1",
                        g_keyed.port),
                     0);
}

QVT_MAIN(group_setup, group_teardown, test_routes, test_browser, test_key)
