/* hygiene.h — reference-audio hygiene for clone (prefix qvc_): trim silence, normalise loudness
 * (EBU R128) and report clipping, refuse too little speech, choose the ICL span (the whole trimmed
 * clip, the cleanest window, or a given range; + tail silence), check the transcript against it,
 * and look for a second speaker. Each step is a pure function over
 * mono 24 kHz float samples that fills a report struct (numbers for the summary and for META);
 * qvc_hygiene_run chains them. Voice activity: features/vad.h. Thresholds: docs/robustness.md.
 */
#ifndef QVC_HYGIENE_H
#define QVC_HYGIENE_H

#include <stddef.h>
#include <stdint.h>

#include "features/speech_encoder.h"
#include "features/vad.h"

/* Which part of the trimmed clip the ICL prompt uses (docs/robustness.md). */
enum qvc_icl_mode {
    QVC_ICL_FULL,  /* the whole trimmed clip, up to icl_max_s: what a transcript of the clip says */
    QVC_ICL_AUTO,  /* the cleanest window_min_s..window_max_s window (its transcript is needed) */
    QVC_ICL_RANGE  /* [icl_start_s, icl_end_s) of the input clip, intersected with the trim */
};

typedef struct {
    qva_vad_params vad;
    double preroll_s;          /* kept before the first / after the last voiced frame: 0.02 */
    double target_lufs;        /* integrated loudness after normalisation (EBU R128): -20 */
    double peak_cap_dbfs;      /* the gain never lifts the peak above this: -1 */
    double max_gain_db;        /* never amplify more than this (noise): +30 */
    double clip_level;         /* |x| >= this counts as clipped: QVA_CLIP_LEVEL */
    double clip_warn_fraction; /* warning from this fraction of clipped samples: 1e-4 */
    double min_voiced_s;       /* refuse with less voiced speech: 3 */
    enum qvc_icl_mode icl_mode;              /* QVC_ICL_FULL */
    double icl_start_s, icl_end_s;           /* QVC_ICL_RANGE: seconds of the input clip */
    double icl_max_s;                        /* cap on the ICL span: 30 s */
    double icl_min_s;                        /* a shorter given range is refused: 3 s */
    double window_min_s, window_max_s;       /* QVC_ICL_AUTO window: 10 .. 15 s */
    double min_snr_db;                       /* windows below this SNR are penalised: 25 */
    double tail_silence_s;                   /* appended to the ICL window: 0.5 */
    double units_per_s_min, units_per_s_max; /* transcript units per voiced second: 4 .. 35 */
    double spk_window_s, spk_hop_s;          /* second-speaker scan windows: 3 s every 1.5 s */
    double spk_threshold;  /* cosine to the main speaker below this: flagged (0.5) */
    double spk_min_voiced; /* windows less voiced than this are skipped: 0.5 */
} qvc_hygiene_params;

qvc_hygiene_params qvc_hygiene_default_params(void);

/* ---- trim + voiced seconds ------------------------------------------------------------- */

typedef struct {
    double floor_dbfs, threshold_dbfs; /* VAD noise floor and threshold */
    int64_t start, end;                /* kept samples [start, end) of the input */
    double in_seconds, out_seconds, lead_trimmed_s, trail_trimmed_s;
    double voiced_seconds; /* voiced 10 ms frames × 10 ms */
} qvc_trim_report;

/* Finds the kept range: first voiced frame − preroll .. last voiced frame + preroll. Returns 0,
 * or -1 with err when no frame is voiced or on allocation failure. x is not modified. */
int qvc_trim_silence(qvc_trim_report *r, const float *x, int64_t n, const qvc_hygiene_params *p,
                     char *err, size_t err_size);
/* 0, or -1 with "only X s of voiced speech (Y s needed) in Z s of audio". */
int qvc_check_voiced(const qvc_trim_report *r, const qvc_hygiene_params *p, char *err,
                     size_t err_size);

/* ---- level ----------------------------------------------------------------------------- */

typedef struct {
    int64_t n_clipped;                   /* samples with |x| >= clip_level, before the gain */
    double clipped_fraction;             /* n_clipped / n */
    int clip_warning;                    /* clipped_fraction >= clip_warn_fraction */
    double in_lufs, in_peak_dbfs;        /* integrated loudness (libebur128), sample peak */
    double in_active_dbfs;               /* RMS over voiced (VAD) frames, for the report */
    double gain_db;
    int peak_limited, gain_limited; /* the gain was lowered by the peak cap / max gain */
    double out_lufs, out_peak_dbfs, out_active_dbfs;
} qvc_level_report;

/* Measures clipping and the integrated loudness (ITU-R BS.1770 K-weighting and gating, via
 * libebur128), then scales x[n] in place to target_lufs, lowered so the sample peak stays <=
 * peak_cap_dbfs and capped at max_gain_db. Returns 0, or -1 with err (allocation, no voiced
 * frame, or nothing above the R128 absolute gate of -70 LUFS). */
int qvc_level_normalize(qvc_level_report *r, float *x, int64_t n, const qvc_hygiene_params *p,
                        char *err, size_t err_size);

/* ---- ICL window ------------------------------------------------------------------------ */

typedef struct {
    enum qvc_icl_mode mode;
    int64_t start, end; /* window [start, end) of the samples given */
    int whole;          /* all of the samples given */
    double voiced_fraction, voiced_seconds, clipped_fraction, snr_db, score;
    double tail_silence_s;
} qvc_window_report;

/* Cleanest window of window_min_s..window_max_s starting and ending on unvoiced frames (or the
 * ends): score = voiced fraction − 20 × clipped fraction − 0.1 × (min_snr_db − SNR)+ + 0.01 ×
 * (length − window_min_s) in seconds; SNR = mean voiced-frame power over the mean of the 1 s
 * blocks' noise floors (10th percentile). Inputs shorter than window_max_s are used whole.
 * 0, or -1 with err on allocation failure. */
int qvc_pick_window(qvc_window_report *r, const float *x, int64_t n, const qvc_hygiene_params *p,
                    char *err, size_t err_size);
/* The same numbers for the fixed window [start, end) (0 <= start < end <= n). 0, or -1 with err
 * on allocation failure. */
int qvc_measure_window(qvc_window_report *r, const float *x, int64_t n, int64_t start,
                       int64_t end, const qvc_hygiene_params *p, char *err, size_t err_size);
/* x[start, end) followed by tail_silence_s of zeros: a malloc'd buffer (*n_out samples), or
 * NULL on allocation failure. */
float *qvc_window_extract(const qvc_window_report *r, const float *x, int64_t *n_out);

/* ---- transcript ------------------------------------------------------------------------ */

typedef struct {
    int n_counted; /* code points that count (letters and digits) */
    double units;  /* Latin-letter equivalents (weights in docs/robustness.md) */
    double voiced_seconds, units_per_s;
    int plausible;    /* units_per_s within [min, max] */
    int fallback;     /* implausible, ICL dropped: x-vector only */
    char reason[400]; /* why implausible ("" otherwise) */
} qvc_transcript_report;

/* Latin-letter-equivalent length of UTF-8 text: letters 1, decimal digits 3, kana 1.5, Hangul
 * syllables 2.5, CJK ideographs 3; spaces, punctuation, symbols and marks 0. -1 on invalid UTF-8.
 */
double qvc_text_units(const char *text, int *n_counted);
/* Units per voiced second of the ICL window in range: 0. Out of range: -1 with r->reason in err,
 * or, with allow_fallback, 1 (r->fallback = 1: drop the transcript and codes, keep the x-vector).
 */
int qvc_check_transcript(qvc_transcript_report *r, const char *text, double voiced_seconds,
                         int allow_fallback, const qvc_hygiene_params *p, char *err,
                         size_t err_size);

/* ---- second speaker -------------------------------------------------------------------- */

/* Speaker vector (dim floats) of x[n]. Returns 0 or -1 with err. */
typedef int (*qvc_xvector_fn)(void *ctx, const float *x, int64_t n, float *xvec, char *err,
                              size_t err_size);

/* Context for qvc_ecapa_xvector: the ECAPA of clone.h (mel + forward). */
typedef struct {
    const qva_ecapa *ecapa;
    qva_mel *mel;
    qvk_pool *pool; /* may be NULL */
} qvc_ecapa_ctx;
int qvc_ecapa_xvector(void *ctx, const float *x, int64_t n, float *xvec, char *err,
                      size_t err_size);

#define QVC_SPK_MAX_RANGES 8

typedef struct {
    double start_s, end_s, min_cos;
} qvc_time_range;

typedef struct {
    int n_windows, n_scored; /* windows of spk_window_s; scored = voiced enough */
    int n_main, n_other;     /* windows in the main / other cluster */
    double centroid_cos;     /* cosine between the two cluster centroids */
    double min_cos;          /* lowest window cosine to the main speaker */
    double threshold;
    int warning;  /* some windows are below the threshold */
    int n_ranges; /* merged flagged time ranges (at most QVC_SPK_MAX_RANGES) */
    qvc_time_range ranges[QVC_SPK_MAX_RANGES];
} qvc_speaker_report;

/* Splits x into windows, gets each window's vector from fn, clusters them into two groups
 * (2-means on cosine), takes the larger group as the main speaker and flags windows whose
 * cosine to its centroid is below spk_threshold; consecutive flagged windows merge into ranges.
 * Clips shorter than two windows are not scanned (n_windows = 0). 0, or -1 with err (fn failed,
 * allocation). */
int qvc_speaker_scan(qvc_speaker_report *r, const float *x, int64_t n, int dim, qvc_xvector_fn fn,
                     void *ctx, const qvc_hygiene_params *p, char *err, size_t err_size);

/* ---- all steps ------------------------------------------------------------------------- */

typedef struct {
    qvc_trim_report trim;
    qvc_level_report level;
    qvc_window_report window;         /* has_window */
    qvc_transcript_report transcript; /* has_transcript */
    int has_window, has_transcript;
    qvc_speaker_report speaker;       /* has_speaker */
    int has_trim, has_level, has_icl, has_speaker; /* the steps that ran */
    float *clean; /* trimmed + normalised clip (x-vector input); owned */
    int64_t n_clean;
    float *icl; /* ICL window + tail silence (speech-encoder input), NULL without ICL; owned */
    int64_t n_icl;
} qvc_hygiene_report;

/* trim → voiced check → level → (transcript given, or icl_mode AUTO: the ICL span of icl_mode →
 * transcript check) → (fn given: speaker scan on the clean clip). A FULL span longer than
 * icl_max_s, or a RANGE outside the trimmed clip, shorter than icl_min_s or longer than
 * icl_max_s, is refused. Returns 0 (done; a fallback drops the ICL: has_icl = 0,
 * transcript.fallback = 1), or -1 with err (refusal or failure) — the report keeps the numbers
 * of the steps that ran, for the message. Free with qvc_hygiene_report_free either way. */
int qvc_hygiene_run(qvc_hygiene_report *r, const float *x, int64_t n, const char *transcript,
                    int allow_fallback, qvc_xvector_fn fn, void *ctx, int dim,
                    const qvc_hygiene_params *p, char *err, size_t err_size);
void qvc_hygiene_report_free(qvc_hygiene_report *r); /* accepts zeroed reports */

/* "full", "auto", "range". */
const char *qvc_icl_mode_name(enum qvc_icl_mode m);
/* Human summary of the steps that ran, one per line ("trim: …", "level: …", …) into buf
 * (truncated to size; "" when not even the trim found speech). */
void qvc_hygiene_summary(const qvc_hygiene_report *r, char *buf, size_t size);
/* Compact JSON object of all numbers, for META key "hygiene". malloc'd; NULL on failure. */
char *qvc_hygiene_json(const qvc_hygiene_report *r);

#endif
