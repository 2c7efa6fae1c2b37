/* fuzz_voice_accept.c — libFuzzer target: the acceptance path of an uploaded voice file, as
 * POST /v1/audio/voices runs it: the structural read (qvf_read_mem), qv_voice_open + the fit and
 * kinship check (qv_voice_check) against the tiny CustomVoice model ($QVOICE_CACHE/tiny-cv: the run
 * stops with a message without it, rather than pass every input unchecked), and
 * the rewrite to v4 with name and consent in META (to a memory sink). Input = the file. fuzz.sh
 * runs it with -malloc_limit_mb=4, so an input making the path allocate more than a real voice
 * needs (a legacy LZ4 record decoded whole) is a finding, not just a slow run.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/qvoice.h"
#include "voicefmt/qvf_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The served model, loaded once; exits with a message when it does not load. */
static qv_model *served(void) {
    static int tried;
    static qv_model *m;
    if (tried) return m;
    tried = 1;
    const char *cache = getenv("QVOICE_CACHE");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tiny-cv", cache ? cache : "cache");
    if (qv_model_load(&m, dir)) {
        fprintf(stderr, "fuzz_voice_accept: needs the tiny model (make models): %s\n",
                qv_last_error());
        exit(1);
    }
    return m;
}

/* The upload as the server stores it: a file with a .qvoice name (one per process, reused), in
 * memory when /dev/shm is there (one write and read per input). */
static const char *upload_path(void) {
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "%s/fuzz_voice_accept_%d.qvoice",
                 access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm", (int)getpid());
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qv_model *m = served(); /* first: no input runs without the model */
    char err[256];
    qvf_voice *v = NULL;
    if (qvf_read_mem(data, size, "upload.qvoice", 0, &v, err, sizeof err)) return 0;
    const char *path = upload_path();
    FILE *f = fopen(path, "wb");
    int written = f && fwrite(data, 1, size, f) == size;
    if (f && fclose(f)) written = 0;
    qv_voice *qv;
    if (written && !qv_voice_open(&qv, path)) {
        char *warning = NULL;
        (void)qv_voice_check(qv, m, &warning);
        qv_free(warning);
        qv_voice_free(qv);
    }
    unlink(path);
    char *out = NULL;
    size_t n = 0;
    FILE *sink = open_memstream(&out, &n);
    if (sink) {
        if (!qvf_meta_set(v, "name", "fuzz") && !qvf_meta_set(v, "consent.method", "typed") &&
            !qvf_meta_set(v, "consent.statement", "fuzz"))
            (void)qvf_write_stream(v, sink, 4, "rewrite.qvoice", err, sizeof err);
        fclose(sink);
    }
    free(out);
    qvf_voice_free(v);
    return 0;
}
