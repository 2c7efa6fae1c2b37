/* speech_encoder.c — speech-tokenizer encoder (§6.2, HF MimiModel.encode as Qwen3-TTS calls it):
 * SEANet (causal convs, ELU, ⌈L/stride⌉ lengths) → 8-layer causal transformer → replicate-padded
 * stride-2 downsample → split RVQ with the encoder's own codebooks → 16 codes per 12.5 Hz frame.
 * Everything runs time-major ([T, C]): a conv is a few sgemms over a gathered window per chunk of
 * frames (qvk_conv1d_chunked_tm, no unfolding where kernel and stride allow); conv weights are permuted to
 * [out, k, in] and the codebooks divided by their cluster usage once at load, the transformer
 * weights stay in the F32 mmap. A qvk_pool shares chunks, row blocks and heads.
 */
#include "features/speech_encoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/manifest.h"
#include "kernels/kernels.h"
#include "checkpoint/safetensors.h"

#define N_STAGES 4
#define MAX_RES 4
#define MAX_LAYERS 32

typedef struct {
    int n_filters, kernel_size, last_kernel_size, residual_kernel_size;
    int n_residual_layers, dilation_growth_rate, compress;
    int ratios[N_STAGES];               /* encoder order: reversed upsampling_ratios */
    int hidden_size, n_layers, n_heads, head_dim, intermediate_size;
    float norm_eps, rope_theta;
    int codebook_size, codebook_dim, n_codes;
} enc_config;

typedef struct { const float *w, *b; } conv_w;   /* w [out, k, in] (owned), b [out] (mmap) */

typedef struct {
    conv_w res[MAX_RES][2];             /* encoder.encoder.layers.i.block.{1,3}.conv */
    conv_w down;                        /* stride conv [2C, C, 2r] */
} stage_w;

typedef struct {
    const float *ln1_w, *ln1_b;         /* input_layernorm [512] */
    const float *wq, *wk, *wv, *wo;     /* self_attn.{q,k,v,o}_proj [512, 512] */
    const float *ls1;                   /* self_attn_layer_scale.scale [512] */
    const float *ln2_w, *ln2_b;         /* post_attention_layernorm [512] */
    const float *fc1, *fc2;             /* mlp.fc1 [2048, 512], mlp.fc2 [512, 2048] */
    const float *ls2;                   /* mlp_layer_scale.scale [512] */
} layer_w;

typedef struct {
    conv_w conv0;                       /* encoder.encoder.layers.0.conv [F, 1, k] */
    stage_w stage[N_STAGES];
    conv_w conv_last;                   /* encoder.encoder.layers.L.conv [hidden, 16F, last_k] */
    layer_w layer[MAX_LAYERS];
    const float *downsample;            /* encoder.downsample.conv.weight [512, 512, 4] → [512, 4, 512] */
    const float *proj_sem, *proj_ac;    /* quantizer.*.input_proj.weight [256, 512, 1] */
    float *codebook;                    /* [n_codes, 2048, 256] embed_sum / max(usage, 1e-5) */
    float *codebook_sq;                 /* [n_codes, 2048] ‖e‖² */
    float *conv_arena;                  /* permuted conv weights */
    size_t conv_used, conv_cap;         /* floats */
} enc_weights;

struct qva_speech_encoder {
    enc_config cfg;
    enc_weights w;
    qvm_ckpt *ck; /* a reference; the weights borrow its codec_st */
    int window;
};

/* ---- loading ---------------------------------------------------------------------------- */

static const float *tensor(const qvm_st *st, const char *name, int n_dims, int64_t d0, int64_t d1,
                           int64_t d2, char *err, size_t err_size) {
    int64_t shape[3] = {d0, d1, d2};
    const qvm_tensor *t = qvm_st_expect(st, name, QVM_DTYPE_F32, n_dims, shape, err, err_size);
    return t ? (const float *)t->data : NULL;
}

/* Permuted copy [out, k, in] of a PyTorch conv weight into the conv arena. */
static const float *conv_weight(enc_weights *w, const qvm_st *st, const char *name, int c_out,
                                int c_in, int k, char *err, size_t err_size) {
    const float *src = tensor(st, name, 3, c_out, c_in, k, err, err_size);
    size_t n = (size_t)c_out * c_in * k;
    if (!src) return NULL;
    if (w->conv_used + n > w->conv_cap) {
        snprintf(err, err_size, "%s: conv weights larger than the config implies", name);
        return NULL;
    }
    float *dst = w->conv_arena + w->conv_used;
    w->conv_used += n;
    qvk_conv_weights_tm(dst, src, c_out, c_in, k);
    return dst;
}

/* The conv module of kind k, index i, j (manifest.h: .weight [c_out, c_in, k], .bias [c_out]). */
static int conv_load(enc_weights *w, conv_w *cw, const qvm_st *st, enum qvm_tensor_kind kind,
                     int i, int j, int c_out, int c_in, int k, char *err, size_t err_size) {
    char m[160], name[168];
    qvm_tensor_name(m, sizeof m, kind, i, j);
    snprintf(name, sizeof name, "%s.weight", m);
    cw->w = conv_weight(w, st, name, c_out, c_in, k, err, err_size);
    snprintf(name, sizeof name, "%s.bias", m);
    cw->b = cw->w ? tensor(st, name, 1, c_out, 0, 0, err, err_size) : NULL;
    return cw->w && cw->b ? 0 : -1;
}

/* Floats of all SEANet + downsample conv weights for config c. */
static size_t conv_floats(const enc_config *c) {
    size_t n = (size_t)c->n_filters * c->kernel_size;
    int ch = c->n_filters;
    for (int s = 0; s < N_STAGES; s++) {
        int hid = ch / c->compress;
        n += (size_t)c->n_residual_layers * ((size_t)hid * ch * c->residual_kernel_size + (size_t)ch * hid);
        n += (size_t)2 * ch * ch * 2 * c->ratios[s];
        ch *= 2;
    }
    n += (size_t)c->hidden_size * ch * c->last_kernel_size;
    n += (size_t)c->hidden_size * c->hidden_size * 4;
    return n;
}

static int config_from(enc_config *c, const qvm_codec_config *cc) {
    c->n_filters = cc->encoder.num_filters;
    c->kernel_size = cc->encoder.kernel_size;
    c->last_kernel_size = cc->encoder.last_kernel_size;
    c->residual_kernel_size = cc->encoder.residual_kernel_size;
    c->n_residual_layers = cc->encoder.num_residual_layers;
    c->dilation_growth_rate = cc->encoder.dilation_growth_rate;
    c->compress = cc->encoder.compress;
    for (int i = 0; i < N_STAGES; i++) c->ratios[i] = cc->encoder.upsampling_ratios[N_STAGES - 1 - i];
    c->hidden_size = cc->encoder.hidden_size;
    c->n_layers = cc->encoder.num_hidden_layers;
    c->n_heads = cc->encoder.num_attention_heads;
    c->head_dim = cc->encoder.head_dim;
    c->intermediate_size = cc->encoder.intermediate_size;
    c->norm_eps = cc->encoder.norm_eps;
    c->rope_theta = cc->encoder.rope_theta;
    c->codebook_size = cc->encoder.codebook_size;
    c->codebook_dim = cc->encoder.codebook_dim;
    c->n_codes = cc->encoder_valid_num_quantizers;
    int ok = c->n_filters > 0 && c->compress > 0 && c->n_residual_layers >= 1 &&
             c->n_residual_layers <= MAX_RES && c->n_layers >= 0 && c->n_layers <= MAX_LAYERS &&
             c->n_heads > 0 && c->head_dim > 0 && c->head_dim % 2 == 0 &&
             c->n_heads * c->head_dim == c->hidden_size && c->n_codes == QV_N_CODEBOOKS &&
             c->codebook_size > 0 && c->codebook_dim > 0 && cc->encoder.num_semantic_quantizers == 1 &&
             cc->encoder.num_quantizers >= c->n_codes;
    for (int i = 0; i < N_STAGES; i++) ok = ok && c->ratios[i] > 0;
    ok = ok && c->ratios[0] * c->ratios[1] * c->ratios[2] * c->ratios[3] * 2 ==
                   cc->encode_downsample_rate;
    return ok ? 0 : -1;
}

/* Codebook g (0 semantic, 1.. acoustic layer g - 1): embed_sum / max(cluster_usage, 1e-5). */
static int codebook_load(qva_speech_encoder *se, int g, char *err, size_t err_size) {
    const enc_config *c = &se->cfg;
    const qvm_st *st = se->ck->codec_st;
    char name[160];
    const int l = g ? g - 1 : 0;
    qvm_tensor_name(name, sizeof name, g ? QVM_T_MIMI_ACO_SUM : QVM_T_MIMI_SEM_SUM, l, 0);
    const float *sum = tensor(st, name, 2, c->codebook_size, c->codebook_dim, 0, err, err_size);
    qvm_tensor_name(name, sizeof name, g ? QVM_T_MIMI_ACO_USAGE : QVM_T_MIMI_SEM_USAGE, l, 0);
    const float *use = sum ? tensor(st, name, 1, c->codebook_size, 0, 0, err, err_size) : NULL;
    if (!use) return -1;
    size_t n = (size_t)c->codebook_size * c->codebook_dim;
    float *e = se->w.codebook + (size_t)g * n;
    float *sq = se->w.codebook_sq + (size_t)g * c->codebook_size;
    for (int i = 0; i < c->codebook_size; i++) {
        float u = use[i] > 1e-5f ? use[i] : 1e-5f;
        double acc = 0.0;
        for (int j = 0; j < c->codebook_dim; j++) {
            float v = sum[(size_t)i * c->codebook_dim + j] / u;
            e[(size_t)i * c->codebook_dim + j] = v;
            acc += (double)v * v;
        }
        sq[i] = (float)acc;
    }
    return 0;
}

/* The SEANet convolutions: the first, per stage its residual units and downsampling conv, the
 * last (idx counts the checkpoint's module list, ELUs included). */
static int load_seanet(enc_weights *w, const qvm_st *st, const enc_config *c, char *err,
                       size_t err_size) {
    int ch = c->n_filters, idx = 1;
    int rc = conv_load(w, &w->conv0, st, QVM_T_MIMI_CONV, 0, 0, ch, 1, c->kernel_size, err,
                       err_size);
    for (int s = 0; s < N_STAGES && !rc; s++) {
        int hid = ch / c->compress;
        for (int j = 0; j < c->n_residual_layers && !rc; j++, idx++) {
            rc = conv_load(w, &w->stage[s].res[j][0], st, QVM_T_MIMI_RES, idx, 1, hid, ch,
                           c->residual_kernel_size, err, err_size);
            if (!rc)
                rc = conv_load(w, &w->stage[s].res[j][1], st, QVM_T_MIMI_RES, idx, 3, ch, hid, 1,
                               err, err_size);
        }
        idx++; /* ELU */
        if (!rc)
            rc = conv_load(w, &w->stage[s].down, st, QVM_T_MIMI_CONV, idx, 0, 2 * ch, ch,
                           2 * c->ratios[s], err, err_size);
        idx++;
        ch *= 2;
    }
    idx++; /* ELU */
    if (!rc)
        rc = conv_load(w, &w->conv_last, st, QVM_T_MIMI_CONV, idx, 0, c->hidden_size, ch,
                       c->last_kernel_size, err, err_size);
    return rc;
}

/* The transformer layers' tensors. */
static int load_transformer(enc_weights *w, const qvm_st *st, const enc_config *c, char *err,
                            size_t err_size) {
    char p[192];
    int h = c->hidden_size, f = c->intermediate_size, rc = 0;
    for (int l = 0; l < c->n_layers && !rc; l++) {
        layer_w *L = &w->layer[l];
        struct { const float **dst; enum qvm_tensor_kind k; int nd; int d0, d1; } tab[] = {
            {&L->ln1_w, QVM_T_MIMI_LN1_W, 1, h, 0},   {&L->ln1_b, QVM_T_MIMI_LN1_B, 1, h, 0},
            {&L->wq, QVM_T_MIMI_Q, 2, h, h},          {&L->wk, QVM_T_MIMI_K, 2, h, h},
            {&L->wv, QVM_T_MIMI_V, 2, h, h},          {&L->wo, QVM_T_MIMI_O, 2, h, h},
            {&L->ls1, QVM_T_MIMI_ATTN_SCALE, 1, h, 0}, {&L->ln2_w, QVM_T_MIMI_LN2_W, 1, h, 0},
            {&L->ln2_b, QVM_T_MIMI_LN2_B, 1, h, 0},   {&L->fc1, QVM_T_MIMI_FC1, 2, f, h},
            {&L->fc2, QVM_T_MIMI_FC2, 2, h, f},       {&L->ls2, QVM_T_MIMI_MLP_SCALE, 1, h, 0},
        };
        for (size_t i = 0; i < sizeof tab / sizeof tab[0] && !rc; i++) {
            qvm_tensor_name(p, sizeof p, tab[i].k, l, 0);
            *tab[i].dst = tensor(st, p, tab[i].nd, tab[i].d0, tab[i].d1, 0, err, err_size);
            rc = *tab[i].dst ? 0 : -1;
        }
    }
    return rc;
}

/* The downsampling conv, the quantizer's input projections and its codebooks. */
static int load_quantizer(qva_speech_encoder *se, const qvm_st *st, char *err, size_t err_size) {
    enc_weights *w = &se->w;
    const enc_config *c = &se->cfg;
    const char *dir = se->ck->dir;
    char p[192];
    int h = c->hidden_size, rc = 0;
    if (!rc) {
        qvm_tensor_name(p, sizeof p, QVM_T_MIMI_DOWNSAMPLE, 0, 0);
        w->downsample = conv_weight(w, st, p, h, h, 4, err, err_size);
        rc = w->downsample ? 0 : -1;
    }
    if (!rc) {
        qvm_tensor_name(p, sizeof p, QVM_T_MIMI_SEM_IN, 0, 0);
        w->proj_sem = tensor(st, p, 3, c->codebook_dim, h, 1, err, err_size);
        qvm_tensor_name(p, sizeof p, QVM_T_MIMI_ACO_IN, 0, 0);
        w->proj_ac = w->proj_sem ? tensor(st, p, 3, c->codebook_dim, h, 1, err, err_size) : NULL;
        rc = w->proj_ac ? 0 : -1;
    }
    if (!rc) {
        w->codebook = qvk_alloc((size_t)c->n_codes * c->codebook_size * c->codebook_dim * sizeof(float));
        w->codebook_sq = qvk_alloc((size_t)c->n_codes * c->codebook_size * sizeof(float));
        if (!w->codebook || !w->codebook_sq) {
            snprintf(err, err_size, "%s: out of memory", dir);
            rc = -1;
        }
    }
    for (int g = 0; g < c->n_codes && !rc; g++) rc = codebook_load(se, g, err, err_size);
    return rc;
}

qva_speech_encoder *qva_speech_encoder_load(qvm_ckpt *ck, char *err, size_t err_size) {
    const char *dir = ck->dir;
    qva_speech_encoder *se = calloc(1, sizeof *se);
    if (!se) {
        snprintf(err, err_size, "%s: out of memory", dir);
        return NULL;
    }
    enc_config *c = &se->cfg;
    if (config_from(c, &ck->codec)) {
        snprintf(err, err_size, "%s/speech_tokenizer/config.json: unsupported encoder_config", dir);
        free(se);
        return NULL;
    }
    se->ck = qvm_ckpt_ref(ck);
    char p[192], m[160];
    snprintf(p, sizeof p, "%s.weight", qvm_tensor_name(m, sizeof m, QVM_T_MIMI_CONV, 0, 0));
    if (!qvm_st_find(ck->codec_st, p)) { /* stripped */
        snprintf(err, err_size, "%s: no speech encoder (removed by qvoice-compress --strip-encoder): "
                 "ICL cloning needs the model's full speech tokenizer", qvm_st_file(ck->codec_st, NULL));
        qva_speech_encoder_free(se);
        return NULL;
    }
    enc_weights *w = &se->w;
    const qvm_st *st = ck->codec_st;
    w->conv_cap = conv_floats(c);
    w->conv_arena = qvk_alloc(w->conv_cap * sizeof(float));
    if (!w->conv_arena) {
        snprintf(err, err_size, "%s: out of memory", dir);
        qva_speech_encoder_free(se);
        return NULL;
    }
    int rc = load_seanet(w, st, c, err, err_size);
    if (!rc) rc = load_transformer(w, st, c, err, err_size);
    if (!rc) rc = load_quantizer(se, st, err, err_size);
    if (rc) {
        qva_speech_encoder_free(se);
        return NULL;
    }
    return se;
}

void qva_speech_encoder_free(qva_speech_encoder *se) {
    if (!se) return;
    qvk_free(se->w.codebook);
    qvk_free(se->w.codebook_sq);
    qvk_free(se->w.conv_arena);
    qvm_ckpt_free(se->ck);
    free(se);
}

void qva_speech_encoder_set_window(qva_speech_encoder *se, int window) {
    se->window = window > 0 ? window : 0;
}

int qva_speech_encoder_n_frames(int64_t n) { return (int)((n + 1919) / 1920); }

/* ---- forward ---------------------------------------------------------------------------- */

static qvk_conv causal(int c_in, int c_out, int k, int stride, int dilation, enum qvk_act act_in,
                       int64_t t_in) {
    qvk_conv cv = {.c_in = c_in, .c_out = c_out, .k = k, .stride = stride, .dilation = dilation,
                   .pad = QVK_PAD_ZERO, .act_in = act_in};
    qvk_conv_causal(&cv, t_in);
    return cv;
}

/* The first SEG_STAGES stages run in time segments of SEG_ROWS output rows: their full-length
 * activations (184 + 92 MB for a 30 s clip at 24 kHz × 64 channels) would be written once and
 * read a few times, and first-touch page clearing of that much fresh memory was ~25 % of the
 * encoder. Per segment, each layer computes exactly the rows the next one reads (a few rows of
 * causal context are recomputed at segment edges); rows do not depend on how they are grouped,
 * so the codes are the same bits as unsegmented. */
#define SEG_STAGES 2
#define SEG_ROWS 512

typedef struct {       /* per-call buffers */
    int n_threads;
    float *p, *q;      /* SEANet ping-pong [T, C] for the unsegmented stages */
    float *seg_in[SEG_STAGES], *seg_hid[SEG_STAGES]; /* one segment's stage input / res hidden */
    float *scratch;    /* conv scratch, one slice per thread */
    float *x, *hbuf, *qb, *kb, *vb, *ff; /* transformer [T, ·] */
    float *att;        /* [n_threads, T, T] attention probabilities, one matrix per thread */
    float *rope_c, *rope_s;
    float *xs, *dist;  /* RVQ [Tq, D], [Tq, codebook_size] */
} enc_state;

static void enc_state_free(enc_state *s) {
    qvk_free(s->p);
    qvk_free(s->q);
    qvk_free(s->scratch);
}

/* Next n floats of a carved buffer, 64-byte aligned. */
static float *carve(float **at, size_t n) {
    float *r = *at;
    *at += (n + 15) / 16 * 16;
    return r;
}

/* Input rows [lo, hi) of each segmented stage needed for output rows [a, b) of the last one's
 * downsampling conv (causal: left context only, clamped to the stage's length t[st]). */
static void seg_ranges(const enc_config *c, const int64_t *t, int64_t a, int64_t b,
                       int64_t lo[SEG_STAGES], int64_t hi[SEG_STAGES]) {
    int64_t o0 = a, o1 = b;
    for (int st = SEG_STAGES - 1; st >= 0; st--) {
        int r = c->ratios[st], k = 2 * r, pad = 0;
        for (int j = 0, dil = 1; j < c->n_residual_layers; j++, dil *= c->dilation_growth_rate)
            pad += dil * (c->residual_kernel_size - 1);
        int64_t r0 = o0 * r - (k - r), r1 = (o1 - 1) * r - (k - r) + k;
        if (r0 < 0) r0 = 0;
        if (r1 > t[st]) r1 = t[st];
        lo[st] = r0 - pad < 0 ? 0 : r0 - pad;
        hi[st] = r1;
        o0 = lo[st];
        o1 = hi[st];
    }
}

/* Stage input lengths t[0..N_STAGES] (t[0] = samples). */
static void stage_lengths(const enc_config *c, int64_t n, int64_t *t) {
    t[0] = n;
    for (int st = 0; st < N_STAGES; st++) t[st + 1] = (t[st] + c->ratios[st] - 1) / c->ratios[st];
}

/* The most rows any segment of the first SEG_STAGES stages takes (tl: the stages' lengths). */
static void seg_max_rows(const enc_config *c, const int64_t *tl, int64_t max_rows[SEG_STAGES]) {
    for (int st = 0; st < SEG_STAGES; st++)
        max_rows[st] = 0;
    for (int64_t a = 0; a < tl[SEG_STAGES]; a += SEG_ROWS) {
        int64_t lo[SEG_STAGES], hi[SEG_STAGES];
        seg_ranges(c, tl, a, a + SEG_ROWS < tl[SEG_STAGES] ? a + SEG_ROWS : tl[SEG_STAGES], lo, hi);
        for (int st = 0; st < SEG_STAGES; st++)
            if (hi[st] - lo[st] > max_rows[st]) max_rows[st] = hi[st] - lo[st];
    }
}

/* Carves the segment buffers from s->q and the transformer's (tt steps) from tr, the ping-pong
 * buffer the last stage leaves free. */
static void carve_state(enc_state *s, const enc_config *c, const int64_t *max_rows, float *tr,
                        size_t tt) {
    const size_t h = (size_t)c->hidden_size, nt = (size_t)s->n_threads;
    float *at = s->q;
    int ch = c->n_filters;
    for (int st = 0; st < SEG_STAGES; st++, ch *= 2) {
        s->seg_in[st] = carve(&at, (size_t)max_rows[st] * ch);
        s->seg_hid[st] = carve(&at, (size_t)max_rows[st] * (ch / c->compress));
    }
    at = tr;
    s->x = carve(&at, tt * h);
    s->hbuf = carve(&at, tt * h);
    s->qb = carve(&at, tt * h);
    s->kb = carve(&at, tt * h);
    s->vb = carve(&at, tt * h);
    s->att = carve(&at, nt * tt * tt);
    s->ff = carve(&at, tt * (size_t)c->intermediate_size);
    s->rope_c = carve(&at, tt * (size_t)c->head_dim / 2);
    s->rope_s = carve(&at, tt * (size_t)c->head_dim / 2);
    s->xs = carve(&at, tt * (size_t)c->codebook_dim);
    s->dist = carve(&at, tt * (size_t)c->codebook_size);
}

/* Sizes every buffer by walking the SEANet geometry once. Fresh pages cost a fault and a clear
 * each, so only p, q and the conv scratch are allocated: the segment buffers live in q (free
 * while the first stages run into p), the transformer and RVQ buffers in whichever of p and q
 * does not hold the SEANet output. */
static int enc_state_init(enc_state *s, const enc_config *c, int64_t n, int n_threads) {
    memset(s, 0, sizeof *s);
    s->n_threads = n_threads;
    size_t need_p = 0, need_q = 0, scratch = 0;
    int64_t tl[N_STAGES + 1];
    stage_lengths(c, n, tl);
    int64_t t = n;
    int ch = c->n_filters;
#define NEED(is_p, v) do { size_t v_ = (v); if (is_p) { if (v_ > need_p) need_p = v_; } \
                           else if (v_ > need_q) need_q = v_; } while (0)
#define SCRATCH(cv) do { if (qvk_conv_chunk_scratch(&(cv)) > scratch) scratch = qvk_conv_chunk_scratch(&(cv)); } while (0)
#define ROUND16(v) (((size_t)(v) + 15) / 16 * 16)
    qvk_conv cv = causal(1, ch, c->kernel_size, 1, 1, QVK_ACT_NONE, t);
    SCRATCH(cv);
    int64_t max_rows[SEG_STAGES];
    seg_max_rows(c, tl, max_rows);
    size_t seg_total = 0;
    int cur_p = 1;   /* which ping-pong buffer holds the stage input (stage SEG_STAGES: p) */
    for (int st = 0; st < N_STAGES; st++) {
        int hid = ch / c->compress, dil = 1;
        for (int j = 0; j < c->n_residual_layers; j++, dil *= c->dilation_growth_rate) {
            cv = causal(ch, hid, c->residual_kernel_size, 1, dil, QVK_ACT_ELU, t);
            SCRATCH(cv);
        }
        if (st < SEG_STAGES)
            seg_total += ROUND16((size_t)max_rows[st] * ch) + ROUND16((size_t)max_rows[st] * hid);
        else
            NEED(!cur_p, (size_t)hid * t);
        cv = causal(hid, ch, 1, 1, 1, QVK_ACT_ELU, t);
        SCRATCH(cv);
        cv = causal(ch, 2 * ch, 2 * c->ratios[st], c->ratios[st], 1, QVK_ACT_ELU, t);
        SCRATCH(cv);
        t = qvk_conv1d_out_len(&cv, t);
        ch *= 2;
        if (st + 1 == SEG_STAGES) {
            NEED(1, (size_t)ch * t);
        } else if (st >= SEG_STAGES) {
            NEED(!cur_p, (size_t)ch * t);
            cur_p = !cur_p;
        }
    }
    cv = causal(ch, c->hidden_size, c->last_kernel_size, 1, 1, QVK_ACT_ELU, t); /* → s->x */
    SCRATCH(cv);
    cv = causal(c->hidden_size, c->hidden_size, 4, 2, 1, QVK_ACT_NONE, t);      /* → cur */
    SCRATCH(cv);
    NEED(cur_p, (size_t)c->hidden_size * t);
    size_t tt = (size_t)t, h = (size_t)c->hidden_size, nt = (size_t)n_threads;
    size_t tr_total = 5 * ROUND16(tt * h) + ROUND16(nt * tt * tt) +
                      ROUND16(tt * (size_t)c->intermediate_size) +
                      2 * ROUND16(tt * (size_t)c->head_dim / 2) +
                      ROUND16(tt * (size_t)c->codebook_dim) + ROUND16(tt * (size_t)c->codebook_size);
    NEED(!cur_p, tr_total);
    NEED(0, seg_total);
#undef NEED
#undef SCRATCH
#undef ROUND16
    s->p = qvk_alloc(need_p * sizeof(float));
    s->q = qvk_alloc(need_q * sizeof(float));
    s->scratch = qvk_alloc(scratch * nt * sizeof(float));
    if (!s->p || !s->q || !s->scratch) {
        enc_state_free(s);
        return -1;
    }
    carve_state(s, c, max_rows, cur_p ? s->q : s->p, tt);
    return 0;
}

/* Row blocks: one per thread (each sgemm call repacks its weights, so fewer, taller calls are
 * cheaper); per-element sums do not depend on the row split (see conv.c). */

typedef struct layer_job layer_job;
struct layer_job {
    const enc_config *c;
    const layer_w *L;
    enc_state *s;
    int t, window;
    void (*rows)(const layer_job *j, int a, int b); /* the row phase rows_run runs */
};

static void row_block(int t, int blk, int n_blk, int *a, int *b) {
    int n = (t + n_blk - 1) / n_blk;
    *a = blk * n < t ? blk * n : t;
    *b = *a + n < t ? *a + n : t;
}

/* Runs j->rows on this thread's block of rows. */
static void rows_run(int ith, int nth, void *arg) {
    const layer_job *j = arg;
    int a, b;
    row_block(j->t, ith, nth, &a, &b);
    if (b > a) j->rows(j, a, b);
}

/* x[i, k] += ls[k]·y[i, k] for n rows of h: a layer-scaled residual. */
static void add_scaled(float *x, const float *ls, const float *y, size_t n, int h) {
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < h; k++) x[i * h + k] += ls[k] * y[i * h + k];
}

/* Phase 1 (rows): h = LN(x); q, k, v projections; RoPE on q and k. */
static void qkv_rows(const layer_job *j, int a, int b) {
    const enc_config *c = j->c;
    const layer_w *L = j->L;
    enc_state *s = j->s;
    int h = c->hidden_size, hd = c->head_dim;
    size_t o = (size_t)a * h;
    for (int i = a; i < b; i++)
        qvk_layernorm(s->hbuf + (size_t)i * h, s->x + (size_t)i * h, L->ln1_w, L->ln1_b, h, c->norm_eps);
    qvk_sgemm(0, 1, b - a, h, h, 1.0f, s->hbuf + o, h, L->wq, h, 0.0f, s->qb + o, h);
    qvk_sgemm(0, 1, b - a, h, h, 1.0f, s->hbuf + o, h, L->wk, h, 0.0f, s->kb + o, h);
    qvk_sgemm(0, 1, b - a, h, h, 1.0f, s->hbuf + o, h, L->wv, h, 0.0f, s->vb + o, h);
    for (int i = a; i < b; i++) {
        const float *rc = s->rope_c + (size_t)i * hd / 2, *rs = s->rope_s + (size_t)i * hd / 2;
        qvk_rope_apply(s->qb + (size_t)i * h, c->n_heads, hd, rc, rs);
        qvk_rope_apply(s->kb + (size_t)i * h, c->n_heads, hd, rc, rs);
    }
}

/* Phase 2 (heads): causal (optionally windowed) softmax attention; head outputs into hbuf. */
static void attn_run(int ith, int nth, void *arg) {
    const layer_job *j = arg;
    const enc_config *c = j->c;
    enc_state *s = j->s;
    int h = c->hidden_size, hd = c->head_dim, t = j->t;
    size_t tt = (size_t)t;
    float *att = s->att + (size_t)ith * tt * tt;
    float scale = 1.0f / sqrtf((float)hd);
    /* query blocks of QB rows only need keys up to the block's end (causal): half the work */
    enum { QB = 128 };
    for (int hh = ith; hh < c->n_heads; hh += nth) {
        const float *qh = s->qb + hh * hd, *kh = s->kb + hh * hd, *vh = s->vb + hh * hd;
        for (int a = 0; a < t; a += QB) {
            int b = a + QB < t ? a + QB : t;
            qvk_sgemm(0, 1, b - a, b, hd, scale, qh + (size_t)a * h, h, kh, h, 0.0f, att, t);
            for (int i = a; i < b; i++) {
                float *row = att + (size_t)(i - a) * tt;
                int j0 = j->window > 0 && i - j->window + 1 > 0 ? i - j->window + 1 : 0;
                for (int k = 0; k < j0; k++) row[k] = 0.0f;
                qvk_softmax(row + j0, i + 1 - j0);
                for (int k = i + 1; k < b; k++) row[k] = 0.0f;
            }
            qvk_sgemm(0, 0, b - a, hd, b, 1.0f, att, t, vh, h, 0.0f,
                      s->hbuf + (size_t)a * h + hh * hd, h);
        }
    }
}

/* Phase 3 (rows): x += ls1 ⊙ Wo·attn; x += ls2 ⊙ fc2(gelu(fc1(LN(x)))). */
static void out_mlp_rows(const layer_job *j, int a, int b) {
    const enc_config *c = j->c;
    const layer_w *L = j->L;
    enc_state *s = j->s;
    int h = c->hidden_size, f = c->intermediate_size;
    size_t o = (size_t)a * h, n = (size_t)(b - a);
    qvk_sgemm(0, 1, b - a, h, h, 1.0f, s->hbuf + o, h, L->wo, h, 0.0f, s->qb + o, h);
    add_scaled(s->x + o, L->ls1, s->qb + o, n, h);
    for (size_t i = 0; i < n; i++)
        qvk_layernorm(s->hbuf + o + i * h, s->x + o + i * h, L->ln2_w, L->ln2_b, h, c->norm_eps);
    float *ff = s->ff + (size_t)a * f;
    qvk_sgemm(0, 1, b - a, f, h, 1.0f, s->hbuf + o, h, L->fc1, h, 0.0f, ff, f);
    qvk_gelu_erf(ff, (int)(n * f));
    qvk_sgemm(0, 1, b - a, h, f, 1.0f, ff, f, L->fc2, f, 0.0f, s->qb + o, h);
    add_scaled(s->x + o, L->ls2, s->qb + o, n, h);
}

/* MimiTransformerLayer: x + ls1 ⊙ Attn(LN(x)); x + ls2 ⊙ fc2(gelu(fc1(LN(x)))), x [T, H]. */
static void transformer_layer(qvk_pool *pool, const enc_config *c, const layer_w *L, enc_state *s,
                              int t, int window) {
    layer_job j = {.c = c, .L = L, .s = s, .t = t, .window = window, .rows = qkv_rows};
    qvk_pool_run(pool, rows_run, &j);
    qvk_pool_run(pool, attn_run, &j);
    j.rows = out_mlp_rows;
    qvk_pool_run(pool, rows_run, &j);
}

/* Nearest codebook row for each of n vectors r [n, D]: argmin ‖r − e‖². The sgemm form
 * ‖e‖² − 2 r·e ranks candidates; those within a small margin of the best are re-ranked with the
 * exact distance in double, so f32 cancellation cannot pick the wrong row. */
static void nearest(int32_t *codes, int code_stride, const float *r, int n, const float *e,
                    const float *e_sq, int n_e, int d, float *dist) {
    qvk_sgemm(0, 1, n, n_e, d, -2.0f, r, d, e, d, 0.0f, dist, n_e);
    for (int i = 0; i < n; i++) {
        float *row = dist + (size_t)i * n_e;
        double r2 = 0.0;
        for (int j = 0; j < d; j++) r2 += (double)r[(size_t)i * d + j] * r[(size_t)i * d + j];
        float best = INFINITY;
        for (int k = 0; k < n_e; k++) {
            row[k] += e_sq[k];
            if (row[k] < best) best = row[k];
        }
        float margin = 1e-4f * (float)(r2 + fabs(best)) + 1e-6f;
        double best_exact = INFINITY;
        int best_k = 0;
        for (int k = 0; k < n_e; k++) {
            if (row[k] > best + margin) continue;
            double acc = 0.0;
            for (int j = 0; j < d; j++) {
                double dl = (double)r[(size_t)i * d + j] - e[(size_t)k * d + j];
                acc += dl * dl;
            }
            if (acc < best_exact) {
                best_exact = acc;
                best_k = k;
            }
        }
        codes[(size_t)i * code_stride] = best_k;
    }
}

typedef struct {
    const qva_speech_encoder *se;
    enc_state *s;
    const float *z;   /* [tq, H] downsampled latents */
    int32_t *codes;
    int tq;
} rvq_job;

/* Split RVQ per block of frames: semantic code 0 from its own projection, then the acoustic
 * residual chain (a separate projection of the same latent) for codes 1..15. */
static void rvq_run(int ith, int nth, void *arg) {
    const rvq_job *j = arg;
    const enc_config *c = &j->se->cfg;
    const enc_weights *w = &j->se->w;
    int h = c->hidden_size, d = c->codebook_dim, ne = c->codebook_size, nc = c->n_codes;
    size_t cb = (size_t)ne * d;
    {
        int a, b;
        row_block(j->tq, ith, nth, &a, &b);
        if (b <= a) return;
        const float *z = j->z + (size_t)a * h;
        float *xs = j->s->xs + (size_t)a * d, *dist = j->s->dist + (size_t)a * ne;
        int32_t *codes = j->codes + (size_t)a * nc;
        qvk_sgemm(0, 1, b - a, d, h, 1.0f, z, h, w->proj_sem, h, 0.0f, xs, d);
        nearest(codes, nc, xs, b - a, w->codebook, w->codebook_sq, ne, d, dist);
        qvk_sgemm(0, 1, b - a, d, h, 1.0f, z, h, w->proj_ac, h, 0.0f, xs, d);
        for (int g = 1; g < nc; g++) {
            const float *e = w->codebook + (size_t)g * cb;
            nearest(codes + g, nc, xs, b - a, e, w->codebook_sq + (size_t)g * ne, ne, d, dist);
            for (int i = 0; i < b - a; i++) {
                const float *row = e + (size_t)codes[(size_t)i * nc + g] * d;
                for (int k = 0; k < d; k++) xs[(size_t)i * d + k] -= row[k];
            }
        }
    }
}

/* Rows [u0, u1) of a zero-padded conv's output (geometry cv over t_in input rows) into y
 * [u1 − u0, c_out], reading x, which holds input rows [x0, ...) [·, c_in]: the rows outside
 * [0, t_in) become the conv's own zero padding, so each row is computed as in the whole-length
 * conv. */
static void conv_rows(qvk_pool *pool, const qvk_conv *cv, int64_t t_in, float *y, const float *x,
                      int64_t x0, int64_t u0, int64_t u1, const float *w, const float *b,
                      float *scratch) {
    int64_t k_eff = (int64_t)(cv->k - 1) * cv->dilation + 1;
    int64_t lo = u0 * cv->stride - cv->pad_left, hi = (u1 - 1) * cv->stride - cv->pad_left + k_eff;
    int64_t s_lo = lo < 0 ? 0 : lo, s_hi = hi < t_in ? hi : t_in;
    qvk_conv l = *cv;
    l.pad_left = (int)(s_lo - lo);
    l.pad_right = (int)(hi - s_hi);
    qvk_conv1d_chunked_tm(pool, &l, y, cv->c_out, x + (size_t)(s_lo - x0) * cv->c_in, cv->c_in, s_hi - s_lo,
                  w, b, scratch);
}

/* conv0 and stages 0 .. SEG_STAGES − 1, segment by segment, into out [t[SEG_STAGES], C]. */
static void seanet_segmented(const qva_speech_encoder *se, qvk_pool *pool, enc_state *s,
                             const float *x, const int64_t *t, float *out) {
    const enc_config *c = &se->cfg;
    const enc_weights *w = &se->w;
    int64_t t_out = t[SEG_STAGES];
    int c_last = c->n_filters << SEG_STAGES;
    for (int64_t a = 0; a < t_out; a += SEG_ROWS) {
        int64_t b = a + SEG_ROWS < t_out ? a + SEG_ROWS : t_out;
        int64_t lo[SEG_STAGES], hi[SEG_STAGES];
        seg_ranges(c, t, a, b, lo, hi);
        int ch = c->n_filters;
        qvk_conv cv = causal(1, ch, c->kernel_size, 1, 1, QVK_ACT_NONE, t[0]);
        conv_rows(pool, &cv, t[0], s->seg_in[0], x, 0, lo[0], hi[0], w->conv0.w, w->conv0.b, s->scratch);
        for (int st = 0; st < SEG_STAGES; st++) {
            int hid = ch / c->compress, dil = 1;
            float *in = s->seg_in[st], *hb = s->seg_hid[st];
            int64_t valid = lo[st]; /* rows [valid, hi) of in are this stage's current values */
            for (int j = 0; j < c->n_residual_layers; j++, dil *= c->dilation_growth_rate) {
                cv = causal(ch, hid, c->residual_kernel_size, 1, dil, QVK_ACT_ELU, t[st]);
                int64_t r0 = valid == 0 ? 0 : valid + cv.pad_left;
                conv_rows(pool, &cv, t[st], hb, in, lo[st], r0, hi[st], w->stage[st].res[j][0].w,
                          w->stage[st].res[j][0].b, s->scratch);
                cv = causal(hid, ch, 1, 1, 1, QVK_ACT_ELU, t[st]);
                cv.residual = 1;
                conv_rows(pool, &cv, t[st], in + (size_t)(r0 - lo[st]) * ch, hb, r0, r0, hi[st],
                          w->stage[st].res[j][1].w, w->stage[st].res[j][1].b, s->scratch);
                valid = r0;
            }
            cv = causal(ch, 2 * ch, 2 * c->ratios[st], c->ratios[st], 1, QVK_ACT_ELU, t[st]);
            int last = st + 1 == SEG_STAGES;
            int64_t o0 = last ? a : lo[st + 1], o1 = last ? b : hi[st + 1];
            float *dst = last ? out + (size_t)a * c_last : s->seg_in[st + 1];
            conv_rows(pool, &cv, t[st], dst, in, lo[st], o0, o1, w->stage[st].down.w,
                      w->stage[st].down.b, s->scratch);
            ch *= 2;
        }
    }
}

int qva_speech_encoder_encode(const qva_speech_encoder *se, qvk_pool *pool, int32_t *codes,
                              const float *x, int64_t n, char *err, size_t err_size) {
    const enc_config *c = &se->cfg;
    const enc_weights *w = &se->w;
    if (n <= 0) {
        snprintf(err, err_size, "speech encoder: empty input");
        return -1;
    }
    enc_state s;
    if (enc_state_init(&s, c, n, qvk_pool_threads(pool))) {
        snprintf(err, err_size, "speech encoder: out of memory for %lld samples", (long long)n);
        return -1;
    }
    /* SEANet, time-major [T, C]: the first stages in segments into s.p, then cur/oth alternate
     * between the two ping-pong buffers */
    int64_t tl[N_STAGES + 1];
    stage_lengths(c, n, tl);
    seanet_segmented(se, pool, &s, x, tl, s.p);
    float *cur = s.p, *oth = s.q;
    int64_t t = tl[SEG_STAGES];
    int ch = c->n_filters << SEG_STAGES;
    qvk_conv cv;
    for (int st = SEG_STAGES; st < N_STAGES; st++) {
        int hid = ch / c->compress, dil = 1;
        for (int j = 0; j < c->n_residual_layers; j++, dil *= c->dilation_growth_rate) {
            cv = causal(ch, hid, c->residual_kernel_size, 1, dil, QVK_ACT_ELU, t);
            qvk_conv1d_chunked_tm(pool, &cv, oth, hid, cur, ch, t, w->stage[st].res[j][0].w,
                          w->stage[st].res[j][0].b, s.scratch);
            cv = causal(hid, ch, 1, 1, 1, QVK_ACT_ELU, t);
            cv.residual = 1;
            qvk_conv1d_chunked_tm(pool, &cv, cur, ch, oth, hid, t, w->stage[st].res[j][1].w,
                          w->stage[st].res[j][1].b, s.scratch);
        }
        cv = causal(ch, 2 * ch, 2 * c->ratios[st], c->ratios[st], 1, QVK_ACT_ELU, t);
        int64_t t2 = qvk_conv1d_out_len(&cv, t);
        qvk_conv1d_chunked_tm(pool, &cv, oth, 2 * ch, cur, ch, t, w->stage[st].down.w, w->stage[st].down.b,
                      s.scratch);
        float *tmp = cur;
        cur = oth;
        oth = tmp;
        t = t2;
        ch *= 2;
    }
    int h = c->hidden_size, tf = (int)t;
    cv = causal(ch, h, c->last_kernel_size, 1, 1, QVK_ACT_ELU, t);
    qvk_conv1d_chunked_tm(pool, &cv, s.x, h, cur, ch, t, w->conv_last.w, w->conv_last.b, s.scratch);
    /* transformer on s.x [T, H] */
    for (int i = 0; i < tf; i++)
        qvk_rope_table(s.rope_c + (size_t)i * c->head_dim / 2, s.rope_s + (size_t)i * c->head_dim / 2,
                       c->head_dim, i, c->rope_theta);
    for (int l = 0; l < c->n_layers; l++) transformer_layer(pool, c, &w->layer[l], &s, tf, se->window);
    /* downsample 25 → 12.5 Hz: k4 s2, replicate padding, no bias */
    cv = causal(h, h, 4, 2, 1, QVK_ACT_NONE, t);
    cv.pad = QVK_PAD_REPLICATE;
    int tq = (int)qvk_conv1d_out_len(&cv, t);
    qvk_conv1d_chunked_tm(pool, &cv, cur, h, s.x, h, t, w->downsample, NULL, s.scratch);
    rvq_job rj = {.se = se, .s = &s, .z = cur, .codes = codes, .tq = tq};
    qvk_pool_run(pool, rvq_run, &rj);
    enc_state_free(&s);
    return 0;
}
