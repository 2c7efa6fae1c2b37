/* markup.c — inline markup tags and the style table (markup.h, docs/markup.md). A tag is read
 * within QVE_TAG_MAX_BYTES of its '[' so that a text of any size parses in linear time.
 */
#include "engine/markup.h"

#include "include/qvoice.h"
#include "util/api.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ==== style table ============================================================================ */

/* Instruct texts in the words the 1.7B CustomVoice model card uses ("Speak in a ... tone"); the
 * names include the pure-C engine's common tags ([joy] [happy] [sad] [angry] [whisper] ...). */
static const qve_style_entry builtin[] = {
    {"neutral", ""},
    {"happy", "Speak in a happy, cheerful tone."},
    {"joy", "Speak with joy, in a bright and happy tone."},
    {"cheerful", "Speak in a cheerful, upbeat tone."},
    {"excited", "Speak in an excited, energetic tone."},
    {"laugh", "Speak while laughing, amused."},
    {"sad", "Speak in a sad, sorrowful tone."},
    {"sigh", "Speak with a weary sigh, resigned."},
    {"tired", "Speak in a tired, sleepy tone."},
    {"angry", "Speak in an angry, irritated tone."},
    {"shout", "Shout loudly."},
    {"whisper", "Whisper softly."},
    {"calm", "Speak in a calm, soothing tone."},
    {"gentle", "Speak gently and warmly."},
    {"serious", "Speak in a serious, formal tone."},
    {"fear", "Speak in a frightened, trembling voice."},
    {"scared", "Speak in a frightened, trembling voice."},
    {"nervous", "Speak nervously, hesitating."},
    {"surprised", "Speak in a surprised, astonished tone."},
    {"sarcastic", "Speak in a sarcastic tone."},
};
#define N_BUILTIN ((int)(sizeof builtin / sizeof *builtin))

const qve_style_entry *qve_style_builtin(int i) {
    return i >= 0 && i < N_BUILTIN ? &builtin[i] : NULL;
}

/* A style name: [A-Za-z][A-Za-z0-9_-]*, at most QVE_STYLE_NAME_MAX bytes; folded to lower case
 * into out. 0 or -1. */
static int fold_name(const char *s, size_t n, char out[QVE_STYLE_NAME_MAX + 1]) {
    if (n == 0 || n > QVE_STYLE_NAME_MAX || !isalpha((unsigned char)s[0])) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '_' && c != '-') return -1;
        out[i] = (char)tolower(c);
    }
    out[n] = 0;
    return 0;
}

int qve_style_fold(const char *s, char out[QVE_STYLE_NAME_MAX + 1]) {
    return fold_name(s, strlen(s), out);
}

const char *qve_style_instruct(const qve_styles *s, const char *name) {
    for (int i = s ? s->n_user - 1 : -1; i >= 0; i--)
        if (!strcmp(s->user[i].name, name)) return s->user[i].instruct;
    for (int i = 0; i < N_BUILTIN; i++)
        if (!strcmp(builtin[i].name, name)) return builtin[i].instruct;
    return NULL;
}

int qve_style_known(const qve_styles *s, const char *name) {
    if (qve_style_instruct(s, name)) return 1;
    for (int i = 0; s && i < s->n_extra; i++)
        if (!strcmp(s->extra[i], name)) return 1;
    return 0;
}

int qve_styles_add_name(qve_styles *s, const char *name) {
    char f[QVE_STYLE_NAME_MAX + 1];
    if (fold_name(name, strlen(name), f)) return -1;
    if (qve_style_known(s, f)) return 0;
    void *x = realloc(s->extra, (size_t)(s->n_extra + 1) * sizeof *s->extra);
    if (!x) return -1;
    s->extra = x;
    memcpy(s->extra[s->n_extra++], f, sizeof f);
    return 0;
}

static const char *skip_blank(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

int qve_styles_parse(qve_styles *s, const char *table, char *err, size_t es) {
    int line = 0;
    for (const char *p = table; *p;) {
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        line++;
        const char *a = skip_blank(p, eol), *b = eol;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
            b--;
        p = *eol ? eol + 1 : eol;
        if (a == b || *a == '#') continue;
        const char *eq = memchr(a, '=', (size_t)(b - a));
        const char *ne = eq;
        while (ne && ne > a && (ne[-1] == ' ' || ne[-1] == '\t'))
            ne--;
        qve_style_entry e;
        if (!eq || fold_name(a, (size_t)(ne - a), e.name)) {
            snprintf(err, es,
                     "style table line %d: expected \"name = instruct text\" with a name of "
                     "letters, digits, '_' or '-' (at most %d, a letter first)",
                     line, QVE_STYLE_NAME_MAX);
            return -1;
        }
        const char *v = skip_blank(eq + 1, b);
        if (s->n_user >= QVE_STYLE_TABLE_MAX || (size_t)(b - v) >= QVE_TAG_MAX_BYTES) {
            snprintf(err, es, "style table line %d: over the limit (%d entries, %d-byte texts)",
                     line, QVE_STYLE_TABLE_MAX, QVE_TAG_MAX_BYTES - 1);
            return -1;
        }
        void *x = realloc(s->user, (size_t)(s->n_user + 1) * sizeof *s->user);
        if (x) s->user = x;
        e.instruct = x ? strndup(v, (size_t)(b - v)) : NULL;
        if (!e.instruct) {
            snprintf(err, es, "style table line %d: out of memory", line);
            return -1;
        }
        s->user[s->n_user++] = e;
    }
    return 0;
}

void qve_styles_free(qve_styles *s) {
    if (!s) return;
    for (int i = 0; i < s->n_user; i++)
        free(s->user[i].instruct);
    free(s->user);
    free(s->extra);
    memset(s, 0, sizeof *s);
}

/* ==== tags =================================================================================== */

/* "500ms", "1.5s" -> milliseconds, 0 < ms <= QVE_PAUSE_MAX_MS; -1 if malformed. Digits by hand:
 * strtod would follow the locale's decimal mark. */
static int parse_ms(const char *p, const char *end) {
    const char *num = p;
    int dots = 0;
    double v = 0, scale = 1;
    for (; p < end && ((*p >= '0' && *p <= '9') || *p == '.'); p++) {
        if (*p == '.') {
            dots++;
            continue;
        }
        v = v * 10 + (*p - '0');
        if (dots) scale *= 10;
        if (v > 1e15) return -1;
    }
    if (p == num || dots > 1 || p[-1] == '.' || *num == '.') return -1;
    v /= scale;
    if (end - p == 2 && !strncasecmp(p, "ms", 2))
        scale = 1.0;
    else if (end - p == 1 && (*p == 's' || *p == 'S'))
        scale = 1000.0;
    else
        return -1;
    const double m = v * scale;
    if (!(m >= 0.5 && m <= QVE_PAUSE_MAX_MS)) return -1;
    return (int)lround(m);
}

static const struct {
    const char *prefix;
    enum qve_tag_kind kind;
} prefixes[] = {{"pause:", QVE_TAG_PAUSE}, {"break:", QVE_TAG_PAUSE}, {"style:", QVE_TAG_STYLE},
                {"voice:", QVE_TAG_VOICE}, {"lang:", QVE_TAG_LANG}};

long qve_markup_tag(const char *s, size_t n, long at, const qve_styles *styles, qve_tag *t,
                    char *err, size_t es) {
    memset(t, 0, sizeof *t);
    const size_t lim = n < QVE_TAG_MAX_BYTES ? n : QVE_TAG_MAX_BYTES;
    const char *close = memchr(s, ']', lim);
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++) {
        const size_t pl = strlen(prefixes[k].prefix);
        if (n < 1 + pl || strncasecmp(s + 1, prefixes[k].prefix, pl)) continue;
        const char *v = s + 1 + pl, *e = close;
        const int nl = (int)pl - 1; /* the tag's name without ':' */
        t->kind = prefixes[k].kind;
        if (!e || memchr(v, '[', (size_t)(e - v))) {
            snprintf(err, es, "bad %.*s tag at character %ld: no ']' within %d bytes", nl,
                     prefixes[k].prefix, at, QVE_TAG_MAX_BYTES);
            return -1;
        }
        while (v < e && (*v == ' ' || *v == '\t'))
            v++;
        while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (t->kind == QVE_TAG_PAUSE) {
            if ((t->pause_ms = parse_ms(v, e)) < 0) {
                snprintf(err, es,
                         "bad %.*s tag at character %ld: expected e.g. [pause:500ms] or "
                         "[break:1.5s], 0 < pause <= %d ms",
                         nl, prefixes[k].prefix, at, QVE_PAUSE_MAX_MS);
                return -1;
            }
        } else {
            if (v == e || memchr(v, '\n', (size_t)(e - v))) {
                snprintf(err, es, "bad %.*s tag at character %ld: empty or spans lines", nl,
                         prefixes[k].prefix, at);
                return -1;
            }
            char f[QVE_STYLE_NAME_MAX + 1];
            t->is_name = t->kind == QVE_TAG_STYLE && !fold_name(v, (size_t)(e - v), f) &&
                         qve_style_known(styles, f);
            if (t->is_name)
                memcpy(t->value, f, sizeof f);
            else
                memcpy(t->value, v, (size_t)(e - v));
        }
        return (long)(close - s) + 1;
    }
    /* a bare [name] is a tag only when the name is a known style; anything else is text */
    if (!close) return 0;
    char f[QVE_STYLE_NAME_MAX + 1];
    if (fold_name(s + 1, (size_t)(close - s - 1), f) || !qve_style_known(styles, f)) return 0;
    t->kind = QVE_TAG_STYLE;
    t->is_name = 1;
    memcpy(t->value, f, sizeof f);
    return (long)(close - s) + 1;
}

/* ==== dialogue scripts ======================================================================= */

/* Appends n bytes to a growing buffer; -1 when out of memory. */
static int put(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap : 256);
        while (c < *len + n + 1)
            c *= 2;
        char *x = realloc(*b, c);
        if (!x) return -1;
        *b = x, *cap = c;
    }
    memcpy(*b + *len, s, n);
    (*b)[*len += n] = 0;
    return 0;
}

static int n_code_points(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static enum qv_status script_markup(const char *script, int pause_ms, char **markup,
                                    int **line_offsets, int **line_numbers, int *n_lines,
                                    char *err, size_t es) {
    *markup = NULL, *line_offsets = NULL, *line_numbers = NULL, *n_lines = 0;
    char *b = NULL;
    size_t len = 0, cap = 0;
    int n = 0, cap_l = 0, line = 0, blank = 0, chars = 0;
    char pause[32];
    snprintf(pause, sizeof pause, "[pause:%dms]\n\n", pause_ms);
    for (const char *p = script; *p;) {
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        const char *a = skip_blank(p, eol), *e = eol;
        p = *eol ? eol + 1 : eol;
        line++;
        while (e > a && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
            e--;
        if (a == e) {
            blank = n > 0;
            continue;
        }
        if (*a == '#') continue;
        const char *colon = memchr(a, ':', (size_t)(e - a)), *name_end = colon;
        while (name_end && name_end > a && (name_end[-1] == ' ' || name_end[-1] == '\t'))
            name_end--;
        int ok = colon && name_end > a && name_end - a <= 64;
        for (const char *q = a; ok && q < name_end; q++)
            ok = isalnum((unsigned char)*q) || *q == '_' || *q == '-' || *q == '.';
        const char *text = colon ? skip_blank(colon + 1, e) : e;
        if (!ok || text == e) {
            snprintf(err, es,
                     "script line %d: expected \"NAME: text\" (NAME: a voice or preset speaker, "
                     "letters, digits, '_', '-', '.')",
                     line);
            goto fail;
        }
        if (n == cap_l) {
            cap_l = cap_l ? 2 * cap_l : 64;
            int *o = realloc(*line_offsets, (size_t)cap_l * sizeof *o);
            if (o) *line_offsets = o;
            int *l = o ? realloc(*line_numbers, (size_t)cap_l * sizeof *l) : NULL;
            if (l) *line_numbers = l;
            if (!o || !l) goto nomem;
        }
        if (blank && put(&b, &len, &cap, pause, strlen(pause))) goto nomem;
        chars += blank ? n_code_points(pause, strlen(pause)) : 0;
        blank = 0;
        (*line_offsets)[n] = chars;
        (*line_numbers)[n++] = line;
        char head[128];
        int hn = snprintf(head, sizeof head, "[voice:%.*s][neutral]", (int)(name_end - a), a);
        if (put(&b, &len, &cap, head, (size_t)hn) ||
            put(&b, &len, &cap, text, (size_t)(e - text)) || put(&b, &len, &cap, "\n\n", 2))
            goto nomem;
        chars += hn + n_code_points(text, (size_t)(e - text)) + 2;
    }
    if (!n) {
        snprintf(err, es, "script: no \"NAME: text\" line");
        goto fail;
    }
    *markup = b;
    *n_lines = n;
    return QV_OK;
nomem:
    snprintf(err, es, "script line %d: out of memory", line);
    free(b);
    free(*line_offsets), free(*line_numbers);
    *line_offsets = NULL, *line_numbers = NULL;
    return QV_E_NOMEM;
fail:
    free(b);
    free(*line_offsets), free(*line_numbers);
    *line_offsets = NULL, *line_numbers = NULL;
    return QV_E_INVALID;
}

enum qv_status qv_script_to_markup(const char *script, int pause_ms, char **markup,
                                   int **line_offsets, int **line_numbers, int *n_lines) {
    if (!markup || !line_offsets || !line_numbers || !n_lines)
        return qvu_fail(QV_E_INVALID, "qv_script_to_markup: NULL output");
    if (!script) return qvu_fail(QV_E_INVALID, "qv_script_to_markup: NULL script");
    char err[QVU_DETAIL_SIZE] = "";
    return qvu_fail(
        script_markup(script, pause_ms, markup, line_offsets, line_numbers, n_lines, err, sizeof err),
        err);
}
