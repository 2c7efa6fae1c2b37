/* clone — make a .qvoice from a reference recording, or compare two voices' x-vectors.
 * CLI only: audio → reference hygiene (clone/hygiene.h) → x-vector (+ ICL codes) from the clone
 * library, TPAD/WOVR from the Base model exactly as the engine computes them (engine/model.h); the
 * file is written by voicefmt (atomic: a failure never leaves a partial output). Human summary on
 * stdout, warnings on stderr, --json replaces the summary with one JSON object.
 */
#include <cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clone/clone.h"
#include "checkpoint/config.h"
#include "checkpoint/fingerprint.h"
#include "clone/hygiene.h"
#include "clone/plot.h"
#include "kernels/kernels.h"
#include "engine/model.h"
#include "voicefmt/qvf.h"
#include "include/qvoice.h"
#include "checkpoint/safetensors.h"

#define MAX_TRANSCRIPT_BYTES (1u << 20)

typedef struct {
    const char *model_dir, *audio, *out, *ref_text, *ref_text_file, *name, *language;
    const char *target_cv, *consent, *plot;
    int xvector_only, json, threads, compare, no_hygiene, allow_fallback, no_wovr;
    double max_seconds, speaker_threshold;
} options;

#define MAX_SECTIONS 16
typedef struct { char tag[5]; int count; long long bytes; } section;

#define MAX_WARNINGS 8
typedef struct {       /* what the run did, for the summary */
    qvc_audio audio;
    qvc_hygiene_report hyg;
    int hygiene_ran;   /* qvc_hygiene_run was called (its report holds the steps that ran) */
    double t_load_s, t_audio_s, t_hygiene_s, t_xvec_s, t_codes_s, t_write_s;
    int n_mel_frames, n_icl_frames;
    double xvec_seconds, icl_seconds; /* audio fed to ECAPA / to the speech encoder */
    double xvec_norm;
    int language_id;
    char *transcript;
    int n_tensors;
    long long file_bytes;
    int n_sections;    /* 0 when the written file could not be listed */
    section sections[MAX_SECTIONS];
    int n_warnings;
    char warnings[MAX_WARNINGS][320];
} report;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "NAME\n"
            "    clone - make a qvoice voice file from a reference recording\n"
            "\n"
            "SYNOPSIS\n"
            "    clone -m BASE_MODEL_DIR REF_AUDIO -o VOICE.qvoice [-t TEXT | -T FILE] [options]\n"
            "    clone --compare A B [-m BASE_MODEL_DIR]\n"
            "\n"
            "DESCRIPTION\n"
            "    Reads REF_AUDIO (WAV, FLAC, OGG/Vorbis, Opus, MP3 if libsndfile supports it; any\n"
            "    rate and channel count; mono 24 kHz after resampling) and, with a Qwen3-TTS Base\n"
            "    model, stores its ECAPA-TDNN x-vector and, when a transcript is given, the\n"
            "    speech-tokenizer codes of the reference (in-context cloning, ICL), plus the Base\n"
            "    model's text-side bridge: TPAD (pad/bos/eos text embeddings) and WOVR (text\n"
            "    projection and codebook embedding rows 0..2047; see --no-wovr).\n"
            "    Reference hygiene (default on, docs/robustness.md): trims leading/trailing\n"
            "    silence, normalises the level (-20 dBFS active RMS, peak <= -1 dBFS) and reports\n"
            "    clipping, refuses < 3 s of voiced speech, picks the cleanest 10-15 s window for\n"
            "    ICL (+0.5 s silence), refuses a transcript implausible for that window, and warns\n"
            "    when windows of the clip sound like another speaker. Every step is printed and\n"
            "    recorded in the voice file's META (key \"hygiene\").\n"
            "\n"
            "OPTIONS\n"
            "    -m, --model DIR           Base model directory (required; CustomVoice and\n"
            "                              VoiceDesign models have no speaker encoder)\n"
            "    -o, --output FILE         voice file to write, atomically (required)\n"
            "    -t, --ref-text TEXT       transcript of the reference: adds ICL codes (default:\n"
            "                              none, x-vector only)\n"
            "    -T, --ref-text-file F     same, read from a UTF-8 file\n"
            "    -n, --name NAME           voice name (default: the audio file's base name)\n"
            "    -l, --language LANG       language of the reference, e.g. English (default: none)\n"
            "    -x, --xvector-only        store only the x-vector even with a transcript (off)\n"
            "    -c, --target-cv DIR       add a WDELTA (Base - CustomVoice weights) for DIR (off)\n"
            "    -W, --no-wovr             leave out WOVR, the Base text projection and codebook\n"
            "                              rows (16 MB for 0.6B) that make a CustomVoice model\n"
            "                              speak with Base's text side (default: written; TPAD,\n"
            "                              the Base pad/bos/eos vectors, is always written)\n"
            "    -s, --max-seconds S       use at most the first S seconds, 3..3600 (default %.0f)\n"
            "    -H, --no-hygiene          use the clip exactly as given: no trim, no level change,\n"
            "                              the whole clip for ICL, no checks (default: hygiene on)\n"
            "    -F, --allow-xvector-fallback\n"
            "                              an implausible transcript drops ICL (x-vector only)\n"
            "                              instead of failing (default: fail)\n"
            "    -S, --speaker-threshold C second-speaker warning below this cosine to the main\n"
            "                              speaker, -1..1 (default %.2f; for a trained encoder)\n"
            "    -A, --consent TEXT        consent statement stored in META with the user name and\n"
            "                              UTC time (documented, not enforced; default: none)\n"
            "    -P, --plot FILE.png       also write the reference's log-mel spectrogram as a PNG,\n"
            "                              the part used for the x-vector marked (default: none)\n"
            "    -j, --json                print one JSON object instead of the summary (off)\n"
            "    -p, --threads N           threads, 1..256 (default: online CPUs)\n"
            "    -C, --compare A B         cosine similarity of two x-vectors (audio files need -m;\n"
            "                              .qvoice/.bin files are read as voices)\n"
            "    -h, --help                this text\n"
            "    -V, --version             version\n"
            "\n"
            "EXIT STATUS\n"
            "    0  success\n"
            "    1  failure: unreadable or refused audio, bad model, I/O error (no output file is\n"
            "       left behind)\n"
            "    2  usage error\n"
            "\n"
            "EXAMPLE\n"
            "    clone -m models/Qwen3-TTS-12Hz-0.6B-Base ref.wav -t \"Hello there.\" -l English \\\n"
            "          --consent \"I agree to my voice being cloned.\" -o me.qvoice\n",
            QVC_DEFAULT_MAX_SECONDS, qvc_hygiene_default_params().spk_threshold);
}

static int usage_error(const char *msg) {
    fprintf(stderr, "clone: %s (see clone --help)\n", msg);
    return 2;
}

/* A warning: to stderr now, and kept for --json. */
static void warn(report *r, const char *file, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "clone: %s: warning: %s\n", file, msg);
    if (r->n_warnings < MAX_WARNINGS) snprintf(r->warnings[r->n_warnings++], sizeof r->warnings[0], "%s", msg);
}

static char *read_text_file(const char *path, char *err, size_t err_size) {
    size_t n;
    char *buf = qv_file_read(path, MAX_TRANSCRIPT_BYTES, &n, err, err_size);
    while (buf && n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    return buf;
}

static int is_voice_file(const char *path) {
    size_t n = strlen(path);
    return (n > 7 && !strcmp(path + n - 7, ".qvoice")) || (n > 4 && !strcmp(path + n - 4, ".bin"));
}

static int file_sha256_hex(const char *path, char hex[65]) {
    size_t n;
    char *buf = qv_file_read(path, SIZE_MAX / 2, &n, NULL, 0);
    uint8_t d[32];
    int rc = buf && qvf_sha256(buf, n, d) == 0 ? 0 : -1;
    if (!rc) qve_sha256_hex(d, hex);
    free(buf);
    return rc;
}

/* Samples → x-vector with a loaded speaker encoder. */
static int xvector_of_samples(const qvc_ecapa *e, qvk_pool *pool, const float *x, int64_t n,
                              float *xvec, int *n_frames, char *err, size_t err_size) {
    *n_frames = qvc_mel_n_frames(n);
    qvc_mel *mel = qvc_mel_create();
    float *m = malloc((size_t)(*n_frames > 0 ? *n_frames : 1) * QVC_MEL_BINS * sizeof(float));
    int rc = -1;
    if (!mel || !m) snprintf(err, err_size, "out of memory");
    else if (qvc_mel_compute(mel, m, x, n)) snprintf(err, err_size, "audio too short");
    else rc = qvc_ecapa_forward(e, pool, xvec, m, *n_frames, err, err_size);
    free(m);
    qvc_mel_free(mel);
    return rc;
}

/* ---- --compare ------------------------------------------------------------------------- */

static int load_xvector(const char *path, const options *o, qvk_pool *pool, qvc_ecapa **e,
                        float **xvec, int *dim, char *err, size_t err_size) {
    if (is_voice_file(path)) {
        qvf_voice *v = NULL;
        char e2[512];
        if (qvf_read_file(path, 0, &v, e2, sizeof e2)) {
            snprintf(err, err_size, "%s", e2);
            return -1;
        }
        *dim = (int)v->enc_dim;
        *xvec = malloc(sizeof(float) * v->enc_dim);
        if (*xvec) memcpy(*xvec, v->xvector, sizeof(float) * v->enc_dim);
        qvf_voice_free(v);
        if (!*xvec) snprintf(err, err_size, "%s: out of memory", path);
        return *xvec ? 0 : -1;
    }
    if (!o->model_dir) {
        snprintf(err, err_size, "%s: an audio file needs a Base model (-m DIR) to compute its x-vector", path);
        return -1;
    }
    if (!*e && !(*e = qvc_ecapa_load(o->model_dir, err, err_size))) return -1;
    qvc_audio a;
    if (qvc_audio_load(&a, path, o->max_seconds, err, err_size)) return -1;
    *dim = qvc_ecapa_dim(*e);
    *xvec = malloc(sizeof(float) * (size_t)*dim);
    int nf, rc = -1;
    char e2[400];
    if (!*xvec) snprintf(err, err_size, "%s: out of memory", path);
    else if (xvector_of_samples(*e, pool, a.samples, a.n_samples, *xvec, &nf, e2, sizeof e2)) snprintf(err, err_size, "%s: %s", path, e2);
    else rc = 0;
    qvc_audio_free(&a);
    return rc;
}

static int run_compare(const options *o, qvk_pool *pool, const char *pa, const char *pb) {
    char err[1024];
    qvc_ecapa *e = NULL;
    float *xa = NULL, *xb = NULL;
    int da = 0, db = 0, rc = 1;
    if (load_xvector(pa, o, pool, &e, &xa, &da, err, sizeof err) ||
        load_xvector(pb, o, pool, &e, &xb, &db, err, sizeof err)) {
        fprintf(stderr, "clone: %s\n", err);
    } else if (da != db) {
        fprintf(stderr, "clone: %s: x-vector size %d differs from %s's %d\n", pb, db, pa, da);
    } else {
        double cs = qvk_cosine(xa, xb, da);
        if (o->json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "a", pa);
            cJSON_AddStringToObject(j, "b", pb);
            cJSON_AddNumberToObject(j, "cosine", cs);
            cJSON_AddNumberToObject(j, "norm_a", qvc_l2norm(xa, da));
            cJSON_AddNumberToObject(j, "norm_b", qvc_l2norm(xb, db));
            char *s = cJSON_Print(j);
            if (s) puts(s);
            free(s);
            cJSON_Delete(j);
        } else {
            printf("cosine similarity %.6f (x-vector norms %.3f, %.3f; dim %d)\n", cs,
                   qvc_l2norm(xa, da), qvc_l2norm(xb, db), da);
        }
        rc = 0;
    }
    free(xa);
    free(xb);
    qvc_ecapa_free(e);
    return rc;
}

/* ---- weight delta (--target-cv) --------------------------------------------------------- */

static int is_delta_tensor(const qve_tensor *t) { return !strncmp(t->name, "talker.", 7); }

/* Streams every talker.* tensor of the Base checkpoint as a delta against the CustomVoice one:
 * bf16 matrices as bit deltas, 1-D tensors (norms, biases) raw f32, as qvoice-format.md §4.8 says. */
static int write_with_wdelta(const qvf_voice *v, const char *out, const qve_st *base,
                             const qve_st *cv, int *n_written, char *err, size_t err_size) {
    int n = 0;
    for (int i = 0; i < qve_st_count(base); i++) n += is_delta_tensor(qve_st_at(base, i));
    qvf_writer *w = NULL;
    if (qvf_writer_open(&w, out, v, (uint32_t)n, QVF_WKIND_DELTA, err, err_size)) return -1;
    for (int i = 0; i < qve_st_count(base); i++) {
        const qve_tensor *t = qve_st_at(base, i);
        if (!is_delta_tensor(t)) continue;
        const qve_tensor *tt = qve_st_find(cv, t->name);
        uint64_t shape[4] = {0};
        for (int d = 0; d < t->n_dims; d++) shape[d] = (uint64_t)t->shape[d];
        qvf_tensor q;
        memset(&q, 0, sizeof q);
        int rc;
        if (t->dtype == QVE_DTYPE_BF16 && t->n_dims >= 2) {
            int same = tt && tt->dtype == QVE_DTYPE_BF16 && tt->n_bytes == t->n_bytes;
            rc = qvf_wdelta_encode(t->name, QVF_DTYPE_BF16, (uint32_t)t->n_dims, shape, t->data,
                                   same ? tt->data : NULL, 0, &q, err, err_size);
        } else {
            float *f = qve_tensor_to_f32(t);
            if (!f) {
                snprintf(err, err_size, "%s: out of memory", out);
                qvf_writer_abort(w);
                return -1;
            }
            rc = qvf_wdelta_encode(t->name, QVF_DTYPE_F32, (uint32_t)t->n_dims, shape, f, NULL, 0,
                                   &q, err, err_size);
            qvk_free(f);
        }
        if (!rc) rc = qvf_writer_add_tensor(w, &q, err, err_size);
        qvf_tensor_free(&q);
        if (rc) {
            qvf_writer_abort(w);
            return -1;
        }
    }
    *n_written = n;
    return qvf_writer_commit(w, err, err_size) ? -1 : 0;
}

/* TPAD (pad/bos/eos as the engine computes them) and, unless no_wovr, WOVR (the Base text
 * projection and codebook rows 0..2047) from the loaded Base model; legacy §6.2-6.3. */
#define WOVR_CODEC_ROWS 2048
static int set_bridge(qvf_voice *v, const qv_model *m, qvk_pool *pool, int no_wovr) {
    const qve_model_config *c = &m->cfg;
    const size_t H = (size_t)c->talker.hidden_size, TH = (size_t)c->text_hidden_size;
    const size_t cv = (size_t)c->talker.vocab_size < WOVR_CODEC_ROWS ? (size_t)c->talker.vocab_size
                                                                     : WOVR_CODEC_ROWS;
    float *tpad = malloc(3 * H * sizeof(float));
    if (!tpad) return -1;
    v->tpad = tpad, v->tpad_hidden = (uint32_t)H;
    if (qve_model_text_special(m, pool, tpad)) return -1;
    if (no_wovr) return 0;
    const qve_talker *t = &m->talker;
    if (!(v->wovr_fc1_w = malloc(TH * TH * 2)) || !(v->wovr_fc1_b = malloc(TH * 4)) ||
        !(v->wovr_fc2_w = malloc(H * TH * 2)) || !(v->wovr_fc2_b = malloc(H * 4)) ||
        !(v->wovr_codec = malloc(cv * H * 2)))
        return -1;
    memcpy(v->wovr_fc1_w, t->fc1, TH * TH * 2);
    memcpy(v->wovr_fc1_b, t->fc1_bias, TH * 4);
    memcpy(v->wovr_fc2_w, t->fc2, H * TH * 2);
    memcpy(v->wovr_fc2_b, t->fc2_bias, H * 4);
    memcpy(v->wovr_codec, t->codec_embedding, cv * H * 2);
    v->wovr_h = (uint32_t)H, v->wovr_th = (uint32_t)TH, v->wovr_cv = (uint32_t)cv;
    return 0;
}

static void model_id(qvf_model_id *id, const qve_model_config *c, const uint8_t fp[32]) {
    memset(id, 0, sizeof *id);
    id->hidden_size = (uint32_t)c->talker.hidden_size;
    id->text_hidden_size = (uint32_t)c->text_hidden_size;
    id->enc_dim = c->has_speaker_encoder ? (uint32_t)c->enc_dim : 0;
    id->variant = c->variant == QVE_VARIANT_BASE ? QVF_VARIANT_BASE
                  : c->variant == QVE_VARIANT_CUSTOM_VOICE ? QVF_VARIANT_CUSTOM_VOICE
                                                           : QVF_VARIANT_VOICE_DESIGN;
    memcpy(id->fingerprint, fp, 32);
}

/* ---- clone ------------------------------------------------------------------------------ */

/* Payload bytes per chunk tag of the file just written (WDTN chunks summed), read back with
 * voicefmt's chunk walker so the summary reports what is on disk. */
static void list_sections(report *r, const char *path) {
    size_t n;
    char *buf = qv_file_read(path, (size_t)r->file_bytes, &n, NULL, 0);
    enum { MAX_CHUNKS = 4200 };   /* ≤ 4096 WDTN + the fixed chunks */
    qvf_chunk_info *info = malloc(sizeof *info * MAX_CHUNKS);
    int n_chunks = 0;
    char err[256];
    if (buf && info && n == (size_t)r->file_bytes &&
        !qvf_list_chunks(buf, n, path, info, MAX_CHUNKS, &n_chunks, err, sizeof err)) {
        for (int i = 0; i < n_chunks && i < MAX_CHUNKS; i++) {
            int k = 0;
            while (k < r->n_sections && strcmp(r->sections[k].tag, info[i].tag)) k++;
            if (k == r->n_sections) {
                if (k == MAX_SECTIONS) break;
                memcpy(r->sections[k].tag, info[i].tag, 5);
                r->n_sections++;
            }
            r->sections[k].count++;
            r->sections[k].bytes += (long long)info[i].payload_bytes;
        }
    }
    free(info);
    free(buf);
}

/* The hygiene summary lines of the steps that ran (a refusal stops the chain): trim always,
 * level once the clean clip exists, the window once it was picked. */
static void hygiene_lines(const report *r, char *buf, size_t size) {
    const qvc_hygiene_report *h = &r->hyg;
    qvc_hygiene_summary(h, buf, size);
    if (!h->clean && h->trim.end == 0) {
        buf[0] = 0; /* no speech found: the error says it all */
    } else if (!h->clean) {
        char *nl = strchr(buf, '\n');
        if (nl) nl[1] = 0;
    } else if (!h->has_icl && !h->transcript.fallback && h->window.end > 0) {
        /* refused transcript: show the window it was checked against */
        size_t w = strlen(buf);
        double t0 = (double)h->trim.start / QVC_SAMPLE_RATE_HZ;
        snprintf(buf + w, size - w, "icl window: %.2f-%.2f s%s, %.2f s voiced (transcript refused)\n",
                 t0 + (double)h->window.start / QVC_SAMPLE_RATE_HZ,
                 t0 + (double)h->window.end / QVC_SAMPLE_RATE_HZ,
                 h->window.whole ? " (whole clip)" : "", h->window.voiced_seconds);
    }
}

static void print_hygiene_human(FILE *f, const report *r) {
    char buf[4096];
    hygiene_lines(r, buf, sizeof buf);
    const char *lead = "  hygiene    ";
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        fprintf(f, "%s%s\n", lead, line);
        lead = "             ";
    }
}

static void add_hygiene_json(cJSON *j, const options *o, const report *r) {
    if (o->no_hygiene || !r->hygiene_ran) {
        cJSON_AddStringToObject(j, "hygiene", o->no_hygiene ? "off" : "not run");
        return;
    }
    char *hs = qvc_hygiene_json(&r->hyg);
    cJSON *h = hs ? cJSON_Parse(hs) : NULL;
    free(hs);
    if (h) cJSON_AddItemToObject(j, "hygiene", h);
}

static void add_warnings_json(cJSON *j, const report *r) {
    cJSON *w = cJSON_AddArrayToObject(j, "warnings");
    for (int i = 0; w && i < r->n_warnings; i++)
        cJSON_AddItemToArray(w, cJSON_CreateString(r->warnings[i]));
}

static void print_json(cJSON *j) {
    char *s = cJSON_Print(j);
    if (s) puts(s);
    free(s);
    cJSON_Delete(j);
}

static void print_summary(const options *o, const report *r, const qvf_voice *v, int dim) {
    const qvc_audio *a = &r->audio;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddBoolToObject(j, "ok", 1);
        cJSON_AddStringToObject(j, "output", o->out);
        cJSON_AddStringToObject(j, "audio", o->audio);
        cJSON_AddStringToObject(j, "model", o->model_dir);
        cJSON_AddStringToObject(j, "format", a->src_format);
        cJSON_AddNumberToObject(j, "source_sample_rate_hz", a->src_rate_hz);
        cJSON_AddNumberToObject(j, "source_channels", a->src_channels);
        cJSON_AddNumberToObject(j, "source_seconds", a->src_seconds);
        cJSON_AddNumberToObject(j, "seconds_used", a->used_seconds);
        cJSON_AddNumberToObject(j, "max_seconds", o->max_seconds);
        cJSON_AddBoolToObject(j, "truncated", a->truncated);
        cJSON_AddBoolToObject(j, "resampled", a->resampled);
        cJSON_AddNumberToObject(j, "clipped_fraction", a->clipped_fraction);
        cJSON_AddNumberToObject(j, "rms_dbfs", a->rms_dbfs);
        add_hygiene_json(j, o, r);
        cJSON_AddNumberToObject(j, "xvector_seconds", r->xvec_seconds);
        cJSON_AddNumberToObject(j, "mel_frames", r->n_mel_frames);
        cJSON_AddNumberToObject(j, "xvector_dim", dim);
        cJSON_AddNumberToObject(j, "xvector_norm", r->xvec_norm);
        cJSON_AddNumberToObject(j, "icl_seconds", r->icl_seconds);
        cJSON_AddNumberToObject(j, "icl_frames", r->n_icl_frames);
        if (r->n_icl_frames && r->transcript) cJSON_AddStringToObject(j, "transcript", r->transcript);
        cJSON *meta = cJSON_AddObjectToObject(j, "meta");
        for (int i = 0; i < v->n_meta; i++) cJSON_AddStringToObject(meta, v->meta[i].key, v->meta[i].value);
        cJSON *sec = cJSON_AddObjectToObject(j, "sections");
        for (int i = 0; i < r->n_sections; i++) {
            cJSON *so = cJSON_AddObjectToObject(sec, r->sections[i].tag);
            cJSON_AddNumberToObject(so, "count", r->sections[i].count);
            cJSON_AddNumberToObject(so, "payload_bytes", (double)r->sections[i].bytes);
        }
        cJSON_AddBoolToObject(j, "tpad", v->tpad_hidden != 0);
        cJSON_AddBoolToObject(j, "wovr", v->wovr_h != 0);
        if (r->n_tensors) cJSON_AddNumberToObject(j, "wdelta_tensors", r->n_tensors);
        cJSON_AddNumberToObject(j, "file_bytes", (double)r->file_bytes);
        if (o->plot) cJSON_AddStringToObject(j, "plot", o->plot);
        add_warnings_json(j, r);
        cJSON_AddNumberToObject(j, "threads", o->threads);
        cJSON *t = cJSON_AddObjectToObject(j, "timings_s");
        cJSON_AddNumberToObject(t, "load", r->t_load_s);
        cJSON_AddNumberToObject(t, "audio", r->t_audio_s);
        cJSON_AddNumberToObject(t, "hygiene", r->t_hygiene_s);
        cJSON_AddNumberToObject(t, "mel_ecapa", r->t_xvec_s);
        cJSON_AddNumberToObject(t, "speech_encoder", r->t_codes_s);
        cJSON_AddNumberToObject(t, "write", r->t_write_s);
        print_json(j);
        return;
    }
    printf("clone: %s -> %s\n", o->audio, o->out);
    printf("  audio      %s, %d Hz, %d channel%s, %.2f s%s\n", a->src_format, a->src_rate_hz,
           a->src_channels, a->src_channels == 1 ? "" : "s", a->src_seconds,
           a->src_channels > 1 ? " (channels averaged)" : "");
    printf("  used       %.2f s%s%s, RMS %.1f dBFS\n", a->used_seconds,
           a->truncated ? " (first part only, --max-seconds)" : "",
           a->resampled ? ", resampled to 24 kHz (libsamplerate best sinc)" : ", 24 kHz as is",
           a->rms_dbfs);
    if (o->no_hygiene) printf("  hygiene    off (--no-hygiene: the clip as given)\n");
    else print_hygiene_human(stdout, r);
    printf("  x-vector   %d dims, norm %.3f (%.2f s, %d mel frames)\n", dim, r->xvec_norm,
           r->xvec_seconds, r->n_mel_frames);
    if (r->n_icl_frames)
        printf("  ICL        %d frames (12.5 Hz, %.2f s) + transcript (%zu bytes)\n", r->n_icl_frames,
               r->icl_seconds, strlen(r->transcript));
    else
        printf("  ICL        none (x-vector only%s)\n",
               r->hyg.transcript.fallback ? ": transcript implausible, --allow-xvector-fallback" : "");
    if (o->consent) printf("  consent    \"%s\" (%s)\n", o->consent, qvf_meta_get(v, "consent_by"));
    printf("  sections  ");
    for (int i = 0; i < r->n_sections; i++) {
        if (r->sections[i].count > 1)
            printf(" %s %d × (%lld B total)", r->sections[i].tag, r->sections[i].count, r->sections[i].bytes);
        else
            printf(" %s %lld B", r->sections[i].tag, r->sections[i].bytes);
        printf(i + 1 < r->n_sections ? "," : "");
    }
    if (!r->n_sections) printf(" (not listed: file over 256 MB)");
    printf("\n  file       %lld bytes%s\n", r->file_bytes,
           r->n_tensors ? " (with the WDELTA weight stream)" : "");
    if (o->plot) printf("  plot       %s (log-mel, the part used marked)\n", o->plot);
    printf("  timings    load %.2f s, audio %.2f s, hygiene %.2f s, mel+ECAPA %.2f s, speech "
           "encoder %.2f s, write %.2f s\n",
           r->t_load_s, r->t_audio_s, r->t_hygiene_s, r->t_xvec_s, r->t_codes_s, r->t_write_s);
}

/* On failure: the hygiene steps that ran (stderr, or in the JSON object), then the error. */
static void print_failure(const options *o, const report *r, const char *err) {
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddBoolToObject(j, "ok", 0);
        cJSON_AddStringToObject(j, "error", err);
        if (o->audio) cJSON_AddStringToObject(j, "audio", o->audio);
        if (o->out) cJSON_AddStringToObject(j, "output", o->out);
        if (r->hygiene_ran) add_hygiene_json(j, o, r);
        add_warnings_json(j, r);
        print_json(j);
    } else if (r->hygiene_ran) {
        print_hygiene_human(stderr, r);
    }
    fprintf(stderr, "clone: %s\n", err);
}

static void user_name(char *buf, size_t size) {
    const char *u = getenv("USER");
    if (!u || !*u) {
        struct passwd *pw = getpwuid(geteuid());
        u = pw ? pw->pw_name : NULL;
    }
    if (u && *u) snprintf(buf, size, "%s", u);
    else snprintf(buf, size, "uid %d", (int)geteuid());
}

static int set_meta(qvf_voice *v, const options *o, const report *r) {
    char buf[256];
    int rc = 0;
    const char *name = o->name;
    char base[256];
    if (!name) {
        const char *s = strrchr(o->audio, '/');
        snprintf(base, sizeof base, "%s", s ? s + 1 : o->audio);
        char *dot = strrchr(base, '.');
        if (dot && dot != base) *dot = 0;
        name = base;
    }
    rc |= qvf_meta_set(v, "name", name);
    if (o->language) {
        rc |= qvf_meta_set(v, "language", o->language);
        snprintf(buf, sizeof buf, "%d", r->language_id);
        rc |= qvf_meta_set(v, "language_id", buf);
    }
    time_t now = time(NULL);
    struct tm tm;
    char when[64];
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    rc |= qvf_meta_set(v, "created_utc", when);
    snprintf(buf, sizeof buf, "qvoice clone %s", qv_version());
    rc |= qvf_meta_set(v, "tool", buf);
    char hex[65];
    if (!file_sha256_hex(o->audio, hex)) rc |= qvf_meta_set(v, "source_sha256", hex);
    snprintf(buf, sizeof buf, "%.3f", r->audio.used_seconds);
    rc |= qvf_meta_set(v, "duration_s", buf);
    snprintf(buf, sizeof buf, "%d", r->audio.src_rate_hz);
    rc |= qvf_meta_set(v, "source_sample_rate_hz", buf);
    snprintf(buf, sizeof buf, "%d", r->audio.src_channels);
    rc |= qvf_meta_set(v, "source_channels", buf);
    snprintf(buf, sizeof buf, "%g", o->max_seconds);
    rc |= qvf_meta_set(v, "max_ref_duration_s", buf);
    if (o->no_hygiene) {
        rc |= qvf_meta_set(v, "hygiene", "off");
    } else {
        char *hs = qvc_hygiene_json(&r->hyg);
        rc |= hs ? qvf_meta_set(v, "hygiene", hs) : QVF_E_NOMEM;
        free(hs);
    }
    if (o->consent) {
        char who[128];
        user_name(who, sizeof who);
        rc |= qvf_meta_set(v, "consent", o->consent);
        rc |= qvf_meta_set(v, "consent_by", who);
        rc |= qvf_meta_set(v, "consent_utc", when);
    }
    return rc;
}

/* The output's directory must exist and be writable, and the output not be a directory:
 * checked before the models load so a typo costs nothing. */
static int check_output(const char *out, char *err, size_t err_size) {
    struct stat sb;
    if (!stat(out, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(err, err_size, "%s: is a directory (expected a voice file path)", out);
        return -1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
        snprintf(err, err_size, "%.400s: directory %.400s does not exist", out, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK)) {
        snprintf(err, err_size, "%.400s: cannot write in %.400s (%s)", out, dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* "reference: X" from the hygiene library becomes "AUDIO: X". */
static void audio_error(char *err, size_t err_size, const char *audio, const char *msg) {
    if (!strncmp(msg, "reference: ", 11)) msg += 11;
    snprintf(err, err_size, "%s: %s", audio, msg);
}

/* --plot: the log-mel of the whole clip as loaded, the part the x-vector used (after trimming)
 * marked. */
static int write_plot(const options *o, const report *r, char *err, size_t err_size) {
    int nf = qvc_mel_n_frames(r->audio.n_samples);
    qvc_mel *mel = qvc_mel_create();
    float *m = malloc((size_t)(nf > 0 ? nf : 1) * QVC_MEL_BINS * sizeof(float));
    int rc = -1;
    if (!mel || !m || nf <= 0 || qvc_mel_compute(mel, m, r->audio.samples, r->audio.n_samples)) {
        snprintf(err, err_size, "%s: cannot compute the spectrogram (out of memory?)", o->plot);
    } else {
        int a = 0, b = nf;
        if (r->hygiene_ran && r->hyg.clean) {
            a = (int)(r->hyg.trim.start / QVC_MEL_HOP);
            b = (int)((r->hyg.trim.end + QVC_MEL_HOP - 1) / QVC_MEL_HOP);
            if (b > nf) b = nf;
            if (a >= b) a = b - 1;
        }
        rc = qvc_plot_mel_png(o->plot, m, nf, a, b, err, err_size);
    }
    free(m);
    qvc_mel_free(mel);
    return rc;
}

static int run_clone(const options *o, qvk_pool *pool) {
    char err[1024];
    report r;
    memset(&r, 0, sizeof r);
    int rc = 1;
    qvc_ecapa *ecapa = NULL;
    qvc_speech_encoder *se = NULL;
    qvc_mel *mel = NULL;
    qve_st *base_st = NULL, *cv_st = NULL;
    qvf_voice *v = NULL;
    qv_model *base_m = NULL;
    float *xvec = NULL;
    int32_t *codes = NULL;
    uint16_t *codes16 = NULL;
    qve_model_config mc, cvc;
    uint8_t fp[32];
    int want_icl = !o->xvector_only && (o->ref_text || o->ref_text_file);
    int plot_written = 0;

    if (check_output(o->out, err, sizeof err)) goto fail;
    if (o->plot && check_output(o->plot, err, sizeof err)) goto fail;
    if (o->ref_text_file) {
        if (!(r.transcript = read_text_file(o->ref_text_file, err, sizeof err))) goto fail;
        if (!*r.transcript) {
            snprintf(err, sizeof err, "%s: empty transcript", o->ref_text_file);
            goto fail;
        }
    } else if (o->ref_text) {
        r.transcript = strdup(o->ref_text);
    }
    double t0 = now_s();
    if (qve_model_config_load(&mc, o->model_dir, err, sizeof err)) goto fail;
    if (mc.variant != QVE_VARIANT_BASE || !mc.has_speaker_encoder) {
        snprintf(err, sizeof err,
                 "%s: this is a %s model; cloning needs a Base model (only Base checkpoints have "
                 "the speaker encoder)",
                 o->model_dir, mc.tts_model_type);
        goto fail;
    }
    r.language_id = 0;
    if (o->language && strcasecmp(o->language, "auto") != 0) {
        r.language_id = qve_language_id(&mc, o->language);
        if (r.language_id < 0) {
            int n = snprintf(err, sizeof err, "%s/config.json: unknown language \"%s\" (expected auto",
                             o->model_dir, o->language);
            for (int i = 0; i < mc.n_languages && n > 0 && (size_t)n < sizeof err; i++)
                if (!strstr(mc.codec_language_id[i].name, "dialect"))
                    n += snprintf(err + n, sizeof err - (size_t)n, ", %s", mc.codec_language_id[i].name);
            if (n > 0 && (size_t)n < sizeof err) snprintf(err + n, sizeof err - (size_t)n, ")");
            goto fail;
        }
    }
    if (o->target_cv) {
        if (qve_model_config_load(&cvc, o->target_cv, err, sizeof err)) goto fail;
        if (cvc.variant == QVE_VARIANT_BASE) {
            snprintf(err, sizeof err, "%s: --target-cv needs a CustomVoice (or VoiceDesign) model, found a Base model", o->target_cv);
            goto fail;
        }
        if (cvc.talker.hidden_size != mc.talker.hidden_size) {
            snprintf(err, sizeof err, "%s: hidden size %d does not match the Base model's %d", o->target_cv,
                     cvc.talker.hidden_size, mc.talker.hidden_size);
            goto fail;
        }
        if (!(cv_st = qve_st_open_dir(o->target_cv, "model", err, sizeof err))) goto fail;
        if (!(base_st = qve_st_open_dir(o->model_dir, "model", err, sizeof err))) goto fail;
    }
    if (!(ecapa = qvc_ecapa_load(o->model_dir, err, sizeof err))) goto fail;
    if (want_icl && !(se = qvc_speech_encoder_load(o->model_dir, err, sizeof err))) goto fail;
    if (qve_fingerprint_model(o->model_dir, QVE_FINGERPRINT_TABLE, fp, err, sizeof err)) goto fail;
    if (qv_model_load(&base_m, o->model_dir, err, sizeof err)) goto fail;
    double t1 = now_s();
    r.t_load_s = t1 - t0;

    if (qvc_audio_load(&r.audio, o->audio, o->max_seconds, err, sizeof err)) goto fail;
    double t2 = now_s();
    r.t_audio_s = t2 - t1;
    if (r.audio.truncated)
        warn(&r, o->audio, "%.2f s long, using the first %.2f s (--max-seconds)",
             r.audio.src_seconds, r.audio.used_seconds);
    if (r.audio.short_warning)
        warn(&r, o->audio, "only %.2f s of audio; 10-30 s gives a steadier voice", r.audio.used_seconds);
    if (r.audio.clip_warning)
        warn(&r, o->audio, "clipping (%.4f%% of samples at full scale)", 100.0 * r.audio.clipped_fraction);

    /* what the x-vector and the ICL codes are computed from */
    const float *xv_in = r.audio.samples, *icl_in = r.audio.samples;
    int64_t n_xv = r.audio.n_samples, n_icl_in = r.audio.n_samples;
    char e2[768];
    if (!o->no_hygiene) {
        if (!(mel = qvc_mel_create())) {
            snprintf(err, sizeof err, "%s: out of memory", o->audio);
            goto fail;
        }
        qvc_hygiene_params hp = qvc_hygiene_default_params();
        if (o->speaker_threshold > -2) hp.spk_threshold = o->speaker_threshold;
        qvc_ecapa_ctx ec = {ecapa, mel, pool};
        r.hygiene_ran = 1;
        int hrc = qvc_hygiene_run(&r.hyg, r.audio.samples, r.audio.n_samples,
                                  want_icl ? r.transcript : NULL, o->allow_fallback,
                                  qvc_ecapa_xvector, &ec, qvc_ecapa_dim(ecapa), &hp, e2, sizeof e2);
        r.t_hygiene_s = now_s() - t2;
        if (hrc) {
            audio_error(err, sizeof err, o->audio, e2);
            goto fail;
        }
        const qvc_hygiene_report *h = &r.hyg;
        if (h->level.clip_warning && !r.audio.clip_warning)
            warn(&r, o->audio, "clipping (%.4f%% of samples at full scale)",
                 100.0 * h->level.clipped_fraction);
        if (h->transcript.fallback) {
            warn(&r, o->audio, "%s; ICL dropped, x-vector only (--allow-xvector-fallback)",
                 h->transcript.reason);
            want_icl = 0;
        }
        if (h->has_icl && !h->window.whole)
            warn(&r, o->audio,
                 "ICL uses %.2f-%.2f s of the clip (the cleanest 10-15 s): the transcript must be "
                 "of exactly those seconds",
                 (double)(h->trim.start + h->window.start) / QVC_SAMPLE_RATE_HZ,
                 (double)(h->trim.start + h->window.end) / QVC_SAMPLE_RATE_HZ);
        if (h->has_speaker && h->speaker.warning) {
            char ranges[256] = "";
            size_t w = 0;
            double ts = (double)h->trim.start / QVC_SAMPLE_RATE_HZ;
            for (int i = 0; i < h->speaker.n_ranges && w < sizeof ranges; i++)
                w += (size_t)snprintf(ranges + w, sizeof ranges - w, "%s%.1f-%.1f s",
                                      i ? ", " : "", ts + h->speaker.ranges[i].start_s,
                                      ts + h->speaker.ranges[i].end_s);
            warn(&r, o->audio,
                 "another speaker? %s sound%s unlike the main voice (cosine < %.2f); cut %s out",
                 ranges, h->speaker.n_ranges == 1 ? "s" : "", h->speaker.threshold,
                 h->speaker.n_ranges == 1 ? "it" : "them");
        }
        xv_in = h->clean;
        n_xv = h->n_clean;
        icl_in = h->icl;
        n_icl_in = h->n_icl;
    }
    double t3 = now_s();

    int dim = qvc_ecapa_dim(ecapa);
    xvec = malloc(sizeof(float) * (size_t)dim);
    if (!xvec) {
        snprintf(err, sizeof err, "%s: out of memory", o->audio);
        goto fail;
    }
    if (xvector_of_samples(ecapa, pool, xv_in, n_xv, xvec, &r.n_mel_frames, e2, sizeof e2)) {
        audio_error(err, sizeof err, o->audio, e2);
        goto fail;
    }
    r.xvec_seconds = (double)n_xv / QVC_SAMPLE_RATE_HZ;
    r.xvec_norm = qvc_l2norm(xvec, dim);
    double t4 = now_s();
    r.t_xvec_s = t4 - t3;
    if (want_icl) {
        r.n_icl_frames = qvc_speech_encoder_n_frames(n_icl_in);
        r.icl_seconds = (double)n_icl_in / QVC_SAMPLE_RATE_HZ;
        codes = malloc(sizeof(int32_t) * QVC_CODE_GROUPS * (size_t)r.n_icl_frames);
        codes16 = malloc(sizeof(uint16_t) * QVC_CODE_GROUPS * (size_t)r.n_icl_frames);
        if (!codes || !codes16) {
            snprintf(err, sizeof err, "%s: out of memory", o->audio);
            goto fail;
        }
        if (qvc_speech_encoder_encode(se, pool, codes, icl_in, n_icl_in, e2, sizeof e2)) {
            audio_error(err, sizeof err, o->audio, e2);
            goto fail;
        }
        for (size_t i = 0; i < (size_t)QVC_CODE_GROUPS * r.n_icl_frames; i++) codes16[i] = (uint16_t)codes[i];
    }
    double t5 = now_s();
    r.t_codes_s = t5 - t4;

    if (!(v = qvf_voice_new())) {
        snprintf(err, sizeof err, "%s: out of memory", o->out);
        goto fail;
    }
    model_id(&v->source, &mc, fp);
    int qrc = qvf_voice_set_xvector(v, xvec, (uint32_t)dim);
    if (!qrc && want_icl) qrc = qvf_voice_set_icl(v, r.transcript, codes16, (uint32_t)r.n_icl_frames);
    if (!qrc) qrc = set_meta(v, o, &r);
    if (qrc) {
        snprintf(err, sizeof err, "%s: %s (META values must be UTF-8, at most 64 KiB)", o->out,
                 qvf_strerror(qrc));
        goto fail;
    }
    if (set_bridge(v, base_m, pool, o->no_wovr)) {
        snprintf(err, sizeof err, "%s: out of memory for TPAD/WOVR", o->out);
        goto fail;
    }
    if (o->plot) {
        if (write_plot(o, &r, err, sizeof err)) goto fail;
        plot_written = 1;
    }
    if (o->target_cv) {
        uint8_t cfp[32];
        if (qve_fingerprint_model(o->target_cv, QVE_FINGERPRINT_TABLE, cfp, err, sizeof err)) goto fail;
        model_id(&v->target, &cvc, cfp);
        if (write_with_wdelta(v, o->out, base_st, cv_st, &r.n_tensors, err, sizeof err)) goto fail;
    } else if (qvf_write_file(v, o->out, QVF_FORMAT_VERSION, err, sizeof err)) {
        goto fail;
    }
    r.t_write_s = now_s() - t5;
    FILE *f = fopen(o->out, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        r.file_bytes = ftell(f);
        fclose(f);
    }
    if (r.file_bytes > 0 && r.file_bytes <= (256ll << 20)) list_sections(&r, o->out);
    print_summary(o, &r, v, dim);
    rc = 0;
    goto done;
fail:
    if (plot_written) unlink(o->plot); /* no partial output: the voice file was not written */
    print_failure(o, &r, err);
done:
    qvc_audio_free(&r.audio);
    qvc_hygiene_report_free(&r.hyg);
    free(r.transcript);
    free(xvec);
    free(codes);
    free(codes16);
    qvf_voice_free(v);
    qvc_mel_free(mel);
    qvc_ecapa_free(ecapa);
    qvc_speech_encoder_free(se);
    qv_model_free(base_m);
    qve_st_close(base_st);
    qve_st_close(cv_st);
    return rc;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !(d >= lo && d <= hi)) return -1;
    *out = d;
    return 0;
}

int main(int argc, char **argv) {
    options o = {.max_seconds = QVC_DEFAULT_MAX_SECONDS, .speaker_threshold = -9};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = ncpu > 0 ? (int)ncpu : 1;
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'},         {"output", required_argument, 0, 'o'},
        {"ref-text", required_argument, 0, 't'},      {"ref-text-file", required_argument, 0, 'T'},
        {"name", required_argument, 0, 'n'},          {"language", required_argument, 0, 'l'},
        {"xvector-only", no_argument, 0, 'x'},        {"target-cv", required_argument, 0, 'c'},
        {"max-seconds", required_argument, 0, 's'},   {"json", no_argument, 0, 'j'},
        {"threads", required_argument, 0, 'p'},       {"compare", no_argument, 0, 'C'},
        {"no-hygiene", no_argument, 0, 'H'},
        {"allow-xvector-fallback", no_argument, 0, 'F'},
        {"speaker-threshold", required_argument, 0, 'S'},
        {"consent", required_argument, 0, 'A'},       {"plot", required_argument, 0, 'P'},
        {"no-wovr", no_argument, 0, 'W'},
        {"help", no_argument, 0, 'h'},                {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "m:o:t:T:n:l:xc:s:jp:CHFS:A:P:WhV", longs, NULL)) != -1) {
        switch (ch) {
        case 'm': o.model_dir = optarg; break;
        case 'o': o.out = optarg; break;
        case 't': o.ref_text = optarg; break;
        case 'T': o.ref_text_file = optarg; break;
        case 'n': o.name = optarg; break;
        case 'l': o.language = optarg; break;
        case 'x': o.xvector_only = 1; break;
        case 'c': o.target_cv = optarg; break;
        case 's':
            if (parse_double(optarg, QVC_MIN_SECONDS, 3600, &o.max_seconds))
                return usage_error("--max-seconds: expected a number of seconds in [3, 3600]");
            break;
        case 'j': o.json = 1; break;
        case 'p': {
            double n;
            if (parse_double(optarg, 1, 256, &n) || n != (int)n) return usage_error("--threads: expected 1..256");
            o.threads = (int)n;
            break;
        }
        case 'C': o.compare = 1; break;
        case 'H': o.no_hygiene = 1; break;
        case 'F': o.allow_fallback = 1; break;
        case 'S':
            if (parse_double(optarg, -1, 1, &o.speaker_threshold))
                return usage_error("--speaker-threshold: expected a cosine in [-1, 1]");
            break;
        case 'A': o.consent = optarg; break;
        case 'P': o.plot = optarg; break;
        case 'W': o.no_wovr = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("clone (qvoice) %s\n", qv_version()); return 0;
        default: return usage_error("unknown option");
        }
    }
    if (o.compare && argc - optind != 2) return usage_error("--compare needs exactly two files");
    if (!o.compare) {
        if (argc - optind != 1) return usage_error("expected exactly one reference audio file");
        o.audio = argv[optind];
        if (!o.model_dir) return usage_error("-m BASE_MODEL_DIR is required");
        if (!o.out) return usage_error("-o VOICE.qvoice is required");
        if (o.ref_text && o.ref_text_file)
            return usage_error("--ref-text and --ref-text-file exclude each other");
        if (o.ref_text && !*o.ref_text) return usage_error("--ref-text: empty transcript");
        if (o.consent && !*o.consent) return usage_error("--consent: empty statement");
        if (o.no_hygiene && (o.allow_fallback || o.speaker_threshold > -2))
            return usage_error("--allow-xvector-fallback and --speaker-threshold need hygiene (no --no-hygiene)");
    }
    /* the pool shares the work; each piece runs a single-threaded sgemm */
    qvk_blas_set_threads(1);
    qvk_pool *pool = o.threads > 1 ? qvk_pool_create(o.threads) : NULL;
    int rc = o.compare ? run_compare(&o, pool, argv[optind], argv[optind + 1]) : run_clone(&o, pool);
    qvk_pool_free(pool);
    return rc;
}
