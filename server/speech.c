/* speech.c — POST /v1/audio/speech: OpenAI's request fields plus vLLM-Omni's extensions, a pool
 * of qv_synth slots with a bounded queue, and a job per request: a worker thread runs
 * qv_synth_run, its PCM callback appends encoded audio to the job, and the connection's thread
 * sends it (whole, or streamed as chunked bytes or SSE events as it arrives).
 */
#include <cJSON.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "server/server_impl.h"
#include "voicefmt/qvf.h"

enum stream_kind { STREAM_NONE, STREAM_AUDIO, STREAM_SSE, STREAM_FN /* qvs_speech_run */ };

typedef struct job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    qv_server *s;
    int slot, refs, format, stream, n_tokens; /* n_tokens: usage.input_tokens */
    int n_audio_tokens; /* of n_tokens: the ICL reference's frames (vLLM-Omni's audio_tokens) */
    double deadline, max_seconds, speed;
    struct MHD_Connection *conn; /* for disconnect checks while waiting */
    /* request (owned strings) */
    qv_synth_request r;
    char *text, *language, *speaker, *instruct, *voice_path, *style;
    float style_strength;
    int strict_markup;
    qv_pcm_fn fn; /* STREAM_FN: the caller's, called without mu */
    void *fn_user;
    qvs_voice_ref voice; /* holds voice_path open when the file is put together in memory */
    ref_entry *ref; /* a per-request reference's voice, held */
    /* results, under mu */
    qv_provenance prov; /* what every output of the job says of its voice and model */
    qv_encoder *enc; /* streams: WAV/PCM blocks into out (or SSE events) */
    bytes out;       /* streams: encoded bytes not yet sent, from off */
    size_t off;
    qv_pcm_buffer pcm;              /* non-streamed: every sample */
    int64_t n_samples, max_samples; /* max_samples: the request's cap, 0 none */
    int running, cancel, timed_out, done, ended;    /* running: the worker holds the slot */
    int capped; /* the audio reached max_samples: a normal end */
    enum qv_status st;
    char err[512];
    qv_synth_stats stats;
} job;

/* ==== jobs =================================================================================== */

static void job_unref(job *j) {
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->text);
    free(j->language);
    free(j->speaker);
    free(j->instruct);
    free(j->voice_path);
    free(j->style);
    qvs_voice_ref_close(&j->voice);
    qvs_ref_release(j->s, j->ref);
    qv_encoder_close(j->enc); /* it may flush into out (found by fuzz_speech_json) */
    free(j->out.p);
    qv_free(j->pcm.pcm);
    free(j);
}

/* Stops the synthesis if it still runs. The slot stays ours until done is set (worker), so the
 * cancel cannot reach a later request's synthesis. */
static void job_cancel(job *j, int timed_out) {
    pthread_mutex_lock(&j->mu);
    if (j->running && !j->done && !j->cancel) {
        j->cancel = 1;
        j->timed_out = timed_out;
        qv_synth_cancel(j->s->slots[j->slot].synth);
    }
    pthread_mutex_unlock(&j->mu);
}

static int sse_delta(job *j, const uint8_t *p, size_t n) {
    static const char head[] =
        "event: speech.audio.delta\ndata: {\"type\":\"speech.audio.delta\",\"audio\":\"";
    return qvs_bytes_add(&j->out, head, sizeof head - 1) || qvs_base64_add(&j->out, p, n) ||
           qvs_bytes_add(&j->out, "\"}\n\n", 4);
}

/* qv_write_fn of a stream's encoder: one block (the first WAV one with its header), under mu. */
static int stream_sink(void *user, const void *p, size_t n) {
    job *j = user;
    return j->stream == STREAM_SSE ? sse_delta(j, p, n) : qvs_bytes_add(&j->out, p, n);
}

/* qv_pcm_fn: runs on the worker thread. */
static int on_pcm(void *user, const float *x, int n) {
    job *j = user;
    int stop = 0, fail = 0;
    pthread_mutex_lock(&j->mu);
    if (qvs_now_s() > j->deadline) {
        j->cancel = j->timed_out = 1;
    }
    if (j->max_samples && j->n_samples + n >= j->max_samples) { /* the rest is cut: a normal end */
        n = (int)(j->max_samples - j->n_samples);
        j->capped = stop = 1;
    }
    if (j->cancel) {
        stop = 1;
    } else if (j->stream == STREAM_NONE) {
        fail = qv_pcm_collect(&j->pcm, x, n);
    } else if (j->stream == STREAM_FN) { /* a slow reader must not hold up job_cancel */
        pthread_mutex_unlock(&j->mu);
        fail = j->fn(j->fn_user, x, n) ? -1 : 0;
        pthread_mutex_lock(&j->mu);
        stop = fail, fail = 0; /* the caller stopped: not out of memory */
    } else {
        fail = qv_encoder_write(j->enc, x, n) != QV_OK;
    }
    j->n_samples += n;
    if (fail) {
        j->cancel = 1;
        snprintf(j->err, sizeof j->err, "response: out of memory");
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return stop || fail;
}

/* qv_chunk_fn of an SSE stream: progress through long text, text chunks done of total. */
static void on_chunk(void *user, const qv_chunk_info *ci) {
    job *j = user;
    char ev[160];
    int n = snprintf(ev, sizeof ev,
                     "event: speech.progress\ndata: {\"type\":\"speech.progress\",\"done\":%d,"
                     "\"total\":%d}\n\n",
                     ci->text_chunk, ci->n_text_chunks);
    pthread_mutex_lock(&j->mu);
    qvs_bytes_add(&j->out, ev, (size_t)n); /* out of memory: one progress event less */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void *worker(void *arg) {
    job *j = arg;
    qv_server *s = j->s;
    int j_slot = j->slot;
    qv_synth *sy = s->slots[j_slot].synth;
    qv_synth_stats st = {.struct_size = sizeof st};
    qv_synth_set_chunk_fn(sy, j->stream == STREAM_SSE ? on_chunk : NULL, j);
    enum qv_status rc = qv_synth_run(sy, &j->r, on_pcm, j, &st);
    qv_synth_set_chunk_fn(sy, NULL, NULL);
    pthread_mutex_lock(&j->mu);
    int capped = j->capped && !j->cancel;
    pthread_mutex_unlock(&j->mu);
    if (rc == QV_E_CANCELLED && capped) { /* stopped at the cap by on_pcm */
        rc = QV_OK;
        st.capped = 1;
    }
    if (st.warning[0]) qvs_srv_log(s, "speech: warning: %s", st.warning); /* e.g. instruct dropped */
    qvs_metrics_synth(&s->met, &st); /* before the reply can go out: a client sees it counted */
    pthread_mutex_lock(&s->met.mu);
    s->met.guard_failures += rc == QV_E_GUARD;
    s->met.cancelled += rc == QV_E_CANCELLED;
    pthread_mutex_unlock(&s->met.mu);
    pthread_mutex_lock(&j->mu);
    if (j->enc) { /* a stream's last samples (the watermark's delay) go out before its end */
        const enum qv_status closed = qv_encoder_close(j->enc);
        j->enc = NULL;
        if (!rc) rc = closed;
    }
    j->st = rc;
    j->stats = st;
    if (rc && !j->err[0]) snprintf(j->err, sizeof j->err, "%s", qv_last_error());
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    pthread_mutex_lock(&s->mu);
    s->slots[j_slot].busy = 0;
    s->n_workers--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ==== slots ================================================================================== */

/* A slot for (model, p) made ready to run: its index, or qvs_slot_take's -1/-2; -3 cannot build
 * the synthesizer. A slot of the same model takes the new seed and sampling parameters
 * (qv_synth_set_params: building one costs a tokenizer and thread pools, ~2% of the server's CPU
 * in a 4-stream run of 4 s requests); a slot of another model or thread count is rebuilt. */
static int slot_acquire(qv_server *s, struct MHD_Connection *c, int model, const qv_params *p,
                        double deadline) {
    int best = qvs_slot_take(s, c, model, p, deadline);
    if (best < 0) return best;
    slot *sl = &s->slots[best];
    if (sl->synth && sl->model == model &&
        (qvs_params_equal(&sl->params, p) || !qv_synth_set_params(sl->synth, p))) {
        sl->params = *p;
        return best;
    }
    if (sl->synth) qv_synth_free(sl->synth);
    sl->synth = NULL;
    sl->model = model;
    sl->params = *p;
    if (qv_synth_new(&sl->synth, s->models[model].model, p)) {
        sl->synth = NULL;
        qvs_slot_release(s, best);
        return -3;
    }
    return best;
}

/* ==== request parsing ======================================================================== */

/* Every field parse reads: OpenAI's (input .. stream_format), vLLM-Omni's (speaker ..
 * repetition_penalty), qvoice's (style .. max_seconds). */
static const char *const speech_fields[] = {
    "input", "model", "voice", "instructions", "response_format", "speed", "stream_format",
    "speaker", "language", "task_type", "ref_audio", "ref_text", "x_vector_only_mode",
    "speaker_embedding", "non_streaming_mode", "sample_rate", "initial_codec_chunk_frames",
    "stream", "max_new_tokens", "seed", "temperature", "top_k", "top_p", "repetition_penalty",
    "style", "style_strength", "strict_markup", "max_seconds"};

/* vLLM-Omni's request fields for its other models or features qvoice does not have: refused by
 * name with the reason (word_timestamps false, the default, asks for nothing). */
static const char *const omni_refused[][2] = {
    {"ref_audio_2", "a second reference for two-speaker dialogue (MOSS-TTSD); qvoice speaks "
                    "dialogue with markup ([voice:NAME], docs/markup.md)"},
    {"ambient_sound", "sound effects (MOSS-SoundEffect) are not speech"},
    {"duration_seconds", "a target duration (MOSS-SoundEffect); use speed or max_seconds"},
    {"references", "Higgs Audio's reference list; send ref_audio and ref_text"},
    {"extra_params", "model-specific arguments: every parameter qvoice takes is a field of its own"},
    {"word_timestamps", "no forced aligner: word timestamps are not produced"}};

/* The reason vLLM-Omni's field name is refused, or NULL. */
static const char *omni_reason(const char *name) {
    for (size_t i = 0; i < sizeof omni_refused / sizeof *omni_refused; i++)
        if (!strcmp(name, omni_refused[i][0])) return omni_refused[i][1];
    return NULL;
}

int qvs_speech_fields(const cJSON *o, const char *extra, verdict *v) {
    const cJSON *f, *g;
    cJSON_ArrayForEach(f, o) {
        const char *why = omni_reason(f->string);
        int known = (extra && !strcmp(f->string, extra)) || why;
        for (size_t i = 0; !known && i < sizeof speech_fields / sizeof *speech_fields; i++)
            known = !strcmp(f->string, speech_fields[i]);
        if (!known)
            return qvs_bad(v, 400, "unknown_field", f->string, "unknown field '%.64s'", f->string);
        /* null is absent, as for every field; word_timestamps false asks for nothing */
        if (why && !cJSON_IsNull(f) && !(cJSON_IsFalse(f) && !strcmp(f->string, "word_timestamps")))
            return qvs_bad(v, 400, "unsupported_value", f->string, "%s: %s", f->string, why);
        for (g = o->child; g != f; g = g->next) /* cJSON keeps both; the reader sees the first */
            if (!strcmp(g->string, f->string))
                return qvs_bad(v, 400, "duplicate_field", f->string, "duplicate field '%s'",
                               f->string);
    }
    return 0;
}

/* String field k: NULL when absent or null; -1 (verdict set) when not a string. */
static int get_str(cJSON *o, const char *k, const char **out, verdict *v) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    *out = NULL;
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsString(x)) return qvs_bad(v, 400, "invalid_type", k, "%s: expected a string", k);
    *out = x->valuestring;
    return 0;
}

/* voice: a name, or OpenAI's voice object {"id": NAME} (vLLM-Omni reads its id). */
static int get_voice(cJSON *o, const char **out, verdict *v) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "voice");
    if (!cJSON_IsObject(x)) return get_str(o, "voice", out, v);
    cJSON *id = cJSON_GetObjectItemCaseSensitive(x, "id");
    if (!cJSON_IsString(id) || cJSON_GetArraySize(x) != 1)
        return qvs_bad(v, 400, "invalid_value", "voice",
                       "voice: expected a name or an object {\"id\": NAME}");
    *out = id->valuestring;
    return 0;
}

/* Number field k within [lo, hi]: 0 absent, 1 set, -1 bad (verdict set). integer: whole only. */
static int get_num(cJSON *o, const char *k, double lo, double hi, int integer, double *out,
                   verdict *v) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsNumber(x)) return qvs_bad(v, 400, "invalid_type", k, "%s: expected a number", k);
    double d = x->valuedouble;
    if (!isfinite(d) || d < lo || d > hi || (integer && d != floor(d)))
        return qvs_bad(v, 400, "invalid_value", k, "%s: %g is not %s in [%g, %g]", k, d,
                       integer ? "an integer" : "a number", lo, hi);
    *out = d;
    return 1;
}

static int utf8_chars(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static const char *find_name(const char *want, const char *(*name)(const qv_model *, int),
                             int count, const qv_model *m) {
    for (int i = 0; i < count; i++)
        if (name(m, i) && !strcasecmp(want, name(m, i))) return name(m, i);
    return NULL;
}

static void list_names(char *buf, size_t size, const char *(*name)(const qv_model *, int),
                       int count, const qv_model *m) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < count && n + 2 < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", name(m, i));
}

/* Boolean field k: 0 absent (or null), 1 set (*out), -1 bad (verdict set). */
static int get_bool(cJSON *o, const char *k, int *out, verdict *v) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsBool(x))
        return qvs_bad(v, 400, "invalid_type", k, "%s: expected true or false", k);
    *out = cJSON_IsTrue(x);
    return 1;
}

/* vLLM-Omni's task_type against the model and the voice asked for: 0 or -1 (verdict set). */
static int check_task(const char *task, const char *mtype, const char *mname, int cloned,
                      verdict *v) {
    static const struct {
        const char *task;
        enum qvf_variant variant;
    } tasks[] = {{"CustomVoice", QVF_VARIANT_CUSTOM_VOICE},
                 {"VoiceDesign", QVF_VARIANT_VOICE_DESIGN},
                 {"Base", QVF_VARIANT_BASE}};
    int i = 0;
    while (i < 3 && strcmp(task, tasks[i].task))
        i++;
    if (i == 3)
        return qvs_bad(v, 400, "invalid_value", "task_type",
                       "task_type %s: expected CustomVoice, VoiceDesign or Base", task);
    /* Base is cloning: a reference or library voice, on the Base model or on CustomVoice
     * through the voice file's text side (as `clone` makes it) */
    if (i == 2 && !cloned)
        return qvs_bad(v, 400, "invalid_value", "task_type",
                       "task_type Base: needs ref_audio, speaker_embedding or a library voice");
    if (i == 2 ? !strcmp(mtype, qvf_variant_name(QVF_VARIANT_VOICE_DESIGN))
               : cloned || strcmp(mtype, qvf_variant_name(tasks[i].variant)))
        return qvs_bad(v, 400, "invalid_value", "task_type", "task_type %s: model %s is %s%s", task,
                       mname, mtype, i != 2 && cloned ? " and a cloned voice was given" : "");
    return 0;
}

/* speaker_embedding: an array of exactly dim numbers, malloc'd into *out. */
static int get_embedding(cJSON *o, int dim, float **out, verdict *v) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "speaker_embedding"), *e;
    *out = NULL;
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != dim)
        return qvs_bad(v, 400, "invalid_value", "speaker_embedding",
                       "speaker_embedding: expected an array of %d numbers (this model's x-vector)",
                       dim);
    if (!(*out = malloc((size_t)dim * sizeof **out)))
        return qvs_bad(v, 503, "out_of_memory", NULL, "out of memory");
    int i = 0;
    cJSON_ArrayForEach(e, x) {
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || fabs(e->valuedouble) > 1e6) {
            free(*out);
            *out = NULL;
            return qvs_bad(v, 400, "invalid_value", "speaker_embedding",
                           "speaker_embedding[%d]: not a finite number", i);
        }
        (*out)[i++] = (float)e->valuedouble;
    }
    return 1;
}

/* A request's fields as parse reads them, borrowed from the JSON body (emb is malloc'd), and what
 * its steps find: the model, the voice's library file or preset speaker, the audio cap. */
typedef struct fields {
    const char *input, *mname, *voice, *alias, *instr, *fmt, *sfmt, *lang, *task, *ref_audio,
        *ref_text;
    int xvec_only;
    float *emb;
    const qv_model *m;
    const char *mtype, *name; /* the model's type and served name */
    const char *speaker;      /* a preset speaker, or NULL: a library voice at path */
    qvs_voice_ref *vr; /* the job's */
    double max_s;
} fields;

/* input (at most --max-text-chars), model (*model, f->m) and vLLM-Omni's "speaker", another name
 * for "voice". */
static int parse_text_model(const qv_server *s, fields *f, int *model, verdict *v) {
    if (!f->input || !f->input[0])
        return qvs_bad(v, 400, "invalid_value", "input", "input: required, non-empty text");
    const int n_chars = utf8_chars(f->input);
    if (n_chars > s->cfg.max_text_chars)
        return qvs_bad(v, 400, "input_too_long", "input",
                       "input: %d characters exceed the limit of %d", n_chars,
                       s->cfg.max_text_chars);
    if ((*model = qvs_find_model(s, f->mname)) < 0)
        return qvs_bad(v, 404, "model_not_found", "model",
                       "model %s: not served here (GET /ready lists them)", f->mname);
    f->m = s->models[*model].model;
    f->mtype = qv_model_type(f->m);
    f->name = s->models[*model].name;
    if (f->alias && f->voice && strcasecmp(f->alias, f->voice))
        return qvs_bad(v, 400, "invalid_value", "speaker",
                       "speaker %s: differs from voice %s (one name)", f->alias, f->voice);
    if (!f->voice) f->voice = f->alias;
    return 0;
}

/* The per-request cloning fields: ref_audio with ref_text (or x_vector_only_mode), or
 * speaker_embedding, each instead of a voice. */
static int parse_reference(cJSON *o, fields *f, verdict *v) {
    if (get_bool(o, "x_vector_only_mode", &f->xvec_only, v) < 0 ||
        get_embedding(o, qv_model_hidden_size(f->m), &f->emb, v) < 0)
        return -1;
    if (f->ref_audio && f->emb)
        return qvs_bad(v, 400, "invalid_value", "speaker_embedding",
                       "speaker_embedding: give either it or ref_audio, not both");
    if ((f->ref_audio || f->emb) && f->voice)
        return qvs_bad(v, 400, "invalid_value", "voice",
                       "voice %s: a request speaks with a voice or with its own reference "
                       "(ref_audio, speaker_embedding), not both",
                       f->voice);
    if (!f->ref_audio && (f->ref_text || f->xvec_only))
        return qvs_bad(v, 400, "invalid_value", f->ref_text ? "ref_text" : "x_vector_only_mode",
                       "%s: only with ref_audio", f->ref_text ? "ref_text" : "x_vector_only_mode");
    if (f->ref_audio && !f->xvec_only && (!f->ref_text || !f->ref_text[0]))
        return qvs_bad(
            v, 400, "invalid_value", "ref_text",
            "ref_text: the transcript of ref_audio is required unless x_vector_only_mode is true");
    return 0;
}

/* Who speaks, against the model: language (in the model's spelling), the voice (a library voice
 * f->vr, or a preset speaker), vLLM-Omni's task_type and non_streaming_mode. */
static int parse_voice(qv_server *s, const api_key *k, cJSON *o, fields *f, verdict *v) {
    const qv_model *m = f->m;
    char names[1024];
    if (f->lang && strcasecmp(f->lang, "auto")) {
        const char *l = find_name(f->lang, qv_model_language, qv_model_n_languages(m), m);
        if (!l) {
            list_names(names, sizeof names, qv_model_language, qv_model_n_languages(m), m);
            return qvs_bad(v, 400, "invalid_value", "language", "language %s: not one of %s",
                           f->lang, names);
        }
        f->lang = l;
    }
    int has_ref = f->ref_audio || f->emb;
    if (!has_ref && !f->voice && qv_model_n_speakers(m) > 0)
        f->speaker = qv_model_speaker(m, 0);
    else if (!has_ref && !f->voice && /* a VoiceDesign model has instructions instead */
             strcmp(f->mtype, qvf_variant_name(QVF_VARIANT_VOICE_DESIGN)))
        return qvs_bad(v, 400, "invalid_value", "voice",
                       "voice: required (a library voice or ref_audio for model %s)", f->name);
    else if (f->voice && qvs_voice_lookup(s, k, f->voice, f->vr)) {
        f->speaker = find_name(f->voice, qv_model_speaker, qv_model_n_speakers(m), m);
        if (!f->speaker) {
            list_names(names, sizeof names, qv_model_speaker, qv_model_n_speakers(m), m);
            return qvs_bad(v, 400, "voice_not_found", "voice",
                           "voice %s: neither a library voice (GET /v1/audio/voices) nor a preset "
                           "speaker of %s (%s)",
                           f->voice, f->name, names[0] ? names : "none");
        }
    }
    if (f->task &&
        check_task(f->task, f->mtype, f->name, has_ref || (f->voice && !f->speaker), v))
        return -1;
    /* the text layout is the model's (non-streaming for CustomVoice and VoiceDesign, streaming
     * for Base, as the official package's defaults); the other one is not offered */
    int nsm, got;
    if ((got = get_bool(o, "non_streaming_mode", &nsm, v)) < 0) return -1;
    if (got && nsm != !!strcmp(f->mtype, qvf_variant_name(QVF_VARIANT_BASE)))
        return qvs_bad(v, 400, "unsupported_value", "non_streaming_mode",
                       "non_streaming_mode %s: model %s feeds its text %s", nsm ? "true" : "false",
                       f->name, nsm ? "one token per frame (streaming)" : "whole (non-streaming)");
    return 0;
}

/* response_format, stream_format and vLLM-Omni's stream into j->format and j->stream. */
static int parse_format(cJSON *o, const fields *f, job *j, verdict *v) {
    const char *fmt = f->fmt, *sfmt = f->sfmt;
    j->format = QV_FORMAT_WAV;
    if (fmt && (j->format = qv_format_parse(fmt)) < 0)
        return qvs_bad(v, 400, "invalid_value", "response_format",
                       "response_format %s: expected " QV_FORMAT_NAMES, fmt);
    if (!qv_format_writable(j->format)) /* the detail says why (aac: libavcodec missing) */
        return qvs_bad(v, 400, "unsupported_format", "response_format", "response_format %s",
                       qv_last_error());
    j->stream = !sfmt                    ? STREAM_NONE
                : !strcmp(sfmt, "audio") ? STREAM_AUDIO
                : !strcmp(sfmt, "sse")   ? STREAM_SSE
                                         : -1;
    if (j->stream < 0)
        return qvs_bad(v, 400, "invalid_value", "stream_format",
                       "stream_format %s: expected audio or sse", sfmt);
    /* vLLM-Omni's stream: true alone is SSE (its protocol's is_sse_stream); with stream_format
     * audio, the bytes as decoded */
    int stream, got;
    if ((got = get_bool(o, "stream", &stream, v)) < 0) return -1;
    if (got && !stream && sfmt)
        return qvs_bad(v, 400, "invalid_value", "stream",
                       "stream false: contradicts stream_format %s", sfmt);
    if (got && stream && !sfmt) j->stream = STREAM_SSE;
    if (j->stream && !qv_format_progressive(j->format))
        return qvs_bad(v, 400, "unsupported_format", "response_format",
                       "response_format %s: streams are wav, pcm or aac (ask without stream_format "
                       "for %s)",
                       qv_format_name(j->format), qv_format_name(j->format));
    return 0;
}

/* vLLM-Omni's fields qvoice takes only at the one value it produces: sample_rate and
 * initial_codec_chunk_frames (absent); and speed (*speed, default 1). */
static int parse_fixed(cJSON *o, double *speed, verdict *v) {
    double d;
    int got;
    if ((got = get_num(o, "sample_rate", 1, 1e6, 1, &d, v)) < 0) return -1;
    if (got && d != QV_SAMPLE_RATE_HZ)
        return qvs_bad(v, 400, "unsupported_value", "sample_rate",
                       "sample_rate %g: the audio is %d Hz (resample on the client)", d,
                       QV_SAMPLE_RATE_HZ);
    if ((got = get_num(o, "initial_codec_chunk_frames", 0, 65536, 1, &d, v)) < 0) return -1;
    if (got)
        return qvs_bad(v, 400, "unsupported_value", "initial_codec_chunk_frames",
                       "initial_codec_chunk_frames: the decoder's block schedule is fixed (the "
                       "first audio after a few frames, then growing blocks)");
    /* speed: the library's pitch-preserving time stretch, streams included */
    if ((got = get_num(o, "speed", QV_SPEED_MIN, QV_SPEED_MAX, 0, &d, v)) < 0) return -1;
    if (got) *speed = d;
    return 0;
}

/* Styles (docs/markup.md): style (the voice's palette entry, else the built-in style table),
 * style_strength and strict_markup, as speak's --style, --style-strength, --strict-markup. */
static int parse_style(cJSON *o, job *j, verdict *v) {
    const char *style;
    double d;
    int got;
    if (get_str(o, "style", &style, v) ||
        (got = get_num(o, "style_strength", 1e-6, QV_STYLE_STRENGTH_MAX, 0, &d, v)) < 0 ||
        get_bool(o, "strict_markup", &j->strict_markup, v) < 0)
        return -1;
    if (got) j->style_strength = (float)d;
    if (style && !style[0])
        return qvs_bad(v, 400, "invalid_value", "style", "style: empty (omit it for none)");
    if (style && !(j->style = strdup(style)))
        return qvs_bad(v, 500, "out_of_memory", NULL, "out of memory");
    return 0;
}

/* Sampling: the model's parameters with the request's seed, temperature, top_k, top_p,
 * repetition_penalty and max_new_tokens into p; max_seconds (under the server's) in f->max_s. */
static int parse_sampling(const qv_server *s, cJSON *o, fields *f, qv_params *p, verdict *v) {
    double d;
    int got;
    *p = qv_model_params(f->m);
    p->n_threads = s->n_threads;
    p->quant = s->cfg.quant;
    f->max_s = s->cfg.max_seconds;
    if ((got = get_num(o, "seed", 0, 9007199254740991.0, 1, &d, v)) < 0) return -1;
    if (got) p->seed = (uint64_t)d;
    /* the ranges are the library's (qv_params_check, below) */
    if ((got = get_num(o, "temperature", -FLT_MAX, FLT_MAX, 0, &d, v)) < 0) return -1;
    if (got) p->temperature = (float)d;
    if ((got = get_num(o, "top_k", INT_MIN, INT_MAX, 1, &d, v)) < 0) return -1;
    if (got) p->top_k = (int)d;
    if ((got = get_num(o, "top_p", -FLT_MAX, FLT_MAX, 0, &d, v)) < 0) return -1;
    if (got) p->top_p = (float)d;
    if ((got = get_num(o, "repetition_penalty", -FLT_MAX, FLT_MAX, 0, &d, v)) < 0) return -1;
    if (got) p->repetition_penalty = (float)d;
    if ((got = get_num(o, "max_new_tokens", 1, 65536, 1, &d, v)) < 0) return -1;
    if (got) p->max_frames = d > 1 ? (int)d - 1 : 1; /* max_seconds still caps the audio */
    if ((got = get_num(o, "max_seconds", 0.08, 1e6, 0, &d, v)) < 0) return -1;
    if (got && (f->max_s <= 0 || d < f->max_s)) f->max_s = d;
    if (qv_params_check(p)) {
        const char *e = qv_last_error();
        static const char *const names[] = {"temperature", "top_k", "top_p",
                                            "repetition_penalty"};
        const char *field = NULL;
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            if (!strncmp(e, names[i], strlen(names[i])) && e[strlen(names[i])] == ':')
                field = names[i];
        return qvs_bad(v, 400, "invalid_value", field, "%s", e);
    }
    return 0;
}

/* usage's text tokens: the input and the instructions in the model's own tokens, as vLLM-Omni
 * counts its text_tokens (parse adds the reference's frames, its audio_tokens). */
static int count_tokens(const fields *f, job *j, verdict *v) {
    const char *const texts[2] = {f->input, f->instr};
    const char *const names[2] = {"input", "instructions"};
    j->n_tokens = 0;
    for (int i = 0; i < 2; i++) {
        int32_t *ids;
        int n;
        if (!texts[i]) continue;
        enum qv_status st = qv_model_tokenize(f->m, texts[i], &ids, &n);
        if (st)
            return qvs_bad(v, st == QV_E_INVALID ? 400 : 503,
                           st == QV_E_INVALID ? "invalid_value" : "server_error", names[i],
                           "%s: %s", names[i], qv_last_error());
        qv_free(ids);
        j->n_tokens += n;
    }
    return 0;
}

/* Fills j (strings, request, format, stream, reference) and p from the JSON body; model in
 * *model. The fields are checked in the order of the steps above; a reference is cloned (or
 * found in the cache) last, once everything else is valid; verdict status -1/-2: no slot for that
 * clone (qvs_slot_take). */
static int parse(qv_server *s, struct MHD_Connection *c, const api_key *k, const char *body,
                 size_t len, job *j, qv_params *p, int *model, verdict *v) {
    /* the whole body is one JSON value: anything after it but white space is malformed (the
     * body is NUL-terminated: len + 1 lets cJSON check that its NUL follows the value) */
    cJSON *o = cJSON_ParseWithLengthOpts(body ? body : "", body ? len + 1 : 1, NULL, 1);
    int rc = -1;
    fields f = {.vr = &j->voice};
    if (!cJSON_IsObject(o)) {
        qvs_bad(v, 400, "invalid_json", NULL, "request body: not a JSON object");
        goto out;
    }
    if (qvs_speech_fields(o, NULL, v)) goto out;
    if (get_str(o, "input", &f.input, v) || get_str(o, "model", &f.mname, v) ||
        get_voice(o, &f.voice, v) || get_str(o, "speaker", &f.alias, v) ||
        get_str(o, "instructions", &f.instr, v) || get_str(o, "response_format", &f.fmt, v) ||
        get_str(o, "stream_format", &f.sfmt, v) || get_str(o, "language", &f.lang, v) ||
        get_str(o, "task_type", &f.task, v) || get_str(o, "ref_audio", &f.ref_audio, v) ||
        get_str(o, "ref_text", &f.ref_text, v))
        goto out;
    if (parse_text_model(s, &f, model, v) || parse_reference(o, &f, v) ||
        parse_voice(s, k, o, &f, v) || parse_format(o, &f, j, v) ||
        parse_fixed(o, &j->speed, v) || parse_style(o, j, v) || parse_sampling(s, o, &f, p, v))
        goto out;
    if ((f.input && !(j->text = strdup(f.input))) || (f.lang && !(j->language = strdup(f.lang))) ||
        (f.speaker && !(j->speaker = strdup(f.speaker))) ||
        (f.instr && !(j->instruct = strdup(f.instr))) ||
        (f.voice && !f.speaker && !(j->voice_path = strdup(f.vr->path)))) {
        qvs_bad(v, 500, "out_of_memory", NULL, "out of memory");
        goto out;
    }
    j->max_seconds = f.max_s;
    if (count_tokens(&f, j, v)) goto out;
    if (f.ref_audio || f.emb) {
        ref_spec r = {.audio = f.ref_audio,
                      .text = f.xvec_only ? NULL : f.ref_text,
                      .embedding = f.emb,
                      .n_embedding = f.emb ? qv_model_hidden_size(f.m) : 0};
        if (qvs_ref_get(s, c, j->deadline, &r, &j->ref, v)) goto out;
    }
    /* vLLM-Omni's input_token_details.audio_tokens: the reference frames ICL puts in the prompt
     * (0 for a preset, an x-vector-only reference or voice) */
    if (j->ref && qv_voice_has_icl(qvs_ref_voice(j->ref)))
        qv_voice_ref_codes(qvs_ref_voice(j->ref), &j->n_audio_tokens);
    else if (f.voice && !f.speaker)
        j->n_audio_tokens = f.vr->icl_frames;
    j->n_tokens += j->n_audio_tokens;
    /* the outputs name the voice: a library voice by its id (its file's SHA-256, as
     * qv_voice_id), a reference by its cached voice's, a preset speaker by name */
    j->prov = qv_provenance_of(f.m, j->ref ? qvs_ref_voice(j->ref) : NULL, f.speaker);
    if (f.voice && !f.speaker) snprintf(j->prov.voice_id, sizeof j->prov.voice_id, "%s", f.vr->id);
    j->prov.watermark = !s->cfg.no_watermark;
    if (j->stream && qv_encoder_new(&j->enc, j->format, &j->prov, stream_sink, j, NULL)) {
        qvs_bad(v, 500, "out_of_memory", NULL, "%s", qv_last_error());
        goto out;
    }
    rc = 0;
out:
    free(f.emb);
    cJSON_Delete(o);
    return rc;
}

/* ==== replies ================================================================================ */

/* The provenance tags as a header too: raw PCM and SSE have no container to carry them. */
static void add_provenance(struct MHD_Response *r, const job *j) {
    char text[QV_PROVENANCE_TEXT_BYTES];
    if (!qv_provenance_text(&j->prov, text)) MHD_add_response_header(r, "X-Qvoice-Provenance", text);
}

/* HTTP status for a failed synthesis. */
static int failure_status(const job *j, const char **type, const char **code) {
    *type = "invalid_request_error";
    switch (j->st) {
    case QV_E_INVALID:
        *code = "invalid_value";
        return 400;
    case QV_E_SPEAKER:
        *code = "voice_not_found";
        return 400;
    case QV_E_LANGUAGE:
        *code = "invalid_value";
        return 400;
    case QV_E_LIMIT:
        *code = "input_too_long";
        return 400;
    case QV_E_VOCAB:
        *code = "unsupported_characters";
        return 400;
    case QV_E_VOICE:
    case QV_E_FOREIGN_VOICE:
        *code = "voice_unusable";
        return 400;
    case QV_E_UNSUPPORTED:
        *code = "unsupported_value";
        return 400;
    case QV_E_CANCELLED:
        *type = "server_error";
        *code = j->timed_out ? "timeout" : "cancelled";
        return j->timed_out ? 504 : 503;
    case QV_E_NOMEM:
        *type = "server_error";
        *code = "out_of_memory";
        return 503;
    case QV_E_GUARD:
        *type = "server_error";
        *code = "guard";
        return 500;
    case QV_OK:
    case QV_E_MODEL:
    case QV_E_STATE:
    case QV_E_ABI:
    case QV_E_AUDIO:
    case QV_E_IO:
    case QV_STATUS_COUNT:
        break;
    }
    *type = "server_error";
    *code = "synthesis_failed";
    return 500;
}

/* The field a refused style names: the request's style, or a markup tag of its input. */
static const char *failure_param(const job *j) {
    if (j->st != QV_E_UNSUPPORTED) return NULL;
    return !strncmp(j->err, "style \"", 7) ? "style"
           : !strncmp(j->err, "tag [", 5)    ? "input"
                                              : NULL;
}

static enum MHD_Result reply_failure(struct MHD_Connection *c, req *q, const job *j) {
    const char *type, *code;
    int status = failure_status(j, &type, &code);
    return qvs_reply_error(c, q, status, type, code, failure_param(j), "synthesis failed: %s: %s",
                           qv_strerror(j->st), j->err[0] ? j->err : "-");
}

/* Waits until pred holds (under j->mu), the client leaves or the deadline passes (then the
 * synthesis is cancelled: returns -1 when the client left). */
static int wait_job(job *j, int want_bytes) {
    pthread_mutex_lock(&j->mu);
    while (!j->done && !(want_bytes && j->out.len > j->off)) {
        qvs_timed_wait(&j->cv, &j->mu, 50);
        if (j->done || (want_bytes && j->out.len > j->off)) break;
        pthread_mutex_unlock(&j->mu);
        int gone = qvs_peer_gone(j->conn), late = qvs_now_s() > j->deadline;
        pthread_mutex_lock(&j->s->mu);
        int stopping = j->s->draining == 2;
        pthread_mutex_unlock(&j->s->mu);
        if (gone || late || stopping) {
            job_cancel(j, late);
            if (gone) return -1;
        }
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

static void count_stream_error(qv_server *s) {
    pthread_mutex_lock(&s->met.mu);
    s->met.stream_errors++;
    pthread_mutex_unlock(&s->met.mu);
}

/* MHD content reader of a streamed response. */
static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    job *j = cls;
    if (wait_job(j, 1) < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    pthread_mutex_lock(&j->mu);
    if (j->out.len == j->off && j->done && !j->ended) { /* the end: done event or error */
        j->ended = 1;
        int ok = j->st == QV_OK;
        if (!ok) count_stream_error(j->s);
        if (j->stream == STREAM_SSE) {
            char ev[1024];
            const char *type, *code;
            int status = ok ? 200 : failure_status(j, &type, &code);
            if (ok && j->stats.warning[0]) { /* a markup tag the model cannot honour, ... */
                cJSON *w = cJSON_CreateObject();
                cJSON_AddStringToObject(w, "type", "speech.audio.warning");
                cJSON_AddStringToObject(w, "message", j->stats.warning);
                char *t = cJSON_PrintUnformatted(w);
                if (t) {
                    qvs_bytes_add(&j->out, "event: speech.audio.warning\ndata: ", 34);
                    qvs_bytes_add(&j->out, t, strlen(t));
                    qvs_bytes_add(&j->out, "\n\n", 2);
                }
                free(t);
                cJSON_Delete(w);
            }
            if (ok)
                snprintf(ev, sizeof ev,
                         "event: speech.audio.done\ndata: {\"type\":\"speech.audio.done\","
                         "\"usage\":{\"input_tokens\":%d,"
                         "\"output_tokens\":%d,\"total_tokens\":%d,\"input_token_details\":"
                         "{\"text_tokens\":%d,\"audio_tokens\":%d}}}\n\n",
                         j->n_tokens, j->stats.n_frames, j->n_tokens + j->stats.n_frames,
                         j->n_tokens - j->n_audio_tokens, j->n_audio_tokens);
            else {
                cJSON *e = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(e, "error");
                char msg[700];
                snprintf(msg, sizeof msg, "synthesis failed after audio was sent: %s: %s",
                         qv_strerror(j->st), j->err);
                qvs_scrub(j->s, msg, sizeof msg);
                cJSON_AddStringToObject(e, "type", "speech.audio.error");
                cJSON_AddStringToObject(in, "message", msg);
                cJSON_AddStringToObject(in, "type", type);
                cJSON_AddStringToObject(in, "code", code);
                cJSON_AddNumberToObject(in, "status", status);
                char *t = cJSON_PrintUnformatted(e);
                snprintf(ev, sizeof ev, "event: speech.audio.error\ndata: %s\n\n",
                         t ? t : "{\"type\":\"speech.audio.error\"}");
                free(t);
                cJSON_Delete(e);
            }
            qvs_bytes_add(&j->out, ev, strlen(ev));
        } else if (!ok) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR; /* truncated body: the client sees it */
        }
    }
    ssize_t n;
    if (j->out.len > j->off) {
        n = (ssize_t)(j->out.len - j->off < max ? j->out.len - j->off : max);
        memcpy(buf, j->out.p + j->off, (size_t)n);
        j->off += (size_t)n;
        if (j->off == j->out.len) j->off = j->out.len = 0;
    } else {
        n = j->done ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

/* A whole file's usage, in vLLM-Omni's headers (the body is audio). */
static void add_usage_headers(struct MHD_Response *r, const job *j) {
    char n[3][16];
    snprintf(n[0], sizeof n[0], "%d", j->n_tokens);
    snprintf(n[1], sizeof n[1], "%d", j->stats.n_frames);
    snprintf(n[2], sizeof n[2], "%d", j->n_tokens + j->stats.n_frames);
    MHD_add_response_header(r, "x-vllm-omni-input-tokens", n[0]);
    MHD_add_response_header(r, "x-vllm-omni-output-tokens", n[1]);
    MHD_add_response_header(r, "x-vllm-omni-total-tokens", n[2]);
}

static void free_stream(void *cls) {
    job_unref(cls);
}

/* ==== the route ============================================================================== */

void qvs_speech_release(qv_server *s, req *q) {
    job *j = q->job;
    if (!j) return;
    job_cancel(j, 0);
    pthread_mutex_lock(&j->mu);
    if (j->done && j->stats.n_samples)
        snprintf(q->note, sizeof q->note, "audio=%.2fs ttfa=%.3fs rtf=%.3f", j->stats.audio_seconds,
                 j->stats.first_audio_s, j->stats.rtf);
    else if (j->done && j->st)
        snprintf(q->note, sizeof q->note, "synthesis: %s", qv_strerror(j->st));
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    q->job = NULL;
}

/* The library request of a parsed job. */
static void job_request(job *j) {
    j->r = qv_synth_default_request();
    j->r.text = j->text;
    j->r.language = j->language;
    j->r.speaker = j->speaker;
    j->r.voice_path = j->voice_path;
    j->r.voice = j->ref ? qvs_ref_voice(j->ref) : NULL;
    j->r.instruct = j->instruct;
    j->r.style = j->style;
    j->r.style_strength = j->style_strength;
    j->r.strict_markup = j->strict_markup;
    j->r.max_seconds = j->max_seconds; /* per chunk in the library; on_pcm caps the total */
    j->r.speed = j->speed;
    j->max_samples = (int64_t)(j->max_seconds * QV_SAMPLE_RATE_HZ);
    /* A weight delta rewrites the shared model for good: not in a server. The voice's x-vector
     * (and ICL) still apply. */
    j->r.use_wdelta = 0;
    /* A whole response can wait for each chunk to pass the guard, so a trip is retried instead
     * of failing the request; a stream sends audio as it is decoded. */
    j->r.whole_chunks = j->stream == STREAM_NONE;
}

job *qvs_speech_parse(qv_server *s, struct MHD_Connection *c, const api_key *k,
                      const char *body, size_t len, double deadline, int *model, qv_params *p,
                      verdict *v) {
    memset(v, 0, sizeof *v);
    *model = -1; /* set by parse when it succeeds */
    job *j = calloc(1, sizeof *j);
    if (!j) {
        qvs_bad(v, 503, "out_of_memory", NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->voice.fd = -1;
    j->pcm.struct_size = sizeof j->pcm;
    j->s = s;
    j->conn = c;
    j->deadline = deadline;
    j->speed = 1;
    if (parse(s, c, k, body, len, j, p, model, v)) {
        job_unref(j);
        return NULL;
    }
    return j;
}

void qvs_speech_job_free(job *j) {
    if (j) job_unref(j);
}

/* Starts j's synthesis on a slot of model: 0, or qvs_slot_take's -1 (queue full) / -2 (gone,
 * late, stopping), -3 no synthesizer for p, -4 no thread (the last two: out of memory). */
int qvs_job_start(qv_server *s, struct MHD_Connection *c, job *j, int model, const qv_params *p) {
    job_request(j);
    j->slot = slot_acquire(s, c, model, p, j->deadline);
    if (j->slot < 0) return j->slot;
    pthread_t th;
    j->refs++; /* the worker's */
    j->running = 1;
    pthread_mutex_lock(&s->mu);
    s->n_workers++; /* qv_server_free waits for them */
    pthread_mutex_unlock(&s->mu);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&th, &at, worker, j);
    pthread_attr_destroy(&at);
    if (err) {
        j->refs--;
        j->running = 0;
        pthread_mutex_lock(&s->mu);
        s->n_workers--;
        pthread_mutex_unlock(&s->mu);
        qvs_slot_release(s, j->slot);
        return -4;
    }
    return 0;
}

void qvs_job_cancel(job *j) {
    pthread_mutex_lock(&j->mu);
    if (!j->cancel && j->running && !j->done) qv_synth_cancel(j->s->slots[j->slot].synth);
    j->cancel = 1; /* before the synthesis starts too: on_pcm then stops it */
    pthread_mutex_unlock(&j->mu);
}

int qvs_job_is_stream(const job *j) {
    return j->stream != STREAM_NONE;
}

const qv_provenance *qvs_job_provenance(const job *j) {
    return &j->prov;
}

int qvs_job_finish(job *j, qvs_job_result *res) {
    memset(res, 0, sizeof *res);
    if (wait_job(j, 0) < 0) return -1;
    res->input_tokens = j->n_tokens;
    res->audio_tokens = j->n_audio_tokens;
    res->output_tokens = j->stats.n_frames;
    snprintf(res->warning, sizeof res->warning, "%s", j->stats.warning);
    res->media_type = qv_format_mime(j->format);
    if (j->st) {
        const char *type;
        res->status = failure_status(j, &type, &res->code);
        res->param = failure_param(j);
        snprintf(res->msg, sizeof res->msg, "synthesis failed: %s: %s", qv_strerror(j->st),
                 j->err[0] ? j->err : "-");
        return 0;
    }
    if (qv_audio_encode(j->format, j->pcm.pcm, j->pcm.n, &j->prov, &res->audio, &res->n_bytes)) {
        res->status = 500;
        res->code = "encoding_failed";
        snprintf(res->msg, sizeof res->msg, "response_format %s", qv_last_error());
    }
    return 0;
}

/* The reply for qvs_job_start's failures. */
static enum MHD_Result reply_not_started(qv_server *s, struct MHD_Connection *c, req *q,
                                         const job *j, int why) {
    if (why == -1 || why == -2) return qvs_reply_not_admitted(s, c, q, why, j->deadline);
    return qvs_reply_error(c, q, 503, "server_error", "out_of_memory", NULL, "%s",
                           why == -3 ? "cannot create a synthesizer for these parameters"
                                     : "cannot start a synthesis thread");
}

enum MHD_Result qvs_speech_handle(qv_server *s, struct MHD_Connection *c, req *q) {
    verdict v;
    qv_params p;
    int model;
    double deadline = q->t0 + s->cfg.timeout_s;
    job *j = qvs_speech_parse(s, c, q->key, q->body, q->body_len, deadline, &model, &p, &v);
    if (!j) {
        if (v.status < 0) return qvs_reply_not_admitted(s, c, q, v.status, deadline);
        return qvs_reply_error(c, q, v.status,
                               v.status >= 500 ? "server_error" : "invalid_request_error", v.code,
                               v.param, "%s", v.msg);
    }
    q->job = j; /* freed by qvs_speech_release when the request completes */
    int why = qvs_job_start(s, c, j, model, &p);
    if (why) return reply_not_started(s, c, q, j, why);
    if (j->stream == STREAM_NONE) {
        qvs_job_result res;
        if (qvs_job_finish(j, &res) < 0) return MHD_NO;
        if (res.status)
            return qvs_reply_error(c, q, res.status,
                                   res.status >= 500 ? "server_error" : "invalid_request_error",
                                   res.code, res.param, "%s", res.msg);
        struct MHD_Response *r =
            MHD_create_response_from_buffer_with_free_callback(res.n_bytes, res.audio, qv_free);
        if (!r) {
            qv_free(res.audio);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, res.media_type);
        add_provenance(r, j);
        if (res.warning[0]) MHD_add_response_header(r, "X-Qvoice-Warning", res.warning);
        add_usage_headers(r, j);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        q->status = MHD_HTTP_OK;
        return ret;
    }
    /* Streams: the status waits for the first audio, so an early failure is still a 4xx/5xx. */
    if (wait_job(j, 1) < 0) return MHD_NO;
    pthread_mutex_lock(&j->mu);
    int failed = j->done && j->st && j->out.len == 0;
    pthread_mutex_unlock(&j->mu);
    if (failed) return reply_failure(c, q, j);
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the response */
    pthread_mutex_unlock(&j->mu);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, read_stream, j, free_stream);
    if (!r) {
        job_unref(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            j->stream == STREAM_SSE ? "text/event-stream"
                                                    : qv_format_mime(j->format));
    add_provenance(r, j);
    if (j->stream == STREAM_SSE)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    q->status = MHD_HTTP_OK;
    return ret;
}

int qvs_speech_run(qv_server *s, job *j, int model, const qv_params *p, qv_pcm_fn fn,
                   void *user, qv_synth_stats *st, verdict *v) {
    memset(v, 0, sizeof *v);
    j->stream = STREAM_FN;
    j->fn = fn;
    j->fn_user = user;
    job_request(j);
    j->r.whole_chunks = 0;
    int si = slot_acquire(s, NULL, model, p, j->deadline);
    if (si == -1 || si == -2) {
        v->status = si;
        return -1;
    }
    if (si == -3)
        return qvs_bad(v, 503, "out_of_memory", NULL,
                       "cannot create a synthesizer for these parameters");
    pthread_mutex_lock(&j->mu);
    j->slot = si;
    j->running = 1;
    int cancelled = j->cancel;
    pthread_mutex_unlock(&j->mu);
    qv_synth_stats local = {.struct_size = sizeof local};
    if (!st) st = &local;
    enum qv_status rc =
        cancelled ? QV_E_CANCELLED : qv_synth_run(s->slots[si].synth, &j->r, on_pcm, j, st);
    pthread_mutex_lock(&j->mu);
    if (rc == QV_E_CANCELLED && j->capped && !j->cancel) rc = QV_OK, st->capped = 1;
    j->st = rc;
    if (rc && !j->err[0]) snprintf(j->err, sizeof j->err, "%s", qv_last_error());
    j->done = 1;
    pthread_mutex_unlock(&j->mu);
    qvs_metrics_synth(&s->met, st);
    pthread_mutex_lock(&s->met.mu);
    s->met.guard_failures += rc == QV_E_GUARD;
    s->met.cancelled += rc == QV_E_CANCELLED;
    pthread_mutex_unlock(&s->met.mu);
    qvs_slot_release(s, si);
    if (!rc) return 0;
    const char *type, *code;
    int status = failure_status(j, &type, &code);
    qvs_bad(v, status, code, failure_param(j), "synthesis failed: %s: %s", qv_strerror(rc),
            j->err[0] ? j->err : "-");
    qvs_scrub(s, v->msg, sizeof v->msg);
    return -1;
}

