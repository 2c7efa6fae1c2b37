/* voice_load.h — applies a voice file's WDELTA (weight delta) to a loaded model (prefix qve_):
 * the legacy semantics of qvoice-format.md §8.4 (the CustomVoice weights become the voice's Base
 * weights, bit for bit), but only after checking that the delta was made for exactly this
 * checkpoint: the HEAD target fingerprint and every tensor's recorded target SHA-256.
 */
#ifndef QVE_VOICE_LOAD_H
#define QVE_VOICE_LOAD_H

#include <stddef.h>

#include "voicefmt/qvf.h"
#include "include/qvoice.h"

enum qve_wdelta_action {
    QVE_WDELTA_NONE,    /* the voice has no weight stream */
    QVE_WDELTA_SOURCE,  /* the model is the voice's source checkpoint: nothing to apply */
    QVE_WDELTA_APPLIED, /* applied */
};

typedef struct {
    enum qve_wdelta_action action;
    int n_tensors;      /* records in the voice */
    int n_changed;      /* tensors whose values changed (materialised or f32 copies rewritten) */
    int n_same;         /* records whose result equals the loaded tensor (left in the mmap) */
    int n_unverified;   /* records without a target SHA-256 (legacy files): applied unchecked */
    int became_source;  /* every weight was replaced: the model now behaves as the source variant */
    double mib_copied;  /* RAM taken by materialised tensors */
} qve_wdelta_report;

/* The identity part of the checks below (no tensor is read; reads m's table fingerprint):
 * *action = NONE (v has no weight stream), SOURCE (m is v's source checkpoint: nothing to apply)
 * or APPLIED (the delta was made for m). -1 with err when it was made for another checkpoint. */
int qve_voice_wdelta_fits(const qv_model *m, const qvf_voice *v, enum qve_wdelta_action *action,
                          char *err, size_t err_size);

/* Checks and applies v's weight stream to m. Refuses (-1, err explains) when the voice's target
 * fingerprint (table mode, qvm_fingerprint_model) differs from m's, a record names a tensor m does
 * not have or has another dtype/shape, or a record's target SHA-256 differs from m's tensor; all
 * of that is checked before any weight changes. bf16 tensors are reconstructed into owned RAM
 * copies (the checkpoint mmap is read-only) with bounded-memory block decoding and their result
 * SHA-256 checked; f32 records (norms, biases) overwrite the model's f32 copies. When every
 * weight was replaced and the source is a Base checkpoint, m's config variant becomes Base (no
 * preset speakers, Base prompt layout), so the model computes exactly what the source does.
 * Derived copies are rebuilt: the int8 view is dropped (the next int8 session quantizes the new
 * weights); pad/bos/eos embeddings are computed per utterance. Records the delta in m
 * (wdelta_on, wdelta_source). Call with no session on m (sessions keep views of the weights).
 * After a failure while applying (corrupt block, result hash), m is partly modified: free it. */
int qve_voice_apply_wdelta(qv_model *m, const qvf_voice *v, qve_wdelta_report *rep, char *err,
                           size_t err_size);

/* ==== qv_voice (voice.c) ====================================================================== */

struct qv_voice {
    qvf_voice *f;
    char path[4096];
    struct voice_id *id; /* qv_voice_id's (voice.c) */
    int32_t *codes; /* the ICL codes widened once to the engine's code type, or NULL */
    void *bytes;    /* qv_voice_open_memory: the file's bytes f borrows from, or NULL */
};

/* qv_voice_check, with the weight delta's fingerprint checked only when with_delta (a voice
 * used without its delta fits any checkpoint its x-vector fits). */
enum qv_status qve_voice_check(const qv_voice *v, const qv_model *m, int with_delta, char *err,
                               size_t err_size);

/* What a voice gives one utterance on m: r's speaker vector, ICL codes + transcript (when the
 * model is Base and use_icl), TPAD and the WOVR bridge (into *bridge; when their sizes fit and m
 * does not carry the voice's weight delta, which supersedes both: qvoice-format.md §8.3, §8.4).
 * warn gets a one-line note when WOVR does not fit (else ""). The request borrows from v and
 * bridge. */
void qve_voice_request(const qv_voice *v, const qv_model *m, int use_icl, qv_request *r,
                       qv_text_bridge *bridge, char *warn, size_t warn_size);

#endif
