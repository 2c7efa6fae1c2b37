/* batch.c — POST /v1/audio/speech/batch, vLLM-Omni's shape: up to 32 items, each the batch's own
 * fields overridden by the item's, read and checked as one speech request each
 * (qvs_speech_parse) and run through the one admission path (qvs_job_start). Items start as
 * slots free up, so the ones running at once advance together in the model's batched frame
 * steps. Each item ends in its own result (base64 audio and usage, or its error); one failing
 * item never fails the others.
 */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_impl.h"

/* ==== types ================================================================================== */

typedef struct {
    struct job *j; /* parsed, not yet finished */
    int model, started;
    qv_params p;
    qvs_job_result res; /* status 0 and audio once done; status and msg on failure */
} item;

/* ==== helpers ================================================================================ */

static void item_fail(item *it, int status, const char *code, const char *fmt, const char *arg) {
    it->res.status = status;
    it->res.code = code;
    snprintf(it->res.msg, sizeof it->res.msg, fmt, arg);
}

/* Item i's request: the batch's fields (all but "items") with the item's over them, as JSON text
 * (malloc'd), or NULL with it failed. */
static char *item_body(const cJSON *batch, const cJSON *x, int i, item *it) {
    char where[32];
    snprintf(where, sizeof where, "items[%d]", i);
    if (!cJSON_IsObject(x))
        return item_fail(it, 400, "invalid_type", "%s: expected an object", where), NULL;
    /* a batch answers in JSON: its items cannot stream */
    if (cJSON_HasObjectItem(x, "stream") || cJSON_HasObjectItem(x, "stream_format"))
        return item_fail(it, 400, "invalid_value",
                         "%s: stream and stream_format are not for "
                         "batch items (the reply is JSON)",
                         where),
               NULL;
    cJSON *o = cJSON_CreateObject(), *f;
    cJSON_ArrayForEach(f, batch) {
        if (strcmp(f->string, "items") && !cJSON_HasObjectItem(x, f->string))
            cJSON_AddItemToObject(o, f->string, cJSON_Duplicate(f, 1));
    }
    cJSON_ArrayForEach(f, x) cJSON_AddItemToObject(o, f->string, cJSON_Duplicate(f, 1));
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!body) item_fail(it, 503, "out_of_memory", "%s: out of memory", where);
    return body;
}

/* Waits for item it to end and keeps its result; -1 when the client left. */
static int item_finish(item *it) {
    int rc = qvs_job_finish(it->j, &it->res);
    qvs_speech_job_free(it->j);
    it->j = NULL;
    return rc;
}

/* Starts item k; while the queue is full, waits for the oldest item of this batch still running
 * (each frees a slot) and tries again. 0 or -1 when the client left. */
static int item_start(qv_server *s, struct MHD_Connection *c, item *v, int k) {
    item *it = &v[k];
    for (int oldest = 0;;) {
        int why = qvs_job_start(s, c, it->j, it->model, &it->p);
        if (!why) return it->started = 1, 0;
        while (why == -1 && oldest < k && !(v[oldest].started && v[oldest].j))
            oldest++;
        if (why == -1 && oldest < k) {
            if (item_finish(&v[oldest])) return -1;
            continue;
        }
        if (why == -2 && qvs_peer_gone(c)) return -1;
        if (why == -1)
            item_fail(it, 429, "busy", "%s", "all slots busy and the queue full; retry later");
        else if (why == -2)
            item_fail(it, 504, "timeout", "%s", "no free slot within the time limit");
        else
            item_fail(it, 503, "out_of_memory", "%s", "cannot start a synthesis");
        qvs_speech_job_free(it->j);
        it->j = NULL;
        return 0;
    }
}

/* One result of vLLM-Omni's reply. */
static cJSON *result_json(int i, const qvs_job_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", i);
    cJSON_AddStringToObject(o, "status", r->status ? "error" : "success");
    if (r->status) {
        cJSON_AddStringToObject(o, "error", r->msg);
        cJSON_AddStringToObject(o, "code", r->code ? r->code : "error");
        return o;
    }
    bytes b = {0};
    if (qvs_base64_add(&b, r->audio, r->n_bytes) || qvs_bytes_add(&b, "", 1)) {
        free(b.p);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddStringToObject(o, "audio_data", (const char *)b.p);
    free(b.p);
    cJSON_AddStringToObject(o, "media_type", r->media_type);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", r->input_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", r->output_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", r->input_tokens + r->output_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "input_token_details");
    cJSON_AddNumberToObject(d, "text_tokens", r->input_tokens - r->audio_tokens);
    cJSON_AddNumberToObject(d, "audio_tokens", r->audio_tokens);
    if (r->warning[0]) cJSON_AddStringToObject(o, "warning", r->warning);
    return o;
}

/* The reply: {id, results, total, succeeded, failed}; the items' audio is released. */
static enum MHD_Result reply(struct MHD_Connection *c, req *q, item *v, int n) {
    static unsigned counter;
    char id[64];
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    snprintf(id, sizeof id, "speech-batch-%08lx%08x",
             (unsigned long)t.tv_sec ^ (unsigned long)t.tv_nsec,
             __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray(), *x;
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddItemToObject(o, "results", a);
    int ok = 0, oom = !o || !a;
    for (int i = 0; i < n; i++) {
        ok += !v[i].res.status;
        if (!(x = result_json(i, &v[i].res))) oom = 1;
        cJSON_AddItemToArray(a, x);
        qv_free(v[i].res.audio);
        v[i].res.audio = NULL;
    }
    cJSON_AddNumberToObject(o, "total", n);
    cJSON_AddNumberToObject(o, "succeeded", ok);
    cJSON_AddNumberToObject(o, "failed", n - ok);
    char *body = oom ? NULL : cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    snprintf(q->note, sizeof q->note, "items=%d ok=%d", n, ok);
    if (!body)
        return qvs_reply_error(c, q, 503, "server_error", "out_of_memory", NULL,
                               "batch reply: out of memory");
    return qvs_reply_json(c, q, 200, body);
}

/* ==== the route ============================================================================== */

/* The batch's JSON checked: its items array (1..QVS_BATCH_MAX_ITEMS), no stream fields. */
static int check_batch(const cJSON *o, verdict *v) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(o, "items");
    if (!cJSON_IsObject(o))
        return qvs_bad(v, 400, "invalid_json", NULL, "request body: not a JSON object");
    if (!cJSON_IsArray(items))
        return qvs_bad(v, 400, "invalid_type", "items",
                       "items: expected an array of speech requests");
    int n = cJSON_GetArraySize(items);
    if (n < 1 || n > QVS_BATCH_MAX_ITEMS)
        return qvs_bad(v, 400, "invalid_value", "items", "items: %d given, expected 1 to %d", n,
                       QVS_BATCH_MAX_ITEMS);
    if (qvs_speech_fields(o, "items", v)) return -1; /* the items' own: each item's parse */
    static const char *const no[] = {"stream", "stream_format"};
    for (int i = 0; i < 2; i++)
        if (cJSON_HasObjectItem(o, no[i]))
            return qvs_bad(v, 400, "invalid_value", no[i],
                           "%s: a batch answers in JSON (stream with POST /v1/audio/speech)",
                           no[i]);
    return 0;
}

enum MHD_Result qvs_batch_handle(qv_server *s, struct MHD_Connection *c, req *q) {
    cJSON *o =
        cJSON_ParseWithLengthOpts(q->body ? q->body : "", q->body ? q->body_len + 1 : 1, NULL, 1);
    verdict v;
    memset(&v, 0, sizeof v);
    if (check_batch(o, &v)) {
        cJSON_Delete(o);
        return qvs_reply_error(c, q, v.status, "invalid_request_error", v.code, v.param, "%s",
                               v.msg);
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(o, "items"), *x;
    const int n = cJSON_GetArraySize(items);
    item *it = calloc((size_t)n, sizeof *it);
    if (!it) {
        cJSON_Delete(o);
        return qvs_reply_error(c, q, 503, "server_error", "out_of_memory", NULL, "out of memory");
    }
    const double deadline = q->t0 + s->cfg.timeout_s;
    int i = 0, gone = 0;
    cJSON_ArrayForEach(x, items) { /* each read as its own request, references cloned here */
        char *body = item_body(o, x, i, &it[i]);
        if (body && !(it[i].j = qvs_speech_parse(s, c, q->key, body, strlen(body), deadline,
                                                 &it[i].model, &it[i].p, &v))) {
            gone = v.status == -2 && qvs_peer_gone(c);
            it[i].res.status = v.status < 0 ? (v.status == -1 ? 429 : 504) : v.status;
            it[i].res.code = v.status < 0 ? (v.status == -1 ? "busy" : "timeout") : v.code;
            snprintf(it[i].res.msg, sizeof it[i].res.msg, "items[%d]: %s", i,
                     v.status < 0 ? "no free slot to clone its reference" : v.msg);
        } else if (it[i].j && qvs_job_is_stream(it[i].j)) {
            item_fail(&it[i], 400, "invalid_value", "%s", "stream: not for batch items");
        }
        free(body);
        i++;
        if (gone) break;
    }
    cJSON_Delete(o);
    for (i = 0; i < n && !gone; i++)
        if (it[i].j && !it[i].res.status) gone = item_start(s, c, it, i) < 0;
    for (i = 0; i < n && !gone; i++)
        if (it[i].j && it[i].started) gone = item_finish(&it[i]) < 0;
    enum MHD_Result ret = MHD_NO;
    if (!gone) ret = reply(c, q, it, n);
    for (i = 0; i < n; i++) { /* the client left: what still runs is cancelled */
        if (it[i].j && it[i].started) qvs_job_cancel(it[i].j);
        qvs_speech_job_free(it[i].j);
        qv_free(it[i].res.audio);
    }
    free(it);
    return ret;
}
