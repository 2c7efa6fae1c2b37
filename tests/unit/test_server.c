/* test_server.c — bin/qvoice-server end to end with real clients: curl, the official openai npm
 * package (tests/server/openai_speech.mjs, installed into tests/server/node_modules by npm here),
 * and Python's http.client (tests/server/client.py: multipart uploads, a truncated body, slow
 * clients, a disconnect mid-stream), and scripts/serve-lb.sh (nginx balancing two servers, one
 * killed mid-run, its active checker). Servers run the tiny synthetic models
 * ($QVOICE_CACHE/tiny-cv, tiny-base) on 127.0.0.1 with a free port they pick (--listen
 * 127.0.0.1:0, read from the log);
 * every client call has a time limit and every server is stopped (SIGTERM, then SIGKILL) by the
 * test that started it.
 */
#include <cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/helpers/qvf_sample.h"
#include "tests/unit/helpers/server_proc.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/wav.h"
#include "tests/unit/helpers/tmpdir.h"
#include "util/slowdown.h"
#include "voicefmt/qvf.h"

#define CLIP "tests/audio/en_ohenry_chenevert.wav"
#define VOICE_06B "voices/ohenry.qvoice" /* made for 0.6B: fits no tiny model */
/* n of a wait for real work (seconds, polls): longer in a sanitizer build, same checks */
#define WAIT(n) ((n) * QVU_SLOWDOWN)

static char g_cv[512], g_base[512];
static server g_srv; /* the shared server: tiny-cv, max 200 chars, 1 MB uploads, 10 s timeout */
static server g_extra; /* one started by a test (stopped by the teardown if a test fails) */
static server g_extra2; /* a second one, sharing a voices directory with g_extra */
static char g_voice[512]; /* a tiny-base clone of the bundled clip: fits tiny-cv */
static int g_npm;    /* the openai package is installed */
static char g_body[1 << 20]; /* a batch reply carries base64 audio */
static char g_live_tmp[1024]; /* a running process's temporary in the shared voices dir */
static int g_leaks, g_replies; /* JSON replies naming a server path, JSON replies seen */

/* Counts a JSON reply in g_body, and a leak when it names the test's directory or a model's. */
static void leak_check(void) {
    const char *j = strchr(g_body, '{');
    if (!j || (strncmp(g_body, "{", 1) && strncmp(g_body + 3, " {", 2))) return;
    g_replies++;
    if (strstr(j, tmp_dir) || strstr(j, g_cv) || strstr(j, g_base)) {
        g_leaks++;
        print_message("leak: %.300s\n", j);
    }
}

/* curl with a time limit: the HTTP status (0: no answer); the body goes to g_body (and to out
 * when not NULL). args is the rest of the curl command line, URLs written SRV/path. */
static int curl(const server *sv, const char *out, const char *fmt, ...) {
    char args[4096], cmd[8192], code[32], body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(body, sizeof body, "%s", out ? out : tmp_path("body"));
    snprintf(cmd, sizeof cmd, "curl -s --max-time %d -o %s -w '%%{http_code}' %s > %s", WAIT(120),
             body, args, tmp_path("code"));
    char full[8400], *at;
    snprintf(full, sizeof full, "%s", cmd);
    while ((at = strstr(full, "SRV/"))) { /* SRV/path: http://127.0.0.1:PORT/path */
        char rest[8400];
        snprintf(rest, sizeof rest, "%s", at + 3);
        snprintf(at, sizeof full - (size_t)(at - full), "http://127.0.0.1:%d%s", sv->port, rest);
    }
    if (system(full) == -1) return 0;
    slurp(tmp_path("code"), code, sizeof code);
    slurp(body, g_body, sizeof g_body);
    leak_check();
    return atoi(code);
}

/* The "code" of an OpenAI-style error in g_body ("" when the body is not one). */
static const char *error_code(void) {
    static char code[64];
    cJSON *o = cJSON_Parse(g_body), *e = cJSON_GetObjectItem(o, "error");
    cJSON *c = cJSON_GetObjectItem(e, "code");
    int shaped = cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
                 cJSON_IsString(cJSON_GetObjectItem(e, "type")) &&
                 cJSON_HasObjectItem(e, "param") && cJSON_IsString(c);
    snprintf(code, sizeof code, "%s", shaped ? c->valuestring : "");
    cJSON_Delete(o);
    return code;
}

static int ready_flag(const server *sv, const char *key) {
    if (curl(sv, NULL, "SRV/ready") != 200) return -1;
    cJSON *o = cJSON_Parse(g_body);
    int v = cJSON_IsTrue(cJSON_GetObjectItem(o, key));
    cJSON_Delete(o);
    return v;
}

/* Value of the metrics sample line starting with prefix, or -1. */
static double metric(const server *sv, const char *prefix) {
    if (curl(sv, NULL, "SRV/metrics") != 200) return -1;
    char line[256];
    snprintf(line, sizeof line, "\n%s", prefix); /* not the # HELP line */
    const char *p = strstr(g_body, line);
    return p ? atof(p + strlen(line)) : -1;
}

static int count_files(const char *dir, const char *needle) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -c -- '%s' > %s", dir, needle, tmp_path("n"));
    if (system(cmd) == -1) return -1;
    char n[32];
    slurp(tmp_path("n"), n, sizeof n);
    return atoi(n);
}

static int group_setup(void **state) {
    if (tmpdir_setup(state)) return -1;
    const char *cache = test_cache_dir();
    snprintf(g_cv, sizeof g_cv, "%s/tiny-cv", cache);
    snprintf(g_base, sizeof g_base, "%s/tiny-base", cache);
    /* leftovers of a killed server (PID 999999999, above any pid_max): removed at start; those of
     * a running one (this test's PID) are kept */
    char dir[512], live[512];
    snprintf(dir, sizeof dir, "%s/voices", tmp_dir);
    mkdir(dir, 0755);
    tmp_write(tmp_path("voices/.upload-999999999-abc123"), "x", 1);
    tmp_write(tmp_path("voices/.new-999999999-abc123"), "x", 1);
    tmp_write(tmp_path("voices/.0123.qvoice.tmp.999999999.1"), "x", 1);
    snprintf(live, sizeof live, "voices/.upload-%d-abc123", (int)getpid());
    tmp_write(tmp_path(live), "x", 1);
    snprintf(g_live_tmp, sizeof g_live_tmp, "%s", tmp_path(live));
    snprintf(g_voice, sizeof g_voice, "%s/tiny.qvoice", tmp_dir);
    if (sh("bin/clone -m %s %s -o %s -n tiny --consent test >/dev/null 2>&1", g_base, CLIP,
           g_voice))
        return -1;
    g_npm = sh("cd tests/server && timeout 300 npm install --no-audit --no-fund --silent "
               ">/dev/null 2>&1") == 0;
    char args[2048];
    snprintf(args, sizeof args,
             "-m %s --voices %s/voices --max-text-chars 200 --max-upload-mb 1 --timeout 10", g_cv,
             tmp_dir);
    return server_start(&g_srv, "main", args);
}

static int group_teardown(void **state) {
    /* the shared server exits 0: a sanitizer report (make tsan, make asan) would make it 66 or 1 */
    int rc = g_srv.pid > 0 ? server_stop(&g_srv) : 0;
    if (rc) fprintf(stderr, "test_server: the shared server exited %d (see its log)\n", rc);
    server_stop(&g_extra);
    server_stop(&g_extra2);
    return tmpdir_teardown(state) || rc ? -1 : 0;
}

/* ==== routes, errors ========================================================================= */

static void test_routes(void **state) {
    (void)state;
    assert_int_equal(curl(&g_srv, NULL, "SRV/health"), 200);
    assert_non_null(strstr(g_body, "\"ok\""));
    assert_int_equal(curl(&g_srv, NULL, "SRV/ready"), 200);
    assert_non_null(strstr(g_body, "\"tiny-cv\""));
    assert_int_equal(curl(&g_srv, NULL, "SRV/nope"), 404);
    assert_string_equal(error_code(), "not_found");
    assert_int_equal(curl(&g_srv, NULL, "-X PUT SRV/v1/audio/speech"), 405);
    assert_string_equal(error_code(), "method_not_allowed");
    /* the dead server's temporaries planted before start are gone, the live one's kept, nothing
     * else was created */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/voices", tmp_dir);
    assert_int_equal(count_files(dir, "."), 1);
    assert_int_equal(unlink(g_live_tmp), 0);
}

static void bad_speech(const char *json, int status, const char *code) {
    tmp_write(tmp_path("req.json"), json, strlen(json));
    int got = curl(&g_srv, NULL, "-H 'Content-Type: application/json' --data-binary @%s "
                                 "SRV/v1/audio/speech", tmp_path("req.json"));
    if (got != status || strcmp(error_code(), code))
        fail_msg("%.80s: expected %d %s, got %d %s", json, status, code, got, g_body);
}

static void test_speech_bad_input(void **state) {
    (void)state;
    bad_speech("{\"input\": \"hi\", ", 400, "invalid_json");
    bad_speech("[1,2]", 400, "invalid_json");
    bad_speech("", 400, "invalid_json");                      /* no body */
    bad_speech("{\"input\": \"hi\"} x", 400, "invalid_json"); /* bytes after the value */
    bad_speech("{\"input\": \"hi\", \"model\": 5}", 400, "invalid_type");
    bad_speech("{\"input\": \"hi\", \"stream_format\": 5}", 400, "invalid_type");
    bad_speech("{\"input\": \"hi\", \"max_seconds\": \"x\"}", 400, "invalid_type");
    bad_speech("{\"input\": 5}", 400, "invalid_type");
    bad_speech("{\"input\": \"\"}", 400, "invalid_value");
    bad_speech("{\"voice\": \"ryan\"}", 400, "invalid_value");
    bad_speech("{\"input\": \"hi\", \"voice\": \"nobody\"}", 400, "voice_not_found");
    bad_speech("{\"input\": \"hi\", \"voice\": [\"ryan\"]}", 400, "invalid_type");
    bad_speech("{\"input\": \"hi\", \"model\": \"gpt-9\"}", 404, "model_not_found");
    bad_speech("{\"input\": \"hi\", \"speed\": 4.5}", 400, "invalid_value"); /* 0.25..4 */
    bad_speech("{\"input\": \"hi\", \"speed\": 0.2}", 400, "invalid_value");
    bad_speech("{\"input\": \"hi\", \"speed\": \"fast\"}", 400, "invalid_type");
    bad_speech("{\"input\": \"hi\", \"response_format\": \"aiff\"}", 400, "invalid_value");
    /* vLLM-Omni's fields: each honoured or refused naming itself, never ignored */
    static const struct {
        const char *json, *code, *param;
    } omni[] = {
        {"\"sample_rate\": 7999", "invalid_value", "sample_rate"},
        {"\"sample_rate\": 16000.5", "invalid_value", "sample_rate"},
        {"\"response_format\": \"opus\", \"sample_rate\": 44100", "unsupported_value",
         "sample_rate"},
        {"\"initial_codec_chunk_frames\": 4", "unsupported_value", "initial_codec_chunk_frames"},
        {"\"non_streaming_mode\": false", "unsupported_value", "non_streaming_mode"},
        {"\"non_streaming_mode\": 1", "invalid_type", "non_streaming_mode"},
        {"\"task_type\": \"VoiceDesign\"", "invalid_value", "task_type"},
        {"\"task_type\": \"Base\"", "invalid_value", "task_type"},
        {"\"task_type\": \"Clone\"", "invalid_value", "task_type"},
        {"\"speaker\": \"ryan\", \"voice\": \"serena\"", "invalid_value", "speaker"},
        {"\"stream\": false, \"stream_format\": \"sse\"", "invalid_value", "stream"},
        {"\"stream\": \"yes\"", "invalid_type", "stream"},
        {"\"stream\": true, \"response_format\": \"mp3\"", "unsupported_format", "response_format"},
        {"\"ref_text\": \"Hello.\"", "invalid_value", "ref_text"},
        {"\"x_vector_only_mode\": true", "invalid_value", "x_vector_only_mode"},
        {"\"ref_audio\": \"data:audio/wav;base64,UklGRg==\"", "invalid_value", "ref_text"},
        {"\"ref_audio\": \"data:audio/wav;base64,UklGRg==\", \"x_vector_only_mode\": true",
         "unsupported_value", "ref_audio"}, /* no clone model here */
        {"\"ref_audio\": \"x\", \"x_vector_only_mode\": true, \"voice\": \"ryan\"", "invalid_value",
         "voice"},
        {"\"speaker_embedding\": [1, 2, 3]", "invalid_value", "speaker_embedding"},
        /* a field of neither API, a name in another case, a field given twice, the WebSocket's
         * own: never ignored */
        {"\"colour\": \"red\"", "unknown_field", "colour"},
        {"\"Input\": \"x\"", "unknown_field", "Input"},
        {"\"input\": \"again\"", "duplicate_field", "input"},
        {"\"stream_audio\": true", "unknown_field", "stream_audio"},
        /* vLLM-Omni's fields of its other models and features: refused by name */
        {"\"ref_audio_2\": \"x\"", "unsupported_value", "ref_audio_2"},
        {"\"word_timestamps\": true", "unsupported_value", "word_timestamps"},
        {"\"extra_params\": {}", "unsupported_value", "extra_params"},
        {"\"voice\": {\"id\": 5}", "invalid_value", "voice"},
    };
    for (size_t i = 0; i < sizeof omni / sizeof *omni; i++) {
        char json[512];
        snprintf(json, sizeof json, "{\"input\": \"hi\", %s}", omni[i].json);
        bad_speech(json, 400, omni[i].code);
        cJSON *o = cJSON_Parse(g_body), *e = cJSON_GetObjectItem(o, "error");
        const char *param = cJSON_GetStringValue(cJSON_GetObjectItem(e, "param"));
        if (!param || strcmp(param, omni[i].param))
            fail_msg("%s: param %s, expected %s", omni[i].json, param ? param : "-", omni[i].param);
        cJSON_Delete(o);
    }
    /* their absent values are no request: null, word_timestamps false; OpenAI's voice object */
    assert_int_equal(curl(&g_srv, NULL, "-d '{\"input\":\"Hi.\",\"voice\":{\"id\":\"ryan\"},"
                                        "\"max_seconds\":0.3,\"word_timestamps\":false,"
                                        "\"ref_audio_2\":null}' SRV/v1/audio/speech"),
                     200);
    /* vLLM-Omni's stream: true alone is SSE */
    assert_int_equal(curl(&g_srv, NULL, "-D %s -d '{\"input\":\"Hi.\",\"max_seconds\":0.3,"
                                        "\"response_format\":\"pcm\",\"stream\":true}' "
                                        "SRV/v1/audio/speech",
                          tmp_path("sse.hdr")),
                     200);
    assert_true(file_has(tmp_path("sse.hdr"), "text/event-stream"));
    assert_non_null(strstr(g_body, "event: speech.audio.done"));
    bad_speech("{\"input\": \"hi\", \"colour\": \"red\"}", 400, "unknown_field");
    assert_non_null(strstr(g_body, "\"message\":\"unknown field 'colour'\""));
    bad_speech("{\"input\": \"hi\", \"response_format\": \"flac\", \"stream_format\": \"sse\"}", 400,
               "unsupported_format");
    bad_speech("{\"input\": \"hi\", \"stream_format\": \"chunks\"}", 400, "invalid_value");
    bad_speech("{\"input\": \"hi\", \"language\": \"klingon\"}", 400, "invalid_value");
    bad_speech("{\"input\": \"hi\", \"seed\": -1}", 400, "invalid_value");
    bad_speech("{\"input\": \"hi\", \"temperature\": 0}", 400, "invalid_value");
    bad_speech("{\"input\": \"hi\", \"max_new_tokens\": 2.5}", 400, "invalid_value");
    char big[1024];
    snprintf(big, sizeof big, "{\"input\": \"%0201d\"}", 0); /* 201 characters > 200 */
    bad_speech(big, 400, "input_too_long");
    /* a body over the limit (8 bytes per character + 64 KiB) is refused by its length */
    static char huge[80000];
    memset(huge, ' ', sizeof huge - 1);
    memcpy(huge, "{\"input\":\"hi\"", 13);
    huge[sizeof huge - 2] = '}';
    bad_speech(huge, 413, "request_too_large");
    if (!g_npm) skip();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "node tests/server/openai_speech.mjs http://127.0.0.1:%d bad-voice",
             g_srv.port);
    assert_int_equal(sh("%s", cmd), 0);
}

/* ==== voice library ========================================================================== */

static int py(const server *sv, const char *fmt, ...) {
    char args[2048], cmd[4096 + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "timeout %d python3 tests/server/client.py %d %s > %s 2>&1",
             WAIT(120), sv->port, args, tmp_path("py.out"));
    int st = system(cmd);
    slurp(tmp_path("py.out"), g_body, sizeof g_body);
    leak_check();
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* g_voice rewritten to path with edit applied (its META name, its x-vector). */
static void edited_voice(const char *path, const char *name, float x0) {
    qvf_voice *v;
    char err[256];
    assert_int_equal(qvf_read_file(g_voice, 0, &v, err, sizeof err), 0);
    if (name) assert_int_equal(qvf_meta_set(v, "name", name), 0);
    v->xvector[0] = x0;
    int rc = qvf_write_file(v, path, 4, err, sizeof err);
    qvf_voice_free(v);
    if (rc) fail_msg("%s", err);
}

static void test_voices(void **state) {
    (void)state;
    char dir[512], stored[1024], id[65] = "";
    snprintf(dir, sizeof dir, "%s/voices", tmp_dir);
    assert_int_equal(py(&g_srv, "upload %s name=henry", g_voice), 0);
    assert_true(!strncmp(g_body, "400 ", 4) && strstr(g_body, "\"consent\""));
    assert_int_equal(py(&g_srv, "upload %s name=henry consent='I agree'", g_voice), 0);
    assert_true(!strncmp(g_body, "200 ", 4));
    cJSON *o = cJSON_Parse(g_body + 4);
    assert_non_null(o);
    snprintf(id, sizeof id, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")));
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")), "henry");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "consent")));
    cJSON_Delete(o);
    /* stored under the SHA-256 of its bytes, without its text side (test_textside) */
    snprintf(stored, sizeof stored, "%s/%s.qvpart", dir, id);
    assert_int_equal(access(stored, F_OK), 0);
    /* the same voice again: the same id, no conflict */
    assert_int_equal(py(&g_srv, "upload %s name=henry consent=yes", g_voice), 0);
    assert_non_null(strstr(g_body, id));
    /* vLLM-Omni's upload reply: success and voice {name, consent, created_at, file_size,
     * mime_type, ref_text, speaker_description}; a name uploaded again with other bytes replaces
     * its voice (the old id is gone, one "henry" listed) */
    edited_voice(tmp_path("henry2.qvoice"), "henry", 0.125f);
    assert_int_equal(py(&g_srv, "upload %s name=henry consent=agreed "
                                "'speaker_description=warm narrator'",
                        tmp_path("henry2.qvoice")),
                     0);
    assert_true(!strncmp(g_body, "200 ", 4));
    o = cJSON_Parse(g_body + 4);
    cJSON *voice = cJSON_GetObjectItem(o, "voice");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "success")));
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "replaced")), id);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(voice, "name")), "henry");
    /* a .qvoice keeps its own consent record (bin/clone --consent test) */
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(voice, "consent")), "test");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(voice, "speaker_description")),
                        "warm narrator");
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(voice, "created_at")) &&
                cJSON_IsNumber(cJSON_GetObjectItem(voice, "file_size")) &&
                cJSON_IsString(cJSON_GetObjectItem(voice, "mime_type")));
    assert_null(cJSON_GetObjectItem(voice, "ref_text")); /* omitted: cloned without a transcript */
    char old_id[65];
    snprintf(old_id, sizeof old_id, "%s", id);
    snprintf(id, sizeof id, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")));
    assert_string_not_equal(id, old_id);
    cJSON_Delete(o);
    assert_int_equal(curl(&g_srv, NULL, "SRV/v1/audio/voices/%s", old_id), 404);
    assert_int_equal(curl(&g_srv, NULL, "SRV/v1/audio/voices"), 200);
    {
        cJSON *l = cJSON_Parse(g_body), *x;
        int n_henry = 0, described = 0;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(l, "uploaded_voices")) {
            n_henry += !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(x, "name")), "henry");
            const char *d =
                cJSON_GetStringValue(cJSON_GetObjectItem(x, "speaker_description"));
            described += d && !strcmp(d, "warm narrator");
        }
        assert_int_equal(n_henry, 1);
        assert_int_equal(described, 1);
        cJSON_Delete(l);
    }
    /* and back to the first file (the rest of this test deletes it by id) */
    assert_int_equal(py(&g_srv, "upload %s name=henry consent='I agree'", g_voice), 0);
    assert_non_null(strstr(g_body, old_id));
    snprintf(id, sizeof id, "%s", old_id);
    assert_int_equal(curl(&g_srv, NULL, "SRV/v1/audio/voices"), 200);
    assert_non_null(strstr(g_body, "\"henry\""));
    assert_non_null(strstr(g_body, "\"ryan\"")); /* presets of tiny-cv */
    { /* vLLM-Omni's shape: names of presets and uploads in "voices", uploads in "uploaded_voices"
       */
        cJSON *l = cJSON_Parse(g_body), *names = cJSON_GetObjectItem(l, "voices"), *x;
        int henry = 0, ryan = 0;
        cJSON_ArrayForEach(x, names) {
            henry |= !strcmp(cJSON_GetStringValue(x), "henry");
            ryan |= !strcmp(cJSON_GetStringValue(x), "ryan");
        }
        assert_true(henry && ryan);
        cJSON *up = cJSON_GetObjectItem(l, "uploaded_voices");
        assert_true(cJSON_IsArray(up) && cJSON_GetArraySize(up) >= 1);
        assert_int_equal(cJSON_GetArraySize(up),
                         cJSON_GetArraySize(cJSON_GetObjectItem(l, "data")));
        cJSON_Delete(l);
    }
    assert_int_equal(curl(&g_srv, NULL, "SRV/v1/models"), 200);
    assert_non_null(strstr(g_body, "\"object\":\"list\""));
    assert_non_null(strstr(g_body, "\"id\":\"tiny-cv\",\"object\":\"model\""));
    assert_non_null(strstr(g_body, "\"root\":\"tiny-cv\",\"parent\":null"));
    assert_int_equal(curl(&g_srv, NULL, "-X POST SRV/v1/models"), 405);
    assert_int_equal(curl(&g_srv, NULL, "SRV/v1/audio/voices/henry"), 200);
    assert_non_null(strstr(g_body, id));
    assert_int_equal(curl(&g_srv, tmp_path("dl.qvoice"), "'SRV/v1/audio/voices/%s?download=1'", id),
                     200);
    assert_int_equal(sh("test \"$(sha256sum < %s | cut -c1-64)\" = %s", tmp_path("dl.qvoice"), id),
                     0);
    /* bad uploads */
    assert_int_equal(py(&g_srv, "truncated %s name=x consent=yes", g_voice), 0);
    assert_true(!strncmp(g_body, "400 ", 4) && strstr(g_body, "truncated"));
    assert_int_equal(sh("head -c 3000 %s > %s", g_voice, tmp_path("cut.qvoice")), 0);
    assert_int_equal(py(&g_srv, "upload %s consent=yes", tmp_path("cut.qvoice")), 0);
    assert_true(!strncmp(g_body, "400 ", 4) && strstr(g_body, "invalid_voice_file"));
    assert_int_equal(sh("head -c 1200000 /dev/zero > %s", tmp_path("big.wav")), 0);
    /* over --max-upload-mb: refused by its Content-Length, or while it arrives (chunked: the
     * rest of the body is read and dropped, then the JSON error) */
    assert_int_equal(curl(&g_srv, NULL, "-F audio_sample=@%s -F consent=yes SRV/v1/audio/voices",
                          tmp_path("big.wav")), 413);
    assert_int_equal(curl(&g_srv, NULL,
                          "-H 'Transfer-Encoding: chunked' -F audio_sample=@%s "
                          "-F consent=yes SRV/v1/audio/voices",
                          tmp_path("big.wav")),
                     413);
    assert_string_equal(error_code(), "invalid_upload");
    /* an empty file, two file parts, a field over 16 KiB: JSON errors */
    tmp_write(tmp_path("empty.wav"), "", 0);
    assert_int_equal(curl(&g_srv, NULL, "-F audio_sample=@%s -F consent=yes SRV/v1/audio/voices",
                          tmp_path("empty.wav")),
                     400);
    assert_string_equal(error_code(), "missing_field");
    assert_int_equal(curl(&g_srv, NULL,
                          "-F audio_sample=@%s -F audio=@%s -F consent=yes "
                          "SRV/v1/audio/voices",
                          g_voice, g_voice),
                     400);
    assert_string_equal(error_code(), "invalid_upload");
    assert_non_null(strstr(g_body, "one audio file"));
    static char longname[17000];
    memset(longname, 'x', sizeof longname);
    tmp_write(tmp_path("longname"), longname, sizeof longname);
    assert_int_equal(curl(&g_srv, NULL,
                          "-F audio_sample=@%s -F 'name=<%s' -F consent=yes "
                          "SRV/v1/audio/voices",
                          g_voice, tmp_path("longname")),
                     400);
    assert_string_equal(error_code(), "invalid_upload");
    assert_int_equal(py(&g_srv, "upload %s consent=yes name=%064d", g_voice, 0), 0);
    assert_true(!strncmp(g_body, "400 ", 4) && strstr(g_body, "\"name\""));
    assert_int_equal(py(&g_srv, "upload %s consent=yes", VOICE_06B), 0); /* another model's voice */
    assert_true(!strncmp(g_body, "400 ", 4) && strstr(g_body, "voice_unusable"));
    /* named as the client sent it, once; the server's own upload path is not shown */
    assert_true(strstr(g_body, "ohenry.qvoice: fits none") && !strstr(g_body, ".upload-"));
    assert_int_equal(curl(&g_srv, NULL, "-F x=1 SRV/v1/audio/voices"), 400);
    assert_string_equal(error_code(), "missing_field");
    assert_int_equal(curl(&g_srv, NULL, "-H 'Content-Type: text/plain' -d x SRV/v1/audio/voices"), 400);
    assert_string_equal(error_code(), "invalid_content_type");
    /* delete: OpenAI's deleted object with vLLM-Omni's success and message */
    assert_int_equal(curl(&g_srv, NULL, "-X DELETE SRV/v1/audio/voices/%s", id), 200);
    o = cJSON_Parse(g_body);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "success")) &&
                cJSON_IsTrue(cJSON_GetObjectItem(o, "deleted")));
    assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(o, "message")),
                           "deleted successfully"));
    cJSON_Delete(o);
    assert_int_equal(curl(&g_srv, NULL, "-X DELETE SRV/v1/audio/voices/%s", id), 404);
    assert_string_equal(error_code(), "voice_not_found");
    /* and vLLM-Omni's 404: success false, FastAPI's detail "Voice 'NAME' not found" */
    o = cJSON_Parse(g_body);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(o, "success")));
    assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(o, "detail")), "not found"));
    cJSON_Delete(o);
    /* no temporaries left by any of the above; the text side went with the last voice */
    assert_int_equal(count_files(dir, ""), 1);
    snprintf(stored, sizeof stored, "%s/.textside", dir);
    assert_int_equal(count_files(stored, "qvoice-part"), 0);
}

static void test_slow_client(void **state) {
    (void)state;
    /* dropped after the idle --timeout 10, before the total receive time (60 s): no reply */
    assert_int_equal(py(&g_srv, "slow"), 0);
    assert_string_equal(g_body, "closed\n");
    assert_int_equal(py(&g_srv, "slowbody"), 0); /* a body that stops arriving: the same */
    assert_string_equal(g_body, "closed\n");
    assert_int_equal(curl(&g_srv, NULL, "SRV/health"), 200);
}

/* One trickle run (client.py trickle): its JSON summary. */
static cJSON *trickle(const server *sv, int n, int addrs, int seconds) {
    if (py(sv, "trickle %d %d %d %d", n, addrs, seconds, sv->probe)) return NULL;
    cJSON *o = cJSON_Parse(g_body);
    if (!o) fail_msg("trickle: %s", g_body);
    return o;
}

static double num(cJSON *o, const char *k, int i) {
    cJSON *x = cJSON_GetObjectItem(o, k);
    return cJSON_GetNumberValue(cJSON_IsArray(x) ? cJSON_GetArrayItem(x, i) : x);
}

/* 100 sockets sending a header byte every 0.25 s (and reconnecting when cut): each is cut by the
 * total receive time (3 s here), not kept by the idle timeout; one address holds at most its 16;
 * when they come from 10 addresses and take all 64 connections, the probe listener still answers
 * every probe. */
static void test_slow_attack(void **state) {
    (void)state;
    char args[2048];
    snprintf(args, sizeof args,
             "-m %s --voices %s/voices --receive-timeout 3 --max-connections 64 "
             "--max-connections-per-ip 16 --probe-listen 127.0.0.1:0",
             g_cv, tmp_dir);
    assert_int_equal(server_start(&g_extra, "slow", args), 0);
    assert_true(g_extra.probe > 0);
    /* headers, then a body, not received within the 3 s: a 408 with the JSON error, then cut */
    assert_int_equal(py(&g_extra, "slow"), 0);
    print_message("slow headers: %s", g_body);
    assert_int_equal(atoi(g_body), 408);
    memmove(g_body, g_body + 4, strlen(g_body + 4) + 1);
    assert_string_equal(error_code(), "request_timeout");
    assert_int_equal(py(&g_extra, "slowbody"), 0);
    assert_int_equal(atoi(g_body), 408);
    memmove(g_body, g_body + 4, strlen(g_body + 4) + 1);
    assert_string_equal(error_code(), "request_timeout");
    cJSON *o = trickle(&g_extra, 100, 1, 8);
    assert_non_null(o);
    print_message("one address: %s\n", g_body);
    assert_true(num(o, "peak_per_address", 0) <= 16);
    assert_true(num(o, "longest_s", 0) < 6.5); /* 3 s, a generous margin; unbounded before */
    assert_true(num(o, "main_port", 1) > 0 && num(o, "main_port", 0) == num(o, "main_port", 1));
    cJSON_Delete(o);
    o = trickle(&g_extra, 100, 10, 8);
    assert_non_null(o);
    print_message("ten addresses: %s\n", g_body);
    assert_true(num(o, "longest_s", 0) < 6.5);
    assert_true(num(o, "probe_port", 1) > 0 &&
                num(o, "probe_port", 0) == num(o, "probe_port", 1));
    cJSON_Delete(o);
    /* the probe listener serves the probes only */
    server probe = g_extra;
    probe.port = g_extra.probe;
    assert_int_equal(curl(&probe, NULL, "SRV/ready"), 200);
    assert_int_equal(curl(&probe, NULL, "SRV/v1/audio/voices"), 404);
    assert_true(metric(&probe, "qvoice_slow_clients_total ") > 0);
    /* a chunked speech body over the limit is refused while it arrives: 413, and the client
     * stops sending long before its 20 MB are out */
    assert_int_equal(sh("head -c 20000000 /dev/zero | tr '\\0' ' ' > %s", tmp_path("big.json")), 0);
    assert_int_equal(sh("curl -s --max-time 60 -o %s -w '%%{http_code} %%{size_upload}' "
                        "-H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' "
                        "--data-binary @%s http://127.0.0.1:%d/v1/audio/speech > %s",
                        tmp_path("body"), tmp_path("big.json"), g_extra.port, tmp_path("code")),
                     0);
    char code[64];
    slurp(tmp_path("code"), code, sizeof code);
    slurp(tmp_path("body"), g_body, sizeof g_body);
    print_message("chunked 20 MB: %s\n", code);
    assert_int_equal(atoi(code), 413);
    assert_true(atof(strchr(code, ' ') + 1) < 10e6);
    assert_string_equal(error_code(), "request_too_large");
    assert_int_equal(server_stop(&g_extra), 0);
}

static void test_auth(void **state) {
    (void)state;
    char args[2048];
    tmp_write(tmp_path("keys"), "# keys\nsecret-1\nsecret-2\n", 25);
    snprintf(args, sizeof args, "-m %s --voices %s/voices --api-key-file %s", g_cv, tmp_dir,
             tmp_path("keys"));
    assert_int_equal(server_start(&g_extra, "auth", args), 0);
    assert_int_equal(curl(&g_extra, NULL, "SRV/v1/audio/voices"), 401);
    assert_string_equal(error_code(), "invalid_api_key");
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer secret-3' SRV/v1/audio/voices"), 401);
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer secret-2' SRV/v1/audio/voices"), 200);
    assert_int_equal(curl(&g_extra, NULL, "SRV/health"), 200); /* probes need no key */
    assert_int_equal(server_stop(&g_extra), 0);
    /* a missing key file is a start-up error naming it */
    assert_int_equal(sh("bin/qvoice-server -m %s --voices %s/voices --api-key-file %s/none "
                        "2>%s; test $? = 1", g_cv, tmp_dir, tmp_dir, tmp_path("err")), 0);
    assert_true(file_has(tmp_path("err"), "/none: No such file"));
    assert_int_equal(sh("bin/qvoice-server --voices x 2>/dev/null; test $? = 2"), 0);
    assert_int_equal(sh("bin/qvoice-server --help | grep -q '^SYNOPSIS'"), 0);
}

/* Keys with owners: a user key's uploads are its own (others neither see nor delete them), an
 * admin's are shared and only admins delete them; a plain line is an admin key; a 2000-byte key
 * is one key. */
static void test_key_owners(void **state) {
    (void)state;
    static char keys[4096], longkey[2001];
    memset(longkey, 'k', 2000);
    int n = snprintf(keys, sizeof keys, "alice:user:ka\nbob:user:kb\nroot:admin:kr\n%s\n",
                     longkey);
    tmp_write(tmp_path("owners"), keys, (size_t)n);
    char args[2048];
    assert_int_equal(sh("rm -rf %s/ov && mkdir %s/ov", tmp_dir, tmp_dir), 0);
    snprintf(args, sizeof args, "-m %s --voices %s/ov --api-key-file %s", g_cv, tmp_dir,
             tmp_path("owners"));
    assert_int_equal(server_start(&g_extra, "owners", args), 0);
    const char *up = "-H 'Authorization: Bearer %s' -F audio_sample=@%s -F name=%s -F consent=yes "
                     "SRV/v1/audio/voices";
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer %s' SRV/v1/audio/voices",
                          longkey), 200);
    longkey[1022] = 0; /* its first 1022 bytes were a key of their own */
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer %s' SRV/v1/audio/voices",
                          longkey), 401);
    longkey[1022] = 'k';
    assert_int_equal(curl(&g_extra, NULL, up, "ka", g_voice, "mine"), 200);
    assert_int_equal(curl(&g_extra, NULL, up, "kr", g_voice, "shared"), 200);
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer kb' SRV/v1/audio/voices"),
                     200);
    assert_null(strstr(g_body, "\"mine\""));
    assert_non_null(strstr(g_body, "\"shared\""));
    assert_null(strstr(g_body, "\"owner\"")); /* owners are shown to admins only */
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer ka' SRV/v1/audio/voices"),
                     200);
    assert_non_null(strstr(g_body, "\"mine\""));
    assert_non_null(strstr(g_body, "\"deletable\":true"));
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer kb' -H 'Content-Type: "
                                          "application/json' -d '{\"input\":\"hi\",\"voice\":"
                                          "\"mine\"}' SRV/v1/audio/speech"),
                     400);
    assert_string_equal(error_code(), "voice_not_found");
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer kb' -X DELETE "
                                          "SRV/v1/audio/voices/mine"), 404);
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer kb' -X DELETE "
                                          "SRV/v1/audio/voices/shared"), 403);
    assert_string_equal(error_code(), "permission_denied");
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer ka' -X DELETE "
                                          "SRV/v1/audio/voices/shared"), 403);
    /* a name uploaded again replaces its voice only for a key that may manage it */
    edited_voice(tmp_path("mine2.qvoice"), NULL, 0.375f);
    assert_int_equal(curl(&g_extra, NULL, up, "kb", tmp_path("mine2.qvoice"), "mine"), 403);
    assert_string_equal(error_code(), "permission_denied");
    assert_int_equal(curl(&g_extra, NULL, up, "ka", tmp_path("mine2.qvoice"), "shared"), 403);
    assert_int_equal(curl(&g_extra, NULL, up, "ka", tmp_path("mine2.qvoice"), "mine"), 200);
    assert_non_null(strstr(g_body, "\"replaced\""));
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer kr' SRV/v1/audio/voices"),
                     200);
    assert_non_null(strstr(g_body, "\"owner\":\"alice\""));
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer kr' -X DELETE "
                                          "SRV/v1/audio/voices/mine"), 200);
    assert_int_equal(curl(&g_extra, NULL, "-H 'Authorization: Bearer %s' -X DELETE "
                                          "SRV/v1/audio/voices/shared", longkey), 200);
    /* owner records go with their voice, the text side with the last voice using it */
    assert_int_equal(count_files(tmp_path("ov"), "\\.qvpart\\|\\.owner"), 0);
    assert_int_equal(count_files(tmp_path("ov/.textside"), "qvoice-part"), 0);
    assert_int_equal(server_stop(&g_extra), 0);
}

/* The library's index: capped (507), listed from memory (a file damaged in place after it was
 * indexed is still listed: nothing re-reads it), and what it admits: no raw x-vector named
 * .qvoice, no NaN x-vector, no META name over 128 bytes. */
static void test_library(void **state) {
    (void)state;
    char args[2048];
    assert_int_equal(sh("rm -rf %s/lib && mkdir %s/lib", tmp_dir, tmp_dir), 0);
    snprintf(args, sizeof args, "-m %s --voices %s/lib --max-voices 2", g_cv, tmp_dir);
    assert_int_equal(server_start(&g_extra, "lib", args), 0);
    const char *up = "-F audio_sample=@%s -F name=%s -F consent=yes SRV/v1/audio/voices";
    assert_int_equal(curl(&g_extra, NULL, up, g_voice, "one"), 200);
    cJSON *o = cJSON_Parse(g_body);
    char id[65];
    snprintf(id, sizeof id, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")));
    cJSON_Delete(o);
    assert_int_equal(curl(&g_extra, NULL, up, g_voice, "two"), 200);
    assert_int_equal(curl(&g_extra, NULL, up, g_voice, "three"), 507);
    assert_string_equal(error_code(), "library_full");
    assert_int_equal(curl(&g_extra, NULL, up, g_voice, "one"), 200); /* the same voice: no cap */
    assert_int_equal(sh("printf 'XXXX' | dd of=%s/lib/%s.qvpart bs=1 seek=100 conv=notrunc "
                        "2>/dev/null", tmp_dir, id), 0);
    assert_int_equal(curl(&g_extra, NULL, "SRV/v1/audio/voices"), 200);
    assert_non_null(strstr(g_body, "\"one\""));
    assert_non_null(strstr(g_body, "\"two\""));
    /* speaking with it finds the damage; the error names the voice, not its path */
    int leaks = g_leaks;
    assert_int_equal(curl(&g_extra, NULL, "-H 'Content-Type: application/json' -d "
                                          "'{\"input\":\"hi\",\"voice\":\"one\"}' "
                                          "SRV/v1/audio/speech"),
                     400);
    print_message("damaged voice: %s\n", g_body);
    assert_int_equal(g_leaks, leaks);
    /* another server's voice renamed into the shared directory is seen */
    assert_int_equal(curl(&g_extra, NULL, "-X DELETE SRV/v1/audio/voices/two"), 200);
    edited_voice(tmp_path("lib/.x"), "other", 0.25f);
    assert_int_equal(sh("cd %s/lib && mv .x \"$(sha256sum < .x | cut -c1-64).qvoice\"", tmp_dir),
                     0);
    assert_int_equal(curl(&g_extra, NULL, "SRV/v1/audio/voices/other"), 200);
    /* a voice from before the consent record: its legacy note lists as consent of method note */
    qvf_voice *lv;
    char err[256];
    assert_int_equal(qvf_read_file(g_voice, 0, &lv, err, sizeof err), 0);
    static const char *const record[] = {"consent.method", "consent.statement", "consent.speaker",
                                         "consent.scope", "consent.utc", "consent.collected_by"};
    for (size_t i = 0; i < sizeof record / sizeof *record; i++)
        assert_int_equal(qvf_meta_set(lv, record[i], NULL), 0);
    assert_int_equal(qvf_meta_set(lv, "name", "legacy"), 0);
    assert_int_equal(qvf_meta_set(lv, "consent", "agreed on the phone"), 0);
    assert_int_equal(qvf_write_file(lv, tmp_path("lib/.x"), 4, err, sizeof err), 0);
    qvf_voice_free(lv);
    assert_int_equal(sh("cd %s/lib && mv .x \"$(sha256sum < .x | cut -c1-64).qvoice\"", tmp_dir),
                     0);
    assert_int_equal(curl(&g_extra, NULL, "SRV/v1/audio/voices/legacy"), 200);
    assert_non_null(strstr(g_body, "\"consent\":true"));
    assert_non_null(strstr(g_body, "\"consent_method\":\"note\""));
    /* refused uploads */
    static float raw[1024];
    for (int i = 0; i < 1024; i++) raw[i] = 0.01f * (float)(i % 7);
    tmp_write(tmp_path("raw.qvoice"), raw, sizeof raw);
    assert_int_equal(curl(&g_extra, NULL, "-F audio_sample=@%s -F consent=yes "
                                          "SRV/v1/audio/voices", tmp_path("raw.qvoice")), 400);
    assert_string_equal(error_code(), "invalid_voice_file");
    edited_voice(tmp_path("nan.qvoice"), NULL, 0.0f / 0.0f);
    assert_int_equal(curl(&g_extra, NULL, "-F audio_sample=@%s -F consent=yes "
                                          "SRV/v1/audio/voices", tmp_path("nan.qvoice")), 400);
    assert_non_null(strstr(g_body, "not finite"));
    static char longname[300];
    memset(longname, 'n', 299);
    edited_voice(tmp_path("long.qvoice"), longname, 0.5f);
    assert_int_equal(curl(&g_extra, NULL, "-F audio_sample=@%s -F consent=yes "
                                          "SRV/v1/audio/voices", tmp_path("long.qvoice")), 400);
    assert_non_null(strstr(g_body, "META name"));
    assert_int_equal(server_stop(&g_extra), 0);
}

/* The text side (TPAD + WOVR) is stored once: two voices of one model take one shared file and
 * two small parts; a download is the stored file byte for byte (its sha256 is its id, and it is
 * the uploaded file); speech with a part equals speech with the whole file in another library;
 * deleting the last voice that uses the text side removes it. */
static void test_textside(void **state) {
    (void)state;
    char args[2048], id[2][65], name[2][2] = {"a", "b"};
    assert_int_equal(sh("rm -rf %s/ts %s/ts2 && mkdir %s/ts %s/ts2", tmp_dir, tmp_dir, tmp_dir,
                        tmp_dir), 0);
    snprintf(args, sizeof args, "-m %s --voices %s/ts", g_cv, tmp_dir);
    assert_int_equal(server_start(&g_extra, "ts", args), 0);
    for (int i = 0; i < 2; i++) {
        char up[64];
        snprintf(up, sizeof up, "ts-%s.qvoice", name[i]);
        edited_voice(tmp_path(up), name[i], 0.25f * (float)(i + 1));
        assert_int_equal(curl(&g_extra, NULL, "-F audio_sample=@%s -F consent=yes "
                                              "SRV/v1/audio/voices", tmp_path(up)), 200);
        cJSON *o = cJSON_Parse(g_body);
        snprintf(id[i], sizeof id[i], "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")));
        cJSON_Delete(o);
        assert_int_equal(strlen(id[i]), 64);
    }
    /* one text side of ~280 kB, two parts of ~1.5 kB: under one whole voice + 8 kB */
    struct stat whole, part;
    assert_int_equal(stat(tmp_path("ts-a.qvoice"), &whole), 0);
    assert_int_equal(sh("test $(ls %s/ts/.textside | wc -l) -eq 1", tmp_dir), 0);
    snprintf(args, sizeof args, "%s/ts/%s.qvpart", tmp_dir, id[0]);
    assert_int_equal(stat(args, &part), 0);
    print_message("whole voice %lld B, part %lld B\n", (long long)whole.st_size,
                  (long long)part.st_size);
    assert_true(part.st_size < 4096);
    assert_int_equal(sh("test $(find %s/ts -type f -printf '%%s\\n' | awk '{s+=$1} END {print s}') "
                        "-lt %lld", tmp_dir, (long long)whole.st_size + 8192), 0);
    /* the list reports the whole file's size */
    assert_int_equal(curl(&g_extra, NULL, "SRV/v1/audio/voices/%s", id[0]), 200);
    cJSON *o = cJSON_Parse(g_body);
    assert_int_equal((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "bytes")),
                     (long long)whole.st_size);
    cJSON_Delete(o);
    /* downloads: byte for byte */
    for (int i = 0; i < 2; i++) {
        char dl[64], up[64];
        snprintf(dl, sizeof dl, "ts-dl-%s.qvoice", name[i]);
        snprintf(up, sizeof up, "ts-%s.qvoice", name[i]);
        assert_int_equal(curl(&g_extra, tmp_path(dl), "'SRV/v1/audio/voices/%s?download=1'",
                              name[i]), 200);
        assert_int_equal(sh("test \"$(sha256sum < %s | cut -c1-64)\" = %s", tmp_path(dl), id[i]),
                         0);
        assert_int_equal(sh("cmp -s %s %s", tmp_path(dl), tmp_path(up)), 0);
    }
    const char *speak = "-H 'Content-Type: application/json' -d '{\"input\":\"Hello there.\","
                        "\"voice\":\"a\",\"seed\":3,\"max_seconds\":1}' SRV/v1/audio/speech";
    assert_int_equal(curl(&g_extra, tmp_path("ts-part.wav"), speak), 200);
    /* deletes: the text side stays while a voice uses it */
    assert_int_equal(curl(&g_extra, NULL, "-X DELETE SRV/v1/audio/voices/a"), 200);
    assert_int_equal(sh("test $(ls %s/ts/.textside | wc -l) -eq 1", tmp_dir), 0);
    assert_int_equal(curl(&g_extra, NULL, "-X DELETE SRV/v1/audio/voices/b"), 200);
    assert_int_equal(sh("test $(ls %s/ts/.textside | wc -l) -eq 0", tmp_dir), 0);
    assert_int_equal(sh("test $(ls %s/ts | wc -l) -eq 0", tmp_dir), 0);
    assert_int_equal(server_stop(&g_extra), 0);
    /* the whole file, as another server (or an older one) leaves it */
    assert_int_equal(sh("cp %s %s/ts2/%s.qvoice", tmp_path("ts-a.qvoice"), tmp_dir, id[0]), 0);
    snprintf(args, sizeof args, "-m %s --voices %s/ts2", g_cv, tmp_dir);
    assert_int_equal(server_start(&g_extra, "ts2", args), 0);
    assert_int_equal(curl(&g_extra, tmp_path("ts-whole.wav"), speak), 200);
    assert_int_equal(server_stop(&g_extra), 0);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("ts-part.wav"), tmp_path("ts-whole.wav")), 0);
}

/* Starts sv as server_start does, with tests/tools/slow_textside.c preloaded: its removals of a
 * shared text side announce themselves in tmp_dir/ts-unlink and take ms longer. ASan must not
 * insist on coming first in the library list (the shim carries no sanitizer). */
static int server_start_slow_textside(server *sv, const char *name, const char *args, int ms) {
    char delay[32], asan[1024];
    const char *old = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", old ? old : "", old ? ":" : "");
    char *saved = old ? strdup(old) : NULL;
    snprintf(delay, sizeof delay, "%d", ms);
    setenv("LD_PRELOAD", test_built("tests/tools/slow_textside.so"), 1);
    setenv("QV_SLOW_TEXTSIDE_MS", delay, 1);
    setenv("QV_SLOW_TEXTSIDE_MARK", tmp_path("ts-unlink"), 1);
    setenv("ASAN_OPTIONS", asan, 1);
    int rc = server_start(sv, name, args);
    unsetenv("LD_PRELOAD");
    unsetenv("QV_SLOW_TEXTSIDE_MS");
    unsetenv("QV_SLOW_TEXTSIDE_MARK");
    if (saved) setenv("ASAN_OPTIONS", saved, 1);
    else unsetenv("ASAN_OPTIONS");
    free(saved);
    return rc;
}

/* Two servers on one voices directory, uploading and deleting voices of one model at once, each
 * removal of the shared text side slowed by the shim (1.5 s: the window between a server's
 * decision to remove it and the removal, microseconds in production).
 * Aimed: A deletes its only voice (no part on disk names the text side any more) and, while its
 * removal is under way, B stores a voice of the same model. B's voice must download whole: B
 * either finds the text side before A decides (A then sees B's part and keeps it) or writes it
 * after A removed it. The code before the lock on DIR/.textside/.lock failed here: A's index had
 * no user left, B found the file still there and wrote only its part, A removed the file.
 * Then at random: A uploads and deletes 20 voices while B uploads 20; each of B's voices
 * downloads whole through A (sha256 = id), the one text side is there, and it goes with the last
 * voice. */
static void test_textside_shared(void **state) {
    (void)state;
    char args[2048];
    assert_int_equal(sh("rm -rf %s/ts3 && mkdir %s/ts3", tmp_dir, tmp_dir), 0);
    snprintf(args, sizeof args, "-m %s --voices %s/ts3", g_cv, tmp_dir);
    assert_int_equal(server_start_slow_textside(&g_extra, "ts3a", args, WAIT(1500)), 0);
    assert_int_equal(server_start_slow_textside(&g_extra2, "ts3b", args, WAIT(1500)), 0);
    edited_voice(tmp_path("ts3-ra.qvoice"), "ra", 0.5f);
    edited_voice(tmp_path("ts3-rb.qvoice"), "rb", 0.75f);
    assert_int_equal(curl(&g_extra, NULL, "-F audio_sample=@%s -F consent=yes "
                                          "SRV/v1/audio/voices", tmp_path("ts3-ra.qvoice")), 200);
    unlink(tmp_path("ts-unlink"));
    assert_int_equal(
        sh("(curl -s -o /dev/null -w '%%{http_code}' --max-time %d -X DELETE "
           "http://127.0.0.1:%d/v1/audio/voices/ra > %s) & "
           "for i in $(seq %d); do [ -e %s ] && break; sleep 0.1; done; [ -e %s ] && "
           "curl -s -o %s -w '%%{http_code}' --max-time %d -F audio_sample=@%s -F consent=yes "
           "http://127.0.0.1:%d/v1/audio/voices > %s; rc=$?; wait; exit $rc",
           WAIT(60), g_extra.port, tmp_path("ts3-del"), WAIT(300), tmp_path("ts-unlink"),
           tmp_path("ts-unlink"), tmp_path("ts3-up.json"), WAIT(60), tmp_path("ts3-rb.qvoice"),
           g_extra2.port, tmp_path("ts3-up")),
        0);
    char code[16], reply[1024];
    slurp(tmp_path("ts3-del"), code, sizeof code);
    assert_string_equal(code, "200");
    slurp(tmp_path("ts3-up"), code, sizeof code);
    assert_string_equal(code, "200");
    slurp(tmp_path("ts3-up.json"), reply, sizeof reply);
    cJSON *uploaded = cJSON_Parse(reply);
    char rb[65] = "";
    snprintf(rb, sizeof rb, "%s",
             uploaded ? cJSON_GetStringValue(cJSON_GetObjectItem(uploaded, "id")) : "");
    cJSON_Delete(uploaded);
    assert_int_equal(strlen(rb), 64);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(curl(k ? &g_extra2 : &g_extra, tmp_path("ts3.qvoice"),
                              "'SRV/v1/audio/voices/rb?download=1'"),
                         200);
        assert_int_equal(
            sh("test \"$(sha256sum < %s | cut -c1-64)\" = %s", tmp_path("ts3.qvoice"), rb), 0);
    }
    assert_int_equal(sh("test $(ls %s/ts3/.textside | wc -l) -eq 1", tmp_dir), 0);
    assert_int_equal(curl(&g_extra2, NULL, "-X DELETE SRV/v1/audio/voices/rb"), 200);
    assert_int_equal(sh("test $(ls %s/ts3/.textside | wc -l) -eq 0", tmp_dir), 0);
    char up[1024];
    snprintf(up, sizeof up, "curl -s -o /dev/null --max-time %d -F audio_sample=@%s -F consent=yes",
             WAIT(60), g_voice);
    assert_int_equal(
        sh("(for i in $(seq 20); do %s -F name=a$i http://127.0.0.1:%d/v1/audio/voices; "
           "curl -s -o /dev/null -X DELETE http://127.0.0.1:%d/v1/audio/voices/a$i; done) & "
           "(for i in $(seq 20); do %s -F name=b$i http://127.0.0.1:%d/v1/audio/voices; done) & "
           "wait",
           up, g_extra.port, g_extra.port, up, g_extra2.port),
        0);
    for (int i = 1; i <= 20; i++) {
        assert_int_equal(curl(&g_extra, NULL, "SRV/v1/audio/voices/b%d", i), 200);
        cJSON *o = cJSON_Parse(g_body);
        char id[65];
        snprintf(id, sizeof id, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")));
        cJSON_Delete(o);
        assert_int_equal(curl(&g_extra, tmp_path("ts3.qvoice"),
                              "'SRV/v1/audio/voices/b%d?download=1'", i),
                         200);
        assert_int_equal(
            sh("test \"$(sha256sum < %s | cut -c1-64)\" = %s", tmp_path("ts3.qvoice"), id), 0);
    }
    assert_int_equal(curl(&g_extra, NULL, "SRV/v1/audio/voices/a1"), 404);
    assert_int_equal(sh("test $(ls %s/ts3/.textside | wc -l) -eq 1", tmp_dir), 0);
    for (int i = 1; i <= 20; i++)
        assert_int_equal(curl(i % 2 ? &g_extra : &g_extra2, NULL,
                              "-X DELETE SRV/v1/audio/voices/b%d", i),
                         200);
    assert_int_equal(sh("test $(ls %s/ts3/.textside | wc -l) -eq 0", tmp_dir), 0);
    assert_int_equal(server_stop(&g_extra2), 0);
    assert_int_equal(server_stop(&g_extra), 0);
}

/* A %0A in a URL is logged escaped, not as a line of its own. */
static void test_log_escaped(void **state) {
    (void)state;
    assert_int_equal(curl(&g_srv, NULL, "'SRV/nope%%0A2026-01-01T00:00:00Z%%20GET%%20/forged'"),
                     404);
    sleep_ms(200);
    assert_true(file_has(g_srv.log, "nope\\x0a2026-01-01T00:00:00Z GET /forged 404"));
    assert_int_equal(sh("grep -q '^2026-01-01T00:00:00Z GET /forged' %s", g_srv.log), 1);
}

/* Run last: no JSON reply of any test named a server path (the test's directory, where the
 * voices and uploads live, or a model directory). */
static void test_no_leaks(void **state) {
    (void)state;
    print_message("%d JSON replies, %d naming a server path\n", g_replies, g_leaks);
    assert_true(g_replies > 50);
    assert_int_equal(g_leaks, 0);
}

static void test_metrics(void **state) {
    (void)state;
    assert_true(metric(&g_srv, "qvoice_requests_total{route=\"speech\",status=\"400\"} ") >= 18);
    assert_true(metric(&g_srv, "qvoice_errors_total{route=\"voice_delete\"} ") >= 1);
    assert_true(metric(&g_srv, "qvoice_active_sessions ") == 0);
    assert_true(metric(&g_srv, "qvoice_queued_sessions ") == 0);
    assert_non_null(strstr(g_body, "# TYPE qvoice_time_to_first_audio_seconds histogram"));
    assert_non_null(strstr(g_body, "qvoice_rtf_bucket{le=\"+Inf\"}"));
}

/* ==== synthesis ============================================================================== */

static long wav_frames(const char *path) {
    SF_INFO info = {0};
    SNDFILE *f = sf_open(path, SFM_READ, &info);
    if (!f) return -1;
    sf_close(f);
    return info.samplerate == 24000 && info.channels == 1 ? (long)info.frames : -2;
}

/* tiny-cv's fingerprint, as the server's outputs name it. */
static void model_fingerprint(char fp[65]) {
    qv_model *m;
    assert_int_equal(qv_model_load(&m, g_cv), 0);
    qv_model_fingerprint(m, fp);
    qv_model_free(m);
}

static void test_speech(void **state) {
    (void)state;
    const char *req = "-H 'Content-Type: application/json' -d '{\"input\":\"Hello there.\","
                      "\"voice\":\"ryan\",\"seed\":1,\"max_seconds\":2,\"response_format\":\"%s\"%s}'"
                      " SRV/v1/audio/speech";
    char fmtreq[1024];
    snprintf(fmtreq, sizeof fmtreq, req, "wav", "");
    assert_int_equal(curl(&g_srv, tmp_path("a.wav"), "%s", fmtreq), 200);
    long n = wav_frames(tmp_path("a.wav"));
    assert_true(n > 0 && n <= 2 * 24000 + 2000);
    snprintf(fmtreq, sizeof fmtreq, req, "pcm", "");
    assert_int_equal(curl(&g_srv, tmp_path("a.pcm"), "-D %s %s", tmp_path("pcm.hdr"), fmtreq),
                     200);
    /* raw PCM has no container: the provenance comes as a header */
    assert_true(file_has(tmp_path("pcm.hdr"), "X-Qvoice-Provenance: digital_source_type="));
    assert_true(file_has(tmp_path("pcm.hdr"), "; voice_id=speaker:ryan; watermark="));
    assert_int_equal(file_bytes(tmp_path("a.pcm")), 2 * n); /* same seed, same samples */
    snprintf(fmtreq, sizeof fmtreq, req, "pcm", ",\"stream_format\":\"audio\"");
    assert_int_equal(curl(&g_srv, tmp_path("s.pcm"), "%s", fmtreq), 200);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("a.pcm"), tmp_path("s.pcm")), 0);
    const char *fmts[] = {"flac", "mp3", "opus"};
    for (int i = 0; i < 3; i++) {
        char out[64];
        snprintf(out, sizeof out, "a.%s", fmts[i]);
        snprintf(fmtreq, sizeof fmtreq, req, fmts[i], "");
        int st = curl(&g_srv, tmp_path(out), "%s", fmtreq);
        if (st == 400) continue; /* this libsndfile cannot write it: said so */
        assert_int_equal(st, 200);
        assert_true(wav_frames(tmp_path(out)) > 0);
    }
    /* a library voice by name */
    assert_int_equal(py(&g_srv, "upload %s name=lib consent=yes", g_voice), 0);
    assert_true(!strncmp(g_body, "200 ", 4));
    char lib_id[65] = ""; /* its id: the stored file's SHA-256 */
    const char *at = strstr(g_body, "\"id\":\"");
    if (at) snprintf(lib_id, sizeof lib_id, "%.64s", at + 6);
    assert_int_equal(curl(&g_srv, tmp_path("lib.wav"), "-d '{\"input\":\"Hi.\",\"voice\":\"lib\","
                                                     "\"max_seconds\":1}' SRV/v1/audio/speech"),
                     200);
    assert_true(wav_frames(tmp_path("lib.wav")) > 0);
    /* every output names its voice and model (docs/provenance.md): a preset speaker, a library
     * voice by its id (the file's SHA-256), a stream */
    char fp[65];
    model_fingerprint(fp);
    assert_int_equal(wav_check_provenance(tmp_path("a.wav"), "speaker:ryan", fp), 0);
    assert_int_equal(strlen(lib_id), 64);
    assert_int_equal(wav_check_provenance(tmp_path("lib.wav"), lib_id, fp), 0);
    snprintf(fmtreq, sizeof fmtreq, req, "wav", ",\"stream_format\":\"audio\"");
    assert_int_equal(curl(&g_srv, tmp_path("s.wav"), "%s", fmtreq), 200);
    assert_int_equal(wav_check_provenance(tmp_path("s.wav"), "speaker:ryan", fp), 0);
    /* no cap: the tiny model's random codes may run into the runaway guard, which must be a 500
     * (never a 200 with the partial audio) and counted */
    int st = curl(&g_srv, NULL, "-d '{\"input\":\"Hello there.\",\"voice\":\"ryan\"}' "
                                "SRV/v1/audio/speech");
    if (st != 200) {
        assert_int_equal(st, 500);
        assert_string_equal(error_code(), "guard");
        assert_true(metric(&g_srv, "qvoice_guard_failures_total ") >= 1);
    }
    if (!g_npm) return;
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", g_srv.port);
    assert_int_equal(sh("node tests/server/openai_speech.mjs %s wav %s", base, tmp_path("o.wav")), 0);
    assert_true(wav_frames(tmp_path("o.wav")) > 0);
    assert_int_equal(sh("node tests/server/openai_speech.mjs %s stream %s >/dev/null", base,
                        tmp_path("os.wav")), 0);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("o.wav"), tmp_path("os.wav")) == 0, 0); /* header */
    uint32_t data; /* the header carries the provenance tags (docs/provenance.md) */
    const long head = wav_file_data_offset(tmp_path("o.wav"), &data);
    assert_true(head > 44);
    assert_int_equal(sh("cmp -s -i %ld %s %s", head, tmp_path("o.wav"), tmp_path("os.wav")), 0);
    assert_int_equal(sh("node tests/server/openai_speech.mjs %s sse %s >/dev/null", base,
                        tmp_path("o.pcm")), 0);
    assert_int_equal(sh("cmp -s -i %ld:0 %s %s", head, tmp_path("o.wav"), tmp_path("o.pcm")), 0);
}

/* The n 16-bit samples at offset off of path, as floats. */
static float *s16_file(const char *path, long off, long n) {
    FILE *f = fopen(path, "rb");
    int16_t *s = malloc((size_t)n * sizeof *s);
    float *x = malloc((size_t)n * sizeof *x);
    assert_true(f && !fseek(f, off, SEEK_SET) && fread(s, 2, (size_t)n, f) == (size_t)n);
    fclose(f);
    for (long i = 0; i < n; i++)
        x[i] = s[i] / 32767.0f;
    free(s);
    return x;
}

/* sample_rate (vLLM-Omni's): a 16 kHz WAV says 16000 in its header, lasts as long as the 24 kHz
 * reply of the same request (within a frame), and its samples are the 24 kHz reply's resampled
 * (the test resamples that reply's 16-bit samples with the same medium sinc: SNR above 50 dB,
 * the difference being the 16-bit rounding before resampling); raw PCM whole, chunked and over SSE
 * is the same bytes; a batch item and mp3 at 44.1 kHz too; opus at 44.1 kHz is a 400 naming
 * sample_rate and the rates opus takes. */
static void test_sample_rate(void **state) {
    (void)state;
    const char *req = "-d '{\"input\":\"Hello there.\",\"voice\":\"ryan\",\"seed\":3,"
                      "\"max_seconds\":1,\"response_format\":\"%s\"%s}' SRV/v1/audio/speech";
    char r[512];
    snprintf(r, sizeof r, req, "wav", "");
    assert_int_equal(curl(&g_srv, tmp_path("r24.wav"), "%s", r), 200);
    snprintf(r, sizeof r, req, "wav", ",\"sample_rate\":16000");
    assert_int_equal(curl(&g_srv, tmp_path("r16.wav"), "%s", r), 200);
    uint32_t d24, d16;
    const long h24 = wav_file_data_offset(tmp_path("r24.wav"), &d24),
               h16 = wav_file_data_offset(tmp_path("r16.wav"), &d16);
    uint8_t fmt[8];
    FILE *f = fopen(tmp_path("r16.wav"), "rb");
    assert_true(f && !fseek(f, 24, SEEK_SET) && fread(fmt, 1, 8, f) == 8);
    fclose(f);
    assert_int_equal(fmt[0] | fmt[1] << 8 | fmt[2] << 16 | fmt[3] << 24, 16000);
    assert_int_equal(fmt[4] | fmt[5] << 8 | fmt[6] << 16 | fmt[7] << 24, 32000);
    const long n24 = d24 / 2, n16 = d16 / 2;
    printf("  sample_rate 16000: %ld samples (%.3f s) for %ld at 24 kHz (%.3f s)\n", n16,
           n16 / 16000.0, n24, n24 / 24000.0);
    assert_true(n24 > 0 && labs(n16 * 3 - n24 * 2) <= 2 * 1920); /* within a frame */
    float *x = s16_file(tmp_path("r24.wav"), h24, n24), *y = s16_file(tmp_path("r16.wav"), h16, n16);
    float *z = malloc((size_t)(n16 + 64) * sizeof *z);
    SRC_DATA sd = {.data_in = x, .input_frames = n24, .data_out = z, .output_frames = n16 + 64,
                   .src_ratio = 16000.0 / 24000.0};
    assert_int_equal(src_simple(&sd, SRC_SINC_MEDIUM_QUALITY, 1), 0);
    assert_int_equal(sd.output_frames_gen, n16);
    double sig = 0, err = 0;
    for (long i = 0; i < n16; i++)
        sig += (double)y[i] * y[i], err += ((double)z[i] - y[i]) * ((double)z[i] - y[i]);
    const double snr = 10 * log10(sig / (err + 1e-30));
    printf("  16 kHz reply against the 24 kHz reply resampled here: SNR %.1f dB\n", snr);
    assert_true(snr > 50);
    free(x), free(y), free(z);
    /* raw PCM: whole, chunked, SSE (base64 deltas joined): the same bytes */
    snprintf(r, sizeof r, req, "pcm", ",\"sample_rate\":16000");
    assert_int_equal(curl(&g_srv, tmp_path("r16.pcm"), "%s", r), 200);
    assert_int_equal(file_bytes(tmp_path("r16.pcm")), 2 * n16);
    assert_int_equal(sh("cmp -s -i %ld:0 %s %s", h16, tmp_path("r16.wav"), tmp_path("r16.pcm")), 0);
    snprintf(r, sizeof r, req, "pcm", ",\"sample_rate\":16000,\"stream_format\":\"audio\"");
    assert_int_equal(curl(&g_srv, tmp_path("s16.pcm"), "%s", r), 200);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("r16.pcm"), tmp_path("s16.pcm")), 0);
    snprintf(r, sizeof r, req, "pcm", ",\"sample_rate\":16000,\"stream\":true");
    assert_int_equal(curl(&g_srv, tmp_path("s16.sse"), "%s", r), 200);
    assert_int_equal(sh("python3 -c 'import sys,json,base64; sys.stdout.buffer.write(b\"\".join("
                        "base64.b64decode(json.loads(l[6:]).get(\"audio\",\"\")) for l in "
                        "open(sys.argv[1]) if l.startswith(\"data: \")))' %s > %s",
                        tmp_path("s16.sse"), tmp_path("sse16.pcm")), 0);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("r16.pcm"), tmp_path("sse16.pcm")), 0);
    /* a batch item: its base64 WAV at 16 kHz, the same samples */
    assert_int_equal(curl(&g_srv, NULL, "-d '{\"voice\":\"ryan\",\"seed\":3,\"max_seconds\":1,"
                                        "\"sample_rate\":16000,\"items\":[{\"input\":\"Hello "
                                        "there.\"}]}' SRV/v1/audio/speech/batch"),
                     200);
    tmp_write(tmp_path("batch.json"), g_body, strlen(g_body));
    assert_int_equal(sh("python3 -c 'import sys,json,base64; sys.stdout.buffer.write(base64."
                        "b64decode(json.load(open(sys.argv[1]))[\"results\"][0][\"audio_data\"]))' %s"
                        " > %s", tmp_path("batch.json"), tmp_path("b16.wav")), 0);
    uint32_t db;
    const long hb = wav_file_data_offset(tmp_path("b16.wav"), &db);
    assert_int_equal(db, d16);
    assert_int_equal(sh("cmp -s -i %ld:%ld %s %s", hb, h16, tmp_path("b16.wav"),
                        tmp_path("r16.wav")), 0);
    /* mp3 at 44.1 kHz (MPEG-1); opus at 44.1 kHz refused naming the field and the rates */
    snprintf(r, sizeof r, req, "mp3", ",\"sample_rate\":44100");
    const int st = curl(&g_srv, tmp_path("r44.mp3"), "%s", r);
    if (st != 400) { /* 400: this libsndfile writes no mp3 */
        assert_int_equal(st, 200);
        SF_INFO info = {0};
        SNDFILE *sf = sf_open(tmp_path("r44.mp3"), SFM_READ, &info);
        assert_non_null(sf);
        sf_close(sf);
        assert_int_equal(info.samplerate, 44100);
    }
    bad_speech("{\"input\": \"hi\", \"response_format\": \"opus\", \"sample_rate\": 44100}", 400,
               "unsupported_value");
    assert_non_null(strstr(g_body, "sample_rate 44100: opus takes 8000, 12000, 16000, 24000, 48000"));
}

/* The mean square of a and, in *err, of b - a: n 16-bit samples of a (a WAV's data) against
 * those of b from sample skip on (decoded AAC: 1024 samples of ADTS priming first). */
static double s16_diff(const char *wav, const char *raw, long skip, double *err) {
    uint32_t data;
    const long head = wav_file_data_offset(wav, &data);
    FILE *fa = fopen(wav, "rb"), *fb = fopen(raw, "rb");
    double sig = 0;
    int16_t a, b;
    *err = 0;
    assert_true(head > 0 && fa && fb && !fseek(fa, head, SEEK_SET) && !fseek(fb, 2 * skip, SEEK_SET));
    for (uint32_t i = 0; i < data / 2; i++) {
        assert_true(fread(&a, 2, 1, fa) == 1 && fread(&b, 2, 1, fb) == 1);
        sig += (double)a * a, *err += ((double)b - a) * ((double)b - a);
    }
    fclose(fa), fclose(fb);
    return sig;
}

/* 0 when the AAC files a and b have the same frames: the bytes after their ID3v2 tags (which
 * differ in the creation time when the requests fall in different seconds). */
static int aac_cmp(const char *a, const char *b) {
    long tag[2];
    for (int i = 0; i < 2; i++) {
        uint8_t h[10];
        FILE *f = fopen(i ? b : a, "rb");
        assert_true(f && fread(h, 1, 10, f) == 10 && !memcmp(h, "ID3", 3));
        fclose(f);
        tag[i] = 10 + (h[6] << 21 | h[7] << 14 | h[8] << 7 | h[9]);
    }
    return sh("cmp -i %ld:%ld %s %s", tag[0], tag[1], a, b);
}

/* response_format aac (features/aac.c): audio/aac, the same frames whole, streamed (chunked and
 * SSE) and through the openai package; ADTS that ffprobe reads as 24 kHz mono AAC with the
 * provenance tag; decoded by ffmpeg, the WAV of the same request after the 1024-sample priming
 * delay at an SNR above 12 dB (the tiny model's noise-like audio at 96 kbit/s; measured 19-20
 * dB); a server that cannot load libavcodec answers 400 naming the package. */
static void test_aac(void **state) {
    (void)state;
    if (sh("ffmpeg -version >/dev/null 2>&1")) {
        printf("  ffmpeg missing (make deps): skipped\n");
        skip();
    }
    const char *req = "-H 'Content-Type: application/json' -d '{\"input\":\"Hello there.\","
                      "\"voice\":\"ryan\",\"seed\":1,\"max_seconds\":2,\"response_format\":\"%s\"%s}'"
                      " SRV/v1/audio/speech";
    char r[1024];
    snprintf(r, sizeof r, req, "aac", "");
    assert_int_equal(curl(&g_srv, tmp_path("a.aac"), "-D %s %s", tmp_path("aac.hdr"), r), 200);
    assert_true(file_has(tmp_path("aac.hdr"), "Content-Type: audio/aac"));
    snprintf(r, sizeof r, req, "wav", "");
    assert_int_equal(curl(&g_srv, tmp_path("aac.wav"), "%s", r), 200);
    snprintf(r, sizeof r, req, "aac", ",\"stream_format\":\"audio\"");
    assert_int_equal(curl(&g_srv, tmp_path("s.aac"), "%s", r), 200);
    assert_int_equal(aac_cmp(tmp_path("a.aac"), tmp_path("s.aac")), 0);
    assert_int_equal(sh("ffprobe -v error -show_entries stream=codec_name,sample_rate,channels:"
                        "format_tags=comment -of default=nw=1 %s > %s",
                        tmp_path("a.aac"), tmp_path("aac.probe")), 0);
    const char *const want[] = {"codec_name=aac", "sample_rate=24000", "channels=1",
                                "; voice_id=speaker:ryan; watermark="};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!file_has(tmp_path("aac.probe"), want[i])) fail_msg("ffprobe: no %s", want[i]);
    assert_int_equal(sh("ffmpeg -v error -y -i %s -f s16le %s", tmp_path("a.aac"),
                        tmp_path("aac.raw")), 0);
    uint32_t data;
    wav_file_data_offset(tmp_path("aac.wav"), &data);
    const long decoded = file_bytes(tmp_path("aac.raw")) / 2, n = data / 2;
    double err, sig = s16_diff(tmp_path("aac.wav"), tmp_path("aac.raw"), 1024, &err);
    const double snr = 10 * log10(sig / err);
    printf("  aac: %ld bytes; %ld samples decoded of %ld; SNR %.1f dB against the WAV\n",
           file_bytes(tmp_path("a.aac")), decoded, n, snr);
    assert_true(n > 0 && decoded >= n + 1024 && decoded <= n + 3 * 1024);
    assert_true(snr > 12);
    if (g_npm) {
        char base[64];
        snprintf(base, sizeof base, "http://127.0.0.1:%d", g_srv.port);
        const char *const modes[] = {"aac", "aac-stream", "aac-sse"};
        for (int i = 0; i < 3; i++) {
            assert_int_equal(sh("node tests/server/openai_speech.mjs %s %s %s", base, modes[i],
                                tmp_path("o.aac")), 0);
            assert_true(file_bytes(tmp_path("o.aac")) > 1000);
            if (i) assert_int_equal(aac_cmp(tmp_path("o.aac"), tmp_path("o0.aac")), 0);
            else sh("cp %s %s", tmp_path("o.aac"), tmp_path("o0.aac"));
        }
    }
    /* a server without the library: the request is refused naming the package */
    setenv("QV_AVCODEC", "libqv-missing.so.0", 1);
    char args[1024];
    snprintf(args, sizeof args, "-m %s --voices %s/voices --timeout 10", g_cv, tmp_dir);
    const int started = server_start(&g_extra, "noavcodec", args);
    unsetenv("QV_AVCODEC");
    assert_int_equal(started, 0);
    snprintf(r, sizeof r, req, "aac", "");
    assert_int_equal(curl(&g_extra, NULL, "%s", r), 400);
    assert_string_equal(error_code(), "unsupported_format");
    assert_non_null(strstr(g_body, "libqv-missing.so.0 (install Debian's libavcodec"));
    assert_non_null(strstr(g_body, "\"param\":\"response_format\""));
    snprintf(r, sizeof r, req, "wav", "");
    assert_int_equal(curl(&g_extra, NULL, "%s", r), 200);
    assert_int_equal(server_stop(&g_extra), 0);
}

/* POST /v1/audio/detect: a raw audio body, the upload limit, the report of voicefmt detect
 * --json, the tags and the "match": the voice and model the recovered payload names. */
static void test_detect(void **state) {
    (void)state;
    const int n = 20 * 24000; /* 20 s: under the 1 MB upload limit as a WAV */
    float *x = malloc((size_t)n * sizeof *x);
    uint32_t r = 1;
    for (int i = 0; i < n; i++) /* noise at -20 dBFS, then the mark */
        r = r * 1664525u + 1013904223u, x[i] = 0.1f * ((float)(r >> 8) / 8388608.0f - 1.0f);
    qv_provenance p = qv_provenance_default();
    snprintf(p.voice_id, sizeof p.voice_id, "speaker:ryan");
    model_fingerprint(p.model_fingerprint);
    assert_int_equal(qv_audio_write(tmp_path("marked.wav"), QV_FORMAT_WAV, x, n, &p), 0);
    free(x);
    assert_int_equal(curl(&g_srv, NULL, "-H 'Content-Type: audio/wav' --data-binary @%s "
                                        "SRV/v1/audio/detect", tmp_path("marked.wav")),
                     200);
    printf("  detect: %.300s\n", g_body);
    cJSON *o = cJSON_Parse(g_body);
    assert_non_null(o);
    assert_true(cJSON_IsBool(cJSON_GetObjectItem(o, "present")));
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "seconds")) > 19.9);
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(o, "ranges")));
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "whole"), "payload_score"));
    /* the payload read back names the voice and the served model it was marked for */
    const cJSON *match = cJSON_GetObjectItem(o, "match");
    char *mt = cJSON_PrintUnformatted(match);
    printf("  detect: payload %s, match %s\n",
           cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "whole"), "payload")),
           mt);
    free(mt);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "whole"), "payload_ok")));
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(match, "voice")), "speaker:ryan");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(match, "model")), "tiny-cv");
    const char *tags = cJSON_GetStringValue(cJSON_GetObjectItem(o, "tags"));
    assert_true(tags && strstr(tags, "; voice_id=speaker:ryan; watermark="));
    cJSON_Delete(o);
    assert_int_equal(curl(&g_srv, NULL, "-X POST SRV/v1/audio/detect"), 400);
    assert_string_equal(error_code(), "missing_field");
    assert_int_equal(curl(&g_srv, NULL, "--data-binary 'not audio at all' SRV/v1/audio/detect"),
                     400);
    assert_string_equal(error_code(), "invalid_audio");
    /* named as the client knows it, with the formats read; no server path, no form field */
    assert_true(strstr(g_body, "request body: cannot read audio") && strstr(g_body, "not AAC") &&
                !strstr(g_body, "voice library") && strstr(g_body, "\"param\":null"));
    assert_int_equal(sh("head -c 1100000 /dev/zero > %s", tmp_path("big.bin")), 0);
    assert_int_equal(curl(&g_srv, NULL, "--data-binary @%s SRV/v1/audio/detect",
                          tmp_path("big.bin")),
                     413);
    assert_int_equal(curl(&g_srv, NULL, "SRV/v1/audio/detect"), 405);
}

/* A streamed request that keeps the tiny model's slot busy for a while. */
/* A streamed request that holds the tiny model's one slot for about a second: the tiny model
 * makes 8 s of audio in ~0.1 s, so one sentence can end before the next request arrives. 12
 * sentences, each capped at 100 frames (8 s: a cap, not an error, and under the guard's frame
 * budget), the whole at max_seconds. */
static void busy_request(const char *path, int max_seconds) {
    char json[4096];
    int k = snprintf(json, sizeof json, "{\"input\":\"");
    for (int i = 0; i < 12; i++)
        k += snprintf(json + k, sizeof json - (size_t)k,
                      "A long text that goes on and on, sentence after sentence, with many words "
                      "in it so that the tiny model keeps its synthesis slot busy for a while. ");
    k += snprintf(json + k, sizeof json - (size_t)k,
                  "\",\"voice\":\"ryan\",\"stream_format\":\"audio\",\"response_format\":"
                  "\"pcm\",\"max_new_tokens\":100,\"max_seconds\":%d}",
                  max_seconds);
    assert_true(k < (int)sizeof json);
    tmp_write(path, json, (size_t)k);
}

/* Starts a streamed request from file json in the background: body to out, curl's exit code to
 * rc when it ends. */
static void background_curl(const server *sv, const char *json, const char *out, const char *rc) {
    unlink(rc);
    assert_int_equal(sh("(curl -s --max-time %d -o %s -d @%s http://127.0.0.1:%d/v1/audio/speech; "
                        "echo $? > %s) &",
                        WAIT(120), out, json, sv->port, rc),
                     0);
}

/* Starts the one-slot server NAME (ARGS after its model and voices) with busy_request() running
 * on it as a background client (body to out, exit code to rc), and waits until it holds the slot. */
static void start_busy(const char *name, const char *more, const char *json, const char *out,
                       const char *rc) {
    char args[2048];
    snprintf(args, sizeof args, "-m %s --voices %s/voices --max-concurrency 1 %s", g_cv, tmp_dir,
             more);
    assert_int_equal(server_start(&g_extra, name, args), 0);
    busy_request(json, 60);
    background_curl(&g_extra, json, out, rc);
    double active = 0;
    for (int i = 0; i < WAIT(100) && (active = metric(&g_extra, "qvoice_active_sessions ")) < 1;
         i++)
        sleep_ms(100);
    assert_true(active >= 1);
}

/* The audio of batch result i of the JSON reply in g_body, base64-decoded into path. */
static void batch_audio(int i, const char *path) {
    cJSON *o = cJSON_Parse(g_body);
    cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "results"), i);
    const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItem(r, "audio_data"));
    assert_non_null(b64);
    tmp_write(tmp_path("b64"), b64, strlen(b64));
    cJSON_Delete(o);
    assert_int_equal(sh("base64 -d %s > %s", tmp_path("b64"), path), 0);
}

/* vLLM-Omni's POST /v1/audio/speech/batch (curl, Python's http.client, the openai package's
 * client.post): the batch's fields under each item's own, one result per item in order, an item's
 * error its own; an item's audio is the single request's, byte for byte; usage counts tokens
 * (3 for "Hello there.", not 12 characters); speed 2 is half the samples (streamed too). */
static void test_batch_and_speed(void **state) {
    (void)state;
    const char *batch = "-d '{\"voice\":\"ryan\",\"seed\":1,\"max_seconds\":2,\"items\":["
                        "{\"input\":\"Hello there.\"},"
                        "{\"input\":\"Hello there.\",\"response_format\":\"pcm\",\"speed\":2},"
                        "{\"input\":\"\"}, 5, {\"input\":\"Hi\",\"voice\":\"nobody\"}]}' "
                        "SRV/v1/audio/speech/batch";
    assert_int_equal(curl(&g_srv, NULL, "%s", batch), 200);
    cJSON *o = cJSON_Parse(g_body), *res = cJSON_GetObjectItem(o, "results");
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "total")), 5);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "succeeded")), 2);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "failed")), 3);
    assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")), "speech-batch-"));
    static const char *const status[] = {"success", "success", "error", "error", "error"};
    for (int i = 0; i < 5; i++) {
        cJSON *r = cJSON_GetArrayItem(res, i);
        assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "index")), i);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r, "status")), status[i]);
    }
    cJSON *u = cJSON_GetObjectItem(cJSON_GetArrayItem(res, 0), "usage");
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(u, "input_tokens")), 3);
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(u, "output_tokens")) > 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 1),
                                                                 "media_type")),
                        "audio/pcm");
    assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 2),
                                                                     "error")),
                           "input"));
    assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 3),
                                                                     "error")),
                           "items[3]"));
    assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 4),
                                                                     "error")),
                           "nobody"));
    cJSON_Delete(o);
    /* item 0 is test_speech's a.wav (same fields and seed); item 1 that audio at speed 2 */
    batch_audio(0, tmp_path("b0.wav"));
    assert_int_equal(sh("cmp -s %s %s", tmp_path("a.wav"), tmp_path("b0.wav")), 0);
    batch_audio(1, tmp_path("b1.pcm"));
    const long n = wav_frames(tmp_path("a.wav"));
    assert_int_equal(file_bytes(tmp_path("b1.pcm")), 2 * ((n + 1) / 2));
    /* the single request at speed 2, streamed: the same length; usage in vLLM-Omni's headers */
    assert_int_equal(curl(&g_srv, tmp_path("sp.pcm"),
                          "-d '{\"input\":\"Hello there.\",\"voice\":\"ryan\",\"seed\":1,"
                          "\"max_seconds\":2,\"response_format\":\"pcm\",\"speed\":2,"
                          "\"stream\":true,\"stream_format\":\"audio\"}' SRV/v1/audio/speech"),
                     200);
    assert_int_equal(file_bytes(tmp_path("sp.pcm")), 2 * ((n + 1) / 2));
    assert_int_equal(curl(&g_srv, NULL,
                          "-D %s -d '{\"input\":\"Hello there.\",\"voice\":\"ryan\",\"seed\":1,"
                          "\"max_seconds\":2}' SRV/v1/audio/speech",
                          tmp_path("hdr")),
                     200);
    assert_int_equal(sh("grep -qi '^x-vllm-omni-input-tokens: 3' %s", tmp_path("hdr")), 0);
    /* refused batches */
    static const struct {
        const char *body, *code, *param;
    } bad[] = {{"{}", "invalid_type", "items"},
               {"{\"items\":[]}", "invalid_value", "items"},
               {"{\"items\":[{\"input\":\"x\"}],\"stream\":true}", "invalid_value", "stream"},
               {"{\"items\":[{\"input\":\"x\"}],\"colour\":1}", "unknown_field", "colour"},
               {"[1]", "invalid_json", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tmp_write(tmp_path("batch.json"), bad[i].body, strlen(bad[i].body));
        assert_int_equal(curl(&g_srv, NULL, "--data-binary @%s SRV/v1/audio/speech/batch",
                              tmp_path("batch.json")),
                         400);
        assert_string_equal(error_code(), bad[i].code);
    }
    /* an item's unknown field is that item's error */
    const char *odd = "{\"voice\":\"ryan\",\"max_seconds\":0.5,\"items\":[{\"input\":\"x\"},"
                      "{\"input\":\"y\",\"colour\":1}]}";
    tmp_write(tmp_path("batch.json"), odd, strlen(odd));
    assert_int_equal(
        curl(&g_srv, NULL, "--data-binary @%s SRV/v1/audio/speech/batch", tmp_path("batch.json")),
        200);
    assert_non_null(strstr(g_body, "\"succeeded\":1"));
    assert_non_null(strstr(g_body, "items[1]: unknown field 'colour'"));
    char many[2048] = "{\"items\":[";
    for (int i = 0; i <= 32; i++) /* one over the 32 items */
        strcat(many, i ? ",{\"input\":\"x\"}" : "{\"input\":\"x\"}");
    strcat(many, "]}");
    tmp_write(tmp_path("batch.json"), many, strlen(many));
    assert_int_equal(
        curl(&g_srv, NULL, "--data-binary @%s SRV/v1/audio/speech/batch", tmp_path("batch.json")),
        400);
    assert_int_equal(curl(&g_srv, NULL, "SRV/v1/audio/speech/batch"), 405);
    /* Python's standard library */
    assert_int_equal(py(&g_srv,
                        "batch '{\"voice\":\"serena\",\"max_seconds\":1,\"items\":"
                        "[{\"input\":\"One.\"},{\"input\":\"Two.\",\"response_format\":\"pcm\"}]}'"),
                     0);
    o = cJSON_Parse(g_body);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "succeeded")), 2);
    res = cJSON_GetObjectItem(o, "results");
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 1), "bytes")) >
                0);
    cJSON_Delete(o);
    /* 4 items on 2 slots and no queue: the batch waits for its own items instead of failing
     * (429) the next; the two running at a time advance in one batched step; each item is
     * the same request alone, byte for byte */
    char args[2048];
    snprintf(args, sizeof args, "-m %s --voices %s/voices --max-concurrency 2 --max-queue 0 "
             "--batch 2", g_cv, tmp_dir);
    assert_int_equal(server_start(&g_extra, "batch", args), 0);
    const char *item = "{\"input\":\"Hello there.\",\"voice\":\"ryan\",\"seed\":4,"
                       "\"max_seconds\":1}";
    assert_int_equal(curl(&g_extra, tmp_path("alone.wav"), "-d '%s' SRV/v1/audio/speech", item), 200);
    assert_int_equal(curl(&g_extra, NULL, "-d '{\"items\":[%s,%s,%s,%s]}' SRV/v1/audio/speech/batch",
                          item, item, item, item),
                     200);
    o = cJSON_Parse(g_body);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "succeeded")), 4);
    cJSON_Delete(o);
    for (int i = 0; i < 4; i++) {
        batch_audio(i, tmp_path("bi.wav"));
        assert_int_equal(sh("cmp -s %s %s", tmp_path("alone.wav"), tmp_path("bi.wav")), 0);
    }
    const double steps = metric(&g_extra, "qvoice_batch_steps_total "),
                 frames = metric(&g_extra, "qvoice_batch_frames_total ");
    print_message("batch of 4 on 2 slots: %g frames in %g batched steps\n", frames, steps);
    assert_true(steps >= 1 && frames > steps);
    assert_int_equal(server_stop(&g_extra), 0);
    if (!g_npm) return;
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", g_srv.port);
    assert_int_equal(sh("node tests/server/openai_speech.mjs %s batch %s", base,
                        tmp_path("ob.wav")), 0);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("o.wav"), tmp_path("ob.wav")), 0);
    assert_int_equal(sh("node tests/server/openai_speech.mjs %s speed %s", base,
                        tmp_path("os2.pcm")), 0);
    const long no = wav_frames(tmp_path("o.wav"));
    assert_int_equal(file_bytes(tmp_path("os2.pcm")), 2 * ((no + 1) / 2));
}

/* --quant q4: a q4 server answers, and two concurrent streams, advanced together as one batch,
 * give each the same bytes as the same request alone (seeded: the batch is exact per stream). */
static void test_q4_streams(void **state) {
    (void)state;
    char args[2048];
    snprintf(args, sizeof args, "-m %s --voices %s/voices --quant q4 --max-concurrency 2 --batch 2",
             g_cv, tmp_dir);
    assert_int_equal(sh("bin/qvoice-server -m %s --voices x --quant q5 2>&1 | "
                        "grep -q 'expected bf16, int8 or q4'", g_cv), 0);
    assert_int_equal(server_start(&g_extra, "q4", args), 0);
    char json[1024];
    int k = snprintf(json, sizeof json,
                     "{\"input\":\"A first sentence for the four-bit model. And a second one, "
                     "a little longer.\",\"voice\":\"ryan\",\"seed\":7,\"stream_format\":"
                     "\"audio\",\"response_format\":\"pcm\",\"max_new_tokens\":60}");
    tmp_write(tmp_path("q4.json"), json, (size_t)k);
    assert_int_equal(curl(&g_extra, tmp_path("q4-alone.pcm"), "-d @%s SRV/v1/audio/speech",
                          tmp_path("q4.json")),
                     200);
    assert_true(file_bytes(tmp_path("q4-alone.pcm")) > 0);
    background_curl(&g_extra, tmp_path("q4.json"), tmp_path("q4-a.pcm"), tmp_path("q4-a.rc"));
    background_curl(&g_extra, tmp_path("q4.json"), tmp_path("q4-b.pcm"), tmp_path("q4-b.rc"));
    for (int i = 0; i < WAIT(1200) && (file_bytes(tmp_path("q4-a.rc")) <= 0 ||
                                 file_bytes(tmp_path("q4-b.rc")) <= 0); i++)
        sleep_ms(100);
    assert_true(file_has(tmp_path("q4-a.rc"), "0"));
    assert_true(file_has(tmp_path("q4-b.rc"), "0"));
    const double steps = metric(&g_extra, "qvoice_batch_steps_total ");
    print_message("q4 server: %ld bytes alone, batched steps %g\n",
                  file_bytes(tmp_path("q4-alone.pcm")), steps);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("q4-alone.pcm"), tmp_path("q4-a.pcm")), 0);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("q4-alone.pcm"), tmp_path("q4-b.pcm")), 0);
    assert_true(steps >= 1); /* the two ran as one batch for at least a step */
    assert_int_equal(server_stop(&g_extra), 0);
}

static void test_disconnect_and_limits(void **state) {
    (void)state;
    /* a long streamed request in the background, then a second one: 429 with Retry-After */
    start_busy("busy", "--max-queue 0", tmp_path("long.json"), tmp_path("bg.pcm"),
               tmp_path("bg.rc"));
    assert_int_equal(curl(&g_extra, NULL, "-D %s -d '{\"input\":\"x\"}' SRV/v1/audio/speech",
                          tmp_path("hdr")), 429);
    assert_true(file_has(tmp_path("hdr"), "Retry-After: 1"));
    /* SIGTERM under load: the stream in flight ends normally (all of it, a clean chunked end),
     * the server exits 0 */
    assert_int_equal(server_stop(&g_extra), 0);
    assert_true(file_has(g_extra.log, "draining"));
    for (int i = 0; i < WAIT(300) && file_bytes(tmp_path("bg.rc")) <= 0; i++) sleep_ms(100);
    assert_true(file_has(tmp_path("bg.rc"), "0\n"));
    long got = file_bytes(tmp_path("bg.pcm"));
    assert_true(got > 0 && got <= 60 * 48000);
    assert_int_equal(sh("curl -s --max-time 5 http://127.0.0.1:%d/health", g_extra.port) == 0, 0);
    /* a client that leaves mid-stream cancels its synthesis */
    char args[2048];
    snprintf(args, sizeof args,
             "-m %s --voices %s/voices --max-concurrency 1 --max-queue 0 --timeout 2", g_cv,
             tmp_dir);
    assert_int_equal(server_start(&g_extra, "gone", args), 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "timeout 60 python3 tests/server/client.py %d disconnect \"$(cat %s)\"", g_extra.port,
             tmp_path("long.json"));
    assert_int_equal(sh("%s > /dev/null", cmd), 0);
    double cancelled = 0;
    for (int i = 0; i < WAIT(100) && (cancelled = metric(&g_extra, "qvoice_cancelled_total ")) < 1;
         i++)
        sleep_ms(100);
    assert_true(cancelled >= 1);
    assert_true(metric(&g_extra, "qvoice_active_sessions ") == 0);
    /* over the wall time: the full-size 0.6B needs seconds for the frames a sentence may take
     * (its guard allows ~100 frames for it, >= 60 ms each), so --timeout 1 ends it first: 504 (the tiny
     * model finishes or trips its guard within a second on an idle machine) */
    assert_int_equal(server_stop(&g_extra), 0);
    char big[1024];
    snprintf(big, sizeof big, "-m %.500s/q06b-cv --voices %s/voices --timeout 1",
             test_cache_dir(), tmp_dir);
    assert_int_equal(server_start(&g_extra, "late", big), 0);
    const char *body = "{\"voice\":\"ryan\",\"input\":\"Here is a sentence that takes a while.\"}";
    tmp_write(tmp_path("late.json"), body, strlen(body));
    assert_int_equal(curl(&g_extra, NULL, "-d @%s SRV/v1/audio/speech", tmp_path("late.json")), 504);
    assert_string_equal(error_code(), "timeout");
    assert_int_equal(server_stop(&g_extra), 0);
}

/* SIGTERM under load: one stream running, one waiting for the only slot. Both are served to the
 * end after the drain began (complete chunked bodies: curl exits 0), nothing new is accepted, the
 * server exits 0. */
static void test_drain_under_load(void **state) {
    (void)state;
    start_busy("drain", "--max-queue 2", tmp_path("drain.json"), tmp_path("d0.pcm"),
               tmp_path("d0.rc"));
    background_curl(&g_extra, tmp_path("drain.json"), tmp_path("d1.pcm"), tmp_path("d1.rc"));
    double queued = 0;
    for (int i = 0; i < WAIT(100) && (queued = metric(&g_extra, "qvoice_queued_sessions ")) < 1;
         i++)
        sleep_ms(50);
    assert_true(queued >= 1);
    int port = g_extra.port;
    kill(g_extra.pid, SIGTERM);
    for (int i = 0; i < WAIT(50) && !file_has(g_extra.log, "draining"); i++)
        sleep_ms(100);
    /* the listening socket is closed right after the log line: a new client is refused (curl
     * exit 7) while the two are still being served */
    assert_int_equal(
        sh("for i in $(seq 40); do curl -s --max-time 5 -o /dev/null "
           "http://127.0.0.1:%d/health; [ $? = 7 ] && exit 0; sleep 0.05; done; exit 1",
           port),
        0);
    for (int k = 0; k < 2; k++) { /* (one after the other: up to 2 min on a loaded machine) */
        char rc[64], out[64];
        snprintf(rc, sizeof rc, "d%d.rc", k);
        snprintf(out, sizeof out, "d%d.pcm", k);
        for (int i = 0; i < WAIT(1200) && file_bytes(tmp_path(rc)) <= 0; i++)
            sleep_ms(100);
        assert_true(file_has(tmp_path(rc), "0\n"));
        assert_true(file_bytes(tmp_path(out)) > 0);
    }
    assert_int_equal(server_wait(&g_extra), 0); /* it had its SIGTERM */
    /* both ended after the drain began */
    assert_int_equal(
        sh("sed -n '/draining/,$p' %s | grep -c 'POST /v1/audio/speech 200' | grep -qx 2",
           g_extra.log),
        0);
}

/* ==== cloning ================================================================================ */

static void test_clone_upload(void **state) {
    (void)state;
    char args[2048];
    snprintf(args, sizeof args, "-m %s --voices %s/voices --clone-model %s", g_cv, tmp_dir, g_base);
    assert_int_equal(server_start(&g_extra, "clone", args), 0);
    assert_int_equal(ready_flag(&g_extra, "cloning"), 1);
    assert_int_equal(py(&g_extra, "upload %s name=clip consent=yes language=english", CLIP), 0);
    assert_true(!strncmp(g_body, "200 ", 4) && strstr(g_body, "\"report\""));
    /* corrupt audio of each container: the start of a valid file, then garbage */
    const struct {
        const char *name;
        int format;
    } kinds[] = {{"bad.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16},
                 {"bad.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16},
                 {"bad.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS},
                 {"bad.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III}};
    for (int i = 0; i < 4; i++) {
        const char *f = tmp_path(kinds[i].name);
        SF_INFO info = {.samplerate = 24000, .channels = 1, .format = kinds[i].format};
        SNDFILE *w = sf_open(f, SFM_WRITE, &info);
        if (!w) continue; /* this libsndfile cannot write it */
        static float tone[24000];
        for (int k = 0; k < 24000; k++) tone[k] = 0.3f * (float)((k * 7919) % 200 - 100) / 100.0f;
        sf_writef_float(w, tone, 24000);
        sf_close(w);
        assert_int_equal(sh("head -c 700 %s > %s.cut && head -c 8000 /dev/urandom >> %s.cut", f,
                            f, f), 0);
        assert_int_equal(py(&g_extra, "upload %s.cut consent=yes", f), 0);
        if (strncmp(g_body, "400 ", 4)) fail_msg("%s: %s", f, g_body);
    }
    /* a 2 MB 8-bit WAV claiming 6 MHz: refused by its claimed rate before any decoding (it was
     * resampled first, ~1 s of CPU, then found too short) */
    static uint8_t wav[44 + 2000000];
    const uint32_t rate = 6000000, data = 2000000;
    memcpy(wav, "RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0", 24);
    for (int b = 0; b < 4; b++) {
        wav[4 + b] = (uint8_t)((36 + data) >> (8 * b));
        wav[24 + b] = wav[28 + b] = (uint8_t)(rate >> (8 * b)); /* rate, bytes per second */
        wav[40 + b] = (uint8_t)(data >> (8 * b));
    }
    memcpy(wav + 32, "\x01\0\x08\0data", 8);
    for (uint32_t k = 0; k < data; k++) wav[44 + k] = (uint8_t)(128 + (k * 7919) % 64);
    tmp_write(tmp_path("6mhz.wav"), wav, sizeof wav);
    assert_int_equal(curl(&g_extra, NULL, "-F audio_sample=@%s -F consent=yes SRV/v1/audio/voices",
                          tmp_path("6mhz.wav")),
                     400);
    assert_string_equal(error_code(), "invalid_audio");
    assert_non_null(strstr(g_body, "sample rate 6000000 Hz"));
    assert_int_equal(server_stop(&g_extra), 0);
    /* one admission path: a clone takes a synthesis slot like a speech request, so with the one
     * slot busy and no queue it is refused (429, Retry-After) instead of running beside it */
    char more[1024];
    snprintf(more, sizeof more, "--max-queue 0 --clone-model %s", g_base);
    start_busy("clonebusy", more, tmp_path("long.json"), tmp_path("bg.pcm"), tmp_path("bg.rc"));
    assert_int_equal(curl(&g_extra, NULL,
                          "-D %s -F audio_sample=@%s -F consent=yes SRV/v1/audio/voices",
                          tmp_path("hdr"), CLIP),
                     429);
    assert_string_equal(error_code(), "busy");
    assert_true(file_has(tmp_path("hdr"), "Retry-After: 1"));
    assert_int_equal(server_stop(&g_extra), 0);
}

/* Signed voices (issue 28). With --sign-key the voices the server makes are signed with it: a
 * clone from audio, and an upload whose name it rewrote, downloaded, verify against its public
 * key. With --trusted a .qvoice upload must carry a valid signature by a trusted key: an unsigned
 * file and one signed by another key are refused (403, naming that signer), one edited after
 * signing too (400); a trusted upload the server keeps as it is keeps its signer. A key file that cannot be read stops the start. */
static void upload_id(char id[65]) {
    cJSON *o = cJSON_Parse(g_body + 4);
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(o, "id"));
    snprintf(id, 65, "%s", v ? v : "");
    cJSON_Delete(o);
}

static void verify_download(const char *id, const char *pub, const char *signer) {
    assert_int_equal(curl(&g_extra, tmp_path("signed.qvoice"),
                          "'SRV/v1/audio/voices/%s?download=1'", id), 200);
    assert_int_equal(sh("bin/voicefmt verify --trusted %s %s > %s 2>&1", pub,
                        tmp_path("signed.qvoice"), tmp_path("verify.txt")), 0);
    assert_true(file_has(tmp_path("verify.txt"), signer));
}

static void test_signed_voices(void **state) {
    (void)state;
    const char *d = tmp_dir;
    char args[4096], id[65];
    assert_int_equal(sh("for k in srv alice mallory; do bin/voicefmt keygen -o %s/$k >/dev/null "
                        "|| exit 1; done", d), 0);
    assert_int_equal(sh("bin/voicefmt sign --key %s/alice.pem --signer alice -o %s/alice.qvoice "
                        "%s && bin/voicefmt sign --key %s/mallory.pem --signer mallory -o "
                        "%s/mallory.qvoice %s", d, d, g_voice, d, d, g_voice), 0);
    snprintf(args, sizeof args, "-m %s --voices %s/signed --clone-model %s --sign-key %s/srv.pem "
             "--signer 'test server' --trusted %s/alice.pub.pem", g_cv, d, g_base, d, d);
    assert_int_equal(server_start(&g_extra, "signed", args), 0);
    assert_int_equal(py(&g_extra, "upload %s name=clip consent=yes language=english", CLIP), 0);
    assert_true(!strncmp(g_body, "200 ", 4));
    upload_id(id);
    verify_download(id, tmp_path("srv.pub.pem"), "test server");
    assert_int_equal(py(&g_extra, "upload %s consent=yes", g_voice), 0);
    assert_true(!strncmp(g_body, "403 ", 4) && strstr(g_body, "untrusted_signer") &&
                strstr(g_body, "not signed"));
    assert_int_equal(py(&g_extra, "upload %s/mallory.qvoice consent=yes", d), 0);
    assert_true(!strncmp(g_body, "403 ", 4) && strstr(g_body, "untrusted_signer") &&
                strstr(g_body, "mallory"));
    { /* alice's file edited after signing (its name), the CRCs made good again */
        size_t n;
        uint8_t *b = (uint8_t *)tmp_read(tmp_path("alice.qvoice"), &n);
        uint8_t *at = memmem(b, n, "tiny", 4);
        assert_non_null(at);
        at[3] = 'z';
        qvf_sample_fix_crcs(b, n);
        tmp_write(tmp_path("edited.qvoice"), b, n);
        free(b);
    }
    assert_int_equal(py(&g_extra, "upload %s/edited.qvoice consent=yes", d), 0);
    assert_true(!strncmp(g_body, "400 ", 4) && strstr(g_body, "invalid_signature"));
    assert_int_equal(py(&g_extra, "upload %s/alice.qvoice consent=yes", d), 0); /* kept as is */
    assert_true(!strncmp(g_body, "200 ", 4) && strstr(g_body, "\"signer\":\"alice\"") &&
                strstr(g_body, "\"valid\":true,\"trusted\":true"));
    upload_id(id);
    verify_download(id, tmp_path("alice.pub.pem"), "alice");
    char alice_id[65];
    memcpy(alice_id, id, 65);
    assert_int_equal(py(&g_extra, "upload %s/alice.qvoice name=renamed consent=yes", d), 0);
    assert_true(!strncmp(g_body, "200 ", 4)); /* rewritten: now the server's */
    upload_id(id);
    verify_download(id, tmp_path("srv.pub.pem"), "test server");
    assert_int_equal(sh("bin/voicefmt verify --trusted %s/alice.pub.pem %s >/dev/null 2>&1", d,
                        tmp_path("signed.qvoice")), 1);
    /* the refusal names the key and the signer, as the server's 403 does */
    assert_int_equal(sh("bin/voicefmt verify --trusted %s/alice.pub.pem %s 2>&1 | grep -Eq "
                        "'signed by key [0-9a-f]{16} \\(signer \"test server\"\\), not one of'",
                        d, tmp_path("signed.qvoice")), 0);
    /* the list shows each voice's signer, read from the files the server finds on disk (after a
       restart: alice's voice is a part, verified put back together with its text side) */
    assert_int_equal(sh("cp %s/mallory.qvoice %s/signed/%064d.qvoice && cp %s/edited.qvoice "
                        "%s/signed/%064d.qvoice", d, d, 1, d, d, 2), 0);
    /* a voice under its own name and a file that does not read: not listed, each logged */
    assert_int_equal(sh("cp %s/mallory.qvoice %s/signed/mallory.qvoice && echo broken > "
                        "%s/signed/%064d.qvoice", d, d, d, 3), 0);
    assert_int_equal(server_stop(&g_extra), 0);
    assert_int_equal(server_start(&g_extra, "signed", args), 0);
    assert_true(file_has(g_extra.log, "signed/mallory.qvoice is not in the library, whose files "
                                      "are named by their SHA-256"));
    assert_true(file_has(g_extra.log, "0003.qvoice left out: "));
    assert_int_equal(curl(&g_extra, tmp_path("list.json"), "SRV/v1/audio/voices"), 200);
    size_t n_list;
    char *text = tmp_read(tmp_path("list.json"), &n_list);
    cJSON *list = cJSON_ParseWithLength(text, n_list);
    free(text);
    int seen = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(list, "data")) {
        const char *vid = cJSON_GetStringValue(cJSON_GetObjectItem(e, "id"));
        cJSON *sig = cJSON_GetObjectItem(e, "signature");
        const char *who = cJSON_GetStringValue(cJSON_GetObjectItem(sig, "signer"));
        int valid = cJSON_IsTrue(cJSON_GetObjectItem(sig, "valid"));
        int trusted = cJSON_IsTrue(cJSON_GetObjectItem(sig, "trusted"));
        assert_non_null(who); /* every voice here is signed */
        if (!strcmp(vid, alice_id)) seen |= 1, assert_true(!strcmp(who, "alice") && valid && trusted);
        if (strspn(vid, "0") == 63 && vid[63] == '1')
            seen |= 2, assert_true(!strcmp(who, "mallory") && valid && !trusted);
        if (strspn(vid, "0") == 63 && vid[63] == '2')
            seen |= 4, assert_true(!strcmp(who, "alice") && !valid && !trusted);
        if (!strcmp(who, "test server")) seen |= 8, assert_true(valid && trusted);
    }
    cJSON_Delete(list);
    assert_int_equal(seen, 15);
    assert_int_equal(server_stop(&g_extra), 0);
    /* a key that cannot be used: the server does not start, and says which file */
    assert_int_equal(sh("bin/qvoice-server -m %s --voices %s/signed --sign-key %s/alice.pub.pem "
                        "> %s 2>&1", g_cv, d, d, tmp_path("badkey.txt")), 1);
    assert_true(file_has(tmp_path("badkey.txt"), "alice.pub.pem: not an Ed25519 private key"));
}

/* Eight clone uploads at once, five rounds, on four slots and one cloner (what make tsan and
 * make asan run for races and memory errors): each is answered 200, its voice named "" when the
 * form gives no name (it was the upload's temporary name), and the library holds one file per
 * distinct id of the replies (META has the creation second, so ids repeat within a second).
 */
static void test_parallel_clones(void **state) {
    (void)state;
    char args[2048];
    snprintf(args, sizeof args,
             "-m %s --voices %s/pvoices --clone-model %s --max-concurrency 4 --max-queue 8", g_cv,
             tmp_dir, g_base);
    assert_int_equal(server_start(&g_extra, "pclone", args), 0);
    char pc[1024];
    snprintf(pc, sizeof pc, "%s", tmp_path("pc")); /* replies pc.1 .. pc.8 */
    for (int round = 0; round < 5; round++) {
        assert_int_equal(sh("seq 8 | xargs -P 8 -I @@ sh -c 'curl -s --max-time %d -o %s.@@ "
                            "-w \"%%{http_code}\\n\" -F audio_sample=@%s -F consent=yes "
                            "http://127.0.0.1:%d/v1/audio/voices' > %s",
                            WAIT(120), pc, CLIP, g_extra.port, tmp_path("pc.codes")),
                         0);
        if (sh("grep -cx 200 %s | grep -qx 8", tmp_path("pc.codes"))) {
            sh("cat %s %s.[1-8] >&2", tmp_path("pc.codes"), pc);
            fail_msg("round %d: not 8 times 200", round);
        }
        assert_int_equal(
            sh("grep -l '\"object\":\"voice\",\"name\":\"\",' %s.[1-8] | wc -l | grep -qx 8", pc),
            0);
        assert_int_equal(sh("! cat %s.[1-8] | grep -q upload-", pc), 0);
        assert_int_equal(sh("for f in %s.[1-8]; do head -c 72 $f | cut -c 8-71; echo; done >> %s",
                            pc, tmp_path("pc.ids")),
                         0);
    }
    /* one file per distinct id (clones within one second are the same bytes: one voice) */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/pvoices", tmp_dir);
    assert_int_equal(sh("sort -u %s | grep -cx '[0-9a-f]\\{64\\}' > %s", tmp_path("pc.ids"),
                        tmp_path("pc.n")),
                     0);
    char n[32];
    slurp(tmp_path("pc.n"), n, sizeof n);
    print_message("parallel clones: 40 uploads, %d distinct voices\n", atoi(n));
    assert_true(atoi(n) >= 1);
    assert_int_equal(count_files(dir, "\\.qv"), atoi(n));
    assert_int_equal(server_stop(&g_extra), 0);
}

/* ==== scale-out ============================================================================= */

/* vLLM-Omni's per-request cloning: ref_audio as a data URL (the openai package passing it
 * through) speaks exactly as a voice uploaded from the same clip (same seed); the second request
 * is a cache hit (/metrics); file:// only inside --ref-audio-dir; the cache keeps its byte bound.
 */
static void test_ref_audio(void **state) {
    (void)state;
    char args[4096], dir[1024];
    snprintf(dir, sizeof dir, "%s/refs", tmp_dir);
    mkdir(dir, 0755);
    assert_int_equal(sh("cp %s %s/clip.wav", CLIP, dir), 0);
    /* unmarked: the two watermark payloads name two voice files (the upload's has a name and a
     * consent record), while the samples are the same */
    /* a plain HTTP server on loopback (Python's standard library) serving the clip: the URL
     * prefix the server may fetch from */
    assert_int_equal(sh("python3 -c 'import functools, http.server, sys; "
                        "h = functools.partial(http.server.SimpleHTTPRequestHandler, "
                        "directory=sys.argv[1]); s = http.server.HTTPServer((\"127.0.0.1\", 0), h); "
                        "open(sys.argv[2] + \".tmp\", \"w\").write(str(s.server_port)); "
                        "__import__(\"os\").rename(sys.argv[2] + \".tmp\", sys.argv[2]); "
                        "s.serve_forever()' %s %s >/dev/null 2>&1 & echo $! > %s",
                        dir, tmp_path("http.port"), tmp_path("http.pid")),
                     0);
    char port[16] = "";
    for (int i = 0; i < 100 && !port[0]; i++) {
        usleep(50000);
        slurp(tmp_path("http.port"), port, sizeof port);
    }
    assert_true(port[0] != 0);
    snprintf(args, sizeof args,
             "-m %s --voices %s/voices --clone-model %s --ref-audio-dir %s --ref-cache-mb 1 "
             "--no-watermark --ref-audio-urls http://127.0.0.1:%s/",
             g_cv, tmp_dir, g_base, dir, port);
    assert_int_equal(server_start(&g_extra, "ref", args), 0);
    assert_int_equal(py(&g_extra, "upload %s name=refclip consent=yes", CLIP), 0);
    assert_true(!strncmp(g_body, "200 ", 4));
    const char *common = "\"input\":\"Hello there.\",\"seed\":7,\"response_format\":\"pcm\","
                         "\"max_seconds\":1";
    assert_int_equal(curl(&g_extra, tmp_path("up.pcm"),
                          "-H 'Content-Type: application/json' -d '{%s,\"voice\":\"refclip\"}' "
                          "SRV/v1/audio/speech",
                          common),
                     200);
    assert_true(file_bytes(tmp_path("up.pcm")) > 0);
    assert_int_equal(
        sh("{ printf '{%%s,\"ref_audio\":\"data:audio/wav;base64,' '%s'; base64 -w0 %s; "
           "printf '\",\"x_vector_only_mode\":true,\"task_type\":\"Base\"}'; } > %s",
           common, CLIP, tmp_path("ref.json")),
        0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(curl(&g_extra, tmp_path("ref.pcm"),
                              "-H 'Content-Type: application/json' --data-binary @%s "
                              "SRV/v1/audio/speech",
                              tmp_path("ref.json")),
                         200);
        assert_int_equal(sh("cmp -s %s %s", tmp_path("up.pcm"), tmp_path("ref.pcm")), 0);
    }
    assert_true(metric(&g_extra, "qvoice_ref_cache_misses_total ") == 1);
    assert_true(metric(&g_extra, "qvoice_ref_cache_hits_total ") == 1);
    assert_true(metric(&g_extra, "qvoice_ref_cache_entries ") == 1);
    /* vLLM-Omni's usage: an ICL voice's reference frames are input_token_details.audio_tokens
     * (the ~12 s window: 140-160 frames), counted in input_tokens beside the text's 3 */
    assert_int_equal(sh("bin/clone -m %s %s -o %s/icl.qvoice --consent test --icl-window 0-12 -t "
                        "'One dollar and eighty-seven cents. That was all. And sixty cents of it "
                        "was in pennies, saved one and two at a time by bulldozing the grocer.' "
                        ">/dev/null 2>&1",
                        g_base, CLIP, tmp_dir),
                     0);
    snprintf(args, sizeof args, "%s/icl.qvoice", tmp_dir);
    assert_int_equal(py(&g_extra, "upload %s name=iclvoice consent=yes", args), 0);
    assert_true(!strncmp(g_body, "200 ", 4));
    assert_int_equal(curl(&g_extra, NULL, "-d '{\"input\":\"Hello there.\",\"voice\":\"iclvoice\","
                                          "\"max_seconds\":0.3,\"response_format\":\"pcm\","
                                          "\"stream\":true}' SRV/v1/audio/speech"),
                     200);
    const char *u = strstr(g_body, "\"usage\":{\"input_tokens\":");
    int in = 0, text = 0, audio = 0;
    assert_true(u && sscanf(u, "\"usage\":{\"input_tokens\":%d,", &in) == 1);
    u = strstr(u, "\"input_token_details\":");
    assert_true(u && sscanf(u, "\"input_token_details\":{\"text_tokens\":%d,\"audio_tokens\":%d",
                            &text, &audio) == 2);
    print_message("ICL voice: input_tokens %d = text %d + audio %d\n", in, text, audio);
    assert_true(text == 3 && audio >= 140 && audio <= 160 && in == text + audio);
    if (g_npm) { /* the official client passes vLLM-Omni's fields through: a third hit */
        assert_int_equal(sh("node tests/server/openai_speech.mjs http://127.0.0.1:%d ref %s %s",
                            g_extra.port, tmp_path("npm.pcm"), CLIP),
                         0);
        assert_int_equal(sh("cmp -s %s %s", tmp_path("up.pcm"), tmp_path("npm.pcm")), 0);
        assert_true(metric(&g_extra, "qvoice_ref_cache_hits_total ") == 2);
    }
    /* file:// inside the allowed directory is the same reference (same key: a hit) */
    assert_int_equal(curl(&g_extra, tmp_path("file.pcm"),
                          "-H 'Content-Type: application/json' -d '{%s,\"ref_audio\":"
                          "\"file://%s/clip.wav\",\"x_vector_only_mode\":true}' "
                          "SRV/v1/audio/speech",
                          common, dir),
                     200);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("up.pcm"), tmp_path("file.pcm")), 0);
    /* an http URL under --ref-audio-urls: fetched, the same reference again; a missing one is
     * the fetch's 502 */
    assert_int_equal(curl(&g_extra, tmp_path("url.pcm"),
                          "-H 'Content-Type: application/json' -d '{%s,\"ref_audio\":"
                          "\"http://127.0.0.1:%s/clip.wav\",\"x_vector_only_mode\":true}' "
                          "SRV/v1/audio/speech",
                          common, port),
                     200);
    assert_int_equal(sh("cmp -s %s %s", tmp_path("up.pcm"), tmp_path("url.pcm")), 0);
    assert_int_equal(curl(&g_extra, NULL,
                          "-H 'Content-Type: application/json' -d '{%s,\"ref_audio\":"
                          "\"http://127.0.0.1:%s/missing.wav\",\"x_vector_only_mode\":true}' "
                          "SRV/v1/audio/speech",
                          common, port),
                     502);
    assert_string_equal(error_code(), "upstream_error");
    assert_null(strstr(g_body, tmp_dir)); /* the fetched server's paths are not echoed */
    sh("kill $(cat %s)", tmp_path("http.pid"));
    /* outside it (also through ..), http(s) not under the prefix, and a transcript that does not
     * fit the clip */
    assert_int_equal(curl(&g_extra, NULL,
                          "-H 'Content-Type: application/json' -d '{%s,\"ref_audio\":"
                          "\"file://%s/../voices/x.wav\",\"x_vector_only_mode\":true}' "
                          "SRV/v1/audio/speech",
                          common, dir),
                     400);
    assert_string_equal(error_code(), "invalid_value");
    assert_int_equal(curl(&g_extra, NULL,
                          "-H 'Content-Type: application/json' -d '{%s,\"ref_audio\":"
                          "\"https://example.com/a.wav\",\"x_vector_only_mode\":true}' "
                          "SRV/v1/audio/speech",
                          common),
                     400);
    assert_string_equal(error_code(), "unsupported_value");
    assert_int_equal(curl(&g_extra, NULL,
                          "-H 'Content-Type: application/json' -d '{%s,\"ref_audio\":"
                          "\"file://%s/clip.wav\",\"ref_text\":\"Hello world\"}' "
                          "SRV/v1/audio/speech",
                          common, dir),
                     400);
    assert_non_null(strstr(g_body, "\"ref_text\""));
    assert_int_equal(curl(&g_extra, NULL,
                          "-H 'Content-Type: application/json' -d '{%s,\"ref_audio\":"
                          "\"data:audio/wav;base64,AAAA\",\"x_vector_only_mode\":true}' "
                          "SRV/v1/audio/speech",
                          common),
                     400);
    assert_string_equal(error_code(), "invalid_audio");
    /* a speaker_embedding of the model's x-vector size (tiny: 64) is a voice of its own */
    char emb[2048];
    size_t n = (size_t)snprintf(emb, sizeof emb, "[");
    for (int i = 0; i < 64; i++)
        n += (size_t)snprintf(emb + n, sizeof emb - n, "%s%.3f", i ? "," : "", 0.1 * ((i % 7) - 3));
    snprintf(emb + n, sizeof emb - n, "]");
    assert_int_equal(curl(&g_extra, tmp_path("emb.pcm"),
                          "-H 'Content-Type: application/json' -d '{%s,\"speaker_embedding\":%s}' "
                          "SRV/v1/audio/speech",
                          common, emb),
                     200);
    assert_true(file_bytes(tmp_path("emb.pcm")) > 0);
    /* the 1 MB bound: two 0.28 MB references and an embedding fit; the cache never holds more */
    assert_true(metric(&g_extra, "qvoice_ref_cache_bytes ") <= 1 << 20);
    /* no temporary is left behind in the voices directory (only the uploaded voice) */
    char vdir[1024];
    snprintf(vdir, sizeof vdir, "%s/voices", tmp_dir);
    assert_int_equal(count_files(vdir, ".new-"), 0);
    assert_int_equal(server_stop(&g_extra), 0);
}
static void test_scale_out(void **state) {
    (void)state;
    if (sh("command -v nginx >/dev/null || test -x /usr/sbin/nginx")) skip(); /* make deps has it */
    /* nginx + two servers sharing a voices dir: upload via nginx, speak on the other backend,
     * 6 requests with one backend killed after the third: all succeed */
    int rc = sh("N_REQUESTS=6 timeout 300 scripts/serve-lb.sh %s > %s 2>&1", g_cv, tmp_path("lb.out"));
    if (rc) {
        slurp(tmp_path("lb.out"), g_body, sizeof g_body);
        fail_msg("serve-lb.sh exited %d:\n%s", rc, g_body);
    }
    assert_true(file_has(tmp_path("lb.out"), "6/6 requests succeeded"));
    /* the active checker took the killed backend out, and back in once restarted */
    assert_true(file_has(tmp_path("lb.out"), " down (GET /ready: "));
    assert_true(file_has(tmp_path("lb.out"), " up again"));
}

QVT_MAIN(group_setup, group_teardown, test_routes, test_speech_bad_input,
         test_voices, test_slow_client, test_slow_attack, test_auth, test_key_owners, test_library,
         test_textside, test_textside_shared,
         test_metrics, test_speech, test_sample_rate, test_aac, test_batch_and_speed, test_q4_streams, test_disconnect_and_limits,
         test_drain_under_load, test_clone_upload, test_signed_voices, test_parallel_clones, test_ref_audio, test_scale_out,
         test_detect, test_log_escaped, test_no_leaks)
