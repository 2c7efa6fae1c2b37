/* fuzz_speech_json.c — libFuzzer target: the body of POST /v1/audio/speech through
 * qvs_speech_parse, the server's own reading and checking of a request (JSON, model, voice,
 * language, format, sampling, limits), against an in-process server on the tiny CustomVoice model
 * (fuzz_server.h), without a socket and without synthesis. An error's message must name no
 * server path. Input = the body.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qv_server *s = fuzz_server();
    int model;
    qv_params p;
    verdict v;
    /* NUL-terminated as the server keeps a body (server.c): the parser reads body[len] */
    char *body = malloc(size + 1);
    if (!body) return 0;
    memcpy(body, data, size);
    body[size] = 0;
    struct job *j = qvs_speech_parse(s, NULL, NULL, body, size, qvs_now_s() + 10, &model, &p, &v);
    if (j) {
        if (model < 0 || model >= s->n_models) abort();
        qvs_speech_job_free(j);
    } else {
        if ((v.status < 400 && v.status != -1 && v.status != -2) || v.status > 599) abort();
        qvs_scrub(s, v.msg, sizeof v.msg); /* as qvs_reply_error does */
        fuzz_no_path(v.msg, data, size);
    }
    free(body);
    return 0;
}
