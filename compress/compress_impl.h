/* compress_impl.h — what the files of compress/ share. */
#ifndef QV_COMPRESS_IMPL_H
#define QV_COMPRESS_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* Marks keep[id] = 1 (keep has n_vocab entries, text_vocab_size) for every token id the corpus of
 * vocab ("english" or a file, qvz.h) can produce, plus the ids always kept (docs/compression.md):
 * integers 0–9999, printable ASCII, the 256 byte tokens, the chat-template pieces and
 * [151600, n_vocab). Tokenizer from model_dir. Returns the number kept, or -1 with err. */
int qvz_vocab_keep(const char *model_dir, const char *vocab, uint8_t *keep, int n_vocab, char *err,
                   size_t err_size);

#endif
