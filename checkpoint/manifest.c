/* manifest.c — expected-tensor tables from the configs (architecture doc §2.1, §2.2, §6.2) and the
 * load-time check against them. Every shape is computed from config fields with 64-bit arithmetic;
 * nothing is keyed on the model size, so tiny and full-size checkpoints share one path.
 */
#include "checkpoint/manifest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== tensor names ========================================================================== */

static const char *const k_names[QVM_T_N] = {
    [QVM_T_ECAPA_BLOCK0] = "speaker_encoder.blocks.0.conv",
    [QVM_T_ECAPA_TDNN1] = "speaker_encoder.blocks.%d.tdnn1.conv",
    [QVM_T_ECAPA_RES2NET] = "speaker_encoder.blocks.%d.res2net_block.blocks.%d.conv",
    [QVM_T_ECAPA_TDNN2] = "speaker_encoder.blocks.%d.tdnn2.conv",
    [QVM_T_ECAPA_SE1] = "speaker_encoder.blocks.%d.se_block.conv1",
    [QVM_T_ECAPA_SE2] = "speaker_encoder.blocks.%d.se_block.conv2",
    [QVM_T_ECAPA_MFA] = "speaker_encoder.mfa.conv",
    [QVM_T_ECAPA_ASP_TDNN] = "speaker_encoder.asp.tdnn.conv",
    [QVM_T_ECAPA_ASP_CONV] = "speaker_encoder.asp.conv",
    [QVM_T_ECAPA_FC] = "speaker_encoder.fc",
    [QVM_T_DEC_FIRST_SUM] = "decoder.quantizer.rvq_first.vq.layers.%d._codebook.embedding_sum",
    [QVM_T_DEC_FIRST_USAGE] = "decoder.quantizer.rvq_first.vq.layers.%d._codebook.cluster_usage",
    [QVM_T_DEC_REST_SUM] = "decoder.quantizer.rvq_rest.vq.layers.%d._codebook.embedding_sum",
    [QVM_T_DEC_REST_USAGE] = "decoder.quantizer.rvq_rest.vq.layers.%d._codebook.cluster_usage",
    [QVM_T_DEC_FIRST_IN] = "decoder.quantizer.rvq_first.input_proj.weight",
    [QVM_T_DEC_FIRST_OUT] = "decoder.quantizer.rvq_first.output_proj.weight",
    [QVM_T_DEC_REST_IN] = "decoder.quantizer.rvq_rest.input_proj.weight",
    [QVM_T_DEC_REST_OUT] = "decoder.quantizer.rvq_rest.output_proj.weight",
    [QVM_T_DEC_PRE_CONV_W] = "decoder.pre_conv.conv.weight",
    [QVM_T_DEC_PRE_CONV_B] = "decoder.pre_conv.conv.bias",
    [QVM_T_DEC_IN_PROJ_W] = "decoder.pre_transformer.input_proj.weight",
    [QVM_T_DEC_IN_PROJ_B] = "decoder.pre_transformer.input_proj.bias",
    [QVM_T_DEC_ATTN_NORM] = "decoder.pre_transformer.layers.%d.input_layernorm.weight",
    [QVM_T_DEC_Q] = "decoder.pre_transformer.layers.%d.self_attn.q_proj.weight",
    [QVM_T_DEC_K] = "decoder.pre_transformer.layers.%d.self_attn.k_proj.weight",
    [QVM_T_DEC_V] = "decoder.pre_transformer.layers.%d.self_attn.v_proj.weight",
    [QVM_T_DEC_O] = "decoder.pre_transformer.layers.%d.self_attn.o_proj.weight",
    [QVM_T_DEC_ATTN_SCALE] = "decoder.pre_transformer.layers.%d.self_attn_layer_scale.scale",
    [QVM_T_DEC_MLP_NORM] = "decoder.pre_transformer.layers.%d.post_attention_layernorm.weight",
    [QVM_T_DEC_GATE] = "decoder.pre_transformer.layers.%d.mlp.gate_proj.weight",
    [QVM_T_DEC_UP] = "decoder.pre_transformer.layers.%d.mlp.up_proj.weight",
    [QVM_T_DEC_DOWN] = "decoder.pre_transformer.layers.%d.mlp.down_proj.weight",
    [QVM_T_DEC_MLP_SCALE] = "decoder.pre_transformer.layers.%d.mlp_layer_scale.scale",
    [QVM_T_DEC_NORM] = "decoder.pre_transformer.norm.weight",
    [QVM_T_DEC_OUT_PROJ_W] = "decoder.pre_transformer.output_proj.weight",
    [QVM_T_DEC_OUT_PROJ_B] = "decoder.pre_transformer.output_proj.bias",
    [QVM_T_DEC_UP_CONV_W] = "decoder.upsample.%d.0.conv.weight",
    [QVM_T_DEC_UP_CONV_B] = "decoder.upsample.%d.0.conv.bias",
    [QVM_T_DEC_UP_DW_W] = "decoder.upsample.%d.1.dwconv.conv.weight",
    [QVM_T_DEC_UP_DW_B] = "decoder.upsample.%d.1.dwconv.conv.bias",
    [QVM_T_DEC_UP_NORM_W] = "decoder.upsample.%d.1.norm.weight",
    [QVM_T_DEC_UP_NORM_B] = "decoder.upsample.%d.1.norm.bias",
    [QVM_T_DEC_UP_PW1_W] = "decoder.upsample.%d.1.pwconv1.weight",
    [QVM_T_DEC_UP_PW1_B] = "decoder.upsample.%d.1.pwconv1.bias",
    [QVM_T_DEC_UP_PW2_W] = "decoder.upsample.%d.1.pwconv2.weight",
    [QVM_T_DEC_UP_PW2_B] = "decoder.upsample.%d.1.pwconv2.bias",
    [QVM_T_DEC_UP_GAMMA] = "decoder.upsample.%d.1.gamma",
    [QVM_T_DEC_CONV0_W] = "decoder.decoder.0.conv.weight",
    [QVM_T_DEC_CONV0_B] = "decoder.decoder.0.conv.bias",
    [QVM_T_DEC_BLK_ALPHA] = "decoder.decoder.%d.block.0.alpha",
    [QVM_T_DEC_BLK_BETA] = "decoder.decoder.%d.block.0.beta",
    [QVM_T_DEC_BLK_UP_W] = "decoder.decoder.%d.block.1.conv.weight",
    [QVM_T_DEC_BLK_UP_B] = "decoder.decoder.%d.block.1.conv.bias",
    [QVM_T_DEC_RES_ALPHA1] = "decoder.decoder.%d.block.%d.act1.alpha",
    [QVM_T_DEC_RES_BETA1] = "decoder.decoder.%d.block.%d.act1.beta",
    [QVM_T_DEC_RES_CONV1_W] = "decoder.decoder.%d.block.%d.conv1.conv.weight",
    [QVM_T_DEC_RES_CONV1_B] = "decoder.decoder.%d.block.%d.conv1.conv.bias",
    [QVM_T_DEC_RES_ALPHA2] = "decoder.decoder.%d.block.%d.act2.alpha",
    [QVM_T_DEC_RES_BETA2] = "decoder.decoder.%d.block.%d.act2.beta",
    [QVM_T_DEC_RES_CONV2_W] = "decoder.decoder.%d.block.%d.conv2.conv.weight",
    [QVM_T_DEC_RES_CONV2_B] = "decoder.decoder.%d.block.%d.conv2.conv.bias",
    [QVM_T_DEC_LAST_ALPHA] = "decoder.decoder.5.alpha",
    [QVM_T_DEC_LAST_BETA] = "decoder.decoder.5.beta",
    [QVM_T_DEC_LAST_W] = "decoder.decoder.6.conv.weight",
    [QVM_T_DEC_LAST_B] = "decoder.decoder.6.conv.bias",
    [QVM_T_MIMI_CONV] = "encoder.encoder.layers.%d.conv",
    [QVM_T_MIMI_RES] = "encoder.encoder.layers.%d.block.%d.conv",
    [QVM_T_MIMI_LN1_W] = "encoder.encoder_transformer.layers.%d.input_layernorm.weight",
    [QVM_T_MIMI_LN1_B] = "encoder.encoder_transformer.layers.%d.input_layernorm.bias",
    [QVM_T_MIMI_LN2_W] = "encoder.encoder_transformer.layers.%d.post_attention_layernorm.weight",
    [QVM_T_MIMI_LN2_B] = "encoder.encoder_transformer.layers.%d.post_attention_layernorm.bias",
    [QVM_T_MIMI_Q] = "encoder.encoder_transformer.layers.%d.self_attn.q_proj.weight",
    [QVM_T_MIMI_K] = "encoder.encoder_transformer.layers.%d.self_attn.k_proj.weight",
    [QVM_T_MIMI_V] = "encoder.encoder_transformer.layers.%d.self_attn.v_proj.weight",
    [QVM_T_MIMI_O] = "encoder.encoder_transformer.layers.%d.self_attn.o_proj.weight",
    [QVM_T_MIMI_FC1] = "encoder.encoder_transformer.layers.%d.mlp.fc1.weight",
    [QVM_T_MIMI_FC2] = "encoder.encoder_transformer.layers.%d.mlp.fc2.weight",
    [QVM_T_MIMI_ATTN_SCALE] = "encoder.encoder_transformer.layers.%d.self_attn_layer_scale.scale",
    [QVM_T_MIMI_MLP_SCALE] = "encoder.encoder_transformer.layers.%d.mlp_layer_scale.scale",
    [QVM_T_MIMI_DOWNSAMPLE] = "encoder.downsample.conv.weight",
    [QVM_T_MIMI_SEM_IN] = "encoder.quantizer.semantic_residual_vector_quantizer.input_proj.weight",
    [QVM_T_MIMI_SEM_OUT] = "encoder.quantizer.semantic_residual_vector_quantizer.output_proj.weight",
    [QVM_T_MIMI_ACO_IN] = "encoder.quantizer.acoustic_residual_vector_quantizer.input_proj.weight",
    [QVM_T_MIMI_ACO_OUT] = "encoder.quantizer.acoustic_residual_vector_quantizer.output_proj.weight",
    [QVM_T_MIMI_SEM_SUM] =
        "encoder.quantizer.semantic_residual_vector_quantizer.layers.%d.codebook.embed_sum",
    [QVM_T_MIMI_SEM_USAGE] =
        "encoder.quantizer.semantic_residual_vector_quantizer.layers.%d.codebook.cluster_usage",
    [QVM_T_MIMI_ACO_SUM] =
        "encoder.quantizer.acoustic_residual_vector_quantizer.layers.%d.codebook.embed_sum",
    [QVM_T_MIMI_ACO_USAGE] =
        "encoder.quantizer.acoustic_residual_vector_quantizer.layers.%d.codebook.cluster_usage",
};

const char *qvm_tensor_name(char *name, size_t name_size, enum qvm_tensor_kind k, int i, int j) {
    /* the table's formats take at most two %d: extra arguments are ignored (C11 7.21.6.1) */
    snprintf(name, name_size, k_names[k], i, j);
    return name;
}

/* ==== building ============================================================================== */

typedef struct {
    qvm_manifest *m;
    int cap;
    int bad;
    char *err;
    size_t err_size;
} builder;

static void bfail(builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bfail(builder *b, const char *fmt, ...) {
    if (b->bad) return;
    b->bad = 1;
    if (!b->err || !b->err_size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, b->err_size, fmt, ap);
    va_end(ap);
}

/* add(b, dtype, n_dims, d0, d1, d2, "fmt", ...): one entry; unused dims pass 0. */
static void add(builder *b, enum qvm_dtype dtype, int n_dims, int64_t d0, int64_t d1, int64_t d2,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add(builder *b, enum qvm_dtype dtype, int n_dims, int64_t d0, int64_t d1, int64_t d2,
                const char *fmt, ...) {
    if (b->bad) return;
    qvm_manifest *m = b->m;
    if (m->n_entries == b->cap) {
        int cap = b->cap ? b->cap * 2 : 512;
        qvm_manifest_entry *e = realloc(m->entries, sizeof *e * (size_t)cap);
        if (!e) {
            bfail(b, "manifest: out of memory");
            return;
        }
        m->entries = e;
        b->cap = cap;
    }
    qvm_manifest_entry *e = &m->entries[m->n_entries];
    memset(e, 0, sizeof *e);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof e->name) {
        bfail(b, "manifest: tensor name too long (expected < %d bytes)", QVM_MANIFEST_NAME_MAX);
        return;
    }
    int64_t d[3] = {d0, d1, d2};
    for (int i = 0; i < n_dims; i++) {
        if (d[i] <= 0) {
            bfail(b, "manifest: tensor %s: dimension %d is %lld (config values inconsistent)",
                  e->name, i, (long long)d[i]);
            return;
        }
        e->shape[i] = d[i];
    }
    e->n_dims = n_dims;
    e->dtype = dtype;
    m->n_entries++;
}

/* The entry of kind k (indices i, j). */
static void addk(builder *b, enum qvm_dtype dtype, int n_dims, int64_t d0, int64_t d1, int64_t d2,
                 enum qvm_tensor_kind k, int i, int j) {
    char name[QVM_MANIFEST_NAME_MAX];
    add(b, dtype, n_dims, d0, d1, d2, "%s", qvm_tensor_name(name, sizeof name, k, i, j));
}

/* The conv module of kind k: MODULE.weight [out, in, kernel] and MODULE.bias [out]. */
static void add_conv(builder *b, enum qvm_dtype dtype, int64_t out, int64_t in, int64_t kernel,
                     enum qvm_tensor_kind k, int i, int j) {
    char m[QVM_MANIFEST_NAME_MAX];
    qvm_tensor_name(m, sizeof m, k, i, j);
    add(b, dtype, 3, out, in, kernel, "%s.weight", m);
    add(b, dtype, 1, out, 0, 0, "%s.bias", m);
}

/* One tensor of a codec transformer layer: kind and shape [rows] or [rows, cols]. */
typedef struct {
    enum qvm_tensor_kind k;
    int64_t rows, cols; /* cols 0: a vector */
} layer_tensor;

/* Layer i of a codec transformer: the n tensors of t (F32, §2.2). */
static void add_layer(builder *b, const layer_tensor *t, int n, int i) {
    for (int k = 0; k < n; k++)
        addk(b, QVM_DTYPE_F32, t[k].cols ? 2 : 1, t[k].rows, t[k].cols, 0, t[k].k, i, 0);
}

static int cmp_entry_name_ctx(const qvm_manifest_entry *e, int a, int b) {
    return strcmp(e[a].name, e[b].name);
}

/* Sorted name index (bottom-up merge sort: no global qsort context, thread-safe). */
static void finish(builder *b) {
    qvm_manifest *m = b->m;
    if (b->bad) return;
    int n = m->n_entries;
    m->by_name = malloc(sizeof *m->by_name * (size_t)(n ? n : 1));
    int *tmp = malloc(sizeof *tmp * (size_t)(n ? n : 1));
    if (!m->by_name || !tmp) {
        free(tmp);
        bfail(b, "manifest: out of memory");
        return;
    }
    for (int i = 0; i < n; i++) m->by_name[i] = i;
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int x = lo, y = mid, k = lo;
            while (x < mid && y < hi)
                tmp[k++] = cmp_entry_name_ctx(m->entries, m->by_name[x], m->by_name[y]) <= 0
                               ? m->by_name[x++]
                               : m->by_name[y++];
            while (x < mid) tmp[k++] = m->by_name[x++];
            while (y < hi) tmp[k++] = m->by_name[y++];
        }
        memcpy(m->by_name, tmp, sizeof *tmp * (size_t)n);
    }
    free(tmp);
    for (int i = 1; i < n; i++)
        if (cmp_entry_name_ctx(m->entries, m->by_name[i - 1], m->by_name[i]) == 0)
            bfail(b, "manifest: duplicate entry %s", m->entries[m->by_name[i]].name);
}

int qvm_layer_tensor(const qvm_stack_config *s, const char *prefix, int i, int k, char *name,
                     size_t name_size, int64_t shape[2]) {
    /* dims: H hidden, Q heads x head_dim, KV kv heads x head_dim, D head_dim, I intermediate */
    enum { H, Q, KV, D, I, NONE };
    static const struct {
        const char *suffix;
        int rows, cols;
    } t[QVM_LAYER_N_TENSORS] = {
        {"input_layernorm.weight", H, NONE},     {"self_attn.q_proj.weight", Q, H},
        {"self_attn.k_proj.weight", KV, H},      {"self_attn.v_proj.weight", KV, H},
        {"self_attn.o_proj.weight", H, Q},       {"self_attn.q_norm.weight", D, NONE},
        {"self_attn.k_norm.weight", D, NONE},    {"post_attention_layernorm.weight", H, NONE},
        {"mlp.gate_proj.weight", I, H},          {"mlp.up_proj.weight", I, H},
        {"mlp.down_proj.weight", H, I},
    };
    const int64_t dim[NONE + 1] = {s->hidden_size, (int64_t)s->num_attention_heads * s->head_dim,
                                   (int64_t)s->num_key_value_heads * s->head_dim, s->head_dim,
                                   qvm_layer_intermediate(s, i), 0};
    snprintf(name, name_size, "%s.layers.%d.%s", prefix, i, t[k].suffix);
    shape[0] = dim[t[k].rows];
    shape[1] = dim[t[k].cols];
    return t[k].cols == NONE ? 1 : 2;
}

/* One Qwen3 decoder layer: 11 tensors, no biases (§2.1). */
static void qwen3_layer(builder *b, const char *prefix, int i, const qvm_stack_config *s) {
    for (int k = 0; k < QVM_LAYER_N_TENSORS; k++) {
        char name[QVM_MANIFEST_NAME_MAX];
        int64_t shape[2];
        int n_dims = qvm_layer_tensor(s, prefix, i, k, name, sizeof name, shape);
        add(b, QVM_DTYPE_BF16, n_dims, shape[0], shape[1], 0, "%s", name);
    }
}

int qvm_manifest_model(qvm_manifest *m, const qvm_model_config *c, char *err, size_t err_size) {
    memset(m, 0, sizeof *m);
    builder b = {.m = m, .err = err, .err_size = err_size};
    const enum qvm_dtype D = QVM_DTYPE_BF16;
    const qvm_stack_config *t = &c->talker, *p = &c->code_predictor;
    int64_t H = t->hidden_size, T = c->text_hidden_size;

    add(&b, D, 2, c->text_vocab_size, T, 0, "talker.model.text_embedding.weight");
    add(&b, D, 2, T, T, 0, "talker.text_projection.linear_fc1.weight");
    add(&b, D, 1, T, 0, 0, "talker.text_projection.linear_fc1.bias");
    add(&b, D, 2, H, T, 0, "talker.text_projection.linear_fc2.weight");
    add(&b, D, 1, H, 0, 0, "talker.text_projection.linear_fc2.bias");
    add(&b, D, 2, t->vocab_size, H, 0, "talker.model.codec_embedding.weight");
    for (int i = 0; i < t->num_hidden_layers; i++) qwen3_layer(&b, "talker.model", i, t);
    add(&b, D, 1, H, 0, 0, "talker.model.norm.weight");
    add(&b, D, 2, t->vocab_size, H, 0, "talker.codec_head.weight");

    for (int i = 0; i < p->num_hidden_layers; i++)
        qwen3_layer(&b, "talker.code_predictor.model", i, p);
    add(&b, D, 1, p->hidden_size, 0, 0, "talker.code_predictor.model.norm.weight");
    /* Code-predictor embeddings have the talker's width (they embed talker-side codes, §2.1). */
    for (int g = 0; g < t->num_code_groups - 1; g++)
        add(&b, D, 2, p->vocab_size, H, 0, "talker.code_predictor.model.codec_embedding.%d.weight",
            g);
    for (int g = 0; g < t->num_code_groups - 1; g++)
        add(&b, D, 2, p->vocab_size, p->hidden_size, 0, "talker.code_predictor.lm_head.%d.weight",
            g);
    if (H != p->hidden_size) {
        add(&b, D, 2, p->hidden_size, H, 0, "talker.code_predictor.small_to_mtp_projection.weight");
        add(&b, D, 1, p->hidden_size, 0, 0, "talker.code_predictor.small_to_mtp_projection.bias");
    }

    if (c->has_speaker_encoder) {
        const int *ch = c->enc_channels, *ks = c->enc_kernel_sizes;
        int scale = c->enc_res2net_scale, se = c->enc_se_channels;
        add_conv(&b, D, ch[0], c->mel_dim, ks[0], QVM_T_ECAPA_BLOCK0, 0, 0);
        for (int k = 1; k <= 3; k++) {
            if (scale < 1 || ch[k] % scale != 0) {
                bfail(&b, "manifest: enc_channels[%d] = %d not divisible by enc_res2net_scale %d", k,
                      ch[k], scale);
                break;
            }
            int64_t w = ch[k] / scale;
            add_conv(&b, D, ch[k], ch[k - 1], 1, QVM_T_ECAPA_TDNN1, k, 0);
            for (int j = 0; j < scale - 1; j++) add_conv(&b, D, w, w, ks[k], QVM_T_ECAPA_RES2NET, k, j);
            add_conv(&b, D, ch[k], ch[k], 1, QVM_T_ECAPA_TDNN2, k, 0);
            add_conv(&b, D, se, ch[k], 1, QVM_T_ECAPA_SE1, k, 0);
            add_conv(&b, D, ch[k], se, 1, QVM_T_ECAPA_SE2, k, 0);
        }
        int64_t cat = (int64_t)ch[1] + ch[2] + ch[3];
        add_conv(&b, D, ch[4], cat, ks[4], QVM_T_ECAPA_MFA, 0, 0);
        add_conv(&b, D, c->enc_attention_channels, 3 * (int64_t)ch[4], 1, QVM_T_ECAPA_ASP_TDNN, 0,
                 0);
        add_conv(&b, D, ch[4], c->enc_attention_channels, 1, QVM_T_ECAPA_ASP_CONV, 0, 0);
        add_conv(&b, D, c->enc_dim, 2 * (int64_t)ch[4], 1, QVM_T_ECAPA_FC, 0, 0);
    }
    finish(&b);
    if (b.bad) qvm_manifest_free(m);
    return b.bad ? -1 : 0;
}

/* ---- codec: decoder (§2.2, §6.1) ---- */

/* The split RVQ (semantic first, then acoustic) and the pre-transformer conv. */
static void codec_decoder_quantizers(builder *b, const qvm_codec_config *c) {
    const enum qvm_dtype F = QVM_DTYPE_F32;
    int64_t cd = c->decoder.codebook_dim, half = cd / 2, cbs = c->decoder.codebook_size;
    int64_t lat = c->decoder.latent_dim;
    int n_sem = c->decoder.num_semantic_quantizers, n_q = c->decoder.num_quantizers;
    static const enum qvm_tensor_kind rvq[2][4] = {
        {QVM_T_DEC_FIRST_IN, QVM_T_DEC_FIRST_OUT, QVM_T_DEC_FIRST_SUM, QVM_T_DEC_FIRST_USAGE},
        {QVM_T_DEC_REST_IN, QVM_T_DEC_REST_OUT, QVM_T_DEC_REST_SUM, QVM_T_DEC_REST_USAGE}};
    for (int s = 0; s < 2; s++) {
        addk(b, F, 3, half, cd, 1, rvq[s][0], 0, 0);
        addk(b, F, 3, cd, half, 1, rvq[s][1], 0, 0);
        int n = s == 0 ? n_sem : n_q - n_sem;
        if (n < 1) bfail(b, "manifest: decoder num_quantizers %d <= num_semantic_quantizers %d",
                         n_q, n_sem);
        for (int i = 0; i < n; i++) {
            addk(b, F, 2, cbs, half, 0, rvq[s][2], i, 0);
            addk(b, F, 1, cbs, 0, 0, rvq[s][3], i, 0);
        }
    }
    addk(b, F, 3, lat, cd, 3, QVM_T_DEC_PRE_CONV_W, 0, 0);
    addk(b, F, 1, lat, 0, 0, QVM_T_DEC_PRE_CONV_B, 0, 0);
}

static void codec_decoder_transformer(builder *b, const qvm_codec_config *c) {
    const enum qvm_dtype F = QVM_DTYPE_F32;
    int64_t lat = c->decoder.latent_dim, hid = c->decoder.hidden_size;
    int64_t qd = (int64_t)c->decoder.num_attention_heads * c->decoder.head_dim;
    int64_t kvd = (int64_t)c->decoder.num_key_value_heads * c->decoder.head_dim;
    int64_t inter = c->decoder.intermediate_size;
    addk(b, F, 2, hid, lat, 0, QVM_T_DEC_IN_PROJ_W, 0, 0);
    addk(b, F, 1, hid, 0, 0, QVM_T_DEC_IN_PROJ_B, 0, 0);
    const layer_tensor dl[] = {
        {QVM_T_DEC_ATTN_NORM, hid, 0}, {QVM_T_DEC_Q, qd, hid},          {QVM_T_DEC_K, kvd, hid},
        {QVM_T_DEC_V, kvd, hid},       {QVM_T_DEC_O, hid, qd},          {QVM_T_DEC_ATTN_SCALE, hid, 0},
        {QVM_T_DEC_MLP_NORM, hid, 0},  {QVM_T_DEC_GATE, inter, hid},    {QVM_T_DEC_UP, inter, hid},
        {QVM_T_DEC_DOWN, hid, inter},  {QVM_T_DEC_MLP_SCALE, hid, 0}};
    for (int i = 0; i < c->decoder.num_hidden_layers; i++)
        add_layer(b, dl, (int)(sizeof dl / sizeof *dl), i);
    addk(b, F, 1, hid, 0, 0, QVM_T_DEC_NORM, 0, 0);
    addk(b, F, 2, lat, hid, 0, QVM_T_DEC_OUT_PROJ_W, 0, 0);
    addk(b, F, 1, lat, 0, 0, QVM_T_DEC_OUT_PROJ_B, 0, 0);
}

/* The two ConvNeXt upsampling stages after the transformer. */
static void codec_decoder_upsample(builder *b, const qvm_codec_config *c) {
    const enum qvm_dtype F = QVM_DTYPE_F32;
    int64_t lat = c->decoder.latent_dim;
    for (int i = 0; i < 2; i++) {
        int64_t r = c->decoder.upsampling_ratios[i];
        addk(b, F, 3, lat, lat, r, QVM_T_DEC_UP_CONV_W, i, 0); /* ConvTranspose k = s = r */
        addk(b, F, 1, lat, 0, 0, QVM_T_DEC_UP_CONV_B, i, 0);
        addk(b, F, 3, lat, 1, 7, QVM_T_DEC_UP_DW_W, i, 0);
        addk(b, F, 1, lat, 0, 0, QVM_T_DEC_UP_DW_B, i, 0);
        addk(b, F, 1, lat, 0, 0, QVM_T_DEC_UP_NORM_W, i, 0);
        addk(b, F, 1, lat, 0, 0, QVM_T_DEC_UP_NORM_B, i, 0);
        addk(b, F, 2, 4 * lat, lat, 0, QVM_T_DEC_UP_PW1_W, i, 0);
        addk(b, F, 1, 4 * lat, 0, 0, QVM_T_DEC_UP_PW1_B, i, 0);
        addk(b, F, 2, lat, 4 * lat, 0, QVM_T_DEC_UP_PW2_W, i, 0);
        addk(b, F, 1, lat, 0, 0, QVM_T_DEC_UP_PW2_B, i, 0);
        addk(b, F, 1, lat, 0, 0, QVM_T_DEC_UP_GAMMA, i, 0);
    }
}

/* The vocoder: first conv, four upsampling blocks of three residual units, last conv. */
static void codec_decoder_blocks(builder *b, const qvm_codec_config *c) {
    const enum qvm_dtype F = QVM_DTYPE_F32;
    int64_t lat = c->decoder.latent_dim;
    int64_t cin = c->decoder.decoder_dim;
    addk(b, F, 3, cin, lat, 7, QVM_T_DEC_CONV0_W, 0, 0);
    addk(b, F, 1, cin, 0, 0, QVM_T_DEC_CONV0_B, 0, 0);
    for (int i = 1; i <= 4; i++) {
        int64_t cout = cin / 2, r = c->decoder.upsample_rates[i - 1];
        addk(b, F, 1, cin, 0, 0, QVM_T_DEC_BLK_ALPHA, i, 0);
        addk(b, F, 1, cin, 0, 0, QVM_T_DEC_BLK_BETA, i, 0);
        addk(b, F, 3, cin, cout, 2 * r, QVM_T_DEC_BLK_UP_W, i, 0);
        addk(b, F, 1, cout, 0, 0, QVM_T_DEC_BLK_UP_B, i, 0);
        for (int u = 2; u <= 4; u++) {
            addk(b, F, 1, cout, 0, 0, QVM_T_DEC_RES_ALPHA1, i, u);
            addk(b, F, 1, cout, 0, 0, QVM_T_DEC_RES_BETA1, i, u);
            addk(b, F, 1, cout, 0, 0, QVM_T_DEC_RES_ALPHA2, i, u);
            addk(b, F, 1, cout, 0, 0, QVM_T_DEC_RES_BETA2, i, u);
            addk(b, F, 3, cout, cout, 7, QVM_T_DEC_RES_CONV1_W, i, u);
            addk(b, F, 1, cout, 0, 0, QVM_T_DEC_RES_CONV1_B, i, u);
            addk(b, F, 3, cout, cout, 1, QVM_T_DEC_RES_CONV2_W, i, u);
            addk(b, F, 1, cout, 0, 0, QVM_T_DEC_RES_CONV2_B, i, u);
        }
        cin = cout;
    }
    addk(b, F, 1, cin, 0, 0, QVM_T_DEC_LAST_ALPHA, 0, 0);
    addk(b, F, 1, cin, 0, 0, QVM_T_DEC_LAST_BETA, 0, 0);
    addk(b, F, 3, 1, cin, 7, QVM_T_DEC_LAST_W, 0, 0);
    addk(b, F, 1, 1, 0, 0, QVM_T_DEC_LAST_B, 0, 0);
}

/* ---- codec: encoder, the parts §6.2 uses (HF Mimi names) ---- */

/* The SEANet convolutions; returns their total hop (samples per encoder step). */
static int64_t codec_encoder_seanet(builder *b, const qvm_codec_config *c) {
    const enum qvm_dtype F = QVM_DTYPE_F32;
    int64_t nf = c->encoder.num_filters, comp = c->encoder.compress, eh = c->encoder.hidden_size;
    int li = 0;
    add_conv(b, F, nf, 1, c->encoder.kernel_size, QVM_T_MIMI_CONV, li++, 0);
    int64_t ch = nf, hop = 1;
    for (int s = 3; s >= 0; s--) { /* Mimi's encoder walks the ratios in reverse */
        int64_t r = c->encoder.upsampling_ratios[s];
        hop *= r;
        if (ch % comp != 0) bfail(b, "manifest: encoder channels %lld not divisible by compress",
                                  (long long)ch);
        for (int j = 0; j < c->encoder.num_residual_layers; j++, li++) {
            add_conv(b, F, ch / comp, ch, c->encoder.residual_kernel_size, QVM_T_MIMI_RES, li, 1);
            add_conv(b, F, ch, ch / comp, 1, QVM_T_MIMI_RES, li, 3);
        }
        li++; /* ELU */
        add_conv(b, F, 2 * ch, ch, 2 * r, QVM_T_MIMI_CONV, li++, 0);
        ch *= 2;
    }
    li++; /* ELU */
    add_conv(b, F, eh, ch, c->encoder.last_kernel_size, QVM_T_MIMI_CONV, li, 0);
    return hop;
}

/* The transformer layers and the downsample to the codec frame hop. */
static void codec_encoder_transformer(builder *b, const qvm_codec_config *c, int64_t hop) {
    const enum qvm_dtype F = QVM_DTYPE_F32;
    int64_t eh = c->encoder.hidden_size;
    int64_t eq = (int64_t)c->encoder.num_attention_heads * c->encoder.head_dim;
    int64_t ekv = (int64_t)c->encoder.num_key_value_heads * c->encoder.head_dim;
    int64_t ei = c->encoder.intermediate_size;
    const layer_tensor el[] = {
        {QVM_T_MIMI_LN1_W, eh, 0},      {QVM_T_MIMI_LN1_B, eh, 0}, {QVM_T_MIMI_LN2_W, eh, 0},
        {QVM_T_MIMI_LN2_B, eh, 0},      {QVM_T_MIMI_Q, eq, eh},    {QVM_T_MIMI_K, ekv, eh},
        {QVM_T_MIMI_V, ekv, eh},        {QVM_T_MIMI_O, eh, eq},    {QVM_T_MIMI_FC1, ei, eh},
        {QVM_T_MIMI_FC2, eh, ei},       {QVM_T_MIMI_ATTN_SCALE, eh, 0},
        {QVM_T_MIMI_MLP_SCALE, eh, 0}};
    for (int i = 0; i < c->encoder.num_hidden_layers; i++)
        add_layer(b, el, (int)(sizeof el / sizeof *el), i);
    /* downsample: SEANet hop → codec frame hop; Mimi uses kernel = 2 × stride. */
    if (!b->bad && (c->encode_downsample_rate % hop != 0 || c->encode_downsample_rate / hop < 1))
        bfail(b, "manifest: encode_downsample_rate %d not a multiple of the encoder hop %lld",
              c->encode_downsample_rate, (long long)hop);
    int64_t stride = hop ? c->encode_downsample_rate / hop : 0;
    addk(b, F, 3, eh, eh, 2 * stride, QVM_T_MIMI_DOWNSAMPLE, 0, 0);
}

static void codec_encoder_quantizers(builder *b, const qvm_codec_config *c) {
    const enum qvm_dtype F = QVM_DTYPE_F32;
    int64_t eh = c->encoder.hidden_size;
    int64_t ecd = c->encoder.codebook_dim, ecs = c->encoder.codebook_size;
    int e_sem = c->encoder.num_semantic_quantizers;
    int n_acoustic = c->encoder_valid_num_quantizers - e_sem; /* layers beyond are never used */
    if (n_acoustic < 0) bfail(b, "manifest: encoder_valid_num_quantizers below semantic count");
    static const enum qvm_tensor_kind erq[2][4] = {
        {QVM_T_MIMI_SEM_IN, QVM_T_MIMI_SEM_OUT, QVM_T_MIMI_SEM_SUM, QVM_T_MIMI_SEM_USAGE},
        {QVM_T_MIMI_ACO_IN, QVM_T_MIMI_ACO_OUT, QVM_T_MIMI_ACO_SUM, QVM_T_MIMI_ACO_USAGE}};
    for (int s = 0; s < 2; s++) {
        addk(b, F, 3, ecd, eh, 1, erq[s][0], 0, 0);
        addk(b, F, 3, eh, ecd, 1, erq[s][1], 0, 0);
        int n = s == 0 ? e_sem : n_acoustic;
        for (int i = 0; i < n; i++) {
            addk(b, F, 2, ecs, ecd, 0, erq[s][2], i, 0);
            addk(b, F, 1, ecs, 0, 0, erq[s][3], i, 0);
        }
    }
}

int qvm_manifest_codec(qvm_manifest *m, const qvm_codec_config *c, char *err, size_t err_size) {
    memset(m, 0, sizeof *m);
    builder b = {.m = m, .err = err, .err_size = err_size};
    codec_decoder_quantizers(&b, c);
    codec_decoder_transformer(&b, c);
    codec_decoder_upsample(&b, c);
    codec_decoder_blocks(&b, c);
    codec_encoder_transformer(&b, c, codec_encoder_seanet(&b, c));
    codec_encoder_quantizers(&b, c);
    finish(&b);
    if (b.bad) qvm_manifest_free(m);
    return b.bad ? -1 : 0;
}

void qvm_manifest_free(qvm_manifest *m) {
    if (!m) return;
    free(m->entries);
    free(m->by_name);
    memset(m, 0, sizeof *m);
}

const qvm_manifest_entry *qvm_manifest_find(const qvm_manifest *m, const char *name) {
    if (!m || !m->by_name) return NULL;
    int lo = 0, hi = m->n_entries - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const qvm_manifest_entry *e = &m->entries[m->by_name[mid]];
        int c = strcmp(e->name, name);
        if (c == 0) return e;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

int qvm_manifest_compressed(qvm_manifest *m, const qvm_model_config *c, const qvm_st *st,
                            char *err, size_t err_size) {
    qvm_manifest out = {0};
    builder b = {.m = &out, .err = err, .err_size = err_size};
    const char *emb = "talker.model.text_embedding.weight", *map = "talker.model.text_token_map";
    const qvm_tensor *tm = qvm_st_find(st, map), *te = qvm_st_find(st, emb);
    char sc[QVM_MANIFEST_NAME_MAX + 8];
    for (int i = 0; i < m->n_entries && !b.bad; i++) {
        const qvm_manifest_entry *e = &m->entries[i];
        const size_t n = strlen(e->name);
        const int linear = c->quant_bits && e->n_dims == 2 && n > 7 &&
                           !strcmp(e->name + n - 7, ".weight") && !strstr(e->name, "embedding");
        snprintf(sc, sizeof sc, "%.*s.scales", (int)(n - 7), e->name);
        if (linear && qvm_st_find(st, sc)) {
            const int64_t o = e->shape[0], in = e->shape[1], per_u32 = 32 / c->quant_bits;
            if (in % c->quant_group_size) {
                bfail(&b, "%s: tensor %s: input width %lld is not a multiple of the quantization "
                          "group %d",
                      qvm_st_file(st, NULL), e->name, (long long)in, c->quant_group_size);
                break;
            }
            add(&b, QVM_DTYPE_U32, 2, o, in / per_u32, 0, "%s", e->name);
            add(&b, e->dtype, 2, o, in / c->quant_group_size, 0, "%s", sc);
            add(&b, e->dtype, 2, o, in / c->quant_group_size, 0, "%.*s.biases", (int)(n - 7),
                e->name);
        } else if (tm && !strcmp(e->name, emb)) { /* vocabulary pruned: the rows st holds */
            const int64_t rows = te && te->n_dims == 2 ? te->shape[0] : e->shape[0];
            if (rows < 1 || rows > e->shape[0]) {
                bfail(&b, "%s: tensor %s: expected 1..%lld rows with a token map, found %lld",
                      qvm_st_file(st, te), emb, (long long)e->shape[0], (long long)rows);
                break;
            }
            add(&b, e->dtype, 2, rows, e->shape[1], 0, "%s", emb);
            add(&b, QVM_DTYPE_I32, 1, e->shape[0], 0, 0, "%s", map);
        } else {
            add(&b, e->dtype, e->n_dims, e->shape[0], e->shape[1], e->shape[2], "%s", e->name);
        }
    }
    finish(&b);
    if (b.bad) {
        qvm_manifest_free(&out);
        return -1;
    }
    qvm_manifest_free(m);
    *m = out;
    return 0;
}

/* ==== checking ============================================================================== */

static void fmt_shape(char *buf, size_t n, int n_dims, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < n_dims && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

int qvm_manifest_check_st(const qvm_manifest *m, const qvm_st *st, int exact, char *err,
                          size_t err_size) {
    char want[96], got[96];
    for (int i = 0; i < m->n_entries; i++) {
        const qvm_manifest_entry *e = &m->entries[i];
        const qvm_tensor *t = qvm_st_find(st, e->name);
        fmt_shape(want, sizeof want, e->n_dims, e->shape);
        if (!t) {
            snprintf(err, err_size, "%s: tensor %s: missing (expected %s)", qvm_st_file(st, NULL),
                     e->name, want);
            return -1;
        }
        const int fl = qvm_dtype_is_float(e->dtype); /* any float, or exactly the integer type */
        int ok = t->n_dims == e->n_dims && (fl ? qvm_dtype_is_float(t->dtype) : t->dtype == e->dtype);
        for (int k = 0; ok && k < e->n_dims; k++) ok = t->shape[k] == e->shape[k];
        if (!ok) {
            fmt_shape(got, sizeof got, t->n_dims, t->shape);
            snprintf(err, err_size, "%s: tensor %s: expected %s %s, found %s %s",
                     qvm_st_file(st, t), e->name, want, fl ? "float" : qvm_dtype_name(e->dtype),
                     got, qvm_dtype_name(t->dtype));
            return -1;
        }
    }
    if (exact && qvm_st_count(st) != m->n_entries) {
        /* Every entry was found, so the count can only be larger: name one stranger. */
        for (int i = 0; i < qvm_st_count(st); i++) {
            const qvm_tensor *t = qvm_st_at(st, i);
            if (!qvm_manifest_find(m, t->name)) {
                snprintf(err, err_size, "%s: unexpected tensor %s (expected %d tensors, found %d)",
                         qvm_st_file(st, t), t->name, m->n_entries, qvm_st_count(st));
                return -1;
            }
        }
        snprintf(err, err_size, "%s: wrong tensor count (expected %d, found %d)",
                 qvm_st_file(st, NULL), m->n_entries, qvm_st_count(st));
        return -1;
    }
    return 0;
}

int qvm_manifest_check(const qvm_model_config *mc, const qvm_codec_config *cc, const qvm_st *main,
                       const qvm_st *codec, char *err, size_t err_size) {
    qvm_manifest m;
    if (main) {
        if (qvm_manifest_model(&m, mc, err, err_size) != 0) return -1;
        int rc = qvm_manifest_check_st(&m, main, 1, err, err_size);
        qvm_manifest_free(&m);
        if (rc != 0) return -1;
    }
    if (codec && cc) {
        if (qvm_manifest_codec(&m, cc, err, err_size) != 0) return -1;
        int rc = qvm_manifest_check_st(&m, codec, 0, err, err_size);
        qvm_manifest_free(&m);
        if (rc != 0) return -1;
    }
    return 0;
}
