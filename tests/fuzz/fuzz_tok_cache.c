/* fuzz_tok_cache.c — libFuzzer target: the tokenizer's tables read from a damaged cache file
 * (engine/tokenizer.c adopt_cache, checkpoint/prepared.c). A small synthetic tokenizer is written
 * to a temporary directory once and opened, which saves its cache file; each input is a list of
 * 5-byte edits (u32 little-endian offset past the file's header, u8 xor) applied to a good copy
 * of that file. The open must succeed (the file adopted or rebuilt) and encoding must give ids
 * in range; anything else aborts. Every id is then spelled (qve_tok_spell) with a short have[].
 * QVOICE_CACHE names the private cache only around each open
 * (test_qvf_replay runs the other targets in the same process), and the files go at exit.
 */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TC_HEADER_BYTES 4152 /* prepared.c's header: magic, counts, key, size, source path */

static char tc_dir[64] = "/tmp/fuzz_tok_cache_XXXXXX", tc_file[1024];
static uint8_t *tc_good, *tc_bad;
static size_t tc_n;

static char tc_cache[128];

/* Opens the tokenizer with QVOICE_CACHE set to the private cache, then puts it back. */
static qve_tok *tc_open(char *err, size_t n) {
    const char *old = getenv("QVOICE_CACHE");
    char *keep = old ? strdup(old) : NULL;
    setenv("QVOICE_CACHE", tc_cache, 1);
    qve_tok *t = qve_tok_open(tc_dir, err, n);
    if (keep) setenv("QVOICE_CACHE", keep, 1);
    else unsetenv("QVOICE_CACHE");
    free(keep);
    return t;
}

static void tc_cleanup(void) {
    static const char *const names[] = {"vocab.json", "merges.txt", "tokenizer_config.json"};
    char path[256];
    remove(tc_file);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s", tc_dir, names[i]);
        remove(path);
    }
    snprintf(path, sizeof path, "%s/prepared", tc_cache);
    remove(path);
    remove(tc_cache);
    remove(tc_dir);
}

static void tc_put(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tc_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, strlen(text), f) != strlen(text) || fclose(f)) abort();
}

/* The synthetic tokenizer: the 256 byte tokens, a few merges, one added token. */
static void tc_setup(void) {
    if (!mkdtemp(tc_dir)) abort();
    char vocab[8192] = "{", *p = vocab + 1;
    unsigned next = 256; /* GPT-2's byte -> code point table */
    for (int b = 0; b < 256; b++) {
        const int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        const unsigned cp = keep ? (unsigned)b : next++;
        char s[4] = {0};
        if (cp < 0x80) s[0] = (char)cp;
        else s[0] = (char)(0xC0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3F));
        p += sprintf(p, "%s\"%s%s\":%d", b ? "," : "", cp == '"' || cp == '\\' ? "\\" : "", s, b);
    }
    sprintf(p, ",\"th\":256,\"the\":257,\"\\u0120t\":258,\"\\u0120th\":259,"
               "\"\\u0120the\":260,\"er\":261}");
    tc_put("vocab.json", vocab);
    tc_put("merges.txt", "#version: 0.2\nt h\nth e\n\xC4\xA0 t\n\xC4\xA0t h\n\xC4\xA0th e\ne r\n");
    tc_put("tokenizer_config.json",
        "{\"added_tokens_decoder\": {\"262\": {\"content\": \"<|x|>\"}}}");
    snprintf(tc_cache, sizeof tc_cache, "%s/cache", tc_dir);
    atexit(tc_cleanup);
    char err[256];
    qve_tok *t = tc_open(err, sizeof err);
    if (!t) {
        fprintf(stderr, "fuzz_tok_cache: %s\n", err);
        abort();
    }
    qve_tok_free(t);
    char pdir[256];
    snprintf(pdir, sizeof pdir, "%s/prepared", tc_cache);
    DIR *d = opendir(pdir);
    for (const struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "tokenizer-", 10))
            snprintf(tc_file, sizeof tc_file, "%s/%s", pdir, e->d_name);
    if (d) closedir(d);
    FILE *f = fopen(tc_file, "rb");
    if (!f || fseek(f, 0, SEEK_END) || (tc_n = (size_t)ftell(f)) <= TC_HEADER_BYTES) abort();
    rewind(f);
    tc_good = malloc(tc_n);
    tc_bad = malloc(tc_n);
    if (!tc_good || !tc_bad || fread(tc_good, 1, tc_n, f) != tc_n) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tc_good) tc_setup();
    memcpy(tc_bad, tc_good, tc_n);
    for (size_t i = 0; i + 5 <= size && i < 5 * 64; i += 5) {
        const uint32_t off = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 |
                             (uint32_t)data[i + 2] << 16 | (uint32_t)data[i + 3] << 24;
        tc_bad[TC_HEADER_BYTES + off % (tc_n - TC_HEADER_BYTES)] ^= data[i + 4] ? data[i + 4] : 0xFF;
    }
    FILE *f = fopen(tc_file, "wb");
    if (!f || fwrite(tc_bad, 1, tc_n, f) != tc_n || fclose(f)) abort();
    char err[256];
    qve_tok *t = tc_open(err, sizeof err);
    if (!t) abort();
    static const char *const texts[] = {"the other", " the theater <|x|>the", "h\xC3\xA9llo\n\tthe"};
    qve_tok_ids ids = {0};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        ids.n_ids = 0;
        if (qve_tok_encode(t, texts[k], strlen(texts[k]), &ids, err, sizeof err)) abort();
        for (size_t i = 0; i < ids.n_ids; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= qve_tok_vocab_size(t)) abort();
        char *s = NULL;
        qve_tok_decode(t, ids.ids, ids.n_ids, &s, NULL, err, sizeof err);
        free(s);
    }
    /* spelling: vocab strings and merges from the damaged file, a have[] shorter than the vocab */
    int32_t have[200];
    for (int i = 0; i < 200; i++) have[i] = i % 3 == 0;
    for (int32_t id = 0; id < qve_tok_vocab_size(t) && id < 4096; id++) {
        int32_t p[2];
        qve_tok_merge_parts(t, id, p);
        ids.n_ids = 0;
        qve_tok_spell(t, id, have, 200, &ids);
    }
    qve_tok_ids_free(&ids);
    qve_tok_free(t);
    return 0;
}
