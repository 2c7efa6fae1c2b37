/* ecapa.c — ECAPA-TDNN speaker encoder (§5.2), mirrors Qwen3TTSSpeakerEncoder: TDNN →
 * 3 SE-Res2Net blocks → MFA → attentive statistics pooling → 1×1 fc. Every conv is a chunked
 * im2col + sgemm (qvk_conv1d_chunked) with reflect "same" padding; weights are widened from BF16 to f32
 * once at load. The ASP TDNN sees [x; μ; σ] with μ, σ constant over time, so its 4608-wide
 * input is split: W_x·x by sgemm plus one matvec for the constant part (a third of the work).
 */
#include "features/features.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/manifest.h"
#include "kernels/kernels.h"
#include "checkpoint/safetensors.h"

#define N_SE_BLOCKS 3
#define MAX_SCALE 16

typedef struct {
    int mel_dim, enc_dim;
    int channels[5], kernel_sizes[5], dilations[5];
    int attention_channels, res2net_scale, se_channels;
} ecapa_config;

typedef struct { float *w, *b; } conv_weights; /* w [out, in, k] f32 (owned), b [out] */

typedef struct {
    conv_weights tdnn1;                  /* blocks.i.tdnn1.conv        [C, C, 1] */
    conv_weights res2net[MAX_SCALE - 1]; /* blocks.i.res2net_block.blocks.j.conv [C/s, C/s, k] */
    conv_weights tdnn2;                  /* blocks.i.tdnn2.conv        [C, C, 1] */
    conv_weights se1, se2;               /* blocks.i.se_block.conv1/2  [se, C, 1], [C, se, 1] */
} se_block_weights;

typedef struct {
    conv_weights block0;                 /* blocks.0.conv   [C0, mel, k0] */
    se_block_weights se[N_SE_BLOCKS];
    conv_weights mfa;                    /* mfa.conv        [C4, 3·C, 1] */
    conv_weights asp_tdnn;               /* asp.tdnn.conv   [att, 3·C4, 1] */
    conv_weights asp_conv;               /* asp.conv        [C4, att, 1] */
    conv_weights fc;                     /* fc              [enc_dim, 2·C4, 1] */
} ecapa_weights;

struct qva_ecapa {
    ecapa_config cfg;
    ecapa_weights w;
    float *arena;    /* all weights, one allocation */
};

typedef struct {     /* activations for one forward of n_frames */
    int n_frames;
    float *x0;       /* [C, T] block 0 output */
    float *cat;      /* [3·C, T] outputs of the SE blocks (MFA input); first the mel [128, T] */
    float *h1, *h2;  /* [C, T] inside a block */
    float *tmp;      /* [C/s, T] Res2Net chunk input */
    float *mfa;      /* [C4, T] */
    float *att;      /* [C4, T] attention logits → weights (the larger of att·T and C4·T) */
    float *hid;      /* [att, T] */
    float *scratch;  /* conv scratch */
    float *vec;      /* small vectors: 8·C4 */
} ecapa_state;

/* ---- loading ---------------------------------------------------------------------------- */

/* Widens tensor `name` (BF16 as shipped; F16/F32 accepted too, §1.6) of the given shape into
 * the arena. */
static float *load_f32(float **arena, const qvm_st *st, const char *name, int n_dims,
                       const int64_t *shape, char *err, size_t err_size) {
    const qvm_tensor *t = qvm_st_find(st, name);
    enum qvm_dtype dt = t && (t->dtype == QVM_DTYPE_F32 || t->dtype == QVM_DTYPE_F16)
                            ? t->dtype : QVM_DTYPE_BF16;
    t = qvm_st_expect(st, name, dt, n_dims, shape, err, err_size);
    if (!t) return NULL;
    size_t n = t->n_bytes / qvm_dtype_size(dt);
    float *dst = *arena;
    if (dt == QVM_DTYPE_BF16) qvk_bf16_to_f32(dst, t->data, n);
    else if (dt == QVM_DTYPE_F16) qvk_f16_to_f32(dst, t->data, n);
    else memcpy(dst, t->data, n * sizeof(float));
    *arena += n;
    return dst;
}

/* The conv module of kind k (manifest.h: k.weight [c_out, c_in, k], k.bias [c_out]). */
static int load_conv(conv_weights *cw, float **arena, const qvm_st *st, enum qvm_tensor_kind kind,
                     int block, int j, int c_out, int c_in, int k, char *err, size_t err_size) {
    char m[160], name[168];
    int64_t shape[3] = {c_out, c_in, k};
    qvm_tensor_name(m, sizeof m, kind, block, j);
    snprintf(name, sizeof name, "%s.weight", m);
    cw->w = load_f32(arena, st, name, 3, shape, err, err_size);
    if (!cw->w) return -1;
    snprintf(name, sizeof name, "%s.bias", m);
    cw->b = load_f32(arena, st, name, 1, shape, err, err_size);
    return cw->b ? 0 : -1;
}

static size_t weight_floats(const ecapa_config *c) {
    int ch = c->channels[1], sub = ch / c->res2net_scale, c4 = c->channels[4];
    size_t n = (size_t)c->channels[0] * (c->mel_dim * c->kernel_sizes[0] + 1);
    for (int b = 1; b <= N_SE_BLOCKS; b++) {
        n += 2 * (size_t)ch * (ch + 1);
        n += (size_t)(c->res2net_scale - 1) * sub * (sub * c->kernel_sizes[b] + 1);
        n += (size_t)c->se_channels * (ch + 1) + (size_t)ch * (c->se_channels + 1);
    }
    n += (size_t)c4 * (3 * ch + 1);
    n += (size_t)c->attention_channels * (3 * c4 + 1);
    n += (size_t)c4 * (c->attention_channels + 1);
    n += (size_t)c->enc_dim * (2 * c4 + 1);
    return n;
}

qva_ecapa *qva_ecapa_load(const qvm_ckpt *ck, char *err, size_t err_size) {
    const qvm_model_config *mc = &ck->cfg;
    const char *dir = ck->dir;
    if (!mc->has_speaker_encoder || mc->variant != QVF_VARIANT_BASE) {
        snprintf(err, err_size,
                 "%s: not a Base model (tts_model_type \"%s\"): only Base checkpoints have the "
                 "speaker encoder that cloning needs",
                 dir, mc->tts_model_type);
        return NULL;
    }
    qva_ecapa *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_size, "%s: out of memory", dir);
        return NULL;
    }
    ecapa_config *c = &e->cfg;
    c->mel_dim = mc->mel_dim;
    c->enc_dim = mc->enc_dim;
    memcpy(c->channels, mc->enc_channels, sizeof c->channels);
    memcpy(c->kernel_sizes, mc->enc_kernel_sizes, sizeof c->kernel_sizes);
    memcpy(c->dilations, mc->enc_dilations, sizeof c->dilations);
    c->attention_channels = mc->enc_attention_channels;
    c->res2net_scale = mc->enc_res2net_scale;
    c->se_channels = mc->enc_se_channels;
    int ch = c->channels[1];
    if (c->mel_dim != QVA_MEL_BINS || c->res2net_scale < 2 || c->res2net_scale > MAX_SCALE ||
        ch % c->res2net_scale || c->channels[2] != ch || c->channels[3] != ch ||
        c->channels[0] != ch || c->channels[4] <= 0 || c->enc_dim <= 0 ||
        c->kernel_sizes[4] != 1) {
        snprintf(err, err_size, "%s/config.json: unsupported speaker_encoder_config", dir);
        free(e);
        return NULL;
    }
    for (int i = 0; i < 4; i++)
        if (c->kernel_sizes[i] % 2 == 0 || c->kernel_sizes[i] < 1 || c->dilations[i] < 1) {
            snprintf(err, err_size, "%s/config.json: speaker encoder kernels must be odd", dir);
            free(e);
            return NULL;
        }
    e->arena = qvk_alloc(weight_floats(c) * sizeof(float));
    const qvm_st *st = ck->st;
    if (!e->arena) {
        snprintf(err, err_size, "%s: out of memory", dir);
        qva_ecapa_free(e);
        return NULL;
    }
    float *a = e->arena;
    ecapa_weights *w = &e->w;
    int sub = ch / c->res2net_scale, c4 = c->channels[4], att = c->attention_channels;
    int rc = load_conv(&w->block0, &a, st, QVM_T_ECAPA_BLOCK0, 0, 0, ch, c->mel_dim,
                       c->kernel_sizes[0], err, err_size);
    for (int b = 1; b <= N_SE_BLOCKS && !rc; b++) {
        se_block_weights *s = &w->se[b - 1];
        rc = load_conv(&s->tdnn1, &a, st, QVM_T_ECAPA_TDNN1, b, 0, ch, ch, 1, err, err_size);
        for (int j = 0; j < c->res2net_scale - 1 && !rc; j++)
            rc = load_conv(&s->res2net[j], &a, st, QVM_T_ECAPA_RES2NET, b, j, sub, sub,
                           c->kernel_sizes[b], err, err_size);
        if (!rc) rc = load_conv(&s->tdnn2, &a, st, QVM_T_ECAPA_TDNN2, b, 0, ch, ch, 1, err, err_size);
        if (!rc)
            rc = load_conv(&s->se1, &a, st, QVM_T_ECAPA_SE1, b, 0, c->se_channels, ch, 1, err,
                           err_size);
        if (!rc)
            rc = load_conv(&s->se2, &a, st, QVM_T_ECAPA_SE2, b, 0, ch, c->se_channels, 1, err,
                           err_size);
    }
    if (!rc) rc = load_conv(&w->mfa, &a, st, QVM_T_ECAPA_MFA, 0, 0, c4, 3 * ch, 1, err, err_size);
    if (!rc)
        rc = load_conv(&w->asp_tdnn, &a, st, QVM_T_ECAPA_ASP_TDNN, 0, 0, att, 3 * c4, 1, err,
                       err_size);
    if (!rc) rc = load_conv(&w->asp_conv, &a, st, QVM_T_ECAPA_ASP_CONV, 0, 0, c4, att, 1, err, err_size);
    if (!rc)
        rc = load_conv(&w->fc, &a, st, QVM_T_ECAPA_FC, 0, 0, c->enc_dim, 2 * c4, 1, err, err_size);
    if (rc) {
        qva_ecapa_free(e);
        return NULL;
    }
    return e;
}

void qva_ecapa_free(qva_ecapa *e) {
    if (!e) return;
    qvk_free(e->arena);
    free(e);
}

int qva_ecapa_dim(const qva_ecapa *e) { return e->cfg.enc_dim; }

/* ---- forward ---------------------------------------------------------------------------- */

static void state_free(ecapa_state *s) {
    qvk_free(s->x0);
    qvk_free(s->cat);
    qvk_free(s->h1);
    qvk_free(s->h2);
    qvk_free(s->tmp);
    qvk_free(s->mfa);
    if (s->att != s->cat) qvk_free(s->att);
    if (s->hid != s->h1) qvk_free(s->hid);
    qvk_free(s->scratch);
    qvk_free(s->vec);
}

static qvk_conv tdnn(int c_in, int c_out, int k, int dilation) {
    qvk_conv cv = {.c_in = c_in, .c_out = c_out, .k = k, .stride = 1, .dilation = dilation,
                   .pad = QVK_PAD_REFLECT, .act_out = QVK_ACT_RELU};
    qvk_conv_same(&cv);
    return cv;
}

static int state_init(ecapa_state *s, const ecapa_config *c, int t, int n_threads) {
    memset(s, 0, sizeof *s);
    s->n_frames = t;
    int ch = c->channels[1], c4 = c->channels[4], sub = ch / c->res2net_scale;
    size_t scratch = 0, v;
    qvk_conv cv = tdnn(c->mel_dim, ch, c->kernel_sizes[0], c->dilations[0]);
    scratch = qvk_conv_chunk_scratch(&cv);
    for (int b = 1; b <= N_SE_BLOCKS; b++) {
        cv = tdnn(sub, sub, c->kernel_sizes[b], c->dilations[b]);
        if ((v = qvk_conv_chunk_scratch(&cv)) > scratch) scratch = v;
    }
    cv = tdnn(3 * ch, c4, 1, 1);
    if ((v = qvk_conv_chunk_scratch(&cv)) > scratch) scratch = v;
    cv = tdnn(ch, ch, 1, 1);
    if ((v = qvk_conv_chunk_scratch(&cv)) > scratch) scratch = v;
    cv = tdnn(c->attention_channels, c4, 1, 1);
    if ((v = qvk_conv_chunk_scratch(&cv)) > scratch) scratch = v;
    size_t tt = (size_t)t;
    s->x0 = qvk_alloc(ch * tt * sizeof(float));
    /* cat also holds the transposed mel input before block 0 runs */
    size_t cat_rows = 3 * (size_t)ch > (size_t)c->mel_dim ? 3 * (size_t)ch : (size_t)c->mel_dim;
    s->cat = qvk_alloc(cat_rows * tt * sizeof(float));
    s->h1 = qvk_alloc(ch * tt * sizeof(float));
    s->h2 = qvk_alloc(ch * tt * sizeof(float));
    s->tmp = qvk_alloc(sub * tt * sizeof(float));
    s->mfa = qvk_alloc(c4 * tt * sizeof(float));
    /* fresh pages cost a fault and a clear each (~15 % of the forward): the attention buffers
     * reuse cat (dead once MFA has read it) and h1 (dead after the last block) */
    s->att = cat_rows >= (size_t)c4 ? s->cat : qvk_alloc(c4 * tt * sizeof(float));
    s->hid = ch >= c->attention_channels ? s->h1
                                                 : qvk_alloc((size_t)c->attention_channels * tt * sizeof(float));
    s->scratch = qvk_alloc(scratch * (size_t)n_threads * sizeof(float));
    s->vec = qvk_alloc((8 * (size_t)c4 + (size_t)c->enc_dim + c->attention_channels) * sizeof(float));
    if (!s->x0 || !s->cat || !s->h1 || !s->h2 || !s->tmp || !s->mfa || !s->att || !s->hid ||
        !s->scratch || !s->vec) {
        state_free(s);
        return -1;
    }
    return 0;
}

/* SEResNet block (Qwen3TTS SqueezeExcitationRes2NetBlock): out = SE(tdnn2(Res2Net(tdnn1(x)))) + x */
static void se_block(qvk_pool *pool, const ecapa_config *c, const se_block_weights *w,
                     ecapa_state *s, float *out, const float *in, int k, int d) {
    int t = s->n_frames, ch = c->channels[1], scale = c->res2net_scale, sub = ch / scale;
    size_t tt = (size_t)t;
    qvk_conv cv = tdnn(ch, ch, 1, 1);
    qvk_conv1d_chunked(pool, &cv, s->h1, t, in, t, t, w->tdnn1.w, w->tdnn1.b, s->scratch);
    /* Res2Net: y0 = x0, y1 = f0(x1), yi = f_{i−1}(xi + y_{i−1}) */
    memcpy(s->h2, s->h1, sub * tt * sizeof(float));
    qvk_conv rc = tdnn(sub, sub, k, d);
    for (int i = 1; i < scale; i++) {
        const float *xi = s->h1 + (size_t)i * sub * tt;
        float *yi = s->h2 + (size_t)i * sub * tt;
        const float *src = xi;
        if (i >= 2) {
            const float *prev = s->h2 + (size_t)(i - 1) * sub * tt;
            for (size_t j = 0; j < sub * tt; j++) s->tmp[j] = xi[j] + prev[j];
            src = s->tmp;
        }
        qvk_conv1d_chunked(pool, &rc, yi, t, src, t, t, w->res2net[i - 1].w, w->res2net[i - 1].b, s->scratch);
    }
    qvk_conv1d_chunked(pool, &cv, out, t, s->h2, t, t, w->tdnn2.w, w->tdnn2.b, s->scratch);
    /* squeeze-excitation over the time mean */
    float *mean = s->vec, *z = s->vec + ch, *g = z + c->se_channels;
    for (int i = 0; i < ch; i++) {
        double acc = 0.0;
        const float *r = out + (size_t)i * tt;
        for (int j = 0; j < t; j++) acc += r[j];
        mean[i] = (float)(acc / t);
    }
    qvk_matvec_f32(NULL, z, w->se1.w, mean, w->se1.b, c->se_channels, ch);
    for (int i = 0; i < c->se_channels; i++) z[i] = z[i] > 0.0f ? z[i] : 0.0f;
    qvk_matvec_f32(NULL, g, w->se2.w, z, w->se2.b, ch, c->se_channels);
    for (int i = 0; i < ch; i++) {
        float gi = 1.0f / (1.0f + expf(-g[i]));
        float *r = out + (size_t)i * tt;
        const float *x = in + (size_t)i * tt;
        for (int j = 0; j < t; j++) r[j] = r[j] * gi + x[j];
    }
}

/* mean and std over time of x[C, T] with per-(c, t) weights wt (NULL = uniform 1/T). Each sum
 * runs in four interleaved double accumulators (one chain was latency-bound: ~6 % of the
 * forward); the order is fixed, so results do not depend on the thread split. */
static void weighted_stats(float *mu, float *sd, const float *x, const float *wt, int n_ch, int t) {
    const double u = 1.0 / t;
    for (int i = 0; i < n_ch; i++) {
        const float *r = x + (size_t)i * t;
        const float *wr = wt ? wt + (size_t)i * t : NULL;
        double a[4] = {0.0, 0.0, 0.0, 0.0}, b[4] = {0.0, 0.0, 0.0, 0.0};
        int j;
        for (j = 0; j + 4 <= t; j += 4)
            for (int q = 0; q < 4; q++) a[q] += (wr ? wr[j + q] : u) * r[j + q];
        double m = (a[0] + a[1]) + (a[2] + a[3]);
        for (; j < t; j++) m += (wr ? wr[j] : u) * r[j];
        for (j = 0; j + 4 <= t; j += 4)
            for (int q = 0; q < 4; q++) {
                double dlt = r[j + q] - m;
                b[q] += (wr ? wr[j + q] : u) * dlt * dlt;
            }
        double v = (b[0] + b[1]) + (b[2] + b[3]);
        for (; j < t; j++) {
            double dlt = r[j] - m;
            v += (wr ? wr[j] : u) * dlt * dlt;
        }
        mu[i] = (float)m;
        sd[i] = (float)sqrt(v > 1e-12 ? v : 1e-12);
    }
}

/* ASP pieces shared by the pool: the attention TDNN over column blocks, then per-channel softmax
 * over time and the weighted statistics. */
typedef struct {
    const ecapa_config *c;
    const ecapa_weights *w;
    ecapa_state *s;
    const float *cvec;
    float *pooled;
} asp_job;

#define ASP_BLOCK 256 /* time columns per attention-TDNN sgemm */

static void asp_tdnn_run(int ith, int nth, void *arg) {
    const asp_job *j = arg;
    int t = j->s->n_frames, c4 = j->c->channels[4], att = j->c->attention_channels;
    /* blocks of one width for any thread count: each sgemm call is the same (see conv.c) */
    for (int a = ASP_BLOCK * ith; a < t; a += ASP_BLOCK * nth) {
        int b = a + ASP_BLOCK < t ? a + ASP_BLOCK : t;
        qvk_sgemm(0, 0, att, b - a, c4, 1.0f, j->w->asp_tdnn.w, 3 * c4, j->s->mfa + a, t, 0.0f,
                  j->s->hid + a, t);
        for (int o = 0; o < att; o++) {
            float *r = j->s->hid + (size_t)o * t;
            for (int i = a; i < b; i++) {
                float v = r[i] + j->cvec[o];
                r[i] = tanhf(v > 0.0f ? v : 0.0f);
            }
        }
    }
}

static void asp_pool_run(int ith, int nth, void *arg) {
    const asp_job *j = arg;
    int t = j->s->n_frames, c4 = j->c->channels[4];
    int a = c4 * ith / nth, b = c4 * (ith + 1) / nth;
    for (int i = a; i < b; i++) qvk_softmax(j->s->att + (size_t)i * t, t);
    if (b > a)
        weighted_stats(j->pooled + a, j->pooled + c4 + a, j->s->mfa + (size_t)a * t,
                       j->s->att + (size_t)a * t, b - a, t);
}

int qva_ecapa_forward(const qva_ecapa *e, qvk_pool *pool, float *xvec, const float *mel,
                      int n_frames, char *err, size_t err_size) {
    const ecapa_config *c = &e->cfg;
    const ecapa_weights *w = &e->w;
    if (n_frames < 5) {
        snprintf(err, err_size, "speaker encoder: too few mel frames (expected >= 5, found %d)",
                 n_frames);
        return -1;
    }
    ecapa_state s;
    if (state_init(&s, c, n_frames, qvk_pool_threads(pool))) {
        snprintf(err, err_size, "speaker encoder: out of memory for %d frames", n_frames);
        return -1;
    }
    int t = n_frames, ch = c->channels[1], c4 = c->channels[4], att = c->attention_channels;
    size_t tt = (size_t)t;
    /* mel [T, 128] → channels-first [128, T] (into cat, free at this point) */
    float *melT = s.cat;
    for (int f = 0; f < t; f++)
        for (int m = 0; m < c->mel_dim; m++) melT[(size_t)m * tt + f] = mel[(size_t)f * c->mel_dim + m];
    qvk_conv cv = tdnn(c->mel_dim, ch, c->kernel_sizes[0], c->dilations[0]);
    qvk_conv1d_chunked(pool, &cv, s.x0, t, melT, t, t, w->block0.w, w->block0.b, s.scratch);
    const float *in = s.x0;
    for (int b = 0; b < N_SE_BLOCKS; b++) {
        float *out = s.cat + (size_t)b * ch * tt;
        se_block(pool, c, &w->se[b], &s, out, in, c->kernel_sizes[b + 1], c->dilations[b + 1]);
        in = out;
    }
    cv = tdnn(3 * ch, c4, 1, 1);
    qvk_conv1d_chunked(pool, &cv, s.mfa, t, s.cat, t, t, w->mfa.w, w->mfa.b, s.scratch);
    /* attentive statistics pooling (global context) */
    float *mu = s.vec, *sd = mu + c4, *ctx = sd + c4, *pooled = ctx + 2 * c4;
    float *cvec = pooled + 2 * c4;
    weighted_stats(mu, sd, s.mfa, NULL, c4, t);
    memcpy(ctx, mu, c4 * sizeof(float));
    memcpy(ctx + c4, sd, c4 * sizeof(float));
    /* cvec = W[:, C4:3·C4] · [μ; σ] + b, the time-constant part of the TDNN */
    for (int o = 0; o < att; o++) {
        const float *wr = w->asp_tdnn.w + (size_t)o * 3 * c4 + c4;
        double acc = 0.0;
        for (int i = 0; i < 2 * c4; i++) acc += (double)wr[i] * ctx[i];
        cvec[o] = (float)acc + w->asp_tdnn.b[o];
    }
    asp_job job = {.c = c, .w = w, .s = &s, .cvec = cvec, .pooled = pooled};
    qvk_pool_run(pool, asp_tdnn_run, &job);
    qvk_conv ac = {.c_in = att, .c_out = c4, .k = 1, .stride = 1, .dilation = 1};
    qvk_conv1d_chunked(pool, &ac, s.att, t, s.hid, t, t, w->asp_conv.w, w->asp_conv.b, s.scratch);
    qvk_pool_run(pool, asp_pool_run, &job);
    qvk_matvec_f32(NULL, xvec, w->fc.w, pooled, w->fc.b, c->enc_dim, 2 * c4);
    state_free(&s);
    return 0;
}
