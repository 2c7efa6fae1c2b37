/* guard.h — runaway guard for one chunk's generation (prefix qve_): a frame budget from the
 * chunk's text-token count, repeated-code loops in c0, and long near-silent runs. Pure state
 * machine fed one frame at a time by the generation loop; O(max period) per frame, no
 * allocation. Thresholds and their reasoning: docs/robustness.md.
 */
#ifndef QVE_GUARD_H
#define QVE_GUARD_H

#include <stdint.h>

#define QVE_GUARD_MAX_PERIOD 32 /* longest c0 pattern (frames) the loop detector looks for */

enum qve_guard_verdict { QVE_GUARD_OK, QVE_GUARD_BUDGET, QVE_GUARD_LOOP, QVE_GUARD_SILENCE };

typedef struct {
    /* budget = min(base_frames + frames_per_token · n_text_tokens, max_frames) */
    int base_frames;         /* 25 (2 s: lead-in, final pause, very short chunks) */
    double frames_per_token; /* 8 (0.64 s per token ≈ 2× slow speech) */
    int max_frames;          /* hard cap (e.g. qv_params.max_frames); <= 0: none */
    /* loop: c0[t] == c0[t − p] for a stretch of >= max(loop_min_frames, loop_min_repeats · p)
     * frames, for some period 1 <= p <= loop_max_period */
    int loop_max_period;  /* 32 (2.56 s), at most QVE_GUARD_MAX_PERIOD */
    int loop_min_frames;  /* 38 (3.04 s) */
    int loop_min_repeats; /* 3 */
    /* silence: frame RMS below silence_dbfs, or more than silence_rel_db below the loudest frame
     * so far, for silence_max_frames consecutive frames */
    double silence_dbfs;    /* -55 */
    double silence_rel_db;  /* 35 */
    int silence_max_frames; /* 38 (3.04 s) */
} qve_guard_params;

typedef struct {
    qve_guard_params p;
    int n_text_tokens, budget_frames, n_frames;
    enum qve_guard_verdict verdict;
    int32_t c0[QVE_GUARD_MAX_PERIOD + 1]; /* ring of the last c0 codes */
    int run[QVE_GUARD_MAX_PERIOD + 1];    /* run[p]: consecutive frames with c0[t] == c0[t − p] */
    int loop_period, loop_start;
    int silent_run, silence_start;
    double loud_dbfs; /* loudest frame so far */
    char msg[256];
} qve_guard;

/* The defaults noted on each field of qve_guard_params. */
qve_guard_params qve_guard_default_params(void);
/* Budget in frames for a chunk of n_text_tokens (the formula above). */
int qve_guard_budget(int n_text_tokens, const qve_guard_params *p);
/* Starts a chunk. p NULL = defaults. */
void qve_guard_init(qve_guard *g, int n_text_tokens, const qve_guard_params *p);
/* Feeds one generated frame: codes[16] (codes[0] = c0) and the RMS of its decoded 1920
 * samples (linear, full scale 1.0), or NAN when not decoded (silence check skipped).
 * Returns the verdict (enum qve_guard_verdict); once not OK it stays so for this chunk. Call
 * before using the frame: a frame past the budget is reported, not counted as good. */
int qve_guard_frame(qve_guard *g, const int32_t codes[16], float frame_rms);
/* The silence rule over decoded audio, fed as it arrives from the decoder (which runs behind
 * the generation loop): wav holds frames first_frame .. first_frame + n_frames − 1 of this chunk
 * (n_frames × samples_per_frame samples); call with consecutive ranges starting at 0 (which
 * resets the silence state). Frames are judged in order as qve_guard_frame would, so feeding a
 * chunk in pieces gives the verdict of feeding it whole. Returns the verdict (sticky as above). */
int qve_guard_audio(qve_guard *g, const float *wav, int first_frame, int n_frames,
                    int samples_per_frame);
/* One line explaining the verdict ("" while OK). Borrowed, valid until the next init. */
const char *qve_guard_message(const qve_guard *g);
/* "ok", "budget", "loop", "silence". */
const char *qve_guard_verdict_name(int verdict);

#endif
