/* config.c — config.json, generation_config.json and speech_tokenizer/config.json via cJSON.
 * Strict by design: every key the engine needs must be present with the right JSON type, and the
 * first problem is reported as "FILE: missing key a.b.c" or "FILE: key a.b.c: ...". The only
 * defaults are the ones the official code applies (ECAPA fields absent from a Base config, and the
 * Python wrapper's generation fallbacks).
 */
#include "checkpoint/config.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/fileio.h"

#define CONFIG_MAX_BYTES ((size_t)16 << 20) /* real configs are < 10 kB */
#define DIM_MAX (1 << 24)                    /* sanity bound on any size-like field */

/* ==== reading context ======================================================================== */

typedef struct {
    char file[4096];
    char *err;
    size_t err_size;
    int bad; /* first error wins; later getters are no-ops */
} rd;

static void rd_fail(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rd_fail(rd *r, const char *fmt, ...) {
    if (r->bad) return;
    r->bad = 1;
    if (!r->err || !r->err_size) return;
    int n = snprintf(r->err, r->err_size, "%s: ", r->file);
    if (n < 0 || (size_t)n >= r->err_size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->err_size - (size_t)n, fmt, ap);
    va_end(ap);
}

static const char *json_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsObject(v)) return "object";
    return "invalid";
}

/* Parses n bytes of r->file's JSON text: the root object, or NULL with an error. */
static cJSON *parse_json(rd *r, const char *buf, size_t n) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, n, &end, 0);
    if (!root) {
        /* Report a line number: the useful coordinate for a hand-edited config. */
        int line = 1;
        for (const char *p = buf; end && p < end && p < buf + n; p++) line += *p == '\n';
        rd_fail(r, "not valid JSON (error near line %d)", line);
    } else if (!cJSON_IsObject(root)) {
        rd_fail(r, "top level is not a JSON object (found %s)", json_type(root));
        cJSON_Delete(root);
        root = NULL;
    }
    return root;
}

/* Reads dir/name (bounded) and parses it. NULL with an error (or, if optional and the file is
 * absent, NULL without one: check r->bad). */
static cJSON *load_json(rd *r, const char *dir, const char *name, int optional) {
    snprintf(r->file, sizeof r->file, "%s/%s", dir, name);
    size_t n;
    char msg[4400];
    char *buf = qvu_read_file(r->file, CONFIG_MAX_BYTES, &n, msg, sizeof msg);
    if (!buf) {
        if (!(optional && errno == ENOENT) && !r->bad) {
            r->bad = 1;
            if (r->err && r->err_size) snprintf(r->err, r->err_size, "%s", msg);
        }
        return NULL;
    }
    cJSON *root = parse_json(r, buf, n);
    free(buf);
    return root;
}

/* ==== typed getters ========================================================================== */

/* Returns the member or NULL (with "missing key" unless optional). */
static const cJSON *member(rd *r, const cJSON *obj, const char *path, const char *key,
                           int optional) {
    if (r->bad || !obj) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v && !optional) rd_fail(r, "missing key %s%s%s", path, *path ? "." : "", key);
    return v;
}

static void wrong_type(rd *r, const char *path, const char *key, const char *want,
                       const cJSON *v) {
    rd_fail(r, "key %s%s%s: wrong type (expected %s, found %s)", path, *path ? "." : "", key,
            want, json_type(v));
}

static int as_int(rd *r, const cJSON *v, const char *path, const char *key, int lo, int hi,
                  int *out) {
    if (!cJSON_IsNumber(v)) {
        wrong_type(r, path, key, "integer", v);
        return -1;
    }
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi)) { /* before any cast: out-of-range double → int is undefined */
        rd_fail(r, "key %s%s%s: out of range (expected %d..%d, found %g)", path,
                *path ? "." : "", key, lo, hi, d);
        return -1;
    }
    if (d != (double)(int)d) {
        rd_fail(r, "key %s%s%s: wrong type (expected integer, found %g)", path, *path ? "." : "",
                key, d);
        return -1;
    }
    *out = (int)d;
    return 0;
}

static void get_int(rd *r, const cJSON *obj, const char *path, const char *key, int lo, int hi,
                    int *out) {
    const cJSON *v = member(r, obj, path, key, 0);
    if (v) as_int(r, v, path, key, lo, hi, out);
}

/* Size-like field: 1..DIM_MAX. */
static void get_dim(rd *r, const cJSON *obj, const char *path, const char *key, int *out) {
    get_int(r, obj, path, key, 1, DIM_MAX, out);
}

/* Token id: 0..INT_MAX. */
static void get_id(rd *r, const cJSON *obj, const char *path, const char *key, int *out) {
    get_int(r, obj, path, key, 0, INT_MAX, out);
}

static void get_float(rd *r, const cJSON *obj, const char *path, const char *key, float *out) {
    const cJSON *v = member(r, obj, path, key, 0);
    if (!v) return;
    if (!cJSON_IsNumber(v)) wrong_type(r, path, key, "number", v);
    else *out = (float)v->valuedouble;
}

static void get_str(rd *r, const cJSON *obj, const char *path, const char *key, char *out,
                    size_t n) {
    const cJSON *v = member(r, obj, path, key, 0);
    if (!v) return;
    if (!cJSON_IsString(v)) wrong_type(r, path, key, "string", v);
    else if (strlen(v->valuestring) >= n)
        rd_fail(r, "key %s%s%s: string too long (expected < %zu bytes)", path, *path ? "." : "",
                key, n);
    else memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
}

static const cJSON *get_obj(rd *r, const cJSON *obj, const char *path, const char *key,
                            int optional) {
    const cJSON *v = member(r, obj, path, key, optional);
    if (v && !cJSON_IsObject(v)) {
        wrong_type(r, path, key, "object", v);
        return NULL;
    }
    return v;
}

/* Fixed-length integer array; optional == 1 keeps *out when the key is absent. */
static void get_int_array(rd *r, const cJSON *obj, const char *path, const char *key, int n,
                          int *out, int optional) {
    const cJSON *v = member(r, obj, path, key, optional);
    if (!v) return;
    if (!cJSON_IsArray(v)) {
        wrong_type(r, path, key, "array", v);
        return;
    }
    if (cJSON_GetArraySize(v) != n) {
        rd_fail(r, "key %s%s%s: wrong length (expected %d, found %d)", path, *path ? "." : "", key,
                n, cJSON_GetArraySize(v));
        return;
    }
    for (int i = 0; i < n; i++) as_int(r, cJSON_GetArrayItem(v, i), path, key, 1, DIM_MAX, &out[i]);
}

/* Boolean; generation configs written by hand sometimes use 0/1, accepted too. */
static void opt_bool(rd *r, const cJSON *obj, const char *key, int *out) {
    const cJSON *v = member(r, obj, "", key, 1);
    if (!v) return;
    if (cJSON_IsBool(v)) *out = cJSON_IsTrue(v);
    else if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1))
        *out = v->valuedouble != 0;
    else wrong_type(r, "", key, "boolean", v);
}

static void opt_int(rd *r, const cJSON *obj, const char *key, int lo, int hi, int *out) {
    const cJSON *v = member(r, obj, "", key, 1);
    if (v) as_int(r, v, "", key, lo, hi, out);
}

static void opt_float(rd *r, const cJSON *obj, const char *key, float *out) {
    const cJSON *v = member(r, obj, "", key, 1);
    if (!v) return;
    if (!cJSON_IsNumber(v)) wrong_type(r, "", key, "number", v);
    else *out = (float)v->valuedouble;
}

/* ==== config.json ============================================================================ */

static void get_stack(rd *r, const cJSON *o, const char *path, qvm_stack_config *s) {
    get_dim(r, o, path, "hidden_size", &s->hidden_size);
    get_int(r, o, path, "num_hidden_layers", 1, QVM_MAX_LAYERS, &s->num_hidden_layers);
    /* intermediate_size: one width for every layer, or (MLP neuron pruning, docs/compression.md)
     * a list of num_hidden_layers widths; intermediate_size is then their maximum */
    const cJSON *is = member(r, o, path, "intermediate_size", 0);
    if (is && cJSON_IsArray(is) && !r->bad) {
        get_int_array(r, o, path, "intermediate_size", s->num_hidden_layers,
                      s->layer_intermediate_size, 0);
        for (int l = 0; l < s->num_hidden_layers && !r->bad; l++)
            if (s->layer_intermediate_size[l] > s->intermediate_size)
                s->intermediate_size = s->layer_intermediate_size[l];
    } else if (is) {
        get_dim(r, o, path, "intermediate_size", &s->intermediate_size);
    }
    get_dim(r, o, path, "num_attention_heads", &s->num_attention_heads);
    get_dim(r, o, path, "num_key_value_heads", &s->num_key_value_heads);
    get_dim(r, o, path, "head_dim", &s->head_dim);
    get_dim(r, o, path, "vocab_size", &s->vocab_size);
    get_dim(r, o, path, "num_code_groups", &s->num_code_groups);
    get_float(r, o, path, "rms_norm_eps", &s->rms_norm_eps);
    get_float(r, o, path, "rope_theta", &s->rope_theta);
    get_dim(r, o, path, "max_position_embeddings", &s->max_position_embeddings);
    if (!r->bad && s->num_attention_heads % s->num_key_value_heads != 0)
        rd_fail(r, "key %s.num_key_value_heads: must divide num_attention_heads (found %d and %d)",
                path, s->num_key_value_heads, s->num_attention_heads);
    if (!r->bad && s->head_dim % 2) /* split-half RoPE (§3.2) */
        rd_fail(r, "key %s.head_dim: must be even (found %d)", path, s->head_dim);
    if (!r->bad && !(s->rms_norm_eps > 0 && s->rope_theta > 0))
        rd_fail(r, "key %s: rms_norm_eps and rope_theta must be positive (found %g, %g)", path,
                (double)s->rms_norm_eps, (double)s->rope_theta);
}

/* Name → id map into a fixed table (names lower-cased for case-insensitive lookup). */
static int get_name_map(rd *r, const cJSON *map, const char *path, int max, qvm_named_id *out) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (r->bad) return n;
        if (n == max) {
            rd_fail(r, "key %s: too many entries (expected <= %d, found %d)", path, max,
                    cJSON_GetArraySize(map));
            return n;
        }
        if (strlen(e->string) >= QVM_NAME_MAX || !*e->string) {
            rd_fail(r, "key %s: bad name \"%.32s\" (expected 1..%d bytes)", path, e->string,
                    QVM_NAME_MAX - 1);
            return n;
        }
        if (as_int(r, e, path, e->string, 0, INT_MAX, &out[n].id) != 0) return n;
        snprintf(out[n].name, QVM_NAME_MAX, "%s", e->string);
        n++;
    }
    return n;
}

static void get_speakers(rd *r, const cJSON *tc, qvm_model_config *c, int required) {
    const cJSON *spk = get_obj(r, tc, "talker_config", "spk_id", !required);
    const cJSON *dia = get_obj(r, tc, "talker_config", "spk_is_dialect", 1);
    if (!spk || r->bad) return;
    qvm_named_id ids[QVM_MAX_SPEAKERS];
    int n = get_name_map(r, spk, "talker_config.spk_id", QVM_MAX_SPEAKERS, ids);
    for (int i = 0; i < n && !r->bad; i++) {
        qvm_speaker *s = &c->spk_id[i];
        memcpy(s->name, ids[i].name, QVM_NAME_MAX);
        s->id = ids[i].id;
        s->dialect[0] = 0;
        const cJSON *d = dia ? cJSON_GetObjectItemCaseSensitive(dia, s->name) : NULL;
        if (!d || cJSON_IsFalse(d)) continue;
        if (!cJSON_IsString(d) || strlen(d->valuestring) >= QVM_NAME_MAX) {
            rd_fail(r, "key talker_config.spk_is_dialect.%s: wrong type (expected false or a "
                       "dialect name, found %s)",
                    s->name, json_type(d));
            return;
        }
        snprintf(s->dialect, QVM_NAME_MAX, "%s", d->valuestring);
        if (qvm_language_id(c, s->dialect) < 0)
            rd_fail(r, "key talker_config.spk_is_dialect.%s: dialect %s not in codec_language_id",
                    s->name, s->dialect);
    }
    c->n_speakers = n;
}

static void get_speaker_encoder(rd *r, const cJSON *root, qvm_model_config *c) {
    /* ECAPA defaults of the official config class (§5.2); a shipped Base config may set only
     * enc_dim and sample_rate. */
    static const int ch[5] = {512, 512, 512, 512, 1536}, ks[5] = {5, 3, 3, 3, 1},
                     dil[5] = {1, 2, 3, 4, 1};
    memcpy(c->enc_channels, ch, sizeof ch);
    memcpy(c->enc_kernel_sizes, ks, sizeof ks);
    memcpy(c->enc_dilations, dil, sizeof dil);
    c->mel_dim = 128;
    c->sample_rate = 24000;
    c->enc_attention_channels = 128;
    c->enc_res2net_scale = 8;
    c->enc_se_channels = 128;
    const char *p = "speaker_encoder_config";
    const cJSON *o = get_obj(r, root, "", p, 0);
    if (!o) return;
    get_dim(r, o, p, "enc_dim", &c->enc_dim);
    if (cJSON_HasObjectItem(o, "mel_dim")) get_dim(r, o, p, "mel_dim", &c->mel_dim);
    if (cJSON_HasObjectItem(o, "sample_rate")) get_dim(r, o, p, "sample_rate", &c->sample_rate);
    get_int_array(r, o, p, "enc_channels", 5, c->enc_channels, 1);
    get_int_array(r, o, p, "enc_kernel_sizes", 5, c->enc_kernel_sizes, 1);
    get_int_array(r, o, p, "enc_dilations", 5, c->enc_dilations, 1);
    if (cJSON_HasObjectItem(o, "enc_attention_channels"))
        get_dim(r, o, p, "enc_attention_channels", &c->enc_attention_channels);
    if (cJSON_HasObjectItem(o, "enc_res2net_scale"))
        get_dim(r, o, p, "enc_res2net_scale", &c->enc_res2net_scale);
    if (cJSON_HasObjectItem(o, "enc_se_channels"))
        get_dim(r, o, p, "enc_se_channels", &c->enc_se_channels);
    if (!r->bad && c->enc_channels[1] % c->enc_res2net_scale != 0)
        rd_fail(r, "key %s.enc_res2net_scale: must divide enc_channels[1] (found %d and %d)", p,
                c->enc_res2net_scale, c->enc_channels[1]);
    if (!r->bad && c->enc_dim != c->talker.hidden_size)
        rd_fail(r, "key %s.enc_dim: must equal talker_config.hidden_size (expected %d, found %d)",
                p, c->talker.hidden_size, c->enc_dim);
}

/* config.json's root (consumed) into c. */
/* MLX's affine quantization (docs/compression.md): only group 64, 4 bits. */
static void get_quantization(rd *r, const cJSON *root, qvm_model_config *c) {
    const cJSON *qz = get_obj(r, root, "", "quantization", 1);
    if (qz) {
        get_dim(r, qz, "quantization", "group_size", &c->quant_group_size);
        get_dim(r, qz, "quantization", "bits", &c->quant_bits);
        if (!r->bad && (c->quant_group_size != 64 || c->quant_bits != 4))
            rd_fail(r, "key quantization: unsupported (expected group_size 64, bits 4, found %d, "
                        "%d)",
                    c->quant_group_size, c->quant_bits);
    }
}

/* talker_config: its stack, the text sizes, the codec's special ids and languages; returns it. */
static const cJSON *get_talker(rd *r, const cJSON *root, qvm_model_config *c) {
    const char *tp = "talker_config";
    const cJSON *tc = get_obj(r, root, "", tp, 0);
    get_stack(r, tc, tp, &c->talker);
    get_dim(r, tc, tp, "text_hidden_size", &c->text_hidden_size);
    get_dim(r, tc, tp, "text_vocab_size", &c->text_vocab_size);
    int vmax = c->talker.vocab_size - 1;
    get_int(r, tc, tp, "codec_pad_id", 0, vmax, &c->codec_pad_id);
    get_int(r, tc, tp, "codec_bos_id", 0, vmax, &c->codec_bos_id);
    get_int(r, tc, tp, "codec_eos_token_id", 0, vmax, &c->codec_eos_token_id);
    get_int(r, tc, tp, "codec_think_id", 0, vmax, &c->codec_think_id);
    get_int(r, tc, tp, "codec_nothink_id", 0, vmax, &c->codec_nothink_id);
    get_int(r, tc, tp, "codec_think_bos_id", 0, vmax, &c->codec_think_bos_id);
    get_int(r, tc, tp, "codec_think_eos_id", 0, vmax, &c->codec_think_eos_id);
    const cJSON *langs = get_obj(r, tc, tp, "codec_language_id", 0);
    if (langs && !r->bad)
        c->n_languages = get_name_map(r, langs, "talker_config.codec_language_id",
                                      QVM_MAX_LANGS, c->codec_language_id);
    for (int i = 0; i < c->n_languages && !r->bad; i++)
        if (c->codec_language_id[i].id > vmax)
            rd_fail(r, "key talker_config.codec_language_id.%s: out of range (expected 0..%d, "
                        "found %d)",
                    c->codec_language_id[i].name, vmax, c->codec_language_id[i].id);
    return tc;
}

/* The variant from tts_model_type and the presets, the speakers, the Base's speaker encoder. */
static void get_variant(rd *r, const cJSON *root, const cJSON *tc, qvm_model_config *c) {
    const int vmax = c->talker.vocab_size - 1;
    if (!r->bad) {
        c->variant = qvf_variant_from_name(c->tts_model_type);
        if (c->variant == QVF_VARIANT_UNKNOWN)
            rd_fail(r, "key tts_model_type: unknown model type (expected %s, %s or %s, found %s)",
                    qvf_variant_name(QVF_VARIANT_BASE), qvf_variant_name(QVF_VARIANT_CUSTOM_VOICE),
                    qvf_variant_name(QVF_VARIANT_VOICE_DESIGN), c->tts_model_type);
    }
    get_speakers(r, tc, c, c->variant == QVF_VARIANT_CUSTOM_VOICE);
    for (int i = 0; i < c->n_speakers && !r->bad; i++)
        if (c->spk_id[i].id > vmax)
            rd_fail(r, "key talker_config.spk_id.%s: out of range (expected 0..%d, found %d)",
                    c->spk_id[i].name, vmax, c->spk_id[i].id);
    /* A CustomVoice-typed config without presets is a VoiceDesign model (the C port's rule). */
    if (!r->bad && c->variant == QVF_VARIANT_CUSTOM_VOICE && c->n_speakers == 0)
        c->variant = QVF_VARIANT_VOICE_DESIGN;
    if (!r->bad && c->variant == QVF_VARIANT_BASE) {
        c->has_speaker_encoder = 1;
        get_speaker_encoder(r, root, c);
    }
}

/* Sizes are named only when the dimensions are the published ones; anything else (e.g. the tiny
 * synthetic test models) is OTHER whatever its tts_model_size string says. */
static enum qvm_size size_from_dims(const qvm_model_config *c) {
    const qvm_stack_config *t = &c->talker, *q = &c->code_predictor;
    int std_cp = q->hidden_size == 1024 && q->num_hidden_layers == 5 &&
                 t->num_hidden_layers == 28 && c->text_vocab_size == 151936 &&
                 c->text_hidden_size == 2048;
    if (std_cp && strcmp(c->tts_model_size, "0b6") == 0 && t->hidden_size == 1024 &&
        t->intermediate_size == 3072)
        return QVM_SIZE_0B6;
    if (std_cp && strcmp(c->tts_model_size, "1b7") == 0 && t->hidden_size == 2048 &&
             t->intermediate_size == 6144)
        return QVM_SIZE_1B7;
    return QVM_SIZE_OTHER;
}

static int model_config_from(qvm_model_config *c, rd *rp, cJSON *root) {
    rd r = *rp;
    if (cJSON_HasObjectItem(root, "tts_model_size"))
        get_str(&r, root, "", "tts_model_size", c->tts_model_size, sizeof c->tts_model_size);
    get_str(&r, root, "", "tts_model_type", c->tts_model_type, sizeof c->tts_model_type);
    get_id(&r, root, "", "im_start_token_id", &c->im_start_token_id);
    get_id(&r, root, "", "im_end_token_id", &c->im_end_token_id);
    get_id(&r, root, "", "assistant_token_id", &c->assistant_token_id);
    get_id(&r, root, "", "tts_pad_token_id", &c->tts_pad_token_id);
    get_id(&r, root, "", "tts_bos_token_id", &c->tts_bos_token_id);
    get_id(&r, root, "", "tts_eos_token_id", &c->tts_eos_token_id);

    get_quantization(&r, root, c);
    const cJSON *tc = get_talker(&r, root, c);
    const char *cp = "talker_config.code_predictor_config";
    const cJSON *cpc = get_obj(&r, tc, "talker_config", "code_predictor_config", 0);
    get_stack(&r, cpc, cp, &c->code_predictor);
    get_variant(&r, root, tc, c);
    if (!r.bad && c->talker.num_code_groups != c->code_predictor.num_code_groups)
        rd_fail(&r, "key %s.num_code_groups: must equal talker_config.num_code_groups (expected "
                    "%d, found %d)",
                cp, c->talker.num_code_groups, c->code_predictor.num_code_groups);
    c->size = size_from_dims(c);
    cJSON_Delete(root);
    return r.bad ? -1 : 0;
}

int qvm_model_config_load(qvm_model_config *c, const char *dir, char *err, size_t err_size) {
    rd r = {.err = err, .err_size = err_size};
    memset(c, 0, sizeof *c);
    cJSON *root = load_json(&r, dir, "config.json", 0);
    return root ? model_config_from(c, &r, root) : -1;
}

int qvm_model_config_parse(qvm_model_config *c, const char *dir, const char *json, size_t n,
                           char *err, size_t err_size) {
    rd r = {.err = err, .err_size = err_size};
    memset(c, 0, sizeof *c);
    snprintf(r.file, sizeof r.file, "%s/config.json", dir);
    cJSON *root = parse_json(&r, json, n);
    return root ? model_config_from(c, &r, root) : -1;
}

/* ==== generation_config.json ================================================================= */

qvm_generation_config qvm_generation_defaults(void) {
    return (qvm_generation_config){.do_sample = 1,
                                   .top_k = 50,
                                   .top_p = 1.0f,
                                   .temperature = 0.9f,
                                   .repetition_penalty = 1.05f,
                                   .subtalker_dosample = 1,
                                   .subtalker_top_k = 50,
                                   .subtalker_top_p = 1.0f,
                                   .subtalker_temperature = 0.9f,
                                   .max_new_tokens = 2048};
}

int qvm_generation_config_load(qvm_generation_config *g, const char *dir, char *err,
                               size_t err_size) {
    *g = qvm_generation_defaults();
    rd r = {.err = err, .err_size = err_size};
    cJSON *root = load_json(&r, dir, "generation_config.json", 1);
    if (!root) return r.bad ? -1 : 0;
    opt_bool(&r, root, "do_sample", &g->do_sample);
    opt_int(&r, root, "top_k", 0, INT_MAX, &g->top_k);
    opt_float(&r, root, "top_p", &g->top_p);
    opt_float(&r, root, "temperature", &g->temperature);
    opt_float(&r, root, "repetition_penalty", &g->repetition_penalty);
    opt_bool(&r, root, "subtalker_dosample", &g->subtalker_dosample);
    opt_int(&r, root, "subtalker_top_k", 0, INT_MAX, &g->subtalker_top_k);
    opt_float(&r, root, "subtalker_top_p", &g->subtalker_top_p);
    opt_float(&r, root, "subtalker_temperature", &g->subtalker_temperature);
    opt_int(&r, root, "max_new_tokens", 1, INT_MAX, &g->max_new_tokens);
    if (!r.bad && !(g->top_p > 0 && g->top_p <= 1 && g->subtalker_top_p > 0 &&
                    g->subtalker_top_p <= 1))
        rd_fail(&r, "key top_p: out of range (expected 0 < top_p <= 1, found %g / %g)",
                (double)g->top_p, (double)g->subtalker_top_p);
    if (!r.bad && !(g->temperature >= 0 && g->subtalker_temperature >= 0 &&
                    g->repetition_penalty > 0))
        rd_fail(&r, "key temperature: out of range (expected temperature >= 0 and "
                    "repetition_penalty > 0)");
    cJSON_Delete(root);
    return r.bad ? -1 : 0;
}

/* ==== speech_tokenizer/config.json =========================================================== */

int qvm_codec_config_load(qvm_codec_config *c, const char *dir, char *err, size_t err_size) {
    rd r = {.err = err, .err_size = err_size};
    memset(c, 0, sizeof *c);
    cJSON *root = load_json(&r, dir, "speech_tokenizer/config.json", 0);
    if (!root) return -1;
    get_dim(&r, root, "", "encoder_valid_num_quantizers", &c->encoder_valid_num_quantizers);
    get_dim(&r, root, "", "input_sample_rate", &c->input_sample_rate);
    get_dim(&r, root, "", "output_sample_rate", &c->output_sample_rate);
    get_dim(&r, root, "", "encode_downsample_rate", &c->encode_downsample_rate);
    get_dim(&r, root, "", "decode_upsample_rate", &c->decode_upsample_rate);

    const char *dp = "decoder_config";
    const cJSON *d = get_obj(&r, root, "", dp, 0);
    get_dim(&r, d, dp, "codebook_size", &c->decoder.codebook_size);
    get_dim(&r, d, dp, "codebook_dim", &c->decoder.codebook_dim);
    get_dim(&r, d, dp, "latent_dim", &c->decoder.latent_dim);
    get_dim(&r, d, dp, "decoder_dim", &c->decoder.decoder_dim);
    get_dim(&r, d, dp, "hidden_size", &c->decoder.hidden_size);
    get_dim(&r, d, dp, "intermediate_size", &c->decoder.intermediate_size);
    get_dim(&r, d, dp, "num_hidden_layers", &c->decoder.num_hidden_layers);
    get_dim(&r, d, dp, "num_attention_heads", &c->decoder.num_attention_heads);
    get_dim(&r, d, dp, "num_key_value_heads", &c->decoder.num_key_value_heads);
    get_dim(&r, d, dp, "head_dim", &c->decoder.head_dim);
    get_float(&r, d, dp, "rms_norm_eps", &c->decoder.rms_norm_eps);
    get_float(&r, d, dp, "rope_theta", &c->decoder.rope_theta);
    get_float(&r, d, dp, "layer_scale_initial_scale", &c->decoder.layer_scale_initial_scale);
    get_dim(&r, d, dp, "sliding_window", &c->decoder.sliding_window);
    get_dim(&r, d, dp, "num_quantizers", &c->decoder.num_quantizers);
    get_dim(&r, d, dp, "num_semantic_quantizers", &c->decoder.num_semantic_quantizers);
    get_int_array(&r, d, dp, "upsample_rates", 4, c->decoder.upsample_rates, 0);
    get_int_array(&r, d, dp, "upsampling_ratios", 2, c->decoder.upsampling_ratios, 0);
    if (!r.bad && c->decoder.codebook_dim % 2 != 0)
        rd_fail(&r, "key %s.codebook_dim: must be even (found %d)", dp, c->decoder.codebook_dim);

    const char *ep = "encoder_config";
    const cJSON *e = get_obj(&r, root, "", ep, 0);
    get_dim(&r, e, ep, "num_filters", &c->encoder.num_filters);
    get_dim(&r, e, ep, "kernel_size", &c->encoder.kernel_size);
    get_dim(&r, e, ep, "last_kernel_size", &c->encoder.last_kernel_size);
    get_dim(&r, e, ep, "residual_kernel_size", &c->encoder.residual_kernel_size);
    get_dim(&r, e, ep, "num_residual_layers", &c->encoder.num_residual_layers);
    get_dim(&r, e, ep, "dilation_growth_rate", &c->encoder.dilation_growth_rate);
    get_dim(&r, e, ep, "compress", &c->encoder.compress);
    get_int_array(&r, e, ep, "upsampling_ratios", 4, c->encoder.upsampling_ratios, 0);
    get_dim(&r, e, ep, "hidden_size", &c->encoder.hidden_size);
    get_dim(&r, e, ep, "num_hidden_layers", &c->encoder.num_hidden_layers);
    get_dim(&r, e, ep, "num_attention_heads", &c->encoder.num_attention_heads);
    get_dim(&r, e, ep, "num_key_value_heads", &c->encoder.num_key_value_heads);
    get_dim(&r, e, ep, "head_dim", &c->encoder.head_dim);
    get_dim(&r, e, ep, "intermediate_size", &c->encoder.intermediate_size);
    get_dim(&r, e, ep, "sliding_window", &c->encoder.sliding_window);
    get_dim(&r, e, ep, "num_quantizers", &c->encoder.num_quantizers);
    get_dim(&r, e, ep, "num_semantic_quantizers", &c->encoder.num_semantic_quantizers);
    get_dim(&r, e, ep, "codebook_size", &c->encoder.codebook_size);
    get_dim(&r, e, ep, "codebook_dim", &c->encoder.codebook_dim);
    get_float(&r, e, ep, "norm_eps", &c->encoder.norm_eps);
    get_float(&r, e, ep, "rope_theta", &c->encoder.rope_theta);
    get_float(&r, e, ep, "layer_scale_initial_scale", &c->encoder.layer_scale_initial_scale);
    if (!r.bad && c->encoder_valid_num_quantizers > c->encoder.num_quantizers)
        rd_fail(&r, "key encoder_valid_num_quantizers: exceeds encoder_config.num_quantizers "
                    "(expected <= %d, found %d)",
                c->encoder.num_quantizers, c->encoder_valid_num_quantizers);
    if (!r.bad && c->encoder_valid_num_quantizers > c->decoder.num_quantizers)
        rd_fail(&r, "key encoder_valid_num_quantizers: exceeds decoder_config.num_quantizers "
                    "(expected <= %d, found %d)",
                c->decoder.num_quantizers, c->encoder_valid_num_quantizers);
    cJSON_Delete(root);
    return r.bad ? -1 : 0;
}

/* ==== lookups ================================================================================ */

int qvm_language_id(const qvm_model_config *c, const char *name) {
    for (int i = 0; i < c->n_languages; i++)
        if (strcasecmp(c->codec_language_id[i].name, name) == 0) return c->codec_language_id[i].id;
    return -1;
}

const qvm_speaker *qvm_speaker_find(const qvm_model_config *c, const char *name) {
    for (int i = 0; i < c->n_speakers; i++)
        if (strcasecmp(c->spk_id[i].name, name) == 0) return &c->spk_id[i];
    return NULL;
}
