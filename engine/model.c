/* model.c — loads the talker and code predictor of a Qwen3-TTS-12Hz checkpoint (§1, §2.1), plain
 * or compressed (docs/compression.md: q4 linears, token map, fewer layers, per-layer MLP widths).
 *
 * The file is first checked exactly against the manifest built from the config (manifest.h), then
 * each tensor is bound by name. Matrices stay bf16 or packed 4-bit in the mmap (borrowed); norms,
 * biases and q4 group scales are widened to owned f32 copies. The int8 and q4 views quantize the
 * bf16 matrices in RAM once, for the sessions that ask. The public accessors (qv_model_type...)
 * read the checkpoint's config.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/manifest.h"
#include "checkpoint/prepared.h"
#include "engine/model.h"
#include "kernels/q4.h"
#include "engine/speech_decoder.h"
#include "engine/tokenizer.h"
#include "kernels/q8.h"
#include "util/sha256.h"

/* ==== tensor lookup helpers ================================================================== */

typedef struct {
    qv_model *m;
    char *err;
    size_t err_size;
    int failed;
} loader;

static const uint16_t *get_matrix(loader *L, const char *name, int64_t rows, int64_t cols) {
    if (L->failed) return NULL;
    int64_t shape[2] = {rows, cols};
    const qvm_tensor *t =
        qvm_st_expect(L->m->ck->st, name, QVM_DTYPE_BF16, 2, shape, L->err, L->err_size);
    if (!t) {
        L->failed = 1;
        return NULL;
    }
    return (const uint16_t *)t->data;
}

/* An owned f32 copy of t (any float dtype), freed at unload. */
static float *keep_f32(loader *L, const qvm_tensor *t, const char *name) {
    float *f = qvm_tensor_to_f32(t);
    float **grown =
        f ? realloc(L->m->f32_copies, sizeof(float *) * (size_t)(L->m->n_f32_copies + 1)) : NULL;
    if (!grown) {
        qvk_free(f);
        snprintf(L->err, L->err_size, "%s: out of memory converting %s", L->m->ck->dir, name);
        L->failed = 1;
        return NULL;
    }
    L->m->f32_copies = grown;
    L->m->f32_copies[L->m->n_f32_copies++] = f;
    return f;
}

static float *get_vector(loader *L, const char *name, int64_t n) {
    if (L->failed) return NULL;
    const qvm_tensor *t = qvm_st_find(L->m->ck->st, name);
    if (!t || t->n_dims != 1 || t->shape[0] != n || !qvm_dtype_is_float(t->dtype)) {
        if (!t)
            snprintf(L->err, L->err_size, "%s/model.safetensors: tensor %s: missing", L->m->ck->dir,
                     name);
        else
            snprintf(L->err, L->err_size,
                     "%s/model.safetensors: tensor %s: expected [%lld] float, found %d-d %s",
                     L->m->ck->dir, name, (long long)n, t->n_dims, qvm_dtype_name(t->dtype));
        L->failed = 1;
        return NULL;
    }
    return keep_f32(L, t, name);
}

/* A q4 scales/biases tensor as bf16: borrowed from the mmap when it is bf16 (the usual MLX
 * layout), else an owned copy (an F16 or F32 scale is rounded to bf16: 2^-9 relative, against
 * q4's own ~7 %). */
static const uint16_t *get_bf16(loader *L, const qvm_tensor *t, const char *name) {
    if (t->dtype == QVM_DTYPE_BF16) return t->data;
    const size_t n = t->n_bytes / qvm_dtype_size(t->dtype);
    float *f = qvm_tensor_to_f32(t);
    uint16_t *h = f ? qvk_alloc(n * sizeof *h) : NULL;
    uint16_t **grown =
        h ? realloc(L->m->weight_copies, sizeof *grown * (size_t)(L->m->n_weight_copies + 1))
          : NULL;
    if (!grown) {
        qvk_free(f), qvk_free(h);
        snprintf(L->err, L->err_size, "%s: out of memory converting %s", L->m->ck->dir, name);
        L->failed = 1;
        return NULL;
    }
    qvk_f32_to_bf16(h, f, n);
    qvk_free(f);
    qvm_st_drop_pages(t->data, t->n_bytes); /* RSS holds the bf16 copy only */
    L->m->weight_copies = grown;
    L->m->weight_copies[L->m->n_weight_copies++] = h;
    return h;
}

/* A linear weight NAME (".weight"): bf16, or MLX q4 when NAME's ".scales" is present (the
 * manifest check already fixed every shape and dtype). */
static void get_linear(loader *L, qve_mat *w, const char *name, int64_t rows, int64_t cols) {
    char sb[300];
    const size_t n = strlen(name) - strlen(".weight");
    snprintf(sb, sizeof sb, "%.*s.scales", (int)n, name);
    const qvm_tensor *s = L->m->ck->cfg.quant_bits ? qvm_st_find(L->m->ck->st, sb) : NULL;
    if (!s) {
        w->bf16 = get_matrix(L, name, rows, cols);
        return;
    }
    if (L->failed) return;
    const int64_t shape[2] = {rows, cols / 8};
    const qvm_tensor *q =
        qvm_st_expect(L->m->ck->st, name, QVM_DTYPE_U32, 2, shape, L->err, L->err_size);
    w->q4 = q ? q->data : NULL;
    w->q4_s = q ? get_bf16(L, s, sb) : NULL;
    snprintf(sb, sizeof sb, "%.*s.biases", (int)n, name);
    const qvm_tensor *b = qvm_st_find(L->m->ck->st, sb);
    w->q4_b = b && w->q4_s ? get_bf16(L, b, sb) : NULL;
    if (!w->q4 || !w->q4_b) L->failed = 1;
}

static void load_stack(loader *L, qve_stack *s, const qvm_stack_config *c, const char *prefix) {
    s->cfg = *c;
    s->layers = calloc((size_t)c->num_hidden_layers, sizeof(qvm_layer));
    if (!s->layers) {
        snprintf(L->err, L->err_size, "%s: out of memory", L->m->ck->dir);
        L->failed = 1;
        return;
    }
    char n[256];
    for (int i = 0; i < c->num_hidden_layers; i++)
        for (int k = 0; k < QVM_LAYER_N_TENSORS; k++) {
            int64_t shape[2];
            qve_mat *mat;
            float **vec;
            qvm_layer_tensor(c, prefix, i, k, n, sizeof n, shape);
            qve_layer_field(&s->layers[i], k, &mat, &vec);
            if (mat) get_linear(L, mat, n, shape[0], shape[1]);
            else *vec = get_vector(L, n, shape[0]);
        }
    snprintf(n, sizeof n, "%s.norm.weight", prefix);
    s->norm = get_vector(L, n, c->hidden_size);
}

void qve_layer_field(qvm_layer *l, int k, qve_mat **mat, float ***vec) {
    qve_mat *const m[QVM_LAYER_N_TENSORS] = {
        NULL, &l->q_proj, &l->k_proj, &l->v_proj, &l->o_proj, NULL, NULL, NULL,
        &l->gate_proj, &l->up_proj, &l->down_proj};
    float **const v[QVM_LAYER_N_TENSORS] = {
        &l->input_layernorm, NULL, NULL, NULL, NULL, &l->q_norm, &l->k_norm,
        &l->post_attention_layernorm, NULL, NULL, NULL};
    *mat = m[k];
    *vec = v[k];
}

/* ==== API ==================================================================================== */

int qve_model_load(qv_model *m, qvm_ckpt *ck, char *err, size_t err_size) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->q8_lock, NULL);
    pthread_mutex_init(&m->dec_lock, NULL);
    pthread_mutex_init(&m->tok_lock, NULL);
    m->ck = qvm_ckpt_ref(ck);
    const qvm_model_config *c = &ck->cfg;
    if (c->talker.num_code_groups != QV_N_CODEBOOKS || c->talker.vocab_size < 2048 + 1024 ||
        c->code_predictor.vocab_size <= 0) {
        snprintf(err, err_size,
                 "%s/config.json: talker_config: expected 16 code groups and a "
                 "3072-entry codec vocab, found %d and %d",
                 ck->dir, c->talker.num_code_groups, c->talker.vocab_size);
        return -1;
    }

    qvm_manifest man = {0};
    int bad = qvm_manifest_model(&man, c, err, err_size) ||
              qvm_manifest_compressed(&man, c, m->ck->st, err, err_size) ||
              qvm_manifest_check_st(&man, m->ck->st, 1, err, err_size);
    qvm_manifest_free(&man);
    if (bad) return -1;

    loader L = {m, err, err_size, 0};
    const int64_t H = c->talker.hidden_size;
    qve_talker *t = &m->talker;
    load_stack(&L, &t->stack, &c->talker, "talker.model");
    if (!L.failed && qvm_textside_bind(&m->text, m->ck->st, c, err, err_size)) L.failed = 1;
    t->text_embedding = m->text.text_embedding;
    t->text_token_map = m->text.text_token_map;
    t->fc1 = m->text.fc1, t->fc1_bias = m->text.fc1_bias;
    t->fc2 = m->text.fc2, t->fc2_bias = m->text.fc2_bias;
    t->codec_embedding = m->text.codec_embedding;
    get_linear(&L, &t->codec_head, "talker.codec_head.weight", c->talker.vocab_size, H);

    qve_code_predictor *cp = &m->cp;
    const int64_t CH = c->code_predictor.hidden_size, CV = c->code_predictor.vocab_size;
    load_stack(&L, &cp->stack, &c->code_predictor, "talker.code_predictor.model");
    char n[160];
    for (int g = 0; g < QV_N_CODEBOOKS - 1; g++) {
        snprintf(n, sizeof n, "talker.code_predictor.model.codec_embedding.%d.weight", g);
        cp->codec_embedding[g] = get_matrix(&L, n, CV, H);
        snprintf(n, sizeof n, "talker.code_predictor.lm_head.%d.weight", g);
        get_linear(&L, &cp->lm_head[g], n, CV, CH);
    }
    if (!L.failed && H != CH) { /* 1.7B: small_to_mtp_projection; absent (identity) when equal */
        get_linear(&L, &cp->mtp_proj, "talker.code_predictor.small_to_mtp_projection.weight", CH,
                   H);
        cp->mtp_bias = get_vector(&L, "talker.code_predictor.small_to_mtp_projection.bias", CH);
    }
    if (L.failed) return -1;

    return 0;
}

struct qve_tok *qve_model_tok(const qv_model *shared, char *err, size_t err_size) {
    /* the tokenizer is opened once, under the lock, then only used under it */
    qv_model *m = (qv_model *)(uintptr_t)shared;
    pthread_mutex_lock(&m->tok_lock);
    if (!m->tok) m->tok = qve_tok_open_files(&m->ck->tok_files, err, err_size);
    if (!m->tok) pthread_mutex_unlock(&m->tok_lock);
    return m->tok;
}

void qve_model_tok_done(const qv_model *shared) {
    qv_model *m = (qv_model *)(uintptr_t)shared;
    pthread_mutex_unlock(&m->tok_lock);
}

static void free_view(struct qve_view *v) {
    if (!v) return;
    free(v->talker.stack.layers);
    free(v->cp.stack.layers);
    if (v->cache) qvm_prep_close(v->cache);
    else qvk_free(v->q), qvk_free(v->scale);
    qvk_free(v->text_w);
    free(v);
}

void qve_model_drop_views(qv_model *m) {
    free_view(m->q8), free_view(m->q4);
    m->q8 = m->q4 = NULL;
}

void qve_model_unload(qv_model *m) {
    if (!m) return;
    qve_model_drop_views(m);
    pthread_mutex_destroy(&m->q8_lock);
    qve_decoder_free(m->dec);
    pthread_mutex_destroy(&m->dec_lock);
    qve_tok_free(m->tok);
    pthread_mutex_destroy(&m->tok_lock);
    for (int i = 0; i < m->n_f32_copies; i++)
        qvk_free(m->f32_copies[i]);
    free(m->f32_copies);
    for (int i = 0; i < m->n_weight_copies; i++)
        qvk_free(m->weight_copies[i]);
    free(m->weight_copies);
    qvm_textside_free(&m->text);
    free(m->talker.stack.layers);
    free(m->cp.stack.layers);
    qvm_ckpt_free(m->ck);
    memset(m, 0, sizeof *m);
}

/* ==== quantized views ======================================================================= */

/* Calls fn on every matrix of a view the quantized matvecs may serve, with its shape: the decode
 * matrices, plus (all != 0, the q4 view) the mtp projection. */
static void each_matrix(struct qve_view *v, int all,
                        void (*fn)(qve_mat *, int, int, void *), void *ctx) {
    qve_stack *stacks[2] = {&v->talker.stack, &v->cp.stack};
    for (int k = 0; k < 2; k++) {
        const qvm_stack_config *c = &stacks[k]->cfg;
        const int H = c->hidden_size;
        const int qd = c->num_attention_heads * c->head_dim;
        const int kvd = c->num_key_value_heads * c->head_dim;
        for (int l = 0; l < c->num_hidden_layers; l++) {
            qvm_layer *L = &stacks[k]->layers[l];
            const int I = qvm_layer_intermediate(c, l);
            fn(&L->q_proj, qd, H, ctx), fn(&L->k_proj, kvd, H, ctx), fn(&L->v_proj, kvd, H, ctx);
            fn(&L->o_proj, H, qd, ctx);
            fn(&L->gate_proj, I, H, ctx), fn(&L->up_proj, I, H, ctx), fn(&L->down_proj, H, I, ctx);
        }
    }
    const int H = v->talker.stack.cfg.hidden_size, CH = v->cp.stack.cfg.hidden_size;
    fn(&v->talker.codec_head, v->talker.stack.cfg.vocab_size, H, ctx);
    for (int g = 0; g < QV_N_CODEBOOKS - 1; g++)
        fn(&v->cp.lm_head[g], v->cp.stack.cfg.vocab_size, CH, ctx);
    if (!all) return;
    fn(&v->cp.mtp_proj, CH, H, ctx); /* skipped when absent (no bf16) */
}

struct q_fill {
    qvk_pool *pool;
    int q4;
    size_t n_q, n_s; /* running byte / scale offsets (or totals when counting) */
    uint8_t *q;
    void *scale;        /* f32 (int8) or bf16 (q4) */
    qvk_q8_quant *mats; /* int8: the matrices, quantized in one pool dispatch */
    int n_mats;
    int mapped; /* the arrays are the cache file's: set the pointers only */
};

static int quantizable(const qve_mat *w, int n_in, const struct q_fill *f) {
    return w->bf16 && n_in % (f->q4 ? QVK_Q4_GROUP : QVK_Q8_GROUP) == 0 &&
           n_in <= (f->q4 ? QVK_Q4_MAX_IN : QVK_Q8_MAX_IN);
}

static void count_matrix(qve_mat *w, int n_out, int n_in, void *ctx) {
    struct q_fill *f = ctx;
    if (!quantizable(w, n_in, f)) return;
    f->n_q += (size_t)n_out * n_in / (f->q4 ? 2 : 1);
    f->n_s += f->q4 ? (size_t)n_out * (n_in / QVK_Q4_GROUP) * 2 : (size_t)n_out;
    f->n_mats++;
}

static void fill_matrix(qve_mat *w, int n_out, int n_in, void *ctx) {
    struct q_fill *f = ctx;
    if (!quantizable(w, n_in, f)) return;
    uint8_t *q = f->q + f->n_q;
    if (f->q4) {
        uint16_t *s = (uint16_t *)f->scale + f->n_s;
        const size_t n_g = (size_t)n_out * (n_in / QVK_Q4_GROUP);
        if (!f->mapped) qvk_q4_quantize_bf16(f->pool, q, s, s + n_g, w->bf16, n_out, n_in);
        w->q4 = q, w->q4_s = s, w->q4_b = s + n_g;
    } else {
        float *s = (float *)f->scale + f->n_s;
        if (f->mats) f->mats[f->n_mats] = (qvk_q8_quant){(int8_t *)q, s, w->bf16, n_out, n_in};
        w->q8 = (const int8_t *)q, w->q8_scale = s;
    }
    count_matrix(w, n_out, n_in, ctx);
}

static qvm_layer *copy_layers(const qve_stack *s) {
    qvm_layer *l = malloc(sizeof *l * (size_t)s->cfg.num_hidden_layers);
    if (l) memcpy(l, s->layers, sizeof *l * (size_t)s->cfg.num_hidden_layers);
    return l;
}

/* A quantized view's cache id: the model fingerprint, the file identities (prepared.h), the sizes
 * and a probe of the quantizer (a fixed matrix quantized by it, int8 or q4). -1 when not cached:
 * caching off, or a weight delta changed the weights in RAM. */
static int view_cache_id(const qv_model *m, qvk_pool *pool, int q4, size_t n_q, size_t n_s,
                         qvm_prep_id *id) {
    if (m->wdelta_on) return -1;
    struct {
        uint8_t fp[32];
        uint64_t n_q, n_s;
        int8_t q[2 * QVK_Q8_GROUP];
        float s[2];
        uint16_t s4[2 * 2 * QVK_Q8_GROUP / QVK_Q4_GROUP]; /* q4: the scales, then biases */
    } k;
    memset(&k, 0, sizeof k);
    memcpy(k.fp, m->ck->fingerprint, sizeof k.fp);
    k.n_q = n_q, k.n_s = n_s;
    uint16_t w[2 * QVK_Q8_GROUP];
    for (int i = 0; i < 2 * QVK_Q8_GROUP; i++)
        w[i] = (uint16_t)(0x3c00 + (i * 193) % 1531) ^ (uint16_t)(i & 1) << 15;
    const int probe = q4 ? qvk_q4_quantize_bf16(pool, (uint8_t *)k.q, k.s4,
                                                k.s4 + 2 * QVK_Q8_GROUP / QVK_Q4_GROUP, w, 2,
                                                QVK_Q8_GROUP)
                         : qvk_q8_quantize_bf16(pool, k.q, k.s, w, 2, QVK_Q8_GROUP);
    return probe || qvm_prep_id_make(id, q4 ? "q4" : "int8", m->ck->st, &k, sizeof k) ? -1 : 0;
}

/* Elements of the q4 view's text projection rounding (fc1 then fc2), 0 when it stays bf16: its
 * width is no multiple of the q4 group, or the checkpoint's is q4 already (owned_w). */
static size_t text_q4_n(const qv_model *m) {
    const int TH = m->ck->cfg.text_hidden_size, H = m->ck->cfg.talker.hidden_size;
    if (m->text.owned_w || TH % QVK_Q4_GROUP || TH > QVK_Q4_MAX_IN) return 0;
    return (size_t)TH * TH + (size_t)H * TH;
}

static void point_text(struct qve_view *v, const qv_model *m, const uint16_t *t) {
    const size_t TH = (size_t)m->ck->cfg.text_hidden_size;
    v->talker.fc1 = t, v->talker.fc2 = t + TH * TH;
}

/* The q4 view's text projection: the q4 rounding a q4 checkpoint's has (textside.h), widened to
 * bf16 as the prompt path reads it. -1 when out of memory. */
static int round_text_q4(struct qve_view *v, const qv_model *m, qvk_pool *pool) {
    const int TH = m->ck->cfg.text_hidden_size, H = m->ck->cfg.talker.hidden_size;
    v->text_w = qvk_alloc(text_q4_n(m) * sizeof *v->text_w);
    if (!v->text_w ||
        qvm_textside_round_q4(pool, v->text_w, v->talker.fc1, TH, TH) ||
        qvm_textside_round_q4(pool, v->text_w + (size_t)TH * TH, v->talker.fc2, H, TH))
        return -1;
    point_text(v, m, v->text_w);
    return 0;
}

static struct qve_view *make_view(const qv_model *m, int q4, qvk_pool *pool) {
    struct qve_view *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->talker = m->talker, v->cp = m->cp;
    v->talker.stack.layers = copy_layers(&m->talker.stack);
    v->cp.stack.layers = copy_layers(&m->cp.stack);
    struct q_fill f = {pool, q4, 0, 0, NULL, NULL, NULL, 0, 0};
    if (!v->talker.stack.layers || !v->cp.stack.layers) {
        free_view(v);
        return NULL;
    }
    each_matrix(v, q4, count_matrix, &f);
    const size_t n_sb = f.n_s * (q4 ? sizeof(uint16_t) : sizeof(float)); /* scale bytes */
    const size_t n_t = q4 ? text_q4_n(m) : 0;
    /* the quantized matrices of an earlier run, mapped from the cache when they fit */
    qvm_prep_id id;
    const int cached = !view_cache_id(m, pool, q4, f.n_q, f.n_s, &id);
    if (cached && (v->cache = qvm_prep_open(&id))) {
        const void *q = qvm_prep_take(v->cache, f.n_q), *s = qvm_prep_take(v->cache, n_sb);
        const void *t = n_t ? qvm_prep_take(v->cache, n_t * sizeof *v->text_w) : q;
        if (q && s && t) {
            f = (struct q_fill){pool, q4, 0, 0, (uint8_t *)(uintptr_t)q, (void *)(uintptr_t)s,
                                NULL, 0, 1};
            each_matrix(v, q4, fill_matrix, &f); /* pointers only: nothing is written */
            if (n_t) point_text(v, m, t);
            v->n_bytes = f.n_q;
            return v;
        }
        qvm_prep_close(v->cache);
        v->cache = NULL;
    }
    v->q = qvk_alloc(f.n_q ? f.n_q : 1);
    v->scale = qvk_alloc(n_sb ? n_sb : 1);
    if (!v->q || !v->scale) {
        free_view(v);
        return NULL;
    }
    v->n_bytes = f.n_q;
    qvk_q8_quant *mats = q4 ? NULL : malloc(sizeof *mats * (size_t)(f.n_mats ? f.n_mats : 1));
    if (!q4 && !mats) {
        free_view(v);
        return NULL;
    }
    f = (struct q_fill){pool, q4, 0, 0, v->q, v->scale, mats, 0, 0};
    each_matrix(v, q4, fill_matrix, &f);
    if (n_t && round_text_q4(v, m, pool)) { /* bf16 in the file */
        free(mats);
        free_view(v);
        return NULL;
    }
    if (!q4) qvk_q8_quantize_multi(pool, mats, f.n_mats); /* shapes checked by quantizable */
    free(mats);
    if (cached)
        qvm_prep_save(&id,
                      (qvm_prep_array[]){{v->q, f.n_q}, {v->scale, n_sb},
                                         {v->text_w, n_t * sizeof *v->text_w}},
                      n_t ? 3 : 2);
    return v;
}

int qve_model_quantize(const qv_model *shared, int quant, qvk_pool *pool) {
    if (quant != QV_QUANT_INT8 && quant != QV_QUANT_Q4) return 0;
    /* the model is otherwise read-only: a view is added once, under the lock, never changed */
    qv_model *m = (qv_model *)(uintptr_t)shared;
    struct qve_view **slot = quant == QV_QUANT_Q4 ? &m->q4 : &m->q8;
    pthread_mutex_lock(&m->q8_lock);
    if (!*slot) *slot = make_view(m, quant == QV_QUANT_Q4, pool);
    const int rc = *slot ? 0 : -1;
    pthread_mutex_unlock(&m->q8_lock);
    return rc;
}

static const struct qve_view *view(const qv_model *m, int quant) {
    return quant == QV_QUANT_INT8 ? m->q8 : quant == QV_QUANT_Q4 ? m->q4 : NULL;
}

const qve_talker *qve_model_talker(const qv_model *m, int quant) {
    return view(m, quant) ? &view(m, quant)->talker : &m->talker;
}

const qve_code_predictor *qve_model_cp(const qv_model *m, int quant) {
    return view(m, quant) ? &view(m, quant)->cp : &m->cp;
}

/* ==== public accessors ======================================================================= */

const char *qv_model_type(const qv_model *m) {
    return m->ck->cfg.tts_model_type;
}
const char *qv_model_size(const qv_model *m) {
    return m->ck->cfg.tts_model_size;
}
void qv_model_fingerprint(const qv_model *m, char hex[65]) {
    qvu_hex(m->ck->fingerprint, 32, hex);
}
int qv_model_hidden_size(const qv_model *m) {
    return m->ck->cfg.talker.hidden_size;
}
int qv_model_text_hidden_size(const qv_model *m) {
    return m->ck->cfg.text_hidden_size;
}
int qv_model_n_speakers(const qv_model *m) {
    return m->ck->cfg.n_speakers;
}

const char *qv_model_speaker(const qv_model *m, int i) {
    return i >= 0 && i < m->ck->cfg.n_speakers ? m->ck->cfg.spk_id[i].name : NULL;
}

/* Selectable languages: "auto" plus every codec_language_id key that is not a dialect. */
int qv_model_n_languages(const qv_model *m) {
    int n = 1;
    for (int i = 0; i < m->ck->cfg.n_languages; i++)
        if (!strstr(m->ck->cfg.codec_language_id[i].name, "dialect")) n++;
    return n;
}

const char *qv_model_language(const qv_model *m, int i) {
    if (i == 0) return "auto";
    for (int j = 0; j < m->ck->cfg.n_languages; j++)
        if (!strstr(m->ck->cfg.codec_language_id[j].name, "dialect") && --i == 0)
            return m->ck->cfg.codec_language_id[j].name;
    return NULL;
}
