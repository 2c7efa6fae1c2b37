/* code_predictor.c — residual codebooks 1..15 of one frame (§4, Qwen3TTSTalkerCodePredictor).
 *
 * A fresh 16-position KV cache per frame (positions restart at 0). Every input goes through
 * small_to_mtp_projection on 1.7B (identity on 0.6B); the reference's 2-position prefill is run as
 * one batched step of two single-token rows (each row bit for bit a single step), which is the
 * same causal computation with the weights read 15 times per frame instead of 16.
 */
#include <string.h>

#include "engine/model.h"

int qve_cp_state_init(qve_cp_state *s, const qv_model *m) {
    memset(s, 0, sizeof *s);
    const int H = m->ck->cfg.talker.hidden_size, CH = m->ck->cfg.code_predictor.hidden_size;
    const int CV = m->ck->cfg.code_predictor.vocab_size;
    s->w = &m->cp;
    if (qve_stack_state_init(&s->st, &m->cp.stack, QV_N_CODEBOOKS, 0)) return -1;
    s->x = qvk_alloc((size_t)CH * sizeof(float));
    s->proj_in = qvk_alloc((size_t)(H > CH ? H : CH) * sizeof(float));
    s->logits = qvk_alloc((size_t)(QV_N_CODEBOOKS - 1) * (size_t)CV * sizeof(float));
    if (!s->x || !s->proj_in || !s->logits || qve_batch_scratch_init(&s->start, &m->ck->cfg, 2)) {
        qve_cp_state_free(s);
        return -1;
    }
    return 0;
}

void qve_cp_state_free(qve_cp_state *s) {
    if (!s) return;
    qve_stack_state_free(&s->st);
    qvk_free(s->x);
    qvk_free(s->proj_in);
    qvk_free(s->logits);
    qve_batch_scratch_free(&s->start);
    memset(s, 0, sizeof *s);
}

void qve_cp_state_use(qve_cp_state *s, const qve_code_predictor *w) {
    s->w = w;
    s->st.w = &w->stack;
}

/* s->x = Π(in), in being a talker-width vector. */
static void project(qve_cp_state *s, const qv_model *m, qvk_pool *pool, const float *in) {
    const int H = m->ck->cfg.talker.hidden_size, CH = m->ck->cfg.code_predictor.hidden_size;
    const qve_mat *w = &s->w->mtp_proj; /* the view's: q4 in a q4 view */
    if (w->bf16 || w->q4)
        qve_matvec(pool, in, H, &(qve_mv){s->x, w, m->cp.mtp_bias, CH}, 1);
    else
        memcpy(s->x, in, (size_t)CH * sizeof(float));
}

/* project for n rows: out[n, CH] = Π(in[n, H]). */
static void project_multi(const qve_code_predictor *cp, const qv_model *m, qvk_pool *pool,
                          float *out, const float *in, int n) {
    const int H = m->ck->cfg.talker.hidden_size, CH = m->ck->cfg.code_predictor.hidden_size;
    if (cp->mtp_proj.bf16 || cp->mtp_proj.q4) {
        qve_matvec_batch(pool, in, n, H, &(qve_mv){out, &cp->mtp_proj, m->cp.mtp_bias, CH}, 1);
        return;
    }
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * CH, in + (size_t)i * H, (size_t)CH * sizeof(float));
}

void qve_cp_frame(qve_cp_state *s, const qv_model *m, const qve_talker *talker, qvk_pool *pool,
                  const float *z, int c0, int32_t codes[QV_N_CODEBOOKS], qve_pick_fn pick,
                  void *pick_ctx) {
    const qve_code_predictor *cp = s->w;
    const qvm_stack_config *c = &cp->stack.cfg;
    const int H = m->ck->cfg.talker.hidden_size, CH = c->hidden_size, CV = c->vocab_size;
    codes[0] = c0;
    /* positions 0 (z) and 1 (C(c0)) as one batched step: every matrix is read once for both
       (1/16 of the predictor's bytes per frame) with each row's bits those of two single steps
       (qve_stack_forward_multi); position 1 attends to the K/V position 0 stored just before */
    const qve_batch_scratch *bs = &s->start;
    memcpy(bs->in, z, (size_t)H * sizeof(float));
    qve_talker_codec_embed(talker, bs->in + H, c0, 0);
    project_multi(cp, m, pool, bs->x, bs->in, 2);
    qve_stack_forward_multi((qve_stack_state *const[2]){&s->st, &s->st}, 2, pool, bs->x,
                            (const int[2]){0, 1}, bs);
    memcpy(s->x, bs->x + CH, (size_t)CH * sizeof(float));
    for (int g = 0; g < QV_N_CODEBOOKS - 1; g++) {
        float *logits = s->logits + (size_t)g * CV;
        float *normed = s->proj_in; /* free between inputs */
        qvk_rmsnorm(normed, s->x, cp->stack.norm, CH, c->rms_norm_eps);
        qve_matvec(pool, normed, CH, &(qve_mv){logits, &cp->lm_head[g], NULL, CV}, 1);
        int code = pick(logits, CV, pick_ctx);
        codes[g + 1] = code;
        if (g == QV_N_CODEBOOKS - 2) break; /* CPE_14 never feeds the predictor */
        qvk_bf16_to_f32(s->proj_in, cp->codec_embedding[g] + (size_t)code * H, (size_t)H);
        project(s, m, pool, s->proj_in);
        qve_stack_forward(&s->st, pool, s->x, 1, g + 2);
    }
}

void qve_cp_frame_multi(qve_cp_state *const *s, int n, const qv_model *m,
                        const qve_talker *const *talker, qvk_pool *pool, const float *z,
                        const int *c0, int32_t (*codes)[QV_N_CODEBOOKS], qve_pick_fn pick,
                        void *const *pick_ctx, const qve_batch_scratch *bs) {
    const qve_code_predictor *cp = s[0]->w;
    const qvm_stack_config *c = &cp->stack.cfg;
    const int H = m->ck->cfg.talker.hidden_size, CH = c->hidden_size, CV = c->vocab_size;
    qve_stack_state *st[QVK_BATCH_MAX];
    int pos[QVK_BATCH_MAX];
    for (int i = 0; i < n; i++) {
        st[i] = &s[i]->st;
        codes[i][0] = c0[i];
    }
    for (int i = 0; i < n; i++)
        pos[i] = 0;
    project_multi(cp, m, pool, bs->x, z, n);
    qve_stack_forward_multi(st, n, pool, bs->x, pos, bs);
    for (int i = 0; i < n; i++) {
        qve_talker_codec_embed(talker[i], bs->in + (size_t)i * H, c0[i], 0);
        pos[i] = 1;
    }
    project_multi(cp, m, pool, bs->x, bs->in, n);
    qve_stack_forward_multi(st, n, pool, bs->x, pos, bs);
    for (int g = 0; g < QV_N_CODEBOOKS - 1; g++) {
        for (int i = 0; i < n; i++)
            qvk_rmsnorm(bs->normed + (size_t)i * CH, bs->x + (size_t)i * CH, cp->stack.norm, CH,
                        c->rms_norm_eps);
        qve_matvec_batch(pool, bs->normed, n, CH, &(qve_mv){bs->logits, &cp->lm_head[g], NULL, CV},
                         1);
        for (int i = 0; i < n; i++) {
            float *logits = s[i]->logits + (size_t)g * CV;
            memcpy(logits, bs->logits + (size_t)i * CV, (size_t)CV * sizeof(float));
            codes[i][g + 1] = pick(logits, CV, pick_ctx[i]);
        }
        if (g == QV_N_CODEBOOKS - 2) break; /* CPE_14 never feeds the predictor */
        for (int i = 0; i < n; i++) {
            qvk_bf16_to_f32(bs->in + (size_t)i * H,
                            cp->codec_embedding[g] + (size_t)codes[i][g + 1] * H, (size_t)H);
            pos[i] = g + 2;
        }
        project_multi(cp, m, pool, bs->x, bs->in, n);
        qve_stack_forward_multi(st, n, pool, bs->x, pos, bs);
    }
}
