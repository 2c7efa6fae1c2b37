/* jobs.c — batch jobs (docs/batch.md): one JSON object per line names a text, an output file and
 * optionally a speaker or voice, language, instruct and seed; each is synthesized with one loaded
 * model, its voices opened once, and written atomically through the one encoder. The result of a
 * job is one JSON line (the fields of speak --json). Used by speak --batch; a server or a binding
 * can feed lines from anywhere.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cJSON.h>

#include "include/qvoice.h"
#include "util/api.h"

/* ==== types ================================================================================== */

typedef struct {
    char *name; /* as the jobs name it */
    qv_voice *v;
} cached_voice;

struct qv_jobs {
    const qv_model *m;
    qv_params p; /* every job's; a job's "seed" replaces p.seed for that job only */
    qv_jobs_options o;
    qv_synth *syn; /* made for seed syn_seed (a new seed makes a new one: cheap next to the
                      model load) */
    uint64_t syn_seed;
    qv_synth *volatile running; /* what qv_jobs_cancel stops */
    cached_voice *voices;       /* every voice a job named, opened once */
    int n_voices;
    int wdelta_line; /* the line whose voice's weight delta rewrote the model, or 0 */
};

/* ==== helpers ================================================================================ */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double round_to(double x, double unit) {
    return round(x / unit) * unit;
}

/* The summary of one synthesis written to out: speak --json and a job's result. */
static void add_summary(cJSON *res, const char *out, double secs, const qv_synth_stats *ss,
                        double lufs) {
    cJSON_AddStringToObject(res, "output", out);
    cJSON_AddNumberToObject(res, "seconds", round_to(secs, 1e-3));
    cJSON_AddNumberToObject(res, "audio_seconds", round_to(ss->audio_seconds, 1e-3));
    cJSON_AddNumberToObject(res, "rtf",
                            ss->audio_seconds > 0 ? round_to(secs / ss->audio_seconds, 1e-3) : 0);
    cJSON_AddNumberToObject(res, "frames", ss->n_frames);
    cJSON_AddNumberToObject(res, "chunks", ss->n_chunks);
    if (isfinite(lufs)) cJSON_AddNumberToObject(res, "loudness_lufs", round_to(lufs, 1e-2));
    if (ss->warning[0]) cJSON_AddStringToObject(res, "warning", ss->warning);
}

static char *print_delete(cJSON *j) {
    char *txt = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return txt;
}

char *qv_synth_summary_json(const char *output, double seconds, const qv_synth_stats *st,
                            double lufs) {
    if (!st) return qvu_fail(QV_E_INVALID, "qv_synth_summary_json: NULL stats"), NULL;
    if (st->struct_size != sizeof *st)
        return qvu_check_size("qv_synth_stats", st->struct_size, sizeof *st), NULL;
    cJSON *j = cJSON_CreateObject();
    if (!j) return qvu_fail(QV_E_NOMEM, "summary: out of memory"), NULL;
    cJSON_AddTrueToObject(j, "ok");
    add_summary(j, output, seconds, st, lufs);
    return print_delete(j);
}

/* The voice the jobs call name, opened on first use. NULL with err on failure. */
static const qv_voice *job_voice(qv_jobs *b, const char *name, char *err, size_t n) {
    for (int i = 0; i < b->n_voices; i++)
        if (!strcmp(b->voices[i].name, name)) return b->voices[i].v;
    cached_voice *g = realloc(b->voices, (size_t)(b->n_voices + 1) * sizeof *g);
    if (!g) return snprintf(err, n, "out of memory"), NULL;
    b->voices = g;
    cached_voice *c = &b->voices[b->n_voices];
    if (qv_voice_open(&c->v, name)) return snprintf(err, n, "%s", qv_last_error()), NULL;
    if (!(c->name = strdup(name))) {
        qv_voice_free(c->v);
        return snprintf(err, n, "out of memory"), NULL;
    }
    b->n_voices++;
    return c->v;
}

/* The string field key of job j (checked to be a string), or dflt when absent. */
static const char *job_str(const cJSON *j, const char *key, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

/* Checks a job's fields; 0, or -1 with err = "FIELD: problem". */
static int job_check(const cJSON *j, char *err, size_t n) {
    static const char *const strs[] = {"text",     "output",   "speaker", "voice",
                                       "language", "instruct", "style"};
    if (!cJSON_IsObject(j)) return snprintf(err, n, "not a JSON object"), -1;
    for (const cJSON *f = j->child; f; f = f->next) {
        int known = 0;
        for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
            if (!strcmp(f->string, strs[i])) {
                known = 1;
                if (!cJSON_IsString(f)) return snprintf(err, n, "%s: not a string", f->string), -1;
            }
        if (!strcmp(f->string, "seed")) {
            known = 1;
            if (!cJSON_IsNumber(f) || f->valuedouble < 0 || f->valuedouble > 9007199254740992.0 ||
                f->valuedouble != floor(f->valuedouble))
                return snprintf(err, n, "seed: expected a non-negative integer"), -1;
        }
        if (!known) return snprintf(err, n, "%s: unknown field", f->string), -1;
    }
    const char *text = job_str(j, "text", NULL), *out = job_str(j, "output", NULL);
    if (!text || !text[0]) return snprintf(err, n, "text: missing or empty"), -1;
    if (!out || !out[0]) return snprintf(err, n, "output: missing"), -1;
    if (!strcmp(out, "-")) return snprintf(err, n, "output: stdout carries the results"), -1;
    const int fmt = qv_format_of_path(out);
    if (fmt < 0)
        return snprintf(err, n, "output: %s: unknown extension (expected " QV_FORMAT_NAMES ")",
                        out),
               -1;
    if (!qv_format_writable(fmt))
        return snprintf(err, n, "output: %s: %s", out, qv_last_error()), -1;
    if (cJSON_GetObjectItemCaseSensitive(j, "speaker") &&
        cJSON_GetObjectItemCaseSensitive(j, "voice"))
        return snprintf(err, n, "speaker and voice are exclusive"), -1;
    return 0;
}

/* ==== one job ================================================================================ */

/* The synthesizer for seed (a new one when the seed changed). */
static enum qv_status job_synth(qv_jobs *b, const cJSON *j, char *err, size_t n) {
    qv_params p = b->p;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(j, "seed");
    if (seed) p.seed = (uint64_t)seed->valuedouble;
    if (b->syn && p.seed == b->syn_seed) return QV_OK;
    qv_synth_free(b->syn), b->syn = NULL;
    enum qv_status st = qv_synth_new(&b->syn, b->m, &p);
    if (st) return snprintf(err, n, "%s", qv_last_error()), st;
    b->syn_seed = p.seed;
    return QV_OK;
}

/* The request of job j, its voice opened (or cached). */
static enum qv_status job_request(qv_jobs *b, const cJSON *j, qv_synth_request *r, char *err,
                                  size_t n) {
    const char *speaker = job_str(j, "speaker", NULL), *vname = job_str(j, "voice", NULL);
    if (!speaker && !vname) speaker = b->o.request.speaker, vname = b->o.request.voice_path;
    const qv_voice *voice = vname ? job_voice(b, vname, err, n) : NULL;
    if (vname && !voice) return QV_E_VOICE;
    if (!voice && b->wdelta_line) {
        snprintf(err, n,
                 "speaker %s: line %d's voice rewrote the model with its weight delta; "
                 "run preset speakers in another batch (or --no-wdelta)",
                 speaker ? speaker : "(none)", b->wdelta_line);
        return QV_E_UNSUPPORTED;
    }
    *r = b->o.request;
    r->voice = voice;
    r->voice_path = NULL;
    r->text = job_str(j, "text", NULL);
    r->language = job_str(j, "language", b->o.request.language);
    r->speaker = voice ? NULL : speaker;
    r->instruct = job_str(j, "instruct", b->o.request.instruct);
    r->style = job_str(j, "style", b->o.request.style); /* replaces --style */
    r->whole_chunks = 1; /* the file is written at the end */
    r->codes_only = 0;
    return QV_OK;
}

/* Runs job j; fills res with its result fields. QV_OK, or a failure with err. */
static enum qv_status job_run(qv_jobs *b, int line_no, const cJSON *j, cJSON *res, char *err,
                              size_t n) {
    qv_synth_request r;
    enum qv_status st;
    if (job_check(j, err, n)) return QV_E_INVALID;
    if ((st = job_request(b, j, &r, err, n)) || (st = job_synth(b, j, err, n))) return st;
    qv_pcm_buffer k = {.struct_size = sizeof k};
    qv_synth_stats ss = {.struct_size = sizeof ss};
    const double t0 = now_s();
    b->running = b->syn;
    st = qv_synth_run(b->syn, &r, qv_pcm_collect, &k, &ss);
    b->running = NULL;
    if (ss.wdelta_applied && !b->wdelta_line) b->wdelta_line = line_no;
    if (st) {
        snprintf(err, n, "%s", k.failed ? "out of memory" : qv_last_error());
        return qv_free(k.pcm), st;
    }
    const char *out = job_str(j, "output", NULL);
    qv_provenance prov = qv_provenance_of(b->m, r.voice, r.speaker);
    prov.watermark = b->o.watermark != QV_WATERMARK_OFF;
    int64_t n_clipped;
    double lufs;
    if (!(st = qv_loudness_normalize(k.pcm, k.n, b->o.loudness_lufs, &n_clipped, &lufs)))
        st = qv_audio_write(out, qv_format_of_path(out), k.pcm, k.n, &prov);
    qv_free(k.pcm);
    if (st) return snprintf(err, n, "%s", qv_last_error()), st;
    add_summary(res, out, now_s() - t0, &ss, lufs);
    if (n_clipped) cJSON_AddNumberToObject(res, "clipped_samples", (double)n_clipped);
    return QV_OK;
}

/* ==== API ==================================================================================== */

qv_jobs_options qv_jobs_default_options(void) {
    qv_jobs_options o = {.struct_size = sizeof o, .request = qv_synth_default_request(),
                         .watermark = QV_WATERMARK_DEFAULT};
    return o;
}

enum qv_status qv_jobs_new(qv_jobs **out, const qv_model *m, const qv_params *p,
                           const qv_jobs_options *o) {
    *out = NULL;
    if (!m || !o) return qvu_fail(QV_E_INVALID, "qv_jobs_new: NULL argument");
    if (o->struct_size != sizeof *o)
        return qvu_check_size("qv_jobs_options", o->struct_size, sizeof *o);
    if (o->request.struct_size != sizeof o->request)
        return qvu_check_size("qv_synth_request", o->request.struct_size, sizeof o->request);
    enum qv_status st = qv_params_check(p);
    if (st) return st;
    qv_jobs *b = calloc(1, sizeof *b);
    if (!b) return qvu_fail(QV_E_NOMEM, "jobs: out of memory");
    b->m = m, b->p = *p, b->o = *o;
    *out = b;
    return QV_OK;
}

enum qv_status qv_jobs_run_line(qv_jobs *b, int line_no, const char *line, char **result_json) {
    char err[QVU_DETAIL_SIZE] = "";
    const size_t err_size = sizeof err;
    *result_json = NULL;
    if (!line[strspn(line, " \t\r\n")]) return QV_OK; /* blank line: no job */
    cJSON *res = cJSON_CreateObject();
    if (!res) return qvu_failf(QV_E_NOMEM, "line %d: out of memory", line_no);
    cJSON_AddNumberToObject(res, "line", line_no);
    cJSON_AddFalseToObject(res, "ok"); /* set below: keeps "ok" next to "line" */
    enum qv_status st;
    cJSON *j = cJSON_Parse(line);
    if (!j) {
        const char *at = cJSON_GetErrorPtr();
        snprintf(err, err_size, "not valid JSON (at column %d)",
                 at && at >= line ? (int)(at - line) + 1 : 1);
        st = QV_E_INVALID;
    } else {
        st = job_run(b, line_no, j, res, err, err_size);
        cJSON_Delete(j);
    }
    cJSON_ReplaceItemInObject(res, "ok", cJSON_CreateBool(st == QV_OK));
    if (st) cJSON_AddStringToObject(res, "error", err);
    *result_json = print_delete(res);
    if (!*result_json && !st) st = QV_E_NOMEM, snprintf(err, err_size, "out of memory");
    return qvu_fail(st, err);
}

enum qv_status qv_jobs_run_file(qv_jobs *b, FILE *in, qv_job_fn fn, void *user, int *n_jobs,
                                int *n_failed) {
    char *line = NULL, *res;
    size_t cap = 0;
    enum qv_status last = QV_OK;
    *n_jobs = *n_failed = 0;
    for (int line_no = 1; getline(&line, &cap, in) >= 0; line_no++) {
        const enum qv_status st = qv_jobs_run_line(b, line_no, line, &res);
        if (!res && !st) continue; /* a blank line */
        ++*n_jobs, *n_failed += st != QV_OK;
        if (st) last = st;
        if (fn) fn(user, line_no, st, res, st ? qv_last_error() : "");
        qv_free(res);
        if (st == QV_E_CANCELLED) break;
    }
    free(line);
    return last;
}

void qv_jobs_cancel(qv_jobs *b) {
    if (b) qv_synth_cancel(b->running);
}

void qv_jobs_free(qv_jobs *b) {
    if (!b) return;
    for (int i = 0; i < b->n_voices; i++)
        free(b->voices[i].name), qv_voice_free(b->voices[i].v);
    free(b->voices);
    qv_synth_free(b->syn);
    free(b);
}
