/* vocab.c — the token ids a vocabulary can produce (seed technique 1: token-map pruning).
 *
 * Every word in three cases (lower, UPPER, Title), each bare and space-prefixed: byte-level BPE
 * gives a mid-sentence word its own " word" tokens, and without them those words would have to be
 * spelled from smaller pieces (read as zero rows, as before spelling, they ended speech early).
 * The rest is kept unconditionally so that digits, punctuation, any byte and the prompt template
 * always have their rows.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress_impl.h"
#include "compress/qvz.h"
#include "engine/tokenizer.h"

#define SPECIAL_FROM 151600 /* added tokens and the unused top of the Qwen2 vocabulary */
#define WORD_MAX 256

static int mark(qve_tok *tok, const char *s, size_t n, uint8_t *keep, int n_vocab, char *err,
                size_t es) {
    int32_t ids[WORD_MAX + 2];
    size_t n_ids = 0;
    int rc = qve_tok_encode_into(tok, s, n, ids, WORD_MAX + 2, &n_ids, err, es);
    if (rc == QVE_TOK_E_BAD_UTF8) return 0; /* a word list in another encoding: skip the word */
    if (rc != QVE_TOK_OK) return -1;
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= 0 && ids[i] < n_vocab) keep[ids[i]] = 1;
    return 0;
}

/* w bare and space-prefixed. */
static int mark2(qve_tok *tok, const char *w, size_t n, uint8_t *keep, int n_vocab, char *err,
                 size_t es) {
    char b[WORD_MAX + 2];
    b[0] = ' ';
    memcpy(b + 1, w, n);
    return mark(tok, w, n, keep, n_vocab, err, es) || mark(tok, b, n + 1, keep, n_vocab, err, es);
}

static int mark_word(qve_tok *tok, const char *w, size_t n, uint8_t *keep, int n_vocab, char *err,
                     size_t es) {
    char v[WORD_MAX];
    if (n == 0 || n >= WORD_MAX) return 0;
    for (int c = 0; c < 3; c++) { /* lower, UPPER, Title (ASCII letters; other bytes as they are) */
        for (size_t i = 0; i < n; i++)
            v[i] = (char)(c == 1 || (c == 2 && i == 0) ? toupper((unsigned char)w[i])
                                                       : tolower((unsigned char)w[i]));
        if (mark2(tok, v, n, keep, n_vocab, err, es)) return -1;
    }
    return 0;
}

/* GPT-2's byte-to-unicode table: the vocab.json form of the single-byte token b. */
static void byte_token(int b, char out[4]) {
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        int k = 0; /* the k-th byte outside those ranges maps to U+0100 + k */
        for (int x = 0; x < b; x++)
            k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
        cp = 256 + k;
    }
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
}

int qvz_vocab_keep(const qvm_ckpt *ck, const char *vocab, uint8_t *keep, int n_vocab, char *err,
                   size_t err_size) {
    static const struct {
        const char *name, *path, *package;
    } lists[] = {{"english", QVZ_ENGLISH_WORDS, "wamerican"},
                 {"english-small", QVZ_ENGLISH_SMALL_WORDS, "wamerican-small"}};
    const char *path = vocab, *package = NULL;
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++)
        if (!strcmp(vocab, lists[i].name)) path = lists[i].path, package = lists[i].package;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (package)
            snprintf(err, err_size,
                     "%s: cannot open word list (Debian package %s: scripts/deps.sh)", path,
                     package);
        else
            snprintf(err, err_size, "%s: cannot open word list", path);
        return -1;
    }
    qve_tok *tok = qve_tok_open_files(&ck->tok_files, err, err_size);
    if (!tok) {
        fclose(f);
        return -1;
    }
    memset(keep, 0, (size_t)n_vocab);
    int rc = 0;
    char line[4096];
    while (!rc && fgets(line, sizeof line, f)) {
        for (char *p = line; *p && !rc;) {
            while (*p && isspace((unsigned char)*p)) p++;
            char *e = p;
            while (*e && !isspace((unsigned char)*e)) e++;
            rc = mark_word(tok, p, (size_t)(e - p), keep, n_vocab, err, err_size);
            p = e;
        }
    }
    if (!rc && ferror(f)) snprintf(err, err_size, "%s: read error", path), rc = -1;
    fclose(f);
    char s[16];
    for (int i = 0; i < 10000 && !rc; i++) {
        int n = snprintf(s, sizeof s, "%d", i);
        rc = mark2(tok, s, (size_t)n, keep, n_vocab, err, err_size);
    }
    for (int c = 32; c < 127 && !rc; c++) {
        s[0] = (char)c;
        rc = mark2(tok, s, 1, keep, n_vocab, err, err_size);
    }
    static const char *const tmpl[] = {"<|im_start|>assistant\n", "<|im_start|>user\n",
                                       "<|im_start|>system\n", "<|im_end|>\n", "\n", "\n\n"};
    for (size_t i = 0; i < sizeof tmpl / sizeof tmpl[0] && !rc; i++)
        rc = mark(tok, tmpl[i], strlen(tmpl[i]), keep, n_vocab, err, err_size);
    for (int b = 0; b < 256 && !rc; b++) {
        char t[4];
        byte_token(b, t);
        const int32_t id = qve_tok_token_to_id(tok, t);
        if (id >= 0 && id < n_vocab) keep[id] = 1;
    }
    qve_tok_free(tok);
    if (rc) return -1;
    int n = 0;
    for (int i = 0; i < n_vocab; i++)
        n += keep[i] |= i >= SPECIAL_FROM;
    return n;
}
