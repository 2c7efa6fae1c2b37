/* detect.c — POST /v1/audio/detect: the body is an audio file (any format the library reads, up
 * to --max-upload-mb, through admission like an upload); the reply is the watermark report of
 * `voicefmt detect --json`, plus the library voice (or preset speaker) and model whose
 * qv_watermark_payload the recovered payload is, when one is, and the container's provenance
 * tags (docs/provenance.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/server_impl.h"

#define DETECT_MAX_SECONDS 1200.0 /* as voicefmt detect's default */

/* The first recovered payload: the whole input's, else a range's. 0 when none. */
static int payload_of(const qv_watermark_report *r, uint32_t *payload) {
    if (r->all.payload_ok) return *payload = r->all.payload, 1;
    for (int k = 0; k < r->n_ranges && k < QV_WATERMARK_MAX_RANGES; k++)
        if (r->ranges[k].payload_ok) return *payload = r->ranges[k].payload, 1;
    return 0;
}

/* {"voice", "name", "model"} of the voice key k may use (or preset speaker) and served model
 * whose payload is payload, or NULL. */
static cJSON *match(qv_server *s, const api_key *k, uint32_t payload) {
    cJSON *voices = qvs_library_describe(s, k, NULL), *hit = NULL;
    for (int i = 0; i < s->n_models && !hit; i++) {
        char fp[65], id[QV_PROVENANCE_MAX_ID + 1];
        const qv_model *m = s->models[i].model;
        qv_model_fingerprint(m, fp);
        const cJSON *v;
        cJSON_ArrayForEach(v, voices) {
            const char *vid = cJSON_GetStringValue(cJSON_GetObjectItem(v, "id"));
            if (vid && qv_watermark_payload(vid, fp) == payload) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(v, "name"));
                hit = cJSON_CreateObject();
                cJSON_AddStringToObject(hit, "voice", vid);
                cJSON_AddStringToObject(hit, "name", name ? name : "");
                break;
            }
        }
        for (int j = 0; j < qv_model_n_speakers(m) && !hit; j++) {
            snprintf(id, sizeof id, "speaker:%s", qv_model_speaker(m, j));
            if (qv_watermark_payload(id, fp) == payload) {
                hit = cJSON_CreateObject();
                cJSON_AddStringToObject(hit, "voice", id);
                cJSON_AddStringToObject(hit, "name", qv_model_speaker(m, j));
            }
        }
        if (hit) cJSON_AddStringToObject(hit, "model", s->models[i].name);
    }
    cJSON_Delete(voices);
    return hit;
}

enum MHD_Result qvs_detect_handle(qv_server *s, struct MHD_Connection *c, req *q) {
    if (!q->body_len)
        return qvs_reply_error(c, q, 400, "invalid_request_error", "missing_field", NULL,
                               "request body: the audio file to examine (any format qvoice reads)");
    char path[4096];
    snprintf(path, sizeof path, "%s/.upload-%d-XXXXXX", s->voices_dir ? s->voices_dir : "/tmp",
             (int)getpid());
    int fd = mkstemp(path);
    if (fd < 0)
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "temporary file: %s",
                               strerror(errno));
    const int wrote = write(fd, q->body, q->body_len) == (ssize_t)q->body_len;
    close(fd);
    if (!wrote) {
        unlink(path);
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "temporary file: %s",
                               strerror(errno));
    }
    const double deadline = q->t0 + s->cfg.timeout_s;
    const int sl = qvs_slot_take(s, c, -1, NULL, deadline);
    if (sl < 0) {
        unlink(path);
        return qvs_reply_not_admitted(s, c, q, sl, deadline);
    }
    qv_watermark_report r = qv_watermark_default_report();
    char tags[QV_PROVENANCE_TEXT_BYTES];
    const enum qv_status st = qv_watermark_detect_file(path, DETECT_MAX_SECONDS, &r);
    if (st || qv_provenance_read(path, tags)) tags[0] = 0;
    qvs_slot_release(s, sl);
    unlink(path);
    if (st) { /* the detail names the temporary: the client knows it as the request body */
        return qvs_reply_error(c, q, st == QV_E_AUDIO ? 400 : 500,
                               st == QV_E_AUDIO ? "invalid_request_error" : "server_error",
                               st == QV_E_AUDIO ? "invalid_audio" : "detect_failed", NULL,
                               "request body: %s", qvs_without_path(qv_last_error(), path));
    }
    char *text = qv_watermark_report_json(&r);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    qv_free(text);
    if (!o)
        return qvs_reply_error(c, q, 500, "server_error", "out_of_memory", NULL, "out of memory");
    uint32_t payload;
    cJSON *hit = payload_of(&r, &payload) ? match(s, q->key, payload) : NULL;
    cJSON_AddItemToObject(o, "match", hit ? hit : cJSON_CreateNull());
    cJSON_AddStringToObject(o, "tags", tags);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!body)
        return qvs_reply_error(c, q, 500, "server_error", "out_of_memory", NULL, "out of memory");
    return qvs_reply_json(c, q, 200, body);
}
