/* markup.h — the one parser of inline markup tags (docs/markup.md; prefix qve_): `[pause:…]`,
 * `[break:…]`, `[style:…]`, `[voice:…]`, `[lang:…]` and bare style names (`[sad]`), plus the
 * style table that maps a name to an instruct text (built in, extended by the user's lines).
 * textchunk.c calls it for every '[' it meets; synth.c resolves what a style tag means for the
 * model and voice at hand. Pure functions; nothing prints.
 * Decision: a tag is read within QVE_TAG_MAX_BYTES of its '[', so parsing is linear in the text
 * whatever it holds; a bracket that is no known tag stays text, as before markup existed.
 */
#ifndef QVE_MARKUP_H
#define QVE_MARKUP_H

#include <stddef.h>

#define QVE_TAG_MAX_BYTES 256   /* '[' to ']' inclusive */
#define QVE_PAUSE_MAX_MS 60000  /* longest [pause:…] accepted */
#define QVE_STYLE_NAME_MAX 32  /* bytes of a style name: [a-z][a-z0-9_-]* (case-folded) */
#define QVE_STYLE_TABLE_MAX 256 /* entries of a user style table */

enum qve_tag_kind { QVE_TAG_PAUSE, QVE_TAG_STYLE, QVE_TAG_VOICE, QVE_TAG_LANG };

typedef struct {
    enum qve_tag_kind kind;
    int pause_ms;                     /* PAUSE */
    char value[QVE_TAG_MAX_BYTES];    /* STYLE: a name (lower case) or free instruct text;
                                         VOICE, LANG: the name as written */
    int is_name;                      /* STYLE: value is a style name, not free text */
} qve_tag;

typedef struct {
    char name[QVE_STYLE_NAME_MAX + 1];
    char *instruct; /* owned */
} qve_style_entry;

/* The style names a text may use as bare tags: the built-in table, the user's table (which wins
 * on a clash) and extra names with no instruct (palette entries, generic directions). */
typedef struct {
    qve_style_entry *user;
    int n_user;
    char (*extra)[QVE_STYLE_NAME_MAX + 1];
    int n_extra;
} qve_styles;

/* Parses lines "name = instruct text" ('#' starts a comment line, blank lines skipped) into s
 * (appended). 0, or -1 with err naming the line ("style table line 3: ..."). */
int qve_styles_parse(qve_styles *s, const char *table, char *err, size_t err_size);
/* Adds a name with no instruct (a palette entry). 0, or -1 (bad name or out of memory). */
int qve_styles_add_name(qve_styles *s, const char *name);
void qve_styles_free(qve_styles *s); /* accepts zeroed */

/* The instruct text of a style name (user table first, then the built-in one), or NULL; "" for
 * "neutral" (back to the request's own settings). s may be NULL (built-in table only). */
const char *qve_style_instruct(const qve_styles *s, const char *name);
/* Folds s to a style name (lower case) into out: 0, or -1 when s is no name. */
int qve_style_fold(const char *s, char out[QVE_STYLE_NAME_MAX + 1]);
/* Whether name is a style a bare tag may use (either table, or an extra name). */
int qve_style_known(const qve_styles *s, const char *name);
/* The built-in table, for docs and --help: entry i (NULL past the end). */
const qve_style_entry *qve_style_builtin(int i);

/* Reads the tag at s[0] == '[' (n bytes available). Returns its length in bytes (> 0, tag in *t),
 * 0 when it is no tag (the bracket is text), or -1 for a malformed tag of a known kind with err
 * = "bad pause tag at character AT: what is wrong" (at: the tag's character offset). */
long qve_markup_tag(const char *s, size_t n, long at, const qve_styles *styles, qve_tag *t,
                    char *err, size_t err_size);

#endif
