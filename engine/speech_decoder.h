/* speech_decoder.h — Qwen3-TTS-12Hz speech-tokenizer decoder: codes [T, 16] → 24 kHz audio (§6.1).
 * Key design: one incremental path. Everything in the decoder is causal, so it runs blocks of
 * frames on a fixed schedule (aligned to the chunk start) through carried state (KV cache of the
 * sliding window, conv tails). The one-shot decode is that same stream fed all at once, so
 * streamed and one-shot audio are bit-identical by construction.
 */
#ifndef QV_SPEECH_DECODER_H
#define QV_SPEECH_DECODER_H

/* Usage:
 *     qve_decoder *dec = qve_decoder_load(ck, err, sizeof err);  // ck: qvm_ckpt_open(dir, ..)
 *     qve_decoder_decode(dec, codes, n_frames, wav, err, sizeof err);  // wav: n_frames*1920
 *   or, streaming while the talker runs:
 *     qve_dec_stream *s = qve_dec_stream_start(dec, 1, on_audio, user, err, sizeof err);
 *     for each frame: qve_dec_stream_push(s, frame16);
 *     qve_dec_stream_finish(s, err, sizeof err);                       // flushes, joins, frees
 *
 * Long outputs follow the reference `chunked_decode` exactly: chunks of 300 frames, every chunk
 * after the first is decoded from a clean state with the previous 25 frames as left context whose
 * samples are dropped. Streaming does the same, so it equals the one-shot decode for any length.
 *
 * Thread safety: a qve_decoder is read-only after load and may be shared by any number of
 * streams/threads. A qve_dec_stream belongs to one producer thread (push/finish from one thread).
 * A stream may be lent a qvk_pool (qve_dec_stream_set_pool): every stage then splits its output
 * channels over the pool's threads, which gives the same samples bit for bit for any count.
 */

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/ckpt.h"
#include "kernels/kernels.h"

/* Largest number of frames per decode step. Steps follow a fixed schedule per chunk position
 * (1, 1, 2, 4, then 8 frames; see block_frames in the .c), which fixes the float arithmetic
 * (Winograd tile positions) for both paths: streaming emits its first audio after one frame,
 * later audio every 8 frames (640 ms). */
#define QVE_DEC_BLOCK_FRAMES 8
/* Reference chunking (qwen_tts tokenizer decoder `chunked_decode`). */
#define QVE_DEC_CHUNK_FRAMES 300
#define QVE_DEC_CONTEXT_FRAMES 25

typedef struct qve_decoder qve_decoder;
typedef struct qve_dec_stream qve_dec_stream;

/* Loads the decoder from ck's speech tokenizer (its codec config and codec_st; the decoder holds
 * a reference to ck). Weights stay in the mmap (borrowed); the codebook tables
 * embedding_sum / max(cluster_usage, 1e-5) are computed once here. Returns NULL with a one-line
 * "FILE: problem" in err on failure. */
qve_decoder *qve_decoder_load(qvm_ckpt *ck, char *err, size_t err_size);
/* Accepts NULL. No stream of this decoder may still be running. */
void qve_decoder_free(qve_decoder *dec);

int qve_decoder_n_codebooks(const qve_decoder *dec);       /* 16 */
int qve_decoder_codebook_size(const qve_decoder *dec);     /* 2048: valid codes are [0, size) */
int qve_decoder_samples_per_frame(const qve_decoder *dec); /* 1920 */

/* One-shot decode. codes: frame-major [n_frames][n_codebooks] (the talker's order; the reference
 * tensor [16, T] transposed). wav: n_frames * samples_per_frame floats in [-1, 1].
 * Runs on the caller's thread. Allocates its state once per call. Returns 0, or -1 with err (bad
 * code value, allocation failure). */
int qve_decoder_decode(const qve_decoder *dec, const int32_t *codes, int n_frames, float *wav,
                       char *err, size_t err_size);
/* The same, lent pool (an idle one; NULL: none) as by qve_dec_stream_set_pool: the same samples
 * bit for bit, on the pool's threads. */
int qve_decoder_decode_pool(const qve_decoder *dec, qvk_pool *pool, const int32_t *codes,
                            int n_frames, float *wav, char *err, size_t err_size);

/* One chunk of the reference chunked_decode: a single pass from a clean state over n_frames
 * codes (<= QVE_DEC_CHUNK_FRAMES + QVE_DEC_CONTEXT_FRAMES, the KV cache size) of which the first
 * n_ctx are left context whose audio is dropped; wav gets (n_frames − n_ctx)·samples_per_frame
 * samples. Uses the same block schedule as a chunk of qve_decoder_decode, so the output equals
 * that chunk's bit for bit. For tests and tools. */
int qve_decoder_decode_pass(const qve_decoder *dec, const int32_t *codes, int n_frames, int n_ctx,
                            float *wav, char *err, size_t err_size);

/* Audio callback: n_samples new samples (a multiple of samples_per_frame) in order; pcm is only
 * valid during the call. Return 0 to continue, non-zero to abort the stream (push/finish then
 * return -1). Called from the decoder thread (n_threads >= 1) or from push/finish (0). */
typedef int (*qve_audio_cb)(void *user, const float *pcm, int n_samples);

/* Starts a streaming decode. n_threads = 0: no thread, push/finish decode on the caller's thread
 * whenever a block is complete. n_threads >= 1 (values > 1 mean the same): a decoder thread does
 * the work on one core, or on a pool's cores while qve_dec_stream_set_pool lends it one; give
 * the talker pool the remaining cores (or lower the thread with qve_dec_stream_background and
 * keep every core for the pool); its sgemms are single-threaded (qvk_sgemm). All state is allocated
 * here (sized for one block and the chunk's KV window); nothing is allocated per frame. NULL +
 * err on failure. */
qve_dec_stream *qve_dec_stream_start(const qve_decoder *dec, int n_threads, qve_audio_cb cb,
                                     void *user, char *err, size_t err_size);
/* Queues one frame (n_codebooks codes). Cheap: copies into a queue and returns; blocks only when
 * the decoder is more than 1024 frames behind. Returns 0, or -1 if a code is out of range or the
 * stream has failed/aborted (details from finish). */
int qve_dec_stream_push(qve_dec_stream *s, const int32_t *frame);
/* Lends the stream a pool (NULL: takes it back): from the next frame on, the decoding thread
 * (the decoder thread, or the caller with n_threads = 0) runs as the pool's thread 0 and every
 * stage splits its output channels over the pool, with the same samples bit for bit (a block
 * still runs on one thread when that measured faster for the previous ones: on a busy machine
 * the pool's waits can cost more than the split gains). The pool must not run other jobs
 * meanwhile: lend a pool whose owner waits (generation has ended, or the producer waits in
 * sync). Taking a pool back (or lending another) waits for the frame under way. Allocates one
 * scratch slice per pool thread (up to 16, the same size as the stream's, kept until finish);
 * -1 when that fails (the stream then uses the slices it has: fewer threads, same samples),
 * else 0. */
int qve_dec_stream_set_pool(qve_dec_stream *s, qvk_pool *pool);
/* Waits until the decoder thread has taken and decoded every frame pushed so far (the audio of
 * each completed block has gone to the callback; a partial block stays pending). Lets a caller
 * deliver the first block at once instead of after its next frame. 0, or -1 if the stream
 * failed. */
int qve_dec_stream_sync(qve_dec_stream *s);
/* Lowers the decoder thread to idle priority until finish (no-op without a thread): it then
 * only uses cycles the rest of the process leaves (a generation pool's sleeping workers), which
 * hides decoding behind generation without slowing it. finish restores normal priority for the
 * frames still queued. Same samples either way. */
void qve_dec_stream_background(qve_dec_stream *s);
/* Decodes the remaining frames (a partial last block), waits for the thread, frees the stream
 * (always, even on error; accepts NULL). Returns 0, or -1 with err. */
int qve_dec_stream_finish(qve_dec_stream *s, char *err, size_t err_size);

#endif
