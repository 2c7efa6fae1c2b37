/* fuzz_tokenizer.c — libFuzzer target: encode arbitrary bytes (invalid UTF-8 must be refused
 * cleanly), then check the round trip decode(encode(x)) == NFC(x) when no added token can occur,
 * that every id is in range, and that the prompt builders accept the same text. The tokenizer is
 * loaded once from $QVOICE_TOK_DIR, else $QVOICE_CACHE/tiny-cv, else $QVOICE_CACHE/tokref/vm.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "engine/prompt.h"
#include "engine/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static qve_tok *load(void)
{
    char dir[1024], err[256] = "";
    const char *env = getenv("QVOICE_TOK_DIR"), *cache = getenv("QVOICE_CACHE");
    if (!cache) cache = "cache";
    if (env) return qve_tok_open(env, err, sizeof err);
    snprintf(dir, sizeof dir, "%s/tiny-cv", cache);
    qve_tok *t = qve_tok_open(dir, err, sizeof err);
    if (t) return t;
    snprintf(dir, sizeof dir, "%s/tokref/vm", cache);
    t = qve_tok_open(dir, err, sizeof err);
    if (!t) fprintf(stderr, "fuzz_tokenizer: no tokenizer (%s); set QVOICE_TOK_DIR\n", err);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static qve_tok *tok;
    static qve_tok_ids ids;
    if (!tok && !(tok = load())) abort();
    char err[256];
    ids.n_ids = 0;
    int st = qve_tok_encode(tok, (const char *)data, size, &ids, err, sizeof err);
    if (st == QVE_TOK_E_BAD_UTF8) return 0;
    if (st != QVE_TOK_OK) abort();
    for (size_t i = 0; i < ids.n_ids; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= qve_tok_vocab_size(tok)) abort();
    char *text = NULL;
    size_t n = 0;
    if (qve_tok_decode(tok, ids.ids, ids.n_ids, &text, &n, err, sizeof err)) abort();
    if (!memchr(data, '<', size)) { /* one segment: the round trip is exact */
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t m = utf8proc_map(data, (utf8proc_ssize_t)size, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0 || (size_t)m != n || memcmp(nfc, text, n)) abort();
        free(nfc);
    }
    free(text);
    int32_t role[3];
    if (qve_prompt_target_ids(tok, (const char *)data, size, &ids, role, err, sizeof err)) abort();
    if (qve_prompt_instruct_ids(tok, (const char *)data, size, &ids, err, sizeof err)) abort();
    return 0;
}
