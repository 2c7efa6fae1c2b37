/* tokenizer.c — Qwen2 byte-level BPE (§7). Added tokens split the raw text first (leftmost,
 * longest); each other segment is NFC-normalised (utf8proc), split by the Qwen2 regex (PCRE2 with
 * UTF+UCP, JIT), mapped byte->unicode (GPT-2 table) and merged by rank. Merging uses a min-heap of
 * (rank, position) over a linked list, O(n log n) for any word length and the same order as the HF
 * and transformers.js implementations; results for short pieces are cached by their bytes.
 * The tables built from vocab.json + merges.txt (~100 ms of parsing and hashing) are kept in the
 * prepared-weights cache (checkpoint/prepared.h) and mapped by later opens after a check of every
 * index in them: a file that fails it is ignored and the tables are built again.
 */
#include "engine/tokenizer.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "checkpoint/prepared.h"
#include "util/fileio.h"

#define TOK_FILE_MAX_BYTES ((size_t)64 << 20) /* vocab.json and merges.txt are a few MB */

/* ==== constants ==================================================================== */

/* The Qwen2 pre-tokenizer (tokenizer.json pre_tokenizer.pretokenizers[0].pattern.Regex). */
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The same with \s spelled out as the Unicode White_Space property, which is what HF's
 * Oniguruma and Rust regex engines match. PCRE2's UCP \s adds U+180E; JavaScript's \s (the
 * transformers.js reference) adds U+FEFF and lacks U+0085 (see tests/tokenizer/README.md). */
#define WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
           "\\x{205F}\\x{3000}"
static const char SPLIT_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    "[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";

#define CACHE_MAX_PIECE_BYTES 256   /* longer pieces are merged every time */
#define CACHE_MAX_ENTRIES (1u << 16) /* cache is cleared when full: bounded memory */
#define CACHE_MAX_KEY_BYTES ((size_t)4 << 20)
#define MAX_ADDED 4096
#define JIT_STACK_BYTES (1u << 20)

/* ==== types ======================================================================== */

typedef struct {
    int32_t id;
    uint32_t len;
    const char *content; /* points into the token string arena */
} added_token;

typedef struct { /* one BPE cache entry: key bytes and ids live in the arenas */
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, n_ids;
} cache_entry;

typedef struct {
    int32_t rank, pos, left, right, merged;
} heap_item;

/* A string -> id slot that holds the string's length and first bytes, so that a lookup (~750k
 * while loading the vocabulary and the merges) reads one cache line, not the string. */
#define STR_INLINE 10
#define STR_LONG 0xFFFF /* n of strings at least this long: their length is checked with strlen */
#define MERGE_MAX 512   /* a merge's result is shorter than this (add_merge refuses longer ones) */
typedef struct {
    int32_t id; /* -1: empty */
    uint16_t n;
    char s[STR_INLINE];
} str_entry;

struct qve_tok {
    /* vocabulary: id -> vocab-form string; string -> id via open addressing. With tables set (a
       cache file), the strings and the tables below are in its read-only mapping (only tok_str is owned) */
    qvm_prep *tables;
    int32_t n_ids;          /* max id + 1 */
    char **tok_str;         /* [n_ids], NULL for unused ids; strings are individually owned */
    uint8_t *is_added;      /* [n_ids] */
    str_entry *str_slots;   /* [str_mask + 1]; rebuilt whenever tok_str changes */
    uint32_t str_mask;
    /* merges: (left,right) -> rank, merged id */
    uint64_t *merge_keys;   /* [merge_mask + 1], UINT64_MAX = empty */
    int32_t *merge_rank, *merge_id;
    uint32_t merge_mask;
    /* byte-level table */
    int32_t byte_id[256];
    int16_t cp_byte[0x144]; /* code point -> byte, -1 if not a byte-level code point */
    /* added tokens, longest first */
    added_token *added;
    int n_added;
    uint8_t added_first[256];
    /* regex */
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    int use_jit;
    /* BPE cache */
    uint32_t *cache_slots; /* [cache_mask + 1], entry index + 1, 0 = empty */
    uint32_t cache_mask;
    cache_entry *cache;
    uint32_t n_cache;
    char *cache_keys;
    size_t n_cache_keys, cap_cache_keys;
    int32_t *cache_ids;
    size_t n_cache_ids, cap_cache_ids;
    /* BPE scratch */
    int32_t *sym, *prev, *next;
    size_t cap_sym;
    heap_item *heap;
    size_t cap_heap;
    utf8proc_int32_t *nfc; /* NFC scratch: code points, then re-encoded UTF-8 in place */
    size_t cap_nfc;
};

/* ==== small helpers ================================================================ */

static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || !err_size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

/* The hash of a followed by b (b may be empty). */
static uint64_t hash_concat(const void *a, size_t na, const void *b, size_t nb)
{
    const uint8_t *s = a, *t = b;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < na; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    for (size_t i = 0; i < nb; i++) h = (h ^ t[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    return hash_concat(p, n, "", 0);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint32_t pow2_at_least(size_t n)
{
    uint32_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or > U+10FFFF). Returns the length of the sequence at
 * s[0..n) or, when invalid, minus the length of its maximal invalid subpart (Unicode §3.9). */
static int utf8_seq(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return -1;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -i;
        uint8_t b = s[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return -i;
    }
    return len;
}

static int utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* ==== vocabulary tables ============================================================ */

/* The slot where s is, or the empty slot where it would go. */
static uint32_t str_slot(const qve_tok *t, const char *s, size_t n)
{
    const uint16_t key_n = n < STR_LONG ? (uint16_t)n : STR_LONG;
    const size_t head = n < STR_INLINE ? n : STR_INLINE;
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->str_mask;
    for (;; i = (i + 1) & t->str_mask) {
        const str_entry *e = &t->str_slots[i];
        if (e->id < 0) return i;
        if (e->n != key_n || memcmp(e->s, s, head) != 0) continue;
        const char *ts = t->tok_str[e->id];
        if (n <= STR_INLINE ||
            (n < STR_LONG ? memcmp(ts + STR_INLINE, s + STR_INLINE, n - STR_INLINE) == 0
                          : strlen(ts) == n && memcmp(ts, s, n) == 0))
            return i;
    }
}

/* Starts loading the slot of a followed by b: the table is far larger than the caches and the
 * loaders' lookups are bound by its misses, so they prefetch a few strings ahead. */
static void str_prefetch(const qve_tok *t, const char *a, size_t na, const char *b, size_t nb)
{
    __builtin_prefetch(&t->str_slots[hash_concat(a, na, b, nb) & t->str_mask]);
}

static int32_t str_lookup(const qve_tok *t, const char *s, size_t n)
{
    return t->str_slots[str_slot(t, s, n)].id;
}

/* Builds the string -> id table from every id's string (again whenever they change). */
static int build_str_table(qve_tok *t)
{
    t->str_mask = pow2_at_least((size_t)t->n_ids * 2) - 1;
    free(t->str_slots);
    t->str_slots = malloc(((size_t)t->str_mask + 1) * sizeof *t->str_slots);
    if (!t->str_slots) return -1;
    for (size_t i = 0; i <= t->str_mask; i++)
        t->str_slots[i] = (str_entry){.id = -1}; /* whole: the cache file holds them */
    for (int32_t id = 0; id < t->n_ids; id++) {
        const char *s = t->tok_str[id], *ahead = id + 8 < t->n_ids ? t->tok_str[id + 8] : NULL;
        if (ahead) str_prefetch(t, ahead, strlen(ahead), "", 0);
        if (!s) continue;
        const size_t n = strlen(s);
        str_entry *e = &t->str_slots[str_slot(t, s, n)];
        if (e->id >= 0) continue; /* a duplicate string: the first id wins */
        e->id = id;
        e->n = n < STR_LONG ? (uint16_t)n : STR_LONG;
        memcpy(e->s, s, n < STR_INLINE ? n : STR_INLINE);
    }
    return 0;
}

static int ensure_ids(qve_tok *t, int32_t id)
{
    if (id < t->n_ids) return 0;
    int32_t n = id + 1;
    char **s = realloc(t->tok_str, (size_t)n * sizeof *s);
    if (!s) return -1;
    t->tok_str = s;
    uint8_t *a = realloc(t->is_added, (size_t)n);
    if (!a) return -1;
    t->is_added = a;
    for (int32_t i = t->n_ids; i < n; i++) {
        t->tok_str[i] = NULL;
        t->is_added[i] = 0;
    }
    t->n_ids = n;
    return 0;
}

static int set_token(qve_tok *t, int32_t id, const char *s, int added)
{
    if (ensure_ids(t, id)) return -1;
    char *c = strdup(s);
    if (!c) return -1;
    free(t->tok_str[id]);
    t->tok_str[id] = c;
    t->is_added[id] = (uint8_t)added;
    return 0;
}

static uint32_t merge_slot(const qve_tok *t, uint64_t key)
{
    uint32_t i = (uint32_t)hash_u64(key) & t->merge_mask;
    while (t->merge_keys[i] != UINT64_MAX && t->merge_keys[i] != key) i = (i + 1) & t->merge_mask;
    return i;
}

static int merges_alloc(qve_tok *t, size_t n_merges)
{
    t->merge_mask = pow2_at_least(n_merges * 2 + 1) - 1;
    size_t n = (size_t)t->merge_mask + 1;
    t->merge_keys = malloc(n * sizeof *t->merge_keys);
    t->merge_rank = calloc(n, sizeof *t->merge_rank); /* zeroed: the cache file holds them */
    t->merge_id = calloc(n, sizeof *t->merge_id);
    if (!t->merge_keys || !t->merge_rank || !t->merge_id) return -1;
    memset(t->merge_keys, 0xFF, n * sizeof *t->merge_keys);
    return 0;
}

/* Adds merge "a b" with the given rank; a later duplicate overrides (as HF's HashMap does). */
static int add_merge(qve_tok *t, const char *a, size_t na, const char *b, size_t nb, int32_t rank,
                     const char *file, size_t line, char *err, size_t err_size)
{
    int32_t ia = str_lookup(t, a, na), ib = str_lookup(t, b, nb);
    char buf[MERGE_MAX];
    if (ia < 0 || ib < 0 || na + nb >= sizeof buf) {
        set_err(err, err_size, "%s: merge %zu: token \"%.*s\" not in vocab", file, line,
                (int)(ia < 0 ? na : nb), ia < 0 ? a : b);
        return QVE_TOK_E_FORMAT;
    }
    memcpy(buf, a, na);
    memcpy(buf + na, b, nb);
    int32_t im = str_lookup(t, buf, na + nb);
    if (im < 0) {
        set_err(err, err_size, "%s: merge %zu: result \"%.*s\" not in vocab", file, line,
                (int)(na + nb), buf);
        return QVE_TOK_E_FORMAT;
    }
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    uint32_t s = merge_slot(t, key);
    t->merge_keys[s] = key;
    t->merge_rank[s] = rank;
    t->merge_id[s] = im;
    return QVE_TOK_OK;
}

/* ==== loading ====================================================================== */

static cJSON *load_json(const char *path, char *err, size_t err_size, int *status)
{
    size_t n = 0;
    char *buf = qvu_read_file(path, TOK_FILE_MAX_BYTES, &n, err, err_size);
    if (!buf) {
        *status = QVE_TOK_E_IO;
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!j) {
        set_err(err, err_size, "%s: not valid JSON", path);
        *status = QVE_TOK_E_FORMAT;
    }
    return j;
}

static int parse_id(const char *s, int32_t *id)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v >= INT32_MAX - 1) return -1;
    *id = (int32_t)v;
    return 0;
}

static int load_vocab_obj(qve_tok *t, const cJSON *vocab, const char *file, char *err,
                          size_t err_size)
{
    if (!cJSON_IsObject(vocab)) {
        set_err(err, err_size, "%s: vocab is not an object", file);
        return QVE_TOK_E_FORMAT;
    }
    int32_t max_id = -1;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (v < 0 || v >= 16777216.0 || v != (double)(int32_t)v || !e->string) {
            set_err(err, err_size, "%s: vocab entry \"%s\": id is not an integer in [0, 2^24)",
                    file, e->string ? e->string : "");
            return QVE_TOK_E_FORMAT;
        }
        if ((int32_t)v > max_id) max_id = (int32_t)v;
    }
    if (max_id < 0) {
        set_err(err, err_size, "%s: vocab is empty", file);
        return QVE_TOK_E_FORMAT;
    }
    if (ensure_ids(t, max_id)) return QVE_TOK_E_NOMEM;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->valuedouble;
        if (t->tok_str[id]) {
            set_err(err, err_size, "%s: id %d used by \"%s\" and \"%s\"", file, id, t->tok_str[id],
                    e->string);
            return QVE_TOK_E_FORMAT;
        }
        if (set_token(t, id, e->string, 0)) return QVE_TOK_E_NOMEM;
    }
    return QVE_TOK_OK;
}

/* Collects added tokens from a tokenizer.json "added_tokens" array or a tokenizer_config.json
 * "added_tokens_decoder" object. */
static int load_added(qve_tok *t, const cJSON *node, int is_decoder, const char *file, char *err,
                      size_t err_size)
{
    for (const cJSON *e = node ? node->child : NULL; e; e = e->next) {
        int32_t id = -1;
        if (is_decoder) {
            if (!e->string || parse_id(e->string, &id)) id = -1;
        } else {
            const cJSON *jid = cJSON_GetObjectItemCaseSensitive(e, "id");
            if (cJSON_IsNumber(jid) && jid->valuedouble >= 0 && jid->valuedouble < 16777216.0)
                id = (int32_t)jid->valuedouble;
        }
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (id < 0 || !cJSON_IsString(c) || !c->valuestring[0]) {
            set_err(err, err_size, "%s: added token without a valid id and content", file);
            return QVE_TOK_E_FORMAT;
        }
        static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
        for (size_t k = 0; k < sizeof flags / sizeof *flags; k++) {
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, flags[k]))) {
                set_err(err, err_size, "%s: added token \"%s\": %s=true is not supported", file,
                        c->valuestring, flags[k]);
                return QVE_TOK_E_UNSUPPORTED;
            }
        }
        if (set_token(t, id, c->valuestring, 1)) return QVE_TOK_E_NOMEM;
    }
    /* the strings changed (and the id range may have grown) */
    return node && node->child && build_str_table(t) ? QVE_TOK_E_NOMEM : QVE_TOK_OK;
}

static int load_merges_txt(qve_tok *t, const char *path, char *err, size_t err_size)
{
    size_t n = 0;
    char *buf = qvu_read_file(path, TOK_FILE_MAX_BYTES, &n, err, err_size);
    if (!buf) {
        return QVE_TOK_E_IO;
    }
    size_t n_lines = 1;
    for (size_t i = 0; i < n; i++) n_lines += buf[i] == '\n';
    int status = QVE_TOK_OK;
    if (merges_alloc(t, n_lines)) {
        free(buf);
        return QVE_TOK_E_NOMEM;
    }
    /* the lines are split first, then merged with the slots of the line 8 ahead prefetched */
    typedef struct {
        const char *a, *b;
        size_t na, nb, line;
    } merge_line;
    merge_line *ml = malloc(n_lines * sizeof *ml);
    size_t n_ml = 0, line = 0;
    if (!ml) {
        free(buf);
        return QVE_TOK_E_NOMEM;
    }
    for (char *p = buf, *end = buf + n; p < end && status == QVE_TOK_OK; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        char *s = p, *e = le;
        p = nl ? nl + 1 : end;
        /* as Qwen2Tokenizer: strip, skip blank lines and a leading "#version" line */
        while (s < e && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
        if (s == e || (line == 0 && e - s >= 9 && memcmp(s, "#version:", 9) == 0)) continue;
        char *sp = memchr(s, ' ', (size_t)(e - s));
        if (!sp || sp == s || sp + 1 == e || memchr(sp + 1, ' ', (size_t)(e - sp - 1))) {
            set_err(err, err_size, "%s: line %zu: expected \"A B\", found \"%.*s\"", path, line + 1,
                    (int)(e - s > 60 ? 60 : e - s), s);
            status = QVE_TOK_E_FORMAT;
            break;
        }
        ml[n_ml++] = (merge_line){s, sp + 1, (size_t)(sp - s), (size_t)(e - sp - 1), line + 1};
    }
    for (size_t i = 0; i < n_ml && status == QVE_TOK_OK; i++) {
        if (i + 8 < n_ml) {
            const merge_line *f = &ml[i + 8];
            str_prefetch(t, f->a, f->na, "", 0);
            str_prefetch(t, f->b, f->nb, "", 0);
            str_prefetch(t, f->a, f->na, f->b, f->nb);
        }
        status = add_merge(t, ml[i].a, ml[i].na, ml[i].b, ml[i].nb, (int32_t)i, path, ml[i].line,
                           err, err_size);
    }
    free(ml);
    free(buf);
    return status;
}

static int load_merges_json(qve_tok *t, const cJSON *merges, const char *file, char *err,
                            size_t err_size)
{
    if (!cJSON_IsArray(merges)) {
        set_err(err, err_size, "%s: model.merges is not an array", file);
        return QVE_TOK_E_FORMAT;
    }
    if (merges_alloc(t, (size_t)cJSON_GetArraySize(merges))) return QVE_TOK_E_NOMEM;
    int32_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (cJSON_IsString(m)) { /* "a b" */
            const char *sp = strchr(m->valuestring, ' ');
            if (sp && sp != m->valuestring && sp[1] && !strchr(sp + 1, ' ')) {
                a = m->valuestring, na = (size_t)(sp - a), b = sp + 1, nb = strlen(b);
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            a = m->child->valuestring, na = strlen(a);
            b = m->child->next->valuestring, nb = strlen(b);
        }
        if (!a || !na || !nb) {
            set_err(err, err_size, "%s: model.merges[%d] is not \"A B\" or [\"A\", \"B\"]", file,
                    rank);
            return QVE_TOK_E_FORMAT;
        }
        int st = add_merge(t, a, na, b, nb, rank, file, (size_t)rank, err, err_size);
        if (st) return st;
    }
    return QVE_TOK_OK;
}

/* Refuses a tokenizer.json whose pipeline is not the Qwen2 one this code implements. */
static int check_pipeline(const cJSON *root, const char *file, char *err, size_t err_size)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE")) {
        set_err(err, err_size, "%s: model.type: expected \"BPE\"", file);
        return QVE_TOK_E_UNSUPPORTED;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) {
        set_err(err, err_size, "%s: model.byte_fallback=true is not supported", file);
        return QVE_TOK_E_UNSUPPORTED;
    }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *ntype = cJSON_GetObjectItemCaseSensitive(norm, "type");
    if (!cJSON_IsString(ntype) || strcmp(ntype->valuestring, "NFC")) {
        set_err(err, err_size, "%s: normalizer: expected {\"type\": \"NFC\"}", file);
        return QVE_TOK_E_UNSUPPORTED;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    const cJSON *split = cJSON_IsArray(seq) ? seq->child : NULL;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(split, "pattern");
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    if (!cJSON_IsString(rx) || strcmp(rx->valuestring, QWEN2_REGEX)) {
        set_err(err, err_size, "%s: pre_tokenizer: expected a Split on the Qwen2 regex", file);
        return QVE_TOK_E_UNSUPPORTED;
    }
    return QVE_TOK_OK;
}

static int setup_bytes(qve_tok *t, char *err, size_t err_size)
{
    /* GPT-2 table: printable bytes map to themselves, the other 68 to U+0100.. in byte order */
    uint32_t next_cp = 0x100;
    memset(t->cp_byte, 0xFF, sizeof t->cp_byte);
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uint32_t cp = keep ? (uint32_t)b : next_cp++;
        t->cp_byte[cp] = (int16_t)b;
        char s[4];
        int n = utf8_encode(cp, s);
        t->byte_id[b] = str_lookup(t, s, (size_t)n);
        if (t->byte_id[b] < 0) {
            set_err(err, err_size, "vocab: no token for byte 0x%02X (U+%04X)", b, cp);
            return QVE_TOK_E_FORMAT;
        }
    }
    return QVE_TOK_OK;
}

static int cmp_added(const void *a, const void *b)
{
    const added_token *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int setup_added(qve_tok *t, char *err, size_t err_size)
{
    int n = 0;
    for (int32_t id = 0; id < t->n_ids; id++) n += t->is_added[id];
    if (n > MAX_ADDED) {
        set_err(err, err_size, "added tokens: %d (expected at most %d)", n, MAX_ADDED);
        return QVE_TOK_E_UNSUPPORTED;
    }
    t->added = calloc((size_t)(n ? n : 1), sizeof *t->added);
    if (!t->added) return QVE_TOK_E_NOMEM;
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (!t->is_added[id]) continue;
        added_token *a = &t->added[t->n_added++];
        a->id = id;
        a->content = t->tok_str[id];
        a->len = (uint32_t)strlen(a->content);
        t->added_first[(uint8_t)a->content[0]] = 1;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added);
    return QVE_TOK_OK;
}

static int setup_regex(qve_tok *t, char *err, size_t err_size)
{
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)SPLIT_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                          &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        set_err(err, err_size, "pre-tokenizer regex: %s at %zu", (char *)msg, (size_t)eo);
        return QVE_TOK_E_REGEX;
    }
    t->use_jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    t->mctx = pcre2_match_context_create(NULL);
    if (!t->md || !t->mctx) return QVE_TOK_E_NOMEM;
    if (t->use_jit) {
        t->jit_stack = pcre2_jit_stack_create(32 * 1024, JIT_STACK_BYTES, NULL);
        if (!t->jit_stack) return QVE_TOK_E_NOMEM;
        pcre2_jit_stack_assign(t->mctx, NULL, t->jit_stack);
    }
    return QVE_TOK_OK;
}

/* Builds the vocabulary, merge and added-token tables from f (vocab.json + merges.txt, else
 * tokenizer.json). */
static int build_tables(qve_tok *t, const qvm_tok_files *f, char *err, size_t err_size)
{
    const char *path = f->vocab_merges ? f->vocab_json : f->tokenizer_json;
    cJSON *root = NULL, *cfg = NULL;
    int st = QVE_TOK_OK;
    if (f->vocab_merges) {
        root = load_json(path, err, err_size, &st);
        if (!root) goto done;
        if ((st = load_vocab_obj(t, root, path, err, err_size))) goto done;
        if (build_str_table(t)) goto nomem;
        if ((st = load_merges_txt(t, f->merges_txt, err, err_size))) goto done;
    } else {
        if (!f->has_tokenizer_json) {
            set_err(err, err_size, "%s: no vocab.json + merges.txt and no tokenizer.json",
                    f->dir);
            st = QVE_TOK_E_IO;
            goto done;
        }
        root = load_json(path, err, err_size, &st);
        if (!root) goto done;
        if ((st = check_pipeline(root, path, err, err_size))) goto done;
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
        if ((st = load_vocab_obj(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), path, err,
                                 err_size)))
            goto done;
        if (build_str_table(t)) goto nomem;
        if ((st = load_merges_json(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), path, err,
                                   err_size)))
            goto done;
        if ((st = load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), 0, path,
                             err, err_size)))
            goto done;
    }
    if (f->has_config) {
        path = f->tokenizer_config_json;
        cfg = load_json(path, err, err_size, &st);
        if (!cfg) goto done;
        st = load_added(t, cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder"), 1, path,
                        err, err_size);
    }
    goto done;
nomem:
    set_err(err, err_size, "%s: out of memory", f->dir);
    st = QVE_TOK_E_NOMEM;
done:
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return st;
}

/* ==== the tables' cache file ======================================================= */

/* The cache file's first array; the others follow in this order: str_off u32[n_ids] (offset of
 * each id's string, UINT32_MAX for none), the strings (each NUL-terminated, n_str_bytes),
 * is_added u8[n_ids], str_slots[str_mask + 1], merge_keys, merge_rank, merge_id
 * [merge_mask + 1]. */
typedef struct {
    uint32_t n_ids, str_mask, merge_mask, n_str_bytes;
} cache_head;

#define CACHE_LAYOUT 1
#define CACHE_MAX_IDS ((uint32_t)1 << 24)             /* ids are < 2^24 (load_vocab_obj) */
#define CACHE_MAX_MERGE_MASK (((uint32_t)1 << 28) - 1) /* merges.txt is < 64 MB */

/* The cache id of f's tables: the identities of the files build_tables reads and a probe of
 * the code the tables depend on (layout, slot format, hashes, table sizing), so a change of that
 * code makes old files stale by itself. 0, or -1 (no cache). */
static int cache_id(qvm_prep_id *id, const qvm_tok_files *f)
{
    const char *files[4] = {f->vocab_json, f->merges_txt, f->tokenizer_json,
                            f->tokenizer_config_json};
    const uint64_t probe[] = {CACHE_LAYOUT,
                              sizeof(str_entry),
                              STR_INLINE,
                              STR_LONG,
                              hash_bytes("\xC4\xA0probe", 7),
                              hash_concat("ab", 2, "c", 1),
                              hash_u64(0x0123456789ABCDEFull),
                              pow2_at_least(151669 * 2),
                              pow2_at_least(151388 * 2 + 1)};
    return qvm_prep_id_files(id, "tokenizer", files[f->vocab_merges ? 0 : 2], files, 4, probe,
                             sizeof probe);
}

/* A pointer into the cache's read-only mapping for a field that building writes: once open
 * returns nothing writes the tables. */
static void *mapped(const void *p)
{
    return (void *)(uintptr_t)p;
}

/* Adopts cache file p's tables after checking every index a lookup follows: each string inside
 * the string array and NUL-terminated, each slot naming a token and a length that stays inside
 * the strings, each merge naming a token, an empty slot in both tables (a probe stops there).
 * Damage these checks cannot see (a changed byte of a string) gives other ids, never a read out
 * of bounds. 0, or -1 (t is unchanged; p stays the caller's). */
static int adopt_cache(qve_tok *t, qvm_prep *p)
{
    const cache_head *h = qvm_prep_take(p, sizeof *h);
    if (!h || !h->n_ids || h->n_ids > CACHE_MAX_IDS || !h->n_str_bytes ||
        h->str_mask != pow2_at_least((size_t)h->n_ids * 2) - 1 || h->merge_mask < 15 ||
        h->merge_mask > CACHE_MAX_MERGE_MASK || (h->merge_mask & (h->merge_mask + 1)))
        return -1;
    const size_t n = h->n_ids, n_slots = (size_t)h->str_mask + 1;
    const size_t n_merge = (size_t)h->merge_mask + 1;
    const uint32_t *off = qvm_prep_take(p, n * sizeof *off);
    const char *strs = qvm_prep_take(p, h->n_str_bytes);
    const uint8_t *added = qvm_prep_take(p, n);
    const str_entry *slots = qvm_prep_take(p, n_slots * sizeof *slots);
    const uint64_t *keys = qvm_prep_take(p, n_merge * sizeof *keys);
    const int32_t *rank = qvm_prep_take(p, n_merge * sizeof *rank);
    const int32_t *merged = qvm_prep_take(p, n_merge * sizeof *merged);
    if (!off || !strs || !added || !slots || !keys || !rank || !merged ||
        strs[h->n_str_bytes - 1])
        return -1;
    char **str = malloc(n * sizeof *str);
    int ok = str != NULL;
    for (size_t i = 0; i < n && ok; i++) {
        str[i] = off[i] == UINT32_MAX ? NULL : mapped(strs + off[i]);
        ok = (!str[i] || off[i] < h->n_str_bytes) && added[i] <= 1 &&
             (!added[i] || (str[i] && str[i][0]));
    }
    size_t n_empty = 0;
    for (size_t i = 0; i < n_slots && ok; i++) {
        const str_entry *e = &slots[i];
        if (e->id < 0) {
            n_empty++;
            continue;
        }
        /* a lookup reads e->n bytes of the string (STR_LONG: up to its NUL) */
        ok = (size_t)e->id < n && str[e->id] &&
             (e->n == STR_LONG || off[e->id] + (size_t)e->n < h->n_str_bytes);
    }
    ok = ok && n_empty;
    n_empty = 0;
    for (size_t i = 0; i < n_merge && ok; i++) {
        if (keys[i] == UINT64_MAX) n_empty++;
        else ok = merged[i] >= 0 && (size_t)merged[i] < n && str[merged[i]];
    }
    if (!ok || !n_empty) {
        free(str);
        return -1;
    }
    t->n_ids = (int32_t)n;
    t->tok_str = str;
    t->is_added = mapped(added);
    t->str_slots = mapped(slots);
    t->str_mask = h->str_mask;
    t->merge_keys = mapped(keys);
    t->merge_rank = mapped(rank);
    t->merge_id = mapped(merged);
    t->merge_mask = h->merge_mask;
    t->tables = p;
    return 0;
}

/* Saves the built tables as id's cache file; a failure only costs the next open a build. */
static void save_cache(const qve_tok *t, const qvm_prep_id *id)
{
    size_t n_str_bytes = 0;
    for (int32_t i = 0; i < t->n_ids; i++)
        n_str_bytes += t->tok_str[i] ? strlen(t->tok_str[i]) + 1 : 0;
    if (!n_str_bytes || n_str_bytes >= UINT32_MAX) return;
    uint32_t *off = malloc((size_t)t->n_ids * sizeof *off);
    char *strs = malloc(n_str_bytes);
    if (off && strs) {
        size_t at = 0;
        for (int32_t i = 0; i < t->n_ids; i++) {
            off[i] = t->tok_str[i] ? (uint32_t)at : UINT32_MAX;
            if (!t->tok_str[i]) continue;
            const size_t len = strlen(t->tok_str[i]) + 1;
            memcpy(strs + at, t->tok_str[i], len);
            at += len;
        }
        const cache_head h = {(uint32_t)t->n_ids, t->str_mask, t->merge_mask,
                              (uint32_t)n_str_bytes};
        const size_t n = (size_t)t->n_ids, n_merge = (size_t)t->merge_mask + 1;
        const qvm_prep_array a[] = {
            {&h, sizeof h},
            {off, n * sizeof *off},
            {strs, n_str_bytes},
            {t->is_added, n},
            {t->str_slots, ((size_t)t->str_mask + 1) * sizeof *t->str_slots},
            {t->merge_keys, n_merge * sizeof *t->merge_keys},
            {t->merge_rank, n_merge * sizeof *t->merge_rank},
            {t->merge_id, n_merge * sizeof *t->merge_id},
        };
        qvm_prep_save(id, a, (int)(sizeof a / sizeof *a));
    }
    free(off);
    free(strs);
}

/* ==== open ========================================================================= */

/* The tables' derived parts: byte ids, the added-token list, the regex. */
static int setup(qve_tok *t, char *err, size_t err_size)
{
    int st = setup_bytes(t, err, err_size);
    if (!st) st = setup_added(t, err, err_size);
    return st ? st : setup_regex(t, err, err_size);
}

qve_tok *qve_tok_open(const char *dir, char *err, size_t err_size)
{
    qvm_tok_files f;
    qvm_tok_files_find(&f, dir);
    return qve_tok_open_files(&f, err, err_size);
}

qve_tok *qve_tok_open_files(const qvm_tok_files *f, char *err, size_t err_size)
{
    qve_tok *t = calloc(1, sizeof *t);
    qvm_prep_id id;
    const int cacheable = !cache_id(&id, f);
    qvm_prep *p = t && cacheable ? qvm_prep_open(&id) : NULL;
    if (p && adopt_cache(t, p)) {
        qvm_prep_close(p); /* stale or damaged: built again below and replaced */
        p = NULL;
    }
    if (p && setup(t, err, err_size)) { /* damage the index checks let through */
        qve_tok_free(t);
        t = calloc(1, sizeof *t);
        p = NULL;
    }
    int st = !t ? QVE_TOK_E_NOMEM : p ? QVE_TOK_OK : build_tables(t, f, err, err_size);
    if (!st && !p) st = setup(t, err, err_size);
    if (st) {
        if (st == QVE_TOK_E_NOMEM) set_err(err, err_size, "%s: out of memory", f->dir);
        qve_tok_free(t);
        return NULL;
    }
    if (!p && cacheable) save_cache(t, &id);
    return t;
}

void qve_tok_free(qve_tok *t)
{
    if (!t) return;
    if (!t->tables) {
        for (int32_t i = 0; i < t->n_ids; i++) free(t->tok_str[i]);
        free(t->is_added);
        free(t->str_slots);
        free(t->merge_keys);
        free(t->merge_rank);
        free(t->merge_id);
    }
    free(t->tok_str);
    qvm_prep_close(t->tables);
    free(t->added);
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jit_stack);
    pcre2_code_free(t->re);
    free(t->cache_slots);
    free(t->cache);
    free(t->cache_keys);
    free(t->cache_ids);
    free(t->sym);
    free(t->prev);
    free(t->next);
    free(t->heap);
    free(t->nfc);
    free(t);
}

/* ==== BPE ========================================================================== */

static int heap_less(const heap_item *a, const heap_item *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(heap_item *h, size_t *n, heap_item it)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&it, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
}

static heap_item heap_pop(heap_item *h, size_t *n)
{
    heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Pushes the pair starting at symbol position i (if it has a right neighbour and a merge). */
static void push_pair(qve_tok *t, size_t *n_heap, int32_t i)
{
    int32_t j = t->next[i];
    if (j < 0) return;
    uint64_t key = (uint64_t)(uint32_t)t->sym[i] << 32 | (uint32_t)t->sym[j];
    uint32_t s = merge_slot(t, key);
    if (t->merge_keys[s] == UINT64_MAX) return;
    heap_push(t->heap, n_heap,
              (heap_item){t->merge_rank[s], i, t->sym[i], t->sym[j], t->merge_id[s]});
}

/* Merges the bytes of one pre-token; appends the ids to out. */
static int bpe_piece(qve_tok *t, const uint8_t *s, size_t n, qve_tok_ids *out)
{
    if (n > t->cap_sym) {
        size_t cap = t->cap_sym;
        if (grow((void **)&t->sym, &cap, n, sizeof *t->sym)) return QVE_TOK_E_NOMEM;
        int32_t *p = realloc(t->prev, cap * sizeof *p);
        if (!p) return QVE_TOK_E_NOMEM;
        t->prev = p;
        p = realloc(t->next, cap * sizeof *p);
        if (!p) return QVE_TOK_E_NOMEM;
        t->next = p;
        t->cap_sym = cap; /* only once all three hold cap entries */
    }
    /* each merge pushes at most 2 pairs; n - 1 initial pairs */
    if (grow((void **)&t->heap, &t->cap_heap, 3 * n + 1, sizeof *t->heap)) return QVE_TOK_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        t->sym[i] = t->byte_id[s[i]];
        t->prev[i] = (int32_t)i - 1;
        t->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, &n_heap, (int32_t)i);
    while (n_heap) {
        heap_item it = heap_pop(t->heap, &n_heap);
        int32_t i = it.pos, j = t->next[i];
        /* stale entry: a merged symbol always has a different (longer) token than before */
        if (t->sym[i] != it.left || j < 0 || t->sym[j] != it.right) continue;
        t->sym[i] = it.merged;
        t->sym[j] = -1;
        t->next[i] = t->next[j];
        if (t->next[j] >= 0) t->prev[t->next[j]] = i;
        if (t->prev[i] >= 0) push_pair(t, &n_heap, t->prev[i]);
        push_pair(t, &n_heap, i);
    }
    size_t n_out = 0;
    for (int32_t i = 0; i >= 0; i = t->next[i]) n_out++;
    if (grow((void **)&out->ids, &out->cap_ids, out->n_ids + n_out, sizeof *out->ids))
        return QVE_TOK_E_NOMEM;
    for (int32_t i = 0; i >= 0; i = t->next[i]) out->ids[out->n_ids++] = t->sym[i];
    return QVE_TOK_OK;
}

static void cache_clear(qve_tok *t)
{
    if (t->cache_slots) memset(t->cache_slots, 0, ((size_t)t->cache_mask + 1) * sizeof(uint32_t));
    t->n_cache = 0;
    t->n_cache_keys = 0;
    t->n_cache_ids = 0;
}

static int encode_piece(qve_tok *t, const uint8_t *s, size_t n, qve_tok_ids *out)
{
    if (n == 1) {
        if (grow((void **)&out->ids, &out->cap_ids, out->n_ids + 1, sizeof *out->ids))
            return QVE_TOK_E_NOMEM;
        out->ids[out->n_ids++] = t->byte_id[s[0]];
        return QVE_TOK_OK;
    }
    if (n > CACHE_MAX_PIECE_BYTES) return bpe_piece(t, s, n, out);
    if (!t->cache_slots) {
        t->cache_mask = CACHE_MAX_ENTRIES * 2 - 1;
        t->cache_slots = calloc((size_t)t->cache_mask + 1, sizeof *t->cache_slots);
        t->cache = malloc(CACHE_MAX_ENTRIES * sizeof *t->cache);
        if (!t->cache_slots || !t->cache) return QVE_TOK_E_NOMEM;
    }
    uint64_t h = hash_bytes(s, n);
    uint32_t i = (uint32_t)h & t->cache_mask;
    for (; t->cache_slots[i]; i = (i + 1) & t->cache_mask) {
        const cache_entry *e = &t->cache[t->cache_slots[i] - 1];
        if (e->hash == h && e->key_len == n && memcmp(t->cache_keys + e->key_off, s, n) == 0) {
            if (grow((void **)&out->ids, &out->cap_ids, out->n_ids + e->n_ids, sizeof *out->ids))
                return QVE_TOK_E_NOMEM;
            memcpy(out->ids + out->n_ids, t->cache_ids + e->ids_off, e->n_ids * sizeof *out->ids);
            out->n_ids += e->n_ids;
            return QVE_TOK_OK;
        }
    }
    size_t first = out->n_ids;
    int st = bpe_piece(t, s, n, out);
    if (st) return st;
    size_t n_ids = out->n_ids - first;
    if (t->n_cache >= CACHE_MAX_ENTRIES || t->n_cache_keys + n > CACHE_MAX_KEY_BYTES) {
        cache_clear(t);
        i = (uint32_t)h & t->cache_mask;
    }
    if (grow((void **)&t->cache_keys, &t->cap_cache_keys, t->n_cache_keys + n, 1) ||
        grow((void **)&t->cache_ids, &t->cap_cache_ids, t->n_cache_ids + n_ids,
             sizeof *t->cache_ids))
        return QVE_TOK_OK; /* caching is optional: the ids are already out */
    cache_entry *e = &t->cache[t->n_cache];
    *e = (cache_entry){h, (uint32_t)t->n_cache_keys, (uint32_t)n, (uint32_t)t->n_cache_ids,
                       (uint32_t)n_ids};
    memcpy(t->cache_keys + t->n_cache_keys, s, n);
    memcpy(t->cache_ids + t->n_cache_ids, out->ids + first, n_ids * sizeof *out->ids);
    t->n_cache_keys += n;
    t->n_cache_ids += n_ids;
    t->cache_slots[i] = ++t->n_cache;
    return QVE_TOK_OK;
}

/* ==== encode ======================================================================= */

/* Splits one NFC segment with the Qwen2 regex ("Isolated": gaps are pieces too). */
static int encode_normalised(qve_tok *t, const uint8_t *s, size_t n, qve_tok_ids *out, char *err,
                             size_t err_size)
{
    size_t pos = 0;
    while (pos < n) {
        int rc = t->use_jit ? pcre2_jit_match(t->re, s, n, pos, PCRE2_NO_UTF_CHECK, t->md, t->mctx)
                            : PCRE2_ERROR_JIT_BADOPTION;
        if (rc == PCRE2_ERROR_JIT_BADOPTION || rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(t->re, s, n, pos, PCRE2_NO_UTF_CHECK, t->md, t->mctx);
        size_t ms = n, me = n;
        if (rc >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
            ms = ov[0];
            me = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            set_err(err, err_size, "pre-tokenizer: %s at byte %zu", (char *)msg, pos);
            return QVE_TOK_E_REGEX;
        }
        if (me == ms && ms < n) { /* the pattern never matches empty; be safe anyway */
            me = ms + (size_t)utf8_seq(s + ms, n - ms);
        }
        int st;
        if (ms > pos && (st = encode_piece(t, s + pos, ms - pos, out))) return st;
        if (me > ms && (st = encode_piece(t, s + ms, me - ms, out))) return st;
        pos = me;
    }
    return QVE_TOK_OK;
}

static int encode_segment(qve_tok *t, const uint8_t *s, size_t n, qve_tok_ids *out, char *err,
                          size_t err_size)
{
    /* Code points below U+0300 (lead bytes below 0xCC) are NFC-stable and never compose with a
     * neighbour, so such segments skip utf8proc. */
    int need_nfc = 0;
    for (size_t i = 0; i < n && !need_nfc; i++) need_nfc = s[i] >= 0xCC;
    if (!need_nfc) return encode_normalised(t, s, n, out, err, err_size);
    /* utf8proc_map would malloc (and the kernel zero) a fresh buffer per call: decompose into a
     * kept buffer instead, growing it when utf8proc reports the size it needs */
    utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    utf8proc_ssize_t m;
    for (;;) {
        m = utf8proc_decompose(s, (utf8proc_ssize_t)n, t->nfc, (utf8proc_ssize_t)t->cap_nfc, opt);
        if (m < 0 || (size_t)m <= t->cap_nfc) break;
        if (grow((void **)&t->nfc, &t->cap_nfc, (size_t)m + 1, sizeof *t->nfc))
            m = UTF8PROC_ERROR_NOMEM;
        if (m < 0) break;
    }
    if (m >= 0) m = utf8proc_normalize_utf32(t->nfc, m, opt);
    if (m >= 0) m = utf8proc_reencode(t->nfc, m, opt);
    if (m < 0) {
        set_err(err, err_size, "NFC: %s", utf8proc_errmsg(m));
        return m == UTF8PROC_ERROR_NOMEM ? QVE_TOK_E_NOMEM : QVE_TOK_E_BAD_UTF8;
    }
    return encode_normalised(t, (const uint8_t *)t->nfc, (size_t)m, out, err, err_size);
}

int qve_tok_encode(qve_tok *t, const char *text, size_t n, qve_tok_ids *out, char *err,
                   size_t err_size)
{
    if (!t || !out || (!text && n)) {
        set_err(err, err_size, "qve_tok_encode: NULL argument");
        return QVE_TOK_E_FORMAT;
    }
    if (n > QVE_TOK_MAX_INPUT_BYTES) {
        set_err(err, err_size, "text: %zu bytes (expected at most %zu)", n,
                QVE_TOK_MAX_INPUT_BYTES);
        return QVE_TOK_E_TOO_LONG;
    }
    const uint8_t *s = (const uint8_t *)text;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) { i++; continue; }
        int k = utf8_seq(s + i, n - i);
        if (k < 0) {
            set_err(err, err_size, "text: invalid UTF-8 at byte %zu (0x%02X)", i, s[i]);
            return QVE_TOK_E_BAD_UTF8;
        }
        i += (size_t)k;
    }
    size_t n_before = out->n_ids, seg = 0;
    int st = QVE_TOK_OK;
    for (size_t i = 0; i < n && st == QVE_TOK_OK; i++) {
        if (!t->added_first[s[i]]) continue;
        const added_token *hit = NULL;
        for (int k = 0; k < t->n_added && !hit; k++) {
            const added_token *a = &t->added[k];
            if (a->len <= n - i && memcmp(s + i, a->content, a->len) == 0) hit = a;
        }
        if (!hit) continue;
        if (i > seg) st = encode_segment(t, s + seg, i - seg, out, err, err_size);
        if (st) break;
        if (grow((void **)&out->ids, &out->cap_ids, out->n_ids + 1, sizeof *out->ids)) {
            st = QVE_TOK_E_NOMEM;
            break;
        }
        out->ids[out->n_ids++] = hit->id;
        seg = i + hit->len;
        i = seg - 1;
    }
    if (st == QVE_TOK_OK && n > seg) st = encode_segment(t, s + seg, n - seg, out, err, err_size);
    if (st != QVE_TOK_OK) {
        if (st == QVE_TOK_E_NOMEM) set_err(err, err_size, "text: out of memory");
        out->n_ids = n_before;
    }
    return st;
}

int qve_tok_encode_into(qve_tok *t, const char *text, size_t n_bytes, int32_t *ids,
                        size_t cap_ids, size_t *n_ids, char *err, size_t err_size)
{
    qve_tok_ids v = {0};
    int st = qve_tok_encode(t, text, n_bytes, &v, err, err_size);
    if (n_ids) *n_ids = st == QVE_TOK_OK ? v.n_ids : 0;
    if (st == QVE_TOK_OK) {
        size_t k = v.n_ids < cap_ids ? v.n_ids : cap_ids;
        if (k) memcpy(ids, v.ids, k * sizeof *ids);
        if (v.n_ids > cap_ids) {
            set_err(err, err_size, "text: needs %zu ids (capacity %zu)", v.n_ids, cap_ids);
            st = QVE_TOK_E_CAPACITY;
        }
    }
    qve_tok_ids_free(&v);
    return st;
}

void qve_tok_ids_free(qve_tok_ids *v)
{
    if (!v) return;
    free(v->ids);
    *v = (qve_tok_ids){0};
}

/* ==== decode and lookups =========================================================== */

/* The byte the vocab-form string s[0..n) holds at *k (one byte-level code point), moving *k past
 * it; -1 when s[*k] starts no byte-level code point (then *k moves on by at least one byte). */
static int vocab_byte(const qve_tok *t, const char *s, size_t n, size_t *k)
{
    const uint8_t *u = (const uint8_t *)s + *k;
    const int q = utf8_seq(u, n - *k);
    *k += q > 0 ? (size_t)q : 1;
    const uint32_t cp = q == 1   ? u[0]
                        : q == 2 ? (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F)
                                 : 0x144; /* 3-/4-byte or invalid: no byte */
    return cp < 0x144 ? t->cp_byte[cp] : -1;
}

int qve_tok_decode(const qve_tok *t, const int32_t *ids, size_t n_ids, char **text,
                   size_t *n_bytes, char *err, size_t err_size)
{
    *text = NULL;
    size_t cap = 1;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->tok_str[ids[i]]) {
            set_err(err, err_size, "ids[%zu]: %d names no token (vocab size %d)", i, ids[i],
                    t->n_ids);
            return QVE_TOK_E_BAD_ID;
        }
        cap += strlen(t->tok_str[ids[i]]);
    }
    uint8_t *raw = malloc(cap);
    if (!raw) {
        set_err(err, err_size, "decode: out of memory");
        return QVE_TOK_E_NOMEM;
    }
    size_t n = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const char *s = t->tok_str[ids[i]];
        size_t len = strlen(s);
        if (t->is_added[ids[i]]) {
            memcpy(raw + n, s, len);
            n += len;
            continue;
        }
        for (size_t k = 0; k < len;) {
            const int b = vocab_byte(t, s, len, &k);
            raw[n++] = b >= 0 ? (uint8_t)b : '?';
        }
    }
    /* lossy UTF-8: each maximal invalid subpart becomes U+FFFD (3 bytes, at most 3x growth) */
    char *o = malloc(3 * n + 1);
    if (!o) {
        free(raw);
        set_err(err, err_size, "decode: out of memory");
        return QVE_TOK_E_NOMEM;
    }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        int q = utf8_seq(raw + i, n - i);
        if (q > 0) {
            memcpy(o + m, raw + i, (size_t)q);
            m += (size_t)q;
            i += (size_t)q;
        } else {
            memcpy(o + m, "\xEF\xBF\xBD", 3);
            m += 3;
            i += (size_t)-q;
        }
    }
    o[m] = 0;
    free(raw);
    *text = o;
    if (n_bytes) *n_bytes = m;
    return QVE_TOK_OK;
}

int32_t qve_tok_token_to_id(const qve_tok *t, const char *token)
{
    return token ? str_lookup(t, token, strlen(token)) : -1;
}

const char *qve_tok_id_to_token(const qve_tok *t, int32_t id)
{
    return id >= 0 && id < t->n_ids ? t->tok_str[id] : NULL;
}

int32_t qve_tok_vocab_size(const qve_tok *t)
{
    return t->n_ids;
}

/* ==== spelling with merge parts ===================================================== */

int qve_tok_merge_parts(const qve_tok *t, int32_t id, int32_t parts[2])
{
    if (id < 0 || id >= t->n_ids || !t->tok_str[id] || t->is_added[id]) return 0;
    /* the parts concatenate to id's vocab-form string: try each split between code points (each
     * try hashes the string: a long one, which no merge forms, is not tried) */
    const char *s = t->tok_str[id];
    const size_t n = strnlen(s, MERGE_MAX);
    if (n >= MERGE_MAX) return 0;
    int32_t best = -1;
    for (size_t k = 0; k < n;) {
        const int q = utf8_seq((const uint8_t *)s + k, n - k);
        k += q > 0 ? (size_t)q : 1;
        if (k >= n) break;
        const int32_t a = str_lookup(t, s, k), b = str_lookup(t, s + k, n - k);
        /* a damaged cache's short slots are matched by their inline bytes: the parts must really
         * be shorter, or spelling would not end */
        if (a < 0 || b < 0 || strnlen(t->tok_str[a], k + 1) != k ||
            strnlen(t->tok_str[b], n - k + 1) != n - k)
            continue;
        const uint32_t slot = merge_slot(t, (uint64_t)(uint32_t)a << 32 | (uint32_t)b);
        if (t->merge_keys[slot] == UINT64_MAX || t->merge_id[slot] != id ||
            (best >= 0 && t->merge_rank[slot] >= best))
            continue;
        best = t->merge_rank[slot];
        parts[0] = a, parts[1] = b;
    }
    return best >= 0;
}

/* Appends the single-byte tokens of id's bytes. */
static int spell_bytes(const qve_tok *t, int32_t id, qve_tok_ids *out)
{
    const char *s = t->tok_str[id];
    const size_t n = strlen(s);
    if (grow((void **)&out->ids, &out->cap_ids, out->n_ids + n, sizeof *out->ids))
        return QVE_TOK_E_NOMEM;
    for (size_t k = 0; k < n;) {
        const int b = vocab_byte(t, s, n, &k);
        if (b < 0) return QVE_TOK_E_BAD_ID; /* not a byte-level string */
        out->ids[out->n_ids++] = t->byte_id[b];
    }
    return QVE_TOK_OK;
}

/* have[x] for id x >= 0; ids past have's end have no entry */
static int usable(const int32_t *have, int32_t n_have, int32_t x)
{
    return x < n_have && have[x];
}

int qve_tok_spell(const qve_tok *t, int32_t id, const int32_t *have, int32_t n_have,
                  qve_tok_ids *out)
{
    if (id < 0 || (!usable(have, n_have, id) && (id >= t->n_ids || !t->tok_str[id])))
        return QVE_TOK_E_BAD_ID;
    /* depth first, left part first. Parts are strictly shorter strings, so this ends; a spelling
     * deeper than the stack (none in Qwen2's vocabulary) continues by bytes. A single-byte token
     * has no merge parts and is its own byte. */
    int32_t stack[64];
    int n = 0, st = QVE_TOK_OK;
    const size_t n_before = out->n_ids;
    stack[n++] = id;
    while (n && st == QVE_TOK_OK) {
        const int32_t x = stack[--n];
        int32_t p[2];
        if (n + 2 <= (int)(sizeof stack / sizeof *stack) && !usable(have, n_have, x) &&
            qve_tok_merge_parts(t, x, p)) {
            stack[n++] = p[1], stack[n++] = p[0];
        } else if (usable(have, n_have, x) || t->is_added[x]) { /* added: no smaller pieces */
            if (grow((void **)&out->ids, &out->cap_ids, out->n_ids + 1, sizeof *out->ids))
                st = QVE_TOK_E_NOMEM;
            else
                out->ids[out->n_ids++] = x;
        } else {
            st = spell_bytes(t, x, out);
        }
    }
    if (st != QVE_TOK_OK) out->n_ids = n_before;
    return st;
}

const char *qve_tok_strerror(int status)
{
#define QVE_TOK_TEXT_(name, text) text,
    static const char *const texts[] = {QVE_TOK_ERRORS(QVE_TOK_TEXT_)};
#undef QVE_TOK_TEXT_
    return status >= 0 && status < QVE_TOK_N_STATUS ? texts[status] : "unknown status";
}
