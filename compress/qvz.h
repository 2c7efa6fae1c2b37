/* qvz.h — compressed Qwen3-TTS checkpoints (prefix qvz_; public: bin/qvoice-compress uses it).
 *
 *   qvz_options o = qvz_default_options();
 *   o.vocab = "english", o.strip_encoder = o.decoder_f16 = o.q4 = 1;
 *   qvz_report r;
 *   char err[512];
 *   if (qvz_compress("models/0.6B-CustomVoice", "models/0.6B-CV-small", &o, &r, err, sizeof err))
 *       fprintf(stderr, "%s\n", err);
 *
 * The output is a standard model directory the engine loads like any other (docs/compression.md
 * has the layout: token map, MLX q4 g64, f16 decoder, no encoder, fewer talker layers). It is
 * written as OUT.tmp-PID and renamed into place, so OUT either appears complete or not at all.
 * Thread safety: calls share nothing.
 */
#ifndef QV_QVZ_H
#define QV_QVZ_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    /* vocabulary pruning: NULL keeps every text embedding row; "english" takes the words of
     * QVZ_ENGLISH_WORDS (Debian wamerican), "english-small" those of QVZ_ENGLISH_SMALL_WORDS
     * (wamerican-small: 9,100 fewer ids, 37 MB less for the 0.6B); anything else is a text file
     * whose whitespace-separated words are used the same way (docs/compression.md lists what else
     * is always kept, and what each list covers) */
    const char *vocab;
    int strip_encoder; /* drop the speech tokenizer's encoder and the decoder quantizers' input
                          projections, which only encoding uses (ICL cloning needs them) */
    int decoder_f16;   /* store the speech decoder in float16 */
    int q4;            /* every talker / code-predictor linear to MLX 4-bit affine, group 64 */
    int prune_layers;  /* remove this many talker layers from the top (0 = none) */
    /* MLP neuron pruning: > 0 drops talker SwiGLU neurons whose max |activation| over a greedy
     * calibration run of calib_frames frames per built-in text stays below it (widths rounded
     * up to 64; per-layer intermediate_size in config.json) */
    float prune_neurons;
    int calib_frames;   /* 0: QVZ_CALIB_FRAMES */
    int protect_layers; /* the first this many layers keep every neuron (default 10, the seed's) */
    int n_threads;     /* quantization threads (qv_threads_resolve: 0 = all online CPUs) */
} qvz_options;

#define QVZ_ENGLISH_WORDS "/usr/share/dict/american-english"
#define QVZ_ENGLISH_SMALL_WORDS "/usr/share/dict/american-english-small"
#define QVZ_CALIB_FRAMES 32

/* What each step did (bytes are tensor data bytes). */
typedef struct {
    uint64_t model_bytes_in, model_bytes_out;     /* model.safetensors */
    uint64_t codec_bytes_in, codec_bytes_out;     /* speech_tokenizer/model.safetensors */
    int n_text_ids, n_text_rows;                  /* tokenizer ids / embedding rows kept (+1 zero) */
    uint64_t embedding_bytes_in, embedding_bytes_out;
    int n_encoder_tensors; /* dropped: the encoder's and the decoder's encode-only input_proj */
    uint64_t encoder_bytes;
    uint64_t decoder_bytes_in, decoder_bytes_out;
    float decoder_max_abs;                        /* max |w| over the decoder (f16 needs < 65504) */
    int n_q4;                                     /* matrices quantized */
    uint64_t q4_bytes_in, q4_bytes_out;
    int layers_in, layers_out;                    /* talker layers */
    long neurons_in, neurons_out;                 /* talker SwiGLU neurons (of kept layers) */
    int n_neuron_layers;                          /* layers that lost neurons */
} qvz_report;

/* Defaults: nothing changed (a plain copy), all online CPUs, 10 protected layers. */
qvz_options qvz_default_options(void);

/* Writes the compressed copy of model_dir to out_dir, which must not exist. 0, or -1 with one line
 * "FILE: problem" in err (out_dir then does not exist either). report may be NULL. */
int qvz_compress(const char *model_dir, const char *out_dir, const qvz_options *o,
                 qvz_report *report, char *err, size_t err_size);

#endif
