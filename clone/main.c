/* clone — make a .qvoice from a reference recording, or compare two voices' x-vectors.
 * CLI only: audio → x-vector (+ ICL codes) comes from the clone library, the file is written by
 * voicefmt (atomic: a failure never leaves a partial output). Human summary on stdout, warnings
 * on stderr, --json replaces the summary with one JSON object.
 */
#include <cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "clone.h"
#include "config.h"
#include "fingerprint.h"
#include "kernels.h"
#include "qvf.h"
#include "qvoice.h"
#include "safetensors.h"

#define MAX_TRANSCRIPT_BYTES (1u << 20)

typedef struct {
    const char *model_dir, *audio, *out, *ref_text, *ref_text_file, *name, *language;
    const char *target_cv;
    int xvector_only, json, threads, compare;
    double max_seconds;
} options;

#define MAX_SECTIONS 16
typedef struct { char tag[5]; int count; long long bytes; } section;

typedef struct {       /* what the run did, for the summary */
    qvc_audio audio;
    double t_load_s, t_audio_s, t_xvec_s, t_codes_s, t_write_s;
    int n_mel_frames, n_icl_frames;
    double xvec_norm;
    int language_id;
    char *transcript;
    int n_tensors;
    long long file_bytes;
    int n_sections;    /* 0 when the written file could not be listed */
    section sections[MAX_SECTIONS];
} report;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: clone -m BASE_MODEL_DIR REF_AUDIO -o VOICE.qvoice [options]\n"
            "       clone --compare A B [-m BASE_MODEL_DIR]\n"
            "\n"
            "Clones a voice from a reference recording (WAV, FLAC, OGG/Vorbis, Opus, MP3 if\n"
            "libsndfile supports it; any rate and channel count) with a Qwen3-TTS Base model:\n"
            "the ECAPA-TDNN x-vector always, the speech-tokenizer codes of the reference too when\n"
            "its transcript is given (in-context cloning).\n"
            "\n"
            "  -m, --model DIR          Base model directory (CustomVoice has no speaker encoder)\n"
            "  -o, --output FILE        voice file to write (atomically)\n"
            "  -t, --ref-text TEXT      transcript of the reference: adds ICL codes\n"
            "  -T, --ref-text-file F    same, read from a UTF-8 file\n"
            "  -n, --name NAME          voice name (default: the audio file's base name)\n"
            "  -l, --language LANG      language of the reference (e.g. English; default none)\n"
            "  -x, --xvector-only       store only the x-vector even with a transcript\n"
            "  -c, --target-cv DIR      add a WDELTA (Base − CustomVoice weights) for DIR\n"
            "  -s, --max-seconds S      use at most the first S seconds (default %.0f)\n"
            "  -j, --json               print one JSON object instead of the summary\n"
            "  -p, --threads N          threads (default: online CPUs)\n"
            "  -C, --compare A B        cosine similarity of two x-vectors (audio files need -m;\n"
            "                           .qvoice/.bin files are read as voices)\n"
            "  -h, --help, -V, --version\n"
            "\n"
            "Exit status: 0 ok, 1 failure (bad input, I/O), 2 usage error.\n"
            "Example: clone -m models/Qwen3-TTS-12Hz-0.6B-Base ref.wav -t \"Hello there.\" -o me.qvoice\n",
            QVC_DEFAULT_MAX_SECONDS);
}

static int usage_error(const char *msg) {
    fprintf(stderr, "clone: %s (see clone --help)\n", msg);
    return 2;
}

static char *read_text_file(const char *path, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(MAX_TRANSCRIPT_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_TRANSCRIPT_BYTES + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad || n > MAX_TRANSCRIPT_BYTES) {
        snprintf(err, err_size, "%s: %s", path, !buf ? "out of memory" : bad ? "read error" : "transcript over 1 MiB");
        free(buf);
        return NULL;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
    buf[n] = 0;
    return buf;
}

static int is_voice_file(const char *path) {
    size_t n = strlen(path);
    return (n > 7 && !strcmp(path + n - 7, ".qvoice")) || (n > 4 && !strcmp(path + n - 4, ".bin"));
}

static int file_sha256_hex(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    if (fseek(f, 0, SEEK_END)) {
        fclose(f);
        return -1;
    }
    long n = ftell(f);
    rewind(f);
    unsigned char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    int rc = -1;
    uint8_t d[32];
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n && qvf_sha256(buf, (size_t)n, d) == 0) {
        qve_sha256_hex(d, hex);
        rc = 0;
    }
    free(buf);
    fclose(f);
    return rc;
}

/* Audio → x-vector with a loaded speaker encoder. */
static int xvector_of_audio(const qvc_ecapa *e, qvk_pool *pool, qvc_audio *a, float *xvec,
                            int *n_frames, char *err, size_t err_size) {
    *n_frames = qvc_mel_n_frames(a->n_samples);
    qvc_mel *mel = qvc_mel_create();
    float *m = malloc((size_t)(*n_frames > 0 ? *n_frames : 1) * QVC_MEL_BINS * sizeof(float));
    int rc = -1;
    if (!mel || !m) snprintf(err, err_size, "out of memory");
    else if (qvc_mel_compute(mel, m, a->samples, a->n_samples)) snprintf(err, err_size, "audio too short");
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
    else if (xvector_of_audio(*e, pool, &a, *xvec, &nf, e2, sizeof e2)) snprintf(err, err_size, "%s: %s", path, e2);
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
        double cs = qvc_cosine(xa, xb, da);
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
    FILE *f = fopen(path, "rb");
    if (!f) return;
    unsigned char *buf = r->file_bytes > 0 ? malloc((size_t)r->file_bytes) : NULL;
    size_t n = buf ? fread(buf, 1, (size_t)r->file_bytes, f) : 0;
    fclose(f);
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

static void print_summary(const options *o, const report *r, const qvf_voice *v, int dim) {
    const qvc_audio *a = &r->audio;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "output", o->out);
        cJSON_AddStringToObject(j, "audio", o->audio);
        cJSON_AddStringToObject(j, "format", a->src_format);
        cJSON_AddNumberToObject(j, "source_sample_rate_hz", a->src_rate_hz);
        cJSON_AddNumberToObject(j, "source_channels", a->src_channels);
        cJSON_AddNumberToObject(j, "source_seconds", a->src_seconds);
        cJSON_AddNumberToObject(j, "seconds_used", a->used_seconds);
        cJSON_AddBoolToObject(j, "truncated", a->truncated);
        cJSON_AddBoolToObject(j, "resampled", a->resampled);
        cJSON_AddNumberToObject(j, "clipped_fraction", a->clipped_fraction);
        cJSON_AddNumberToObject(j, "rms_dbfs", a->rms_dbfs);
        cJSON_AddNumberToObject(j, "mel_frames", r->n_mel_frames);
        cJSON_AddNumberToObject(j, "xvector_dim", dim);
        cJSON_AddNumberToObject(j, "xvector_norm", r->xvec_norm);
        cJSON_AddNumberToObject(j, "icl_frames", r->n_icl_frames);
        if (r->transcript) cJSON_AddStringToObject(j, "transcript", r->transcript);
        cJSON *meta = cJSON_AddObjectToObject(j, "meta");
        for (int i = 0; i < v->n_meta; i++) cJSON_AddStringToObject(meta, v->meta[i].key, v->meta[i].value);
        cJSON *sec = cJSON_AddObjectToObject(j, "sections");
        for (int i = 0; i < r->n_sections; i++) {
            cJSON *so = cJSON_AddObjectToObject(sec, r->sections[i].tag);
            cJSON_AddNumberToObject(so, "count", r->sections[i].count);
            cJSON_AddNumberToObject(so, "payload_bytes", (double)r->sections[i].bytes);
        }
        if (r->n_tensors) cJSON_AddNumberToObject(j, "wdelta_tensors", r->n_tensors);
        cJSON_AddNumberToObject(j, "file_bytes", (double)r->file_bytes);
        cJSON *t = cJSON_AddObjectToObject(j, "timings_s");
        cJSON_AddNumberToObject(t, "load", r->t_load_s);
        cJSON_AddNumberToObject(t, "audio", r->t_audio_s);
        cJSON_AddNumberToObject(t, "mel_ecapa", r->t_xvec_s);
        cJSON_AddNumberToObject(t, "speech_encoder", r->t_codes_s);
        cJSON_AddNumberToObject(t, "write", r->t_write_s);
        char *s = cJSON_Print(j);
        if (s) puts(s);
        free(s);
        cJSON_Delete(j);
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
    printf("  x-vector   %d dims, norm %.3f (%d mel frames)\n", dim, r->xvec_norm, r->n_mel_frames);
    if (r->n_icl_frames)
        printf("  ICL        %d frames (12.5 Hz) + transcript (%zu bytes)\n", r->n_icl_frames,
               strlen(r->transcript));
    else
        printf("  ICL        none (x-vector only)\n");
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
    printf("  timings    load %.2f s, audio %.2f s, mel+ECAPA %.2f s, speech encoder %.2f s, write "
           "%.2f s\n",
           r->t_load_s, r->t_audio_s, r->t_xvec_s, r->t_codes_s, r->t_write_s);
}

static int set_meta(qvf_voice *v, const options *o, const report *r) {
    char buf[128];
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
    gmtime_r(&now, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    rc |= qvf_meta_set(v, "created_utc", buf);
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
    return rc;
}

static int run_clone(const options *o, qvk_pool *pool) {
    char err[1024];
    report r;
    memset(&r, 0, sizeof r);
    int rc = 1;
    qvc_ecapa *ecapa = NULL;
    qvc_speech_encoder *se = NULL;
    qve_st *base_st = NULL, *cv_st = NULL;
    qvf_voice *v = NULL;
    float *xvec = NULL;
    int32_t *codes = NULL;
    uint16_t *codes16 = NULL;
    qve_model_config mc, cvc;
    uint8_t fp[32];
    int want_icl = !o->xvector_only && (o->ref_text || o->ref_text_file);

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
    double t1 = now_s();
    r.t_load_s = t1 - t0;

    if (qvc_audio_load(&r.audio, o->audio, o->max_seconds, err, sizeof err)) goto fail;
    double t2 = now_s();
    r.t_audio_s = t2 - t1;
    if (r.audio.truncated)
        fprintf(stderr, "clone: %s: warning: %.2f s long, using the first %.2f s (--max-seconds)\n",
                o->audio, r.audio.src_seconds, r.audio.used_seconds);
    if (r.audio.short_warning)
        fprintf(stderr, "clone: %s: warning: only %.2f s of audio; 10-30 s gives a steadier voice\n",
                o->audio, r.audio.used_seconds);
    if (r.audio.clip_warning)
        fprintf(stderr, "clone: %s: warning: clipping (%.3f%% of samples at full scale)\n", o->audio,
                100.0 * r.audio.clipped_fraction);

    int dim = qvc_ecapa_dim(ecapa);
    xvec = malloc(sizeof(float) * (size_t)dim);
    char e2[512];
    if (!xvec) {
        snprintf(err, sizeof err, "%s: out of memory", o->audio);
        goto fail;
    }
    if (xvector_of_audio(ecapa, pool, &r.audio, xvec, &r.n_mel_frames, e2, sizeof e2)) {
        snprintf(err, sizeof err, "%s: %s", o->audio, e2);
        goto fail;
    }
    r.xvec_norm = qvc_l2norm(xvec, dim);
    double t3 = now_s();
    r.t_xvec_s = t3 - t2;
    if (want_icl) {
        r.n_icl_frames = qvc_speech_encoder_n_frames(r.audio.n_samples);
        codes = malloc(sizeof(int32_t) * QVC_CODE_GROUPS * (size_t)r.n_icl_frames);
        codes16 = malloc(sizeof(uint16_t) * QVC_CODE_GROUPS * (size_t)r.n_icl_frames);
        if (!codes || !codes16) {
            snprintf(err, sizeof err, "%s: out of memory", o->audio);
            goto fail;
        }
        if (qvc_speech_encoder_encode(se, pool, codes, r.audio.samples, r.audio.n_samples, e2,
                                      sizeof e2)) {
            snprintf(err, sizeof err, "%s: %s", o->audio, e2);
            goto fail;
        }
        for (size_t i = 0; i < (size_t)QVC_CODE_GROUPS * r.n_icl_frames; i++) codes16[i] = (uint16_t)codes[i];
    }
    double t4 = now_s();
    r.t_codes_s = t4 - t3;

    if (!(v = qvf_voice_new())) {
        snprintf(err, sizeof err, "%s: out of memory", o->out);
        goto fail;
    }
    model_id(&v->source, &mc, fp);
    int qrc = qvf_voice_set_xvector(v, xvec, (uint32_t)dim);
    if (!qrc && want_icl) qrc = qvf_voice_set_icl(v, r.transcript, codes16, (uint32_t)r.n_icl_frames);
    if (!qrc) qrc = set_meta(v, o, &r);
    if (qrc) {
        snprintf(err, sizeof err, "%s: %s", o->out, qvf_strerror(qrc));
        goto fail;
    }
    if (o->target_cv) {
        uint8_t cfp[32];
        if (qve_fingerprint_model(o->target_cv, QVE_FINGERPRINT_TABLE, cfp, err, sizeof err)) goto fail;
        model_id(&v->target, &cvc, cfp);
        if (write_with_wdelta(v, o->out, base_st, cv_st, &r.n_tensors, err, sizeof err)) goto fail;
    } else if (qvf_write_file(v, o->out, QVF_FORMAT_VERSION, err, sizeof err)) {
        goto fail;
    }
    r.t_write_s = now_s() - t4;
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
    fprintf(stderr, "clone: %s\n", err);
done:
    qvc_audio_free(&r.audio);
    free(r.transcript);
    free(xvec);
    free(codes);
    free(codes16);
    qvf_voice_free(v);
    qvc_ecapa_free(ecapa);
    qvc_speech_encoder_free(se);
    qve_st_close(base_st);
    qve_st_close(cv_st);
    return rc;
}

int main(int argc, char **argv) {
    options o = {.max_seconds = QVC_DEFAULT_MAX_SECONDS};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = ncpu > 0 ? (int)ncpu : 1;
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'},         {"output", required_argument, 0, 'o'},
        {"ref-text", required_argument, 0, 't'},      {"ref-text-file", required_argument, 0, 'T'},
        {"name", required_argument, 0, 'n'},          {"language", required_argument, 0, 'l'},
        {"xvector-only", no_argument, 0, 'x'},        {"target-cv", required_argument, 0, 'c'},
        {"max-seconds", required_argument, 0, 's'},   {"json", no_argument, 0, 'j'},
        {"threads", required_argument, 0, 'p'},       {"compare", no_argument, 0, 'C'},
        {"help", no_argument, 0, 'h'},                {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0}};
    int ch;
    char *end;
    while ((ch = getopt_long(argc, argv, "m:o:t:T:n:l:xc:s:jp:ChV", longs, NULL)) != -1) {
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
            errno = 0;
            o.max_seconds = strtod(optarg, &end);
            if (errno || *end || !(o.max_seconds >= QVC_MIN_SECONDS) || o.max_seconds > 3600)
                return usage_error("--max-seconds: expected a number of seconds in [3, 3600]");
            break;
        case 'j': o.json = 1; break;
        case 'p': {
            errno = 0;
            long n = strtol(optarg, &end, 10);
            if (errno || *end || n < 1 || n > 256) return usage_error("--threads: expected 1..256");
            o.threads = (int)n;
            break;
        }
        case 'C': o.compare = 1; break;
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
    }
    /* the pool shares the work; each piece runs a single-threaded sgemm */
    qvk_blas_set_threads(1);
    qvk_pool *pool = o.threads > 1 ? qvk_pool_create(o.threads) : NULL;
    int rc = o.compare ? run_compare(&o, pool, argv[optind], argv[optind + 1]) : run_clone(&o, pool);
    qvk_pool_free(pool);
    return rc;
}
