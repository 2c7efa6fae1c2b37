/* voice_load.c — WDELTA application (voice_load.h). Two passes: the first checks everything
 * (fingerprint, names, dtypes, shapes, target SHA-256 of the mmapped tensors) and changes nothing,
 * so a refused voice leaves the model intact; the second rebuilds the changed bf16 tensors in
 * owned RAM (copy-on-write of the read-only mmap) and rewrites the f32 copies.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint/fingerprint.h"
#include "checkpoint/manifest.h"
#include "engine/model.h"
#include "engine/voice_load.h"
#include "util/sha256.h"

typedef struct {
    char name[160];
    const uint16_t **bf16; /* matrix slot in the model, or NULL */
    float *f32;            /* the model's f32 copy of a vector, or NULL */
    int64_t n;             /* elements */
    int hit;               /* named by a record */
} slot;

typedef struct {
    slot *s;
    int n, cap;
    qv_model *m;
} slot_list;

static void add(slot_list *l, const char *name, const uint16_t **bf16, const float *f32,
                int64_t n) {
    if (l->n == l->cap) return; /* cap is computed from the config: never reached */
    slot *s = &l->s[l->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->bf16 = bf16;
    s->f32 = NULL; /* the model's own writable copy (model.c get_vector or the text side) */
    for (int i = 0; f32 && i < l->m->n_f32_copies; i++)
        if (l->m->f32_copies[i] == f32) s->f32 = l->m->f32_copies[i];
    const qvm_textside *ts = &l->m->text; /* the text projection's biases live there */
    if (f32 && f32 == ts->fc1_bias) s->f32 = ts->owned;
    if (f32 && f32 == ts->fc2_bias) s->f32 = ts->owned + ts->text_hidden;
    s->n = n;
    s->hit = 0;
}

static void add_stack(slot_list *l, qve_stack *st, const char *prefix) {
    const qvm_stack_config *c = &st->cfg;
    char n[160];
    for (int i = 0; i < c->num_hidden_layers; i++)
        for (int k = 0; k < QVM_LAYER_N_TENSORS; k++) {
            int64_t shape[2];
            qve_mat *mat;
            float **vec;
            qvm_layer_tensor(c, prefix, i, k, n, sizeof n, shape);
            qve_layer_field(&st->layers[i], k, &mat, &vec);
            if (mat) add(l, n, &mat->bf16, NULL, shape[0] * shape[1]);
            else add(l, n, NULL, *vec, shape[0]);
        }
    snprintf(n, sizeof n, "%s.norm.weight", prefix);
    add(l, n, NULL, st->norm, c->hidden_size);
}

/* Every weight the engine reads, by checkpoint name. */
static int collect(slot_list *l, qv_model *m) {
    const qvm_model_config *c = &m->ck->cfg;
    l->cap = QVM_LAYER_N_TENSORS * (c->talker.num_hidden_layers + c->code_predictor.num_hidden_layers) + 2 + 7 +
             2 * (QV_N_CODEBOOKS - 1) + 2;
    l->n = 0;
    l->m = m;
    l->s = calloc((size_t)l->cap, sizeof *l->s);
    if (!l->s) return -1;
    const int64_t H = c->talker.hidden_size, TH = c->text_hidden_size, V = c->talker.vocab_size;
    const int64_t CH = c->code_predictor.hidden_size, CV = c->code_predictor.vocab_size;
    qve_talker *t = &m->talker;
    add_stack(l, &t->stack, "talker.model");
    add(l, "talker.model.text_embedding.weight", &t->text_embedding, NULL, c->text_vocab_size * TH);
    add(l, "talker.text_projection.linear_fc1.weight", &t->fc1, NULL, TH * TH);
    add(l, "talker.text_projection.linear_fc1.bias", NULL, t->fc1_bias, TH);
    add(l, "talker.text_projection.linear_fc2.weight", &t->fc2, NULL, H * TH);
    add(l, "talker.text_projection.linear_fc2.bias", NULL, t->fc2_bias, H);
    add(l, "talker.model.codec_embedding.weight", &t->codec_embedding, NULL, V * H);
    add(l, "talker.codec_head.weight", &t->codec_head.bf16, NULL, V * H);
    qve_code_predictor *cp = &m->cp;
    add_stack(l, &cp->stack, "talker.code_predictor.model");
    char n[160];
    for (int g = 0; g < QV_N_CODEBOOKS - 1; g++) {
        snprintf(n, sizeof n, "talker.code_predictor.model.codec_embedding.%d.weight", g);
        add(l, n, &cp->codec_embedding[g], NULL, CV * H);
        snprintf(n, sizeof n, "talker.code_predictor.lm_head.%d.weight", g);
        add(l, n, &cp->lm_head[g].bf16, NULL, CV * CH);
    }
    if (cp->mtp_proj.bf16) {
        add(l, "talker.code_predictor.small_to_mtp_projection.weight", &cp->mtp_proj.bf16, NULL,
            CH * H);
        add(l, "talker.code_predictor.small_to_mtp_projection.bias", NULL, cp->mtp_bias, CH);
    }
    return 0;
}

static slot *find(slot_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->s[i].name, name)) return &l->s[i];
    return NULL;
}

static int is_zero(const uint8_t h[32]) {
    for (int i = 0; i < 32; i++)
        if (h[i]) return 0;
    return 1;
}

/* Releases the resident pages of a read-only file-mapped range (checkpoint or voice file) that
 * is no longer needed; they are read back from the file if touched again. Without this a heavy
 * voice would keep both the CustomVoice tensors and their Base copies resident (~4 GB for 0.6B). */
static void drop_pages(const void *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + n) & ~(page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Per-record plan from the check pass. */
typedef struct {
    slot *s;               /* NULL: a checkpoint tensor the engine does not read (skipped) */
    const qvm_tensor *orig; /* the loaded (mmapped) tensor */
    int same;              /* result equals the loaded tensor: nothing to do */
} plan;

static int check_record(const qv_model *m, slot_list *l, const qvf_tensor *t, plan *p,
                        qve_wdelta_report *rep, char *err, size_t es) {
    p->orig = qvm_st_find(m->ck->st, t->name);
    p->s = find(l, t->name);
    if (!p->orig)
        return snprintf(err, es, "weight delta for tensor %s, which %s does not have", t->name,
                        m->ck->dir),
               -1;
    if (p->s && p->s->hit)
        return snprintf(err, es, "two weight-delta records for tensor %s", t->name), -1;
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n_elems *= t->shape[d];
    if (t->dtype == QVF_DTYPE_BF16) {
        int shape_ok = p->orig->dtype == QVM_DTYPE_BF16 && (uint32_t)p->orig->n_dims == t->n_dims;
        for (uint32_t d = 0; shape_ok && d < t->n_dims; d++)
            shape_ok = (uint64_t)p->orig->shape[d] == t->shape[d];
        if (t->n_dims == 1 && p->orig->dtype == QVM_DTYPE_BF16)
            shape_ok = 1; /* legacy records carry no shape (1-D): the byte count decides */
        if (!shape_ok || t->raw_bytes != p->orig->n_bytes || (p->s && !p->s->bf16))
            return snprintf(err, es,
                            "weight delta for tensor %s does not fit %s (bf16 %llu bytes in the "
                            "voice, %s %zu bytes in the model)",
                            t->name, m->ck->dir, (unsigned long long)t->raw_bytes,
                            qvm_dtype_name(p->orig->dtype), p->orig->n_bytes),
                   -1;
    } else if (t->dtype == QVF_DTYPE_F32) {
        if (t->encoding != QVF_ENC_RAW || t->raw_bytes != n_elems * 4 ||
            (p->s && (!p->s->f32 || (int64_t)n_elems != p->s->n)))
            return snprintf(err, es, "weight record for tensor %s does not fit %s (f32 %llu values)",
                            t->name, m->ck->dir, (unsigned long long)n_elems),
                   -1;
    } else {
        return snprintf(err, es, "weight record for tensor %s: dtype %u", t->name, t->dtype), -1;
    }
    if (t->encoding == QVF_ENC_DELTA16_LZ4) {
        if (is_zero(t->target_sha256)) {
            rep->n_unverified++;
        } else {
            uint8_t h[32];
            char a[65], b[65];
            if (qvm_tensor_sha256(p->orig, h))
                return snprintf(err, es, "out of memory hashing %s", t->name), -1;
            drop_pages(p->orig->data, p->orig->n_bytes);
            if (memcmp(h, t->target_sha256, 32))
                return snprintf(err, es,
                                "weight delta for tensor %s was made against other weights "
                                "(SHA-256 %.16s…, %s has %.16s…): refusing to apply it",
                                t->name, qvu_hex(t->target_sha256, 32, a), m->ck->dir,
                                qvu_hex(h, 32, b)),
                       -1;
            p->same = !is_zero(t->result_sha256) && !memcmp(t->result_sha256, h, 32);
        }
    } else if (t->dtype == QVF_DTYPE_F32 && p->s) {
        p->same = !memcmp(p->s->f32, t->data, t->raw_bytes);
    }
    if (p->s) p->s->hit = 1;
    return 0;
}

static int check_result(const qvf_tensor *t, const void *buf, char *err, size_t es) {
    uint8_t h[32];
    if (is_zero(t->result_sha256)) return 0;
    if (qvu_sha256(buf, t->raw_bytes, h))
        return snprintf(err, es, "out of memory hashing %s", t->name), -1;
    if (memcmp(h, t->result_sha256, 32))
        return snprintf(err, es, "weight delta for tensor %s: result SHA-256 mismatch (corrupt "
                                 "voice file)",
                        t->name),
               -1;
    return 0;
}

static int apply_record(qv_model *m, const qvf_tensor *t, const plan *p, qve_wdelta_report *rep,
                        char *err, size_t es) {
    char e[256];
    if (t->dtype == QVF_DTYPE_F32) { /* raw values: the source's norm / bias */
        memcpy(p->s->f32, t->data, t->raw_bytes);
        rep->n_changed++;
        return 0;
    }
    uint16_t **grown =
        realloc(m->weight_copies, sizeof *grown * (size_t)(m->n_weight_copies + 1));
    if (!grown) return snprintf(err, es, "out of memory applying %s", t->name), -1;
    m->weight_copies = grown;
    uint16_t *buf = qvk_alloc(t->raw_bytes);
    if (!buf)
        return snprintf(err, es, "out of memory for tensor %s (%llu bytes)", t->name,
                        (unsigned long long)t->raw_bytes),
               -1;
    m->weight_copies[m->n_weight_copies++] = buf;
    if (qvf_wdelta_apply(t, p->orig->data, buf, 0, e, sizeof e))
        return snprintf(err, es, "%s", e), -1;
    if (check_result(t, buf, err, es)) return -1;
    *p->s->bf16 = buf;
    drop_pages(p->orig->data, p->orig->n_bytes);
    rep->n_changed++;
    rep->mib_copied += (double)t->raw_bytes / (1 << 20);
    return 0;
}

int qve_voice_wdelta_fits(const qv_model *m, const qvf_voice *v, enum qve_wdelta_action *action,
                          char *err, size_t es) {
    *action = QVE_WDELTA_NONE;
    if (!v->has_wdelta || !v->n_tensors) return 0;
    const uint8_t *fp = m->ck->fingerprint;
    char a[65], b[65];
    if (!is_zero(v->source.fingerprint) && !memcmp(fp, v->source.fingerprint, 32)) {
        *action = QVE_WDELTA_SOURCE; /* the delta turns its target into this model */
        return 0;
    }
    const qvf_model_id *tg = &v->target;
    if (!is_zero(tg->fingerprint) && memcmp(fp, tg->fingerprint, 32))
        return snprintf(err, es,
                        "the voice's weight delta was made for another checkpoint (a %s model, "
                        "hidden %u, fingerprint %.16s…); %s is fingerprint %.16s…: refusing to "
                        "apply it (use --no-wdelta for the x-vector/ICL only, or recreate the "
                        "voice with clone --target-cv %s)",
                        qvf_variant_name(tg->variant), tg->hidden_size,
                        qvu_hex(tg->fingerprint, 32, a), m->ck->dir, qvu_hex(fp, 32, b), m->ck->dir),
               -1;
    if (is_zero(tg->fingerprint)) { /* legacy file: the legacy engine's own checks */
        if (m->ck->cfg.variant == QVF_VARIANT_BASE)
            return snprintf(err, es,
                            "the voice's weight delta applies to a CustomVoice model, %s is a "
                            "Base model (use --no-wdelta)",
                            m->ck->dir),
                   -1;
        if (tg->hidden_size && (int)tg->hidden_size != m->ck->cfg.talker.hidden_size)
            return snprintf(err, es,
                            "the voice's weight delta is for hidden size %u, %s has %d: refusing",
                            tg->hidden_size, m->ck->dir, m->ck->cfg.talker.hidden_size),
                   -1;
    }
    *action = QVE_WDELTA_APPLIED;
    return 0;
}

int qve_voice_apply_wdelta(qv_model *m, const qvf_voice *v, qve_wdelta_report *rep, char *err,
                           size_t es) {
    memset(rep, 0, sizeof *rep);
    if (qve_voice_wdelta_fits(m, v, &rep->action, err, es)) return -1;
    if (rep->action != QVE_WDELTA_APPLIED) return 0;
    rep->action = QVE_WDELTA_NONE;
    rep->n_tensors = (int)v->n_tensors;

    if (m->ck->cfg.quant_bits || m->talker.text_token_map) /* the delta is over bf16 tensors */
        return snprintf(err, es,
                        "%s is a compressed checkpoint (docs/compression.md): a weight delta needs "
                        "the uncompressed one (use --no-wdelta)",
                        m->ck->dir),
               -1;
    slot_list l;
    plan *p = calloc(v->n_tensors, sizeof *p);
    if (!p || collect(&l, m)) {
        free(p);
        return snprintf(err, es, "out of memory"), -1;
    }
    int rc = 0;
    for (uint32_t i = 0; i < v->n_tensors && !rc; i++)
        rc = check_record(m, &l, &v->tensors[i], &p[i], rep, err, es);
    for (uint32_t i = 0; i < v->n_tensors && !rc; i++) {
        if (!p[i].s) continue;
        if (p[i].same)
            rep->n_same++;
        else
            rc = apply_record(m, &v->tensors[i], &p[i], rep, err, es);
    }
    int all = 1;
    for (int i = 0; i < l.n; i++)
        all &= l.s[i].hit;
    free(l.s);
    free(p);
    qve_model_drop_views(m); /* derived from the old weights; rebuilt by the next session */
    if (rc) return -1;
    rep->action = QVE_WDELTA_APPLIED;
    m->wdelta_on = 1;
    memcpy(m->wdelta_source, v->source.fingerprint, 32);
    if (all && v->source.variant == QVF_VARIANT_BASE) {
        /* every weight is now the Base checkpoint's: behave as it (prompt layout, no presets) */
        m->ck->cfg.variant = QVF_VARIANT_BASE;
        snprintf(m->ck->cfg.tts_model_type, sizeof m->ck->cfg.tts_model_type, "%s",
                 qvf_variant_name(QVF_VARIANT_BASE));
        m->ck->cfg.n_speakers = 0;
        rep->became_source = 1;
    }
    return 0;
}
