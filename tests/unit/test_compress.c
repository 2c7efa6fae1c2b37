/* test_compress.c — compressed checkpoints (compress/qvz.h, docs/compression.md) end to end:
 * vocabulary pruning + encoder strip give greedy codes identical to the uncompressed model on
 * covered text (the lossless claim) and name the ids of uncovered text (warning, or QV_E_VOCAB
 * when strict); the f16 decoder's PCM stays within a stated bound of f32; a q4 checkpoint runs
 * exactly as --quant q4 on the original, with its logits error and teacher-forced argmax
 * agreement bounded; layer pruning loads and runs; neuron pruning narrows the unprotected layers
 * (teacher-forced talker agreement printed); bad input fails cleanly, leaving nothing.
 * Tiny models always; the synthetic 0.6B and 1.7B CustomVoice when they are in $QVOICE_CACHE.
 */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "checkpoint/ckpt.h"
#include "tests/unit/helpers/models.h"

#include <cJSON.h>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "compress/qvz.h"
#include "engine/model.h"
#include "engine/prompt.h"
#include "engine/speech_decoder.h"
#include "engine/tokenizer.h"
#include "kernels/kernels.h"
#include "kernels/q4.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"
#include "util/fileio.h"

#define MAX_FRAMES 24

static const char *const COVERED[] = {
    "Hello world, this is a simple test of the compressed model.",
    "The quick brown fox jumps over the lazy dog 42 times!",
};

static char g_cache[1024];

static const char *model(const char *name) {
    static char p[4][1100];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", g_cache, name);
    return p[k];
}

static int exists(const char *dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    return file_bytes(p) > 0;
}

static void compress(const char *in, const char *out, qvz_options o) {
    char err[1024];
    qvz_report r;
    o.n_threads = 2;
    if (qvz_compress(in, out, &o, &r, err, sizeof err)) fail_msg("%s", err);
    printf("    %s: %.1f -> %.1f MB (%d text rows, %d q4 matrices, %d encoder tensors dropped)\n",
           out, (r.model_bytes_in + r.codec_bytes_in) / 1e6,
           (r.model_bytes_out + r.codec_bytes_out) / 1e6, r.n_text_rows, r.n_q4,
           r.n_encoder_tensors);
}

static qv_model *load(const char *dir) {
    qv_model *m;
    if (qv_model_load(&m, dir)) fail_msg("%s", qv_last_error());
    return m;
}

static qv_session *start(qv_model *m, int quant, const char *text, int strict, enum qv_status want) {
    qv_params p = qv_model_params(m);
    p.n_threads = 2, p.do_sample = 0, p.subtalker_do_sample = 0, p.max_frames = MAX_FRAMES;
    p.quant = quant;
    qv_session *s;
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    qv_request r = qv_default_request();
    r.text = text, r.language = "english", r.strict_vocab = strict;
    if (qv_model_n_speakers(m) > 0) r.speaker = qv_model_speaker(m, 0);
    enum qv_status st = qv_session_start(s, &r);
    if (st != want) fail_msg("start: %s: %s", qv_strerror(st), qv_last_error());
    return s;
}

/* Greedy codes of text (at most n_max frames) into codes; returns the frame count. */
static int greedy(qv_model *m, int quant, const char *text, int32_t *codes, int n_max) {
    qv_session *s = start(m, quant, text, 0, QV_OK);
    assert_string_equal(qv_session_warning(s), "");
    int n = 0, done = 0;
    while (n < n_max && !qv_session_next_frame(s, codes + (size_t)n * QV_N_CODEBOOKS, &done) &&
           !done)
        n++;
    qv_session_free(s);
    return n;
}

static void same_codes(qv_model *a, int qa, qv_model *b, int qb, int n_max) {
    for (size_t t = 0; t < sizeof COVERED / sizeof COVERED[0]; t++) {
        int32_t ca[MAX_FRAMES * QV_N_CODEBOOKS], cb[MAX_FRAMES * QV_N_CODEBOOKS];
        int na = greedy(a, qa, COVERED[t], ca, n_max), nb = greedy(b, qb, COVERED[t], cb, n_max);
        printf("    \"%.24s...\": %d / %d frames, codes %s\n", COVERED[t], na, nb,
               na == nb && !memcmp(ca, cb, sizeof(int32_t) * QV_N_CODEBOOKS * (size_t)na)
                   ? "identical"
                   : "DIFFER");
        assert_int_equal(na, nb);
        assert_memory_equal(ca, cb, sizeof(int32_t) * QV_N_CODEBOOKS * (size_t)na);
    }
}

/* max |Δ| of the f16 decoder's PCM against the f32 one on the same codes; returns it. */
static double decoder_delta(const char *ref_dir, const char *f16_dir) {
    char err[1024];
    qvm_ckpt *ck_a = test_ckpt_open(ref_dir);
    qve_decoder *a = qve_decoder_load(ck_a, err, sizeof err);
    qvm_ckpt_free(ck_a);
    if (!a) fail_msg("%s", err);
    qvm_ckpt *ck_b = test_ckpt_open(f16_dir);
    qve_decoder *b = qve_decoder_load(ck_b, err, sizeof err);
    qvm_ckpt_free(ck_b);
    if (!b) fail_msg("%s", err);
    enum { N = 12 };
    int codes[N * 16];
    for (int i = 0; i < N * 16; i++)
        codes[i] = (i * 733 + 17) % 2048;
    const int spf = qve_decoder_samples_per_frame(a);
    float *wa = malloc(sizeof(float) * N * (size_t)spf), *wb = malloc(sizeof(float) * N * (size_t)spf);
    assert_non_null(wa), assert_non_null(wb);
    assert_int_equal(qve_decoder_decode(a, codes, N, wa, err, sizeof err), 0);
    assert_int_equal(qve_decoder_decode(b, codes, N, wb, err, sizeof err), 0);
    double d = 0, peak = 0;
    for (int i = 0; i < N * spf; i++)
        d = fmax(d, fabs((double)wa[i] - wb[i])), peak = fmax(peak, fabs(wa[i]));
    printf("    f16 decoder: PCM max |delta| %.2e (peak |x| %.3f) over %d frames\n", d, peak, N);
    free(wa), free(wb);
    qve_decoder_free(a), qve_decoder_free(b);
    return d;
}

/* dst = a copy of the model directory src whose speech decoder holds every F16 tensor widened to
 * F32: the same values as the f16 decoder, which the engine then packs in f32 panels. */
static void widen_decoder(const char *src, const char *dst) {
    static const char *const dtypes[] = {"BF16", "F16", "F32", "I64", "I32", "U32"};
    char p[1200], err[512];
    assert_int_equal(sh("cp -r %s %s", src, dst), 0);
    snprintf(p, sizeof p, "%s/speech_tokenizer/model.safetensors", src);
    qvm_st *st = qvm_st_open(p, err, sizeof err);
    if (!st) fail_msg("%s", err);
    cJSON *h = cJSON_CreateObject();
    uint64_t off = 0;
    for (int i = 0; i < qvm_st_count(st); i++) {
        const qvm_tensor *t = qvm_st_at(st, i);
        const int wide = t->dtype == QVM_DTYPE_F16;
        const uint64_t n = wide ? t->n_bytes * 2 : t->n_bytes;
        cJSON *e = cJSON_AddObjectToObject(h, t->name), *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON *range = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddStringToObject(e, "dtype", dtypes[wide ? QVM_DTYPE_F32 : t->dtype]);
        for (int d = 0; d < t->n_dims; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(range, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(range, cJSON_CreateNumber((double)(off + n)));
        off += n;
    }
    char *js = cJSON_PrintUnformatted(h);
    const uint64_t n_js = strlen(js), n_hdr = (n_js + 63) / 64 * 64; /* data 64-byte aligned */
    snprintf(p, sizeof p, "%s/speech_tokenizer/model.safetensors", dst);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    unsigned char n8[8];
    for (int i = 0; i < 8; i++)
        n8[i] = (unsigned char)(n_hdr >> 8 * i);
    assert_int_equal(fwrite(n8, 1, 8, f), 8);
    assert_int_equal(fwrite(js, 1, n_js, f), n_js);
    for (uint64_t i = n_js; i < n_hdr; i++) /* the format pads its header with spaces */
        assert_int_equal(fputc(' ', f), ' ');
    for (int i = 0; i < qvm_st_count(st); i++) {
        const qvm_tensor *t = qvm_st_at(st, i);
        if (t->dtype != QVM_DTYPE_F16) {
            assert_int_equal(fwrite(t->data, 1, t->n_bytes, f), t->n_bytes);
            continue;
        }
        float *w = qvm_tensor_to_f32(t);
        assert_non_null(w);
        assert_int_equal(fwrite(w, 2, t->n_bytes, f), t->n_bytes);
        qvk_free(w);
    }
    assert_int_equal(fclose(f), 0);
    free(js), cJSON_Delete(h), qvm_st_close(st);
}

/* The f16 decoder's PCM (f16 panels) against the same values held in f32 panels, which is how
 * the f16 decoder ran before it kept f16 panels: identical where f32 panels run the avx512
 * kernel (the other variants' f32 panels run sgemm, in OpenBLAS's order). */
static void f16_panels_identical(const char *f16_dir, const char *wide_dir) {
    if (strcmp(qvk_variant(), "avx512") != 0) {
        printf("    f16 panels vs f32: not checked (kernels %s)\n", qvk_variant());
        return;
    }
    widen_decoder(f16_dir, wide_dir);
    assert_true(decoder_delta(wide_dir, f16_dir) == 0.0);
}

static double rel_err(const float *a, const float *ref, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++)
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]), den += (double)ref[i] * ref[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

struct forced {
    const int32_t *codes;
    int g;
};
static int pick_forced(const float *l, int n, void *ctx) {
    (void)l, (void)n;
    struct forced *f = ctx;
    return f->codes[1 + f->g++];
}

/* quant vs bf16 on m: talker logits after the same prefill, and the code predictor's logits
 * teacher-forced on bf16's greedy codes for n frames. */
static void quality(qv_model *m, int quant, int n, double *talker_err, double *cp_err,
                    double *cp_agree) {
    qv_session *s = start(m, QV_QUANT_BF16, COVERED[0], 0, QV_OK);
    qv_session *q = start(m, quant, COVERED[0], 0, QV_OK);
    const int V = m->ck->cfg.talker.vocab_size, CV = m->ck->cfg.code_predictor.vocab_size;
    *talker_err = rel_err(q->logits_raw, s->logits_raw, V);
    qve_cp_state cp;
    assert_int_equal(qve_cp_state_init(&cp, m), 0);
    qve_cp_state_use(&cp, qve_model_cp(m, quant));
    double e = 0;
    long same = 0, k = 0;
    for (int i = 0; i < n; i++) {
        int32_t c[QV_N_CODEBOOKS], tmp[QV_N_CODEBOOKS];
        int done;
        assert_int_equal(qv_session_next_frame(s, c, &done), QV_OK);
        if (done) break;
        struct forced f = {c, 0};
        qve_cp_frame(&cp, m, &s->tw, s->pool, s->z_frame, c[0], tmp, pick_forced, &f);
        for (int g = 0; g < QV_N_CODEBOOKS - 1; g++, k++) {
            e += rel_err(cp.logits + (size_t)g * CV, s->cp.logits + (size_t)g * CV, CV);
            same += argmax(cp.logits + (size_t)g * CV, CV) == c[1 + g];
        }
    }
    *cp_err = k ? e / k : 0, *cp_agree = k ? (double)same / k : 0;
    printf("    %s vs bf16: talker logits rel. error %.4f; code predictor %.4f, argmax agrees "
           "%.1f %% (%ld teacher-forced)\n",
           quant == QV_QUANT_Q4 ? "q4" : "int8", *talker_err, *cp_err, 100 * *cp_agree, k);
    qve_cp_state_free(&cp);
    qv_session_free(s), qv_session_free(q);
}

/* qvk_f32_to_f16 (the f16 decoder's narrowing): every half round-trips; halfway cases round to
 * even; overflow gives infinity. */
static void test_f16_narrowing(void **st) {
    (void)st;
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        uint16_t in = (uint16_t)h, out;
        float f;
        qvk_f16_to_f32(&f, &in, 1);
        qvk_f32_to_f16(&out, &f, 1);
        bad += out != in;
    }
    assert_int_equal(bad, 0);
    const float x[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 0x1p-25f};
    const uint16_t want[4] = {0x3c00, 0x3c02, 0x7c00, 0x0000}; /* ties to even; inf; 0.5 ulp -> 0 */
    uint16_t got[4];
    qvk_f32_to_f16(got, x, 4);
    assert_memory_equal(got, want, sizeof want);
}

/* ==== tiny models ============================================================================ */

/* Uncovered text on a vocabulary-pruned model b: each token without a row is spelled with the
 * merge parts that formed it (never a zero row): the prompt is the one of those ids given
 * directly, the warning names the tokens, a strict request is refused. */
static void spelled(qv_model *b) {
    /* uncovered in running text: ".\n", "-free", "/or", ".org", "   " (then " it"), "ße" */
    const char *text = "It is copyleft-free.\nRead    it at www.gnu.org and/or here: Straße.";
    const int32_t *map = b->talker.text_token_map;
    char err[512];
    qve_tok *tok = qve_tok_open(b->ck->dir, err, sizeof err);
    if (!tok) fail_msg("%s", err);
    qve_tok_ids ids = {0}, sp = {0};
    int32_t role[3];
    assert_int_equal(
        qve_prompt_target_ids(tok, text, strlen(text), &ids, role, err, sizeof err), 0);
    int n_bad = 0;
    for (size_t i = 0; i < ids.n_ids; i++) {
        n_bad += !map[ids.ids[i]];
        assert_int_equal(qve_tok_spell(tok, ids.ids[i], map, b->ck->cfg.text_vocab_size, &sp),
                         QVE_TOK_OK);
    }
    for (size_t i = 0; i < sp.n_ids; i++) /* every piece has a row */
        assert_int_not_equal(map[sp.ids[i]], 0);
    const int32_t nl = qve_tok_token_to_id(tok, ".\xC4\x8A"), parts[2] = {13, 198}; /* ".\n" */
    assert_int_equal(map[nl], 0);
    int n_nl = 0;
    for (size_t i = 0; i + 1 < sp.n_ids; i++) /* "." "\n" where ".\n" was */
        n_nl += sp.ids[i] == parts[0] && sp.ids[i + 1] == parts[1];
    assert_int_equal(n_nl, 1);
    assert_true(n_bad >= 6);
    qv_session *s = start(b, QV_QUANT_BF16, text, 0, QV_OK);
    const char *w = qv_session_warning(s);
    printf("    warning: %s\n", w);
    assert_non_null(strstr(w, "spelled with smaller pieces"));
    assert_non_null(strstr(w, "\"-free\" as "));
    assert_non_null(strstr(w, "\"   \" as ")); /* three spaces: four before a word */
    char want[64];
    snprintf(want, sizeof want, "%d \".\\n\" as 13 198", nl);
    assert_non_null(strstr(w, want));
    assert_null(strstr(w, "zero row"));
    /* the same prompt as the spelled ids given directly (which need no spelling) */
    qv_params p = qv_model_params(b);
    p.n_threads = 2, p.do_sample = 0, p.subtalker_do_sample = 0, p.max_frames = MAX_FRAMES;
    qv_session *d;
    assert_int_equal(qv_session_new(&d, b, &p), QV_OK);
    qv_request r = qv_default_request();
    r.text_ids = sp.ids, r.n_text_ids = (int)sp.n_ids, r.language = "english";
    if (qv_model_n_speakers(b) > 0) r.speaker = qv_model_speaker(b, 0);
    assert_int_equal(qv_session_start(d, &r), QV_OK);
    assert_string_equal(qv_session_warning(d), "");
    const size_t H = (size_t)b->ck->cfg.talker.hidden_size;
    assert_int_equal(s->n_prefill, d->n_prefill);
    assert_int_equal(s->n_queue, d->n_queue);
    assert_memory_equal(s->prefill, d->prefill, sizeof(float) * H * (size_t)s->n_prefill);
    qv_session_free(s), qv_session_free(d);
    /* leading newlines merge into the role block's third id ("\n\n\n" here, no row): its first
     * piece stays there, the others start the text */
    s = start(b, QV_QUANT_BF16, "\n\nHello world.", 0, QV_OK);
    printf("    warning: %s\n", qv_session_warning(s));
    snprintf(want, sizeof want, "%d \"\\n\\n\\n\" as ",
             qve_tok_token_to_id(tok, "\xC4\x8A\xC4\x8A\xC4\x8A"));
    assert_non_null(strstr(qv_session_warning(s), want));
    assert_int_not_equal(map[s->role_ids[2]], 0);
    qv_session_free(s);
    s = start(b, QV_QUANT_BF16, text, 1, QV_E_VOCAB);
    printf("    strict: %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "outside the model's vocabulary"));
    assert_non_null(strstr(qv_last_error(), "\"-free\""));
    qv_session_free(s);
    qve_tok_ids_free(&ids), qve_tok_ids_free(&sp);
    qve_tok_free(tok);
}

/* Copies scratch directory from to to (names in the test's scratch directory). */
static void copy_dir(const char *from, const char *to) {
    char a[1200];
    snprintf(a, sizeof a, "%s", tmp_path(from));
    assert_int_equal(sh("rm -rf '%s' && cp -r '%s' '%s'", tmp_path(to), a, tmp_path(to)), 0);
}

/* Overwrites entry id of dir's talker.model.text_token_map with v. */
static void set_map_entry(const char *dir, int id, int32_t v) {
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const long at = tmp_st_offset(path, "talker.model.text_token_map");
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, at + 4L * id, SEEK_SET), 0);
    assert_int_equal(fwrite(&v, 4, 1, f), 1);
    fclose(f);
}

/* Rewrites dir's vocab.json with token tok at id (and, when tok2, tok2 at id2). */
static void set_vocab_ids(const char *dir, const char *tok, int id, const char *tok2, int id2) {
    char path[1200], err[256];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    size_t n;
    char *text = qvu_read_file(path, 1 << 26, &n, err, sizeof err);
    if (!text) fail_msg("%s", err);
    cJSON *v = cJSON_Parse(text);
    assert_non_null(v);
    free(text);
    cJSON_ReplaceItemInObjectCaseSensitive(v, tok, cJSON_CreateNumber(id));
    if (tok2) {
        cJSON_DeleteItemFromObjectCaseSensitive(v, tok2);
        cJSON_AddNumberToObject(v, tok2, id2);
    }
    text = cJSON_PrintUnformatted(v);
    tmp_write(path, text, strlen(text));
    free(text), cJSON_Delete(v);
}

/* A session on text over dir's model fails with QV_E_MODEL, its message containing what. */
static void expect_model_error(const char *dir, const char *text, const char *what) {
    qv_model *b = load(dir);
    qv_session *s = start(b, QV_QUANT_BF16, text, 0, QV_E_MODEL);
    printf("    %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), what));
    qv_session_free(s), qv_model_free(b);
}

/* A tokenizer that does not match the pruned model (ids past its text_vocab_size, an empty
 * token) is refused with one line, never read past the token map; a text of only newlines keeps
 * the role token's spelled pieces. */
static void mismatched_tokenizer(void) {
    qv_model *b = load(tmp_path("tiny-vocab"));
    const int V = b->ck->cfg.text_vocab_size;
    /* "\n\n" merges into the role block's "\n\n\n" (no row): its other pieces are the text */
    qv_session *s = start(b, QV_QUANT_BF16, "\n\n", 0, QV_OK);
    printf("    newlines only: %s\n", qv_session_warning(s));
    assert_non_null(strstr(qv_session_warning(s), "\"\\n\\n\\n\" as "));
    qv_session_free(s);
    qv_model_free(b);
    /* "." past the map: ".\n" (no row) spells with it */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", tmp_path("tiny-badtok"));
    copy_dir("tiny-vocab", "tiny-badtok");
    set_vocab_ids(dir, ".", V + 5, NULL, 0);
    expect_model_error(dir, "It is copyleft-free.\nRead it", "past the model's");
    /* "\n" past the map: the role block's third id */
    copy_dir("tiny-vocab", "tiny-badtok");
    set_vocab_ids(dir, "\xC4\x8A", V + 5, NULL, 0);
    expect_model_error(dir, "Hello.", "role block token id outside");
    /* a token of control bytes and 15 "é" given as an id (no merge forms it, no row): named with
     * \xNN escapes, cut at a character boundary */
    copy_dir("tiny-vocab", "tiny-badtok");
    char odd[80] = "\xC4\x81\xC4\x81"; /* bytes 0x01 0x01 in vocab form, then "é" as "Ã©" */
    for (int i = 0; i < 15; i++) strcat(odd, "\xC3\x83\xC2\xA9");
    set_vocab_ids(dir, "\xC4\x8A", 198, odd, V - 2);
    set_map_entry(dir, V - 2, 0);
    b = load(dir);
    qv_params p = qv_model_params(b);
    p.n_threads = 2, p.max_frames = MAX_FRAMES;
    assert_int_equal(qv_session_new(&s, b, &p), QV_OK);
    qv_request r = qv_default_request();
    const int32_t odd_id = V - 2;
    r.text_ids = &odd_id, r.n_text_ids = 1, r.language = "english";
    if (qv_model_n_speakers(b) > 0) r.speaker = qv_model_speaker(b, 0);
    assert_int_equal(qv_session_start(s, &r), QV_OK);
    const char *w = qv_session_warning(s);
    printf("    %s\n", w);
    char want[64];
    snprintf(want, sizeof want, "%d \"\\x01\\x01\xC3\xA9", odd_id);
    assert_non_null(strstr(w, want));
    const char *t0 = strchr(strstr(w, want), '"') + 1;
    assert_int_equal(strchr(t0, '"') - t0, 8 + 2 * 11); /* 31 bytes fit: it ends after an "é" */
    qv_session_free(s), qv_model_free(b);
    /* the role's "\n" (198) without a row, and an empty string in the tokenizer */
    copy_dir("tiny-vocab", "tiny-badtok");
    set_vocab_ids(dir, "\xC4\x8A", V - 1, "", 198);
    set_map_entry(dir, 198, 0);
    b = load(dir);
    assert_int_equal(qv_session_new(&s, b, &p), QV_OK);
    const int32_t hello = 9707; /* "Hello", covered */
    r.text_ids = &hello, r.n_text_ids = 1, r.language = "english";
    if (qv_model_n_speakers(b) > 0) r.speaker = qv_model_speaker(b, 0);
    assert_int_equal(qv_session_start(s, &r), QV_E_MODEL);
    printf("    %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "role token 198 spells as nothing"));
    qv_session_free(s), qv_model_free(b);
}

static void test_tiny_lossless(void **st) {
    (void)st;
    if (!exists(model("tiny-cv"))) skip();
    qvz_options o = qvz_default_options();
    o.vocab = "english", o.strip_encoder = 1, o.decoder_f16 = 1;
    compress(model("tiny-cv"), tmp_path("tiny-vocab"), o);
    char err[512];
    char p[1200];
    snprintf(p, sizeof p, "%s/speech_tokenizer/model.safetensors", tmp_path("tiny-vocab"));
    qvm_st *cs = qvm_st_open(p, err, sizeof err);
    assert_non_null(cs);
    for (int i = 0; i < qvm_st_count(cs); i++) { /* no encoder; the decoder in f16 */
        assert_true(strncmp(qvm_st_at(cs, i)->name, "encoder.", 8) != 0);
        assert_false(strstr(qvm_st_at(cs, i)->name, "input_proj.weight") &&
                     strstr(qvm_st_at(cs, i)->name, "quantizer")); /* encode-only */
        assert_true(qvm_st_at(cs, i)->dtype != QVM_DTYPE_F32);
    }
    qvm_st_close(cs);
    qv_model *a = load(model("tiny-cv")), *b = load(tmp_path("tiny-vocab"));
    assert_non_null(b->talker.text_token_map);
    assert_true(b->text.n_text_rows < b->ck->cfg.text_vocab_size / 2);
    same_codes(a, QV_QUANT_BF16, b, QV_QUANT_BF16, MAX_FRAMES);
    spelled(b);
    qv_model_free(a), qv_model_free(b);
    /* a map entry past the stored rows is refused at load, naming the tensor */
    copy_dir("tiny-vocab", "tiny-badmap");
    set_map_entry(tmp_path("tiny-badmap"), 42, 1 << 30);
    qv_model *bm;
    assert_int_not_equal(qv_model_load(&bm, tmp_path("tiny-badmap")), QV_OK);
    printf("    %s\n", qv_last_error());
    assert_non_null(strstr(qv_last_error(), "text_token_map: entry 42"));
    mismatched_tokenizer();
    /* f16 keeps 11 mantissa bits: PCM within 1e-3 of f32 (measured ~1e-5 on random weights) */
    assert_true(decoder_delta(model("tiny-cv"), tmp_path("tiny-vocab")) < 1e-3);
    f16_panels_identical(tmp_path("tiny-vocab"), tmp_path("tiny-wide"));
    /* an empty cache: the first load packs the f16 decoder and saves it, the second maps it
     * without reading (widening) the f16 tensors; the same PCM */
    char *cache = getenv("QVOICE_CACHE") ? strdup(getenv("QVOICE_CACHE")) : NULL;
    mkdir(tmp_path("f16-prep"), 0755);
    setenv("QVOICE_CACHE", tmp_path("f16-prep"), 1);
    assert_true(decoder_delta(tmp_path("tiny-vocab"), tmp_path("tiny-vocab")) == 0.0);
    assert_int_equal(sh("ls %s/prepared/decoder-*.qvprep >/dev/null 2>&1", tmp_path("f16-prep")), 0);
    if (cache) setenv("QVOICE_CACHE", cache, 1);
    else unsetenv("QVOICE_CACHE");
    free(cache);
}

/* --vocab english-small (Debian wamerican-small) keeps fewer ids than english, and the texts the
 * tests call covered are covered by it too (greedy asserts there is no warning). */
static void test_tiny_english_small(void **st) {
    (void)st;
    if (!exists(model("tiny-cv")) || !exists(tmp_path("tiny-vocab"))) skip();
    qvz_options o = qvz_default_options();
    o.vocab = "english-small";
    compress(model("tiny-cv"), tmp_path("tiny-small"), o);
    qv_model *a = load(tmp_path("tiny-vocab")), *b = load(tmp_path("tiny-small"));
    printf("    text rows: english %d, english-small %d\n", a->text.n_text_rows,
           b->text.n_text_rows);
    assert_true(b->text.n_text_rows < a->text.n_text_rows - 5000);
    assert_true(b->text.n_text_rows > 40000);
    qv_model *c = load(model("tiny-cv"));
    same_codes(c, QV_QUANT_BF16, b, QV_QUANT_BF16, 8);
    qv_model_free(a), qv_model_free(b), qv_model_free(c);
}

static void test_tiny_q4(void **st) {
    (void)st;
    if (!exists(model("tiny-cv"))) skip();
    qvz_options o = qvz_default_options();
    o.q4 = 1;
    compress(model("tiny-cv"), tmp_path("tiny-q4"), o);
    qv_model *a = load(model("tiny-cv")), *b = load(tmp_path("tiny-q4"));
    assert_null(b->talker.stack.layers[0].q_proj.bf16);
    assert_non_null(b->talker.stack.layers[0].q_proj.q4);
    /* the q4 view of the original and the q4 checkpoint hold the same weights, the text
     * projection's q4 rounding included */
    same_codes(a, QV_QUANT_Q4, b, QV_QUANT_BF16, MAX_FRAMES);
    const qve_talker *va = qve_model_talker(a, QV_QUANT_Q4);
    const size_t TH = (size_t)a->ck->cfg.text_hidden_size, H = (size_t)a->ck->cfg.talker.hidden_size;
    assert_non_null(b->text.owned_w);
    assert_memory_equal(va->fc1, b->talker.fc1, TH * TH * 2);
    assert_memory_equal(va->fc2, b->talker.fc2, H * TH * 2);
    assert_memory_not_equal(va->fc1, a->talker.fc1, TH * TH * 2);
    double te, ce, agree, te8, ce8, agree8;
    quality(a, QV_QUANT_Q4, 8, &te, &ce, &agree);
    quality(a, QV_QUANT_INT8, 8, &te8, &ce8, &agree8);
    /* Random weights are the worst case for 16 levels (no structure; every layer adds its own
     * ~7 % matvec error): measured 0.29 / 0.22 / 65 % here, int8 0.00 / 0.01 / 97 %. */
    assert_true(te < 0.45 && ce < 0.35 && agree > 0.45);
    qv_model_free(a), qv_model_free(b);
}

/* --q4 quantizes the text projection too (as MLX's quantize does every linear): tiny-q4 stores
 * it as U32 + scales + biases, and binding widens it to bf16 rows, exactly s·q + b rounded. The
 * widening test_tiny_q4's load saved in the prepared cache is mapped now, the same bytes as one
 * made with the cache off. */
static void test_tiny_q4_text_projection(void **st) {
    (void)st;
    if (!exists(tmp_path("tiny-q4"))) skip();
    char *cache = getenv("QVOICE_CACHE") ? strdup(getenv("QVOICE_CACHE")) : NULL;
    qv_model *b = load(tmp_path("tiny-q4"));
    setenv("QVOICE_CACHE", "", 1);
    qv_model *fresh = load(tmp_path("tiny-q4"));
    if (cache) setenv("QVOICE_CACHE", cache, 1);
    else unsetenv("QVOICE_CACHE");
    assert_true(!fresh->text.cache && fresh->text.owned_w);
    if (!cache || *cache) assert_true(b->text.cache && !b->text.owned_w); /* caching on */
    const size_t n_fc = (size_t)b->text.text_hidden * (size_t)b->text.text_hidden * 2;
    assert_memory_equal(b->text.fc1, fresh->text.fc1, n_fc);
    assert_memory_equal(b->text.fc2, fresh->text.fc2,
                        (size_t)b->text.hidden * (size_t)b->text.text_hidden * 2);
    qv_model_free(fresh);
    free(cache);
    const int TH = b->text.text_hidden;
    float w[4096], r[4096];
    qvk_bf16_to_f32(w, b->text.fc1 + 3 * TH, (size_t)TH); /* row 3 of fc1 */
    const qvm_tensor *q = qvm_st_find(b->ck->st, "talker.text_projection.linear_fc1.weight");
    const qvm_tensor *qs = qvm_st_find(b->ck->st, "talker.text_projection.linear_fc1.scales");
    const qvm_tensor *qb = qvm_st_find(b->ck->st, "talker.text_projection.linear_fc1.biases");
    assert_true(q && qs && qb && q->dtype == QVM_DTYPE_U32 && TH <= 4096);
    assert_non_null(qvm_st_find(b->ck->st, "talker.text_projection.linear_fc2.scales"));
    qvk_q4_dequantize(r, (const uint8_t *)q->data + 3 * TH / 2, (const uint16_t *)qs->data + 3 * TH / 64,
                      (const uint16_t *)qb->data + 3 * TH / 64, 1, TH);
    for (int i = 0; i < TH; i++) assert_true(fabsf(w[i] - r[i]) <= fabsf(r[i]) * 0x1p-8f);
    int32_t c[MAX_FRAMES * QV_N_CODEBOOKS];
    assert_true(greedy(b, QV_QUANT_BF16, COVERED[0], c, 4) > 0);
    qv_model_free(b);
}

static void test_tiny_prune_layers(void **st) {
    (void)st;
    if (!exists(model("tiny-cv"))) skip();
    qvz_options o = qvz_default_options();
    o.prune_layers = 1;
    compress(model("tiny-cv"), tmp_path("tiny-prune"), o);
    qv_model *a = load(model("tiny-cv")), *b = load(tmp_path("tiny-prune"));
    assert_int_equal(b->ck->cfg.talker.num_hidden_layers, a->ck->cfg.talker.num_hidden_layers - 1);
    int32_t c[MAX_FRAMES * QV_N_CODEBOOKS];
    assert_true(greedy(b, QV_QUANT_BF16, COVERED[0], c, 4) > 0);
    qv_model_free(a), qv_model_free(b);
}

/* b (a pruned copy of a) teacher-forced on a's greedy codes for up to n frames: how often the
 * talker's codec-head argmax agrees, and the mean rel. error of those logits. */
static double talker_forced(qv_model *a, qv_model *b, int n, double *logit_err) {
    qv_session *sa = start(a, QV_QUANT_BF16, COVERED[0], 0, QV_OK);
    qv_session *sb = start(b, QV_QUANT_BF16, COVERED[0], 0, QV_OK);
    const int V = a->ck->cfg.talker.vocab_size;
    int32_t *forced = calloc((size_t)n * QV_N_CODEBOOKS, sizeof *forced), tmp[QV_N_CODEBOOKS];
    assert_non_null(forced);
    sb->forced = forced;
    int k = 0, same = 0, da = 0, db = 0;
    double e = 0;
    for (; k < n; k++) {
        same += argmax(sa->logits_raw, V) == argmax(sb->logits_raw, V);
        e += rel_err(sb->logits_raw, sa->logits_raw, V);
        assert_int_equal(qv_session_next_frame(sa, forced + (size_t)k * QV_N_CODEBOOKS, &da), QV_OK);
        if (da) break;
        assert_int_equal(qv_session_next_frame(sb, tmp, &db), QV_OK);
        if (db) break;
    }
    const int steps = k < n ? k + 1 : n;
    *logit_err = e / steps;
    printf("    talker teacher-forced on the original's codes: argmax agrees %d of %d, logits rel. "
           "error %.3f\n", same, steps, *logit_err);
    free(forced);
    qv_session_free(sa), qv_session_free(sb);
    return (double)same / steps;
}

/* MLP neuron pruning: calibration narrows the layers past the protected ones to multiples of 64,
 * config.json carries the widths, the model loads and speaks; teacher-forced quality printed. */
static void test_tiny_prune_neurons(void **st) {
    (void)st;
    if (!exists(model("tiny-cv"))) skip();
    qvz_options o = qvz_default_options();
    o.prune_neurons = 3.0f, o.protect_layers = 1, o.calib_frames = 12;
    char err[1024];
    qvz_report r;
    o.n_threads = 2;
    if (qvz_compress(model("tiny-cv"), tmp_path("tiny-neurons"), &o, &r, err, sizeof err))
        fail_msg("%s", err);
    printf("    MLP neurons %ld -> %ld, %d layer(s) narrowed\n", r.neurons_in, r.neurons_out,
           r.n_neuron_layers);
    qv_model *a = load(model("tiny-cv")), *b = load(tmp_path("tiny-neurons"));
    const qvm_stack_config *c = &b->ck->cfg.talker;
    assert_int_equal(qvm_layer_intermediate(c, 0), a->ck->cfg.talker.intermediate_size); /* protected */
    assert_true(qvm_layer_intermediate(c, 1) < a->ck->cfg.talker.intermediate_size);
    assert_int_equal(qvm_layer_intermediate(c, 1) % 64, 0);
    assert_int_equal(r.n_neuron_layers, 1);
    double le, agree = talker_forced(a, b, 16, &le);
    /* random weights: measured 13 of 16, logits rel. error 0.19 (a quarter of the neurons gone) */
    assert_true(agree > 0.5);
    qv_model_free(a), qv_model_free(b);
    /* with q4 the narrowed matrices are quantized like the others */
    o.q4 = 1;
    compress(model("tiny-cv"), tmp_path("tiny-neurons-q4"), o);
    b = load(tmp_path("tiny-neurons-q4"));
    assert_non_null(b->talker.stack.layers[1].down_proj.q4);
    int32_t codes[MAX_FRAMES * QV_N_CODEBOOKS];
    assert_true(greedy(b, QV_QUANT_BF16, COVERED[0], codes, 4) > 0);
    qv_model_free(b);
}

static void test_errors(void **st) {
    (void)st;
    if (!exists(model("tiny-cv"))) skip();
    char err[1024];
    qvz_options o = qvz_default_options();
    o.prune_layers = 99;
    assert_int_equal(qvz_compress(model("tiny-cv"), tmp_path("bad"), &o, NULL, err, sizeof err), -1);
    printf("    %s\n", err);
    assert_non_null(strstr(err, "talker layers"));
    o = qvz_default_options();
    o.vocab = tmp_path("no-such-words");
    assert_int_equal(qvz_compress(model("tiny-cv"), tmp_path("bad"), &o, NULL, err, sizeof err), -1);
    printf("    %s\n", err);
    assert_non_null(strstr(err, "no-such-words"));
    o = qvz_default_options();
    o.prune_neurons = 1.0f; /* a q4 checkpoint's MLP matrices cannot be narrowed */
    assert_int_equal(qvz_compress(tmp_path("tiny-q4"), tmp_path("bad"), &o, NULL, err, sizeof err),
                     -1);
    printf("    %s\n", err);
    assert_non_null(strstr(err, "already quantized"));
    o = qvz_default_options();
    assert_int_equal(qvz_compress(tmp_path("no-model"), tmp_path("bad"), &o, NULL, err, sizeof err),
                     -1);
    printf("    %s\n", err);
    tmp_write(tmp_path("exists"), "x", 1);
    assert_int_equal(qvz_compress(model("tiny-cv"), tmp_path("exists"), &o, NULL, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "already exists"));
    DIR *d = opendir(tmp_dir); /* nothing half-written left behind */
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        assert_null(strstr(e->d_name, ".tmp-"));
        assert_true(strcmp(e->d_name, "bad") != 0);
    }
    closedir(d);
    assert_int_equal(sh("bin/qvoice-compress >/dev/null 2>&1"), 2);
    assert_int_equal(sh("bin/qvoice-compress --help | grep -q -- --strip-encoder"), 0);
}

/* MLP neuron pruning's layout: intermediate_size as a per-layer list (docs/compression.md). */
static void test_layer_widths(void **st) {
    (void)st;
    if (!exists(model("tiny-cv"))) skip();
    char p[1200], err[512];
    snprintf(p, sizeof p, "%s/config.json", model("tiny-cv"));
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    static char txt[1 << 16];
    txt[fread(txt, 1, sizeof txt - 1, f)] = 0;
    fclose(f);
    const char *lists[2] = {"[64, 128]", "[64, 128, 192]"}; /* right length, one too many */
    for (int k = 0; k < 2; k++) {
        cJSON *root = cJSON_Parse(txt);
        cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "talker_config");
        cJSON_ReplaceItemInObjectCaseSensitive(tc, "intermediate_size", cJSON_Parse(lists[k]));
        char *js = cJSON_Print(root);
        const char *dir = tmp_path(k ? "widths-bad" : "widths");
        snprintf(p, sizeof p, "mkdir -p %s", dir);
        assert_int_equal(sh("%s", p), 0);
        snprintf(p, sizeof p, "%s/config.json", dir);
        tmp_write(p, js, strlen(js));
        free(js), cJSON_Delete(root);
        qvm_model_config c;
        if (k) {
            assert_int_equal(qvm_model_config_load(&c, dir, err, sizeof err), -1);
            printf("    %s\n", err);
            assert_non_null(strstr(err, "intermediate_size"));
            continue;
        }
        if (qvm_model_config_load(&c, dir, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(c.talker.intermediate_size, 128);
        assert_int_equal(qvm_layer_intermediate(&c.talker, 0), 64);
        qvm_manifest m;
        assert_int_equal(qvm_manifest_model(&m, &c, err, sizeof err), 0);
        assert_int_equal(qvm_manifest_find(&m, "talker.model.layers.0.mlp.gate_proj.weight")->shape[0], 64);
        assert_int_equal(qvm_manifest_find(&m, "talker.model.layers.1.mlp.down_proj.weight")->shape[1], 128);
        qvm_manifest_free(&m);
    }
}

/* ==== synthetic 0.6B CustomVoice ============================================================= */

/* Fully compressed as the size goal's row (english-small + encoder strip + f16 decoder + q4): its
 * codes equal the q4 view of the original (vocabulary pruning and the encoder strip change
 * nothing; the view equals the q4 checkpoint, test_tiny_q4), so one compressed copy checks the
 * lossless steps at 0.6B size. */
static void test_06b(void **st) {
    (void)st;
    if (!exists(model("q06b-cv"))) skip();
    qvz_options o = qvz_default_options();
    o.vocab = "english-small", o.strip_encoder = 1, o.decoder_f16 = 1, o.q4 = 1;
    compress(model("q06b-cv"), tmp_path("q06b-small"), o);
    qv_model *a = load(model("q06b-cv")), *b = load(tmp_path("q06b-small"));
    same_codes(a, QV_QUANT_Q4, b, QV_QUANT_BF16, 3);
    qv_model_free(b);
    double te, ce, agree, te8, ce8, agree8;
    quality(a, QV_QUANT_Q4, 2, &te, &ce, &agree);
    quality(a, QV_QUANT_INT8, 2, &te8, &ce8, &agree8);
    /* random weights, 28 layers: measured 0.41 / 0.30 / 37 % (int8 0.008 / 0.04 / 93 %) */
    assert_true(te < 0.6 && ce < 0.45 && agree > 0.2);
    qv_model_free(a);
    assert_true(decoder_delta(model("q06b-cv"), tmp_path("q06b-small")) < 1e-3);
    f16_panels_identical(tmp_path("q06b-small"), tmp_path("q06b-wide"));
}

/* 1.7B fully compressed (vocab + encoder strip + f16 decoder + q4, mtp projection included):
 * greedy codes equal the q4 view of the original's, and bin/speak speaks it to a WAV. Two frames
 * of one text keep this test's time modest (the compression writes ~1.3 GB). */
static void test_17b(void **st) {
    (void)st;
    if (!exists(model("q17b-cv"))) skip();
    qvz_options o = qvz_default_options();
    o.vocab = "english", o.strip_encoder = 1, o.decoder_f16 = 1, o.q4 = 1;
    compress(model("q17b-cv"), tmp_path("q17b-small"), o);
    qv_model *a = load(model("q17b-cv")), *b = load(tmp_path("q17b-small"));
    assert_non_null(b->cp.mtp_proj.q4);
    assert_null(a->cp.mtp_proj.q4);
    int32_t ca[2 * QV_N_CODEBOOKS], cb[2 * QV_N_CODEBOOKS];
    const int na = greedy(a, QV_QUANT_Q4, COVERED[0], ca, 2);
    assert_non_null(qve_model_cp(a, QV_QUANT_Q4)->mtp_proj.q4);
    qv_model_free(a);
    const int nb = greedy(b, QV_QUANT_BF16, COVERED[0], cb, 2);
    printf("    1.7B: %d / %d frames, codes %s\n", na, nb,
           na == nb && !memcmp(ca, cb, sizeof(int32_t) * QV_N_CODEBOOKS * (size_t)na) ? "identical"
                                                                                     : "DIFFER");
    assert_true(na > 0);
    assert_int_equal(na, nb);
    assert_memory_equal(ca, cb, sizeof(int32_t) * QV_N_CODEBOOKS * (size_t)na);
    const char *speaker = qv_model_n_speakers(b) > 0 ? qv_model_speaker(b, 0) : "";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bin/speak -m %s -s %s -t 'Hello world.' --max-frames 2 -j 2 -q -o %s",
             tmp_path("q17b-small"), speaker, tmp_path("q17b.wav"));
    qv_model_free(b);
    assert_int_equal(sh("%s", cmd), 0);
    assert_true(file_bytes(tmp_path("q17b.wav")) > 44);
}

int main(void) {
    snprintf(g_cache, sizeof g_cache, "%s", test_cache_dir());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_narrowing),
        cmocka_unit_test(test_tiny_lossless),     cmocka_unit_test(test_tiny_english_small),
        cmocka_unit_test(test_tiny_q4),
        cmocka_unit_test(test_tiny_q4_text_projection),
        cmocka_unit_test(test_tiny_prune_layers), cmocka_unit_test(test_tiny_prune_neurons),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_layer_widths),
        cmocka_unit_test(test_06b),               cmocka_unit_test(test_17b),
    };
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
