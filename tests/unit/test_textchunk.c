/* test_textchunk.c — engine/textchunk: sentence/length chunking (Latin and CJK, never inside a
 * UTF-8 sequence), pause tags, bisection for retries, crossfade join and lead-silence trim.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <utf8proc.h>

#include "engine/textchunk.h"
#include "include/qvoice.h"
#include "tests/unit/helpers/run.h"

static int n_cp(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static void check_utf8(const char *s) {
    utf8proc_ssize_t len = (utf8proc_ssize_t)strlen(s), p = 0;
    while (p < len) {
        int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + p, len - p, &c);
        assert_true(k > 0);
        p += k;
    }
}

static void test_sentences_packed(void **state) {
    (void)state;
    qve_chunk_list l;
    char err[256];
    const char *t =
        "Hello there.  How are you?\nI am fine!\n\nNew paragraph... with dots. Pi is 3.14 "
        "and e.g. so on.";
    assert_int_equal(qve_text_chunk(&l, t, 30, NULL, err, sizeof err), 0);
    for (int i = 0; i < l.n_chunks; i++)
        printf("  [%d] %d '%s'\n", i, l.chunks[i].n_chars, l.chunks[i].text);
    assert_int_equal(l.n_chunks, 4);
    assert_string_equal(l.chunks[0].text, "Hello there. How are you?");
    assert_string_equal(l.chunks[1].text, "I am fine!"); /* paragraph break: not packed */
    assert_string_equal(l.chunks[2].text, "New paragraph... with dots.");
    assert_string_equal(l.chunks[3].text, "Pi is 3.14 and e.g. so on."); /* "3.14": no end */
    for (int i = 0; i < l.n_chunks; i++) {
        assert_int_equal(l.chunks[i].kind, QVE_CHUNK_TEXT);
        assert_int_equal(l.chunks[i].n_chars, n_cp(l.chunks[i].text));
        assert_true(l.chunks[i].n_chars <= 30);
    }
    qve_chunk_list_free(&l);
    /* --no-chunk: one chunk, whitespace normalised */
    assert_int_equal(qve_text_chunk(&l, t, 0, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 1);
    assert_null(strchr(l.chunks[0].text, '\n'));
    qve_chunk_list_free(&l);
}

static void test_long_sentence_split(void **state) {
    (void)state;
    qve_chunk_list l;
    char err[256];
    /* comma in the second half of the limit wins over the last space */
    const char *t = "one two three four five six seven, eight nine ten eleven twelve thirteen";
    assert_int_equal(qve_text_chunk(&l, t, 40, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 2);
    assert_string_equal(l.chunks[0].text, "one two three four five six seven,");
    assert_string_equal(l.chunks[1].text, "eight nine ten eleven twelve thirteen");
    qve_chunk_list_free(&l);
    /* no comma: last space before the limit */
    assert_int_equal(qve_text_chunk(&l, "aaaa bbbb cccc dddd eeee", 12, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 3);
    assert_string_equal(l.chunks[0].text, "aaaa bbbb");
    assert_string_equal(l.chunks[2].text, "eeee");
    qve_chunk_list_free(&l);
    /* CJK without spaces or punctuation: hard cut between code points (3-byte sequences) */
    char cjk[3 * 25 + 1] = {0};
    for (int i = 0; i < 25; i++)
        memcpy(cjk + 3 * i, "\xe4\xb8\xad", 3); /* 中 */
    assert_int_equal(qve_text_chunk(&l, cjk, 10, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 3);
    int total = 0;
    for (int i = 0; i < l.n_chunks; i++) {
        check_utf8(l.chunks[i].text);
        assert_true(l.chunks[i].n_chars <= 10);
        total += l.chunks[i].n_chars;
    }
    assert_int_equal(total, 25);
    qve_chunk_list_free(&l);
}

static void test_cjk_sentences(void **state) {
    (void)state;
    qve_chunk_list l;
    char err[256];
    /* 你好。今天天气很好！是吗？ — CJK terminators end sentences without a following space */
    const char *t = "你好。今天天气很好！是吗？";
    assert_int_equal(qve_text_chunk(&l, t, 7, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 3);
    assert_string_equal(l.chunks[0].text, "你好。");
    assert_string_equal(l.chunks[1].text, "今天天气很好！");
    assert_string_equal(l.chunks[2].text, "是吗？");
    qve_chunk_list_free(&l);
    assert_int_equal(qve_text_chunk(&l, t, 200, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 1);
    assert_string_equal(l.chunks[0].text, t); /* packed without inserting spaces */
    qve_chunk_list_free(&l);
}

static void test_pauses(void **state) {
    (void)state;
    qve_chunk_list l;
    char err[256];
    const char *t = "[pause:0.2s]First.[PAUSE:1.5s] [pause:500ms]Second. [pause:2s]";
    assert_int_equal(qve_text_chunk(&l, t, 200, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 5);
    assert_int_equal(l.chunks[0].kind, QVE_CHUNK_PAUSE);
    assert_int_equal(l.chunks[0].pause_ms, 200);
    assert_string_equal(l.chunks[1].text, "First.");
    assert_int_equal(l.chunks[2].kind, QVE_CHUNK_PAUSE);
    assert_int_equal(l.chunks[2].pause_ms, 2000); /* 1.5 s + 500 ms, blank text between */
    assert_string_equal(l.chunks[3].text, "Second.");
    assert_int_equal(l.chunks[4].pause_ms, 2000);
    qve_chunk_list_free(&l);
    /* other brackets are text */
    assert_int_equal(qve_text_chunk(&l, "a [note] b", 200, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 1);
    assert_string_equal(l.chunks[0].text, "a [note] b");
    qve_chunk_list_free(&l);
    const char *bad[] = {"x [pause:abc]",    "x [pause:5]",   "x [pause:-1s]", "x [pause:61s]",
                         "x [pause:1.2.3s]", "x [pause:0ms]", "x [pause:500ms"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        assert_int_equal(qve_text_chunk(&l, bad[i], 200, NULL, err, sizeof err), -1);
        printf("  %s -> %s\n", bad[i], err);
        assert_non_null(strstr(err, "bad pause tag at character 2"));
        assert_int_equal(l.n_chunks, 0);
    }
    assert_int_equal(qve_text_chunk(&l, "bad \xff utf8", 200, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid UTF-8 at byte 4"));
    assert_int_equal(qve_text_chunk(&l, "  \n\n ", 200, NULL, err, sizeof err), 0);
    assert_int_equal(l.n_chunks, 0);
    qve_chunk_list_free(&l);
}

static void test_bisect(void **state) {
    (void)state;
    size_t cut;
    const char *t = "First sentence here. Second one, with a comma and more words.";
    assert_int_equal(qve_text_bisect(t, &cut), 0);
    assert_int_equal(cut, strlen("First sentence here."));
    t = "alpha beta gamma, delta epsilon zeta eta";
    assert_int_equal(qve_text_bisect(t, &cut), 0);
    assert_int_equal(cut, strlen("alpha beta gamma,"));
    t = "alphabet soup tastes good";
    assert_int_equal(qve_text_bisect(t, &cut), 0);
    assert_int_equal(cut, strlen("alphabet soup"));
    t = "中中中中中中"; /* no boundary: middle code point */
    assert_int_equal(qve_text_bisect(t, &cut), 0);
    assert_int_equal(cut, 9);
    assert_int_equal(qve_text_bisect("a", &cut), -1);
}

static void test_audio_join_trim(void **state) {
    (void)state;
    qve_audio_buf b = {0};
    float one[1000], two[1000];
    for (int i = 0; i < 1000; i++)
        one[i] = 1.0f, two[i] = -1.0f;
    assert_int_equal(qve_audio_append(&b, one, 1000, 240), 0); /* nothing to fade into */
    assert_int_equal(b.n, 1000);
    assert_int_equal(qve_audio_append(&b, two, 1000, 240), 0);
    assert_int_equal(b.n, 1760);
    /* linear ramp across the 240-sample overlap, monotone, ends untouched */
    assert_true(b.x[759] == 1.0f && b.x[1000] == -1.0f);
    for (int i = 760; i < 1000; i++)
        assert_true(b.x[i] < b.x[i - 1]);
    assert_true(fabsf(b.x[880] + b.x[879]) < 1e-2f);
    assert_int_equal(qve_audio_append_silence(&b, 2400), 0);
    assert_int_equal(b.n, 4160);
    assert_true(b.x[4159] == 0.0f);
    qve_audio_buf_free(&b);

    /* 1 s of silence (faint noise) then a tone: trim to a 100 ms pad */
    int n = 48000;
    float *x = calloc((size_t)n, sizeof *x);
    unsigned r = 1;
    for (int i = 0; i < n; i++) {
        r = r * 1103515245u + 12345u;
        x[i] = 1e-4f * ((float)(r >> 16 & 0x7fff) / 16384.0f - 1.0f);
        if (i >= 24000) x[i] += 0.3f * sinf(2.0f * 3.14159265f * 220.0f * (float)i / 24000.0f);
    }
    int64_t scanned = 0, start = qve_audio_lead_start(x, n, 2400, &scanned);
    printf("  lead trim keeps from sample %lld (expect 21600)\n", (long long)start);
    assert_int_equal(start, 21600);
    /* fed in decoder blocks (1920 samples): the same answer once the tone arrives */
    scanned = 0, start = -1;
    for (int64_t k = 1920; start < 0 && k <= n; k += 1920)
        start = qve_audio_lead_start(x, k, 2400, &scanned);
    assert_int_equal(start, 21600);
    scanned = 0;
    assert_int_equal(qve_audio_lead_start(x + 21600, n - 21600, 2400, &scanned), 0); /* short */
    memset(x, 0, (size_t)n * sizeof *x);
    scanned = 0;
    assert_int_equal(qve_audio_lead_start(x, n, 2400, &scanned), -1); /* all silent */
    free(x);
}

/* Random texts (ASCII, CJK, punctuation, whitespace, pause tags): every chunk is valid UTF-8
 * within the limit, and the chunks hold every non-space character of the input, in order. */
static void test_random_texts(void **state) {
    (void)state;
    static const char *const atoms[] = {"a",
                                        "bc",
                                        " ",
                                        "\n",
                                        "\n\n",
                                        ".",
                                        "!",
                                        "?",
                                        ",",
                                        "\xe4\xb8\xad",
                                        "\xe3\x80\x82",
                                        "\xef\xbc\x8c",
                                        "\xe2\x80\xa6",
                                        "3.5",
                                        "\"",
                                        "[pause:20ms]",
                                        "[x]",
                                        "\t"};
    uint32_t seed = 20261122;
    printf("  seed %u\n", seed);
    char text[2048], expect[2048], got[4096];
    for (int it = 0; it < 300; it++) {
        size_t w = 0, e = 0;
        int n_atoms = (int)(seed % 200);
        for (int k = 0; k < n_atoms; k++) {
            seed = seed * 1664525u + 1013904223u;
            const char *a = atoms[(seed >> 8) % (sizeof atoms / sizeof *atoms)];
            size_t len = strlen(a);
            if (w + len >= sizeof text) break;
            memcpy(text + w, a, len);
            w += len;
            if (strcmp(a, "[pause:20ms]"))
                for (size_t q = 0; q < len; q++)
                    if (!strchr(" \n\t", a[q])) expect[e++] = a[q];
        }
        text[w] = 0;
        expect[e] = 0;
        int max = 1 + (int)(seed >> 20) % 40;
        qve_chunk_list l;
        char err[256];
        assert_int_equal(qve_text_chunk(&l, text, max, NULL, err, sizeof err), 0);
        size_t g = 0;
        for (int i = 0; i < l.n_chunks; i++) {
            if (l.chunks[i].kind != QVE_CHUNK_TEXT) continue;
            check_utf8(l.chunks[i].text);
            assert_true(l.chunks[i].n_chars >= 1 && l.chunks[i].n_chars <= max);
            for (const char *q = l.chunks[i].text; *q; q++)
                if (*q != ' ') got[g++] = *q;
        }
        got[g] = 0;
        assert_string_equal(got, expect);
        qve_chunk_list_free(&l);
    }
}

/* qv_text_sentences (and qv_text_clauses): the prefix of whole sentences of text arriving in
 * pieces, and the tags that carry over to the rest. */
typedef enum qv_status (*whole_fn)(const char *, size_t *, char *, size_t);
static size_t ready_by(whole_fn f, const char *t, char carry[QV_TEXT_CARRY_BYTES]) {
    size_t n = 99;
    assert_int_equal(f(t, &n, carry, QV_TEXT_CARRY_BYTES), QV_OK);
    return n;
}
static size_t ready(const char *t, char *carry) {
    return ready_by(qv_text_sentences, t, carry);
}
static size_t ready_clauses(const char *t, char *carry) {
    return ready_by(qv_text_clauses, t, carry);
}

static void test_text_sentences(void **state) {
    (void)state;
    char c[QV_TEXT_CARRY_BYTES];
    assert_int_equal(ready("Hello", c), 0);
    assert_int_equal(ready("Hello.", c), 0);       /* "3." may become "3.14" */
    assert_int_equal(ready("Pi is 3.14", c), 0);
    assert_int_equal(ready("Hello. Wor", c), 6); /* the space decides */
    assert_int_equal(ready("He said \"Go!\" and", c), 13); /* the closing quote is in */
    assert_int_equal(ready("One. Two? Three", c), 9);
    /* after 。 */
    assert_int_equal(ready("\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82\xe5\x86\x8d", c), 9);
    assert_int_equal(ready("A line\n\nnext", c), 8);                 /* a blank line */
    /* tags: the last of each kind before the cut carries; a pause does not */
    assert_int_equal(ready("[voice:bob][sad]Hi. [pause:200ms]More. [joy]x", c), 38);
    assert_string_equal(c, "[voice:bob][sad]");
    assert_int_equal(ready("[lang:English][style: slow. calm] Go. on", c), 37);
    assert_string_equal(c, "[lang:English][style: slow. calm]");
    assert_int_equal(ready("[sad]A. [neutral]B. C", c), 19);
    assert_string_equal(c, "[neutral]");
    /* a '[' whose tag may still arrive stops the scan: "[style: a. b" is no cut at ". " */
    assert_int_equal(ready("Hi. [style: a. b", c), 3);
    assert_string_equal(c, "");
    assert_int_equal(ready("Hi.[sad] x", c), 3); /* a tag ends the run, as in the chunker */
    size_t n;
    assert_int_equal(qv_text_sentences("[pause:xx] a. b", &n, c, sizeof c), QV_E_INVALID);
    assert_int_equal(qv_text_sentences("\xff. b", &n, c, sizeof c), QV_E_INVALID);
    assert_int_equal(qv_text_sentences("a. b", &n, c, 10), QV_E_INVALID);
}

/* qv_text_clauses: sentence ends and clause ends alike, with the same carry. */
static void test_text_clauses(void **state) {
    (void)state;
    char c[QV_TEXT_CARRY_BYTES];
    assert_int_equal(ready_clauses("Well, hello", c), 5);
    assert_int_equal(ready("Well, hello", c), 0); /* sentences do not cut there */
    assert_int_equal(ready_clauses("One; two, three. Four", c), 16);
    assert_int_equal(ready_clauses("Well,", c), 0); /* "1," may become "1,000" */
    assert_int_equal(ready_clauses("It cost 1,000 now", c), 0);
    assert_int_equal(ready_clauses("Note: this", c), 0);       /* a colon is no clause end */
    assert_int_equal(ready_clauses("\"Yes,\" he said", c), 6); /* the closing quote is in */
    /* after ， and 、 wherever they stand */
    assert_int_equal(ready_clauses("\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe5\x86\x8d\xe8\xa7\x81"
                                   "\xe3\x80\x81\xe5\xa5\xbd",
                                   c),
                     18);
    assert_int_equal(ready_clauses("[sad]A, [pause:100ms][voice:bob]B, C", c), 34);
    assert_string_equal(c, "[voice:bob][sad]");
    assert_int_equal(ready_clauses("Hi, [style: a, b", c), 3);
    size_t n;
    assert_int_equal(qv_text_clauses("a, b", &n, c, 10), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "qv_text_clauses"));
    assert_int_equal(qv_text_clauses("\xff, b", &n, c, sizeof c), QV_E_INVALID);
}

QVT_MAIN(NULL, NULL, test_sentences_packed, test_long_sentence_split, test_cjk_sentences,
         test_pauses, test_bisect, test_audio_join_trim, test_random_texts, test_text_sentences,
         test_text_clauses)
