/* fuzz_markup.c — libFuzzer target: the markup parser (engine/markup.c through qve_text_chunk,
 * the one entry point synthesis uses). The first byte picks the chunk size (0 = no chunking) and
 * whether a user style table is in force; the rest is the text. Every result must hold: TEXT
 * chunks non-empty valid UTF-8 within the limit, pauses in (0, QVE_PAUSE_MAX_MS], tag values
 * non-empty and shorter than a tag; a failure must leave an empty list and a message. The same
 * text as if it arrived in pieces (qv_text_sentences): a cut within the text at a code point
 * boundary, a carry shorter than its bound, and no failure where the chunker succeeds; cut at
 * clauses too (qv_text_clauses), the same verdict, a cut no earlier, and at the same cut the same
 * carry. Anything else aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "engine/textchunk.h"
#include "include/qvoice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20)) return 0;
    const int max = (data[0] & 0x7F) % 64 ? (data[0] & 0x7F) % 64 + 4 : 0;
    qve_styles st = {0}, *sp = NULL;
    char err[256];
    if (data[0] & 0x80) {
        if (qve_styles_parse(&st, "grumpy = Speak grumpily.\nsad = Sob.\n", err, sizeof err) ||
            qve_styles_add_name(&st, "pal-entry"))
            abort();
        sp = &st;
    }
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    qve_chunk_list l;
    err[0] = 0;
    size_t cut, cut_c;
    char carry[QV_TEXT_CARRY_BYTES], carry_c[QV_TEXT_CARRY_BYTES];
    int pieces = qv_text_sentences(text, &cut, carry, sizeof carry);
    int clauses = qv_text_clauses(text, &cut_c, carry_c, sizeof carry_c);
    if (!pieces && (cut > strlen(text) || (text[cut] & 0xC0) == 0x80 ||
                    strlen(carry) >= QV_TEXT_CARRY_BYTES || (carry[0] && carry[0] != '[')))
        abort();
    if (clauses != pieces ||
        (!clauses &&
         (cut_c < cut || cut_c > strlen(text) || (text[cut_c] & 0xC0) == 0x80 ||
          strlen(carry_c) >= QV_TEXT_CARRY_BYTES || (cut_c == cut && strcmp(carry, carry_c)))))
        abort();
    if (qve_text_chunk(&l, text, max, sp, err, sizeof err)) {
        if (l.n_chunks || !err[0]) abort();
    } else {
        if (pieces == QV_E_INVALID && !sp) abort(); /* whole, the text parses */
        for (int i = 0; i < l.n_chunks; i++) {
            const qve_chunk *c = &l.chunks[i];
            switch (c->kind) {
            case QVE_CHUNK_TEXT: {
                const size_t n = strlen(c->text);
                if (!n || c->n_chars <= 0 || (max > 0 && c->n_chars > max)) abort();
                utf8proc_int32_t cp;
                for (size_t p = 0; p < n;) {
                    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)c->text + p,
                                                          (utf8proc_ssize_t)(n - p), &cp);
                    if (k <= 0) abort();
                    p += (size_t)k;
                }
                break;
            }
            case QVE_CHUNK_PAUSE:
                if (c->text || c->pause_ms <= 0 || c->pause_ms > QVE_PAUSE_MAX_MS) abort();
                break;
            case QVE_CHUNK_TAG:
                if (!c->text[0] || strlen(c->text) >= QVE_TAG_MAX_BYTES || c->n_chars < 0 ||
                    c->tag == QVE_TAG_PAUSE)
                    abort();
                break;
            }
        }
        qve_chunk_list_free(&l);
    }
    qve_styles_free(&st);
    free(text);
    return 0;
}
