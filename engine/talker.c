/* talker.c — the Qwen3 decoder stack shared by the talker and the code predictor (§3.2), plus the
 * talker's text projection, codec embedding and codec head (§3.1).
 *
 * One forward path: a single token goes through fused bf16 matvecs (QKV and gate/up in one pool
 * dispatch each); a prefill of n > 1 tokens goes through the batched linears of kernels/gemm.c
 * (W read once for all tokens). Activations and the KV cache are f32.
 */
#include <math.h>
#include <string.h>

#include "engine/model.h"
#include "kernels/q4.h"
#include "kernels/q8.h"

/* ==== state ================================================================================== */

int qve_stack_state_init(qve_stack_state *s, const qve_stack *w, int max_ctx, int n_batch) {
    memset(s, 0, sizeof *s);
    s->w = w;
    s->max_ctx = max_ctx;
    s->n_batch = n_batch;
    const qvm_stack_config *c = &w->cfg;
    const size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t qd = (size_t)c->num_attention_heads * c->head_dim;
    const size_t kvd = (size_t)c->num_key_value_heads * c->head_dim;
    const size_t cache = (size_t)c->num_hidden_layers * (size_t)max_ctx * kvd * sizeof(float);
    s->k_cache = qvk_alloc(cache);
    s->v_cache = qvk_alloc(cache);
    s->h = qvk_alloc(H * sizeof(float));
    s->q = qvk_alloc(qd * sizeof(float));
    s->k = qvk_alloc(kvd * sizeof(float));
    s->v = qvk_alloc(kvd * sizeof(float));
    s->att = qvk_alloc(qd * sizeof(float));
    s->gate = qvk_alloc(I * sizeof(float));
    s->up = qvk_alloc(I * sizeof(float));
    s->attn_scratch = qvk_alloc((size_t)c->num_attention_heads * (size_t)max_ctx * sizeof(float));
    s->rope_c = qvk_alloc((size_t)c->head_dim / 2 * sizeof(float));
    s->rope_s = qvk_alloc((size_t)c->head_dim / 2 * sizeof(float));
    int ok = s->k_cache && s->v_cache && s->h && s->q && s->k && s->v && s->att && s->gate &&
             s->up && s->attn_scratch && s->rope_c && s->rope_s;
    if (ok && n_batch > 0) {
        const size_t n = (size_t)n_batch;
        /* batched linear scratch: packed X (bf16), or the prepared X (q4) */
        const int wide = (int)(qd > I ? qd : I);
        size_t wmax = qvk_linear_bf16_scratch(n_batch, (int)H, wide);
        size_t t = qvk_linear_bf16_scratch(n_batch, wide, (int)H);
        if (t > wmax) wmax = t;
        t = (qvk_q4_batch_scratch(n_batch, wide) + sizeof(float) - 1) / sizeof(float);
        if (t > wmax) wmax = t;
        s->bh = qvk_alloc(n * H * sizeof(float));
        s->bq = qvk_alloc(n * qd * sizeof(float));
        s->bk = qvk_alloc(n * kvd * sizeof(float));
        s->bv = qvk_alloc(n * kvd * sizeof(float));
        s->batt = qvk_alloc(n * qd * sizeof(float));
        s->bgate = qvk_alloc(n * I * sizeof(float));
        s->bup = qvk_alloc(n * I * sizeof(float));
        s->wscratch = qvk_alloc(wmax * sizeof(float));
        ok = s->bh && s->bq && s->bk && s->bv && s->batt && s->bgate && s->bup && s->wscratch;
    }
    if (!ok) {
        qve_stack_state_free(s);
        return -1;
    }
    return 0;
}

void qve_stack_state_free(qve_stack_state *s) {
    if (!s) return;
    float *bufs[] = {s->k_cache, s->v_cache, s->h,     s->q,   s->k,
                     s->v,       s->att,     s->gate,  s->up,  s->attn_scratch,
                     s->rope_c,  s->rope_s,  s->bh,    s->bq,  s->bk,
                     s->bv,      s->batt,    s->bgate, s->bup, s->wscratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        qvk_free(bufs[i]);
    memset(s, 0, sizeof *s);
}

/* ==== forward ================================================================================ */

/* The weight tag of a matrix for the decode matvec: int8 copy, else q4, else bf16. */
enum { TAG_BF16, TAG_Q8, TAG_Q4 };
static int tag(const qve_mat *w) {
    return w->q8 ? TAG_Q8 : w->q4 ? TAG_Q4 : TAG_BF16;
}

/* The one matvec entry of the decode path: one pool dispatch for a set sharing a weight tag
 * (QKV, gate/up), else one per matrix. n_mv <= 4. */
void qve_matvec(qvk_pool *pool, const float *x, int n_in, const qve_mv *mv, int n_mv) {
    const int t = tag(mv[0].w);
    for (int i = 1; i < n_mv; i++)
        if (tag(mv[i].w) != t) {
            for (int k = 0; k < n_mv; k++)
                qve_matvec(pool, x, n_in, &mv[k], 1);
            return;
        }
    if (t == TAG_Q8) {
        qvk_q8_mv q[4];
        for (int i = 0; i < n_mv; i++)
            q[i] = (qvk_q8_mv){mv[i].y, mv[i].w->q8, mv[i].w->q8_scale, mv[i].bias, mv[i].n_out};
        qvk_q8_matvec_multi(pool, x, n_in, q, n_mv);
    } else if (t == TAG_Q4) {
        qvk_q4_mv q[4];
        for (int i = 0; i < n_mv; i++)
            q[i] = (qvk_q4_mv){mv[i].y,    mv[i].w->q4,   mv[i].w->q4_s,
                               mv[i].w->q4_b, mv[i].bias, mv[i].n_out};
        qvk_q4_matvec_multi(pool, x, n_in, q, n_mv);
    } else {
        qvk_mv b[4];
        for (int i = 0; i < n_mv; i++)
            b[i] = (qvk_mv){mv[i].y, mv[i].w->bf16, mv[i].bias, mv[i].n_out};
        qvk_matvec_bf16_multi(pool, x, n_in, b, n_mv);
    }
}

/* qve_matvec for several x [n_x, n_in] (each mv.y [n_x, n_out]): the batched kernels. */
void qve_matvec_batch(qvk_pool *pool, const float *x, int n_x, int n_in, const qve_mv *mv,
                      int n_mv) {
    const int t = tag(mv[0].w);
    for (int i = 1; i < n_mv; i++)
        if (tag(mv[i].w) != t) {
            for (int k = 0; k < n_mv; k++)
                qve_matvec_batch(pool, x, n_x, n_in, &mv[k], 1);
            return;
        }
    if (t == TAG_Q8) {
        qvk_q8_mv q[4];
        for (int i = 0; i < n_mv; i++)
            q[i] = (qvk_q8_mv){mv[i].y, mv[i].w->q8, mv[i].w->q8_scale, mv[i].bias, mv[i].n_out};
        qvk_q8_matvec_batch(pool, x, n_x, n_in, q, n_mv);
    } else if (t == TAG_Q4) {
        qvk_q4_mv q[4];
        for (int i = 0; i < n_mv; i++)
            q[i] = (qvk_q4_mv){mv[i].y,    mv[i].w->q4,   mv[i].w->q4_s,
                               mv[i].w->q4_b, mv[i].bias, mv[i].n_out};
        qvk_q4_matvec_batch(pool, x, n_x, n_in, q, n_mv, NULL);
    } else {
        qvk_mv b[4];
        for (int i = 0; i < n_mv; i++)
            b[i] = (qvk_mv){mv[i].y, mv[i].w->bf16, mv[i].bias, mv[i].n_out};
        qvk_matvec_bf16_batch(pool, x, n_x, n_in, b, n_mv);
    }
}

static size_t max2(size_t a, size_t b) {
    return a > b ? a : b;
}

int qve_batch_scratch_init(qve_batch_scratch *bs, const qvm_model_config *cfg, int n_rows) {
    const qvm_stack_config *t = &cfg->talker, *c = &cfg->code_predictor;
    const size_t H = max2((size_t)t->hidden_size, (size_t)c->hidden_size);
    const size_t qd = max2((size_t)t->num_attention_heads * t->head_dim,
                           (size_t)c->num_attention_heads * c->head_dim);
    const size_t kvd = max2((size_t)t->num_key_value_heads * t->head_dim,
                            (size_t)c->num_key_value_heads * c->head_dim);
    const size_t I = max2((size_t)t->intermediate_size, (size_t)c->intermediate_size);
    const size_t V = max2((size_t)t->vocab_size, (size_t)c->vocab_size);
    /* rows rounded to 16 floats (64 bytes) */
    const size_t w[12] = {H, H, qd, kvd, kvd, qd, I, I, H, H, H, V};
    float **dst[12] = {&bs->x,    &bs->h,  &bs->q,  &bs->k, &bs->v,      &bs->att,
                       &bs->gate, &bs->up, &bs->in, &bs->z, &bs->normed, &bs->logits};
    memset(bs, 0, sizeof *bs);
    size_t total = 0;
    for (int i = 0; i < 12; i++)
        total += (w[i] + 15) / 16 * 16 * (size_t)n_rows;
    if (!(bs->mem = qvk_alloc(total * sizeof(float)))) return -1;
    float *p = bs->mem;
    for (int i = 0; i < 12; i++) {
        *dst[i] = p;
        p += (w[i] + 15) / 16 * 16 * (size_t)n_rows;
    }
    return 0;
}

void qve_batch_scratch_free(qve_batch_scratch *bs) {
    if (!bs) return;
    qvk_free(bs->mem);
    memset(bs, 0, sizeof *bs);
}

/* The offset of layer l's K (and V) row of position pos: the caches are position-major, so a
 * prompt's rows of every layer are one block (51 positions on 0.6B: 5.7 MB each for K and V)
 * instead of the first 2 MB huge page of each layer's region (112 MB zeroed at the first touch,
 * ~100 ms of the prefill with the default frame budget). */
static size_t kv_row(const qve_stack_state *s, int l, int pos) {
    const qvm_stack_config *c = &s->w->cfg;
    const size_t kvd = (size_t)c->num_key_value_heads * c->head_dim;
    return ((size_t)pos * (size_t)c->num_hidden_layers + (size_t)l) * kvd;
}

/* Per-head q/k RMSNorm, RoPE at pos, and store k/v at cache row pos of layer l. */
static void qk_norm_rope_store(qve_stack_state *s, int l, float *q, float *k, const float *v,
                               int pos) {
    const qvm_stack_config *c = &s->w->cfg;
    const qvm_layer *L = &s->w->layers[l];
    const int hd = c->head_dim, nh = c->num_attention_heads, nkv = c->num_key_value_heads;
    const size_t kvd = (size_t)nkv * hd;
    for (int h = 0; h < nh; h++)
        qvk_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, c->rms_norm_eps);
    for (int h = 0; h < nkv; h++)
        qvk_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, c->rms_norm_eps);
    qvk_rope_table(s->rope_c, s->rope_s, hd, pos, c->rope_theta);
    qvk_rope_apply(q, nh, hd, s->rope_c, s->rope_s);
    qvk_rope_apply(k, nkv, hd, s->rope_c, s->rope_s);
    const size_t row = kv_row(s, l, pos);
    memcpy(s->k_cache + row, k, kvd * sizeof(float));
    memcpy(s->v_cache + row, v, kvd * sizeof(float));
}

static void attend(qve_stack_state *s, qvk_pool *pool, int l, float *out, const float *q,
                   int n_ctx) {
    const qvm_stack_config *c = &s->w->cfg;
    const int hd = c->head_dim;
    const size_t kvd = (size_t)c->num_key_value_heads * hd;
    const size_t base = kv_row(s, l, 0);
    /* a short context is less work than waking the pool (the code predictor's 16 positions);
     * heads are independent, so the result is the same either way */
    qvk_attend(n_ctx < 64 ? NULL : pool, out, q, s->k_cache + base, s->v_cache + base, n_ctx,
               (int)kvd * c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads, hd,
               1.0f / sqrtf((float)hd), s->attn_scratch);
}

static void add(float *restrict x, const float *restrict y, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* Calibration: the running max |a| of layer l's n rows of SwiGLU output a[n, I]. */
static void track_act(const qve_stack_state *s, int l, const float *a, int n, int I) {
    float *m = s->act_max + (size_t)l * (size_t)s->w->cfg.intermediate_size;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < I; i++)
            m[i] = fmaxf(m[i], fabsf(a[(size_t)t * I + i]));
}

/* Mirrors Qwen3TTSTalkerDecoderLayer / the code predictor's layer for one token. */
static void forward_one(qve_stack_state *s, qvk_pool *pool, float *x, int pos) {
    const qvm_stack_config *c = &s->w->cfg;
    const int H = c->hidden_size;
    const int qd = c->num_attention_heads * c->head_dim;
    const int kvd = c->num_key_value_heads * c->head_dim;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const qvm_layer *L = &s->w->layers[l];
        const int I = qvm_layer_intermediate(c, l);
        qvk_rmsnorm(s->h, x, L->input_layernorm, H, c->rms_norm_eps);
        const qve_mv qkv[3] = {{s->q, &L->q_proj, NULL, qd},
                               {s->k, &L->k_proj, NULL, kvd},
                               {s->v, &L->v_proj, NULL, kvd}};
        qve_matvec(pool, s->h, H, qkv, 3);
        qk_norm_rope_store(s, l, s->q, s->k, s->v, pos);
        attend(s, pool, l, s->att, s->q, pos + 1);
        qve_matvec(pool, s->att, qd, &(qve_mv){s->h, &L->o_proj, NULL, H}, 1);
        add(x, s->h, (size_t)H);
        qvk_rmsnorm(s->h, x, L->post_attention_layernorm, H, c->rms_norm_eps);
        const qve_mv gu[2] = {{s->gate, &L->gate_proj, NULL, I}, {s->up, &L->up_proj, NULL, I}};
        qve_matvec(pool, s->h, H, gu, 2);
        qvk_swiglu(s->gate, s->gate, s->up, I);
        if (s->act_max) track_act(s, l, s->gate, 1, I);
        qve_matvec(pool, s->gate, I, &(qve_mv){s->h, &L->down_proj, NULL, H}, 1);
        add(x, s->h, (size_t)H);
    }
}

/* forward_one for n tokens of n sessions at once (batch.c): token i (row i of x) runs on the
 * cache of s[i] at pos[i] and every matrix is read once for all; the scratch rows stand in for
 * forward_one's single-token buffers, with the same operations per row (bit-identical). */
void qve_stack_forward_multi(qve_stack_state *const *s, int n, qvk_pool *pool, float *x,
                             const int *pos, const qve_batch_scratch *bs) {
    const qvm_stack_config *c = &s[0]->w->cfg;
    const int H = c->hidden_size;
    const int qd = c->num_attention_heads * c->head_dim;
    const int kvd = c->num_key_value_heads * c->head_dim;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const qvm_layer *L = &s[0]->w->layers[l];
        const int I = qvm_layer_intermediate(c, l);
        for (int i = 0; i < n; i++)
            qvk_rmsnorm(bs->h + (size_t)i * H, x + (size_t)i * H, L->input_layernorm, H,
                        c->rms_norm_eps);
        const qve_mv qkv[3] = {
            {bs->q, &L->q_proj, NULL, qd}, {bs->k, &L->k_proj, NULL, kvd}, {bs->v, &L->v_proj, NULL, kvd}};
        qve_matvec_batch(pool, bs->h, n, H, qkv, 3);
        for (int i = 0; i < n; i++) {
            float *q = bs->q + (size_t)i * qd;
            qk_norm_rope_store(s[i], l, q, bs->k + (size_t)i * kvd, bs->v + (size_t)i * kvd,
                               pos[i]);
            attend(s[i], pool, l, bs->att + (size_t)i * qd, q, pos[i] + 1);
        }
        qve_matvec_batch(pool, bs->att, n, qd, &(qve_mv){bs->h, &L->o_proj, NULL, H}, 1);
        add(x, bs->h, (size_t)n * H);
        for (int i = 0; i < n; i++)
            qvk_rmsnorm(bs->h + (size_t)i * H, x + (size_t)i * H, L->post_attention_layernorm, H,
                        c->rms_norm_eps);
        const qve_mv gu[2] = {{bs->gate, &L->gate_proj, NULL, I}, {bs->up, &L->up_proj, NULL, I}};
        qve_matvec_batch(pool, bs->h, n, H, gu, 2);
        for (int i = 0; i < n; i++)
            qvk_swiglu(bs->gate + (size_t)i * I, bs->gate + (size_t)i * I, bs->up + (size_t)i * I,
                       I);
        qve_matvec_batch(pool, bs->gate, n, I, &(qve_mv){bs->h, &L->down_proj, NULL, H}, 1);
        add(x, bs->h, (size_t)n * H);
    }
}

/* The prefill's linear layers: bf16 sets (QKV, gate/up) go through qvk_linear_bf16_multi
 * together (X packed once, one dispatch), q4 ones (compressed checkpoints, the q4 view) through
 * the batched q4 matvec (each row block read once for all tokens, no widened copy). */
static void linear(qvk_pool *pool, const float *x, int n, int n_in, const qve_mv *mv, int n_mv,
                   float *scratch) {
    qvk_mv b[4];
    qvk_q4_mv q[4];
    int nb = 0, nq = 0;
    for (int m = 0; m < n_mv; m++)
        if (mv[m].w->q4)
            q[nq++] = (qvk_q4_mv){mv[m].y, mv[m].w->q4, mv[m].w->q4_s, mv[m].w->q4_b, NULL,
                                  mv[m].n_out};
        else
            b[nb++] = (qvk_mv){mv[m].y, mv[m].w->bf16, NULL, mv[m].n_out};
    if (nq) qvk_q4_matvec_batch(pool, x, n, n_in, q, nq, scratch);
    if (nb) qvk_linear_bf16_multi(pool, x, n, n_in, b, nb, scratch);
}

/* The caches are huge-page backed, so the prompt's rows fault in 2 MB pages the kernel zeroes
 * (kv_row keeps that to the prompt's own ~6 MB each for K and V). The stores run on the calling
 * thread; touching the prompt's rows first spreads that zeroing over the pool. */
struct touch_job {
    const qve_stack_state *s;
    int pos0, n;
};

static void touch_run(int ith, int nth, void *p) {
    const struct touch_job *j = p;
    const qvm_stack_config *c = &j->s->w->cfg;
    const size_t kvd = (size_t)c->num_key_value_heads * c->head_dim;
    const size_t row = kv_row(j->s, 0, j->pos0), n = (size_t)j->n * c->num_hidden_layers * kvd;
    /* a contiguous share each: two threads faulting one huge page would wait for each other */
    for (size_t i = row + n * ith / nth; i < row + n * (ith + 1) / nth; i += 1024) /* 4 KB */
        j->s->k_cache[i] = j->s->v_cache[i] = 0;
}

/* The last layer runs only the last position past its K/V: nothing reads the other positions'
 * outputs (the head takes the last row), so they keep that layer's input. */
static void forward_batch(qve_stack_state *s, qvk_pool *pool, float *x, int n, int pos0) {
    const qvm_stack_config *c = &s->w->cfg;
    const int H = c->hidden_size;
    const int qd = c->num_attention_heads * c->head_dim;
    const int kvd = c->num_key_value_heads * c->head_dim;
    float *ws = s->wscratch;
    qvk_pool_run(pool, touch_run, &(struct touch_job){s, pos0, n});
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const qvm_layer *L = &s->w->layers[l];
        const int I = qvm_layer_intermediate(c, l);
        const int i0 = l == c->num_hidden_layers - 1 ? n - 1 : 0, m = n - i0;
        float *xm = x + (size_t)i0 * H;
        for (int i = 0; i < n; i++)
            qvk_rmsnorm(s->bh + (size_t)i * H, x + (size_t)i * H, L->input_layernorm, H,
                        c->rms_norm_eps);
        const qve_mv qkv[3] = {{s->bq, &L->q_proj, NULL, qd},
                               {s->bk, &L->k_proj, NULL, kvd},
                               {s->bv, &L->v_proj, NULL, kvd}};
        linear(pool, s->bh, n, H, qkv, 3, ws);
        for (int i = 0; i < n; i++)
            qk_norm_rope_store(s, l, s->bq + (size_t)i * qd, s->bk + (size_t)i * kvd,
                               s->bv + (size_t)i * kvd, pos0 + i);
        for (int i = i0; i < n; i++)
            attend(s, pool, l, s->batt + (size_t)(i - i0) * qd, s->bq + (size_t)i * qd,
                   pos0 + i + 1);
        linear(pool, s->batt, m, qd, &(qve_mv){s->bh, &L->o_proj, NULL, H}, 1, ws);
        add(xm, s->bh, (size_t)m * H);
        for (int i = 0; i < m; i++)
            qvk_rmsnorm(s->bh + (size_t)i * H, xm + (size_t)i * H, L->post_attention_layernorm,
                        H, c->rms_norm_eps);
        const qve_mv gu[2] = {{s->bgate, &L->gate_proj, NULL, I}, {s->bup, &L->up_proj, NULL, I}};
        linear(pool, s->bh, m, H, gu, 2, ws);
        qvk_swiglu(s->bgate, s->bgate, s->bup, m * I);
        if (s->act_max) track_act(s, l, s->bgate, m, I);
        linear(pool, s->bgate, m, I, &(qve_mv){s->bh, &L->down_proj, NULL, H}, 1, ws);
        add(xm, s->bh, (size_t)m * H);
    }
}

void qve_stack_forward(qve_stack_state *s, qvk_pool *pool, float *x, int n, int pos0) {
    if (n == 1) {
        forward_one(s, pool, x, pos0);
        return;
    }
    forward_batch(s, pool, x, n, pos0);
}

/* ==== talker embeddings and head ============================================================= */

void qve_talker_project_text(const qve_talker *t, const qvm_model_config *c, qvk_pool *pool,
                             float *out, const int32_t *ids, int n, float *tmp, float *wscratch) {
    const qvm_textside ts = {.text_hidden = c->text_hidden_size,
                             .hidden = c->talker.hidden_size,
                             .text_vocab = c->text_vocab_size,
                             .codec_vocab = c->talker.vocab_size,
                             .text_embedding = t->text_embedding,
                             .text_token_map = t->text_token_map,
                             .fc1 = t->fc1,
                             .fc1_bias = t->fc1_bias,
                             .fc2 = t->fc2,
                             .fc2_bias = t->fc2_bias,
                             .codec_embedding = t->codec_embedding};
    qvm_textside_project(&ts, pool, out, ids, n, tmp, wscratch);
}

void qve_talker_codec_embed(const qve_talker *t, float *out, int id, int accumulate) {
    const int H = t->stack.cfg.hidden_size;
    const uint16_t *row = t->codec_embedding + (size_t)id * H;
    if (accumulate)
        for (int i = 0; i < H; i++)
            out[i] += qvk_bf16_to_f32_1(row[i]);
    else
        qvk_bf16_to_f32(out, row, (size_t)H);
}

void qve_talker_head(const qve_talker *t, qvk_pool *pool, float *z, float *logits, const float *x) {
    const qvm_stack_config *c = &t->stack.cfg;
    qvk_rmsnorm(z, x, t->stack.norm, c->hidden_size, c->rms_norm_eps);
    qve_matvec(pool, z, c->hidden_size, &(qve_mv){logits, &t->codec_head, NULL, c->vocab_size}, 1);
}
