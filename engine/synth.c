/* synth.c — qv_synth: text to 24 kHz audio (include/qvoice.h). One call runs the whole pipeline:
 * the voice -> prompt mapping (voice.c), the weight delta (voice_load.c), long text cut into chunks
 * with [pause:] silences (textchunk.h), each chunk generated frame by frame under the runaway
 * guard (guard.h) while the speech decoder runs on its own thread, the chunk's leading silence
 * trimmed, chunks joined with a crossfade, optional speaker verification, statistics.
 *
 * Threads (n = qv_params.n_threads): the caller's thread drives the session and calls the PCM
 * callback. Streaming, one decoder thread per chunk decodes the frames as they come
 * (engine/speech_decoder.h) and hands its audio back through a mutex-guarded buffer; the
 * generation pool then has n - 1 threads (a pool sharing its cores with the decoder waits on
 * preempted workers at every barrier: measured 3x slower), but n for the prefill and the first
 * frames; until the piece is heard the producer waits for each block, and the decoder borrows
 * that idle n-thread pool (qve_dec_stream_set_pool) to split the block over every core. Whole
 * chunks (n > 1) are generated with n threads while the decoder thread runs at idle priority
 * (SCHED_IDLE) beside them and the pool's workers sleep at once instead of polling: the decoder
 * only takes cycles generation leaves (the waits between pool jobs, the serial code between
 * matvecs), and a waking worker takes its core back at once. What is left when generation ends
 * is decoded at normal priority, lent the n-thread pool. With one thread the chunk is decoded after
 * generation on the caller's thread. The samples are the same bits in every case.
 *
 * Streaming: audio flows chunk -> joined output -> callback as soon as it is decoded, except the
 * last crossfade window of the joined output (the next chunk may still blend into it) and a
 * chunk's leading quiet stretch (it may be trimmed). The lead trim is causal
 * (qve_audio_lead_start), so streamed and whole-chunk delivery give the same samples.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "engine/guard.h"
#include "engine/markup.h"
#include "engine/model.h"
#include "engine/speech_decoder.h"
#include "engine/textchunk.h"
#include "engine/voice_load.h"
#include "features/features.h"
#include "util/api.h"

#define MS(ms) ((int64_t)(ms)*QV_SAMPLE_RATE_HZ / 1000)

struct qv_synth {
    qv_model *m; /* shared; synth.c writes only the lazily loaded decoder, the synth count and,
                    while it is the model's only synth, a voice's weight delta */
    qv_params p;
    qv_session *s; /* its own pool has n_threads - 1 threads (streaming: the decoder thread
                      takes the last core) */
    qvk_pool *full; /* n_threads threads (NULL when 1): used while no decoder thread runs */
    atomic_int cancel;
    qv_chunk_fn chunk_fn;
    void *chunk_user;
    /* verification: the speaker encoder of verify_dir, loaded on first use */
    char verify_dir[1024];
    qva_ecapa *ecapa;
    qva_mel *mel;
    float *xvec;
    /* decoded audio handed over by the decoder thread */
    pthread_mutex_t mu;
    qve_audio_buf q;
    int q_nomem;
    /* the current chunk's codes */
    int32_t *codes;
    size_t cap_frames;
};

/* ==== model decoder ======================================================================== */

static const qve_decoder *model_decoder(qv_model *m, char *err, size_t es) {
    pthread_mutex_lock(&m->dec_lock);
    if (!m->dec) m->dec = qve_decoder_load(m->ck, err, es);
    const qve_decoder *d = m->dec;
    pthread_mutex_unlock(&m->dec_lock);
    return d;
}

enum qv_status qv_model_decode_codes(const qv_model *cm, const int32_t *codes, int n_frames,
                                     int n_threads, float *wav) {
    qv_model *m = (qv_model *)(uintptr_t)cm; /* only the shared decoder is added */
    char err[QVU_DETAIL_SIZE] = "";
    const qve_decoder *d = model_decoder(m, err, sizeof err);
    if (!d) return qvu_fail(QV_E_MODEL, err);
    /* the threads split the decoder's output channels over a pool of this call's own: the same
       samples for any count, and nothing process-wide changes */
    const int n = qv_threads_resolve(n_threads);
    qvk_pool *pool = n > 1 ? qvk_pool_create(n) : NULL;
    if (n > 1 && !pool) return qvu_failf(QV_E_NOMEM, "%s: %d decoder threads", m->ck->dir, n);
    int rc = qve_decoder_decode_pool(d, pool, codes, n_frames, wav, err, sizeof err);
    qvk_pool_free(pool);
    return rc ? qvu_fail(QV_E_INVALID, err) : QV_OK;
}

/* ==== qv_synth ============================================================================== */

qv_synth_request qv_synth_default_request(void) {
    qv_synth_request r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.use_icl = r.use_wdelta = r.guard = r.trim_lead = 1;
    r.max_chunk_chars = QVE_MAX_CHUNK_CHARS_DEFAULT;
    r.speed = 1.0;
    return r;
}

/* The synthesizer's session (again after a weight delta); qv_last_error() has the detail. */
static enum qv_status new_session(qv_synth *s) {
    qv_params p = s->p;
    p.n_threads = s->p.n_threads > 1 ? s->p.n_threads - 1 : 1; /* the decoder thread has one */
    qv_session_free(s->s);
    return qv_session_new(&s->s, s->m, &p);
}

enum qv_status qv_synth_new(qv_synth **out, const qv_model *m, const qv_params *p) {
    *out = NULL;
    if (!m || !p) return qvu_fail(QV_E_INVALID, "qv_synth_new: NULL argument");
    if (p->struct_size != sizeof *p) return qvu_check_size("qv_params", p->struct_size, sizeof *p);
    const int n = qv_threads_resolve(p->n_threads);
    if (n > QVE_MAX_THREADS) /* checked here: the session gets one thread less */
        return qvu_failf(QV_E_INVALID, "n_threads: expected 1..%d, found %d", QVE_MAX_THREADS, n);
    qv_synth *s = calloc(1, sizeof *s);
    if (!s) return qvu_failf(QV_E_NOMEM, "%s: synthesizer: out of memory", m->ck->dir);
    s->m = (qv_model *)(uintptr_t)m;
    s->p = *p;
    s->p.n_threads = n;
    pthread_mutex_init(&s->mu, NULL);
    __atomic_add_fetch(&s->m->n_synths, 1, __ATOMIC_SEQ_CST);
    enum qv_status st = new_session(s);
    if (!st && s->p.n_threads > 1 && !(s->full = qvk_pool_create(s->p.n_threads)))
        st = qvu_failf(QV_E_NOMEM, "%s: pool of %d threads: out of memory", m->ck->dir,
                       s->p.n_threads);
    if (st) {
        qv_synth_free(s);
        return st;
    }
    *out = s;
    return QV_OK;
}

enum qv_status qv_synth_set_params(qv_synth *s, const qv_params *p) {
    if (!s || !p) return qvu_fail(QV_E_INVALID, "qv_synth_set_params: NULL argument");
    if (p->struct_size != sizeof *p) return qvu_check_size("qv_params", p->struct_size, sizeof *p);
    if (qv_threads_resolve(p->n_threads) != s->p.n_threads)
        return qvu_failf(QV_E_INVALID, "n_threads %d: the synthesizer has %d", p->n_threads,
                         s->p.n_threads);
    qv_params q = *p;
    q.n_threads = s->s->p.n_threads; /* the session's pool leaves the decoder thread a core */
    enum qv_status st = qv_session_set_params(s->s, &q);
    if (st) return st;
    const int n = s->p.n_threads;
    s->p = *p;
    s->p.n_threads = n;
    return QV_OK;
}

void qv_synth_free(qv_synth *s) {
    if (!s) return;
    __atomic_sub_fetch(&s->m->n_synths, 1, __ATOMIC_SEQ_CST);
    qv_session_free(s->s);
    qvk_pool_free(s->full);
    qva_ecapa_free(s->ecapa);
    qva_mel_free(s->mel);
    free(s->xvec);
    qve_audio_buf_free(&s->q);
    pthread_mutex_destroy(&s->mu);
    free(s->codes);
    free(s);
}

void qv_synth_cancel(qv_synth *s) {
    if (s) atomic_store(&s->cancel, 1);
}

void qv_synth_set_chunk_fn(qv_synth *s, qv_chunk_fn fn, void *user) {
    s->chunk_fn = fn;
    s->chunk_user = user;
}

/* ==== one call ============================================================================== */

#define QVE_SPAN_VOICES 16 /* distinct [voice:NAME] of one text */

typedef struct {
    char name[128];
    qv_voice *v; /* NULL: a preset speaker of that name */
    qv_request req;
    qv_text_bridge bridge;
} span_voice;

typedef struct {
    qv_synth *s;
    const qv_synth_request *r;
    qv_request base; /* speaker / voice prompt; the text is set per chunk */
    const qve_decoder *dec; /* once decoder() joined the loader */
    pthread_t loader;       /* loads the model's decoder while the tokenizer opens and the
                               first chunk prefills */
    int loading;
    atomic_int loaded; /* the loader has finished */
    char dec_err[256];
    const float *ref_xvec; /* the voice's x-vector when verifying */
    int max_frames, stream, n_pieces, n_text_chunks, text_chunk;
    qv_pcm_fn fn;
    void *user;
    qva_stretch *stretch; /* speed != 1: between the joined output and fn */
    qv_synth_stats *st;
    double t0;
    qve_audio_buf out; /* joined audio not yet delivered */
    enum qv_status status; /* of a failure (-1 returns) */
    char msg[QVE_ERR_MAX];
    /* markup spans (docs/markup.md): the settings of the text that follows the last tags */
    qve_styles styles;
    const qv_voice *req_voice; /* the request's voice (NULL: preset speaker) */
    qv_request req_base;       /* its prompt, as prepare() built it */
    const qve_chunk *span_style, *span_voice, *span_lang; /* the last tag of each kind, or NULL */
    int span_dirty, span_offset;
    span_voice voices[QVE_SPAN_VOICES]; /* voices [voice:NAME] opened, kept for the call */
    int n_voices;
    char *instruct; /* the span's combined instruct text */
    float *xvec;    /* the span's x-vector after its palette entry */
} run;

/* One chunk (or half) being synthesized. */
typedef struct {
    qve_audio_buf pb; /* its decoded audio, all of it */
    int64_t scanned;  /* samples judged by the lead trim */
    int64_t start;    /* first sample kept (-1: still in the leading silence) */
    int64_t pos;      /* next sample to join */
    int joined;       /* some of it is in the joined output: the stream has heard it */
    int judged;       /* frames the guard's silence rule has seen */
    int n_frames, capped;
    qve_guard g;
} piece;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

__attribute__((format(printf, 3, 4))) static int fail(run *c, enum qv_status st,
                                                     const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->status = st;
    return -1;
}

/* qva_stretch_fn, and the plain path: samples to the caller's fn. */
static int hand_on(void *user, const float *x, int n) {
    run *c = user;
    if (n <= 0) return 0;
    if (atomic_load(&c->s->cancel) || (c->fn && c->fn(c->user, x, n))) return 1;
    if (!c->st->n_samples) c->st->first_audio_s = now_s() - c->t0;
    c->st->n_samples += n;
    return 0;
}

/* Delivers the joined output except its last keep samples (through the stretcher when the
 * speed is not 1; final: the synthesis has ended, so the stretcher flushes). */
static int deliver_final(run *c, int64_t keep, int final) {
    int64_t n = c->out.n - keep;
    if (n < 0 || (n == 0 && !(final && c->stretch))) return 0;
    int stop = c->stretch ? qva_stretch_run(c->stretch, c->out.x, n, final, hand_on, c)
                          : hand_on(c, c->out.x, (int)n);
    if (stop) {
        atomic_store(&c->s->cancel, 1);
        return fail(c, QV_E_CANCELLED, "%s", "cancelled");
    }
    memmove(c->out.x, c->out.x + n, (size_t)keep * sizeof *c->out.x);
    c->out.n = keep;
    return 0;
}

static int deliver(run *c, int64_t keep) {
    return deliver_final(c, keep, 0);
}

/* Decoder thread: queue the audio for the synthesis thread; stop when cancelled. */
static int on_decoded(void *user, const float *pcm, int n) {
    qv_synth *s = user;
    pthread_mutex_lock(&s->mu);
    if (qve_audio_append(&s->q, pcm, n, 0)) s->q_nomem = 1;
    int stop = s->q_nomem || atomic_load(&s->cancel);
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* Moves the decoded audio into the piece, runs the guard's silence rule and the lead trim over
 * it, and joins what is final (everything when last; while streaming, what the trim and the
 * crossfade no longer need). 0, 1 guard trip (c->msg), -1 failure. */
static int take_audio(run *c, piece *pc, int last) {
    qv_synth *s = c->s;
    pthread_mutex_lock(&s->mu);
    int bad = s->q_nomem || qve_audio_append(&pc->pb, s->q.x, s->q.n, 0);
    s->q.n = 0;
    pthread_mutex_unlock(&s->mu);
    if (bad) return fail(c, QV_E_NOMEM, "%s", "out of memory for decoded audio");
    const int nf = (int)(pc->pb.n / QV_SAMPLES_PER_FRAME);
    if (c->r->guard && nf > pc->judged &&
        qve_guard_audio(&pc->g, pc->pb.x + (size_t)pc->judged * QV_SAMPLES_PER_FRAME, pc->judged,
                        nf - pc->judged, QV_SAMPLES_PER_FRAME))
        return snprintf(c->msg, sizeof c->msg, "%s", qve_guard_message(&pc->g)), 1;
    pc->judged = nf;
    if (pc->start < 0)
        pc->start =
            qve_audio_lead_start(pc->pb.x, pc->pb.n, MS(QVE_LEAD_PAD_MS_DEFAULT), &pc->scanned);
    if (!c->stream && !last) return 0;
    if (pc->start < 0) {
        if (!last) return 0;
        pc->start = 0; /* no speech found: kept whole */
    }
    if (pc->pos < pc->start) pc->pos = pc->start;
    const int64_t n = pc->pb.n - pc->pos, xf = MS(QVE_XFADE_MS_DEFAULT);
    if (n <= 0 || (!pc->joined && n < xf && !last)) return 0; /* the crossfade needs xf samples */
    if (qve_audio_append(&c->out, pc->pb.x + pc->pos, n, pc->joined ? 0 : xf))
        return fail(c, QV_E_NOMEM, "%s", "out of memory joining audio");
    pc->joined = 1;
    pc->pos = pc->pb.n;
    return deliver(c, xf);
}

static void *load_decoder(void *arg) {
    run *c = arg;
    c->dec = model_decoder(c->s->m, c->dec_err, sizeof c->dec_err);
    atomic_store(&c->loaded, 1);
    return NULL;
}

/* The model's decoder, waiting for the loader thread the first time. */
static const qve_decoder *decoder(run *c) {
    if (c->loading) pthread_join(c->loader, NULL);
    c->loading = 0;
    if (!c->dec) fail(c, QV_E_MODEL, "%s", c->dec_err);
    return c->dec;
}

/* Pushes frames [0, n) of the piece's codes to a decoder on this thread (whole chunks with one
 * thread: the decoder runs after generation). */
static int decode_here(run *c, int n, char *e, size_t es) {
    qve_dec_stream *ds = qve_dec_stream_start(c->dec, 0, on_decoded, c->s, e, es);
    if (!ds) return -1;
    for (int f = 0; f < n; f++)
        if (qve_dec_stream_push(ds, c->s->codes + (size_t)f * QV_N_CODEBOOKS)) break;
    return qve_dec_stream_finish(ds, e, es);
}

/* Starts the streaming decoder (its thread) for a piece. 0, or -1 (c->status, c->msg). */
static int start_stream(run *c, qve_dec_stream **ds, char *e, size_t es) {
    if (!decoder(c)) return -1;
    *ds = qve_dec_stream_start(c->dec, 1, on_decoded, c->s, e, es);
    return *ds ? 0 : fail(c, QV_E_NOMEM, "%s", e);
}

/* The runaway guard for a piece, sized by its text's token count. 0, or -1 (c->status, c->msg). */
static int guard_init(run *c, const char *text, piece *pc) {
    int32_t *ids;
    int n_ids;
    if (qv_session_tokenize(c->s->s, text, &ids, &n_ids))
        return fail(c, QV_E_MODEL, "%s", qv_last_error());
    qv_free(ids);
    qve_guard_init(&pc->g, n_ids, NULL);
    return 0;
}

/* Appends a frame's codes to the piece's (s->codes, grown by doubling). 0, or -1 (c->status). */
static int keep_frame(run *c, piece *pc, const int32_t fr[QV_N_CODEBOOKS]) {
    qv_synth *s = c->s;
    if ((size_t)pc->n_frames == s->cap_frames) {
        size_t cap = s->cap_frames ? 2 * s->cap_frames : 256;
        int32_t *g = realloc(s->codes, cap * QV_N_CODEBOOKS * sizeof *g);
        if (!g) return fail(c, QV_E_NOMEM, "%s", "out of memory");
        s->codes = g, s->cap_frames = cap;
    }
    memcpy(s->codes + (size_t)pc->n_frames * QV_N_CODEBOOKS, fr, QV_N_CODEBOOKS * sizeof *fr);
    pc->n_frames++;
    return 0;
}

/* Starts the session on text (the prompt's prefill). Streaming, the decoder thread starts
 * first when the decoder is loaded (it writes its buffers meanwhile instead of during the first
 * block), else generate starts it after. 0, or -1 (c->status, c->msg); the session's warning
 * goes to the result. */
static int start_piece(run *c, const char *text, int streams, qve_dec_stream **ds, char *e,
                       size_t es) {
    qv_synth *s = c->s;
    qv_request q = c->base;
    q.text = text;
    s->s->p.max_frames = c->max_frames;
    pthread_mutex_lock(&s->mu); /* nothing of a tripped attempt may reach its retry */
    s->q.n = 0;
    pthread_mutex_unlock(&s->mu);
    int rc = 0;
    if (streams && (!c->loading || atomic_load(&c->loaded))) rc = start_stream(c, ds, e, es);
    enum qv_status st = rc ? QV_OK : qv_session_start(s->s, &q);
    if (st) rc = fail(c, st, "%s", qv_last_error());
    if (!rc && *qv_session_warning(s->s) && !c->st->warning[0])
        snprintf(c->st->warning, sizeof c->st->warning, "%.250s", qv_session_warning(s->s));
    return rc;
}

/* After a piece's frames (rc: generate's result so far): the decoder finishes (or, without a
 * stream, decodes them here) and the last audio is taken. generate's return value. */
static int finish_piece(run *c, piece *pc, qve_dec_stream *ds, int bg, int rc) {
    qv_synth *s = c->s;
    char e[256] = "";
    /* generation is over: the frames still queued may use every core (each block takes the pool
       when that measured faster) */
    if (ds && bg) qve_dec_stream_set_pool(ds, s->full);
    if (!rc && !ds && !c->r->codes_only && !decoder(c)) rc = -1;
    int bad = ds ? qve_dec_stream_finish(ds, e, sizeof e)
                 : !rc && !c->r->codes_only && decode_here(c, pc->n_frames, e, sizeof e);
    if (bad && !rc)
        rc = atomic_load(&s->cancel) ? fail(c, QV_E_CANCELLED, "%s", "cancelled")
                                     : fail(c, QV_E_NOMEM, "%s", e);
    return rc || c->r->codes_only ? rc : take_audio(c, pc, 1);
}

/* Generates text as one piece under the guard. Streaming, a decoder thread decodes the frames
 * as they come; until the piece is heard each block is waited for (its audio goes out now, not
 * after the next frame) and, the decoder being idle meanwhile, the pool has every core. Whole
 * chunks keep every core for generation and decode in the background (measured: generation on
 * n - 1 threads beside a normal-priority decoder thread was slower in bf16 than n threads then
 * the decoder). 0, 1 guard trip (c->msg), -1 failure (c->status, c->msg). */
static int generate(run *c, const char *text, piece *pc) {
    qv_synth *s = c->s;
    if (guard_init(c, text, pc)) return -1;
    /* batched streams: the steps wait for this session's prefill (it comes back at its first
       frame) */
    struct qve_batcher *b = s->m->batch;
    if (b) qve_batch_presence(b, s->s, QVE_BATCH_AWAY);
    char e[256] = "";
    qve_dec_stream *ds = NULL;
    qvk_pool *own = s->s->pool;
    if (s->full) s->s->pool = s->full;
    const int streams = c->stream && !c->r->codes_only;
    int rc = start_piece(c, text, streams, &ds, e, sizeof e);
    enum qv_status st;
    /* whole chunks: the decoder thread decodes in the background while every core generates */
    const int bg = !c->stream && s->full;
    int heard = 0;
    if (!rc && (streams || (bg && !c->r->codes_only)) && !ds) rc = start_stream(c, &ds, e, sizeof e);
    if (ds && bg) {
        qve_dec_stream_background(ds);
        qvk_pool_set_spin(s->full, 0); /* every wait hands the core to the decoder */
    }
    /* streaming: until the piece is heard the producer waits for each block, so the decoder
       splits it over the idle full pool (first audio sooner). Not with batched streams: there
       the pool's polling workers would take CPU the other streams need */
    int lent = ds && !bg && s->full && !pc->joined && !b;
    if (lent) qve_dec_stream_set_pool(ds, s->full); /* on failure: fewer threads, same samples */
    while (!rc) {
        int32_t fr[QV_N_CODEBOOKS];
        int done;
        if (atomic_load(&s->cancel)) {
            rc = fail(c, QV_E_CANCELLED, "%s", "cancelled");
            break;
        }
        if (ds && pc->joined && !bg && !heard) {
            s->s->pool = own;
            /* batched streams: the step runs on one thread and must not share its core with
               the streams' decoders; they take what the step leaves (batch.c) */
            if (b) qve_dec_stream_background(ds);
            heard = 1;
        }
        if (lent && pc->joined) {
            qve_dec_stream_set_pool(ds, NULL);
            lent = 0;
        }
        /* alone, the talker step after a frame's codes waits until its audio is out */
        st = b ? qv_session_next_frame(s->s, fr, &done) : qve_session_frame_codes(s->s, fr, &done);
        if (st) {
            rc = fail(c, st, "%s", qv_last_error());
            break;
        }
        if (done) {
            pc->capped = pc->n_frames >= c->max_frames;
            break;
        }
        if (c->r->guard && qve_guard_frame(&pc->g, fr, NAN)) {
            snprintf(c->msg, sizeof c->msg, "%s", qve_guard_message(&pc->g));
            rc = 1;
            break;
        }
        if ((rc = keep_frame(c, pc, fr))) break;
        if (!ds) continue;
        if (qve_dec_stream_push(ds, fr)) break; /* the error comes from finish */
        if (!bg && !pc->joined) {
            if (b) qve_batch_presence(b, s->s, QVE_BATCH_AWAY); /* the steps wait for its audio */
            if (qve_dec_stream_sync(ds)) break;
        }
        rc = take_audio(c, pc, 0);
    }
    if (b) qve_batch_presence(b, s->s, QVE_BATCH_GONE);
    s->s->pool = own;
    if (s->full) qvk_pool_set_spin(s->full, -1);
    return finish_piece(c, pc, ds, bg, rc);
}

/* Speaker similarity of a piece's audio to the voice; NAN when too short. */
static double verify(run *c, const piece *pc) {
    qv_synth *s = c->s;
    int nf = qva_mel_n_frames(pc->pb.n);
    if (nf < 5) return NAN;
    float *mel = malloc((size_t)nf * QVA_MEL_BINS * sizeof(float));
    double v = NAN;
    char e[256];
    if (mel && !qva_mel_compute(s->mel, mel, pc->pb.x, pc->pb.n) &&
        !qva_ecapa_forward(s->ecapa, s->s->pool, s->xvec, mel, nf, e, sizeof e))
        v = qvk_cosine(s->xvec, c->ref_xvec, qva_ecapa_dim(s->ecapa));
    free(mel);
    return v;
}

/* Synthesizes text; on a guard trip before any of it was heard, its two halves (depth more
 * times). 0, 1 guard (c->msg), -1 failure. */
static int synth_piece(run *c, const char *text, int depth, int *split) {
    piece pc;
    memset(&pc, 0, sizeof pc);
    pc.start = c->r->trim_lead ? -1 : 0;
    int rc = generate(c, text, &pc);
    if (rc == 0) {
        qv_chunk_info ci = {sizeof ci,     ++c->n_pieces, c->span_offset, c->s->codes,
                            pc.n_frames,   NAN,           c->text_chunk,  c->n_text_chunks};
        if (c->ref_xvec) {
            ci.verify = verify(c, &pc);
            if (!isnan(ci.verify)) {
                qv_synth_stats *st = c->st;
                st->verify_mean = (st->verify_mean * st->n_verify + ci.verify) / (st->n_verify + 1);
                st->verify_min = st->n_verify && st->verify_min < ci.verify ? st->verify_min
                                                                            : ci.verify;
                st->n_verify++;
            }
        }
        c->st->n_frames += pc.n_frames;
        c->st->capped |= pc.capped;
        if (c->s->chunk_fn) c->s->chunk_fn(c->s->chunk_user, &ci);
    }
    const int heard = pc.joined;
    qve_audio_buf_free(&pc.pb);
    if (rc <= 0) return rc;
    c->st->guard_trips++;
    snprintf(c->st->guard_verdict, sizeof c->st->guard_verdict, "%s",
             qve_guard_verdict_name(pc.g.verdict));
    size_t cut;
    if (heard) {
        size_t n = strlen(c->msg);
        snprintf(c->msg + n, sizeof c->msg - n, " (its audio had started: not retried)");
        return 1;
    }
    if (depth <= 0 || qve_text_bisect(text, &cut)) return 1;
    *split = 1;
    char *half = strdup(text);
    if (!half) return fail(c, QV_E_NOMEM, "%s", "out of memory splitting a chunk");
    half[cut] = 0;
    for (size_t n = cut; n > 0 && half[n - 1] == ' ';)
        half[--n] = 0;
    const char *second = text + cut;
    while (*second == ' ')
        second++;
    rc = synth_piece(c, half, depth - 1, split);
    if (rc == 0 && *second) rc = synth_piece(c, second, depth - 1, split);
    free(half);
    return rc;
}

/* Appends a note to stats.warning ("; " between notes; cut at its size). */
static void add_warning(run *c, const char *note) {
    const size_t n = strlen(c->st->warning);
    if (n + 3 < sizeof c->st->warning)
        snprintf(c->st->warning + n, sizeof c->st->warning - n, "%s%s", n ? "; " : "", note);
}

/* The official package drops an instruction on the 0.6B CustomVoice model, which was not trained
 * for them; so does every front end, here, with a warning (stats.warning). A weight delta makes
 * the model its voice's source model, which keeps it. */
static void drop_instruct(run *c) {
    const qv_model *m = c->s->m;
    if (!c->base.instruct || c->r->force_instruct || c->st->wdelta_applied ||
        strcmp(m->ck->cfg.tts_model_type, qvf_variant_name(QVF_VARIANT_CUSTOM_VOICE)) ||
        strcmp(m->ck->cfg.tts_model_size, "0b6"))
        return;
    c->base.instruct = NULL;
    add_warning(c, QV_INSTRUCT_DROPPED);
}

/* The voice, its checks and weight delta, the verification encoder: everything before text. */
static enum qv_status prepare(run *c, const qv_voice *v, qv_text_bridge *bridge) {
    qv_synth *s = c->s;
    const qv_synth_request *r = c->r;
    qv_model *m = s->m;
    char e[768];
    c->base = qv_default_request();
    c->base.strict_vocab = r->strict_vocab;
    c->base.language = r->language;
    c->base.instruct = r->instruct;
    if (!v) {
        if (r->verify_model_dir) /* nothing to compare the audio with */
            add_warning(c, "verify: skipped (a preset speaker has no x-vector; give a voice)");
        c->base.speaker = r->speaker; /* none on CustomVoice: apply_span refuses the text */
        return QV_OK;
    }
    enum qv_status st = qve_voice_check(v, m, r->use_wdelta, e, sizeof e);
    if (st == QV_E_FOREIGN_VOICE && r->force_voice)
        snprintf(c->st->warning, sizeof c->st->warning, "%.250s", e);
    else if (st)
        return fail(c, st, "%s", e), st;
    if (v->f->has_wdelta && !r->use_wdelta) add_warning(c, "weight delta ignored (use_wdelta 0)");
    if (v->f->has_wdelta && r->use_wdelta) {
        enum qve_wdelta_action a;
        if (qve_voice_wdelta_fits(m, v->f, &a, e, sizeof e))
            return fail(c, QV_E_VOICE, "%s: %s", v->path, e), QV_E_VOICE;
        const int mine = m->wdelta_on && !memcmp(m->wdelta_source, v->f->source.fingerprint, 32);
        if (a == QVE_WDELTA_APPLIED && !mine) {
            if (m->wdelta_on || __atomic_load_n(&m->n_synths, __ATOMIC_SEQ_CST) > 1)
                return fail(c, QV_E_UNSUPPORTED,
                            "%s: a weight delta rewrites the model's weights, and %s is %s (open "
                            "a model of its own for this voice, or set use_wdelta = 0)",
                            v->path, m->ck->dir, m->wdelta_on ? "already another voice's source model"
                                                  : "shared by other syntheses"),
                       QV_E_UNSUPPORTED;
            qve_wdelta_report rep;
            qv_session_free(s->s); /* sessions hold views of the old weights */
            s->s = NULL;
            const int bad = qve_voice_apply_wdelta(m, v->f, &rep, e, sizeof e);
            if ((st = new_session(s))) return fail(c, st, "%s", qv_last_error()), st;
            if (bad) return fail(c, QV_E_VOICE, "%s: %s", v->path, e), QV_E_VOICE;
        }
        c->st->wdelta_applied = a == QVE_WDELTA_APPLIED;
    }
    qve_voice_request(v, m, r->use_icl, &c->base, bridge, e, sizeof e);
    if (e[0] && !c->st->warning[0]) snprintf(c->st->warning, sizeof c->st->warning, "%.250s", e);
    if (!r->verify_model_dir) return QV_OK;
    if (!s->ecapa || strcmp(s->verify_dir, r->verify_model_dir)) {
        qva_ecapa_free(s->ecapa);
        qvm_ckpt *vk = qvm_ckpt_open(r->verify_model_dir, e, sizeof e);
        s->ecapa = vk ? qva_ecapa_load(vk, e, sizeof e) : NULL;
        qvm_ckpt_free(vk);
        if (!s->ecapa) return fail(c, QV_E_MODEL, "verify: %s", e), QV_E_MODEL;
        snprintf(s->verify_dir, sizeof s->verify_dir, "%s", r->verify_model_dir);
        free(s->xvec);
        s->xvec = malloc((size_t)qva_ecapa_dim(s->ecapa) * sizeof(float));
        if (!s->mel) s->mel = qva_mel_create();
        if (!s->xvec || !s->mel) return fail(c, QV_E_NOMEM, "%s", "out of memory"), QV_E_NOMEM;
    }
    if (qva_ecapa_dim(s->ecapa) != (int)v->f->enc_dim) {
        snprintf(e, sizeof e, "verify: %s: speaker encoder of %d dims, the voice has %u",
                 r->verify_model_dir, qva_ecapa_dim(s->ecapa), v->f->enc_dim);
        return fail(c, QV_E_MODEL, "%s", e), QV_E_MODEL;
    }
    c->ref_xvec = v->f->xvector;
    return QV_OK;
}

/* ==== markup spans (docs/markup.md) ========================================================= */

/* Appends a warning to the call's stats ("; "-separated, cut at the field's size). */
__attribute__((format(printf, 2, 3))) static void warn(run *c, const char *fmt, ...) {
    char *w = c->st->warning;
    size_t n = strlen(w);
    if (n && n + 2 < sizeof c->st->warning) memcpy(w + n, "; ", 3), n += 2;
    va_list ap;
    va_start(ap, fmt);
    if (n + 1 < sizeof c->st->warning) vsnprintf(w + n, sizeof c->st->warning - n, fmt, ap);
    va_end(ap);
}

/* VoiceDesign models and the 1.7B CustomVoice were trained with instructions; the 0.6B
 * CustomVoice and the Base models were not (a weight delta makes a CustomVoice model its voice's
 * Base source). The rule speak applies to --instruct. */
static int instruct_honoured(const qv_model *m) {
    if (m->wdelta_on) return 0;
    return m->ck->cfg.variant == QVF_VARIANT_VOICE_DESIGN ||
           (m->ck->cfg.variant == QVF_VARIANT_CUSTOM_VOICE && strcmp(m->ck->cfg.tts_model_size, "0b6"));
}

/* What [voice:NAME] names: a preset speaker of the model, else a voice (qv_voice_open's lookup),
 * used without its weight delta; opened once per call. NULL on failure (c->status, c->msg). */
static span_voice *open_span_voice(run *c, const qve_chunk *k) {
    const qv_model *m = c->s->m;
    for (int i = 0; i < c->n_voices; i++)
        if (!strcmp(c->voices[i].name, k->text)) return &c->voices[i];
    if (c->n_voices == QVE_SPAN_VOICES || strlen(k->text) >= sizeof c->voices[0].name)
        return fail(c, QV_E_LIMIT, "tag [voice:%.128s] at character %d: over %d voices per text "
                    "or a name over %zu bytes", k->text, k->n_chars, QVE_SPAN_VOICES,
                    sizeof c->voices[0].name - 1), NULL;
    span_voice *sv = &c->voices[c->n_voices];
    memset(sv, 0, sizeof *sv);
    snprintf(sv->name, sizeof sv->name, "%s", k->text);
    sv->req = qv_default_request();
    sv->req.strict_vocab = c->r->strict_vocab;
    for (int i = 0; i < qv_model_n_speakers(m); i++)
        if (!strcasecmp(qv_model_speaker(m, i), k->text)) {
            sv->req.speaker = qv_model_speaker(m, i);
            c->n_voices++;
            return sv;
        }
    char e[768];
    enum qv_status st = qv_voice_open(&sv->v, k->text);
    if (st)
        return fail(c, st, "tag [voice:%s] at character %d: %s", k->text, k->n_chars,
                    qv_last_error()), NULL;
    c->n_voices++; /* freed with the call */
    st = qve_voice_check(sv->v, m, 0, e, sizeof e);
    if (st && !(st == QV_E_FOREIGN_VOICE && c->r->force_voice))
        return fail(c, st, "tag [voice:%s] at character %d: %s", k->text, k->n_chars, e), NULL;
    if (e[0]) warn(c, "%.250s", e);
    if (sv->v->f->has_wdelta && c->r->use_wdelta)
        warn(c, "[voice:%.64s]: a voice switched to mid-text is used without its weight delta",
             k->text);
    qve_voice_request(sv->v, m, c->r->use_icl, &sv->req, &sv->bridge, e, sizeof e);
    if (e[0]) warn(c, "%.250s", e);
    return sv;
}

/* The palette entry of v named name, else the generic direction: kind, strength, vector. */
static const float *find_style(run *c, const qv_voice *v, const char *name, int dim,
                               uint32_t *kind, float *strength) {
    const qvf_style *e = v ? qvf_palette_find(v->f, name) : NULL;
    if (e) return *kind = e->kind, *strength = e->strength, e->vec;
    for (int i = 0; i < c->r->n_style_dirs; i++) {
        const qv_style_dir *d = &c->r->style_dirs[i];
        if (d->name && d->direction && d->dim == dim && !strcmp(d->name, name))
            return *kind = QVF_STYLE_DIRECTION,
                   *strength = d->strength > 0 ? d->strength : 0.25f, d->direction;
    }
    return NULL;
}

/* Sets c->base for the text after the last tags: the voice or speaker, the language, and the
 * style: its instruct text where the model honours instruct, its palette entry or generic
 * direction where the voice has an x-vector, both on a 1.7B model. 0, or -1 (c->status). */
static int apply_span(run *c) {
    const qv_synth_request *r = c->r;
    const qv_model *m = c->s->m;
    const qv_voice *v = c->req_voice;
    c->base = c->req_base;
    if (c->span_voice) {
        const span_voice *sv = open_span_voice(c, c->span_voice);
        if (!sv) return -1;
        c->base = sv->req;
        v = sv->v;
    }
    if (m->ck->cfg.variant == QVF_VARIANT_CUSTOM_VOICE && !c->base.speaker &&
        !c->base.speaker_vector)
        return fail(c, QV_E_SPEAKER, "%s: a CustomVoice model needs a preset speaker or a voice "
                    "(for the text before any [voice:NAME] tag)", m->ck->dir);
    c->base.language = c->span_lang ? c->span_lang->text : r->language;
    c->base.instruct = c->req_base.instruct; /* the request's, unless drop_instruct dropped it */
    const qve_chunk *tag = c->span_style;
    if (tag && tag->is_name && !strcmp(tag->text, "neutral")) tag = NULL; /* the request's own */
    const char *style = tag ? tag->text : r->style;
    int is_name = tag ? tag->is_name : 1;
    if (!style) return 0;
    char what[320];
    if (tag)
        snprintf(what, sizeof what, "tag [%s%.200s] at character %d", is_name ? "" : "style:",
                 style, tag->n_chars);
    else
        snprintf(what, sizeof what, "style \"%.200s\"", style);
    const int H = m->ck->cfg.talker.hidden_size;
    uint32_t kind = 0;
    float strength = 0;
    const float *vec = NULL;
    char folded[QVE_STYLE_NAME_MAX + 1];
    const char *pname = is_name ? style : !qve_style_fold(style, folded) ? folded : NULL;
    if (pname && c->base.speaker_vector)
        vec = find_style(c, v, pname, c->base.n_speaker_vector, &kind, &strength);
    if (vec && !is_name) /* [style:NAME] of a switched voice's palette entry: that name */
        is_name = 1, style = pname;
    const char *ins = is_name ? qve_style_instruct(&c->styles, style) : style;
    const int honoured = instruct_honoured(m);
    int applied = 0;
    if (ins && ins[0] && honoured) {
        const char *base = c->req_base.instruct ? c->req_base.instruct : "";
        size_t n = strlen(base) + 1 + strlen(ins) + 1;
        free(c->instruct);
        if (!(c->instruct = malloc(n))) return fail(c, QV_E_NOMEM, "%s: out of memory", what);
        snprintf(c->instruct, n, "%s%s%s", base, base[0] ? " " : "", ins);
        c->base.instruct = c->instruct;
        applied = 1;
    }
    if (vec) {
        if (r->style_strength > 0) strength = r->style_strength;
        if (!c->xvec && !(c->xvec = malloc((size_t)H * sizeof *c->xvec)))
            return fail(c, QV_E_NOMEM, "%s: out of memory", what);
        if (qvf_style_apply(kind, strength, c->base.speaker_vector, vec,
                            (uint32_t)c->base.n_speaker_vector, c->xvec))
            return fail(c, QV_E_INVALID, "%s: strength %g outside [0, 4] or a zero vector", what,
                        (double)strength);
        c->base.speaker_vector = c->xvec;
        applied = 1;
    }
    if (applied) return 0;
    char why[640];
    snprintf(why, sizeof why, "%s: not applied: %s%s", what,
             !ins || !ins[0] ? "no instruct text for it"
                             : "this model takes no instruct (VoiceDesign and the 1.7B "
                               "CustomVoice models do)",
             !is_name ? ""
             : c->base.speaker_vector ? ", and no palette entry in the voice nor a generic "
                                        "direction of that name"
                                      : ", and a preset speaker has no x-vector for a palette "
                                        "entry");
    if (!tag || r->strict_markup) return fail(c, QV_E_UNSUPPORTED, "%s", why);
    warn(c, "%s", why);
    return 0;
}

/* The style names bare tags may use: the user's table, the palette of the request's voice, the
 * generic directions. */
static int collect_styles(run *c) {
    char e[256];
    const qv_synth_request *r = c->r;
    if (r->style_table && qve_styles_parse(&c->styles, r->style_table, e, sizeof e))
        return fail(c, QV_E_INVALID, "%s", e);
    for (int i = 0; c->req_voice && i < c->req_voice->f->n_styles; i++)
        if (qve_styles_add_name(&c->styles, c->req_voice->f->styles[i].name))
            return fail(c, QV_E_NOMEM, "%s", "out of memory");
    for (int i = 0; i < r->n_style_dirs; i++)
        if (qvu_check_size("qv_style_dir", r->style_dirs[i].struct_size, sizeof(qv_style_dir)))
            return fail(c, QV_E_ABI, "%s", qv_last_error());
        else if (!r->style_dirs[i].name || qve_styles_add_name(&c->styles, r->style_dirs[i].name))
            return fail(c, QV_E_INVALID, "style direction %d: bad name \"%.64s\"", i,
                        r->style_dirs[i].name ? r->style_dirs[i].name : "(null)");
    return 0;
}

static void spans_free(run *c) {
    for (int i = 0; i < c->n_voices; i++)
        qv_voice_free(c->voices[i].v);
    free(c->instruct);
    free(c->xvec);
    qve_styles_free(&c->styles);
}

/* Chunks the text and synthesizes each chunk, pauses as silence, with the settings of the markup
 * tags before it, into the joined output. */
static int speak_text(run *c) {
    qve_chunk_list l;
    char e[256];
    if (collect_styles(c)) return -1;
    if (qve_text_chunk(&l, c->r->text, c->r->max_chunk_chars, &c->styles, e, sizeof e))
        return fail(c, QV_E_INVALID, "%s", e);
    for (int i = 0; i < l.n_chunks; i++)
        c->n_text_chunks += l.chunks[i].kind == QVE_CHUNK_TEXT;
    int rc = 0;
    c->span_dirty = 1;
    for (int i = 0; i < l.n_chunks && !rc; i++) {
        const qve_chunk *k = &l.chunks[i];
        if (k->kind == QVE_CHUNK_TAG) {
            if (k->tag == QVE_TAG_VOICE)
                c->span_voice = k;
            else if (k->tag == QVE_TAG_LANG)
                c->span_lang = k;
            else
                c->span_style = k;
            c->span_dirty = 1;
            c->span_offset = k->n_chars;
            continue;
        }
        if (k->kind == QVE_CHUNK_PAUSE) {
            rc = qve_audio_append_silence(&c->out, MS(k->pause_ms))
                     ? fail(c, QV_E_NOMEM, "%s", "out of memory inserting a pause")
                     : deliver(c, MS(QVE_XFADE_MS_DEFAULT));
            continue;
        }
        if (c->span_dirty && (rc = apply_span(c))) break;
        c->span_dirty = 0;
        int split = 0;
        c->text_chunk++;
        rc = synth_piece(c, k->text, c->r->guard ? 1 : 0, &split);
        if (rc) {
            char m[QVE_ERR_MAX];
            snprintf(m, sizeof m, "%s", c->msg);
            snprintf(c->msg, sizeof c->msg, "chunk %d/%d: %.440s%s", c->text_chunk,
                     c->n_text_chunks, m, rc > 0 && split ? " (after splitting it in two)" : "");
            if (rc > 0) c->status = QV_E_GUARD;
        }
    }
    qve_chunk_list_free(&l);
    return rc ? -1 : deliver_final(c, 0, 1);
}

enum qv_status qv_synth_run(qv_synth *s, const qv_synth_request *r, qv_pcm_fn fn, void *user,
                            qv_synth_stats *stats) {
    if (!s) return qvu_fail(QV_E_INVALID, "qv_synth_run: NULL synthesizer");
    if (r && r->struct_size != sizeof *r)
        return qvu_check_size("qv_synth_request", r->struct_size, sizeof *r);
    if (stats && stats->struct_size != sizeof *stats)
        return qvu_check_size("qv_synth_stats", stats->struct_size, sizeof *stats);
    qv_synth_stats local;
    run c;
    memset(&c, 0, sizeof c);
    c.st = stats ? stats : &local;
    memset(c.st, 0, sizeof *c.st);
    c.st->struct_size = sizeof *c.st;
    snprintf(c.st->guard_verdict, sizeof c.st->guard_verdict, "ok");
    c.s = s, c.r = r, c.fn = fn, c.user = user, c.t0 = now_s();
    c.stream = r && !r->whole_chunks;
    atomic_store(&s->cancel, 0);
    if (!r || !r->text) return qvu_fail(QV_E_INVALID, "synth: no text");
    if (!(r->speed >= QV_SPEED_MIN && r->speed <= QV_SPEED_MAX) || (r->codes_only && r->speed != 1))
        return qvu_failf(QV_E_INVALID, "speed %g: expected %g to %g%s", r->speed, QV_SPEED_MIN,
                         QV_SPEED_MAX, r->codes_only ? ", and 1 with codes_only" : "");
    enum qv_status st = s->s ? QV_OK : new_session(s); /* lost to a failed weight delta */
    if (st) return st;
    if (r->speed != 1 && !(c.stretch = qva_stretch_new(r->speed)))
        return qvu_fail(QV_E_NOMEM, "speed: out of memory for the time stretcher");
    qv_voice *opened = NULL;
    const qv_voice *v = r->voice;
    qv_text_bridge bridge;
    if (!v && r->voice_path && (st = qv_voice_open(&opened, r->voice_path)))
        c.status = st, snprintf(c.msg, sizeof c.msg, "%s", qv_last_error());
    if (!v) v = opened;
    if (!st) st = prepare(&c, v, &bridge);
    if (!st) drop_instruct(&c);
    c.req_voice = v;
    c.req_base = c.base;
    if (!st && !r->codes_only) {
        c.loading = !pthread_create(&c.loader, NULL, load_decoder, &c);
        if (!c.loading) load_decoder(&c);
    }
    if (!st) {
        c.max_frames = s->p.max_frames;
        if (r->max_seconds > 0) {
            int f = (int)floor(r->max_seconds * QV_FRAME_RATE_HZ + 1e-9);
            if (f < 1) f = 1;
            if (f < c.max_frames) c.max_frames = f;
        }
        st = speak_text(&c) ? c.status : QV_OK;
    }
    if (c.loading) pthread_join(c.loader, NULL);
    spans_free(&c);
    qv_voice_free(opened);
    qve_audio_buf_free(&c.out);
    qva_stretch_free(c.stretch);
    qv_synth_stats *o = c.st;
    o->n_chunks = c.n_text_chunks;
    o->audio_seconds = (double)o->n_samples / QV_SAMPLE_RATE_HZ;
    o->total_s = now_s() - c.t0;
    o->rtf = o->audio_seconds > 0 ? o->total_s / o->audio_seconds : 0;
    return qvu_fail(st, c.msg);
}
