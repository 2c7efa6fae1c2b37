/* speech_decoder.c — Qwen3-TTS-12Hz speech-tokenizer decoder (§6.1), mirrors the official
 * Qwen3TTSTokenizerV2Decoder.forward / chunked_decode. All stages are causal, so a block of frames
 * is decoded from carried state: conv tails (the last (k−1)·d inputs of every conv), one context
 * row per transposed conv and the KV cache of the chunk. One-shot decode and streaming both
 * feed the same block schedule through feed_frame(), which makes their float arithmetic identical.
 */
#include "engine/speech_decoder.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/manifest.h"
#include "include/qvoice.h"
#include "checkpoint/prepared.h"
#include "kernels/kernels.h"
#include "checkpoint/safetensors.h"

/* ==== constants ============================================================================ */

#define N_UP 2     /* upsample stages (config upsampling_ratios) */
#define N_BLOCKS 4 /* decoder blocks (config upsample_rates) */
#define N_RES 3    /* residual units per block, dilations 1, 3, 9 */
#define CONV_K 7   /* kernel of decoder.0, residual conv1, ConvNeXt dwconv, final conv */
#define PRE_CONV_K 3
#define WINO_M 5 /* outputs per Winograd tile: F(5, 7), 3.2x fewer products (F(4, 7): 5 % slower) */
#define WINO_CT_M 4 /* F(4, 2) for the transposed convs: 1.25 products per step, error 6e-6 (F(5, 2): 8e-6) */
#define QUEUE_FRAMES 1024
/* Blocks 1-3 of the 12 Hz tokenizer (30 MB at most); block 0's would be 189 MB, against 0.7 ms per
 * frame (1536 -> 768 channels, r = 8, eight frames at a time: 14.7 -> 9.0 ms per block). */
#define UP_WINO_MAX_BYTES ((size_t)64 << 20)
/* Decoder blocks from this index on run one frame at a time (1920 samples at the end), which
 * keeps their activations in L2 instead of streaming 8 frames' worth through memory. */
#define PER_FRAME_BLOCK 1
/* Threads a stream's pool may give work to (qve_dec_stream_set_pool), and the work below which a
 * stage stays on the decoding thread: ~100k multiply-adds or floats moved (~10 µs) against a
 * pool dispatch of a few µs. */
#define MAX_SLICES 16
#define PAR_MIN_WORK 100000.0
static const int res_dilation[N_RES] = {1, 3, 9};

/* ==== weights ============================================================================== */
/* Linear and ConvTranspose weights are held packed in 48-column panels (lin(), panels()): f16
 * panels when the checkpoint stores the tensor in F16 (half the memory, the same products), else
 * f32. */

typedef struct {
    const float *attn_norm;     /* [H] layers.L.input_layernorm.weight */
    qvk_p48w wq, wk, wv;        /* [nh·hd, H] self_attn.{q,k,v}_proj.weight */
    qvk_p48w wo;                /* [H, nh·hd] self_attn.o_proj.weight */
    const float *attn_scale;    /* [H] self_attn_layer_scale.scale */
    const float *mlp_norm;      /* [H] post_attention_layernorm.weight */
    qvk_p48w w_gate, w_up;      /* [I, H] mlp.{gate,up}_proj.weight */
    qvk_p48w w_down;            /* [H, I] mlp.down_proj.weight */
    const float *mlp_scale;     /* [H] mlp_layer_scale.scale */
} dec_layer;

typedef struct {
    qvk_p48w up_w;              /* [L, L·r] upsample.S.0.conv.weight (ConvTranspose, k = s = r) */
    const float *up_b;          /* [L] upsample.S.0.conv.bias */
    const float *dw_w, *dw_b;   /* [L, 1, 7] / [L] upsample.S.1.dwconv.conv */
    const float *ln_w, *ln_b;   /* [L] upsample.S.1.norm */
    qvk_p48w pw1_w;             /* [4L, L] upsample.S.1.pwconv1.weight */
    const float *pw1_b;         /* [4L] upsample.S.1.pwconv1.bias */
    qvk_p48w pw2_w;             /* [L, 4L] upsample.S.1.pwconv2.weight */
    const float *pw2_b;         /* [L] upsample.S.1.pwconv2.bias */
    const float *gamma;         /* [L] upsample.S.1.gamma */
} dec_upsample;

typedef struct {
    const float *a1, *b1;     /* [C] block.U.act1.{alpha,beta} (log space) */
    const float *c1_w, *c1_b; /* Winograd-domain panels (qvk_wino_weights) / [C] block.U.conv1.conv, dil. d */
    const float *a2, *b2;     /* [C] block.U.act2 */
    qvk_p48w c2_w;            /* [C, C, 1] block.U.conv2.conv.weight (1×1) */
    const float *c2_b;        /* [C] block.U.conv2.conv.bias */
} dec_res;

typedef struct {
    int c_in, c_out, rate;
    int up_wino;              /* up_w (Winograd-domain, qvk_wino_weights_ct) is set, else up_p */
    const float *a, *b;       /* [C_in] decoder.I.block.0.{alpha,beta} */
    const float *up_w;        /* [C_in, C_out, 2r] decoder.I.block.1.conv.weight, see up_wino */
    qvk_p48w up_p;            /* the same as panels of [C_in, C_out·2r] */
    const float *up_b;        /* [C_out] decoder.I.block.1.conv.bias */
    dec_res res[N_RES];       /* decoder.I.block.{2,3,4} */
} dec_block;

struct qve_decoder {
    int n_q, cb_size, cb_dim;    /* 16 codebooks × 2048 entries × 256 */
    int rvq_dim, latent, hidden; /* 512, 1024, 512 */
    int inter, n_layers, n_heads, head_dim, window, conv_inter;
    int dec_dim, up_ratio[N_UP], rate[N_BLOCKS];
    float rms_eps, rope_theta;
    int samples_per_frame;

    qvm_ckpt *ck;               /* a reference; the weights borrow its codec_st */
    const float *codebooks;     /* [n_q, cb_size, cb_dim] embedding_sum / max(usage, 1e-5) */
    qvk_p48w out_first;         /* [rvq_dim, cb_dim] quantizer.rvq_first.output_proj.weight */
    qvk_p48w out_rest;          /* [rvq_dim, cb_dim] quantizer.rvq_rest.output_proj.weight */
    const float *pre_w, *pre_b; /* [3, latent, rvq_dim] (tap-major copy) / [latent] pre_conv.conv */
    qvk_p48w in_w;              /* [H, latent] pre_transformer.input_proj.weight */
    const float *in_b;          /* [H] pre_transformer.input_proj.bias */
    dec_layer *layers;
    const float *norm_w;          /* [H] pre_transformer.norm.weight */
    qvk_p48w outp_w;              /* [latent, H] pre_transformer.output_proj.weight */
    const float *outp_b;          /* [latent] pre_transformer.output_proj.bias */
    dec_upsample up[N_UP];
    const float *d0_w, *d0_b; /* Winograd-domain panels / [dec_dim] decoder.0.conv */
    dec_block blk[N_BLOCKS];
    qvk_wino wino;           /* F(WINO_M, 7) for decoder.0 and the residual conv1s */
    qvk_wino wino_ct;        /* F(WINO_CT_M, 2) for the blocks' transposed convs (up_wino) */
    const float *fa, *fb;    /* [C] decoder.5.{alpha,beta} */
    const float *fw, *fbias; /* [7, 1, C] (tap-major copy) / [1] decoder.6.conv */

    float **owned; /* prepared weights (when not from the cache) and copies of misaligned
                      tensors */
    int n_owned;
    qvm_prep *cache; /* the prepared weights' cache file, mapped (NULL: prepared here) */
};

/* ==== per-stream state ===================================================================== */

typedef struct {
    float *x; /* [n, n_ch] last n input rows of a conv (or context of a transposed conv) */
    int n_ch, n;
} tail;

typedef struct {
    tail pre;                       /* pre_conv input (RVQ output) */
    tail up_ctx[N_UP], up_dw[N_UP]; /* upsample ConvTranspose context, ConvNeXt dwconv input */
    tail d0;                        /* decoder.0 input */
    tail blk_ctx[N_BLOCKS];         /* snake-activated block input (ConvTranspose context) */
    tail res[N_BLOCKS][N_RES];      /* snake1-activated residual input (conv1, dilation d) */
    tail fin;                       /* decoder.5 output (final conv input) */
    float *k_cache, *v_cache;       /* [n_layers, max_pos, nh·hd] */
    int max_pos;

    /* activations, time-major [t, channels] */
    float *a, *b, *c, *d, *cat, *scratch;
    float *out; /* [BLOCK · samples_per_frame] audio of a block */
    float *tx, *th, *tq, *tatt, *tg, *tu, *att_scratch, *rope_c, *rope_s;
    float *emb0, *embr, *q0, *qr;
    size_t n_act, n_scratch, n_tm, n_kv; /* floats of the buffers above (state_touch) */

    /* a pool the stages split their output channels over (bit-identical for any width) */
    qvk_pool *pool;
    float *slice[MAX_SLICES]; /* kernel scratch of pool thread i (slice[0] = scratch) */
    int n_slices;
} dec_state;

struct qve_dec_stream {
    const qve_decoder *dec;
    dec_state s;
    qve_audio_cb cb;
    void *user;

    int32_t *pending; /* [BLOCK, n_q] frames of the block being filled */
    int n_pending;
    int block_f0;    /* chunk-relative index of pending[0] */
    int chunk_fed;   /* frames fed into the current chunk (context included) */
    int chunk_ctx;   /* leading context frames of the current chunk (their audio is dropped) */
    int single_pass; /* no chunking (qve_decoder_decode_pass) */
    int32_t *history;    /* ring [CONTEXT, n_q] of the last frames fed (context of next chunk) */
    long n_frames;   /* frames fed to the decoder in total */
    int failed;
    char err[256];  /* written by the decoding thread */
    long n_pushed;  /* producer side */
    char perr[128]; /* written by the producer (bad code) */

    int threaded;
    qvk_pool *next_pool; /* set_pool's request, taken by the decoding thread between frames */
    int n_slices_ready;  /* slices set_pool allocated (published with next_pool) */
    int pool_asked, pool_taken; /* set_pool calls made / seen by the decoding thread */
    /* pooled or not (pick_pooled): ms per frame of recent blocks, [full block?][pooled?] */
    double ms_frame[2][2];
    long n_picks;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_data, cv_space;
    int32_t *queue; /* ring [QUEUE_FRAMES, n_q] */
    int q_head, q_count, finishing, thread_started;
    int busy; /* the thread is decoding a frame it took from the queue */
};

/* ==== small helpers ======================================================================== */

static void set_err(char *err, size_t n, const char *fmt, ...) {
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* ==== loading ============================================================================== */

typedef struct {
    qve_decoder *d;
    const char *path;
    char *err;
    size_t err_size;
    int failed;
    qvm_prep *cache;      /* prepared arrays to map instead of computing, or NULL */
    int save;             /* record what is prepared, for a new cache file */
    qvm_prep_array *made; /* [n_made] prepared arrays, in load order */
    int n_made;
} loader;

static int keep(loader *ld, float *p) {
    float **o = realloc(ld->d->owned, (size_t)(ld->d->n_owned + 1) * sizeof *o);
    if (!p || !o) {
        qvk_free(p);
        if (o) ld->d->owned = o;
        set_err(ld->err, ld->err_size, "%s: out of memory", ld->path);
        ld->failed = 1;
        return -1;
    }
    ld->d->owned = o;
    o[ld->d->n_owned++] = p;
    return 0;
}

/* The tensor `name` of the given shape, checked but not read: F32 as published, or F16
 * (qvoice-compress --decoder-f16). A prepared weight found in the cache never reads its source. */
static const qvm_tensor *find(loader *ld, int n_dims, int64_t d0, int64_t d1, int64_t d2,
                              enum qvm_tensor_kind k, int i, int j) {
    if (ld->failed) return NULL;
    char name[160];
    qvm_tensor_name(name, sizeof name, k, i, j);
    int64_t shape[3] = {d0, d1, d2};
    const qvm_tensor *f = qvm_st_find(ld->d->ck->codec_st, name);
    const enum qvm_dtype want = f && f->dtype == QVM_DTYPE_F16 ? QVM_DTYPE_F16 : QVM_DTYPE_F32;
    const qvm_tensor *t =
        qvm_st_expect(ld->d->ck->codec_st, name, want, n_dims, shape, ld->err, ld->err_size);
    if (!t) ld->failed = 1;
    return t;
}

/* t as f32: borrowed from the mmap, or an owned copy when F16 (widened) or misaligned. */
static const float *widen(loader *ld, const qvm_tensor *t) {
    if (!t || ld->failed) return NULL;
    if (t->dtype == QVM_DTYPE_F32 && (uintptr_t)t->data % sizeof(float) == 0) return t->data;
    float *copy = qvm_tensor_to_f32(t);
    if (copy) qvm_st_drop_pages(t->data, t->n_bytes); /* RSS holds the f32 copy only */
    return keep(ld, copy) == 0 ? copy : NULL;
}

/* Borrowed f32 tensor `name` of the given shape (see find, widen). */
static const float *get(loader *ld, int n_dims, int64_t d0, int64_t d1, int64_t d2,
                        enum qvm_tensor_kind k, int i, int j) {
    return widen(ld, find(ld, n_dims, d0, d1, d2, k, i, j));
}

/* n_bytes of prepared weights: the cache file's next array (*fresh = NULL), or a new owned
 * buffer the caller fills (*fresh = it). A cache file that stops fitting is dropped for the rest
 * (what was taken from it stays valid). */
static const void *prepared(loader *ld, size_t n_bytes, void **fresh) {
    *fresh = NULL;
    const void *c = ld->cache ? qvm_prep_take(ld->cache, n_bytes) : NULL;
    if (c) return c;
    ld->cache = NULL;
    void *p = qvk_alloc(n_bytes);
    if (keep(ld, p) != 0) return NULL;
    if (ld->save) {
        qvm_prep_array *m = realloc(ld->made, (size_t)(ld->n_made + 1) * sizeof *m);
        if (m) m[ld->n_made++] = (qvm_prep_array){p, n_bytes}, ld->made = m;
        else ld->save = 0;
    }
    return *fresh = p;
}

/* The original w (n floats) is not read again: free it if get() made it as a copy, else drop
 * its mmap pages (RSS would otherwise hold both forms: +360 MB on the 0.6B decoder). */
static void done_with(loader *ld, const float *w, size_t n) {
    float **o = ld->d->owned;
    for (int i = ld->d->n_owned - 1; i >= 0; i--)
        if (o[i] == w) {
            qvk_free(o[i]);
            o[i] = o[--ld->d->n_owned];
            return;
        }
    qvm_st_drop_pages(w, n * sizeof *w);
}

/* Conv weight [c_out, c_in, 7] → Winograd-domain panels (qvk_wino_weights). */
static const float *wino(loader *ld, const qvm_tensor *t, int c_out, int c_in) {
    if (!t) return NULL;
    void *u;
    const float *r =
        prepared(ld, qvk_wino_weights_size(&ld->d->wino, c_out, c_in) * sizeof(float), &u);
    const float *w = u ? widen(ld, t) : NULL;
    if (w) qvk_wino_weights(&ld->d->wino, u, w, c_out, c_in);
    if (w) done_with(ld, w, (size_t)c_out * c_in * CONV_K);
    return r;
}

/* ConvTranspose1d weight [c_in, c_out, 2r] → Winograd-domain weights of its r output phases. */
static const float *wino_ct(loader *ld, const qvm_tensor *t, int c_in, int c_out, int r) {
    if (!t) return NULL;
    void *u;
    const float *p =
        prepared(ld, qvk_wino_weights_size(&ld->d->wino_ct, r * c_out, c_in) * sizeof(float), &u);
    const float *w = u ? widen(ld, t) : NULL;
    if (w) qvk_wino_weights_ct(&ld->d->wino_ct, u, w, c_in, c_out, r);
    if (w) done_with(ld, w, (size_t)c_in * c_out * 2 * r);
    return p;
}

/* t as w [k, n] (row stride ldw; trans: [n, k]) → 48-column panels, in f16 when the checkpoint
 * holds the tensor in F16 (its values, so the products are those of f32 panels:
 * qvk_p48w_matmul). */
static qvk_p48w pack(loader *ld, const qvm_tensor *t, int k, int n, int64_t ldw, int trans) {
    qvk_p48w r = {NULL, NULL};
    if (!t) return r;
    const int f16 = t->dtype == QVM_DTYPE_F16;
    void *p;
    const size_t n_el = qvk_p48_size(k, n);
    const void *c = prepared(ld, n_el * (f16 ? sizeof *r.f16 : sizeof *r.f32), &p);
    const float *w = p ? widen(ld, t) : NULL;
    if (w && f16) qvk_p48_pack_f16(p, w, k, n, ldw, trans);
    else if (w) qvk_p48_pack(p, w, k, n, ldw, trans);
    if (f16) r.f16 = c;
    else r.f32 = c;
    if (w) done_with(ld, w, (size_t)k * n);
    return r;
}

/* Linear weight [n_out, n_in] → 48-column panels of its transpose (see linear()). */
static qvk_p48w lin(loader *ld, const qvm_tensor *t, int n_out, int n_in) {
    return pack(ld, t, n_in, n_out, n_in, 1);
}

/* ConvTranspose1d weight [c_in, c_out, k] viewed as [c_in, c_out·k] → 48-column panels. */
static qvk_p48w panels(loader *ld, const qvm_tensor *t, int c_in, int n) {
    return pack(ld, t, c_in, n, n, 0);
}

static void to_taps(float *t, const float *w, int c_out, int c_in, int k) {
    for (int o = 0; o < c_out; o++)
        for (int i = 0; i < c_in; i++)
            for (int j = 0; j < k; j++)
                t[((size_t)j * c_out + o) * c_in + i] = w[((size_t)o * c_in + i) * k + j];
}

/* Conv1d weight [c_out, c_in, k] → tap-major [k, c_out, c_in], so that each tap is a plain
 * [c_out, c_in] matrix and the conv runs as k sgemms on shifted views of the input (no im2col). */
static const float *taps(loader *ld, const qvm_tensor *src, int c_out, int c_in, int k) {
    if (!src) return NULL;
    void *t;
    const size_t n = (size_t)k * c_out * c_in;
    const float *r = prepared(ld, n * sizeof(float), &t);
    const float *w = t ? widen(ld, src) : NULL;
    if (w) to_taps(t, w, c_out, c_in, k);
    if (w) done_with(ld, w, n);
    return r;
}

/* Which weights are prepared, in which order: the probe below checks how they are prepared, not
 * which, so bump this when the set of prepared arrays changes. */
#define PREP_LIST 2

/* The cache key's probe: a small fixed conv weight through every preparation above, so that a
 * change of any of them (Winograd points or tile, panel layout) makes old cache files stale. */
static void probe(const qve_decoder *d, float *out) {
    float w[3 * 2 * CONV_K];
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        w[i] = (float)((i * 37) % 23) / 7.0f - 1.5f;
    qvk_wino_weights(&d->wino, out, w, 3, 2);
    out += qvk_wino_weights_size(&d->wino, 3, 2);
    qvk_wino_weights_ct(&d->wino_ct, out, w, 2, 3, 2); /* [2, 3, 4] of w */
    out += qvk_wino_weights_size(&d->wino_ct, 2 * 3, 2);
    qvk_p48_pack(out, w, 2, 3, 2, 1);
    out += qvk_p48_size(2, 3);
    qvk_p48_pack(out, w, 3, 5, 5, 0);
    out += qvk_p48_size(3, 5);
    to_taps(out, w, 3, 2, CONV_K);
    out += 3 * 2 * CONV_K;
    qvk_p48_pack_f16((uint16_t *)out, w, 2, 3, 2, 1); /* two halves per float of out */
    out[qvk_p48_size(2, 3) / 2] = PREP_LIST;
}

static size_t probe_size(const qve_decoder *d) {
    return qvk_wino_weights_size(&d->wino, 3, 2) + qvk_wino_weights_size(&d->wino_ct, 2 * 3, 2) +
           qvk_p48_size(2, 3) + qvk_p48_size(3, 5) + 3 * 2 * CONV_K + qvk_p48_size(2, 3) / 2 + 1;
}

static int load_config(qve_decoder *d, const qvm_codec_config *cc, const char *dir, char *err,
                       size_t err_size) {
    const qvm_codec_config c = *cc;
    d->n_q = c.decoder.num_quantizers;
    d->cb_size = c.decoder.codebook_size;
    d->rvq_dim = c.decoder.codebook_dim;
    d->cb_dim = c.decoder.codebook_dim / 2;
    d->latent = c.decoder.latent_dim;
    d->hidden = c.decoder.hidden_size;
    d->inter = c.decoder.intermediate_size;
    d->n_layers = c.decoder.num_hidden_layers;
    d->n_heads = c.decoder.num_attention_heads;
    d->head_dim = c.decoder.head_dim;
    d->window = c.decoder.sliding_window;
    d->dec_dim = c.decoder.decoder_dim;
    d->rms_eps = c.decoder.rms_norm_eps;
    d->rope_theta = c.decoder.rope_theta;
    d->samples_per_frame = 1;
    for (int i = 0; i < N_UP; i++) {
        d->up_ratio[i] = c.decoder.upsampling_ratios[i];
        d->samples_per_frame *= d->up_ratio[i];
    }
    for (int i = 0; i < N_BLOCKS; i++) {
        d->rate[i] = c.decoder.upsample_rates[i];
        d->samples_per_frame *= d->rate[i];
    }
    int ok = d->n_q >= 2 && d->cb_size >= 1 && d->cb_dim >= 1 && d->latent >= 1 && d->hidden >= 1 &&
             d->inter >= 1 && d->n_layers >= 0 && d->n_heads >= 1 && d->head_dim >= 2 &&
             d->head_dim % 2 == 0 && d->window >= 1 && c.output_sample_rate == QV_SAMPLE_RATE_HZ &&
             d->dec_dim % (1 << N_BLOCKS) == 0 && d->dec_dim >= (1 << N_BLOCKS) &&
             c.decoder.num_key_value_heads == d->n_heads && c.decoder.num_semantic_quantizers == 1;
    for (int i = 0; i < N_UP; i++)
        ok = ok && d->up_ratio[i] >= 1 && d->up_ratio[i] <= 64;
    for (int i = 0; i < N_BLOCKS; i++)
        ok = ok && d->rate[i] >= 1 && d->rate[i] <= 64;
    if (!ok) {
        set_err(err, err_size,
                "%s/speech_tokenizer/config.json: unsupported decoder_config (expected positive "
                "sizes, even head_dim, kv heads == heads, decoder_dim divisible by 16, "
                "output_sample_rate %d)",
                dir, QV_SAMPLE_RATE_HZ);
        return -1;
    }
    return 0;
}

/* The RVQ codebooks (embedding_sum / cluster_usage, prepared once) and output projections. */
static int load_quantizers(qve_decoder *d, loader *ld) {
    void *cbp;
    d->codebooks = prepared(ld, (size_t)d->n_q * d->cb_size * d->cb_dim * sizeof(float), &cbp);
    float *cb = cbp;
    for (int g = 0; g < d->n_q; g++) {
        const int l = g ? g - 1 : 0;
        const qvm_tensor *ts = find(ld, 2, d->cb_size, d->cb_dim, 0,
                                    g ? QVM_T_DEC_REST_SUM : QVM_T_DEC_FIRST_SUM, l, 0);
        const qvm_tensor *tu =
            find(ld, 1, d->cb_size, 0, 0, g ? QVM_T_DEC_REST_USAGE : QVM_T_DEC_FIRST_USAGE, l, 0);
        if (ld->failed) return -1;
        if (!cb) continue; /* from the cache */
        const float *sum = widen(ld, ts), *use = widen(ld, tu);
        if (ld->failed) return -1;
        for (int e = 0; e < d->cb_size; e++) {
            float u = use[e] > 1e-5f ? use[e] : 1e-5f;
            for (int i = 0; i < d->cb_dim; i++)
                *cb++ = sum[(size_t)e * d->cb_dim + i] / u;
        }
        done_with(ld, sum, (size_t)d->cb_size * d->cb_dim);
        done_with(ld, use, (size_t)d->cb_size);
    }
    d->out_first = lin(ld, find(ld, 3, d->rvq_dim, d->cb_dim, 1, QVM_T_DEC_FIRST_OUT, 0, 0),
                       d->rvq_dim, d->cb_dim);
    d->out_rest = lin(ld, find(ld, 3, d->rvq_dim, d->cb_dim, 1, QVM_T_DEC_REST_OUT, 0, 0),
                      d->rvq_dim, d->cb_dim);
    return 0; /* a failed projection: load_transformer checks ld->failed after its own */
}

/* The pre-conv, the transformer and its projections. */
static int load_transformer(qve_decoder *d, loader *ld) {
    int L = d->latent, H = d->hidden, I = d->inter, A = d->n_heads * d->head_dim;
    d->pre_w = taps(ld, find(ld, 3, L, d->rvq_dim, PRE_CONV_K, QVM_T_DEC_PRE_CONV_W, 0, 0), L,
                    d->rvq_dim, PRE_CONV_K);
    d->pre_b = get(ld, 1, L, 0, 0, QVM_T_DEC_PRE_CONV_B, 0, 0);
    d->in_w = lin(ld, find(ld, 2, H, L, 0, QVM_T_DEC_IN_PROJ_W, 0, 0), H, L);
    d->in_b = get(ld, 1, H, 0, 0, QVM_T_DEC_IN_PROJ_B, 0, 0);
    for (int l = 0; l < d->n_layers; l++) {
        dec_layer *y = &d->layers[l];
        y->attn_norm = get(ld, 1, H, 0, 0, QVM_T_DEC_ATTN_NORM, l, 0);
        y->wq = lin(ld, find(ld, 2, A, H, 0, QVM_T_DEC_Q, l, 0), A, H);
        y->wk = lin(ld, find(ld, 2, A, H, 0, QVM_T_DEC_K, l, 0), A, H);
        y->wv = lin(ld, find(ld, 2, A, H, 0, QVM_T_DEC_V, l, 0), A, H);
        y->wo = lin(ld, find(ld, 2, H, A, 0, QVM_T_DEC_O, l, 0), H, A);
        y->attn_scale = get(ld, 1, H, 0, 0, QVM_T_DEC_ATTN_SCALE, l, 0);
        y->mlp_norm = get(ld, 1, H, 0, 0, QVM_T_DEC_MLP_NORM, l, 0);
        y->w_gate = lin(ld, find(ld, 2, I, H, 0, QVM_T_DEC_GATE, l, 0), I, H);
        y->w_up = lin(ld, find(ld, 2, I, H, 0, QVM_T_DEC_UP, l, 0), I, H);
        y->w_down = lin(ld, find(ld, 2, H, I, 0, QVM_T_DEC_DOWN, l, 0), H, I);
        y->mlp_scale = get(ld, 1, H, 0, 0, QVM_T_DEC_MLP_SCALE, l, 0);
    }
    d->norm_w = get(ld, 1, H, 0, 0, QVM_T_DEC_NORM, 0, 0);
    d->outp_w = lin(ld, find(ld, 2, L, H, 0, QVM_T_DEC_OUT_PROJ_W, 0, 0), L, H);
    d->outp_b = get(ld, 1, L, 0, 0, QVM_T_DEC_OUT_PROJ_B, 0, 0);
    return ld->failed ? -1 : 0;
}

/* The ConvNeXt upsampling stages. */
static void load_upsample(qve_decoder *d, loader *ld) {
    int L = d->latent;
    /* ConvNeXt width: the checkpoint's pwconv1 rows (4·latent in the official model). */
    char pw_name[160];
    const qvm_tensor *pw = qvm_st_find(
        d->ck->codec_st, qvm_tensor_name(pw_name, sizeof pw_name, QVM_T_DEC_UP_PW1_W, 0, 0));
    d->conv_inter = pw && pw->n_dims == 2 ? (int)pw->shape[0] : 4 * L;
    int F = d->conv_inter;
    for (int s = 0; s < N_UP; s++) {
        dec_upsample *u = &d->up[s];
        int r = d->up_ratio[s];
        u->up_w = panels(ld, find(ld, 3, L, L, r, QVM_T_DEC_UP_CONV_W, s, 0), L, L * r);
        u->up_b = get(ld, 1, L, 0, 0, QVM_T_DEC_UP_CONV_B, s, 0);
        u->dw_w = get(ld, 3, L, 1, CONV_K, QVM_T_DEC_UP_DW_W, s, 0);
        u->dw_b = get(ld, 1, L, 0, 0, QVM_T_DEC_UP_DW_B, s, 0);
        u->ln_w = get(ld, 1, L, 0, 0, QVM_T_DEC_UP_NORM_W, s, 0);
        u->ln_b = get(ld, 1, L, 0, 0, QVM_T_DEC_UP_NORM_B, s, 0);
        u->pw1_w = lin(ld, find(ld, 2, F, L, 0, QVM_T_DEC_UP_PW1_W, s, 0), F, L);
        u->pw1_b = get(ld, 1, F, 0, 0, QVM_T_DEC_UP_PW1_B, s, 0);
        u->pw2_w = lin(ld, find(ld, 2, L, F, 0, QVM_T_DEC_UP_PW2_W, s, 0), L, F);
        u->pw2_b = get(ld, 1, L, 0, 0, QVM_T_DEC_UP_PW2_B, s, 0);
        u->gamma = get(ld, 1, L, 0, 0, QVM_T_DEC_UP_GAMMA, s, 0);
    }
}

/* The vocoder: first conv, the upsampling blocks with their residual units, the last conv. */
static void load_blocks(qve_decoder *d, loader *ld) {
    int L = d->latent;
    d->d0_w = wino(ld, find(ld, 3, d->dec_dim, L, CONV_K, QVM_T_DEC_CONV0_W, 0, 0), d->dec_dim, L);
    d->d0_b = get(ld, 1, d->dec_dim, 0, 0, QVM_T_DEC_CONV0_B, 0, 0);
    for (int i = 0; i < N_BLOCKS; i++) {
        dec_block *b = &d->blk[i];
        b->c_in = d->dec_dim >> i;
        b->c_out = d->dec_dim >> (i + 1);
        b->rate = d->rate[i];
        int ci = b->c_in, co = b->c_out, n = i + 1;
        b->a = get(ld, 1, ci, 0, 0, QVM_T_DEC_BLK_ALPHA, n, 0);
        b->b = get(ld, 1, ci, 0, 0, QVM_T_DEC_BLK_BETA, n, 0);
        const qvm_tensor *up = find(ld, 3, ci, co, 2 * b->rate, QVM_T_DEC_BLK_UP_W, n, 0);
        /* Winograd (1.25 products per input step instead of 2) while its weights, 2.5x the
         * checkpoint's, stay under UP_WINO_MAX_BYTES */
        b->up_wino = qvk_wino_weights_size(&d->wino_ct, b->rate * co, ci) * sizeof(float) <=
                     UP_WINO_MAX_BYTES;
        if (b->up_wino) b->up_w = wino_ct(ld, up, ci, co, b->rate);
        else b->up_p = panels(ld, up, ci, co * 2 * b->rate);
        b->up_b = get(ld, 1, co, 0, 0, QVM_T_DEC_BLK_UP_B, n, 0);
        for (int r = 0; r < N_RES; r++) {
            dec_res *u = &b->res[r];
            int m = r + 2;
            u->a1 = get(ld, 1, co, 0, 0, QVM_T_DEC_RES_ALPHA1, n, m);
            u->b1 = get(ld, 1, co, 0, 0, QVM_T_DEC_RES_BETA1, n, m);
            u->c1_w = wino(ld, find(ld, 3, co, co, CONV_K, QVM_T_DEC_RES_CONV1_W, n, m), co, co);
            u->c1_b = get(ld, 1, co, 0, 0, QVM_T_DEC_RES_CONV1_B, n, m);
            u->a2 = get(ld, 1, co, 0, 0, QVM_T_DEC_RES_ALPHA2, n, m);
            u->b2 = get(ld, 1, co, 0, 0, QVM_T_DEC_RES_BETA2, n, m);
            u->c2_w = lin(ld, find(ld, 3, co, co, 1, QVM_T_DEC_RES_CONV2_W, n, m), co, co);
            u->c2_b = get(ld, 1, co, 0, 0, QVM_T_DEC_RES_CONV2_B, n, m);
        }
    }
    int cf = d->dec_dim >> N_BLOCKS;
    d->fa = get(ld, 1, cf, 0, 0, QVM_T_DEC_LAST_ALPHA, 0, 0);
    d->fb = get(ld, 1, cf, 0, 0, QVM_T_DEC_LAST_BETA, 0, 0);
    d->fw = taps(ld, find(ld, 3, 1, cf, CONV_K, QVM_T_DEC_LAST_W, 0, 0), 1, cf, CONV_K);
    d->fbias = get(ld, 1, 1, 0, 0, QVM_T_DEC_LAST_B, 0, 0);
}

static int load_weights(qve_decoder *d, loader *ld) {
    if (load_quantizers(d, ld) || load_transformer(d, ld)) return -1;
    load_upsample(d, ld);
    load_blocks(d, ld);
    return ld->failed ? -1 : 0;
}

qve_decoder *qve_decoder_load(qvm_ckpt *ck, char *err, size_t err_size) {
    qve_decoder *d = calloc(1, sizeof *d);
    char path[1100];
    if (!d) {
        set_err(err, err_size, "%s: out of memory", ck->dir);
        return NULL;
    }
    d->ck = qvm_ckpt_ref(ck);
    snprintf(path, sizeof path, "%s", qvm_st_file(ck->codec_st, NULL));
    if (load_config(d, &ck->codec, ck->dir, err, err_size) != 0) goto fail;
    d->layers = calloc((size_t)d->n_layers + 1, sizeof *d->layers);
    if (!d->layers) {
        set_err(err, err_size, "%s: out of memory", path);
        goto fail;
    }
    qvk_wino_init(&d->wino, WINO_M, CONV_K);
    qvk_wino_init(&d->wino_ct, WINO_CT_M, 2);
    /* the prepared weights come from the cache file when one fits, else they are made here and
       saved for the next load */
    const size_t np = probe_size(d);
    float *pr = malloc(np * sizeof *pr);
    qvm_prep_id id;
    if (pr) probe(d, pr);
    const int cached = pr && !qvm_prep_id_make(&id, "decoder", d->ck->codec_st, pr, np * sizeof *pr);
    free(pr);
    loader ld = {d, path, err, err_size, 0, NULL, 0, NULL, 0};
    if (cached) d->cache = ld.cache = qvm_prep_open(&id);
    ld.save = cached && !ld.cache;
    int rc = load_weights(d, &ld);
    if (rc == 0 && ld.save) qvm_prep_save(&id, ld.made, ld.n_made);
    free(ld.made);
#ifdef __GLIBC__
    /* the widened f16 copies done_with() freed sit between the kept buffers in malloc's heaps,
     * not returned to the system: ~120 MB of the 0.6B's --decoder-f16 decoder */
    if (rc == 0) malloc_trim(0);
#endif
    if (rc == 0) return d;
fail:
    qve_decoder_free(d);
    return NULL;
}

void qve_decoder_free(qve_decoder *dec) {
    if (!dec) return;
    for (int i = 0; i < dec->n_owned; i++)
        qvk_free(dec->owned[i]);
    free(dec->owned);
    qvm_prep_close(dec->cache);
    free(dec->layers);
    qvm_ckpt_free(dec->ck);
    free(dec);
}

int qve_decoder_n_codebooks(const qve_decoder *dec) {
    return dec->n_q;
}
int qve_decoder_codebook_size(const qve_decoder *dec) {
    return dec->cb_size;
}
int qve_decoder_samples_per_frame(const qve_decoder *dec) {
    return dec->samples_per_frame;
}

/* ==== state sizing and allocation ========================================================== */

/* Rows of context a transposed conv (kernel k, stride s) needs so that every kept output
 * sample has all its contributions: ceil((k − s) / s). */
static int ct_ctx(int k, int s) {
    return (k - s + s - 1) / s;
}

typedef struct {
    size_t act, scratch;
} sizes;

static void need(size_t *m, size_t v) {
    if (v > *m) *m = v;
}

/* Largest activation and kernel scratch (Winograd and transposed convs) over all stages for a
 * block of nb frames. */
static sizes stage_sizes(const qve_decoder *d, int nb) {
    sizes z = {0, 0};
    need(&z.act, (size_t)d->rvq_dim * (PRE_CONV_K - 1 + nb));
    need(&z.act, (size_t)d->latent * nb);
    size_t t = (size_t)nb;
    for (int s = 0; s < N_UP; s++) {
        int r = d->up_ratio[s], cx = ct_ctx(r, r);
        need(&z.act, (size_t)d->latent * (cx + t) * r);
        need(&z.scratch, qvk_conv_transpose1d_p48_scratch(d->latent, d->latent, r, (int)(cx + t)));
        t *= r;
        need(&z.act, t * (size_t)d->conv_inter);
        need(&z.act, (size_t)d->latent * (CONV_K - 1 + t));
    }
    need(&z.act, (size_t)d->latent * (CONV_K - 1 + t));
    need(&z.act, (size_t)d->dec_dim * t);
    need(&z.scratch, qvk_wino_scratch(&d->wino, d->latent, d->dec_dim, (int)t, 1));
    for (int i = 0; i < N_BLOCKS; i++) {
        const dec_block *b = &d->blk[i];
        int r = b->rate, k = 2 * r, cx = ct_ctx(k, r);
        if (i == PER_FRAME_BLOCK) t /= (size_t)nb;
        need(&z.act, (size_t)b->c_in * (cx + t));
        need(&z.act, ((size_t)(cx + t) * r + k) * b->c_out);
        need(&z.scratch, b->up_wino ? qvk_wino_scratch(&d->wino_ct, b->c_in, r * b->c_out, (int)t, 1)
                                    : qvk_conv_transpose1d_p48_scratch(b->c_in, b->c_out, k,
                                                                       (int)(cx + t)));
        t *= r;
        for (int u = 0; u < N_RES; u++) {
            int h = (CONV_K - 1) * res_dilation[u];
            need(&z.act, (size_t)b->c_out * (h + t));
            need(&z.scratch,
                 qvk_wino_scratch(&d->wino, b->c_out, b->c_out, (int)t, res_dilation[u]));
        }
    }
    int cf = d->dec_dim >> N_BLOCKS;
    need(&z.act, (size_t)cf * (CONV_K - 1 + t));
    need(&z.act, (size_t)CONV_K * (CONV_K - 1 + t)); /* final_conv's scratch [w_in, CONV_K] in c */
    return z;
}

static void tail_init(tail *t, int n_ch, int n, float **arena) {
    t->n_ch = n_ch;
    t->n = n;
    t->x = *arena;
    *arena += (size_t)n_ch * n;
}

static void state_free(dec_state *s) {
    float **bufs[] = {&s->a,   &s->b,       &s->c,       &s->d,     &s->cat,
                      &s->out, &s->scratch, &s->k_cache, &s->pre.x, &s->tx};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        qvk_free(*bufs[i]);
        *bufs[i] = NULL;
    }
    for (int i = 1; i < s->n_slices; i++)
        qvk_free(s->slice[i]);
    s->n_slices = 0;
}

/* Allocates every buffer a block needs (nothing is allocated while decoding). */
static int state_alloc(dec_state *s, const qve_decoder *d) {
    memset(s, 0, sizeof *s);
    sizes z = {0, 0};
    for (int nb = 1; nb <= QVE_DEC_BLOCK_FRAMES; nb++) {
        sizes y = stage_sizes(d, nb);
        need(&z.act, y.act);
        need(&z.scratch, y.scratch);
    }
    size_t f = sizeof(float);
    s->a = qvk_alloc(z.act * f);
    s->b = qvk_alloc(z.act * f);
    s->c = qvk_alloc(z.act * f);
    s->d = qvk_alloc(z.act * f);
    s->cat = qvk_alloc(z.act * f);
    s->scratch = qvk_alloc(z.scratch * f);
    s->out = qvk_alloc((size_t)QVE_DEC_BLOCK_FRAMES * d->samples_per_frame * f);

    /* transformer and quantizer buffers, one block */
    int B = QVE_DEC_BLOCK_FRAMES, A = d->n_heads * d->head_dim;
    size_t n_tm = (size_t)B * d->hidden * 2 + (size_t)B * A * 2 + (size_t)B * d->inter * 2 +
                  (size_t)d->n_heads * d->window + (size_t)d->head_dim +
                  (size_t)B * d->cb_dim * 2 + (size_t)B * d->rvq_dim * 2;
    s->tx = qvk_alloc(n_tm * f);
    float *p = s->tx;
    if (p) {
        s->th = p += (size_t)B * d->hidden;
        s->tq = p += (size_t)B * d->hidden;
        s->tatt = p += (size_t)B * A;
        s->tg = p += (size_t)B * A;
        s->tu = p += (size_t)B * d->inter;
        s->att_scratch = p += (size_t)B * d->inter;
        s->rope_c = p += (size_t)d->n_heads * d->window;
        s->rope_s = p += d->head_dim / 2;
        s->emb0 = p += d->head_dim / 2;
        s->embr = p += (size_t)B * d->cb_dim;
        s->q0 = p += (size_t)B * d->cb_dim;
        s->qr = p += (size_t)B * d->rvq_dim;
    }
    s->max_pos = QVE_DEC_CHUNK_FRAMES + QVE_DEC_CONTEXT_FRAMES;
    s->n_act = z.act, s->n_scratch = z.scratch, s->n_tm = n_tm;
    s->slice[0] = s->scratch;
    s->n_slices = 1;
    s->n_kv = (size_t)2 * d->n_layers * s->max_pos * A;
    s->k_cache = qvk_alloc(s->n_kv * f + f);
    /* 4 KB pages: the KV cache is 21 MB on the 0.6B and a huge page is zeroed whole at its first
     * write, so the first one-frame block (16 rows, one per layer and K/V, 1.3 MB apart) zeroed
     * all of it before the first audio; with small pages a block faults in only its rows */
    if (s->k_cache) madvise(s->k_cache, (s->n_kv * f + f + 4095) & ~(size_t)4095, MADV_NOHUGEPAGE);
    s->v_cache = s->k_cache ? s->k_cache + (size_t)d->n_layers * s->max_pos * A : NULL;

    /* conv tails in one block */
    size_t n_tail = (size_t)d->rvq_dim * (PRE_CONV_K - 1) + (size_t)d->latent * (CONV_K - 1);
    for (int i = 0; i < N_UP; i++)
        n_tail += (size_t)d->latent * (ct_ctx(d->up_ratio[i], d->up_ratio[i]) + CONV_K - 1);
    for (int i = 0; i < N_BLOCKS; i++) {
        n_tail += (size_t)d->blk[i].c_in * ct_ctx(2 * d->rate[i], d->rate[i]);
        for (int u = 0; u < N_RES; u++)
            n_tail += (size_t)d->blk[i].c_out * (CONV_K - 1) * res_dilation[u];
    }
    n_tail += (size_t)(d->dec_dim >> N_BLOCKS) * (CONV_K - 1);
    float *arena = qvk_alloc(n_tail * f + f);
    if (!s->a || !s->b || !s->c || !s->d || !s->cat || !s->out || !s->scratch || !s->tx ||
        !s->k_cache || !arena) {
        qvk_free(arena);
        state_free(s);
        return -1;
    }
    tail_init(&s->pre, d->rvq_dim, PRE_CONV_K - 1, &arena);
    for (int i = 0; i < N_UP; i++) {
        tail_init(&s->up_ctx[i], d->latent, ct_ctx(d->up_ratio[i], d->up_ratio[i]), &arena);
        tail_init(&s->up_dw[i], d->latent, CONV_K - 1, &arena);
    }
    tail_init(&s->d0, d->latent, CONV_K - 1, &arena);
    for (int i = 0; i < N_BLOCKS; i++) {
        tail_init(&s->blk_ctx[i], d->blk[i].c_in, ct_ctx(2 * d->rate[i], d->rate[i]), &arena);
        for (int u = 0; u < N_RES; u++)
            tail_init(&s->res[i][u], d->blk[i].c_out, (CONV_K - 1) * res_dilation[u], &arena);
    }
    tail_init(&s->fin, d->dec_dim >> N_BLOCKS, CONV_K - 1, &arena);
    return 0;
}

/* Writes every activation buffer once, so that the first block does not take their page faults
 * (~35 ms CPU of the 0.6B's first one-frame block); a stream's thread does it before its first
 * frame. The KV cache is left to fault row by row (state_alloc). */
static void state_touch(dec_state *s) {
    float *big[] = {s->a, s->b, s->c, s->d, s->cat};
    for (size_t i = 0; i < sizeof big / sizeof *big; i++)
        memset(big[i], 0, s->n_act * sizeof(float));
    memset(s->scratch, 0, s->n_scratch * sizeof(float));
    memset(s->tx, 0, s->n_tm * sizeof(float));
}

/* Clean state for a new chunk: zero conv padding, RoPE positions from 0 (KV rows are rewritten
 * before they are read). The tails share one arena that starts at pre.x. */
static void state_reset(dec_state *s) {
    tail *last = &s->fin;
    size_t n = (size_t)(last->x + (size_t)last->n_ch * last->n - s->pre.x);
    memset(s->pre.x, 0, n * sizeof(float));
}

/* ==== block stages ========================================================================= */

/* A stage's share: output channels (or columns) [i0, i1) with the calling thread's scratch. */
typedef void (*part_fn)(const void *arg, int i0, int i1, float *scratch);

typedef struct {
    part_fn fn;
    const void *arg;
} stage;

typedef struct {
    const dec_state *s;
    const stage *st;
    int n_st, n, align, width;
} par_job;

static void par_part(int ith, int nth, void *p) {
    const par_job *j = p;
    (void)nth;
    if (ith >= j->width) return;
    int units = (j->n + j->align - 1) / j->align;
    int i0 = units * ith / j->width * j->align, i1 = units * (ith + 1) / j->width * j->align;
    if (i1 > j->n) i1 = j->n;
    for (int k = 0; k < j->n_st && i0 < i1; k++)
        j->st[k].fn(j->st[k].arg, i0, i1, j->s->slice[ith]);
}

/* Threads a split of n items in multiples of align would use. */
static int par_width(const dec_state *s, int n, int align) {
    int w = s->pool ? qvk_pool_threads(s->pool) : 1, units = (n + align - 1) / align;
    if (w > s->n_slices) w = s->n_slices;
    return w < units ? w : units;
}

/* The stages over [0, n) in ranges that are multiples of align (but the last), one range per
 * thread of the state's pool when they have at least PAR_MIN_WORK of work, else all on this
 * thread. Every stage makes its range's rows from inputs an earlier dispatch (or an earlier
 * stage, on the same rows) completed, and splits an output axis, so the result is the same for
 * any number of threads; stages in one call share one dispatch (one wait for the slowest
 * thread, which on a shared machine can be a preempted one). */
static void par_stages(const dec_state *s, int n, int align, double work, const stage *st,
                       int n_st) {
    int w = par_width(s, n, align);
    if (w <= 1 || work < PAR_MIN_WORK) {
        for (int k = 0; k < n_st; k++)
            st[k].fn(st[k].arg, 0, n, s->scratch);
        return;
    }
    par_job j = {s, st, n_st, n, align, w};
    qvk_pool_run(s->pool, par_part, &j);
}

static void par_for(const dec_state *s, int n, int align, double work, part_fn fn,
                    const void *arg) {
    stage st = {fn, arg};
    par_stages(s, n, align, work, &st, 1);
}

/* Rows [0, n) of src into dst (both [n, ch]), columns [c0, c1) only. */
static void copy_cols(float *dst, const float *src, int n, int ch, int c0, int c1) {
    if (c0 == 0 && c1 == ch) {
        memcpy(dst, src, (size_t)n * ch * sizeof *dst);
        return;
    }
    for (int t = 0; t < n; t++)
        memcpy(dst + (size_t)t * ch + c0, src + (size_t)t * ch + c0,
               (size_t)(c1 - c0) * sizeof *dst);
}

typedef struct {
    float *cat;
    tail *tl;
    const float *x, *a, *b;
    int n;
} tail_job;

static void tail_part(const void *arg, int c0, int c1, float *scratch) {
    const tail_job *j = arg;
    const int h = j->tl->n, ch = j->tl->n_ch;
    float *fresh = j->cat + (size_t)h * ch;
    (void)scratch;
    copy_cols(j->cat, j->tl->x, h, ch, c0, c1);
    copy_cols(fresh, j->x, j->n, ch, c0, c1);
    if (j->a) qvk_snakebeta(fresh + c0, ch, j->n, c1 - c0, j->a + c0, j->b + c0);
    copy_cols(j->tl->x, j->cat + (size_t)j->n * ch, h, ch, c0, c1);
}

/* cat[tl.n + n, c] = [tail ; act(x)] (time-major rows) where act is SnakeBeta (a, b) or
 * identity; then the tail takes the last tl.n rows. Returns cat's row count. */
static int with_tail(const dec_state *s, float *cat, tail *tl, const float *x, int n,
                     const float *a, const float *b) {
    tail_job j = {cat, tl, x, a, b, n};
    par_for(s, tl->n_ch, 16, (double)tl->n_ch * (tl->n + n) * (a ? 8 : 2), tail_part, &j);
    return tl->n + n;
}

typedef struct {
    float *x;
    const float *a, *b;
    int n, ch;
} snake_job;

static void snake_part(const void *arg, int c0, int c1, float *scratch) {
    const snake_job *j = arg;
    (void)scratch;
    qvk_snakebeta(j->x + c0, j->ch, j->n, c1 - c0, j->a + c0, j->b + c0);
}

typedef struct {
    const qvk_wino *wn;
    float *y;
    const float *x, *u, *bias;
    int w_in, c_in, c_out, ph, dil;
} wino_job;

static void wino_part(const void *arg, int c0, int c1, float *scratch) {
    const wino_job *j = arg;
    qvk_wino_part(j->wn, j->y, j->x, j->w_in, j->c_in, j->c_out, j->ph, j->dil, j->u, j->bias,
                  scratch, c0, c1);
}

/* A Winograd conv (ph = 1) or transposed conv (ph = r) of cat into y, by channel ranges. */
static void wino_conv(const dec_state *s, const qvk_wino *wn, float *y, int w_in, int c_in,
                      int c_out, int ph, int dil, const float *u, const float *bias) {
    wino_job j = {wn, y, s->cat, u, bias, w_in, c_in, c_out, ph, dil};
    int n = w_in - (wn->k - 1) * dil, align = QVK_P48_NR;
    if (ph > 1 && c_out % QVK_P48_NR) align = c_out; /* the phases' columns must stay in panels */
    par_for(s, c_out, align, (double)n * ph * c_in * c_out * wn->alpha / wn->m, wino_part, &j);
}

/* A k = 7 dense conv with Winograd-domain weights on x [n, c_in] continuing from the tail. */
static void wino_step(const qve_decoder *d, dec_state *s, tail *tl, float *y, const float *x, int n,
                      int c_out, int dil, const float *u, const float *bias, const float *a,
                      const float *b) {
    int w_in = with_tail(s, s->cat, tl, x, n, a, b);
    wino_conv(s, &d->wino, y, w_in, tl->n_ch, c_out, 1, dil, u, bias);
}

typedef struct {
    float *y, *c;
    const float *x;
    qvk_p48w w;
    const float *bias;
    int c_in, c_out, w_in, k, r, skip, out;
} convt_job;

/* Panels from element off on (a column range's panels start at its first column·k). */
static qvk_p48w p48_at(qvk_p48w w, size_t off) {
    qvk_p48w r = {w.f32 ? w.f32 + off : NULL, w.f16 ? w.f16 + off : NULL};
    return r;
}

static void convt_part(const void *arg, int o0, int o1, float *scratch) {
    const convt_job *j = arg;
    qvk_conv_transpose1d_p48w(j->c + o0, j->c_out, j->x, j->c_in, j->c_in, o1 - o0, j->w_in, j->k,
                              j->r, j->k - j->r, p48_at(j->w, (size_t)o0 * j->k * j->c_in),
                              j->bias ? j->bias + o0 : NULL, scratch);
    copy_cols(j->y, j->c + (size_t)j->skip * j->c_out, j->out, j->c_out, o0, o1);
}

static int gcd(int a, int b) {
    return b ? gcd(b, a % b) : a;
}

/* y[n·r, c_out] = causal ConvTranspose1d (kernel k, stride r, right trim k − r) of x[n, c_in]
 * continuing from the context tail; uses s->c for the untrimmed rows (y may be x). The weights'
 * panels hold c_out·k columns, so a channel range starts on a panel when its first channel·k is
 * a multiple of the panel width. */
static void convt_step(dec_state *s, tail *tl, float *y, const float *x, int n, int c_out, int k,
                       int r, qvk_p48w w, const float *bias, const float *a, const float *b) {
    int w_in = with_tail(s, s->cat, tl, x, n, a, b);
    convt_job j = {y, s->c, s->cat, w, bias, tl->n_ch, c_out, w_in, k, r, tl->n * r, n * r};
    par_for(s, c_out, QVK_P48_NR / gcd(k, QVK_P48_NR), (double)w_in * tl->n_ch * c_out * k,
            convt_part, &j);
}

typedef struct {
    float *y;
    const float *x, *bias;
    qvk_p48w wp;
    int n_rows, n_in, n_out;
} linear_job;

static void linear_part(const void *arg, int c0, int c1, float *scratch) {
    const linear_job *j = arg;
    (void)scratch;
    qvk_p48w_matmul(j->y + c0, j->n_out, j->x, j->n_in, p48_at(j->wp, (size_t)c0 * j->n_in),
                    j->n_in, c1 - c0, j->n_rows);
    if (j->bias) qvk_add_bias(j->y + c0, j->n_out, j->bias + c0, j->n_rows, c1 - c0);
}

/* y[n_rows, n_out] = x[n_rows, n_in] · Wᵀ (+ bias) with W packed by lin(): no sgemm repacking
 * of the weights on every block; column ranges of whole panels go to the pool. */
static void linear(const dec_state *s, float *y, const float *x, qvk_p48w wp, const float *bias,
                   int n_rows, int n_in, int n_out) {
    linear_job j = {y, x, bias, wp, n_rows, n_in, n_out};
    par_for(s, n_out, QVK_P48_NR, (double)n_rows * n_in * n_out, linear_part, &j);
}

typedef struct {
    float *y, *tmp;
    const float *x, *bias;
    qvk_p48w w;
    int n, ch;
} res_job;

/* A residual unit's 1×1 conv added to the stream: y += x·Wᵀ + bias, columns [c0, c1) (the product
 * goes through tmp, so y gets y + (W·x + b) as the reference sums it). */
static void res_part(const void *arg, int c0, int c1, float *scratch) {
    const res_job *j = arg;
    (void)scratch;
    qvk_p48w_matmul(j->tmp + c0, j->ch, j->x, j->ch, p48_at(j->w, (size_t)c0 * j->ch), j->ch,
                    c1 - c0, j->n);
    qvk_add_bias(j->tmp + c0, j->ch, j->bias + c0, j->n, c1 - c0);
    qvk_add_rows(j->y + c0, j->ch, j->tmp + c0, j->ch, j->n, c1 - c0);
}

/* Codes [nb, n_q] → q [nb, rvq_dim] (time-major): both output projections, summed. */
static void rvq_decode(const qve_decoder *d, dec_state *s, const int32_t *codes, int nb) {
    int D = d->cb_dim;
    for (int t = 0; t < nb; t++) {
        const int32_t *c = codes + (size_t)t * d->n_q;
        memcpy(s->emb0 + (size_t)t * D, d->codebooks + (size_t)c[0] * D, (size_t)D * sizeof(float));
        float *r = s->embr + (size_t)t * D;
        memcpy(r, d->codebooks + ((size_t)1 * d->cb_size + c[1]) * D, (size_t)D * sizeof(float));
        for (int g = 2; g < d->n_q; g++) {
            const float *e = d->codebooks + ((size_t)g * d->cb_size + c[g]) * D;
            for (int i = 0; i < D; i++)
                r[i] += e[i];
        }
    }
    linear(s, s->q0, s->emb0, d->out_first, NULL, nb, D, d->rvq_dim);
    linear(s, s->qr, s->embr, d->out_rest, NULL, nb, D, d->rvq_dim);
    for (size_t i = 0; i < (size_t)nb * d->rvq_dim; i++)
        s->q0[i] += s->qr[i];
}

/* pre_transformer on x [nb, H] in place for chunk positions pos0 .. pos0+nb−1. */
static void transformer(const qve_decoder *d, dec_state *s, float *x, int nb, int pos0) {
    int H = d->hidden, A = d->n_heads * d->head_dim, hd = d->head_dim;
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < d->n_layers; l++) {
        const dec_layer *y = &d->layers[l];
        float *kc = s->k_cache + (size_t)l * s->max_pos * A;
        float *vc = s->v_cache + (size_t)l * s->max_pos * A;
        for (int t = 0; t < nb; t++)
            qvk_rmsnorm(s->th + (size_t)t * H, x + (size_t)t * H, y->attn_norm, H, d->rms_eps);
        linear(s, s->tq, s->th, y->wq, NULL, nb, H, A);
        linear(s, kc + (size_t)pos0 * A, s->th, y->wk, NULL, nb, H, A);
        linear(s, vc + (size_t)pos0 * A, s->th, y->wv, NULL, nb, H, A);
        for (int t = 0; t < nb; t++) {
            int p = pos0 + t;
            qvk_rope_table(s->rope_c, s->rope_s, hd, p, d->rope_theta);
            qvk_rope_apply(s->tq + (size_t)t * A, d->n_heads, hd, s->rope_c, s->rope_s);
            qvk_rope_apply(kc + (size_t)p * A, d->n_heads, hd, s->rope_c, s->rope_s);
        }
        for (int t = 0; t < nb; t++) {
            int p = pos0 + t, j0 = p - d->window + 1 > 0 ? p - d->window + 1 : 0;
            qvk_attend(NULL, s->tatt + (size_t)t * A, s->tq + (size_t)t * A, kc + (size_t)j0 * A,
                       vc + (size_t)j0 * A, p - j0 + 1, A, d->n_heads, d->n_heads, hd, scale,
                       s->att_scratch);
        }
        linear(s, s->th, s->tatt, y->wo, NULL, nb, A, H);
        for (int t = 0; t < nb; t++)
            for (int i = 0; i < H; i++)
                x[(size_t)t * H + i] += y->attn_scale[i] * s->th[(size_t)t * H + i];
        for (int t = 0; t < nb; t++)
            qvk_rmsnorm(s->th + (size_t)t * H, x + (size_t)t * H, y->mlp_norm, H, d->rms_eps);
        linear(s, s->tg, s->th, y->w_gate, NULL, nb, H, d->inter);
        linear(s, s->tu, s->th, y->w_up, NULL, nb, H, d->inter);
        qvk_swiglu(s->tg, s->tg, s->tu, nb * d->inter);
        linear(s, s->th, s->tg, y->w_down, NULL, nb, d->inter, H);
        for (int t = 0; t < nb; t++)
            for (int i = 0; i < H; i++)
                x[(size_t)t * H + i] += y->mlp_scale[i] * s->th[(size_t)t * H + i];
    }
    for (int t = 0; t < nb; t++)
        qvk_rmsnorm(x + (size_t)t * H, x + (size_t)t * H, d->norm_w, H, d->rms_eps);
}

/* Decoder block i: SnakeBeta → causal ConvTranspose (k 2r, stride r) → three residual units.
 * Input x [t, c_in] (clobbered: used as scratch), output y [t·r, c_out]; returns t·r. */
static int block_step(const qve_decoder *d, dec_state *s, int i, float *y, float *x, int t) {
    const dec_block *bk = &d->blk[i];
    int r = bk->rate, co = bk->c_out;
    if (bk->up_wino) { /* one context row: y gets exactly the t·r new samples */
        int w_in = with_tail(s, s->cat, &s->blk_ctx[i], x, t, bk->a, bk->b);
        wino_conv(s, &d->wino_ct, y, w_in, bk->c_in, co, r, 1, bk->up_w, bk->up_b);
    } else
        convt_step(s, &s->blk_ctx[i], y, x, t, co, 2 * r, r, bk->up_p, bk->up_b, bk->a, bk->b);
    t *= r;
    /* per unit two dispatches: conv1 (Winograd) + SnakeBeta by channels, then the 1×1 conv's
       columns of y + the next unit's input window of the same columns */
    const dec_res *ru = &bk->res[0];
    int w_in = with_tail(s, s->cat, &s->res[i][0], y, t, ru->a1, ru->b1);
    for (int u = 0; u < N_RES; u++) {
        ru = &bk->res[u];
        int dil = res_dilation[u];
        wino_job wj = {&d->wino, x, s->cat, ru->c1_w, ru->c1_b, w_in, co, co, 1, dil};
        snake_job sj = {x, ru->a2, ru->b2, t, co};
        const stage conv1[] = {{wino_part, &wj}, {snake_part, &sj}};
        par_stages(s, co, QVK_P48_NR, (double)t * co * co * d->wino.alpha / d->wino.m + t * co * 8,
                   conv1, 2);
        res_job rj = {y, s->c, x, ru->c2_b, ru->c2_w, t, co};
        const dec_res *nx = u + 1 < N_RES ? &bk->res[u + 1] : NULL;
        tail *tl = nx ? &s->res[i][u + 1] : NULL;
        tail_job nj = {s->cat, tl, y, nx ? nx->a1 : NULL, nx ? nx->b1 : NULL, t};
        const stage conv2[] = {{res_part, &rj}, {tail_part, &nj}};
        par_stages(s, co, QVK_P48_NR, (double)t * co * co + (nx ? (double)co * (tl->n + t) * 8 : 0),
                   conv2, nx ? 2 : 1);
        if (nx) w_in = tl->n + t;
    }
    return t;
}

/* decoder.5 (SnakeBeta) and decoder.6 (→ 1 channel, k = 7) of x [n, C], clamped to [−1, 1]. */
static void final_conv(const qve_decoder *d, dec_state *s, float *out, const float *x, int n) {
    const int w_in = with_tail(s, s->cat, &s->fin, x, n, d->fa, d->fb);
    qvk_conv1d_to1_tm(out, s->cat, w_in, s->fin.n_ch, CONV_K, d->fw, d->fbias[0], s->c);
    for (int t = 0; t < n; t++)
        out[t] = out[t] < -1.0f ? -1.0f : (out[t] > 1.0f ? 1.0f : out[t]);
}

/* Decodes nb frames at chunk positions pos0.. and returns their nb·samples_per_frame samples
 * (clamped) in a buffer owned by the state. Activations are time-major [t, channels] throughout,
 * so the convolutions' tiles read and write them in place. */
static const float *decode_block(const qve_decoder *d, dec_state *s, const int32_t *codes, int nb,
                                 int pos0) {
    int L = d->latent, H = d->hidden;
    /* quantizer → pre_conv → transformer */
    rvq_decode(d, s, codes, nb);
    int w_pre = with_tail(s, s->cat, &s->pre, s->q0, nb, NULL, NULL);
    qvk_conv1d_taps_tm(s->a, s->cat, w_pre, d->rvq_dim, L, PRE_CONV_K, d->pre_w, d->pre_b);
    linear(s, s->tx, s->a, d->in_w, d->in_b, nb, L, H);
    transformer(d, s, s->tx, nb, pos0);
    linear(s, s->b, s->tx, d->outp_w, d->outp_b, nb, H, L);

    /* upsample: ConvTranspose (k = s) + ConvNeXt; b holds the stream */
    int t = nb;
    for (int u = 0; u < N_UP; u++) {
        const dec_upsample *w = &d->up[u];
        int r = d->up_ratio[u];
        convt_step(s, &s->up_ctx[u], s->b, s->b, t, L, r, r, w->up_w, w->up_b, NULL, NULL);
        t *= r;
        with_tail(s, s->cat, &s->up_dw[u], s->b, t, NULL, NULL);
        qvk_conv1d_depthwise_tm(s->a, s->cat, t, L, CONV_K, w->dw_w, w->dw_b);
        for (int i = 0; i < t; i++)
            qvk_layernorm(s->a + (size_t)i * L, s->a + (size_t)i * L, w->ln_w, w->ln_b, L, 1e-6f);
        linear(s, s->cat, s->a, w->pw1_w, w->pw1_b, t, L, d->conv_inter);
        qvk_gelu_erf(s->cat, t * d->conv_inter);
        linear(s, s->a, s->cat, w->pw2_w, w->pw2_b, t, d->conv_inter, L);
        for (int i = 0; i < t; i++)
            for (int c = 0; c < L; c++)
                s->b[(size_t)i * L + c] += w->gamma[c] * s->a[(size_t)i * L + c];
    }

    /* decoder.0 and the first block(s) on the whole block of frames; the stream ends in x */
    wino_step(d, s, &s->d0, s->a, s->b, t, d->dec_dim, 1, d->d0_w, d->d0_b, NULL, NULL);
    float *x = s->a, *y = s->b;
    for (int i = 0; i < PER_FRAME_BLOCK; i++) {
        t = block_step(d, s, i, y, x, t);
        float *sw = x;
        x = y;
        y = sw;
    }

    /* the remaining blocks and the final conv frame by frame, in y and d (x keeps the stream) */
    int cin = d->blk[PER_FRAME_BLOCK].c_in, tp = t / nb, spf = d->samples_per_frame;
    for (int f = 0; f < nb; f++) {
        float *u = y, *v = s->d;
        memcpy(u, x + (size_t)f * tp * cin, (size_t)tp * cin * sizeof *u);
        int n = tp;
        for (int i = PER_FRAME_BLOCK; i < N_BLOCKS; i++) {
            n = block_step(d, s, i, v, u, n);
            float *sw = u;
            u = v;
            v = sw;
        }
        final_conv(d, s, s->out + (size_t)f * spf, u, n);
    }
    return s->out;
}

/* ==== chunking and streaming =============================================================== */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Whether a block of nb frames splits over the lent pool (the samples are the same either way).
 * On a shared machine a pool thread can be preempted at any of a block's ~45 waits: at load 5
 * on 2 cores, 2 threads took 98 ms per frame against 64 for 1 (medians). So each way's wall time
 * per frame is kept (separately for full and shorter blocks, whose per-frame costs differ), the
 * faster one is used and the other retried every 8th block; an untried way goes first, the
 * pool before the single thread. */
static int pick_pooled(qve_dec_stream *st, int nb) {
    const double *m = st->ms_frame[nb == QVE_DEC_BLOCK_FRAMES];
    if (m[1] == 0.0) return 1;
    if (m[0] == 0.0) return 0;
    int better = m[1] <= m[0];
    return ++st->n_picks % 8 == 0 ? !better : better;
}

/* Decodes the pending frames as one block and hands the audio of the non-context frames to the
 * callback. Returns 0, or -1 when the callback asked to stop. */
static int run_pending(qve_dec_stream *st) {
    if (st->n_pending == 0) return 0;
    const qve_decoder *d = st->dec;
    int nb = st->n_pending, f0 = st->block_f0;
    qvk_pool *lent = st->s.pool;
    const int pooled = lent && pick_pooled(st, nb);
    const double t0 = now_ms();
    st->s.pool = pooled ? lent : NULL;
    const float *pcm = decode_block(d, &st->s, st->pending, nb, f0);
    st->s.pool = lent;
    if (lent) { /* a running mean over the last few blocks of this kind */
        double *m = &st->ms_frame[nb == QVE_DEC_BLOCK_FRAMES][pooled], v = (now_ms() - t0) / nb;
        *m = *m == 0.0 ? v : 0.5 * (*m + v);
    }
    st->block_f0 += nb;
    st->n_pending = 0;
    int skip = st->chunk_ctx - f0;
    if (skip < 0) skip = 0;
    if (skip >= nb) return 0;
    int spf = d->samples_per_frame;
    if (st->cb(st->user, pcm + (size_t)skip * spf, (nb - skip) * spf) != 0) {
        set_err(st->err, sizeof st->err, "speech decoder: stopped by the audio callback");
        return -1;
    }
    return 0;
}

/* Frames in the block starting at chunk position f0 (fixed per position, so every path
 * decodes the same blocks). Context frames, all known at once, go in full blocks; new frames
 * start with blocks of 1, 1, 2, 4 then QVE_DEC_BLOCK_FRAMES, so the first audio of a stream
 * comes after one frame while later blocks amortise weight reads over several frames. */
static int block_frames(int f0, int n_ctx) {
    if (f0 < n_ctx) return n_ctx - f0 < QVE_DEC_BLOCK_FRAMES ? n_ctx - f0 : QVE_DEC_BLOCK_FRAMES;
    int f = f0 - n_ctx, n = 1;
    while (n * 2 <= f && n * 2 <= QVE_DEC_BLOCK_FRAMES)
        n *= 2;
    return n;
}

/* Adds one frame to the current chunk (a block is decoded when full). */
static int add_to_chunk(qve_dec_stream *st, const int32_t *frame) {
    int nq = st->dec->n_q;
    memcpy(st->pending + (size_t)st->n_pending * nq, frame, (size_t)nq * sizeof *frame);
    st->n_pending++;
    st->chunk_fed++;
    if (st->n_pending == block_frames(st->block_f0, st->chunk_ctx)) return run_pending(st);
    return 0;
}

/* The reference chunked_decode: chunk k ≥ 1 starts at frame 300k from a clean state, preceded by
 * the 25 frames before it as context. A full chunk is flushed at once (its partial last block is
 * final), the next one starts with the next frame. */
static int feed_frame(qve_dec_stream *st, const int32_t *frame) {
    int nq = st->dec->n_q;
    if (st->single_pass) {
        if (st->chunk_fed == st->s.max_pos) {
            set_err(st->err, sizeof st->err, "speech decoder: single pass longer than %d frames",
                    st->s.max_pos);
            return -1;
        }
        return add_to_chunk(st, frame);
    }
    if (st->chunk_fed - st->chunk_ctx == QVE_DEC_CHUNK_FRAMES) {
        state_reset(&st->s);
        st->chunk_fed = 0;
        st->block_f0 = 0;
        st->chunk_ctx = QVE_DEC_CONTEXT_FRAMES;
        for (int i = 0; i < QVE_DEC_CONTEXT_FRAMES; i++) {
            long f = st->n_frames - QVE_DEC_CONTEXT_FRAMES + i;
            if (add_to_chunk(st, st->history + (size_t)(f % QVE_DEC_CONTEXT_FRAMES) * nq) != 0)
                return -1;
        }
    }
    memcpy(st->history + (size_t)(st->n_frames % QVE_DEC_CONTEXT_FRAMES) * nq, frame,
           (size_t)nq * sizeof *frame);
    st->n_frames++;
    if (add_to_chunk(st, frame) != 0) return -1;
    if (st->chunk_fed - st->chunk_ctx == QVE_DEC_CHUNK_FRAMES) return run_pending(st);
    return 0;
}

/* The pool set_pool asked for, and the scratch slices it allocated (under mu, between frames). */
static void take_pool(qve_dec_stream *st) {
    st->s.pool = st->next_pool;
    st->s.n_slices = st->n_slices_ready;
    st->pool_taken = st->pool_asked;
}

static void *decoder_thread(void *arg) {
    qve_dec_stream *st = arg;
    int nq = st->dec->n_q;
    int32_t frame[64];
    state_touch(&st->s); /* while the producer prepares its first frame */
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (st->q_count == 0 && !st->finishing && !st->failed)
            pthread_cond_wait(&st->cv_data, &st->mu);
        if (st->failed || st->q_count == 0) break;
        memcpy(frame, st->queue + (size_t)st->q_head * nq, (size_t)nq * sizeof *frame);
        st->q_head = (st->q_head + 1) % QUEUE_FRAMES;
        st->q_count--;
        st->busy = 1;
        take_pool(st);
        pthread_mutex_unlock(&st->mu);
        int rc = feed_frame(st, frame);
        pthread_mutex_lock(&st->mu);
        st->busy = 0;
        pthread_cond_broadcast(&st->cv_space); /* push (room) and sync (progress) wait on it */
        if (rc != 0) st->failed = 1;
    }
    if (!st->failed) {
        take_pool(st);
        pthread_mutex_unlock(&st->mu);
        int rc = run_pending(st);
        pthread_mutex_lock(&st->mu);
        if (rc != 0) st->failed = 1;
    }
    pthread_cond_broadcast(&st->cv_space);
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static void stream_free(qve_dec_stream *st) {
    if (!st) return;
    if (st->threaded) {
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->cv_data);
        pthread_cond_destroy(&st->cv_space);
    }
    if (st->n_slices_ready > st->s.n_slices) st->s.n_slices = st->n_slices_ready;
    state_free(&st->s);
    free(st->pending);
    free(st->history);
    free(st->queue);
    free(st);
}

qve_dec_stream *qve_dec_stream_start(const qve_decoder *dec, int n_threads, qve_audio_cb cb,
                                     void *user, char *err, size_t err_size) {
    if (!dec || !cb || n_threads < 0 || dec->n_q > 64) {
        set_err(err, err_size, "speech decoder: bad stream arguments");
        return NULL;
    }
    qve_dec_stream *st = calloc(1, sizeof *st);
    if (!st) goto oom;
    st->dec = dec;
    st->cb = cb;
    st->user = user;
    size_t nq = (size_t)dec->n_q;
    st->pending = malloc(QVE_DEC_BLOCK_FRAMES * nq * sizeof(int32_t));
    st->history = malloc(QVE_DEC_CONTEXT_FRAMES * nq * sizeof(int32_t));
    if (!st->pending || !st->history) goto oom;
    if (state_alloc(&st->s, dec) != 0) goto oom;
    state_reset(&st->s);
    st->n_slices_ready = 1;
    if (n_threads >= 1) {
        st->queue = malloc(QUEUE_FRAMES * nq * sizeof(int32_t));
        if (!st->queue) goto oom;
        pthread_mutex_init(&st->mu, NULL);
        pthread_cond_init(&st->cv_data, NULL);
        pthread_cond_init(&st->cv_space, NULL);
        st->threaded = 1;
        if (pthread_create(&st->thread, NULL, decoder_thread, st) != 0) {
            set_err(err, err_size, "speech decoder: cannot start the decoder thread");
            stream_free(st);
            return NULL;
        }
        st->thread_started = 1;
    }
    return st;
oom:
    set_err(err, err_size, "speech decoder: out of memory for the decode state");
    stream_free(st);
    return NULL;
}

int qve_dec_stream_push(qve_dec_stream *st, const int32_t *frame) {
    const qve_decoder *d = st->dec;
    int bad = -1;
    for (int g = 0; g < d->n_q && bad < 0; g++)
        if (frame[g] < 0 || frame[g] >= d->cb_size) bad = g;
    if (bad >= 0 && !st->perr[0])
        set_err(st->perr, sizeof st->perr,
                "speech decoder: frame %ld codebook %d: code %d out of range [0, %d)", st->n_pushed,
                bad, frame[bad], d->cb_size);
    st->n_pushed++;
    if (!st->threaded) {
        if (bad >= 0) st->failed = 1;
        if (st->failed) return -1;
        if (feed_frame(st, frame) != 0) st->failed = 1;
        return st->failed ? -1 : 0;
    }
    pthread_mutex_lock(&st->mu);
    if (bad >= 0) {
        st->failed = 1;
        pthread_cond_signal(&st->cv_data);
    }
    while (st->q_count == QUEUE_FRAMES && !st->failed)
        pthread_cond_wait(&st->cv_space, &st->mu);
    int failed = st->failed;
    if (!failed) {
        int slot = (st->q_head + st->q_count) % QUEUE_FRAMES;
        memcpy(st->queue + (size_t)slot * d->n_q, frame, (size_t)d->n_q * sizeof *frame);
        st->q_count++;
        pthread_cond_signal(&st->cv_data);
    }
    pthread_mutex_unlock(&st->mu);
    return failed ? -1 : 0;
}

int qve_dec_stream_set_pool(qve_dec_stream *st, qvk_pool *pool) {
    int want = pool ? qvk_pool_threads(pool) : 1, n = st->n_slices_ready ? st->n_slices_ready : 1;
    if (want > MAX_SLICES) want = MAX_SLICES;
    /* slices are only added (a thread may still be using the ones it has) and written once
       here, so that the first pooled block does not take their page faults */
    for (; n < want; n++) {
        float *p = qvk_alloc(st->s.n_scratch * sizeof *p);
        if (!p) break;
        memset(p, 0, st->s.n_scratch * sizeof *p);
        st->s.slice[n] = p;
    }
    if (!st->threaded) {
        st->s.pool = pool;
        st->s.n_slices = st->n_slices_ready = n;
        return n < want ? -1 : 0;
    }
    pthread_mutex_lock(&st->mu);
    const int revoke = st->next_pool && st->next_pool != pool;
    st->next_pool = pool;
    st->n_slices_ready = n;
    st->pool_asked++;
    /* a pool taken back may still be in use by the frame under way: wait for its end */
    while (revoke && st->busy && st->pool_taken != st->pool_asked && !st->failed)
        pthread_cond_wait(&st->cv_space, &st->mu);
    pthread_mutex_unlock(&st->mu);
    return n < want ? -1 : 0;
}

int qve_dec_stream_sync(qve_dec_stream *st) {
    if (!st->threaded) return st->failed ? -1 : 0;
    pthread_mutex_lock(&st->mu);
    while ((st->q_count || st->busy) && !st->failed)
        pthread_cond_wait(&st->cv_space, &st->mu);
    int failed = st->failed;
    pthread_mutex_unlock(&st->mu);
    return failed ? -1 : 0;
}

/* SCHED_IDLE: the thread runs only on a core nothing else wants, and any waking thread takes the
 * core back at once (a lower nice value would still share it by weight). */
static void thread_policy(qve_dec_stream *st, int policy) {
    struct sched_param sp = {0};
    pthread_setschedparam(st->thread, policy, &sp);
}

void qve_dec_stream_background(qve_dec_stream *st) {
    if (st->thread_started) thread_policy(st, SCHED_IDLE);
}

int qve_dec_stream_finish(qve_dec_stream *st, char *err, size_t err_size) {
    if (!st) return 0;
    if (st->threaded) {
        /* what is left once generation is done is waited for: it runs at normal priority (on a
         * busy machine an idle-policy thread would wait for every other process) */
        if (st->thread_started) thread_policy(st, SCHED_OTHER);
        pthread_mutex_lock(&st->mu);
        st->finishing = 1;
        pthread_cond_signal(&st->cv_data);
        pthread_mutex_unlock(&st->mu);
        if (st->thread_started) pthread_join(st->thread, NULL);
    } else if (!st->failed && run_pending(st) != 0) {
        st->failed = 1;
    }
    int rc = st->failed ? -1 : 0;
    if (rc)
        set_err(err, err_size, "%s",
                st->perr[0]  ? st->perr
                : st->err[0] ? st->err
                             : "speech decoder: failed");
    stream_free(st);
    return rc;
}

/* ==== one-shot ============================================================================= */

typedef struct {
    float *wav;
    size_t n;
} sink;

static int to_buffer(void *user, const float *pcm, int n_samples) {
    sink *k = user;
    memcpy(k->wav + k->n, pcm, (size_t)n_samples * sizeof *pcm);
    k->n += (size_t)n_samples;
    return 0;
}

/* single_pass: one chunk (no 300-frame chunking) whose first n_ctx frames are context. */
static int decode_all(const qve_decoder *dec, qvk_pool *pool, const int32_t *codes, int n_frames,
                      float *wav, int single_pass, int n_ctx, char *err, size_t err_size) {
    if (n_frames < 0 || n_ctx < 0 || n_ctx > n_frames) {
        set_err(err, err_size, "speech decoder: bad frame counts (%d frames, %d context)", n_frames,
                n_ctx);
        return -1;
    }
    sink k = {wav, 0};
    qve_dec_stream *st = qve_dec_stream_start(dec, 0, to_buffer, &k, err, err_size);
    if (!st) return -1;
    st->single_pass = single_pass;
    st->chunk_ctx = n_ctx;
    if (pool) qve_dec_stream_set_pool(st, pool); /* on failure: fewer threads, same samples */
    for (int f = 0; f < n_frames; f++)
        if (qve_dec_stream_push(st, codes + (size_t)f * dec->n_q) != 0) break;
    return qve_dec_stream_finish(st, err, err_size);
}

int qve_decoder_decode(const qve_decoder *dec, const int32_t *codes, int n_frames, float *wav,
                       char *err, size_t err_size) {
    return decode_all(dec, NULL, codes, n_frames, wav, 0, 0, err, err_size);
}

int qve_decoder_decode_pool(const qve_decoder *dec, qvk_pool *pool, const int32_t *codes,
                            int n_frames, float *wav, char *err, size_t err_size) {
    return decode_all(dec, pool, codes, n_frames, wav, 0, 0, err, err_size);
}

int qve_decoder_decode_pass(const qve_decoder *dec, const int32_t *codes, int n_frames, int n_ctx,
                            float *wav, char *err, size_t err_size) {
    return decode_all(dec, NULL, codes, n_frames, wav, 1, n_ctx, err, err_size);
}
