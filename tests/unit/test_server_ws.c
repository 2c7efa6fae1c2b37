/* test_server_ws.c — WS /v1/audio/speech/stream and the style fields of POST /v1/audio/speech.
 * The WebSocket reader (server/ws.c) on RFC 6455's examples and on the committed fuzz corpus
 * (tests/fuzz/fuzz_ws_frame.c); then bin/qvoice-server on the tiny CustomVoice model with a real
 * client, the ws npm package (tests/server/ws_speech.mjs, installed by npm into
 * tests/server/node_modules): text fed word by word at 15 tokens/s is spoken sentence by
 * sentence, the first audio before input.done, each sentence's audio the same bytes as the HTTP
 * request of that sentence with the same seed; split_granularity none (one request at input.done)
 * and clause (cut at commas too), each piece's audio that of its POST; markup spans across
 * sentences, refusals as error
 * events, bearer and ?api_key= auth, an oversize message (close 1009), and a client that leaves
 * (the server's cancelled counter).
 */
#include <cJSON.h>
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/server_proc.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"
#include "tests/unit/helpers/wav.h"
#include "util/fileio.h"

#define LLVMFuzzerTestOneInput fuzz_ws_frame_one
#include "tests/fuzz/fuzz_ws_frame.c"
#undef LLVMFuzzerTestOneInput

static server g_srv; /* tiny-cv, 200 characters per request */
static char g_cv[512];
static int g_npm;
static char g_out[1 << 16];

/* ==== the reader ============================================================================= */

static int next_kind(qvs_ws_reader *r, const void *p, size_t n, qvs_ws_event *e) {
    assert_int_equal(qvs_ws_reader_add(r, p, n), 0);
    return qvs_ws_next(r, e);
}

static void test_reader(void **state) {
    (void)state;
    char acc[QVS_WS_ACCEPT_SIZE];
    assert_int_equal(qvs_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", acc), 0); /* RFC 6455 §1.3 */
    assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    assert_int_equal(qvs_ws_accept("short", acc), -1);
    assert_int_equal(qvs_ws_accept(NULL, acc), -1);
    qvs_ws_reader r;
    qvs_ws_event e;
    /* RFC 6455 §5.7: a masked "Hello", arriving one byte at a time */
    static const uint8_t hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                    0x7f, 0x9f, 0x4d, 0x51, 0x58};
    qvs_ws_reader_init(&r, 64);
    for (size_t i = 0; i + 1 < sizeof hello; i++)
        assert_int_equal(next_kind(&r, hello + i, 1, &e), QVS_WS_MORE);
    assert_int_equal(next_kind(&r, hello + sizeof hello - 1, 1, &e), QVS_WS_TEXT);
    assert_int_equal(e.n, 5);
    assert_memory_equal(e.p, "Hello", 5);
    /* fragmented "Hel" + "lo" (mask 0) with a ping between the fragments */
    static const uint8_t frag[] = {0x01, 0x83, 0, 0,   0,    0,    'H', 'e', 'l', 0x89, 0x81, 0,
                                   0,    0,    0, 'p', 0x80, 0x82, 0,   0,   0,   0,    'l',  'o'};
    assert_int_equal(next_kind(&r, frag, sizeof frag, &e), QVS_WS_PING);
    assert_int_equal(e.n, 1);
    assert_int_equal(qvs_ws_next(&r, &e), QVS_WS_TEXT);
    assert_memory_equal(e.p, "Hello", 5);
    assert_int_equal(qvs_ws_next(&r, &e), QVS_WS_MORE);
    /* a message over the limit is refused from its header alone: 1009, and stays refused */
    static const uint8_t big[] = {0x82, 0xFE, 0x01, 0x00};
    assert_int_equal(next_kind(&r, big, sizeof big, &e), QVS_WS_ERROR);
    assert_int_equal(e.close_code, 1009);
    assert_int_equal(qvs_ws_next(&r, &e), QVS_WS_ERROR);
    qvs_ws_reader_free(&r);
    /* an unmasked client frame, a close with code 1000 */
    qvs_ws_reader_init(&r, 64);
    static const uint8_t unmasked[] = {0x81, 0x01, 'x'};
    assert_int_equal(next_kind(&r, unmasked, sizeof unmasked, &e), QVS_WS_ERROR);
    assert_int_equal(e.close_code, 1002);
    qvs_ws_reader_free(&r);
    qvs_ws_reader_init(&r, 64);
    static const uint8_t close[] = {0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8};
    assert_int_equal(next_kind(&r, close, sizeof close, &e), QVS_WS_CLOSE);
    assert_int_equal(e.close_code, 1000);
    qvs_ws_reader_free(&r);
    uint8_t h[QVS_WS_HEADER_MAX];
    assert_int_equal(qvs_ws_header(h, QVS_WS_OP_BINARY, 70000), 10);
    assert_int_equal(h[0], 0x82);
    assert_int_equal(h[1], 127);
}

/* Every file of tests/fuzz/corpus/fuzz_ws_frame through the target (it aborts on a violation). */
static void test_corpus_replay(void **state) {
    (void)state;
    DIR *d = opendir("tests/fuzz/corpus/fuzz_ws_frame");
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[600];
        snprintf(path, sizeof path, "tests/fuzz/corpus/fuzz_ws_frame/%s", de->d_name);
        size_t len;
        uint8_t *b = (uint8_t *)qvu_read_file(path, (size_t)1 << 20, &len, NULL, 0);
        assert_non_null(b);
        fuzz_ws_frame_one(b, len);
        free(b);
        n++;
    }
    closedir(d);
    print_message("replay: %d corpus files\n", n);
    assert_true(n >= 20);
}

/* ==== end to end ============================================================================= */

static int group_setup(void **state) {
    if (tmpdir_setup(state)) return -1;
    snprintf(g_cv, sizeof g_cv, "%s/tiny-cv", test_cache_dir());
    g_npm = sh("cd tests/server && timeout 300 npm install --no-audit --no-fund --silent "
               ">/dev/null 2>&1") == 0;
    char args[1024];
    snprintf(args, sizeof args, "-m %s --voices %s --max-text-chars 200 --timeout 30", g_cv,
             tmp_dir);
    return server_start(&g_srv, "ws", args);
}

static int group_teardown(void **state) {
    server_stop(&g_srv);
    return tmpdir_teardown(state);
}

/* Runs the client (mode and its arguments) against sv; its JSON line, parsed (caller frees). */
static cJSON *client(const server *sv, const char *query, const char *fmt, ...) {
    char rest[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rest, sizeof rest, fmt, ap);
    va_end(ap);
    char mode[32];
    sscanf(rest, "%31s", mode);
    int rc = sh("cd tests/server && timeout 120 node ws_speech.mjs %s "
                "ws://127.0.0.1:%d/v1/audio/speech/stream%s %s > %s",
                mode, sv->port, query, rest + strlen(mode), tmp_path("client.json"));
    slurp(tmp_path("client.json"), g_out, sizeof g_out);
    print_message("%s: rc %d: %.600s\n", mode, rc, g_out);
    cJSON *o = cJSON_Parse(g_out);
    assert_non_null(o);
    return o;
}

static const char *str_at(cJSON *a, int i) {
    cJSON *x = cJSON_GetArrayItem(a, i);
    return cJSON_IsString(x) ? x->valuestring : "";
}

/* The HTTP speech of text (pcm, streamed as the WebSocket's audio is) into path. */
static void http_pcm(const char *text, const char *extra, const char *path) {
    char body[1024];
    snprintf(body, sizeof body,
             "{\"input\":\"%s\",\"response_format\":\"pcm\",\"stream_format\":\"audio\"%s}", text,
             extra);
    tmp_write(tmp_path("req.json"), body, strlen(body));
    assert_int_equal(sh("curl -sf --max-time 120 -o %s -d @%s http://127.0.0.1:%d/v1/audio/speech",
                        path, tmp_path("req.json"), g_srv.port),
                     0);
}

#define CONFIG "{\"response_format\":\"pcm\",\"stream_audio\":true,\"seed\":7,\"max_seconds\":0.4}"
#define SAME ",\"seed\":7,\"max_seconds\":0.4"

static void test_stream(void **state) {
    (void)state;
    if (!g_npm) skip();
    assert_int_equal(sh("mkdir -p %s", tmp_path("wav")), 0);
    cJSON *o = client(&g_srv, "", "stream '%s' '%s' %s", CONFIG,
                      "Hello there my friend. How are you today? Fine thanks", tmp_dir);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "first_audio_before_done")));
    cJSON *ss = cJSON_GetObjectItem(o, "sentences");
    assert_int_equal(cJSON_GetArraySize(ss), 3);
    static const char *const texts[] = {"Hello there my friend.", "How are you today?",
                                        "Fine thanks"};
    for (int i = 0; i < 3; i++) {
        cJSON *s = cJSON_GetArrayItem(ss, i);
        assert_string_equal(cJSON_GetObjectItem(s, "text")->valuestring, texts[i]);
        double n_bytes = cJSON_GetObjectItem(s, "bytes")->valuedouble;
        assert_true(n_bytes > 0);
        assert_true(n_bytes == cJSON_GetObjectItem(s, "total_bytes")->valuedouble);
        assert_true(cJSON_IsFalse(cJSON_GetObjectItem(s, "error")));
        /* the same bytes as the HTTP request of that sentence with the same seed */
        char ws_pcm[64], http[64];
        snprintf(ws_pcm, sizeof ws_pcm, "s%d.pcm", i);
        snprintf(http, sizeof http, "h%d.pcm", i);
        http_pcm(texts[i], SAME, tmp_path(http));
        assert_int_equal(sh("cmp -s %s %s", tmp_path(ws_pcm), tmp_path(http)), 0);
    }
    /* wav without stream_audio: one binary frame per sentence, a WAV whose samples are the
     * same as the pcm's */
    cJSON *w = client(&g_srv, "", "stream '%s' '%s' %s",
                      "{\"response_format\":\"wav\",\"seed\":7,\"max_seconds\":0.4}",
                      "Hello there my friend. How are you today?", tmp_path("wav"));
    cJSON *ws = cJSON_GetObjectItem(w, "sentences");
    assert_int_equal(cJSON_GetArraySize(ws), 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(ws, i), "frames")->valueint, 1);
        char wav[64], pcm[64];
        snprintf(wav, sizeof wav, "wav/s%d.pcm", i);
        snprintf(pcm, sizeof pcm, "s%d.pcm", i);
        size_t n_wav, n_pcm;
        char *a = qvu_read_file(tmp_path(wav), 1 << 24, &n_wav, NULL, 0);
        char *b = qvu_read_file(tmp_path(pcm), 1 << 24, &n_pcm, NULL, 0);
        assert_non_null(a);
        assert_non_null(b);
        uint32_t data; /* after the provenance chunks (docs/provenance.md) */
        const long at = wav_data_offset((const uint8_t *)a, n_wav, &data);
        assert_true(at > 44);
        const size_t head = (size_t)at;
        assert_int_equal(n_wav - head, n_pcm);
        assert_memory_equal(a + head, b, n_pcm);
        free(a);
        free(b);
    }
    cJSON_Delete(w);
    /* one session.done, then our session.close is answered with a normal close */
    cJSON *types = cJSON_GetObjectItem(o, "types");
    int done = 0;
    for (int i = 0; i < cJSON_GetArraySize(types); i++)
        done += !strcmp(str_at(types, i), "session.done");
    assert_int_equal(done, 1);
    assert_int_equal(cJSON_GetObjectItem(o, "close")->valueint, 1000);
    cJSON_Delete(o);
}

/* The pieces of the stream client's output o: each one's text as texts[i], its audio (s<i>.pcm)
 * the same bytes as the POST of that text with the same seed. */
static void expect_pieces(cJSON *o, const char *const *texts, int n) {
    cJSON *ss = cJSON_GetObjectItem(o, "sentences");
    assert_int_equal(cJSON_GetArraySize(ss), n);
    int starts = 0;
    cJSON *types = cJSON_GetObjectItem(o, "types");
    for (int i = 0; i < cJSON_GetArraySize(types); i++)
        starts += !strcmp(str_at(types, i), "audio.start");
    assert_int_equal(starts, n);
    for (int i = 0; i < n; i++) {
        cJSON *s = cJSON_GetArrayItem(ss, i);
        assert_string_equal(cJSON_GetObjectItem(s, "text")->valuestring, texts[i]);
        assert_true(cJSON_GetObjectItem(s, "bytes")->valuedouble > 0);
        assert_true(cJSON_IsFalse(cJSON_GetObjectItem(s, "error")));
        char ws_pcm[64];
        snprintf(ws_pcm, sizeof ws_pcm, "s%d.pcm", i);
        http_pcm(texts[i], SAME, tmp_path("h.pcm"));
        assert_int_equal(sh("cmp -s %s %s", tmp_path(ws_pcm), tmp_path("h.pcm")), 0);
    }
}

/* vLLM-Omni's split_granularity: none buffers until input.done and speaks one request (no audio
 * before it; over the request's limit the piece is refused naming text, the rest spoken);
 * clause cuts at commas too. */
static void test_split_granularity(void **state) {
    (void)state;
    if (!g_npm) skip();
    const char *text = "Hello there my friend. How are you today? Fine thanks";
    cJSON *o = client(&g_srv, "", "stream '%s' '%s' %s",
                      "{\"response_format\":\"pcm\",\"stream_audio\":true,\"seed\":7,"
                      "\"max_seconds\":0.4,\"split_granularity\":\"none\"}",
                      text, tmp_dir);
    expect_pieces(o, &text, 1);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(o, "first_audio_before_done")));
    cJSON_Delete(o);
    /* 41 words of 5 characters: the piece that takes the text past 200 characters is refused,
     * and each after it; the first 200 are spoken */
    char long_text[512] = "", spoken[512] = "";
    for (int i = 0; i < 41; i++) {
        snprintf(long_text + strlen(long_text), 16, "w%03d ", i);
        if (i < 40) snprintf(spoken + strlen(spoken), 16, i ? " w%03d" : "w%03d", i);
    }
    o = client(&g_srv, "", "stream '%s' '%s' %s",
               "{\"response_format\":\"pcm\",\"seed\":7,\"max_seconds\":0.4,"
               "\"split_granularity\":\"none\"}",
               long_text, tmp_dir);
    cJSON *e = cJSON_GetObjectItem(o, "errors");
    assert_int_equal(cJSON_GetArraySize(e), 1);
    assert_string_equal(str_at(e, 0), "text");
    cJSON *ss = cJSON_GetObjectItem(o, "sentences");
    assert_int_equal(cJSON_GetArraySize(ss), 1);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(ss, 0), "text")->valuestring,
                        spoken);
    cJSON_Delete(o);
    static const char *const clauses[] = {"Well,", "hello there,", "my friend;", "the rest.",
                                          "How are you?"};
    o = client(&g_srv, "", "stream '%s' '%s' %s",
               "{\"response_format\":\"pcm\",\"stream_audio\":true,\"seed\":7,"
               "\"max_seconds\":0.4,\"split_granularity\":\"clause\"}",
               "Well, hello there, my friend; the rest. How are you?", tmp_dir);
    expect_pieces(o, clauses, 5);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "first_audio_before_done")));
    cJSON_Delete(o);
}

/* Markup spans sentences: a tag stays in force in the sentences after it (the carry); a tag
 * the model cannot honour is a warning event per sentence, or with strict_markup an error event
 * naming input. The tiny CustomVoice model takes no instruct and a preset has no palette. */
static void test_markup_spans(void **state) {
    (void)state;
    if (!g_npm) skip();
    const char *text = "Plain one. [sad] Sad two. Still sad three. [neutral] Back four. ";
    cJSON *o = client(&g_srv, "", "stream '%s' '%s' %s", CONFIG, text, tmp_dir);
    cJSON *w = cJSON_GetObjectItem(o, "warnings");
    assert_int_equal(cJSON_GetArraySize(w), 2); /* "[sad] Sad two." and "[sad] Still sad three." */
    assert_non_null(strstr(str_at(w, 0), "[sad]"));
    cJSON *ss = cJSON_GetObjectItem(o, "sentences");
    assert_int_equal(cJSON_GetArraySize(ss), 4);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(ss, 2), "text")->valuestring,
                        "[sad] Still sad three.");
    cJSON_Delete(o);
    o = client(&g_srv, "", "stream '%s' '%s' %s",
               "{\"response_format\":\"pcm\",\"strict_markup\":true,\"max_seconds\":0.4}", text,
               tmp_dir);
    cJSON *e = cJSON_GetObjectItem(o, "errors");
    assert_int_equal(cJSON_GetArraySize(e), 2);
    assert_string_equal(str_at(e, 0), "input");
    ss = cJSON_GetObjectItem(o, "sentences");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(ss, 1), "error")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(ss, 3), "error")));
    cJSON_Delete(o);
}

static void test_errors(void **state) {
    (void)state;
    if (!g_npm) skip();
    cJSON *o = client(&g_srv, "", "errors");
    static const char *const want[] = {
        "type",           "type",   "input", "response_format", "stream_audio", "temperature",
        "voice",          "style_strength",  "colour", /* a field of no API: never ignored */
        "split_granularity", "text",        "text",  "invalid_type"};
    cJSON *e = cJSON_GetObjectItem(o, "errors");
    assert_int_equal(cJSON_GetArraySize(e), 13);
    for (int i = 0; i < 13; i++)
        assert_string_equal(str_at(e, i), want[i]);
    assert_string_equal(cJSON_GetObjectItem(o, "pong")->valuestring, "hi");
    assert_int_equal(cJSON_GetObjectItem(o, "close")->valueint, 1000);
    cJSON_Delete(o);
    /* a message over the limit (8 x 200 characters + 64 KiB): close 1009 */
    o = client(&g_srv, "", "oversize 200000");
    assert_int_equal(cJSON_GetObjectItem(o, "close")->valueint, 1009);
    cJSON_Delete(o);
    /* 100 sentences of 200 characters at once: more than 8 buffers of text wait, refused */
    o = client(&g_srv, "", "flood");
    assert_string_equal(cJSON_GetObjectItem(o, "error")->valuestring, "input_too_long:text");
    cJSON_Delete(o);
    /* not a WebSocket: 426; the WebSocket path with POST: 405 */
    assert_int_equal(sh("test $(curl -s -o /dev/null -w '%%{http_code}' "
                        "http://127.0.0.1:%d/v1/audio/speech/stream) = 426",
                        g_srv.port),
                     0);
    assert_int_equal(sh("test $(curl -s -o /dev/null -w '%%{http_code}' -d x "
                        "http://127.0.0.1:%d/v1/audio/speech/stream) = 405",
                        g_srv.port),
                     0);
}

/* A client that leaves without a close frame cancels the sentence being spoken. */
static void test_abort(void **state) {
    (void)state;
    if (!g_npm) skip();
    cJSON *o = client(&g_srv, "", "abort '%s' '%s'", "{\"stream_audio\":true,\"max_seconds\":25}",
                      "A long sentence that keeps the model busy for a while. ");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "audio")));
    cJSON_Delete(o);
    int cancelled = 0;
    for (int i = 0; i < 100 && !cancelled; i++) {
        cancelled =
            !sh("curl -s http://127.0.0.1:%d/metrics | grep -q '^qvoice_cancelled_total [1-9]'",
                g_srv.port);
        if (!cancelled) sleep_ms(100);
    }
    assert_true(cancelled);
}

static void test_auth(void **state) {
    (void)state;
    if (!g_npm) skip();
    server sv = {0};
    char args[1024];
    tmp_write(tmp_path("keys"), "u:user:sesame\n", 14);
    snprintf(args, sizeof args, "-m %s --voices %s --api-key-file %s", g_cv, tmp_dir,
             tmp_path("keys"));
    assert_int_equal(server_start(&sv, "wsauth", args), 0);
    cJSON *o = client(&sv, "", "handshake");
    assert_string_equal(cJSON_GetObjectItem(o, "status")->valuestring, "status 401");
    cJSON_Delete(o);
    o = client(&sv, "?api_key=wrong", "handshake");
    assert_string_equal(cJSON_GetObjectItem(o, "status")->valuestring, "status 401");
    cJSON_Delete(o);
    o = client(&sv, "?api_key=sesame", "handshake");
    assert_string_equal(cJSON_GetObjectItem(o, "status")->valuestring, "open");
    cJSON_Delete(o);
    /* the bearer header, as the HTTP routes take it */
    assert_int_equal(
        sh("test $(curl -s -o /dev/null -w '%%{http_code}' -H 'Authorization: Bearer "
           "sesame' -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H "
           "'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' "
           "--max-time 2 http://127.0.0.1:%d/v1/audio/speech/stream) = 101",
           sv.port),
        0);
    assert_int_equal(server_stop(&sv), 0);
}

/* A session outlives --receive-timeout while messages keep coming (the slow-client watchdog
 * does not cut an upgraded connection), and an idle one is closed after it (1008). */
static void test_long_session(void **state) {
    (void)state;
    if (!g_npm) skip();
    server sv = {0};
    char args[1024];
    snprintf(args, sizeof args, "-m %s --voices %s --receive-timeout 2 --timeout 60", g_cv,
             tmp_dir);
    assert_int_equal(server_start(&sv, "wslong", args), 0);
    const char *text = "One two three four five six seven eight nine ten. Eleven twelve thirteen "
                       "fourteen fifteen sixteen seventeen eighteen nineteen twenty. Twenty-one "
                       "twenty-two twenty-three twenty-four twenty-five twenty-six twenty-seven "
                       "twenty-eight twenty-nine thirty. Thirty-one thirty-two thirty-three "
                       "thirty-four thirty-five thirty-six thirty-seven thirty-eight thirty-nine "
                       "forty. Forty-one forty-two forty-three forty-four forty-five.";
    cJSON *o = client(&sv, "", "stream '%s' '%s' %s", CONFIG, text, tmp_dir);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "sentences")), 5);
    assert_int_equal(cJSON_GetObjectItem(o, "close")->valueint, 1000);
    cJSON_Delete(o);
    o = client(&sv, "", "idle");
    assert_int_equal(cJSON_GetObjectItem(o, "close")->valueint, 1008);
    cJSON_Delete(o);
    assert_int_equal(server_stop(&sv), 0);
}

/* The style fields of POST /v1/audio/speech: refused values name their field, a tag the model
 * cannot honour is a warning (header, SSE event) or with strict_markup a 400 naming input. */
static void test_http_style(void **state) {
    (void)state;
    char cmd[2048];
    const char *base = "curl -s --max-time 60 -o %s -D %s -w '%%{http_code}' "
                       "http://127.0.0.1:%d/v1/audio/speech -d '%s' > %s";
    struct {
        const char *body, *status, *needle;
    } cases[] = {
        {"{\"input\":\"Hi [sad] there.\",\"max_seconds\":0.3}", "200",
         "X-Qvoice-Warning: tag [sad]"},
        {"{\"input\":\"Hi [sad] there.\",\"strict_markup\":true,\"max_seconds\":0.3}", "400",
         "\"param\":\"input\""},
        {"{\"input\":\"Hi\",\"style\":\"sad\"}", "400", "\"param\":\"style\""},
        {"{\"input\":\"Hi\",\"style_strength\":5}", "400", "\"param\":\"style_strength\""},
        {"{\"input\":\"Hi\",\"strict_markup\":1}", "400", "\"param\":\"strict_markup\""},
        {"{\"input\":\"Hi [sad] there.\",\"max_seconds\":0.3,\"stream_format\":\"sse\"}", "200",
         "event: speech.audio.warning"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, base, tmp_path("out"), tmp_path("hdr"), g_srv.port, cases[i].body,
                 tmp_path("code"));
        assert_int_equal(sh("%s", cmd), 0);
        char code[16];
        slurp(tmp_path("code"), code, sizeof code);
        assert_string_equal(code, cases[i].status);
        assert_true(file_has(tmp_path("hdr"), cases[i].needle) ||
                    file_has(tmp_path("out"), cases[i].needle));
    }
}

/* response_format aac on the WebSocket: each sentence one tagged ADTS stream (ID3v2, then frames)
 * that ffprobe reads as 24 kHz mono AAC. */
static void test_aac(void **state) {
    (void)state;
    if (!g_npm || sh("ffprobe -version >/dev/null 2>&1")) skip();
    assert_int_equal(sh("rm -f %s/s*.pcm", tmp_dir), 0);
    cJSON *o = client(&g_srv, "", "stream '%s' '%s' %s",
                      "{\"response_format\":\"aac\",\"seed\":7,\"max_seconds\":0.4,"
                      "\"split_granularity\":\"sentence\"}",
                      "Hello there. How are you?", tmp_dir);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "sentences")), 2);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "errors")), 0);
    cJSON_Delete(o);
    for (int i = 0; i < 2; i++) {
        char p[64];
        snprintf(p, sizeof p, "s%d.pcm", i); /* the client's name for a sentence's bytes */
        assert_int_equal(sh("head -c 3 %s | grep -q ID3", tmp_path(p)), 0);
        assert_int_equal(sh("ffprobe -v error -show_entries stream=codec_name,sample_rate,channels "
                            "-of csv=p=0 %s | grep -qx 'aac,24000,1'",
                            tmp_path(p)),
                         0);
    }
}

QVT_MAIN(group_setup, group_teardown, test_reader, test_corpus_replay, test_stream,
         test_split_granularity, test_aac, test_markup_spans, test_errors, test_abort, test_auth,
         test_long_session, test_http_style)
