/* prompt.h — text-id builders for the Qwen3-TTS prompt templates (§3.4 / §7 of
 * docs/architecture.md), prefix qve_prompt_. Each builder tokenises the whole template string
 * with the special-token-aware encoder, exactly as the official wrapper does, and returns the
 * slice of ids the talker consumes. Thread safety: as qve_tok_encode (exclusive use of tok).
 */
#ifndef QVE_PROMPT_H
#define QVE_PROMPT_H

#include "engine/tokenizer.h"

/* Target text: "<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n" -> ids[3:-5],
 * i.e. t_0..t_{N-1} (N may be 0 for empty text). role_ids (may be NULL) receives ids[0:3], the
 * role block the reference feeds: [151644, 77091, 198], except when text starts with whitespace
 * holding CR/LF, which merges with the role "\n" (the reference then feeds the merged id too).
 * out is overwritten. Returns a qve_tok_status (QVE_TOK_E_BAD_UTF8 for invalid text). */
int qve_prompt_target_ids(qve_tok *tok, const char *text, size_t n_bytes, qve_tok_ids *out,
                          int32_t role_ids[3], char *err, size_t err_size);

/* Instruct: "<|im_start|>user\n{instruct}<|im_end|>\n" -> all ids. out is overwritten. */
int qve_prompt_instruct_ids(qve_tok *tok, const char *instruct, size_t n_bytes, qve_tok_ids *out,
                            char *err, size_t err_size);

/* ICL reference transcript: "<|im_start|>assistant\n{ref_text}<|im_end|>\n" -> ids[3:-2].
 * role_ids as for qve_prompt_target_ids. out is overwritten. */
int qve_prompt_ref_ids(qve_tok *tok, const char *ref_text, size_t n_bytes, qve_tok_ids *out,
                       int32_t role_ids[3], char *err, size_t err_size);

#endif
