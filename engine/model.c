/* model.c — loads the talker and code predictor of a Qwen3-TTS-12Hz checkpoint (§1, §2.1).
 *
 * The file is first checked exactly against the manifest built from the config (manifest.h), then
 * each tensor is bound by name. Matrices stay bf16 in the mmap (borrowed; other dtypes are refused
 * for now); norms and biases are widened to owned f32 copies.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/manifest.h"
#include "engine/model.h"
#include "engine/speech_decoder.h"
#include "kernels/q8.h"

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
    const qve_tensor *t =
        qve_st_expect(L->m->st, name, QVE_DTYPE_BF16, 2, shape, L->err, L->err_size);
    if (!t) {
        L->failed = 1;
        return NULL;
    }
    return (const uint16_t *)t->data;
}

static float *get_vector(loader *L, const char *name, int64_t n) {
    if (L->failed) return NULL;
    const qve_tensor *t = qve_st_find(L->m->st, name);
    if (!t || t->n_dims != 1 || t->shape[0] != n || t->dtype == QVE_DTYPE_I64) {
        if (!t)
            snprintf(L->err, L->err_size, "%s/model.safetensors: tensor %s: missing", L->m->dir,
                     name);
        else
            snprintf(L->err, L->err_size,
                     "%s/model.safetensors: tensor %s: expected [%lld] float, found %d-d %s",
                     L->m->dir, name, (long long)n, t->n_dims, qve_dtype_name(t->dtype));
        L->failed = 1;
        return NULL;
    }
    float *f = qve_tensor_to_f32(t);
    float **grown =
        f ? realloc(L->m->f32_copies, sizeof(float *) * (size_t)(L->m->n_f32_copies + 1)) : NULL;
    if (!grown) {
        qvk_free(f);
        snprintf(L->err, L->err_size, "%s: out of memory converting %s", L->m->dir, name);
        L->failed = 1;
        return NULL;
    }
    L->m->f32_copies = grown;
    L->m->f32_copies[L->m->n_f32_copies++] = f;
    return f;
}

static void load_stack(loader *L, qve_stack *s, const qve_stack_config *c, const char *prefix) {
    s->cfg = *c;
    s->layers = calloc((size_t)c->num_hidden_layers, sizeof(qve_layer));
    if (!s->layers) {
        snprintf(L->err, L->err_size, "%s: out of memory", L->m->dir);
        L->failed = 1;
        return;
    }
    char n[256];
    for (int i = 0; i < c->num_hidden_layers; i++)
        for (int k = 0; k < QVE_LAYER_N_TENSORS; k++) {
            int64_t shape[2];
            qve_mat *mat;
            float **vec;
            qve_layer_tensor(c, prefix, i, k, n, sizeof n, shape);
            qve_layer_field(&s->layers[i], k, &mat, &vec);
            if (mat) mat->bf16 = get_matrix(L, n, shape[0], shape[1]);
            else *vec = get_vector(L, n, shape[0]);
        }
    snprintf(n, sizeof n, "%s.norm.weight", prefix);
    s->norm = get_vector(L, n, c->hidden_size);
}

void qve_layer_field(qve_layer *l, int k, qve_mat **mat, float ***vec) {
    qve_mat *const m[QVE_LAYER_N_TENSORS] = {
        NULL, &l->q_proj, &l->k_proj, &l->v_proj, &l->o_proj, NULL, NULL, NULL,
        &l->gate_proj, &l->up_proj, &l->down_proj};
    float **const v[QVE_LAYER_N_TENSORS] = {
        &l->input_layernorm, NULL, NULL, NULL, NULL, &l->q_norm, &l->k_norm,
        &l->post_attention_layernorm, NULL, NULL, NULL};
    *mat = m[k];
    *vec = v[k];
}

static int check_stack_config(const qve_stack_config *c, const char *dir, const char *what,
                              char *err, size_t err_size) {
    if (c->hidden_size <= 0 || c->num_hidden_layers <= 0 || c->num_attention_heads <= 0 ||
        c->num_key_value_heads <= 0 || c->head_dim <= 0 || (c->head_dim & 1) ||
        c->num_attention_heads % c->num_key_value_heads || c->intermediate_size <= 0) {
        snprintf(err, err_size, "%s/config.json: %s: inconsistent shape (heads %d/%d, head_dim %d)",
                 dir, what, c->num_attention_heads, c->num_key_value_heads, c->head_dim);
        return -1;
    }
    return 0;
}

/* ==== API ==================================================================================== */

int qve_model_load(qv_model *m, const char *dir, char *err, size_t err_size) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->q8_lock, NULL);
    pthread_mutex_init(&m->dec_lock, NULL);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    if (qve_model_config_load(&m->cfg, dir, err, err_size)) return -1;
    if (qve_generation_config_load(&m->gen, dir, err, err_size)) return -1;
    const qve_model_config *c = &m->cfg;
    if (check_stack_config(&c->talker, dir, "talker_config", err, err_size) ||
        check_stack_config(&c->code_predictor, dir, "code_predictor_config", err, err_size))
        return -1;
    if (c->talker.num_code_groups != QVE_N_GROUPS || c->talker.vocab_size < 2048 + 1024 ||
        c->code_predictor.vocab_size <= 0) {
        snprintf(err, err_size,
                 "%s/config.json: talker_config: expected 16 code groups and a "
                 "3072-entry codec vocab, found %d and %d",
                 dir, c->talker.num_code_groups, c->talker.vocab_size);
        return -1;
    }

    char path[1100];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &sb) != 0) snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    m->st = qve_st_open(path, err, err_size);
    if (!m->st) return -1;

    qve_manifest man = {0};
    int bad = qve_manifest_model(&man, c, err, err_size) ||
              qve_manifest_check_st(&man, m->st, 1, err, err_size);
    qve_manifest_free(&man);
    if (bad) return -1;

    loader L = {m, err, err_size, 0};
    const int64_t H = c->talker.hidden_size;
    qve_talker *t = &m->talker;
    load_stack(&L, &t->stack, &c->talker, "talker.model");
    if (!L.failed && qve_textside_bind(&m->text, m->st, c, err, err_size)) L.failed = 1;
    t->text_embedding = m->text.text_embedding;
    t->fc1 = m->text.fc1, t->fc1_bias = m->text.fc1_bias;
    t->fc2 = m->text.fc2, t->fc2_bias = m->text.fc2_bias;
    t->codec_embedding = m->text.codec_embedding;
    t->codec_head.bf16 = get_matrix(&L, "talker.codec_head.weight", c->talker.vocab_size, H);

    qve_code_predictor *cp = &m->cp;
    const int64_t CH = c->code_predictor.hidden_size, CV = c->code_predictor.vocab_size;
    load_stack(&L, &cp->stack, &c->code_predictor, "talker.code_predictor.model");
    char n[160];
    for (int g = 0; g < QVE_N_GROUPS - 1; g++) {
        snprintf(n, sizeof n, "talker.code_predictor.model.codec_embedding.%d.weight", g);
        cp->codec_embedding[g] = get_matrix(&L, n, CV, H);
        snprintf(n, sizeof n, "talker.code_predictor.lm_head.%d.weight", g);
        cp->lm_head[g].bf16 = get_matrix(&L, n, CV, CH);
    }
    if (!L.failed && H != CH) { /* 1.7B: small_to_mtp_projection; absent (identity) when equal */
        cp->mtp_proj =
            get_matrix(&L, "talker.code_predictor.small_to_mtp_projection.weight", CH, H);
        cp->mtp_bias = get_vector(&L, "talker.code_predictor.small_to_mtp_projection.bias", CH);
    }
    if (L.failed) return -1;

    return 0;
}

void qve_model_drop_q8(qv_model *m) {
    if (!m->q8) return;
    free(m->q8->talker.stack.layers);
    free(m->q8->cp.stack.layers);
    qvk_free(m->q8->q);
    qvk_free(m->q8->scale);
    free(m->q8);
    m->q8 = NULL;
}

void qve_model_unload(qv_model *m) {
    if (!m) return;
    qve_model_drop_q8(m);
    pthread_mutex_destroy(&m->q8_lock);
    qve_decoder_free(m->dec);
    pthread_mutex_destroy(&m->dec_lock);
    for (int i = 0; i < m->n_f32_copies; i++)
        qvk_free(m->f32_copies[i]);
    free(m->f32_copies);
    for (int i = 0; i < m->n_weight_copies; i++)
        qvk_free(m->weight_copies[i]);
    free(m->weight_copies);
    qve_textside_free(&m->text);
    free(m->talker.stack.layers);
    free(m->cp.stack.layers);
    qve_st_close(m->st);
    memset(m, 0, sizeof *m);
}

/* ==== int8 view ============================================================================== */

/* Calls fn on every decode matrix of a view (the ones the int8 matvec may serve) with its shape. */
static void each_matrix(struct qve_q8_view *v, void (*fn)(qve_mat *, int, int, void *), void *ctx) {
    qve_stack *stacks[2] = {&v->talker.stack, &v->cp.stack};
    for (int k = 0; k < 2; k++) {
        const qve_stack_config *c = &stacks[k]->cfg;
        const int H = c->hidden_size, I = c->intermediate_size;
        const int qd = c->num_attention_heads * c->head_dim;
        const int kvd = c->num_key_value_heads * c->head_dim;
        for (int l = 0; l < c->num_hidden_layers; l++) {
            qve_layer *L = &stacks[k]->layers[l];
            fn(&L->q_proj, qd, H, ctx), fn(&L->k_proj, kvd, H, ctx), fn(&L->v_proj, kvd, H, ctx);
            fn(&L->o_proj, H, qd, ctx);
            fn(&L->gate_proj, I, H, ctx), fn(&L->up_proj, I, H, ctx), fn(&L->down_proj, H, I, ctx);
        }
    }
    fn(&v->talker.codec_head, v->talker.stack.cfg.vocab_size, v->talker.stack.cfg.hidden_size, ctx);
    for (int g = 0; g < QVE_N_GROUPS - 1; g++)
        fn(&v->cp.lm_head[g], v->cp.stack.cfg.vocab_size, v->cp.stack.cfg.hidden_size, ctx);
}

struct q8_fill {
    size_t n_q, n_rows; /* running offsets (or totals when counting) */
    int8_t *q;
    float *scale;
    qvk_q8_quant *mats; /* filled: the matrices to quantize in one dispatch */
    int n_mats;
};

static int q8_fits(int n_in) {
    return n_in % QVK_Q8_GROUP == 0 && n_in <= QVK_Q8_MAX_IN;
}

static void count_matrix(qve_mat *w, int n_out, int n_in, void *ctx) {
    struct q8_fill *f = ctx;
    (void)w;
    if (!q8_fits(n_in)) return;
    f->n_q += (size_t)n_out * n_in;
    f->n_rows += (size_t)n_out;
    f->n_mats++;
}

static void fill_matrix(qve_mat *w, int n_out, int n_in, void *ctx) {
    struct q8_fill *f = ctx;
    if (!q8_fits(n_in)) return; /* stays bf16 */
    int8_t *q = f->q + f->n_q;
    float *s = f->scale + f->n_rows;
    f->mats[f->n_mats++] = (qvk_q8_quant){q, s, w->bf16, n_out, n_in};
    w->q8 = q, w->q8_scale = s;
    f->n_q += (size_t)n_out * n_in;
    f->n_rows += (size_t)n_out;
}

static qve_layer *copy_layers(const qve_stack *s) {
    qve_layer *l = malloc(sizeof *l * (size_t)s->cfg.num_hidden_layers);
    if (l) memcpy(l, s->layers, sizeof *l * (size_t)s->cfg.num_hidden_layers);
    return l;
}

int qve_model_quantize(const qv_model *shared, qvk_pool *pool) {
    /* the model is otherwise read-only: the view is added once, under the lock, never changed */
    qv_model *m = (qv_model *)(uintptr_t)shared;
    pthread_mutex_lock(&m->q8_lock);
    int rc = 0;
    if (!m->q8) {
        struct qve_q8_view *v = calloc(1, sizeof *v);
        rc = -1;
        if (v) {
            v->talker = m->talker, v->cp = m->cp;
            v->talker.stack.layers = copy_layers(&m->talker.stack);
            v->cp.stack.layers = copy_layers(&m->cp.stack);
            struct q8_fill f = {0};
            if (v->talker.stack.layers && v->cp.stack.layers) each_matrix(v, count_matrix, &f);
            v->q = qvk_alloc(f.n_q ? f.n_q : 1);
            v->scale = qvk_alloc((f.n_rows ? f.n_rows : 1) * sizeof(float));
            qvk_q8_quant *mats = malloc(sizeof *mats * (size_t)(f.n_mats ? f.n_mats : 1));
            if (v->talker.stack.layers && v->cp.stack.layers && v->q && v->scale && mats) {
                v->n_bytes = f.n_q;
                f = (struct q8_fill){0, 0, v->q, v->scale, mats, 0};
                each_matrix(v, fill_matrix, &f);
                qvk_q8_quantize_multi(pool, mats, f.n_mats); /* shapes checked by q8_fits */
                m->q8 = v;
                rc = 0;
            } else {
                free(v->talker.stack.layers), free(v->cp.stack.layers);
                qvk_free(v->q), qvk_free(v->scale), free(v);
            }
            free(mats);
        }
    }
    pthread_mutex_unlock(&m->q8_lock);
    return rc;
}

const qve_talker *qve_model_talker(const qv_model *m, int quant) {
    return quant == QV_QUANT_INT8 && m->q8 ? &m->q8->talker : &m->talker;
}

const qve_code_predictor *qve_model_cp(const qv_model *m, int quant) {
    return quant == QV_QUANT_INT8 && m->q8 ? &m->q8->cp : &m->cp;
}
