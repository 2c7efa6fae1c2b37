/* session.c — public API: parameters, sessions, prompt construction (§3.4) and the frame loop
 * (§3.5) mirroring Qwen3TTSForConditionalGeneration.generate.
 *
 * All per-frame buffers are allocated by qv_session_new and all per-utterance ones (KV cache sized
 * prompt + max_frames, prompt embeddings, text queue) by qv_session_start: next_frame never
 * allocates. The talker step for frame k runs right after it, as the reference does, except
 * where synth.c streams: there it waits until frame k's codes are with the decoder.
 */
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/model.h"
#include "engine/prompt.h"
#include "engine/tokenizer.h"
#include "util/api.h"

#define NEWLINE_TOKEN_ID 198 /* "\n" in the Qwen2 vocabulary (§7); the role block's third id */

/* ==== defaults =============================================================================== */

static qv_params params_from(const qvm_generation_config *g) {
    qv_params p = {0};
    p.struct_size = sizeof p;
    p.n_threads = 1;
    p.do_sample = g->do_sample;
    p.temperature = g->temperature;
    p.top_k = g->top_k;
    p.top_p = g->top_p;
    p.repetition_penalty = g->repetition_penalty;
    p.subtalker_do_sample = g->subtalker_dosample;
    p.subtalker_temperature = g->subtalker_temperature;
    p.subtalker_top_k = g->subtalker_top_k;
    p.subtalker_top_p = g->subtalker_top_p;
    p.max_frames = g->max_new_tokens > 1 ? g->max_new_tokens - 1 : 1;
    return p;
}

qv_params qv_default_params(void) {
    const qvm_generation_config g = qvm_generation_defaults();
    return params_from(&g);
}

qv_params qv_model_params(const qv_model *m) {
    return params_from(&m->ck->gen);
}

qv_request qv_default_request(void) {
    qv_request r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.layout = QV_LAYOUT_DEFAULT;
    return r;
}

/* ==== session lifetime ======================================================================= */

static enum qv_status fail(qv_session *s, enum qv_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return st;
}

static void free_utterance(qv_session *s) {
    qve_stack_state_free(&s->talker);
    qvk_free(s->prefill);
    qvk_free(s->queue);
    qvk_free(s->codec_copy);
    s->prefill = s->queue = NULL;
    s->codec_copy = NULL;
    s->n_prefill = s->n_queue = 0;
    s->tw = *qve_model_talker(s->m, s->p.quant);
}

void qv_session_free(qv_session *s) {
    if (!s) return;
    free_utterance(s);
    qve_cp_state_free(&s->cp);
    void *bufs[] = {s->x,    s->z,        s->z_frame, s->logits_raw, s->logits,
                    s->work, s->work_idx, s->seen,    s->pad};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        qvk_free(bufs[i]);
    qvk_pool_free(s->pool);
    free(s);
}

/* Whether x is in [lo, hi] (NaN is not). */
static int within(double x, double lo, double hi) {
    return x >= lo && x <= hi;
}

/* QV_OK, or QV_E_INVALID with err = "FIELD: expected RANGE, found VALUE". */
static enum qv_status check_params(const qv_params *p, char *err, size_t n) {
    if (p->n_threads < 1 || p->n_threads > QVE_MAX_THREADS)
        return snprintf(err, n, "n_threads: expected 1..%d, found %d", QVE_MAX_THREADS,
                        p->n_threads),
               QV_E_INVALID;
    if (p->do_sample && !within(p->temperature, QV_TEMPERATURE_MIN, QV_TEMPERATURE_MAX))
        return snprintf(err, n, "temperature: expected %g..%g, found %g", QV_TEMPERATURE_MIN,
                        QV_TEMPERATURE_MAX, p->temperature),
               QV_E_INVALID;
    if (p->subtalker_do_sample &&
        !within(p->subtalker_temperature, QV_TEMPERATURE_MIN, QV_TEMPERATURE_MAX))
        return snprintf(err, n, "subtalker_temperature: expected %g..%g, found %g",
                        QV_TEMPERATURE_MIN, QV_TEMPERATURE_MAX, p->subtalker_temperature),
               QV_E_INVALID;
    if (!(p->top_p > 0 && p->top_p <= 1) || !(p->subtalker_top_p > 0 && p->subtalker_top_p <= 1))
        return snprintf(err, n, "top_p: expected (0, 1], found %g / %g", p->top_p,
                        p->subtalker_top_p),
               QV_E_INVALID;
    if (!within(p->top_k, 0, QV_TOP_K_MAX) || !within(p->subtalker_top_k, 0, QV_TOP_K_MAX))
        return snprintf(err, n, "top_k: expected 0..%d, found %d / %d", QV_TOP_K_MAX, p->top_k,
                        p->subtalker_top_k),
               QV_E_INVALID;
    if (!within(p->repetition_penalty, QV_REPETITION_PENALTY_MIN, QV_REPETITION_PENALTY_MAX))
        return snprintf(err, n, "repetition_penalty: expected %g..%g, found %g",
                        QV_REPETITION_PENALTY_MIN, QV_REPETITION_PENALTY_MAX,
                        p->repetition_penalty),
               QV_E_INVALID;
    if (p->max_frames < 1)
        return snprintf(err, n, "max_frames: expected >= 1, found %d", p->max_frames), QV_E_INVALID;
    if (p->quant != QV_QUANT_BF16 && p->quant != QV_QUANT_INT8 && p->quant != QV_QUANT_Q4)
        return snprintf(err, n, "quant: expected bf16, int8 or q4, found %d", p->quant),
               QV_E_INVALID;
    return QV_OK;
}

int qv_quant_parse(const char *name) {
    static const char *const names[] = {[QV_QUANT_BF16] = "bf16", [QV_QUANT_INT8] = "int8",
                                        [QV_QUANT_Q4] = "q4"};
    for (int i = 0; name && i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

enum qv_status qv_params_check(const qv_params *p) {
    if (!p) return qvu_fail(QV_E_INVALID, "qv_params_check: NULL argument");
    if (p->struct_size != sizeof *p) return qvu_check_size("qv_params", p->struct_size, sizeof *p);
    char err[QVU_DETAIL_SIZE];
    return qvu_fail(check_params(p, err, sizeof err), err);
}

enum qv_status qv_session_set_params(qv_session *s, const qv_params *p) {
    if (!s) return qvu_fail(QV_E_INVALID, "qv_session_set_params: NULL argument");
    const enum qv_status st = qv_params_check(p);
    if (st) return st;
    if (p->n_threads != s->p.n_threads || p->quant != s->p.quant)
        return qvu_failf(QV_E_INVALID, "n_threads %d and quant %d: the session has %d and %d",
                         p->n_threads, p->quant, s->p.n_threads, s->p.quant);
    s->p = *p;
    return QV_OK;
}

enum qv_status qv_session_new(qv_session **out, const qv_model *m, const qv_params *p) {
    *out = NULL;
    if (!m) return qvu_fail(QV_E_INVALID, "qv_session_new: NULL argument");
    const enum qv_status st = qv_params_check(p);
    if (st) return st;
    qv_session *s = calloc(1, sizeof *s);
    if (!s) return qvu_failf(QV_E_NOMEM, "%s: session: out of memory", m->ck->dir);
    s->m = m;
    s->p = *p;
    s->tw = m->talker;
    const qvm_model_config *c = &m->ck->cfg;
    const size_t H = (size_t)c->talker.hidden_size, V = (size_t)c->talker.vocab_size;
    const size_t nv =
        V > (size_t)c->code_predictor.vocab_size ? V : (size_t)c->code_predictor.vocab_size;
    s->pool = qvk_pool_create(p->n_threads);
    s->x = qvk_alloc(H * sizeof(float));
    s->z = qvk_alloc(H * sizeof(float));
    s->z_frame = qvk_alloc(H * sizeof(float));
    s->logits_raw = qvk_alloc(V * sizeof(float));
    s->logits = qvk_alloc(nv * sizeof(float));
    s->work = qvk_alloc(nv * sizeof(float));
    s->work_idx = qvk_alloc(nv * sizeof(int));
    s->seen = qvk_alloc(V);
    s->pad = qvk_alloc(H * sizeof(float));
    if (!s->pool || !s->x || !s->z || !s->z_frame || !s->logits_raw || !s->logits || !s->work ||
        !s->work_idx || !s->seen || !s->pad || qve_cp_state_init(&s->cp, m) ||
        qve_model_quantize(m, p->quant, s->pool)) {
        qv_session_free(s);
        return qvu_failf(QV_E_NOMEM, "%s: session buffers (%d threads): out of memory", m->ck->dir,
                         p->n_threads);
    }
    s->tw = *qve_model_talker(m, p->quant); /* perf helper: the int8 view when asked for */
    qve_cp_state_use(&s->cp, qve_model_cp(m, p->quant));
    s->state = QVE_IDLE;
    *out = s;
    return QV_OK;
}

const char *qv_session_warning(const qv_session *s) {
    return s ? s->warn : "";
}
int qv_session_n_frames(const qv_session *s) {
    return s->n_frames;
}

/* ==== prompt ================================================================================= */

/* out = F(codes) = C(c0) + sum_g CPE_{g-1}[c_g] (§3.1). */
static void frame_embed(const qv_session *s, float *out, const int32_t *codes) {
    const qv_model *m = s->m;
    const int H = m->ck->cfg.talker.hidden_size;
    qve_talker_codec_embed(&s->tw, out, codes[0], 0);
    for (int g = 1; g < QV_N_CODEBOOKS; g++) {
        const uint16_t *row = m->cp.codec_embedding[g - 1] + (size_t)codes[g] * H;
        for (int i = 0; i < H; i++)
            out[i] += qvk_bf16_to_f32_1(row[i]);
    }
}

static void list_names(char *buf, size_t n, const qv_model *m, int speakers) {
    size_t used = 0;
    buf[0] = 0;
    int count = speakers ? qv_model_n_speakers(m) : qv_model_n_languages(m);
    for (int i = 0; i < count && used < n; i++) {
        const char *name = speakers ? qv_model_speaker(m, i) : qv_model_language(m, i);
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", name);
    }
}

static int ids_valid(const int32_t *ids, int n, int limit) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= limit) return 0;
    return 1;
}

#define SLOT_VECTOR (-2) /* codec list entry holding the caller's speaker vector */

/* "text" of one id for a message (a warning is one line): control characters escaped (\n, \r,
 * \t, else \xNN), cut to fit buf at a character boundary. */
static void id_text(qve_tok *tok, int32_t id, char *buf, size_t n) {
    char *txt = NULL;
    size_t k = 0;
    qve_tok_decode(tok, &id, 1, &txt, NULL, NULL, 0);
    for (const unsigned char *c = (const unsigned char *)(txt ? txt : "?"); *c;) {
        const char e = *c == '\n' ? 'n' : *c == '\r' ? 'r' : *c == '\t' ? 't' : 0;
        size_t len = 1; /* bytes of the character at c (decode gives valid UTF-8) */
        while ((c[len] & 0xC0) == 0x80) len++;
        char esc[5] = "";
        if (e) snprintf(esc, sizeof esc, "\\%c", e);
        else if (*c < 0x20 || *c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", *c);
        const size_t w = esc[0] ? strlen(esc) : len;
        if (k + w >= n) break;
        memcpy(buf + k, esc[0] ? esc : (const char *)c, w);
        k += w, c += len;
    }
    buf[k] = 0;
    free(txt);
}

/* What spell_vocab reports: the first six spelled ids with their text (and pieces). */
typedef struct {
    char msg[360];
    size_t used;
    int n_named, n_zero, with_pieces;
} spell_note;

/* Appends id to out spelled with pieces map has rows for, and notes it when it had none itself. */
static enum qv_status spell_id(qv_session *s, qve_tok *tok, int32_t id, const int32_t *map,
                               qve_tok_ids *out, spell_note *note) {
    const int32_t V = s->m->ck->cfg.text_vocab_size; /* map's length */
    const size_t from = out->n_ids;
    const int ts = qve_tok_spell(tok, id, map, V, out);
    if (ts == QVE_TOK_E_NOMEM) return fail(s, QV_E_NOMEM, "out of memory");
    if (ts) /* an id no token names, and the map lacks it */
        return fail(s, QV_E_MODEL, "%s: token %d: no row and no smaller pieces", s->m->ck->dir, id);
    for (size_t k = from; k < out->n_ids; k++)
        if (out->ids[k] >= V)
            return fail(s, QV_E_MODEL,
                        "%s: token %d spells with token %d, past the model's %d text rows "
                        "(tokenizer and model do not match)",
                        s->m->ck->dir, id, out->ids[k], V);
    if (map[id]) return QV_OK;
    char txt[32];
    const size_t cap = sizeof note->msg;
    for (size_t k = from; k < out->n_ids; k++) note->n_zero += !map[out->ids[k]];
    if (++note->n_named > 6 || note->used >= cap) { /* the first six are named */
        if (note->n_named == 7 && note->used < cap)
            note->used += (size_t)snprintf(note->msg + note->used, cap - note->used, ", ...");
        return QV_OK;
    }
    id_text(tok, id, txt, sizeof txt);
    note->used += (size_t)snprintf(note->msg + note->used, cap - note->used, "%s%d \"%s\"",
                                   note->n_named > 1 ? ", " : "", id, txt);
    for (size_t k = from; note->with_pieces && k < out->n_ids && note->used < cap; k++)
        note->used += (size_t)snprintf(note->msg + note->used, cap - note->used, "%s%d",
                                       k == from ? " as " : " ", out->ids[k]);
    return QV_OK;
}

/* A pruned vocabulary (docs/compression.md) has no rows for some ids. Each such id of q's lists
 * is spelled with the merge parts that formed it (qve_tok_spell), the same bytes through rows the
 * model has; the warning names them, a strict request is refused. The role block's third id (a
 * text's leading newlines merge into it) keeps its first piece, the others start the text, as
 * the official wrapper's slicing would give them for a tokenizer without that merge. The lists
 * of q point into sp[3] afterwards (the caller frees them). */
static enum qv_status spell_vocab(qv_session *s, qv_request *q, qve_tok_ids sp[3]) {
    const int32_t *map = s->m->talker.text_token_map;
    if (!map) return QV_OK;
    const int32_t **lists[3] = {&q->text_ids, &q->instruct_ids, &q->ref_text_ids};
    int *counts[3] = {&q->n_text_ids, &q->n_instruct_ids, &q->n_ref_text_ids};
    const int V = s->m->ck->cfg.text_vocab_size;
    int32_t *role = &s->role_ids[2];
    const int role_bad = *role >= 0 && *role < V && !map[*role];
    int n_bad = role_bad;
    for (int l = 0; l < 3; l++)
        for (int i = 0; *lists[l] && i < *counts[l]; i++) {
            const int32_t id = (*lists[l])[i];
            if (id < 0 || id >= V) return QV_OK; /* start_ids refuses the request */
            n_bad += !map[id];
        }
    if (!n_bad) return QV_OK;
    qve_tok *tok = qve_model_tok(s->m, s->err, sizeof s->err);
    if (!tok) return QV_E_MODEL;
    spell_note note = {.with_pieces = !q->strict_vocab};
    enum qv_status st = QV_OK;
    if (role_bad && !(st = spell_id(s, tok, *role, map, &sp[0], &note))) {
        if (!sp[0].n_ids) /* an empty vocab string */
            st = fail(s, QV_E_MODEL, "%s: role token %d spells as nothing", s->m->ck->dir, *role);
        else {
            *role = sp[0].ids[0];
            memmove(sp[0].ids, sp[0].ids + 1, --sp[0].n_ids * sizeof *sp[0].ids);
        }
    }
    for (int l = 0; l < 3 && !st; l++) {
        for (int i = 0; *lists[l] && i < *counts[l] && !st; i++)
            st = spell_id(s, tok, (*lists[l])[i], map, &sp[l], &note);
        if (*lists[l] || sp[l].n_ids) /* the role's other pieces start a text of only newlines */
            *lists[l] = sp[l].ids, *counts[l] = (int)sp[l].n_ids;
    }
    qve_model_tok_done(s->m);
    if (st) return st;
    if (q->strict_vocab)
        return fail(s, QV_E_VOCAB, "%d token(s) outside the model's vocabulary: %s", n_bad,
                    note.msg);
    snprintf(s->warn, sizeof s->warn,
             "%d token(s) outside the model's vocabulary, spelled with smaller pieces: %s%s", n_bad,
             note.msg, note.n_zero ? "; pieces without a row read as zero rows" : "");
    return QV_OK;
}

/* The prompt's layout (§3.4): the codec prefix, which rows of the projected text go where, and
 * how many positions the prefill and the text queue take. */
typedef struct {
    int clist[8], n_c;  /* codec prefix K ++ [S] ++ [pad, bos] (SLOT_VECTOR: the caller's vector) */
    int streaming, icl; /* text fed frame by frame; a reference (ICL) prompt */
    int Mi, N, Mr;      /* instruct, target text and reference text ids */
    int o_role, o_txt, o_ref, o_pad, o_bos, o_eos, n_txt; /* rows of the projected text */
    int Lt, Lc, n_q, L; /* ICL text and codec lengths, queued text rows, prefill positions */
} prompt_plan;

static enum qv_status check_request(qv_session *s, const qv_request *r) {
    const qv_model *m = s->m;
    const qvm_model_config *c = &m->ck->cfg;
    const int H = c->talker.hidden_size, CV = c->code_predictor.vocab_size;
    if (!r || !r->text_ids || r->n_text_ids < 1)
        return fail(s, QV_E_INVALID, "request: expected at least one text token id");
    if (!ids_valid(r->text_ids, r->n_text_ids, c->text_vocab_size) ||
        (r->n_instruct_ids && (!r->instruct_ids || !ids_valid(r->instruct_ids, r->n_instruct_ids,
                                                              c->text_vocab_size))) ||
        (r->n_ref_text_ids && (!r->ref_text_ids || !ids_valid(r->ref_text_ids, r->n_ref_text_ids,
                                                              c->text_vocab_size))) ||
        r->n_text_ids < 0 || r->n_instruct_ids < 0 || r->n_ref_text_ids < 0)
        return fail(s, QV_E_INVALID, "request: token id outside [0, %d)", c->text_vocab_size);
    if (!ids_valid(s->role_ids, 3, c->text_vocab_size)) /* a tokenizer that does not match */
        return fail(s, QV_E_MODEL, "%s: role block token id outside the model's [0, %d)", m->ck->dir,
                    c->text_vocab_size);
    if (r->n_ref_frames < 0 ||
        (r->n_ref_frames &&
         (!r->ref_codes ||
          !ids_valid(r->ref_codes, r->n_ref_frames * QV_N_CODEBOOKS, CV < 2048 ? CV : 2048))))
        return fail(s, QV_E_INVALID, "request: reference code outside [0, 2048)");
    if (r->speaker_vector && r->n_speaker_vector != H)
        return fail(s, QV_E_INVALID, "request: speaker vector: expected %d values, found %d", H,
                    r->n_speaker_vector);
    return QV_OK;
}

/* Language and speaker: the codec prefix K ++ [S] ++ [pad, bos]. */
static enum qv_status codec_prefix(qv_session *s, const qv_request *r, prompt_plan *p) {
    const qv_model *m = s->m;
    const qvm_model_config *c = &m->ck->cfg;
    char names[1024];
    const char *lang = r->language;
    int is_auto = !lang || !strcasecmp(lang, "auto"), lang_id = -1;
    if (!is_auto && (strstr(lang, "dialect") || (lang_id = qvm_language_id(c, lang)) < 0)) {
        list_names(names, sizeof names, m, 0);
        return fail(s, QV_E_LANGUAGE, "unknown language '%s' (valid: %s)", lang, names);
    }
    const qvm_speaker *spk = NULL;
    if (!r->speaker_vector && r->speaker) {
        spk = qvm_speaker_find(c, r->speaker);
        if (!spk) {
            list_names(names, sizeof names, m, 1);
            return fail(s, QV_E_SPEAKER, "unknown speaker '%s' (valid: %s)", r->speaker,
                        c->n_speakers ? names : "none, this model has no preset speakers");
        }
    }
    if (spk && spk->dialect[0] && (is_auto || !strcasecmp(lang, "chinese"))) {
        int d = qvm_language_id(c, spk->dialect); /* dialect rule (§1.3) */
        if (d >= 0) is_auto = 0, lang_id = d;
    }
    int *clist = p->clist, n_c = 0;
    if (is_auto) {
        clist[n_c++] = c->codec_nothink_id;
        clist[n_c++] = c->codec_think_bos_id;
        clist[n_c++] = c->codec_think_eos_id;
    } else {
        clist[n_c++] = c->codec_think_id;
        clist[n_c++] = c->codec_think_bos_id;
        clist[n_c++] = lang_id;
        clist[n_c++] = c->codec_think_eos_id;
    }
    if (r->speaker_vector)
        clist[n_c++] = SLOT_VECTOR;
    else if (spk)
        clist[n_c++] = spk->id;
    clist[n_c++] = c->codec_pad_id;
    clist[n_c++] = c->codec_bos_id;
    p->n_c = n_c;
    for (int j = 0; j < n_c; j++)
        if (clist[j] != SLOT_VECTOR && (clist[j] < 0 || clist[j] >= c->talker.vocab_size))
            return fail(s, QV_E_MODEL, "%s/config.json: codec id %d outside the codec vocabulary",
                        m->ck->dir, clist[j]);
    return QV_OK;
}

/* The session's view of the talker's embeddings, with the request's text bridge (a voice file's
 * WOVR) when it has one. */
static enum qv_status use_bridge(qv_session *s, const qv_request *r) {
    const qv_model *m = s->m;
    const qvm_model_config *c = &m->ck->cfg;
    s->tw = *qve_model_talker(m, s->p.quant);
    if (!r->bridge) return QV_OK;
    const qv_text_bridge *b = r->bridge;
    if (!b->fc1_weight || !b->fc1_bias || !b->fc2_weight || !b->fc2_bias || b->n_codec_rows < 0 ||
        b->n_codec_rows > c->talker.vocab_size || (b->n_codec_rows && !b->codec_rows))
        return fail(s, QV_E_INVALID, "request: incomplete text bridge (or %d codec rows > %d)",
                    b->n_codec_rows, c->talker.vocab_size);
    s->tw.fc1 = b->fc1_weight, s->tw.fc1_bias = b->fc1_bias;
    s->tw.fc2 = b->fc2_weight, s->tw.fc2_bias = b->fc2_bias;
    if (b->n_codec_rows) {
        const size_t row = (size_t)c->talker.hidden_size * sizeof(uint16_t);
        s->codec_copy = qvk_alloc((size_t)c->talker.vocab_size * row);
        if (!s->codec_copy) return fail(s, QV_E_NOMEM, "out of memory for the codec table");
        memcpy(s->codec_copy, m->talker.codec_embedding, (size_t)c->talker.vocab_size * row);
        memcpy(s->codec_copy, b->codec_rows, (size_t)b->n_codec_rows * row);
        s->tw.codec_embedding = s->codec_copy;
    }
    return QV_OK;
}

/* Every text row to project (instruct, role, text, ref, PAD, BOS, EOS), the prefill's length
 * (refused past max_position_embeddings) and max_frames cut to the positions left. */
static enum qv_status plan_positions(qv_session *s, const qv_request *r, prompt_plan *p) {
    const qvm_model_config *c = &s->m->ck->cfg;
    p->streaming = r->layout == QV_LAYOUT_STREAMING ||
                   (r->layout == QV_LAYOUT_DEFAULT && c->variant == QVF_VARIANT_BASE);
    p->icl = r->n_ref_frames > 0;
    const int Mi = p->Mi = r->n_instruct_ids, N = p->N = r->n_text_ids,
              Mr = p->Mr = r->n_ref_text_ids;
    p->o_role = Mi, p->o_txt = Mi + 3, p->o_ref = p->o_txt + N, p->o_pad = p->o_ref + Mr;
    p->o_bos = p->o_pad + 1, p->o_eos = p->o_pad + 2, p->n_txt = p->o_pad + 3;
    const int Lt = p->Lt = Mr + N + 1, Lc = p->Lc = 1 + r->n_ref_frames;
    int body;
    if (p->icl) {
        body = p->streaming ? Lc : Lt + Lc;
        p->n_q = p->streaming && Lt > Lc ? Lt - Lc : 0;
    } else {
        body = p->streaming ? 1 : N + 2;
        p->n_q = p->streaming ? N : 0;
    }
    const int L = p->L = Mi + 3 + (p->n_c - 1) + body;
    const int max_pos = c->talker.max_position_embeddings;
    if (L >= max_pos)
        return fail(s, QV_E_LIMIT, "prompt of %d positions exceeds max_position_embeddings %d", L,
                    max_pos);
    if (s->p.max_frames > max_pos - L) s->p.max_frames = max_pos - L;
    return QV_OK;
}

/* Projects every text row of the prompt into tproj [n_txt, H] (ids, tmp and wscr: scratch); the
 * caller's text_special replaces PAD, BOS, EOS; s->pad keeps the PAD row. */
static void project_text(qv_session *s, const qv_request *r, const prompt_plan *p, int32_t *ids,
                         float *tproj, float *tmp, float *wscr) {
    const qvm_model_config *c = &s->m->ck->cfg;
    const int H = c->talker.hidden_size;
    if (p->Mi) memcpy(ids, r->instruct_ids, (size_t)p->Mi * sizeof(int32_t));
    memcpy(ids + p->o_role, s->role_ids, sizeof s->role_ids);
    memcpy(ids + p->o_txt, r->text_ids, (size_t)p->N * sizeof(int32_t));
    if (p->Mr) memcpy(ids + p->o_ref, r->ref_text_ids, (size_t)p->Mr * sizeof(int32_t));
    ids[p->o_pad] = c->tts_pad_token_id;
    ids[p->o_bos] = c->tts_bos_token_id;
    ids[p->o_eos] = c->tts_eos_token_id;
    qve_talker_project_text(&s->tw, c, s->pool, tproj, ids, p->n_txt, tmp, wscr);
    if (r->text_special)
        memcpy(tproj + (size_t)p->o_pad * H, r->text_special, 3 * (size_t)H * sizeof(float));
    memcpy(s->pad, tproj + (size_t)p->o_pad * H, (size_t)H * sizeof(float));
}

/* The prefill embeddings into s->prefill and the queued text rows into s->queue (§3.4), from the
 * projected text tproj; f is scratch for one frame's embedding. */
static void assemble(qv_session *s, const qv_request *r, const prompt_plan *p, const float *tproj,
                     float *f) {
    const qvm_model_config *c = &s->m->ck->cfg;
    const int H = c->talker.hidden_size;
    const int Mi = p->Mi, N = p->N, Mr = p->Mr, n_c = p->n_c, Lt = p->Lt, Lc = p->Lc;
    const int o_txt = p->o_txt, o_ref = p->o_ref, o_pad = p->o_pad, o_bos = p->o_bos;
    const int o_eos = p->o_eos, n_q = p->n_q, icl = p->icl, streaming = p->streaming;
    const int *clist = p->clist;
    float *e = s->prefill;
#define TROW(i) (tproj + (size_t)(i)*H)
#define EMIT_TEXT(row) (memcpy(e, (row), (size_t)H * sizeof(float)))
#define NEXT() (e += H)
    for (int i = 0; i < Mi + 3; i++)
        EMIT_TEXT(TROW(i)), NEXT();
    for (int j = 0; j < n_c - 1; j++) {
        EMIT_TEXT(TROW(j < n_c - 2 ? o_pad : o_bos));
        if (clist[j] == SLOT_VECTOR)
            for (int i = 0; i < H; i++)
                e[i] += r->speaker_vector[i];
        else
            qve_talker_codec_embed(&s->tw, e, clist[j], 1);
        NEXT();
    }
    if (!icl && streaming) {
        EMIT_TEXT(TROW(o_txt)), qve_talker_codec_embed(&s->tw, e, c->codec_bos_id, 1), NEXT();
        for (int i = 1; i < N; i++)
            memcpy(s->queue + (size_t)(i - 1) * H, TROW(o_txt + i), (size_t)H * sizeof(float));
        memcpy(s->queue + (size_t)(N - 1) * H, TROW(o_eos), (size_t)H * sizeof(float));
    } else if (!icl) {
        for (int i = 0; i <= N; i++) {
            EMIT_TEXT(TROW(i < N ? o_txt + i : o_eos));
            qve_talker_codec_embed(&s->tw, e, c->codec_pad_id, 1);
            NEXT();
        }
        EMIT_TEXT(TROW(o_pad)), qve_talker_codec_embed(&s->tw, e, c->codec_bos_id, 1), NEXT();
    } else {
        /* Ts = [ref text, target text, EOS]; Cs = [C(bos), F(R_0) ... F(R_{T-1})] */
#define TS(i) TROW((i) < Mr ? o_ref + (i) : (i) < Mr + N ? o_txt + (i)-Mr : o_eos)
        if (!streaming) {
            for (int i = 0; i < Lt; i++)
                EMIT_TEXT(TS(i)), qve_talker_codec_embed(&s->tw, e, c->codec_pad_id, 1), NEXT();
        }
        for (int j = 0; j < Lc; j++) {
            if (streaming)
                EMIT_TEXT(j < Lt ? TS(j) : TROW(o_pad));
            else
                EMIT_TEXT(TROW(o_pad));
            if (j == 0) {
                qve_talker_codec_embed(&s->tw, e, c->codec_bos_id, 1);
            } else {
                frame_embed(s, f, r->ref_codes + (size_t)(j - 1) * QV_N_CODEBOOKS);
                for (int i = 0; i < H; i++)
                    e[i] += f[i];
            }
            NEXT();
        }
        for (int i = 0; i < n_q; i++)
            memcpy(s->queue + (size_t)i * H, TS(Lc + i), (size_t)H * sizeof(float));
#undef TS
    }
#undef TROW
#undef EMIT_TEXT
#undef NEXT
}

static enum qv_status start_ids(qv_session *s, const qv_request *r) {
    const qvm_model_config *c = &s->m->ck->cfg;
    const int H = c->talker.hidden_size, TH = c->text_hidden_size;
    free_utterance(s);
    s->state = QVE_FAILED;
    s->n_frames = 0;
    memset(s->seen, 0, (size_t)c->talker.vocab_size);
    qve_rng_seed(&s->rng, s->p.seed);
    prompt_plan p;
    enum qv_status st;
    if ((st = check_request(s, r)) || (st = codec_prefix(s, r, &p)) || (st = use_bridge(s, r)) ||
        (st = plan_positions(s, r, &p)))
        return st;

    const int L = p.L, n_txt = p.n_txt, n_q = p.n_q;
    int32_t *ids = malloc((size_t)n_txt * sizeof(int32_t));
    float *tproj = qvk_alloc((size_t)n_txt * H * sizeof(float));
    float *tmp = qvk_alloc(2 * (size_t)n_txt * TH * sizeof(float));
    float *wscr = qvk_alloc(qvk_linear_bf16_scratch(n_txt, TH, TH > H ? TH : H) * sizeof(float));
    float *xbuf = qvk_alloc((size_t)L * H * sizeof(float));
    s->prefill = qvk_alloc((size_t)L * H * sizeof(float));
    s->queue = n_q ? qvk_alloc((size_t)n_q * H * sizeof(float)) : NULL;
    st = QV_E_NOMEM;
    if (!ids || !tproj || !tmp || !wscr || !xbuf || !s->prefill || (n_q && !s->queue) ||
        qve_stack_state_init(&s->talker, &s->tw.stack, L + s->p.max_frames, L > 1 ? L : 0)) {
        fail(s, st, "out of memory for a prompt of %d positions", L);
        goto done;
    }
    s->talker.act_max = s->act_max;
    project_text(s, r, &p, ids, tproj, tmp, wscr);
    assemble(s, r, &p, tproj, xbuf); /* xbuf: scratch for one F(R_j) before the prefill uses it */
    s->n_prefill = L;
    s->n_queue = n_q;

    /* -- prefill -- */
    memcpy(xbuf, s->prefill, (size_t)L * H * sizeof(float));
    qve_stack_forward(&s->talker, s->pool, xbuf, L, 0);
    qve_talker_head(&s->tw, s->pool, s->z, s->logits_raw, xbuf + (size_t)(L - 1) * H);
    s->pos = L;
    s->step_due = 0;
    s->state = QVE_RUNNING;
    st = QV_OK;
done:
    free(ids);
    qvk_free(tproj);
    qvk_free(tmp);
    qvk_free(wscr);
    qvk_free(xbuf);
    if (st != QV_OK) free_utterance(s);
    return st;
}

/* ==== frame loop ============================================================================= */

int qve_session_pick_cp(const float *logits, int n, void *ctx) {
    qv_session *s = ctx;
    memcpy(s->logits, logits, (size_t)n * sizeof(float));
    const qve_sample_params sp = {s->p.subtalker_do_sample, s->p.subtalker_temperature,
                                  s->p.subtalker_top_p, s->p.subtalker_top_k};
    return qve_sample(s->logits, n, &sp, &s->rng, s->work, s->work_idx);
}

/* The talker step on the last frame's input (s->x): the logits of the next frame. */
static void talker_step(qv_session *s) {
    qve_stack_forward(&s->talker, s->pool, s->x, 1, s->pos++);
    qve_talker_head(&s->tw, s->pool, s->z, s->logits_raw, s->x);
    s->step_due = 0;
}

int qve_session_frame_begin(qv_session *s, int *c0, int *done, enum qv_status *st) {
    *done = 0;
    *st = QV_OK;
    if (s->state == QVE_DONE) {
        *done = 1;
        return 0;
    }
    if (s->state != QVE_RUNNING) {
        *st = fail(s, QV_E_STATE, "no utterance in progress");
        return 0;
    }
    if (s->n_frames >= s->p.max_frames) {
        s->state = QVE_DONE;
        *done = 1;
        return 0;
    }
    if (s->step_due) talker_step(s);
    const qvm_model_config *c = &s->m->ck->cfg;
    const int H = c->talker.hidden_size, V = c->talker.vocab_size;
    memcpy(s->logits, s->logits_raw, (size_t)V * sizeof(float));
    qve_talker_logits_process(s->logits, V, s->seen, s->p.repetition_penalty, s->n_frames,
                              c->codec_eos_token_id);
    if (s->p.ignore_eos) s->logits[c->codec_eos_token_id] = -INFINITY; /* benchmarks only */
    const qve_sample_params sp = {s->p.do_sample, s->p.temperature, s->p.top_p, s->p.top_k};
    *c0 = qve_sample(s->logits, V, &sp, &s->rng, s->work, s->work_idx);
    if (*c0 == c->codec_eos_token_id) {
        s->state = QVE_DONE;
        *done = 1;
        return 0;
    }
    s->seen[*c0] = 1;
    memcpy(s->z_frame, s->z, (size_t)H * sizeof(float));
    return 1;
}

void qve_session_frame_input(qv_session *s, const int32_t *frame) {
    const int H = s->m->ck->cfg.talker.hidden_size;
    const int k = s->n_frames++;
    frame_embed(s, s->x, s->forced ? s->forced + (size_t)k * QV_N_CODEBOOKS : frame);
    const float *text = k < s->n_queue ? s->queue + (size_t)k * H : s->pad;
    for (int i = 0; i < H; i++)
        s->x[i] += text[i];
}

enum qv_status qve_session_frame_codes(qv_session *s, int32_t codes[QV_N_CODEBOOKS], int *done) {
    int c0;
    enum qv_status st;
    if (!qve_session_frame_begin(s, &c0, done, &st)) return st;
    int32_t frame[QV_N_CODEBOOKS];
    qve_cp_frame(&s->cp, s->m, &s->tw, s->pool, s->z_frame, c0, frame, qve_session_pick_cp, s);
    qve_session_frame_input(s, frame);
    s->step_due = 1;
    memcpy(codes, frame, sizeof frame);
    return QV_OK;
}

enum qv_status qve_session_frame(qv_session *s, int32_t codes[QV_N_CODEBOOKS], int *done) {
    const enum qv_status st = qve_session_frame_codes(s, codes, done);
    if (s->step_due) talker_step(s);
    return st;
}

/* ==== text ================================================================================== */

/* A tokenizer failure's status, its detail in err (a default when empty). */
static enum qv_status tok_code(int st, char *err, size_t err_size) {
    if (st == QVE_TOK_OK) return QV_OK;
    if (!err[0]) snprintf(err, err_size, "tokenizer: %s", qve_tok_strerror(st));
    return st == QVE_TOK_E_NOMEM      ? QV_E_NOMEM
           : st == QVE_TOK_E_BAD_UTF8 ? QV_E_INVALID
                                      : QV_E_MODEL;
}

static enum qv_status tok_status(qv_session *s, int st) {
    return tok_code(st, s->err, sizeof s->err);
}

enum qv_status qv_model_tokenize(const qv_model *m, const char *text, int32_t **ids, int *n_ids) {
    if (!m || !text || !ids || !n_ids) return qvu_fail(QV_E_INVALID, "qv_model_tokenize: NULL");
    *ids = NULL;
    *n_ids = 0;
    char err[QVE_ERR_MAX] = "";
    qve_tok *tok = qve_model_tok(m, err, sizeof err);
    if (!tok) return qvu_fail(QV_E_MODEL, err);
    qve_tok_ids v = {0};
    int st = qve_tok_encode(tok, text, strlen(text), &v, err, sizeof err);
    qve_model_tok_done(m);
    if (st != QVE_TOK_OK) {
        qve_tok_ids_free(&v);
        return qvu_fail(tok_code(st, err, sizeof err), err);
    }
    if (v.n_ids > (1u << 24)) {
        qve_tok_ids_free(&v);
        return qvu_failf(QV_E_LIMIT, "text of %zu tokens is too long", v.n_ids);
    }
    *ids = v.ids;
    *n_ids = (int)v.n_ids;
    return QV_OK;
}

enum qv_status qv_session_tokenize(qv_session *s, const char *text, int32_t **ids, int *n_ids) {
    enum qv_status st = qv_model_tokenize(s->m, text, ids, n_ids);
    if (st) snprintf(s->err, sizeof s->err, "%s", qv_last_error());
    return st;
}

/* The request's strings where ids are not given, with the reference's templates (prompt.h: the
 * whole template string is encoded, so a text starting with CR/LF merges into the role block
 * exactly as in the official wrapper), into q (pointing into text, ref, ins). */
static enum qv_status tokenize_request(qv_session *s, qv_request *q, qve_tok_ids *text,
                                       qve_tok_ids *ref, qve_tok_ids *ins) {
    if (!(q->text && !q->text_ids) && !(q->ref_text && !q->ref_text_ids) &&
        !(q->instruct && q->instruct[0] && !q->instruct_ids))
        return QV_OK;
    qve_tok *tok = qve_model_tok(s->m, s->err, sizeof s->err);
    if (!tok) return QV_E_MODEL;
    int32_t role[3], ref_role[3];
    enum qv_status st = QV_OK;
    if (q->text && !q->text_ids) {
        st = tok_status(s, qve_prompt_target_ids(tok, q->text, strlen(q->text), text, role,
                                                 s->err, sizeof s->err));
        if (!st) memcpy(s->role_ids, role, sizeof role);
        q->text_ids = text->ids, q->n_text_ids = (int)text->n_ids;
    }
    if (!st && q->ref_text && !q->ref_text_ids) {
        st = tok_status(s, qve_prompt_ref_ids(tok, q->ref_text, strlen(q->ref_text), ref,
                                              ref_role, s->err, sizeof s->err));
        q->ref_text_ids = ref->ids, q->n_ref_text_ids = (int)ref->n_ids;
    }
    if (!st && q->instruct && q->instruct[0] && !q->instruct_ids) {
        st = tok_status(s, qve_prompt_instruct_ids(tok, q->instruct, strlen(q->instruct), ins,
                                                   s->err, sizeof s->err));
        q->instruct_ids = ins->ids, q->n_instruct_ids = (int)ins->n_ids;
    }
    qve_model_tok_done(s->m);
    return st;
}

/* Tokenises the request's strings (tokenize_request), then builds the prompt. */
enum qv_status qv_session_start(qv_session *s, const qv_request *r) {
    if (!s || !r) return qvu_fail(QV_E_INVALID, "qv_session_start: NULL argument");
    if (r->struct_size != sizeof *r)
        return qvu_check_size("qv_request", r->struct_size, sizeof *r);
    if (r->bridge && r->bridge->struct_size != sizeof *r->bridge)
        return qvu_check_size("qv_text_bridge", r->bridge->struct_size, sizeof *r->bridge);
    qv_request q = *r;
    qve_tok_ids text = {0}, ins = {0}, ref = {0}, spelled[3] = {{0}};
    enum qv_status st = QV_OK;
    s->err[0] = s->warn[0] = 0;
    s->role_ids[0] = s->m->ck->cfg.im_start_token_id;
    s->role_ids[1] = s->m->ck->cfg.assistant_token_id;
    s->role_ids[2] = NEWLINE_TOKEN_ID;
    st = tokenize_request(s, &q, &text, &ref, &ins);
    if (st) goto done;
    if (q.n_text_ids > (1 << 24) || q.n_ref_text_ids > (1 << 24) || q.n_instruct_ids > (1 << 24)) {
        st = fail(s, QV_E_LIMIT, "text too long");
        goto done;
    }
    st = spell_vocab(s, &q, spelled);
    if (!st) st = start_ids(s, &q);
done:
    if (st != QV_OK) s->state = QVE_FAILED;
    qve_tok_ids_free(&text), qve_tok_ids_free(&ins), qve_tok_ids_free(&ref);
    for (int l = 0; l < 3; l++) qve_tok_ids_free(&spelled[l]);
    return qvu_fail(st, s->err);
}
