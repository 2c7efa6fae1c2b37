/* tokenizer.h — Qwen2 byte-level BPE text tokenizer (internal, prefix qve_tok_), §7 of
 * docs/architecture.md. Matches the HF fast tokenizer / transformers.js ids exactly.
 * Thread safety: open/free/encode need exclusive use of a qve_tok (encode updates a word cache
 * and scratch buffers); decode, token_to_id, id_to_token, vocab_size, merge_parts and spell only
 * read it.
 */
#ifndef QVE_TOKENIZER_H
#define QVE_TOKENIZER_H

/* Usage:
 *   char err[256];
 *   qve_tok *tok = qve_tok_open("/models/Qwen3-TTS-12Hz-0.6B-Base", err, sizeof err);
 *   qve_tok_ids ids = {0};
 *   if (tok && qve_tok_encode(tok, "Hello world", 11, &ids, err, sizeof err) == QVE_TOK_OK) ...
 *   qve_tok_ids_free(&ids); qve_tok_free(tok);
 */

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/ckpt.h"

#define QVE_TOK_ERRORS(X)                                                                          \
    X(QVE_TOK_OK, "ok")                                                                            \
    X(QVE_TOK_E_NOMEM, "out of memory")                                                            \
    X(QVE_TOK_E_IO, "cannot read tokenizer file")                                                  \
    X(QVE_TOK_E_FORMAT, "malformed tokenizer file")                                                \
    X(QVE_TOK_E_UNSUPPORTED, "unsupported tokenizer feature")                                      \
    X(QVE_TOK_E_REGEX, "pre-tokenizer regex failed")                                               \
    X(QVE_TOK_E_BAD_UTF8, "input text is not valid UTF-8")                                         \
    X(QVE_TOK_E_CAPACITY, "output id buffer too small")                                            \
    X(QVE_TOK_E_BAD_ID, "token id out of range")                                                   \
    X(QVE_TOK_E_TOO_LONG, "input text too long")                                                   \
    X(QVE_TOK_E_TEMPLATE, "prompt template tokenised to an unexpected shape")

#define QVE_TOK_ENUM_(name, text) name,
enum qve_tok_status { QVE_TOK_ERRORS(QVE_TOK_ENUM_) QVE_TOK_N_STATUS };
#undef QVE_TOK_ENUM_

/* Input texts longer than this are refused (ids are int32 and pieces are indexed by int32). */
#define QVE_TOK_MAX_INPUT_BYTES ((size_t)1 << 30)

typedef struct qve_tok qve_tok;

/* A growable id vector. Zero-initialise; encode appends; qve_tok_ids_free releases. */
typedef struct {
    int32_t *ids;
    size_t n_ids;
    size_t cap_ids;
} qve_tok_ids;

/* Static text for a status code ("unknown status" when out of range). */
const char *qve_tok_strerror(int status);

/* Loads a tokenizer from directory dir: vocab.json + merges.txt when both exist, otherwise
 * tokenizer.json (HF "BPE" model; its pre-tokenizer regex must be the Qwen2 one).
 * Added tokens come from tokenizer.json "added_tokens" and/or tokenizer_config.json
 * "added_tokens_decoder" (union; the config wins on an id clash).
 * Returns NULL on failure with "FILE: problem" in err (err may be NULL). Free with qve_tok_free. */
qve_tok *qve_tok_open(const char *dir, char *err, size_t err_size);
/* The same from files already named (a model's, checkpoint/ckpt.h). */
qve_tok *qve_tok_open_files(const qvm_tok_files *f, char *err, size_t err_size);

/* Releases everything; accepts NULL. */
void qve_tok_free(qve_tok *tok);

/* Encodes n_bytes of UTF-8 text (need not be NUL-terminated; may contain NUL) and APPENDS the ids
 * to out (grown with realloc). Added/special tokens in the text are recognised (longest first) and
 * never split; everything else is NFC-normalised, pre-tokenised and BPE-merged. No BOS/EOS added.
 * Invalid UTF-8 is refused with QVE_TOK_E_BAD_UTF8 and the byte offset in err; on any error
 * out->n_ids is left as it was. Returns a qve_tok_status. */
int qve_tok_encode(qve_tok *tok, const char *text, size_t n_bytes, qve_tok_ids *out, char *err,
                   size_t err_size);

/* Same as qve_tok_encode but into a caller buffer of cap_ids entries. *n_ids receives the number
 * of ids the text needs, also when that exceeds cap_ids (then QVE_TOK_E_CAPACITY is returned and
 * the first cap_ids ids are written). */
int qve_tok_encode_into(qve_tok *tok, const char *text, size_t n_bytes, int32_t *ids,
                        size_t cap_ids, size_t *n_ids, char *err, size_t err_size);

/* Frees the vector's storage and zeroes it; accepts NULL. */
void qve_tok_ids_free(qve_tok_ids *v);

/* Decodes ids to UTF-8 text: added tokens give their content, others their bytes; byte sequences
 * that are not valid UTF-8 (a character split across ids) become U+FFFD per maximal invalid
 * subpart, as HF does. *text is malloc'd, NUL-terminated, caller frees; *n_bytes excludes the NUL
 * (n_bytes may be NULL). Returns QVE_TOK_E_BAD_ID for an id that names no token. */
int qve_tok_decode(const qve_tok *tok, const int32_t *ids, size_t n_ids, char **text,
                   size_t *n_bytes, char *err, size_t err_size);

/* Id of a token given in vocab.json form ("Ġworld", "<|im_start|>"); -1 when unknown. */
int32_t qve_tok_token_to_id(const qve_tok *tok, const char *token);

/* The vocab.json-form string of id (borrowed, valid until qve_tok_free); NULL when unknown. */
const char *qve_tok_id_to_token(const qve_tok *tok, int32_t id);

/* One more than the largest token id (including added tokens). */
int32_t qve_tok_vocab_size(const qve_tok *tok);

/* The two tokens whose BPE merge formed id (merges.txt line "A B" makes the token AB; the
 * lowest-ranked such merge): 1 with parts set, 0 when no merge forms id (a single-byte token, an
 * added token, an unknown id). Read-only: uses the merge table the encoder uses. */
int qve_tok_merge_parts(const qve_tok *tok, int32_t id, int32_t parts[2]);

/* Appends id spelled with tokens that have[0..n_have) marks (nonzero = usable; an id >= n_have is
 * not): id itself when marked, else its merge parts, each spelled the same way in turn, down to
 * single-byte tokens, which are appended whether marked or not (a token no merge forms is spelled
 * by its bytes; an added token stays as it is). The pieces decode to exactly id's bytes, and may
 * include ids >= n_have (an unmarked byte or added token). 0, or QVE_TOK_E_NOMEM /
 * QVE_TOK_E_BAD_ID (id names no token, or its string is not byte-level; out is then unchanged). */
int qve_tok_spell(const qve_tok *tok, int32_t id, const int32_t *have, int32_t n_have,
                  qve_tok_ids *out);

#endif
