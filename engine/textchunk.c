/* textchunk.c — sentence/length chunking, markup tags (markup.c reads them), retry bisection,
 * audio join and lead trim.
 * The text is decoded once into code points with their byte offsets; every split is an index
 * into that array, so a cut can only fall between code points.
 */
#include "engine/textchunk.h"

#include "include/qvoice.h"
#include "util/api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <utf8proc.h>


/* ==== character classes ===================================================================== */

static int is_space(int32_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
           c == 0x00A0 || c == 0x3000 || (c >= 0x2000 && c <= 0x200A) || c == 0x202F;
}
/* ends a sentence when followed by whitespace or the end */
static int is_term_latin(int32_t c) {
    return c == '.' || c == '!' || c == '?' || c == 0x2026;
}
/* ends a sentence wherever it stands: 。！？ */
static int is_term_cjk(int32_t c) {
    return c == 0x3002 || c == 0xFF01 || c == 0xFF1F;
}
static int is_closer(int32_t c) {
    return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}' || c == 0x00BB ||
           c == 0x2019 || c == 0x201D || c == 0x300D || c == 0x300F || c == 0x3011 || c == 0xFF09;
}
/* ends a clause (qv_text_clauses) when followed by whitespace: a colon is left out ("Note: x"
 * reads as one phrase, and times as 12: 30 are common in transcripts) */
static int is_clause_latin(int32_t c) {
    return c == ',' || c == ';';
}
/* ends a clause wherever it stands, as 。 a sentence: ，；：、 */
static int is_clause_cjk(int32_t c) {
    return c == 0xFF0C || c == 0xFF1B || c == 0xFF1A || c == 0x3001;
}
static int is_comma(int32_t c) {
    return is_clause_latin(c) || c == ':' || is_clause_cjk(c);
}
/* A mark that may end a piece: 1 when whitespace must follow it (. ! ? …, and , ; for clauses),
 * 2 when it ends one wherever it stands (。！？, and ，；：、 for clauses), else 0. */
static int end_mark(int32_t c, int clauses) {
    if (is_term_cjk(c) || (clauses && is_clause_cjk(c))) return 2;
    return is_term_latin(c) || (clauses && is_clause_latin(c));
}

/* ==== decoded text ========================================================================== */

typedef struct {
    const char *s;
    int32_t *cp; /* [n] */
    size_t *off; /* [n + 1] byte offset of each code point */
    int64_t n;
} decoded;

static int decode(decoded *d, const char *s, char *err, size_t err_size) {
    size_t len = strlen(s);
    d->s = s;
    d->n = 0;
    d->cp = malloc((len + 1) * sizeof *d->cp);
    d->off = malloc((len + 1) * sizeof *d->off);
    if (!d->cp || !d->off) {
        snprintf(err, err_size, "text: out of memory (%zu bytes of text)", len);
        return -1;
    }
    size_t p = 0;
    while (p < len) {
        int32_t c;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + p, (utf8proc_ssize_t)(len - p), &c);
        if (k <= 0) {
            snprintf(err, err_size, "text: invalid UTF-8 at byte %zu", p);
            return -1;
        }
        d->cp[d->n] = c;
        d->off[d->n++] = p;
        p += (size_t)k;
    }
    d->off[d->n] = len;
    return 0;
}

static void decoded_free(decoded *d) {
    free(d->cp);
    free(d->off);
}

/* Normalised length of [a, b): non-space code points plus one per interior whitespace run. */
static int norm_count(const decoded *d, int64_t a, int64_t b) {
    int n = 0, pending = 0;
    for (int64_t k = a; k < b; k++) {
        if (is_space(d->cp[k])) {
            pending = n > 0;
        } else {
            n += pending + 1;
            pending = 0;
        }
    }
    return n;
}

/* ==== chunk list ============================================================================ */

typedef struct {
    qve_chunk_list *l;
    int cap;
} builder;

static qve_chunk *push(builder *b) {
    if (b->l->n_chunks == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        qve_chunk *c = realloc(b->l->chunks, (size_t)cap * sizeof *c);
        if (!c) return NULL;
        b->l->chunks = c;
        b->cap = cap;
    }
    qve_chunk *c = &b->l->chunks[b->l->n_chunks++];
    memset(c, 0, sizeof *c);
    return c;
}

/* Appends the normalised copy of [a, b) as a TEXT chunk (nothing if it is blank). */
static int emit_text(builder *bl, const decoded *d, int64_t a, int64_t b) {
    while (a < b && is_space(d->cp[a]))
        a++;
    while (b > a && is_space(d->cp[b - 1]))
        b--;
    if (a == b) return 0;
    char *t = malloc(d->off[b] - d->off[a] + 1);
    if (!t) return -1;
    size_t w = 0;
    int n = 0;
    for (int64_t k = a; k < b; k++) {
        if (is_space(d->cp[k])) {
            if (!is_space(d->cp[k - 1])) t[w++] = ' ', n++;
            continue;
        }
        size_t nb = d->off[k + 1] - d->off[k];
        memcpy(t + w, d->s + d->off[k], nb);
        w += nb;
        n++;
    }
    t[w] = 0;
    qve_chunk *c = push(bl);
    if (!c) {
        free(t);
        return -1;
    }
    c->kind = QVE_CHUNK_TEXT;
    c->text = t;
    c->n_chars = n;
    return 0;
}

static int emit_pause(builder *bl, int ms) {
    qve_chunk_list *l = bl->l;
    if (l->n_chunks && l->chunks[l->n_chunks - 1].kind == QVE_CHUNK_PAUSE) {
        int64_t sum = (int64_t)l->chunks[l->n_chunks - 1].pause_ms + ms;
        l->chunks[l->n_chunks - 1].pause_ms = sum > QVE_PAUSE_MAX_MS ? QVE_PAUSE_MAX_MS : (int)sum;
        return 0;
    }
    qve_chunk *c = push(bl);
    if (!c) return -1;
    c->kind = QVE_CHUNK_PAUSE;
    c->pause_ms = ms;
    return 0;
}

/* ==== splitting ============================================================================= */

/* Cuts [a, b) (one sentence longer than max) into pieces of at most max normalised chars. */
static int emit_long(builder *bl, const decoded *d, int64_t a, int64_t b, int max) {
    for (;;) {
        while (a < b && is_space(d->cp[a]))
            a++;
        if (norm_count(d, a, b) <= max) return emit_text(bl, d, a, b);
        int count = 0, pending = 0, comma_count = 0;
        int64_t lim = b, comma = -1, space = -1;
        for (int64_t k = a; k < b; k++) {
            int32_t c = d->cp[k];
            if (is_space(c)) {
                if (count > 0 && !pending) space = k;
                pending = count > 0;
                continue;
            }
            if (count + pending + 1 > max) {
                lim = k;
                break;
            }
            count += pending + 1;
            pending = 0;
            if (is_comma(c)) comma = k, comma_count = count;
        }
        int64_t cut = lim;
        if (comma >= 0 && 2 * comma_count >= max)
            cut = comma + 1;
        else if (space > a)
            cut = space;
        if (emit_text(bl, d, a, cut)) return -1;
        a = cut;
    }
}

/* The run of end marks (end_mark with clauses) and closers that starts at the mark cp[k], within
 * [k, j): its end in *m; 1 when it ends a sentence or clause (a CJK mark in it, or white space
 * after it), 2 when it runs into j (an end if j ends the text or a run), 0 not (as in "3.14",
 * "1,000"). */
static int term_run(const decoded *d, int64_t k, int64_t j, int clauses, int64_t *m) {
    int cjk = 0, t;
    int64_t e = k;
    while (e < j && ((t = end_mark(d->cp[e], clauses)) || is_closer(d->cp[e]))) {
        cjk |= t == 2;
        e++;
    }
    *m = e;
    return cjk || (e < j && is_space(d->cp[e])) ? 1 : e == j ? 2 : 0;
}

typedef struct {
    int64_t a, b;
    int n_chars;
    int hard_after; /* paragraph break follows: do not pack across */
} unit;

/* Sentences of [i, j), packed up to max chars within paragraphs. */
static int emit_run(builder *bl, const decoded *d, int64_t i, int64_t j, int max) {
    if (max <= 0) return emit_text(bl, d, i, j);
    unit *u = malloc((size_t)(j - i + 1) * sizeof *u);
    if (!u) return -1;
    int64_t n_u = 0, start = -1, k = i;
    while (k < j) {
        int32_t c = d->cp[k];
        if (start < 0) {
            if (!is_space(c))
                start = k;
            else {
                k++;
                continue;
            }
        }
        if (c == '\n') {
            int64_t m = k + 1;
            while (m < j && is_space(d->cp[m]) && d->cp[m] != '\n')
                m++;
            if (m < j && d->cp[m] == '\n') {
                u[n_u++] = (unit){start, k, 0, 1};
                start = -1;
                k = m + 1;
                continue;
            }
        }
        if (end_mark(c, 0)) {
            int64_t m;
            if (term_run(d, k, j, 0, &m)) {
                u[n_u++] = (unit){start, m, 0, 0};
                start = -1;
            }
            k = m;
            continue;
        }
        k++;
    }
    if (start >= 0) u[n_u++] = (unit){start, j, 0, 0};
    for (int64_t q = 0; q < n_u; q++) {
        u[q].n_chars = norm_count(d, u[q].a, u[q].b);
        int nl = 0; /* a blank line between two sentences is a paragraph break */
        for (int64_t m = u[q].b; q + 1 < n_u && m < u[q + 1].a; m++)
            nl += d->cp[m] == '\n';
        if (nl >= 2) u[q].hard_after = 1;
    }

    int rc = 0;
    for (int64_t q = 0; q < n_u && !rc;) {
        if (u[q].n_chars == 0) {
            q++;
            continue;
        }
        if (u[q].n_chars > max) {
            rc = emit_long(bl, d, u[q].a, u[q].b, max);
            q++;
            continue;
        }
        int64_t v = q;
        int total = u[q].n_chars;
        while (v + 1 < n_u && !u[v].hard_after && u[v + 1].n_chars <= max) {
            int gap = u[v].b < u[v + 1].a && u[v + 1].n_chars > 0;
            if (total + gap + u[v + 1].n_chars > max) break;
            total += gap + u[v + 1].n_chars;
            v++;
        }
        rc = emit_text(bl, d, u[q].a, u[v].b);
        q = v + 1;
    }
    free(u);
    return rc;
}

static int emit_tag(builder *bl, const qve_tag *t, int64_t at) {
    char *v = strdup(t->value);
    qve_chunk *c = v ? push(bl) : NULL;
    if (!c) {
        free(v);
        return -1;
    }
    c->kind = QVE_CHUNK_TAG;
    c->text = v;
    c->n_chars = (int)at;
    c->tag = t->kind;
    c->is_name = t->is_name;
    return 0;
}

int qve_text_chunk(qve_chunk_list *out, const char *text, int max_chunk_chars,
                   const qve_styles *styles, char *err, size_t err_size) {
    memset(out, 0, sizeof *out);
    decoded d = {0};
    builder bl = {out, 0};
    if (decode(&d, text, err, err_size)) goto fail;
    if (d.n > INT32_MAX) {
        snprintf(err, err_size, "text: over %d characters", INT32_MAX);
        goto fail;
    }
    int64_t run = 0;
    for (int64_t k = 0; k < d.n; k++) {
        if (d.cp[k] != '[') continue;
        qve_tag t;
        char e[256];
        long len = qve_markup_tag(text + d.off[k], d.off[d.n] - d.off[k], (long)k, styles, &t, e,
                                  sizeof e);
        if (len < 0) {
            snprintf(err, err_size, "text: %s", e);
            goto fail;
        }
        if (!len) continue;
        if (emit_run(&bl, &d, run, k, max_chunk_chars)) goto nomem;
        if (t.kind == QVE_TAG_PAUSE ? emit_pause(&bl, t.pause_ms) : emit_tag(&bl, &t, k))
            goto nomem;
        const size_t end = d.off[k] + (size_t)len; /* a code point boundary: ']' is ASCII */
        while (k + 1 < d.n && d.off[k + 1] < end)
            k++;
        run = k + 1;
    }
    if (emit_run(&bl, &d, run, d.n, max_chunk_chars)) goto nomem;
    decoded_free(&d);
    return 0;
nomem:
    snprintf(err, err_size, "text: out of memory while chunking");
fail:
    decoded_free(&d);
    qve_chunk_list_free(out);
    return -1;
}

/* ==== text arriving in pieces ================================================================ */

_Static_assert(QV_TEXT_CARRY_BYTES >= 3 * QVE_TAG_MAX_BYTES + 1, "carry holds three tags");

/* Keeps the source of the last tag of t's kind (voice, language, style) in last[3]. */
static void keep_tag(const char *last[3], size_t len[3], const qve_tag *t, const char *src,
                     size_t n) {
    int i = t->kind == QVE_TAG_VOICE ? 0 : t->kind == QVE_TAG_LANG ? 1 : 2;
    last[i] = src;
    len[i] = n;
}

/* The end (byte offset) of the last whole sentence (or clause) of [a, b): a run of text between
 * tags, or the text's tail (tail: a mark at b may still be followed by more marks or closers); 0
 * when none. */
static size_t last_piece_end(const decoded *d, int64_t a, int64_t b, int tail, int clauses) {
    size_t cut = 0;
    for (int64_t k = a; k < b; k++) {
        int32_t c = d->cp[k];
        if (c == '\n') { /* a blank line ends a paragraph */
            int64_t m = k + 1;
            while (m < b && is_space(d->cp[m]) && d->cp[m] != '\n')
                m++;
            if (m < b && d->cp[m] == '\n') cut = d->off[m + 1], k = m;
            continue;
        }
        if (!end_mark(c, clauses)) continue;
        int64_t m;
        int e = term_run(d, k, b, clauses, &m);
        if (e == 1 || (e == 2 && !tail)) cut = d->off[m];
        k = m - 1;
    }
    return cut;
}

/* qv_text_sentences, and with clauses qv_text_clauses (fn: its name, for the detail). */
static enum qv_status whole_pieces(const char *fn, const char *text, size_t *n_bytes, char *carry,
                                   size_t carry_size, int clauses) {
    if (!text || !n_bytes || !carry || carry_size < QV_TEXT_CARRY_BYTES)
        return qvu_failf(QV_E_INVALID, "%s: NULL argument or carry too small", fn);
    char err[QVU_DETAIL_SIZE] = "";
    decoded d = {0};
    *n_bytes = 0;
    carry[0] = 0;
    if (decode(&d, text, err, sizeof err)) {
        decoded_free(&d);
        return qvu_fail(strstr(err, "memory") ? QV_E_NOMEM : QV_E_INVALID, err);
    }
    const char *last[3] = {0}, *at_cut[3] = {0};
    size_t len[3] = {0}, len_cut[3] = {0}, cut = 0;
    int64_t run = 0;
    for (int64_t k = 0; k <= d.n; k++) {
        if (k < d.n && d.cp[k] != '[') continue;
        qve_tag t;
        long n = 0;
        if (k < d.n) {
            /* a '[' whose tag may still be arriving: nothing after it is decided yet */
            if (!memchr(text + d.off[k], ']', d.off[d.n] - d.off[k]) &&
                d.off[d.n] - d.off[k] < QVE_TAG_MAX_BYTES) {
                size_t e = last_piece_end(&d, run, k, 1, clauses);
                if (e) cut = e, memcpy(at_cut, last, sizeof last), memcpy(len_cut, len, sizeof len);
                break;
            }
            n = qve_markup_tag(text + d.off[k], d.off[d.n] - d.off[k], (long)k, NULL, &t, err,
                               sizeof err);
            if (n < 0) {
                decoded_free(&d);
                return qvu_fail(QV_E_INVALID, err);
            }
            if (!n) continue;
        }
        size_t e = last_piece_end(&d, run, k, k == d.n, clauses);
        if (e) cut = e, memcpy(at_cut, last, sizeof last), memcpy(len_cut, len, sizeof len);
        if (k == d.n) break;
        if (t.kind != QVE_TAG_PAUSE) keep_tag(last, len, &t, text + d.off[k], (size_t)n);
        const size_t end = d.off[k] + (size_t)n;
        while (k + 1 < d.n && d.off[k + 1] < end)
            k++;
        run = k + 1;
    }
    decoded_free(&d);
    size_t w = 0;
    for (int i = 0; i < 3; i++)
        if (at_cut[i]) memcpy(carry + w, at_cut[i], len_cut[i]), w += len_cut[i];
    carry[w] = 0;
    *n_bytes = cut;
    return QV_OK;
}

enum qv_status qv_text_sentences(const char *text, size_t *n_bytes, char *carry,
                                 size_t carry_size) {
    return whole_pieces("qv_text_sentences", text, n_bytes, carry, carry_size, 0);
}

enum qv_status qv_text_clauses(const char *text, size_t *n_bytes, char *carry, size_t carry_size) {
    return whole_pieces("qv_text_clauses", text, n_bytes, carry, carry_size, 1);
}

void qve_chunk_list_free(qve_chunk_list *l) {
    if (!l) return;
    for (int i = 0; i < l->n_chunks; i++)
        free(l->chunks[i].text);
    free(l->chunks);
    l->chunks = NULL;
    l->n_chunks = 0;
}

int qve_text_bisect(const char *text, size_t *cut) {
    char err[128];
    decoded d = {0};
    if (decode(&d, text, err, sizeof err) || d.n < 2) {
        decoded_free(&d);
        return -1;
    }
    int64_t n = d.n, mid = n / 2, best[3] = {-1, -1, -1};
    for (int64_t k = 1; k < n; k++) {
        int32_t prev = d.cp[k - 1], c = d.cp[k];
        int cls = -1;
        if ((is_space(c) && (is_term_latin(prev) || is_closer(prev))) || is_term_cjk(prev))
            cls = 0;
        else if (is_comma(prev))
            cls = 1;
        else if (is_space(c))
            cls = 2;
        if (cls < 0 || 4 * k < n || 4 * k > 3 * n) continue;
        if (cls == 0 && is_closer(prev)) { /* closer must end a terminator run */
            int64_t m = k - 1;
            while (m > 0 && is_closer(d.cp[m]))
                m--;
            if (!is_term_latin(d.cp[m]) && !is_term_cjk(d.cp[m])) cls = 2;
        }
        if (best[cls] < 0 || llabs(k - mid) < llabs(best[cls] - mid)) best[cls] = k;
    }
    int64_t k = mid;
    for (int c = 0; c < 3; c++)
        if (best[c] >= 0) {
            k = best[c];
            break;
        }
    *cut = d.off[k];
    decoded_free(&d);
    return 0;
}

/* ==== audio ================================================================================= */

static int reserve(qve_audio_buf *b, int64_t n) {
    if (b->n + n <= b->cap) return 0;
    int64_t cap = b->cap ? b->cap : 24000;
    while (cap < b->n + n)
        cap *= 2;
    float *x = realloc(b->x, (size_t)cap * sizeof *x);
    if (!x) return -1;
    b->x = x;
    b->cap = cap;
    return 0;
}

int qve_audio_append(qve_audio_buf *b, const float *x, int64_t n, int64_t xfade_samples) {
    if (n <= 0) return 0;
    int64_t k = xfade_samples;
    if (k > b->n) k = b->n;
    if (k > n) k = n;
    if (k < 0) k = 0;
    if (reserve(b, n - k)) return -1;
    float *tail = b->x + b->n - k;
    for (int64_t i = 0; i < k; i++) {
        float w = (float)(((double)i + 0.5) / (double)k);
        tail[i] = tail[i] * (1.0f - w) + x[i] * w;
    }
    memcpy(b->x + b->n, x + k, (size_t)(n - k) * sizeof *x);
    b->n += n - k;
    return 0;
}

int qve_audio_append_silence(qve_audio_buf *b, int64_t n) {
    if (n <= 0) return 0;
    if (reserve(b, n)) return -1;
    memset(b->x + b->n, 0, (size_t)n * sizeof *b->x);
    b->n += n;
    return 0;
}

void qve_audio_buf_free(qve_audio_buf *b) {
    if (!b) return;
    free(b->x);
    memset(b, 0, sizeof *b);
}

int64_t qve_audio_lead_start(const float *x, int64_t n, int64_t pad_samples, int64_t *scanned) {
    enum { FRAME = 240 };
    for (; *scanned + FRAME <= n; *scanned += FRAME) {
        double e = 0;
        for (int i = 0; i < FRAME; i++)
            e += (double)x[*scanned + i] * x[*scanned + i];
        if (10 * log10(e / FRAME + 1e-30) > QVE_LEAD_DBFS)
            return *scanned > pad_samples ? *scanned - pad_samples : 0;
    }
    return -1;
}
