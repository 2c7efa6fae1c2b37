/* prompt.c — Qwen3-TTS prompt templates -> talker id ranges. The whole template is encoded (so
 * special-token strings inside user text behave as in the reference) and then sliced like the
 * official wrapper (ids[3:-5], all ids, ids[3:-2]); nothing is re-derived by hand.
 */
#include "engine/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Encodes prefix + text + suffix and keeps ids[head : n - tail] in out (overwritten). */
static int build(qve_tok *tok, const char *prefix, const char *text, size_t n_text,
                 const char *suffix, size_t head, size_t tail, qve_tok_ids *out,
                 int32_t role_ids[3], char *err, size_t err_size)
{
    size_t np = strlen(prefix), ns = strlen(suffix);
    if (!text && n_text) {
        if (err && err_size) snprintf(err, err_size, "prompt: NULL text");
        return QVE_TOK_E_FORMAT;
    }
    if (n_text > QVE_TOK_MAX_INPUT_BYTES - np - ns) {
        if (err && err_size) snprintf(err, err_size, "prompt: text of %zu bytes too long", n_text);
        return QVE_TOK_E_TOO_LONG;
    }
    char *s = malloc(np + n_text + ns);
    if (!s) {
        if (err && err_size) snprintf(err, err_size, "prompt: out of memory");
        return QVE_TOK_E_NOMEM;
    }
    memcpy(s, prefix, np);
    if (n_text) memcpy(s + np, text, n_text);
    memcpy(s + np + n_text, suffix, ns);
    out->n_ids = 0;
    int st = qve_tok_encode(tok, s, np + n_text + ns, out, err, err_size);
    free(s);
    if (st != QVE_TOK_OK) return st;
    /* special tokens split the template, so at least head + tail ids always come back */
    if (out->n_ids < head + tail) {
        if (err && err_size)
            snprintf(err, err_size, "prompt: template gave %zu ids (expected at least %zu)",
                     out->n_ids, head + tail);
        out->n_ids = 0;
        return QVE_TOK_E_TEMPLATE;
    }
    if (role_ids)
        for (size_t i = 0; i < 3; i++) role_ids[i] = i < head ? out->ids[i] : -1;
    size_t n = out->n_ids - head - tail;
    memmove(out->ids, out->ids + head, n * sizeof *out->ids);
    out->n_ids = n;
    return QVE_TOK_OK;
}

int qve_prompt_target_ids(qve_tok *tok, const char *text, size_t n_bytes, qve_tok_ids *out,
                          int32_t role_ids[3], char *err, size_t err_size)
{
    return build(tok, "<|im_start|>assistant\n", text, n_bytes,
                 "<|im_end|>\n<|im_start|>assistant\n", 3, 5, out, role_ids, err, err_size);
}

int qve_prompt_instruct_ids(qve_tok *tok, const char *instruct, size_t n_bytes, qve_tok_ids *out,
                            char *err, size_t err_size)
{
    return build(tok, "<|im_start|>user\n", instruct, n_bytes, "<|im_end|>\n", 0, 0, out, NULL,
                 err, err_size);
}

int qve_prompt_ref_ids(qve_tok *tok, const char *ref_text, size_t n_bytes, qve_tok_ids *out,
                       int32_t role_ids[3], char *err, size_t err_size)
{
    return build(tok, "<|im_start|>assistant\n", ref_text, n_bytes, "<|im_end|>\n", 3, 2, out,
                 role_ids, err, err_size);
}
