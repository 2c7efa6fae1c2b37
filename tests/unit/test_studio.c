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
#include <math.h>
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

/* what the first 12 s of CLIP say: the ICL voice's transcript */
#define CLIP_12S                                                                                   \
    "One dollar and eighty-seven cents. That was all. And sixty cents of it was in pennies, "     \
    "saved one and two at a time by bulldozing the grocer."

static char g_cv[512], g_base[512], g_xss[512], g_icl[512], g_other[512];
static server g_srv;   /* tiny-cv speaking, tiny-base cloning, the studio on */
static server g_plain; /* the same with --no-studio */
static server g_keyed; /* tiny-cv with --api-key-file */
static int g_browser;  /* chromium and puppeteer-core are there */

/* curl with args (a method, form fields) to path: the status; headers and body go to tmp files. */
static int request(const server *sv, const char *args, const char *path) {
    char code[32];
    if (sh("curl -s --max-time 60 %s -D %s -o %s -w '%%{http_code}' http://127.0.0.1:%d%s > %s",
           args, tmp_path("headers"), tmp_path("body"), sv->port, path, tmp_path("code")))
        return 0;
    slurp(tmp_path("code"), code, sizeof code);
    return atoi(code);
}

static int get(const server *sv, const char *method, const char *path) {
    char args[32];
    snprintf(args, sizeof args, "-X %s", method);
    return request(sv, args, path);
}

static int group_setup(void **state) {
    if (tmpdir_setup(state)) return -1;
    snprintf(g_cv, sizeof g_cv, "%s/tiny-cv", test_cache_dir());
    snprintf(g_base, sizeof g_base, "%s/tiny-base", test_cache_dir());
    snprintf(g_xss, sizeof g_xss, "%s/xss.qvoice", tmp_dir);
    if (sh("bin/clone -m %s %s -o %s -n xss --consent test >/dev/null 2>&1", g_base, CLIP, g_xss))
        return -1;
    snprintf(g_other, sizeof g_other, "%s/other.qvoice", tmp_dir); /* another speaker */
    if (sh("bin/clone -m %s tests/audio/it_galatea_fasol.wav -o %s --consent test >/dev/null 2>&1",
           g_base, g_other))
        return -1;
    snprintf(g_icl, sizeof g_icl, "%s/icl.qvoice", tmp_dir);
    if (sh("bin/clone -m %s %s -o %s --consent test --icl-window 0-12 -t '" CLIP_12S
           "' >/dev/null 2>&1 && bin/voicefmt palette add %s --name sad --direction %s "
           "--strength 0.25 >/dev/null 2>&1",
           g_base, CLIP, g_icl, g_icl, g_other))
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
    if (sh("bin/voicefmt keygen -o %s/studio >/dev/null", tmp_dir)) return -1;
    snprintf(args, sizeof args, "-m %s --clone-model %s --voices %s/voices --timeout 60 "
             "--sign-key %s/studio.pem --signer 'studio test'", g_cv, g_base, tmp_dir, tmp_dir);
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

/* What the library page asks of a voice: its reference (the ICL codes decoded: the same bytes as
 * speak --decode-codes of the codes voicefmt extracts), its fit to the served model, the
 * similarity of two voices; and a clone without a transcript suggests the ICL window. */
static void test_voice_routes(void **state) {
    (void)state;
    char form[2048];
    snprintf(form, sizeof form, "-F audio_sample=@%s -F consent=test -F name=icl-ref", g_icl);
    assert_int_equal(request(&g_srv, form, "/v1/audio/voices"), 200);
    assert_true(file_has(tmp_path("body"), "\"styles\":[\"sad\"]")); /* its palette */
    snprintf(form, sizeof form, "-F audio_sample=@%s -F consent=test -F name=plain-ref", g_other);
    assert_int_equal(request(&g_srv, form, "/v1/audio/voices"), 200);
    assert_true(file_has(tmp_path("body"), "\"styles\":[]"));

    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/icl-ref/reference?response_format=wav"),
                     200);
    assert_true(file_has(tmp_path("headers"), "Content-Type: audio/wav"));
    assert_int_equal(sh("bin/voicefmt extract --codes %s %s && bin/speak -m %s --decode-codes %s "
                        "-o %s >/dev/null 2>&1 && cmp -s %s %s",
                        tmp_path("codes.txt"), g_icl, g_cv, tmp_path("codes.txt"),
                        tmp_path("decoded.wav"), tmp_path("decoded.wav"), tmp_path("body")),
                     0);
    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/plain-ref/reference"), 404);
    assert_true(file_has(tmp_path("body"), "\"code\":\"no_reference\""));
    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/icl-ref/reference?response_format=aiff"),
                     400);
    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/icl-ref/reference?model=nope"), 404);
    assert_int_equal(get(&g_srv, "POST", "/v1/audio/voices/icl-ref/reference"), 405);
    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/icl-ref/nope"), 404);
    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/missing/reference"), 404);
    assert_true(file_has(tmp_path("body"), "\"code\":\"voice_not_found\""));

    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/icl-ref/fit"), 200);
    assert_true(file_has(tmp_path("body"), "\"model\":\"tiny-cv\",\"fit\":\"fits\""));
    assert_true(file_has(tmp_path("body"), "\"fits\":true"));
    assert_false(file_has(tmp_path("body"), tmp_dir)); /* no server path */
    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices"), 200); /* remembered for the list */
    assert_true(file_has(tmp_path("body"), "\"fits\":true")); /* only icl-ref was checked */

    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/icl-ref/similarity?to=plain-ref"), 200);
    char body[1024];
    slurp(tmp_path("body"), body, sizeof body);
    const char *cs = strstr(body, "\"cosine\":");
    assert_non_null(cs);
    double cosine = atof(cs + 9), expect = 0;
    /* the same number as clone --compare of the two files */
    assert_int_equal(sh("bin/clone --compare %s %s > %s 2>&1", g_icl, g_other, tmp_path("cmp")), 0);
    char line[512];
    slurp(tmp_path("cmp"), line, sizeof line);
    const char *c2 = strstr(line, "cosine");
    assert_non_null(c2);
    while (*c2 && !(*c2 == '-' || (*c2 >= '0' && *c2 <= '9'))) c2++;
    expect = atof(c2);
    printf("  similarity over HTTP %.6f, clone --compare %.6f\n", cosine, expect);
    assert_true(cosine > -1 && cosine < 0.9999 && fabs(cosine - expect) < 1e-5);
    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/icl-ref/similarity"), 400);
    assert_int_equal(get(&g_srv, "GET", "/v1/audio/voices/icl-ref/similarity?to=missing"), 404);

    /* an SSE stream reports its progress through the text: part k of n after each part (12
       frames each: the random model would not end one by itself) */
    assert_int_equal(sh("curl -s --max-time 60 -o %s http://127.0.0.1:%d/v1/audio/speech -H "
                        "'Content-Type: application/json' -d '{\"input\": \"%s %s %s\", "
                        "\"voice\": \"icl-ref\", \"response_format\": \"pcm\", "
                        "\"stream_format\": \"sse\", \"max_new_tokens\": 12, \"seed\": 1}'",
                        tmp_path("sse"), g_srv.port, CLIP_12S, CLIP_12S, CLIP_12S),
                     0);
    assert_true(file_has(tmp_path("sse"), "\"type\":\"speech.progress\",\"done\":1,\"total\":3}"));
    assert_true(file_has(tmp_path("sse"), "\"type\":\"speech.progress\",\"done\":3,\"total\":3}"));
    assert_true(file_has(tmp_path("sse"), "event: speech.audio.done"));

    /* a clone without a transcript: the report suggests the window to transcribe; a bad window
       is refused by its field */
    snprintf(form, sizeof form, "-F audio_sample=@%s -F consent=test -F name=suggest", CLIP);
    assert_int_equal(request(&g_srv, form, "/v1/audio/voices"), 200);
    assert_true(file_has(tmp_path("body"), "\"icl_window\":{\"mode\":\"auto\""));
    assert_true(file_has(tmp_path("body"), "\"has_icl\":false"));
    snprintf(form, sizeof form,
             "-F audio_sample=@%s -F consent=test -F name=window -F icl_window=0-12 "
             "-F 'transcript=" CLIP_12S "'",
             CLIP);
    assert_int_equal(request(&g_srv, form, "/v1/audio/voices"), 200);
    assert_true(file_has(tmp_path("body"), "\"has_icl\":true"));
    assert_true(file_has(tmp_path("body"), "\"mode\":\"range\""));
    snprintf(form, sizeof form,
             "-F audio_sample=@%s -F consent=test -F icl_window=12-3 -F transcript=Hello", CLIP);
    assert_int_equal(request(&g_srv, form, "/v1/audio/voices"), 400);
    assert_true(file_has(tmp_path("body"), "\"param\":\"icl_window\""));
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

QVT_MAIN(group_setup, group_teardown, test_routes, test_voice_routes, test_browser, test_key)
