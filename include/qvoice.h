/* qvoice.h — public API of libqvoice: load a Qwen3-TTS-12Hz checkpoint and synthesize speech.
 *
 * Usage (text to audio, streamed to a callback; complete program: examples/stream_wav.c):
 *
 *     qv_model *m;
 *     if (qv_model_load(&m, "models/Qwen3-TTS-12Hz-0.6B-CustomVoice"))
 *         { fprintf(stderr, "%s\n", qv_last_error()); return 1; }
 *     qv_params p = qv_model_params(m);            // generation_config.json defaults
 *     p.seed = 42;
 *     p.n_threads = qv_threads_resolve(0);         // every core
 *     qv_synth *y;
 *     if (qv_synth_new(&y, m, &p)) { ... qv_last_error() ... }
 *     qv_synth_request q = qv_synth_default_request();
 *     q.text = "Hello world."; q.speaker = "ryan";   // or q.voice_path = "voices/me.qvoice"
 *     if (qv_synth_run(y, &q, on_pcm, user, NULL)) { fprintf(stderr, "%s\n", qv_last_error()); }
 *     qv_synth_free(y);
 *
 * Or codes for one utterance, frame by frame:
 *
 *     qv_session *s;
 *     qv_session_new(&s, m, &p);
 *     qv_request r = qv_default_request();
 *     r.text = "Hello world."; r.speaker = "ryan"; r.language = "english";
 *     if (qv_session_start(s, &r)) { fprintf(stderr, "%s\n", qv_last_error()); ... }
 *     int32_t codes[QV_N_CODEBOOKS]; int done = 0;
 *     while (!qv_session_next_frame(s, codes, &done) && !done) { ... use one 80 ms frame ... }
 *     qv_session_free(s); qv_model_free(m);
 *
 * Errors, one convention: every function that can fail returns enum qv_status (QV_OK = 0) and
 * hands objects back through an out-parameter (NULL on failure). On failure qv_last_error() gives
 * a one-line detail naming the file or field ("FILE: problem"); it is per thread, so concurrent
 * calls on other threads do not overwrite it, and it stays until the next failing call on this
 * thread.
 * Structs: every struct passed in or out begins with uint32_t struct_size, set by its
 * qv_*_default*() function (or, for qv_synth_stats, by the caller: {.struct_size = sizeof st});
 * a call given another size fails with QV_E_ABI (built against another qvoice.h).
 * Memory: what the library allocates and hands over (qv_file_read's buffer, token ids, JSON
 * reports) is released with qv_free(), never free(); handles have their own *_free().
 * Thread safety: a qv_model is read-only after load (but for a voice's weight delta, see
 * use_wdelta) and may be shared by any number of threads, sessions and syntheses; a qv_session
 * or qv_synth belongs to one thread at a time. Nothing here prints or exits, and no call changes
 * process-wide state (OpenBLAS runs single-threaded; the library's own pools do the parallelism).
 * Determinism: with sampling on, a given seed gives the same codes for any n_threads.
 */
#ifndef QVOICE_H
#define QVOICE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QV_VERSION_MAJOR 0
#define QV_VERSION_MINOR 1
#define QV_VERSION_PATCH 0
#define QV_VERSION_STRING "0.1.0"

/* Library version string, e.g. "0.1.0". */
const char *qv_version(void);

#define QV_N_CODEBOOKS 16     /* codes per frame: c0 (talker) + c1..c15 (code predictor) */
#define QV_CODEBOOK_SIZE 2048 /* a code is in [0, QV_CODEBOOK_SIZE) */
#define QV_FRAME_RATE_HZ 12.5 /* frames per second of audio */
#define QV_SAMPLE_RATE_HZ 24000
/* Output rates the encoders resample to (qv_audio_encode_at, qv_encoder_set_rate): the model
 * makes QV_SAMPLE_RATE_HZ, marked there, then resampled on the way out. */
#define QV_OUT_RATE_MIN_HZ 8000
#define QV_OUT_RATE_MAX_HZ 48000
#define QV_SAMPLES_PER_FRAME 1920 /* samples of one frame */

/* ==== status ================================================================================= */

#define QV_STATUS_LIST(X)                                                                          \
    X(QV_OK, "ok")                                                                                 \
    X(QV_E_INVALID, "invalid argument")                                                            \
    X(QV_E_MODEL, "cannot load the model (missing, malformed or unsupported files)")               \
    X(QV_E_NOMEM, "out of memory")                                                                 \
    X(QV_E_SPEAKER, "unknown speaker")                                                             \
    X(QV_E_LANGUAGE, "unknown language")                                                           \
    X(QV_E_UNSUPPORTED, "not supported by this model or build")                                    \
    X(QV_E_LIMIT, "input exceeds a model limit")                                                   \
    X(QV_E_STATE, "no utterance in progress (not started, finished, or failed)")              \
    X(QV_E_VOICE, "cannot use the voice file (missing, malformed, or made for another model)") \
    X(QV_E_FOREIGN_VOICE, "the voice was made with a checkpoint unrelated to this model")      \
    X(QV_E_GUARD, "the runaway guard stopped a chunk that did not end")                       \
    X(QV_E_CANCELLED, "cancelled")                                                             \
    X(QV_E_AUDIO, "cannot read or use the reference audio")                                    \
    X(QV_E_IO, "cannot write the output")                                                        \
    X(QV_E_VOCAB, "the text uses tokens outside the model's pruned vocabulary")                 \
    X(QV_E_ABI, "a struct's struct_size does not match this library's qvoice.h")

#define QV_STATUS_ENUM_(name, text) name,
enum qv_status { QV_STATUS_LIST(QV_STATUS_ENUM_) QV_STATUS_COUNT };
#undef QV_STATUS_ENUM_

/* Static text for a status ("unknown status" for out-of-range values). */
const char *qv_strerror(enum qv_status st);
/* One-line detail of the last call on this thread that failed ("" when none yet): borrowed, valid
 * until the next failing qv_ call on this thread. Never NULL. */
const char *qv_last_error(void);
/* Releases memory the library handed over (documented per function as "release with qv_free").
 * Accepts NULL. */
void qv_free(void *p);

/* ==== model ================================================================================== */

typedef struct qv_model qv_model;

/* Loads config.json, generation_config.json and model.safetensors (kept mmapped) from dir.
 * On failure *out = NULL and a status is returned (QV_E_MODEL, QV_E_NOMEM). */
enum qv_status qv_model_load(qv_model **out, const char *dir);
void qv_model_free(qv_model *m); /* accepts NULL */

/* "base", "custom_voice" or "voice_design"; "0b6" or "1b7". Borrowed, valid while m lives. */
const char *qv_model_type(const qv_model *m);
const char *qv_model_size(const qv_model *m);
int qv_model_hidden_size(const qv_model *m); /* length of a speaker (x-)vector */
/* The checkpoint's SHA-256 fingerprint (the one a voice file records as its source), as 64
 * lower-case hex digits + NUL into hex: what an output's provenance names as its model. */
void qv_model_fingerprint(const qv_model *m, char hex[65]);
int qv_model_text_hidden_size(const qv_model *m);
/* Preset speakers (CustomVoice; 0 otherwise) and selectable languages ("auto" first, dialects
 * excluded). Names are borrowed; i out of range gives NULL. */
int qv_model_n_speakers(const qv_model *m);
const char *qv_model_speaker(const qv_model *m, int i);
int qv_model_n_languages(const qv_model *m);
const char *qv_model_language(const qv_model *m, int i);

/* Decodes codes [n_frames][16] (as generated) to wav[n_frames * QV_SAMPLES_PER_FRAME] with the
 * model's speech decoder, n_threads (qv_threads_resolve) for its matrix products; the same
 * samples as a synthesis delivers for those frames before trimming and joining (bit-identical for
 * any n_threads). QV_E_INVALID for a code outside [0, 2048), QV_E_MODEL when the decoder cannot
 * be loaded, QV_E_NOMEM. */
enum qv_status qv_model_decode_codes(const qv_model *m, const int32_t *codes, int n_frames,
                                     int n_threads, float *wav);

/* The codes text format (speak --dump-codes / --decode-codes): one frame per line, its 16 codes
 * in [0, 2048) as decimal integers separated by blanks; blank lines and #-comments are skipped.
 * qv_codes_write appends n_frames frames to f (QV_E_IO when writing fails). qv_codes_read reads
 * path (a file or a pipe such as /dev/stdin) into *codes [*n_frames][16] (release with qv_free);
 * QV_E_IO (unreadable), QV_E_LIMIT (over 1 GiB), QV_E_INVALID with the detail
 * "PATH:LINE: expected 16 codes in [0, 2048)" or "PATH: no frames", QV_E_NOMEM. */
enum qv_status qv_codes_write(FILE *f, const int32_t *codes, int n_frames);
enum qv_status qv_codes_read(const char *path, int32_t **codes, int *n_frames);

/* qv_codes_read then qv_model_decode_codes: the audio of a codes file, *pcm [*n_samples]
 * (release with qv_free). Their statuses and details. */
enum qv_status qv_codes_decode(const qv_model *m, const char *path, int n_threads, float **pcm,
                               int64_t *n_samples);

/* Batched streams: from this call on, sessions of m that ask for their next frame at about the
 * same time, each on its own thread, advance together in one step (up to max_streams of them,
 * at most QV_BATCH_MAX_STREAMS; 0 or 1 turns it off), so each weight matrix is read once per step
 * for all of them instead of once per session. Codes and audio are bit-identical to the sessions
 * run alone; a session alone pays one mutex per frame. Call it before sessions of m generate
 * (qvoice-server does at start). QV_E_INVALID for max_streams outside [0, 8], QV_E_NOMEM. */
#define QV_BATCH_MAX_STREAMS 8
enum qv_status qv_model_set_batching(qv_model *m, int max_streams);
/* Steps the batched streams of m have run and the frames they produced (their ratio is the mean
 * batch size); 0 and 0 when batching is off. Thread-safe. */
void qv_model_batch_stats(const qv_model *m, int64_t *n_steps, int64_t *n_frames);

/* ==== parameters ============================================================================= */

typedef struct {
    uint32_t struct_size;     /* sizeof(qv_params), set by qv_default_params / qv_model_params */
    int n_threads;            /* compute threads (>= 1) */
    uint64_t seed;            /* RNG seed for sampling */
    int do_sample;            /* 0 = greedy talker (after penalty and suppression) */
    float temperature;        /* > 0 */
    int top_k;                /* 0 = off */
    float top_p;              /* (0, 1]; 1 = off */
    float repetition_penalty; /* >= 1 typical; 1 = off; applied even when greedy */
    int subtalker_do_sample;  /* code predictor: 0 = argmax */
    float subtalker_temperature;
    int subtalker_top_k;
    float subtalker_top_p;
    int max_frames; /* frames per utterance (max_new_tokens - 1 of the reference) */
    int quant;      /* enum qv_quant: weights of the per-frame matvecs */
    int ignore_eos; /* benchmarks: end-of-speech is never picked, every utterance runs max_frames */
} qv_params;

/* QV_QUANT_INT8: talker and code-predictor matrices quantized to int8 with per-row scales (by the
 * first such session of a model, kept for its lifetime: +0.5 GB for 0.6B); half the bytes per
 * frame, codes close to but not identical with bf16 (docs/performance.md). Prefill stays bf16.
 * QV_QUANT_Q4: every linear quantized to 4 bits, MLX's affine group-64 layout, exactly as
 * qvoice-compress --q4 stores it (docs/compression.md; +0.3 GB for 0.6B, prefill widens q4).
 * A checkpoint already stored as q4 runs its q4 weights whatever quant says. */
enum qv_quant { QV_QUANT_BF16, QV_QUANT_INT8, QV_QUANT_Q4 };
/* enum qv_quant by its name ("bf16", "int8", "q4"; exact case), or -1: the one spelling of
 * every front end's --quant. */
int qv_quant_parse(const char *name);

/* The one range of each sampling parameter, for every front end (speak, the server, Python):
 * temperature 0.001..10 (when sampling), top_k 0..100000 (0 = off), top_p (0, 1], repetition
 * penalty 0.1..10, max_frames >= 1, n_threads 1..256. */
#define QV_TEMPERATURE_MIN 0.001
#define QV_TEMPERATURE_MAX 10.0
#define QV_TOP_K_MAX 100000
#define QV_REPETITION_PENALTY_MIN 0.1
#define QV_REPETITION_PENALTY_MAX 10.0
/* QV_OK, or QV_E_INVALID with the detail "FIELD: expected RANGE, found VALUE" (FIELD as in
 * qv_params), QV_E_ABI. Sessions and syntheses check their params with it. */
enum qv_status qv_params_check(const qv_params *p);

/* The reference wrapper's fallbacks: sampling on, T 0.9, top-k 50, top-p 1, penalty 1.05,
 * code predictor T 0.9 / top-k 50 / top-p 1, max_frames 2047, 1 thread, seed 0. */
qv_params qv_default_params(void);
/* Same, overridden by the model's generation_config.json (max_new_tokens - 1 -> max_frames). */
qv_params qv_model_params(const qv_model *m);

/* ==== one utterance ========================================================================== */

enum qv_text_layout {
    QV_LAYOUT_DEFAULT,      /* non-streaming for CustomVoice/VoiceDesign, streaming for Base */
    QV_LAYOUT_STREAMING,    /* one text token fed per generated frame */
    QV_LAYOUT_NON_STREAMING /* whole text in the prompt */
};

/* A voice file's model bridge (WOVR): the source model's text projection and its first
 * n_codec_rows codec-embedding rows, used instead of the model's for this utterance. Shapes are
 * the model's: fc1 [text_hidden, text_hidden] bf16, fc2 [hidden, text_hidden] bf16, biases f32,
 * codec_rows [n_codec_rows, hidden] bf16. */
typedef struct {
    uint32_t struct_size; /* sizeof(qv_text_bridge) */
    const uint16_t *fc1_weight;
    const float *fc1_bias;
    const uint16_t *fc2_weight;
    const float *fc2_bias;
    const uint16_t *codec_rows;
    int n_codec_rows;
} qv_text_bridge;

typedef struct {
    uint32_t struct_size;    /* sizeof(qv_request), set by qv_default_request */
    const char *text;        /* target text, UTF-8; used when text_ids is NULL */
    const char *instruct;    /* instruction / voice description; used when instruct_ids is NULL */
    const char *ref_text;    /* ICL transcript; used when ref_text_ids is NULL */
    const int32_t *text_ids; /* target text token ids t_0..t_{N-1} (N >= 1) */
    int n_text_ids;
    const char *language;        /* NULL or "auto", or a name from qv_model_language */
    const char *speaker;         /* preset speaker (CustomVoice) or NULL */
    const float *speaker_vector; /* x-vector of qv_model_hidden_size floats; replaces speaker */
    int n_speaker_vector;
    const int32_t *instruct_ids; /* ids of "<|im_start|>user\n{instruct}<|im_end|>\n", or NULL */
    int n_instruct_ids;
    const int32_t *ref_codes; /* ICL: reference frames [n_ref_frames][16], or NULL */
    int n_ref_frames;
    const int32_t *ref_text_ids; /* ICL: transcript token ids r_0..r_{M-1} */
    int n_ref_text_ids;
    const float *text_special;    /* [3][hidden]: tts_pad, tts_bos, tts_eos embeddings replacing
                                     the model's (a voice file's TPAD bridge), or NULL */
    const qv_text_bridge *bridge; /* or NULL */
    enum qv_text_layout layout;
    int strict_vocab; /* vocabulary-pruned model (qvoice-compress --vocab): 1 refuses ids its
                         token map lacks with QV_E_VOCAB; 0 spells each with the smaller BPE
                         pieces it merges from (the same bytes) and names them in
                         qv_session_warning */
} qv_request;

qv_request qv_default_request(void); /* all empty, language auto, default layout */

typedef struct qv_session qv_session;

/* A session owns the thread pool, KV caches and scratch for one utterance at a time.
 * QV_E_INVALID (the detail names the field), QV_E_ABI, QV_E_NOMEM. */
enum qv_status qv_session_new(qv_session **out, const qv_model *m, const qv_params *p);
void qv_session_free(qv_session *s); /* accepts NULL */
/* New sampling parameters (seed, sampling, max_frames, ignore_eos) for the next
 * qv_session_start, keeping the pool, scratch and tokenizer; n_threads and quant must stay as
 * created. QV_E_INVALID (the detail says which field) and nothing changed, else QV_OK.
 * Not while an utterance generates. */
enum qv_status qv_session_set_params(qv_session *s, const qv_params *p);

/* Builds the prompt (§3.4 of the architecture notes) and runs the prefill. Ends any previous
 * utterance. Errors: QV_E_SPEAKER / QV_E_LANGUAGE (the detail lists valid names), QV_E_INVALID,
 * QV_E_LIMIT, QV_E_NOMEM. The request's arrays are only read during this call. */
enum qv_status qv_session_start(qv_session *s, const qv_request *r);
/* Generates the next frame into codes[16]. *done = 1 (codes untouched) once the model emitted
 * end-of-speech or max_frames were produced. QV_E_STATE without a started utterance. */
enum qv_status qv_session_next_frame(qv_session *s, int32_t codes[QV_N_CODEBOOKS], int *done);
int qv_session_n_frames(const qv_session *s); /* frames produced in this utterance */
/* Token ids of UTF-8 text with the model's Qwen2 tokenizer (opened on first use from the model
 * directory). *ids: release with qv_free. QV_E_MODEL if the tokenizer files are bad,
 * QV_E_INVALID for invalid UTF-8. */
enum qv_status qv_session_tokenize(qv_session *s, const char *text, int32_t **ids, int *n_ids);
/* The same without a session (any thread: the model's tokenizer is shared under its lock); e.g.
 * a server's usage.input_tokens. */
enum qv_status qv_model_tokenize(const qv_model *m, const char *text, int32_t **ids, int *n_ids);
/* One-line non-fatal note of the last qv_session_start (borrowed, "" when none): e.g. the ids and
 * text a pruned vocabulary lacks. */
const char *qv_session_warning(const qv_session *s);


/* ==== threads ================================================================================ */

/* The one thread-budget rule of the library and every tool: n >= 1 is taken as is, n <= 0 means
 * all online CPUs. */
int qv_threads_resolve(int n);

/* ==== voices ================================================================================= */

/* An opened .qvoice (v1-v4) or raw .bin x-vector, checked (CRCs, structure) on open. Read-only
 * after open: may be shared by any number of threads and syntheses. */
typedef struct qv_voice qv_voice;

/* Opens path, or a voice NAME looked up as voices/NAME.qvoice then in each $QVOICE_PATH
 * directory. On failure *out = NULL, QV_E_VOICE (or QV_E_NOMEM). */
enum qv_status qv_voice_open(qv_voice **out, const char *path_or_name);
void qv_voice_free(qv_voice *v); /* accepts NULL */
const char *qv_voice_name(const qv_voice *v);     /* "" when unnamed; borrowed */
const char *qv_voice_language(const qv_voice *v); /* "" when unset; borrowed */
const char *qv_voice_path(const qv_voice *v);     /* the file it was opened from (else the
                                                     name given, or "parts"); borrowed */
/* The voice's id: SHA-256 of its file's bytes as 64 lower-case hex digits (the id qvoice-server's
 * library gives the same file; for qv_voice_open_memory, of the bytes given, so a file and its
 * bytes have one id), hashed on the first call (thread-safe; "" when the file can no longer be
 * read); for qv_voice_from_parts, "parts:" + SHA-256 of its x-vector, reference codes and
 * transcript. Borrowed. */
const char *qv_voice_id(const qv_voice *v);
int qv_voice_has_icl(const qv_voice *v);          /* reference codes + transcript present */
int qv_voice_has_wdelta(const qv_voice *v);       /* carries a weight delta */

/* What the voice file holds as its ICL reference: its codes decoded with m's speech decoder
 * (qv_model_decode_codes), *pcm [*n_samples] 24 kHz (release with qv_free). QV_E_VOICE when the
 * voice has no reference codes, else qv_model_decode_codes's statuses; the detail names the
 * file. */
enum qv_status qv_voice_reference_audio(const qv_voice *v, const qv_model *m, int n_threads,
                                        float **pcm, int64_t *n_samples);
/* A voice from the bytes of a voice file (what qv_voice_open reads; copied, so data may be freed
 * after the call), named name in details and by qv_voice_path. No file is involved: a voice
 * carried by value (Python's pickled prompt items). QV_E_VOICE ("NAME: problem"), QV_E_NOMEM. */
enum qv_status qv_voice_open_memory(qv_voice **out, const void *data, size_t n_bytes,
                                    const char *name);
/* A voice from its parts, as a clone would store them (no text side, no weight delta): the
 * x-vector xvector[dim], and for ICL the reference frames ref_codes[n_ref_frames][16] (codes in
 * [0, 2048)) with ref_text, their transcript (both or neither); language may be NULL. Named
 * "parts" in details. QV_E_INVALID naming the argument, QV_E_LIMIT, QV_E_NOMEM. */
enum qv_status qv_voice_from_parts(qv_voice **out, const float *xvector, int dim,
                                   const int32_t *ref_codes, int n_ref_frames,
                                   const char *ref_text, const char *language);
/* Writes v as a voice file (format v4) to path, atomically; a signature is not kept (a rewrite
 * drops it, as voicefmt's do). QV_E_IO ("PATH: problem"), QV_E_INVALID (v cannot be stored),
 * QV_E_NOMEM. */
enum qv_status qv_voice_save(const qv_voice *v, const char *path);
/* A voice's parts, borrowed while v lives: the x-vector (*dim floats), the ICL frames
 * ([*n_frames][16], NULL and 0 when none) and their transcript (NULL when none). */
const float *qv_voice_xvector(const qv_voice *v, int *dim);
const int32_t *qv_voice_ref_codes(const qv_voice *v, int *n_frames);
const char *qv_voice_ref_text(const qv_voice *v);
/* The i-th entry of the voice's style palette (docs/markup.md): its name (borrowed), or NULL past
 * the last; *is_direction (1: a unit direction, 0: a variant x-vector) and *strength, its default
 * strength (either may be NULL). */
const char *qv_voice_style(const qv_voice *v, int i, int *is_direction, float *strength);

/* Whether v can speak on m: the x-vector length, the weight delta's target fingerprint, and
 * whether the voice's source checkpoint is m's sibling (the Base/CustomVoice pair of one
 * release) judged from the text-side rows it carries. QV_OK; QV_E_VOICE (cannot be used: wrong
 * size, delta for another checkpoint); QV_E_FOREIGN_VOICE (usable but made with an unrelated
 * checkpoint: speak warns, voicefmt verify --model fails; force it with the request's
 * force_voice). qv_last_error() has the one-line reason. *warning (may be NULL) gets a
 * warning with QV_OK when the voice carries no text-side rows to judge by, else NULL; release it
 * with qv_free. */
enum qv_status qv_voice_check(const qv_voice *v, const qv_model *m, char **warning);

/* What `voicefmt verify --model` checks, for a voice file and a model directory: x-vector, TPAD
 * and WOVR sizes; a weight delta (made for this checkpoint or this is its source, as synthesis
 * decides; every tensor present with its size; with QV_VERIFY_DEEP also each target tensor's
 * SHA-256); and whether the
 * voice was made with the model's sibling checkpoint (judged from its TPAD/WOVR rows; without
 * them a warning "cannot tell"; QV_VERIFY_FORCE makes a foreign voice a warning). Loads the
 * model with qv_model_load for the call. *report gets every problem and warning, one line each
 * ("PATH: problem", "PATH: warning: ..."), on failure too; release it with qv_free (NULL when
 * out of memory). QV_OK (warnings possible), QV_E_FOREIGN_VOICE (that is the only problem),
 * QV_E_VOICE, or qv_model_load's status; qv_last_error() has the first problem. */
enum { QV_VERIFY_DEEP = 1, QV_VERIFY_FORCE = 2 };
enum qv_status qv_voice_file_verify(const char *model_dir, const char *voice_path, int flags,
                                    char **report);

/* ==== synthesis: text to 24 kHz audio ========================================================= */

/* PCM delivery: n_samples new mono 24 kHz samples in [-1, 1], in order, as soon as they are
 * decoded (the first block after the first few frames, then growing blocks). pcm is only valid
 * during the call. Called on the thread that runs the synthesis. Return non-zero to stop: the
 * synthesis then ends with QV_E_CANCELLED. */
typedef int (*qv_pcm_fn)(void *user, const float *pcm, int n_samples);

/* A generic style direction (voicefmt palette derive): a unit shift in x-vector space that any
 * voice's x-vector takes at a strength (docs/markup.md). */
typedef struct {
    uint32_t struct_size;   /* sizeof(qv_style_dir), set by the caller */
    const char *name;       /* a style name, [a-z][a-z0-9_-]* */
    const float *direction; /* [dim], any norm (it is normalised) */
    int dim;                /* qv_model_hidden_size */
    float strength;         /* default strength; <= 0: 0.25 */
} qv_style_dir;

typedef struct {
    uint32_t struct_size;    /* sizeof(qv_synth_request), set by qv_synth_default_request */
    const char *text;        /* UTF-8; long text is split at sentence ends; markup tags
                                (docs/markup.md): [pause:500ms], [sad], [style:…], [voice:…],
                                [lang:…] */
    const char *language;    /* NULL or "auto", or a name from qv_model_language */
    const char *speaker;     /* preset speaker (CustomVoice), or NULL */
    const qv_voice *voice;   /* an opened voice, or NULL (takes precedence over voice_path) */
    const char *voice_path;  /* a .qvoice path or voice name, opened for this call, or NULL */
    const char *instruct;    /* style instruction (1.7B CustomVoice) or voice description
                                (VoiceDesign), or NULL */
    int use_icl;             /* 1: use the voice's reference codes + transcript when present */
    int use_wdelta;          /* 1: apply the voice's weight delta when present. It rewrites
                                the model's weights for good (the model becomes the voice's
                                source model, e.g. Base): allowed only while this is the
                                model's only qv_synth, else QV_E_UNSUPPORTED */
    int force_voice;         /* 1: use a voice that qv_voice_check calls foreign */
    int force_instruct;      /* 1: keep instruct on the 0.6B CustomVoice model, which was not
                                trained for it (0: dropped, stats.warning = QV_INSTRUCT_DROPPED) */
    int strict_vocab;        /* 1: refuse text a pruned vocabulary lacks (QV_E_VOCAB); 0: spell
                                it with smaller pieces, named in stats.warning
                                (qv_request.strict_vocab) */
    int max_chunk_chars;     /* code points per chunk (200); <= 0: the whole text at once */
    int guard;               /* 1: runaway guard (frame budget, c0 loop, silence) */
    int trim_lead;           /* 1: each chunk's leading silence is cut to 100 ms */
    double max_seconds;      /* cap on the audio of each chunk (0 = none; lowers the params'
                                max_frames); reaching it ends the chunk normally
                                (stats.capped = 1), it is not an error */
    int codes_only;          /* 1: generate codes only (see qv_synth_set_chunk_fn): no
                                decoding, no audio, no silence rule */
    int whole_chunks;        /* 1: deliver a chunk's audio only once the chunk completed and
                                passed the guard (a trip can always be retried; latency one
                                chunk); 0: stream it as decoded */
    const char *verify_model_dir; /* Base model directory: per-chunk speaker similarity of the
                                     output to the voice (stats.verify_*), or NULL */
    /* styles (docs/markup.md): a style name is looked up in the voice's palette, then in
       style_dirs, and its instruct text in style_table then the built-in table */
    const char *style;        /* style of the whole text (a markup tag replaces it), or NULL;
                                 one that nothing can apply is an error (QV_E_UNSUPPORTED) */
    float style_strength;     /* > 0: overrides the palette entry's / direction's strength
                                 (at most QV_STYLE_STRENGTH_MAX) */
    const qv_style_dir *style_dirs; /* generic directions, or NULL */
    int n_style_dirs;
    const char *style_table;  /* extra "name = instruct text" lines, or NULL */
    int strict_markup;        /* 1: a tag the model and voice cannot honour is an error
                                 (QV_E_UNSUPPORTED); 0: a warning in stats.warning */
    double speed;             /* QV_SPEED_MIN..QV_SPEED_MAX (1: as generated): the audio is
                                 time-stretched, pitch kept, before it reaches fn (streamed too);
                                 the encoder's watermark goes on after it. Not with codes_only */
} qv_synth_request;

#define QV_STYLE_STRENGTH_MAX 4.0 /* speak --style-strength and the server's style_strength */
#define QV_SPEED_MIN 0.25
#define QV_SPEED_MAX 4.0

#define QV_INSTRUCT_DROPPED                                                                        \
    "instruct ignored: the 0.6B CustomVoice model was not trained for instructions "              \
    "(force_instruct keeps it)"

/* use_icl, use_wdelta, guard, trim_lead = 1; max_chunk_chars = 200; everything else 0/NULL
 * (so audio streams). */
qv_synth_request qv_synth_default_request(void);

typedef struct {
    uint32_t struct_size;     /* the caller sets sizeof(qv_synth_stats) before qv_synth_run */
    int n_chunks;             /* text chunks synthesized (pauses excluded) */
    int n_frames;             /* codec frames generated (80 ms each), retries excluded */
    int64_t n_samples;        /* samples delivered */
    double audio_seconds;     /* n_samples / 24000 */
    double first_audio_s;     /* start of the call -> first PCM delivered */
    double total_s;           /* wall time of the call */
    double rtf;               /* total_s / audio_seconds */
    int capped;               /* stopped at max_seconds or max_frames */
    int guard_trips;          /* chunks the guard stopped (each retried in halves if allowed) */
    char guard_verdict[16];   /* "ok", "budget", "loop", "silence": the last trip's verdict */
    int wdelta_applied;       /* the voice's weight delta was used */
    int n_verify;             /* chunks compared (verify_model_dir) */
    double verify_min, verify_mean; /* speaker cosine similarity over those chunks */
    char warning[512];        /* "" or non-fatal warnings, "; "-separated (foreign voice
                                 forced, a markup tag the model cannot honour, ...) */
} qv_synth_stats;

/* A synthesizer: one session (thread pool, KV caches), its decoder thread and scratch, on a
 * shared read-only model. One synthesis at a time per qv_synth; any number of qv_synth may run
 * concurrently on one model, each on its own thread. */
typedef struct qv_synth qv_synth;

/* QV_E_INVALID (the detail names the field), QV_E_ABI, QV_E_NOMEM. */
enum qv_status qv_synth_new(qv_synth **out, const qv_model *m, const qv_params *p);
void qv_synth_free(qv_synth *s); /* accepts NULL; not while a synthesis runs */
/* qv_session_set_params for the synthesizer: the next qv_synth_run uses p, reusing the session,
 * pools, decoder scratch and tokenizer (a server slot serving requests with different seeds).
 * QV_E_INVALID (with the detail) if n_threads or quant differ or p is invalid;
 * nothing changes then. Not while a synthesis runs. */
enum qv_status qv_synth_set_params(qv_synth *s, const qv_params *p);

/* Synthesizes r, delivering audio through fn as it is decoded. The guard: a chunk that trips it
 * before any of its audio went out is retried in two halves; once audio has gone out, a trip
 * ends the synthesis with QV_E_GUARD (the delivered audio is incomplete: callers writing a file
 * must discard it). Streaming and one-shot delivery give bit-identical samples for one seed.
 * st may be NULL. Errors: those of qv_session_start, QV_E_VOICE, QV_E_FOREIGN_VOICE,
 * QV_E_GUARD, QV_E_CANCELLED, QV_E_ABI (r or st). */
enum qv_status qv_synth_run(qv_synth *s, const qv_synth_request *r, qv_pcm_fn fn, void *user,
                            qv_synth_stats *st);
/* A dialogue script (docs/markup.md) as markup text for qv_synth_request.text: each line
 * "NAME: text" (NAME a voice or a preset speaker, text with optional markup tags) becomes
 * "[voice:NAME][neutral]text" (each line starts from the request's style), a run of blank lines
 * a pause of pause_ms, '#' lines are comments. *markup and, per script line,
 * (*line_offsets)[i] the character offset in *markup where it starts and (*line_numbers)[i] its
 * line in the script (*n_lines entries each), so a qv_chunk_info.text_offset maps to its script
 * line; release the three with qv_free. QV_E_INVALID naming the line ("script line 3: ..."),
 * QV_E_NOMEM. */
enum qv_status qv_script_to_markup(const char *script, int pause_ms, char **markup,
                                   int **line_offsets, int **line_numbers, int *n_lines);

/* Text that arrives in pieces (an LLM's tokens), spoken sentence by sentence as each is complete,
 * with the chunker's rules: a sentence ends after . ! ? … (and closing quotes) followed by white
 * space, after 。！？, or at a blank line; never inside a markup tag, nor before a '[' whose tag
 * may still be arriving. *n_bytes gets the length of text's longest prefix of whole sentences (0:
 * none yet; the last one needs what follows it, so "3." is not cut before "14"). carry
 * [carry_size >= QV_TEXT_CARRY_BYTES] gets the markup tags in force at that point, the last
 * voice, language and style tag as written ("" when none; style names of the built-in table or
 * [style:…]): carry followed by the rest speaks as the rest does in the whole text.
 * QV_E_INVALID (invalid UTF-8, a malformed tag with its character offset), QV_E_NOMEM. */
#define QV_TEXT_CARRY_BYTES 769 /* three tags of at most 256 bytes and a NUL */
enum qv_status qv_text_sentences(const char *text, size_t *n_bytes, char *carry,
                                 size_t carry_size);
/* qv_text_sentences cutting at clauses too (vLLM-Omni's split_granularity "clause": less to wait
 * for before the first audio): also after , ; (and closing quotes) followed by white space, and
 * after ，；：、 wherever they stand; "1," is not cut before "000". Same carry, same statuses. */
enum qv_status qv_text_clauses(const char *text, size_t *n_bytes, char *carry, size_t carry_size);

/* What a front end loads for styles and scripts (docs/markup.md), held while requests point at
 * it: generic style directions "NAME=FILE" (the x-vector of a .qvoice or .bin, e.g. from voicefmt
 * palette derive; strength 0.25), a style table file ("name = instruct text" lines), a dialogue
 * script (qv_script_to_markup, 600 ms pauses). Each may be absent (0, NULL). QV_E_INVALID,
 * QV_E_LIMIT (over 16 directions), QV_E_VOICE, QV_E_IO, QV_E_NOMEM; the detail names the file. */
typedef struct qv_styling qv_styling;
enum qv_status qv_styling_load(qv_styling **out, const char *const *dirs, int n_dirs,
                               const char *table_path, const char *script_path);
void qv_styling_apply(const qv_styling *y, qv_synth_request *r); /* style_dirs, style_table */
const char *qv_styling_script(const qv_styling *y); /* the script as markup, or NULL */
/* The script line a chunk at text_offset (qv_chunk_info) belongs to: its line number in the
 * file, and *index of *n_lines spoken lines. */
int qv_styling_script_line(const qv_styling *y, int text_offset, int *index, int *n_lines);
void qv_styling_free(qv_styling *y); /* accepts NULL */

/* A chunk (a text chunk, or one half of one split after a guard trip) that completed and passed
 * the guard, in order. codes: its frames [n_frames][16], valid during the call. verify: speaker
 * similarity of its audio to the voice (verify_model_dir), NAN when not computed or too short. */
typedef struct {
    uint32_t struct_size; /* sizeof(qv_chunk_info) of the library that calls */
    int index; /* 1, 2, ... over the chunks of this synthesis */
    int text_offset; /* character offset in the request's text of the last markup tag before
                        the chunk (0 when none): which span it belongs to */
    const int32_t *codes;
    int n_frames;
    double verify;
    int text_chunk;    /* which text chunk of the request (1, 2, ...; the halves of a split one
                          share it): progress for long text */
    int n_text_chunks; /* text chunks of the request (sentences packed up to max_chunk_chars) */
} qv_chunk_info;
typedef void (*qv_chunk_fn)(void *user, const qv_chunk_info *c);
/* Calls fn after each completed chunk of the next syntheses (NULL: none). */
void qv_synth_set_chunk_fn(qv_synth *s, qv_chunk_fn fn, void *user);

/* Asks the running qv_synth_run to stop (from any thread, also a signal handler); it returns
 * QV_E_CANCELLED within about one frame. A no-op when nothing runs. */
void qv_synth_cancel(qv_synth *s);

/* speak --json's summary of a synthesis written to output: {"ok":true,"output","seconds" (wall
 * time), "audio_seconds","rtf","frames","chunks","loudness_lufs" (when finite),"warning" (when
 * any)}, one line (release with qv_free); NULL when out of memory or st's struct_size is not
 * this library's (qv_last_error says which). */
char *qv_synth_summary_json(const char *output, double seconds, const qv_synth_stats *st,
                            double lufs);

/* ==== batch jobs (docs/batch.md) ============================================================== */

/* Many texts on one loaded model: each job is one line of JSON Lines, {"text", "output",
 * "speaker" | "voice", "language", "instruct", "seed"} (text and output required; unknown fields
 * are errors). Voices are opened once, on the first job naming them; consecutive jobs with one
 * seed share a synthesizer. One thread at a time per qv_jobs; qv_jobs_cancel from anywhere. */
typedef struct qv_jobs qv_jobs;
typedef struct {
    uint32_t struct_size;     /* sizeof(qv_jobs_options), set by qv_jobs_default_options */
    qv_synth_request request; /* every job's request (voice use, guard, chunking, max_seconds,
                                 force_*); its speaker, voice_path (a voice path or NAME),
                                 language and instruct are the defaults of a job naming none */
    double loudness_lufs;     /* each output's loudness target (qv_loudness_normalize); 0 none */
    uint32_t watermark;       /* QV_WATERMARK_OFF: outputs unmarked (still tagged); else each is
                                 marked for its job's voice and the model (qv_provenance_of) */
} qv_jobs_options;
/* qv_synth_default_request(), loudness 0, watermark QV_WATERMARK_DEFAULT */
qv_jobs_options qv_jobs_default_options(void);

/* p: the params of every job (a job's seed replaces p->seed), checked by qv_params_check.
 * QV_E_INVALID, QV_E_ABI (o's or o->request's struct_size), QV_E_NOMEM. */
enum qv_status qv_jobs_new(qv_jobs **out, const qv_model *m, const qv_params *p,
                           const qv_jobs_options *o);
/* Runs the job on line line_no of a jobs file and writes its audio to its output, atomically
 * (nothing on failure). *result_json gets the job's result line (release with qv_free):
 * {"line","ok"} then qv_synth_summary_json's fields (and "clipped_samples" when the loudness gain
 * clipped) or "error". A blank line is no job: QV_OK with *result_json NULL. Returns QV_OK or the
 * job's failure (QV_E_CANCELLED after qv_jobs_cancel); qv_last_error() is then the result's
 * "error". */
enum qv_status qv_jobs_run_line(qv_jobs *j, int line_no, const char *line, char **result_json);
/* Every line of in, in order, until its end or a cancelled job: fn (may be NULL) gets each job's
 * line number, status, result line (NULL when out of memory) and error ("" when ok). Counts the
 * jobs (blank lines are none) and the failed ones. QV_OK when every job succeeded, else the last
 * failure's status (and qv_last_error() its error). */
typedef void (*qv_job_fn)(void *user, int line_no, enum qv_status st, const char *result_json,
                          const char *err);
enum qv_status qv_jobs_run_file(qv_jobs *j, FILE *in, qv_job_fn fn, void *user, int *n_jobs,
                                int *n_failed);
void qv_jobs_cancel(qv_jobs *j); /* stops the running job (any thread, a signal handler) */
void qv_jobs_free(qv_jobs *j);   /* accepts NULL */

/* ==== cloning: reference audio to a voice file ================================================ */

/* What cloning needs of a Base checkpoint (speaker encoder, speech-tokenizer encoder, text side,
 * identity), loaded once. Read-only after load: one cloner may serve concurrent qv_clone_run
 * calls. */
typedef struct qv_cloner qv_cloner;

/* n_threads as qv_threads_resolve. QV_E_MODEL for a model that is not a Base (the detail says
 * so). */
enum qv_status qv_cloner_load(qv_cloner **out, const char *base_dir, int n_threads);
void qv_cloner_free(qv_cloner *c); /* accepts NULL */
/* The SHA-256 fingerprint of c's Base checkpoint (the source a cloned voice file records), for
 * keying caches of what c clones. */
void qv_cloner_fingerprint(const qv_cloner *c, uint8_t out[32]);

/* The part of the (trimmed) reference the ICL prompt uses; the transcript must say exactly what
 * is spoken in it (docs/robustness.md). */
enum qv_icl_window {
    QV_ICL_FULL,  /* the whole trimmed clip, refused when longer than QV_ICL_MAX_SECONDS */
    QV_ICL_AUTO,  /* the cleanest 10-15 s window (reported: give that span's transcript) */
    QV_ICL_RANGE  /* icl_start_s..icl_end_s seconds of the clip as loaded, 3-30 s after trim */
};
#define QV_ICL_MAX_SECONDS 30.0

typedef struct {
    uint32_t struct_size;     /* sizeof(qv_clone_request), set by qv_clone_default_request */
    const char *audio_path;   /* reference audio in any libsndfile format, or NULL and: */
    const float *pcm;         /* mono samples at sample_rate_hz */
    int64_t n_samples;
    int sample_rate_hz;
    const char *ref_text;     /* transcript of the ICL span: adds ICL codes (NULL: x-vector only) */
    const char *language;     /* stored in the voice (NULL: unset) */
    const char *name;         /* voice name (NULL: the audio file's base name, or none) */
    const char *consent;      /* consent record (docs/provenance.md): the statement the speaker
                                 gave, typed or transcribed (NULL: no record unless recorded) */
    double max_seconds;       /* audio used (30), 3..3600 */
    int hygiene;              /* 1: trim, loudness, ICL span, transcript checks (docs/robustness.md) */
    int with_wovr;            /* 1: carry the Base text side (WOVR) */
    const char *target_cv_dir; /* CustomVoice directory: add a weight delta for it, or NULL */
    enum qv_icl_window icl_window; /* needs hygiene; without it the whole clip is the span */
    double icl_start_s, icl_end_s; /* QV_ICL_RANGE */
    int allow_xvector_fallback; /* 1: a transcript that does not fit drops ICL instead of failing */
    double speaker_threshold; /* second-speaker warning below this cosine, -1..1 (0.5) */
    const char *plot_path;    /* also write the log-mel PNG of the reference there, or NULL */
    const char *consent_speaker;   /* who consented (NULL: not recorded) */
    const char *consent_scope;     /* to what: the uses agreed to (NULL: not recorded) */
    const char *consent_recording; /* audio file of the spoken consent: method "recording",
                                      its SHA-256 stored (NULL: method "typed") */
} qv_clone_request;

/* hygiene, with_wovr = 1; max_seconds = 30; icl_window FULL; speaker_threshold 0.5; everything
 * else 0/NULL. */
qv_clone_request qv_clone_default_request(void);
/* Sets r's icl_window (and icl_start_s, icl_end_s) from "full", "auto" or "START-END" seconds
 * (0 <= START < END <= 3600), as `clone --icl-window` and the server's upload field take it.
 * QV_E_INVALID naming the text. */
enum qv_status qv_icl_window_parse(const char *s, qv_clone_request *r);

/* Clones r into out_path, written atomically (nothing is left behind on failure or kill; the plot
 * neither). out_path NULL: everything but the writing (e.g. to see the QV_ICL_AUTO span first).
 * *report_json (may be NULL; release with qv_free) gets a JSON object, on failure too ("ok":
 * false, "error"):
 * the voice's identity, sizes, the audio (integrated loudness in LUFS), the hygiene report (used
 * span, transcript fit, level) and its human text ("hygiene_text"), warnings, timings. QV_E_AUDIO
 * for unusable audio, QV_E_INVALID for a bad request or a transcript that does not fit, QV_E_MODEL,
 * QV_E_IO, QV_E_ABI; the detail names the problem ("FILE: problem"). */
enum qv_status qv_clone_run(const qv_cloner *c, const qv_clone_request *r, const char *out_path,
                            char **report_json);

/* Speaker similarity of a and b, each a voice file (.qvoice or .bin: its x-vector) or reference
 * audio (its x-vector computed with c over at most max_seconds; c may be NULL when both are voice
 * files). *report_json: {"a", "b", "cosine", "norm_a", "norm_b", "dim"} (may be NULL; release
 * with qv_free). */
enum qv_status qv_clone_similarity(const qv_cloner *c, const char *a, const char *b,
                                   double max_seconds, double *cosine, char **report_json);

/* The x-vector of path: a voice file's (.qvoice or .bin; c may be NULL) or that of reference
 * audio (at most max_seconds, computed with c's speaker encoder, no hygiene). *xvec: *dim floats,
 * release with qv_free. QV_E_VOICE, QV_E_AUDIO, QV_E_INVALID (audio without c), QV_E_NOMEM; the
 * detail names the file. */
enum qv_status qv_clone_xvector(const qv_cloner *c, const char *path, double max_seconds,
                                float **xvec, int *dim);

/* ==== audio ================================================================================== */

/* Integrated loudness (EBU R128 / ITU-R BS.1770 with gating, libebur128) of mono 24 kHz pcm in
 * LUFS; -HUGE_VAL when nothing is above the -70 LUFS absolute gate. QV_OK or QV_E_NOMEM. */
enum qv_status qv_loudness_lufs(const float *pcm, int64_t n_samples, double *lufs);

/* ==== watermark (docs/provenance.md) ========================================================= */

/* An inaudible mark in the samples: spread-transform dither modulation of the log energies of
 * band × 10.7 ms STFT tiles over 188 Hz - 6.8 kHz, 35 dB or more under the signal,
 * carrying a 32-bit payload (+ CRC-16, in a rate-1/2 convolutional code) every 2.1 s, in blocks
 * of QV_WATERMARK_DELAY samples (107 ms).
 * Marking a block needs all of it. The first block of a signal is left unmarked and a stream
 * gives it back at once, so the mark costs a stream's first audio nothing; each later sample
 * comes out when its block is complete, at most QV_WATERMARK_DELAY - 1 samples after it went
 * in. A stream equals the whole signal marked at once (qv_watermark_mark), sample for sample.
 * A qv_watermark belongs to one thread at a time; detection keeps no state. */
#define QV_WATERMARK_SYNTHETIC 0x80000000u /* payload bit: the audio is machine-made (always set) */
#define QV_WATERMARK_DELAY 2560            /* samples in a block: a stream holds fewer back */
#define QV_WATERMARK_PRESENT 5.4           /* a window's score from which the mark is present */
#define QV_WATERMARK_PRESENT_LONG 6.5      /* the same for a window longer than 3 s */
typedef struct qv_watermark qv_watermark;

/* The payload tying audio to a voice file and a model: QV_WATERMARK_SYNTHETIC | the first 31
 * bits of SHA-256(voice_id "\n" model_fingerprint). NULL strings count as "". */
uint32_t qv_watermark_payload(const char *voice_id, const char *model_fingerprint);
/* A marker for one stream carrying payload, which must have QV_WATERMARK_SYNTHETIC set (the
 * detector takes it as known). QV_OK, QV_E_INVALID (flag clear) or QV_E_NOMEM. */
enum qv_status qv_watermark_new(qv_watermark **out, uint32_t payload);
void qv_watermark_free(qv_watermark *w); /* accepts NULL */
/* Takes mono 24 kHz pcm[n_samples], continuing the stream of earlier calls, and writes the
 * stream's next final samples to out: all of those taken while the first block lasts, then each
 * later block whole once its last sample is in. Returns how many (0 to n_samples +
 * QV_WATERMARK_DELAY - 1); out, not overlapping pcm, has room for n_samples +
 * QV_WATERMARK_DELAY. Never fails. */
int64_t qv_watermark_apply(qv_watermark *w, const float *pcm, int64_t n_samples, float *out);
/* Ends a stream: the samples still held (0 to QV_WATERMARK_DELAY - 1), marked, into tail;
 * returns how many. */
int qv_watermark_flush(qv_watermark *w, float tail[QV_WATERMARK_DELAY]);
/* Marks a whole signal in place, as a stream of it comes out. QV_OK, QV_E_INVALID (pcm NULL, or
 * the flag clear), QV_E_NOMEM. */
enum qv_status qv_watermark_mark(uint32_t payload, float *pcm, int64_t n_samples);

#define QV_WATERMARK_MAX_RANGES 32
typedef struct {
    double start_s, end_s;  /* where the mark is (seconds from the start of the input) */
    double score;           /* best 3 s window score in the range (QV_WATERMARK_PRESENT on); in
                               a range no 3 s window finds, its best longer window's
                               (QV_WATERMARK_PRESENT_LONG on) */
    int payload_ok;         /* 1: the payload's CRC-16 matched (decoded over the whole range) */
    uint32_t payload;       /* valid when payload_ok */
    double payload_score;   /* when payload_ok, how sure: the soft symbols' agreement with the
                               payload's code, in standard deviations of unmarked audio's */
} qv_watermark_range;

typedef struct {
    uint32_t struct_size;
    int present;            /* 1 when some 3 s window, or the whole input if it holds two
                               windows or more, scores QV_WATERMARK_PRESENT or more, or a
                               longer window QV_WATERMARK_PRESENT_LONG or more */
    double score;           /* best 3 s window score (the best of 1280 about-N(0,1) scores per
                               window for unmarked audio) */
    double score_all;       /* score of the whole input as one window */
    qv_watermark_range all; /* the whole input as one range (its payload decoded when present) */
    double seconds;         /* length of the input */
    int n_ranges;           /* ranges[0..n_ranges), in time order */
    int ranges_dropped;     /* marked ranges after the first QV_WATERMARK_MAX_RANGES */
    qv_watermark_range ranges[QV_WATERMARK_MAX_RANGES];
} qv_watermark_report;
qv_watermark_report qv_watermark_default_report(void);

/* Looks for the mark in mono 24 kHz pcm: 27-block (2.9 s) windows every 107 ms block (the
 * whole input when shorter; under 1.3 s nothing is said), at block grids every 8 samples; and,
 * where the input holds two of them, windows of 54, 108, 216... blocks (a long marked stretch
 * that a codec left too little of for 3 s: Opus at 32 kbit/s), one range where they overlap.
 * Allocates about 14 KB per second of input (the projections of every block at 10 of the 320
 * grid offsets at a time). QV_OK (report filled), QV_E_ABI,
 * QV_E_INVALID (pcm NULL), QV_E_NOMEM, QV_E_LIMIT. */
enum qv_status qv_watermark_detect(const float *pcm, int64_t n_samples, qv_watermark_report *r);
/* The same on an audio file in any format libsndfile reads (channels averaged, resampled to
 * 24 kHz; at most max_seconds, <= 0: all). QV_E_AUDIO names the file when it cannot be read or
 * is under 3 s or silent. */
enum qv_status qv_watermark_detect_file(const char *path, double max_seconds,
                                        qv_watermark_report *r);
/* r as one line of JSON (release with qv_free): {"seconds","present","score","score_all",
 * "whole" (a range),"ranges" [...],"ranges_dropped"}, a range being {"start_s","end_s","score",
 * "payload_ok","payload" (8 hex digits) and "synthetic" (when payload_ok),"payload_score"}: what
 * `voicefmt detect --json` and the server's POST /v1/audio/detect report. NULL (qv_last_error)
 * for another struct_size or out of memory. */
char *qv_watermark_report_json(const qv_watermark_report *r);
/* An output's level: scales pcm in place to an integrated loudness of target_lufs (0: leaves it
 * as generated; else QV_LOUDNESS_MIN_LUFS..MAX: -23 is broadcast, -16 podcasts), clipping samples
 * beyond full scale (counted in *n_clipped), and gives the result's loudness in *lufs (-HUGE_VAL
 * when unmeasurable). QV_E_INVALID for a target out of range, QV_E_AUDIO when a target is given
 * and there is nothing to measure (silent, or shorter than one 0.4 s block), QV_E_NOMEM; the
 * detail says which ("loudness: ..."). */
#define QV_LOUDNESS_MIN_LUFS (-70.0)
#define QV_LOUDNESS_MAX_LUFS (-1.0)
enum qv_status qv_loudness_normalize(float *pcm, int64_t n_samples, double target_lufs,
                                     int64_t *n_clipped, double *lufs);

/* ==== audio out: the one encoder ============================================================= */

/* Output formats of 24 kHz mono audio: name (also the file extension) and MIME type. WAV and PCM
 * are 16-bit (PCM raw s16le); FLAC is 16-bit; Ogg Vorbis, Opus and MP3 depend on how libsndfile
 * was built (qv_format_writable); AAC is AAC-LC at 64 kbit/s in ADTS frames (an ID3v2 tag in
 * front), through libavcodec loaded at run time the first time it is asked for (Debian's
 * libavcodec59; $QV_AVCODEC names another library). WAV, PCM and AAC can stream. */
#define QV_FORMAT_LIST(X)                                                                          \
    X(QV_FORMAT_WAV, "wav", "audio/wav")                                                           \
    X(QV_FORMAT_PCM, "pcm", "audio/pcm")                                                           \
    X(QV_FORMAT_FLAC, "flac", "audio/flac")                                                        \
    X(QV_FORMAT_OGG, "ogg", "audio/ogg")                                                           \
    X(QV_FORMAT_OPUS, "opus", "audio/ogg")                                                         \
    X(QV_FORMAT_MP3, "mp3", "audio/mpeg")                                                          \
    X(QV_FORMAT_AAC, "aac", "audio/aac")
#define QV_FORMAT_ENUM_(id, name, mime) id,
enum qv_format { QV_FORMAT_LIST(QV_FORMAT_ENUM_) QV_FORMAT_COUNT };
#undef QV_FORMAT_ENUM_
#define QV_FORMAT_NAMES "wav, pcm, flac, ogg, opus, mp3 or aac" /* for error texts */

int qv_format_parse(const char *name);   /* enum qv_format by name (any case), or -1 */
int qv_format_of_path(const char *path); /* by the file's extension, or -1 */
const char *qv_format_name(int format);  /* static; NULL out of range */
const char *qv_format_mime(int format);  /* static; NULL out of range */
/* 1 when this build can write it; 0 leaves the reason for qv_last_error() (e.g. "aac: cannot
 * load libavcodec.so.59 (install Debian's libavcodec59 ...)"). */
int qv_format_writable(int format);
int qv_format_progressive(int format);   /* 1 for WAV, PCM and AAC: written as it comes */

/* The one float -> 16-bit conversion: each sample clamped to [-1, 1], x * 32767 rounded to
 * nearest, little-endian into out[2 * n]. */
void qv_pcm_s16le(const float *pcm, int64_t n, uint8_t *out);

/* Payloads for qv_watermark_new, and qv_jobs_options.watermark's off switch. */
#define QV_WATERMARK_OFF 0u
#define QV_WATERMARK_DEFAULT QV_WATERMARK_SYNTHETIC

/* Where an output came from (docs/provenance.md, "Metadata"): every encoder marks the samples
 * with the watermark of payload qv_watermark_payload(voice_id, model_fingerprint) (the synthetic
 * flag alone when both are empty) unless watermark is 0, and writes the provenance tags into the
 * container (WAV LIST/INFO and a `qvpr` chunk, Vorbis comments, ID3v2; raw PCM has no
 * container). A NULL qv_provenance is raw output: the samples exactly as given, no tags. In the
 * tags, bytes of an id outside printable ASCII (and ';') become '?'. */
#define QV_PROVENANCE_MAX_ID 128
typedef struct {
    uint32_t struct_size; /* sizeof(qv_provenance), set by qv_provenance_default */
    int watermark;        /* 1: mark the samples; 0: tags only */
    char voice_id[QV_PROVENANCE_MAX_ID + 1]; /* qv_voice_id, "speaker:NAME" for a preset, or "" */
    char model_fingerprint[65];              /* qv_model_fingerprint, or "" (unknown) */
    int64_t utc;          /* creation time, seconds since 1970; < 0: not written */
} qv_provenance;
/* watermark 1, no ids, utc now — or $SOURCE_DATE_EPOCH when set (reproducible output). */
qv_provenance qv_provenance_default(void);
/* p's key set as the containers carry it, "key=value" joined by "; " (for a transport without a
 * container, e.g. an HTTP header of raw PCM), into out. QV_OK, QV_E_INVALID (NULL), QV_E_ABI. */
#define QV_PROVENANCE_TEXT_BYTES 1024
enum qv_status qv_provenance_text(const qv_provenance *p, char out[QV_PROVENANCE_TEXT_BYTES]);
/* The key set a qvoice output's container says of it (its comment after "qvoice provenance: ")
 * of the audio file at path (any format libsndfile reads) into out; "" when it says none (raw
 * output, stripped tags, another program's file). Tags are what a file claims, easily removed
 * or forged; the watermark is in the samples. QV_OK, QV_E_INVALID (NULL), QV_E_AUDIO (cannot
 * be read: the detail names path). */
enum qv_status qv_provenance_read(const char *path, char out[QV_PROVENANCE_TEXT_BYTES]);
/* The same with the ids of a synthesis on m (may be NULL) with voice v, or else the preset
 * speaker (may be NULL). */
qv_provenance qv_provenance_of(const qv_model *m, const qv_voice *v, const char *speaker);

/* A whole file of format from pcm[n_samples] (24 kHz mono) with provenance prov (NULL: raw),
 * into *out (release with qv_free), *n_bytes long. QV_E_INVALID, QV_E_UNSUPPORTED (this build
 * cannot write the format), QV_E_NOMEM, QV_E_LIMIT, QV_E_IO (the codec failed), QV_E_ABI (prov's
 * struct_size); the detail names the format. */
enum qv_status qv_audio_encode(int format, const float *pcm, int64_t n_samples,
                               const qv_provenance *prov, uint8_t **out, size_t *n_bytes);
/* QV_OK when format can be written at sample_rate_hz: QV_OUT_RATE_MIN_HZ..MAX_HZ, and for opus
 * one of 8000, 12000, 16000, 24000, 48000, for mp3 and aac one of the MPEG rates (8000, 11025,
 * 12000, 16000, 22050, 24000, 32000, 44100, 48000). Else QV_E_INVALID, the detail
 * "sample_rate N: ..." naming the values allowed. */
enum qv_status qv_format_rate_check(int format, int sample_rate_hz);
/* qv_audio_encode with the marked 24 kHz samples resampled to sample_rate_hz (libsamplerate's
 * medium sinc; QV_SAMPLE_RATE_HZ: none) before the codec; qv_format_rate_check's statuses too.
 * qv_audio_encode is this at QV_SAMPLE_RATE_HZ. */
enum qv_status qv_audio_encode_at(int format, int sample_rate_hz, const float *pcm,
                                  int64_t n_samples, const qv_provenance *prov, uint8_t **out,
                                  size_t *n_bytes);
/* qv_audio_encode into the stream f (flushed; e.g. stdout). Its statuses, or QV_E_IO. */
enum qv_status qv_audio_write_stream(FILE *f, int format, const float *pcm, int64_t n_samples,
                                     const qv_provenance *prov);
/* qv_audio_encode into path, written atomically (qv_outfile). Its statuses, or QV_E_IO; the
 * detail is "PATH: problem". */
enum qv_status qv_audio_write(const char *path, int format, const float *pcm, int64_t n_samples,
                              const qv_provenance *prov);
/* qv_audio_write with the samples resampled to sample_rate_hz (qv_audio_encode_at). */
enum qv_status qv_audio_write_at(const char *path, int format, int sample_rate_hz,
                                 const float *pcm, int64_t n_samples, const qv_provenance *prov);

/* A growing buffer of samples, for output that needs the whole audio first (a one-shot file,
 * loudness): qv_pcm_collect is a qv_pcm_fn with user = a qv_pcm_buffer zeroed but for its
 * struct_size (the caller sets it: {.struct_size = sizeof b}); it returns 1 (stop) and sets failed
 * when out of memory or given another struct_size (qv_last_error says which). Release pcm with
 * qv_free. */
typedef struct {
    uint32_t struct_size; /* sizeof(qv_pcm_buffer), set by the caller */
    float *pcm;
    int64_t n, cap;
    int failed;
} qv_pcm_buffer;
int qv_pcm_collect(void *user, const float *pcm, int n_samples);

/* A stream of WAV, PCM or AAC, written block by block as audio arrives (a WAV starts with a header
 * of unknown length; an AAC stream with its ID3v2 tag, then each 1024-sample frame once encoded,
 * the last ones at close). The sink is either fn (each qv_encoder_write calls it at most once
 * with the block: the first WAV or AAC block carries the header or tag; an AAC call that completes
 * no frame passes nothing) or file: a seekable file gets a WAV header rewritten with the length so
 * far after each block (playable while it grows, complete at the end). One thread at a time.
 * QV_E_UNSUPPORTED for other formats (and for aac without libavcodec), QV_E_INVALID, QV_E_NOMEM.
 * Every failure of these three leaves its detail for qv_last_error(). */
typedef int (*qv_write_fn)(void *user, const void *data, size_t n_bytes); /* 0 ok */
typedef struct qv_encoder qv_encoder;
enum qv_status qv_encoder_new(qv_encoder **out, int format, const qv_provenance *prov,
                              qv_write_fn fn, void *user, FILE *file);
/* The stream's output rate (default QV_SAMPLE_RATE_HZ), before the first write: blocks are
 * marked at 24 kHz, then resampled with state kept across blocks, so the stream's samples equal
 * qv_audio_encode_at's of the whole. qv_format_rate_check's statuses; QV_E_INVALID after a
 * write; QV_E_NOMEM. */
enum qv_status qv_encoder_set_rate(qv_encoder *e, int sample_rate_hz);
/* Converts and writes one block. QV_E_IO when the sink failed, QV_E_NOMEM. */
enum qv_status qv_encoder_write(qv_encoder *e, const float *pcm, int n_samples);
/* Ends the stream (an empty WAV still gets its header, an empty AAC its tag) and frees e; accepts NULL. QV_E_IO when
 * that last write failed. Does not close file. */
enum qv_status qv_encoder_close(qv_encoder *e);

/* ==== files ================================================================================== */

/* The library's atomic writer, for a tool's own outputs (WAV, codes, extracts): the file appears
 * at path complete on commit (replacing an old one), or not at all. A writer killed before commit
 * leaves nothing behind where Linux allows it (an unnamed O_TMPFILE); elsewhere its temp file
 * ".NAME.tmp.PID.N" is removed by the next write to that path. One writer per thread. */
typedef struct qv_outfile qv_outfile;

/* QV_OK, or QV_E_IO ("PATH: problem"). */
enum qv_status qv_outfile_open(qv_outfile **out, const char *path);
int qv_outfile_fd(const qv_outfile *f);     /* write here (e.g. sf_open_fd); do not close it */
FILE *qv_outfile_stream(qv_outfile *f);     /* or here (owned by f; NULL when out of memory) */
/* Flush, fsync, put in place, fsync the directory; frees f. QV_OK or QV_E_IO (nothing left). */
enum qv_status qv_outfile_commit(qv_outfile *f);
void qv_outfile_abort(qv_outfile *f); /* discards and frees; accepts NULL */

/* A whole file (regular, pipe, /dev/stdin) into *data (release with qv_free) with a NUL after
 * its *n_bytes bytes; *data = NULL and QV_E_IO when it cannot be read, QV_E_LIMIT when it
 * exceeds max_bytes, QV_E_NOMEM. */
enum qv_status qv_file_read(const char *path, size_t max_bytes, char **data, size_t *n_bytes);

#ifdef __cplusplus
}
#endif

#endif
