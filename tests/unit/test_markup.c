/* test_markup.c — inline markup (docs/markup.md): the one tag parser (engine/markup.c through
 * qve_text_chunk) and its style table; a 100 kB hostile text parses in bounded, linear work;
 * each span of a marked-up text renders, under greedy decoding, the codes and audio of a separate
 * run with that span's settings (tiny VoiceDesign: instruct; tiny CustomVoice: [voice:], [lang:]);
 * a tag the model cannot honour is a warning naming it, an error under strict_markup, and a
 * --style nothing can apply an error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/textchunk.h"
#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"

/* ==== parser ================================================================================= */

static void test_tags(void **state) {
    (void)state;
    qve_chunk_list l;
    char err[256];
    const char *t = "[joy]Hello! [pause:400ms][SAD] Bye. [style: slowly, with wonder] Look "
                    "[note] [voice:ryan][lang:English] [break:1s]end [neutral]x";
    assert_int_equal(qve_text_chunk(&l, t, 200, NULL, err, sizeof err), 0);
    const struct {
        enum qve_chunk_kind kind;
        int tag;
        const char *text;
        int n;
    } want[] = {
        {QVE_CHUNK_TAG, QVE_TAG_STYLE, "joy", 0},
        {QVE_CHUNK_TEXT, 0, "Hello!", 6},
        {QVE_CHUNK_PAUSE, 0, NULL, 400},
        {QVE_CHUNK_TAG, QVE_TAG_STYLE, "sad", 25},
        {QVE_CHUNK_TEXT, 0, "Bye.", 4},
        {QVE_CHUNK_TAG, QVE_TAG_STYLE, "slowly, with wonder", 36},
        {QVE_CHUNK_TEXT, 0, "Look [note]", 11},
        {QVE_CHUNK_TAG, QVE_TAG_VOICE, "ryan", 0},
        {QVE_CHUNK_TAG, QVE_TAG_LANG, "English", 0},
        {QVE_CHUNK_PAUSE, 0, NULL, 1000},
        {QVE_CHUNK_TEXT, 0, "end", 3},
        {QVE_CHUNK_TAG, QVE_TAG_STYLE, "neutral", 0},
        {QVE_CHUNK_TEXT, 0, "x", 1},
    };
    assert_int_equal(l.n_chunks, (int)(sizeof want / sizeof *want));
    for (int i = 0; i < l.n_chunks; i++) {
        const qve_chunk *c = &l.chunks[i];
        assert_int_equal(c->kind, want[i].kind);
        if (c->kind == QVE_CHUNK_PAUSE) {
            assert_int_equal(c->pause_ms, want[i].n);
            continue;
        }
        assert_string_equal(c->text, want[i].text);
        if (c->kind == QVE_CHUNK_TAG) {
            assert_int_equal((int)c->tag, want[i].tag);
            if (want[i].n) assert_int_equal(c->n_chars, want[i].n); /* character offset */
        }
    }
    assert_int_equal(l.chunks[0].is_name, 1);
    assert_int_equal(l.chunks[5].is_name, 0); /* free text */
    qve_chunk_list_free(&l);

    /* a user table adds names (and wins on a clash); [style:NAME] of a known name is that name */
    qve_styles st = {0};
    assert_int_equal(qve_styles_parse(&st, "# mine\n grumpy = Speak grumpily.\n\nsad=Sob.\n", err,
                                      sizeof err),
                     0);
    assert_int_equal(qve_styles_add_name(&st, "Pal-Entry"), 0);
    assert_string_equal(qve_style_instruct(&st, "sad"), "Sob.");
    assert_string_equal(qve_style_instruct(NULL, "sad"), "Speak in a sad, sorrowful tone.");
    assert_null(qve_style_instruct(&st, "pal-entry"));
    assert_int_equal(qve_text_chunk(&l, "[grumpy]a[pal-entry]b[style:Grumpy]c[grumpy2]", 0, &st,
                                    err, sizeof err),
                     0);
    assert_int_equal(l.n_chunks, 6);
    assert_string_equal(l.chunks[0].text, "grumpy");
    assert_string_equal(l.chunks[2].text, "pal-entry");
    assert_string_equal(l.chunks[4].text, "grumpy");
    assert_int_equal(l.chunks[4].is_name, 1);
    assert_string_equal(l.chunks[5].text, "c[grumpy2]"); /* unknown: text */
    qve_chunk_list_free(&l);
    assert_int_equal(qve_styles_parse(&st, "ok = fine\n9bad = x\n", err, sizeof err), -1);
    printf("  table error: %s\n", err);
    assert_non_null(strstr(err, "style table line 2"));
    qve_styles_free(&st);

    const struct {
        const char *text, *msg;
    } bad[] = {
        {"ab [voice:]", "bad voice tag at character 3: empty"},
        {"ab [style:x [y] z]", "bad style tag at character 3: no ']'"},
        {"ab [lang:english", "bad lang tag at character 3: no ']'"},
        {"ab [break:2]", "bad break tag at character 3"},
        {"\xc3\xa9 [pause:0.1.2s]", "bad pause tag at character 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(qve_text_chunk(&l, bad[i].text, 200, NULL, err, sizeof err), -1);
        printf("  %s -> %s\n", bad[i].text, err);
        assert_non_null(strstr(err, bad[i].msg));
        assert_int_equal(l.n_chunks, 0);
    }
}

/* 100 kB texts built to make a naive parser quadratic: every '[' looks at most
 * QVE_TAG_MAX_BYTES ahead, so these parse (or are refused) in linear work. */
static void test_hostile_100k(void **state) {
    (void)state;
    enum { N = 100 * 1024 };
    char *t = malloc(N + 1);
    assert_non_null(t);
    qve_chunk_list l;
    char err[256];
    memset(t, '[', N); /* brackets without an end */
    t[N] = 0;
    assert_int_equal(qve_text_chunk(&l, t, 200, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, (N + 199) / 200);
    qve_chunk_list_free(&l);
    for (int i = 0; i < N; i++) /* 20480 tags and words */
        t[i] = "[sad]"[i % 5];
    assert_int_equal(qve_text_chunk(&l, t, 200, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, N / 5);
    qve_chunk_list_free(&l);
    memcpy(t, "[style:", 7); /* an unclosed tag at the start */
    memset(t + 7, 'x', N - 7);
    assert_int_equal(qve_text_chunk(&l, t, 200, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "no ']' within 256 bytes"));
    free(t);
}

/* ==== rendering ============================================================================== */

typedef struct {
    int32_t *codes;
    int n_frames, n_chunks;
    int offsets[16];
    int progress[16][2]; /* text_chunk, n_text_chunks of each chunk */
} codes_log;

static void on_chunk(void *user, const qv_chunk_info *c) {
    codes_log *g = user;
    g->codes = realloc(g->codes, (size_t)(g->n_frames + c->n_frames) * QV_N_CODEBOOKS * 4);
    assert_non_null(g->codes);
    memcpy(g->codes + (size_t)g->n_frames * QV_N_CODEBOOKS, c->codes,
           (size_t)c->n_frames * QV_N_CODEBOOKS * 4);
    g->n_frames += c->n_frames;
    if (g->n_chunks < 16) {
        g->offsets[g->n_chunks] = c->text_offset;
        g->progress[g->n_chunks][0] = c->text_chunk;
        g->progress[g->n_chunks][1] = c->n_text_chunks;
    }
    g->n_chunks++;
}

typedef struct {
    float *x;
    int64_t n;
} pcm;

static int on_pcm(void *user, const float *x, int n) {
    pcm *p = user;
    p->x = realloc(p->x, (size_t)(p->n + n) * sizeof *x);
    assert_non_null(p->x);
    memcpy(p->x + p->n, x, (size_t)n * sizeof *x);
    p->n += n;
    return 0;
}

typedef struct {
    codes_log c;
    pcm a;
    qv_synth_stats st;
    enum qv_status rc;
    char err[512];
} result;

static void result_free(result *r) {
    free(r->c.codes);
    free(r->a.x);
}

/* Greedy, 10 frames per chunk, no guard (a random model's speech trips it at will). */
static result run(qv_model *m, qv_synth_request r) {
    qv_params p = qv_model_params(m);
    p.do_sample = p.subtalker_do_sample = 0;
    p.max_frames = 10;
    p.n_threads = 2;
    qv_synth *s;
    result out;
    memset(&out, 0, sizeof out);
    out.st.struct_size = sizeof out.st;
    assert_int_equal(qv_synth_new(&s, m, &p), QV_OK);
    qv_synth_set_chunk_fn(s, on_chunk, &out.c);
    r.guard = 0;
    r.whole_chunks = 1;
    out.rc = qv_synth_run(s, &r, on_pcm, &out.a, &out.st);
    snprintf(out.err, sizeof out.err, "%s", out.rc ? qv_last_error() : "");
    qv_synth_free(s);
    return out;
}

/* The marked-up run's codes are the separate runs' codes one after the other, and its audio is
 * theirs joined with the 10 ms crossfade: bit-identical outside the 240 blended samples. */
static void expect_spans(const result *all, const result *parts, int n) {
    int f = 0;
    int64_t at = 0, xf = 240;
    for (int i = 0; i < n; i++) {
        assert_int_equal(parts[i].rc, QV_OK);
        assert_memory_equal(all->c.codes + (size_t)f * QV_N_CODEBOOKS, parts[i].c.codes,
                            (size_t)parts[i].c.n_frames * QV_N_CODEBOOKS * 4);
        f += parts[i].c.n_frames;
        const int64_t lo = i ? xf : 0, hi = parts[i].a.n - (i + 1 < n ? xf : 0);
        assert_true(at + hi <= all->a.n);
        assert_memory_equal(all->a.x + at + lo, parts[i].a.x + lo, (size_t)(hi - lo) * 4);
        at += parts[i].a.n - (i + 1 < n ? xf : 0);
    }
    assert_int_equal(f, all->c.n_frames);
    assert_int_equal(at, all->a.n);
    printf("  %d spans: %d frames, %lld samples equal the separate runs (joins crossfaded)\n", n,
           f, (long long)at);
}

/* Each span alone: texts[i] with speakers[i], langs[i], instructs[i] (arrays may be NULL). */
static void run_parts(qv_model *m, int n, const char *const *texts, const char *const *speakers,
                      const char *const *langs, const char *const *instructs, result *out) {
    for (int i = 0; i < n; i++) {
        qv_synth_request q = qv_synth_default_request();
        q.text = texts[i];
        q.speaker = speakers ? speakers[i] : NULL;
        q.language = langs ? langs[i] : NULL;
        q.instruct = instructs ? instructs[i] : NULL;
        out[i] = run(m, q);
    }
}

static void test_span_instruct(void **state) {
    (void)state;
    qv_model *m = test_model_load("tiny-vd");
    qv_synth_request r = qv_synth_default_request();
    r.text = "[style:A calm old man.] Good morning. [happy] How are you? [neutral]Fine.";
    result all = run(m, r);
    assert_int_equal(all.rc, QV_OK);
    assert_string_equal(all.st.warning, "");
    assert_int_equal(all.c.n_chunks, 3);
    assert_int_equal(all.c.offsets[0], 0);
    assert_int_equal(all.c.offsets[1], 38); /* the [happy] tag's character offset */
    for (int i = 0; i < 3; i++) { /* progress through the text: chunk i + 1 of 3 */
        assert_int_equal(all.c.progress[i][0], i + 1);
        assert_int_equal(all.c.progress[i][1], 3);
    }
    result parts[3];
    const char *texts[3] = {"Good morning.", "How are you?", "Fine."};
    const char *ins[3] = {"A calm old man.", "Speak in a happy, cheerful tone.", NULL};
    run_parts(m, 3, texts, NULL, NULL, ins, parts);
    expect_spans(&all, parts, 3);
    qv_synth_request u = qv_synth_default_request();
    u.text = texts[0];
    result plain = run(m, u); /* the instruct is no no-op: without it the codes differ */
    assert_int_equal(plain.c.n_frames, parts[0].c.n_frames);
    assert_memory_not_equal(plain.c.codes, parts[0].c.codes,
                            (size_t)plain.c.n_frames * QV_N_CODEBOOKS * 4);
    result_free(&plain);
    /* the request's instruct is the baseline a tag's text adds to */
    r.text = "[whisper] Good morning.";
    r.instruct = "A young woman.";
    result a = run(m, r);
    qv_synth_request q = qv_synth_default_request();
    q.text = "Good morning.", q.instruct = "A young woman. Whisper softly.";
    result b = run(m, q);
    expect_spans(&a, &b, 1);
    /* a user table entry */
    r.text = "[grumpy] Good morning.";
    r.instruct = NULL;
    r.style_table = "grumpy = A calm old man.\n";
    result c = run(m, r);
    expect_spans(&c, &parts[0], 1);
    for (int i = 0; i < 3; i++)
        result_free(&parts[i]);
    result_free(&all), result_free(&a), result_free(&b), result_free(&c);
    qv_model_free(m);
}

/* A request for the preset speaker ryan. */
static qv_synth_request ryan(const char *text) {
    qv_synth_request r = qv_synth_default_request();
    r.speaker = "ryan";
    r.text = text;
    return r;
}

static void test_span_voice_lang(void **state) {
    (void)state;
    qv_model *m = test_model_load("tiny-cv");
    qv_synth_request r =
        ryan("Hello there. [voice:Serena] Nice day. [lang:english][voice:ryan] Yes.");
    result all = run(m, r);
    assert_int_equal(all.rc, QV_OK);
    const char *sp[3] = {"ryan", "serena", "ryan"}, *lang[3] = {NULL, NULL, "english"};
    const char *texts[3] = {"Hello there.", "Nice day.", "Yes."};
    result parts[3];
    run_parts(m, 3, texts, sp, lang, NULL, parts);
    expect_spans(&all, parts, 3);
    /* an unknown voice is an error naming the tag */
    r.text = "Hi. [voice:nosuch_voice_x] Bye.";
    result bad = run(m, r);
    printf("  %s\n", bad.err);
    assert_int_equal(bad.rc, QV_E_VOICE);
    assert_non_null(strstr(bad.err, "tag [voice:nosuch_voice_x] at character 4"));
    for (int i = 0; i < 3; i++)
        result_free(&parts[i]);
    result_free(&all), result_free(&bad);
    qv_model_free(m);
}

/* 0.6B CustomVoice takes no instruct: a style tag is a warning naming it (the text is still
 * spoken, as without the tag), an error under strict_markup; a whole-text style with nothing to
 * apply it is an error. */
static void test_cannot_honour(void **state) {
    (void)state;
    qv_model *m = test_model_load("tiny-cv");
    qv_synth_request r = ryan("Hi. [sad] Bye. [style:very slowly] Again.");
    result w = run(m, r);
    assert_int_equal(w.rc, QV_OK);
    printf("  warning: %s\n", w.st.warning);
    assert_non_null(strstr(w.st.warning, "tag [sad] at character 4: not applied: this model takes "
                                         "no instruct"));
    assert_non_null(strstr(w.st.warning, "tag [style:very slowly] at character 15"));
    qv_synth_request q = ryan("Hi. Bye. Again.");
    q.max_chunk_chars = 7; /* three chunks, as the tags split it */
    result plain = run(m, q);
    assert_int_equal(plain.c.n_frames, w.c.n_frames);
    assert_memory_equal(plain.c.codes, w.c.codes, (size_t)w.c.n_frames * QV_N_CODEBOOKS * 4);
    r.strict_markup = 1;
    result s = run(m, r);
    assert_int_equal(s.rc, QV_E_UNSUPPORTED);
    assert_non_null(strstr(s.err, "tag [sad] at character 4: not applied"));
    q.style = "sad";
    result e = run(m, q);
    printf("  --style: %s\n", e.err);
    assert_int_equal(e.rc, QV_E_UNSUPPORTED);
    assert_non_null(strstr(e.err, "style \"sad\": not applied"));
    result_free(&w), result_free(&plain), result_free(&s), result_free(&e);
    qv_model_free(m);
}

QVT_MAIN(NULL, NULL, test_tags, test_hostile_100k, test_span_instruct, test_span_voice_lang,
         test_cannot_honour)
