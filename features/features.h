/* features.h — speaker features of reference audio (prefix qva_): audio in any libsndfile format
 * → mono 24 kHz f32 with checks, log-mel (§5.1), ECAPA-TDNN x-vector (§5.2). Used by clone (to
 * make a voice) and by the engine (speak --verify); it knows nothing of either.
 *
 *     qva_audio a; qva_audio_load(&a, "ref.wav", 30.0, err, sizeof err);
 *     qva_ecapa *e = qva_ecapa_load(ck, err, sizeof err);  // ck = qvm_ckpt_open(base_dir, ..)
 *     int nf = qva_mel_n_frames(a.n_samples);          // mel buffer: nf × 128 floats
 *     qva_mel_compute(mel_ctx, mel, a.samples, a.n_samples);
 *     qva_ecapa_forward(e, pool, xvec, mel, nf, err, sizeof err);
 *
 * Thread safety: loaded models are read-only and may be shared; each call allocates its own
 * activations. Parallelism comes from a qvk_pool the caller passes (NULL = calling thread only):
 * rows/chunks/heads are shared out and each piece runs a single-threaded sgemm (qvk_sgemm), so a
 * pool of n threads stays within n cores. Every output element is summed
 * in the same order whatever the split, so results are identical for any pool size (tested).
 */
#ifndef QV_FEATURES_H
#define QV_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "include/qvoice.h"
#include "kernels/kernels.h"

#define QVA_SAMPLE_RATE_HZ QV_SAMPLE_RATE_HZ /* the public rate, named for features/ */
#define QVA_MIN_SECONDS 3.0        /* shorter references are refused */
#define QVA_MIN_RATE_HZ 8000       /* source rates outside these are refused before decoding */
#define QVA_MAX_RATE_HZ 192000
#define QVA_SHORT_SECONDS 10.0     /* shorter references get a warning */
#define QVA_DEFAULT_MAX_SECONDS 30.0
#define QVA_CLIP_LEVEL 0.999       /* |x| at or above this counts as clipped */
#define QVA_CLIP_WARN_FRACTION 1e-4
#define QVA_SILENCE_RMS_DBFS (-60.0)

/* ---- audio ------------------------------------------------------------------------------ */

typedef struct {
    float *samples;           /* [n_samples] mono 24 kHz; owned, free with qva_audio_free */
    int64_t n_samples;
    int src_rate_hz, src_channels;
    char src_format[96];      /* libsndfile's names of the container and codec */
    double src_seconds;       /* length of the whole file */
    double used_seconds;      /* length of the part used (after --max-seconds) */
    int resampled;            /* 1 when src_rate_hz != 24000 */
    int truncated;            /* 1 when the file was longer than max_seconds */
    int short_warning;        /* 1 when used_seconds < QVA_SHORT_SECONDS */
    double clipped_fraction;  /* of the used source samples (all channels) with |x| >= CLIP_LEVEL */
    int clip_warning;         /* 1 when clipped_fraction >= QVA_CLIP_WARN_FRACTION */
    double peak, rms_dbfs;    /* of the mono 24 kHz signal */
} qva_audio;

/* Reads path (WAV, FLAC, OGG/Vorbis, Opus, MP3 if libsndfile has it), keeps at most max_seconds
 * (<= 0: no limit), averages channels, resamples to 24 kHz with SRC_SINC_BEST_QUALITY.
 * Returns 0, or -1 with "PATH: problem" in err (unreadable, unsupported, < 3 s, silent) and
 * nothing allocated. */
int qva_audio_load(qva_audio *a, const char *path, double max_seconds, char *err, size_t err_size);
/* Same checks on samples already in memory (mono, rate_hz); samples are copied/resampled. */
int qva_audio_from_mono(qva_audio *a, const float *x, int64_t n, int rate_hz, const char *name,
                        char *err, size_t err_size);
void qva_audio_free(qva_audio *a); /* accepts zeroed structs */
/* The comment of the audio file at path as libsndfile reads it (WAV LIST/INFO ICMT, Vorbis
 * COMMENT, ID3 COMM) into out[size] ("" when none). 0, or -1 with "PATH: problem" in err. */
int qva_audio_comment(const char *path, char *out, size_t size, char *err, size_t err_size);

/* ---- log-mel front end (§5.1) ----------------------------------------------------------- */

#define QVA_MEL_BINS 128
#define QVA_MEL_N_FFT 1024
#define QVA_MEL_HOP 256

typedef struct qva_mel qva_mel;
/* FFTW plan and Slaney filterbank, made once. NULL on allocation failure. Create and free are
 * thread-safe (the plan is made under fft.c's planner lock); a qva_mel is used by one thread at a
 * time. */
qva_mel *qva_mel_create(void);
void qva_mel_free(qva_mel *m);
/* Frames for n_samples: ⌊(n + 768 − 1024)/256⌋ + 1, or 0 when n < 385 (reflect pad needs it). */
int qva_mel_n_frames(int64_t n_samples);
/* out [n_frames, 128] time-major (as the reference returns it). Returns 0, -1 if too short. */
int qva_mel_compute(qva_mel *m, float *out, const float *x, int64_t n_samples);
/* Centre frequency in Hz of mel bin 0..127 (the filterbank's: Slaney, 0 to 12 kHz), for labels. */
double qva_mel_bin_hz(int bin);

/* ---- ECAPA-TDNN speaker encoder (§5.2) --------------------------------------------------- */

typedef struct qva_ecapa qva_ecapa;
struct qvm_ckpt; /* checkpoint/ckpt.h */
/* Loads speaker_encoder.* from ck's model.safetensors (BF16 widened to f32 once: ck may be
 * freed afterwards) using its config. A model without a speaker encoder (CustomVoice,
 * VoiceDesign) is an error that says so. NULL with err on failure. */
qva_ecapa *qva_ecapa_load(const struct qvm_ckpt *ck, char *err, size_t err_size);
void qva_ecapa_free(qva_ecapa *e);
int qva_ecapa_dim(const qva_ecapa *e);   /* enc_dim: 1024 (0.6B) or 2048 (1.7B) */
/* mel [n_frames, 128] (qva_mel_compute layout) → xvec [enc_dim]. Allocates activations for
 * n_frames; returns 0, or -1 with err on allocation failure / n_frames < 5. */
int qva_ecapa_forward(const qva_ecapa *e, qvk_pool *pool, float *xvec, const float *mel,
                      int n_frames, char *err, size_t err_size);

/* ---- speed (stretch.c) ---------------------------------------------------------------------- */

/* A pitch-preserving time stretch by speed (QV_SPEED_MIN..MAX; 2 = twice as fast) over samples
 * given in blocks of any size (Rubber Band, real-time mode). A stretcher is used by one thread. */
typedef struct qva_stretch qva_stretch;
typedef int (*qva_stretch_fn)(void *user, const float *pcm, int n); /* non-zero: stop */
qva_stretch *qva_stretch_new(double speed); /* NULL: speed out of range, or out of memory */
/* x[n] in; the stretched samples so far out through fn (any number of calls). final: the input
 * has ended, so the rest is flushed, and the output totals round(n_in / speed) samples. Returns
 * 0 or fn's non-zero return. */
int qva_stretch_run(qva_stretch *t, const float *x, int64_t n, int final, qva_stretch_fn fn,
                    void *user);
void qva_stretch_free(qva_stretch *t); /* accepts NULL */

/* ---- AAC (aac.c) ---------------------------------------------------------------------------- */

/* AAC-LC in ADTS frames of 24 kHz mono, through libavcodec loaded at run time (encode.c's `aac`).
 * qva_aac_available: QV_OK, or QV_E_UNSUPPORTED with a detail naming the library or package
 * missing (loads it once; thread-safe). An encoder is used by one thread; its output goes to fn
 * (QV_E_IO when fn fails) as whole ADTS frames. Samples are taken in blocks of any size; a frame
 * (1024 samples) is encoded when complete, and finish pads the last one with silence and drains
 * the encoder's delay. The bytes depend only on the samples, not on how they were split. */
typedef struct qva_aac qva_aac;
enum qv_status qva_aac_available(void);
enum qv_status qva_aac_new(qva_aac **out, int bit_rate); /* QV_E_UNSUPPORTED, QV_E_NOMEM */
enum qv_status qva_aac_write(qva_aac *a, const float *pcm, int64_t n, qv_write_fn fn, void *user);
enum qv_status qva_aac_finish(qva_aac *a, qv_write_fn fn, void *user);
void qva_aac_free(qva_aac *a); /* accepts NULL */

/* ---- helpers ---------------------------------------------------------------------------- */

double qva_l2norm(const float *a, int n);

#endif
