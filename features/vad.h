/* vad.h — frame-energy voice activity detection shared by clone/ (reference hygiene) and engine/
 * (output trimming); prefix qva_vad_. Decision: RMS in dBFS per 10 ms frame against an adaptive
 * threshold (a low percentile of the clip's own frame levels + a margin, capped below the loud
 * frames), so it needs no model and works at any recording level. Pure functions, no globals.
 */
#ifndef QV_VAD_H
#define QV_VAD_H

#include <stddef.h>
#include <stdint.h>

#define QVK_VAD_FLOOR_DBFS (-120.0) /* level reported for an all-zero frame */

typedef struct {
    int frame_samples;       /* samples per frame (240 = 10 ms at 24 kHz) */
    double floor_percentile; /* noise floor = this percentile of frame levels (0..100) */
    double margin_db;        /* voiced: level > floor + margin_db ... */
    double headroom_db;      /* ... capped at loud − headroom_db (loud = 95th percentile) ... */
    double abs_min_dbfs;     /* ... and never below this (digital silence, hiss) */
    int min_run_frames;      /* voiced runs shorter than this are clicks: dropped */
} qva_vad_params;

/* 10 ms frames at 24 kHz, floor = 10th percentile, margin 15 dB, headroom 30 dB, abs −60 dBFS,
 * runs of < 3 frames (30 ms) dropped. */
qva_vad_params qva_vad_default_params(void);

/* Frames covering n samples: ⌈n / frame_samples⌉ (the last one may be partial). 0 if n <= 0. */
int64_t qva_vad_n_frames(int64_t n_samples, int frame_samples);

/* db[i] = 20·log10(RMS of frame i) in dBFS (full scale 1.0), QVK_VAD_FLOOR_DBFS for zero frames.
 * db has qva_vad_n_frames(n, frame_samples) entries. */
void qva_vad_frame_db(float *db, const float *x, int64_t n_samples, int frame_samples);

/* Labels frames voiced[i] = 1 / 0 from their levels db[n_frames]. Writes the estimated floor
 * and the threshold used (dBFS) when the pointers are non-NULL. Returns the number of voiced
 * frames, or -1 on allocation failure (a sort buffer of n_frames floats). */
int64_t qva_vad_label(uint8_t *voiced, const float *db, int64_t n_frames, const qva_vad_params *p,
                      double *floor_dbfs, double *threshold_dbfs);

/* First voiced frame and one past the last (0, 0 when none are voiced). */
void qva_vad_bounds(const uint8_t *voiced, int64_t n_frames, int64_t *first, int64_t *end);

#endif
