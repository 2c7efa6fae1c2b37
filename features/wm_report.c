/* wm_report.c — a watermark detection report as JSON: the one shape `voicefmt detect --json`
 * prints and qvoice-server's POST /v1/audio/detect returns (docs/provenance.md).
 */
#include <cJSON.h>
#include <stdio.h>

#include "include/qvoice.h"
#include "util/api.h"

static cJSON *range_json(const qv_watermark_range *g) {
    cJSON *o = cJSON_CreateObject();
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", g->payload);
    cJSON_AddNumberToObject(o, "start_s", g->start_s);
    cJSON_AddNumberToObject(o, "end_s", g->end_s);
    cJSON_AddNumberToObject(o, "score", g->score);
    cJSON_AddBoolToObject(o, "payload_ok", g->payload_ok);
    if (g->payload_ok) {
        cJSON_AddStringToObject(o, "payload", hex);
        cJSON_AddBoolToObject(o, "synthetic", (g->payload & QV_WATERMARK_SYNTHETIC) != 0);
    }
    cJSON_AddNumberToObject(o, "payload_score", g->payload_score);
    return o;
}

char *qv_watermark_report_json(const qv_watermark_report *r) {
    if (!r || r->struct_size != sizeof *r) {
        qvu_fail(QV_E_ABI, "qv_watermark_report_json: a report of another qvoice.h");
        return NULL;
    }
    cJSON *o = cJSON_CreateObject(), *ranges = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    cJSON_AddBoolToObject(o, "present", r->present);
    cJSON_AddNumberToObject(o, "score", r->score);
    cJSON_AddNumberToObject(o, "score_all", r->score_all);
    cJSON_AddItemToObject(o, "whole", range_json(&r->all));
    for (int k = 0; k < r->n_ranges && k < QV_WATERMARK_MAX_RANGES; k++)
        cJSON_AddItemToArray(ranges, range_json(&r->ranges[k]));
    cJSON_AddItemToObject(o, "ranges", ranges);
    cJSON_AddNumberToObject(o, "ranges_dropped", r->ranges_dropped);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) qvu_fail(QV_E_NOMEM, "watermark report: out of memory");
    return text;
}
