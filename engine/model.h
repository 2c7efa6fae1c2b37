/* model.h — engine-internal layouts shared by model.c, talker.c, code_predictor.c, sampler.c and
 * session.c (prefix qve_). Weights are borrowed bf16 (or packed 4-bit) pointers into the
 * checkpoint mmap; only the small vectors (norms, biases, q4 group scales) are widened to f32
 * copies at load. State structs hold every
 * activation buffer and KV cache so that the frame loop never allocates.
 */
#ifndef QV_MODEL_H
#define QV_MODEL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/config.h"
#include "checkpoint/textside.h"
#include "kernels/kernels.h"
#include "include/qvoice.h"
#include "checkpoint/safetensors.h"

#define QVE_ERR_MAX 512
#define QVE_MAX_THREADS 256 /* n_threads bound of qv_params */

/* ==== weights ================================================================================ */

/* A matrix [n_out, n_in], its weight tag being which pointers are set: bf16 in the mmap, or 4-bit
 * (kernels/q4.h: packed q4 and bf16 group scales/biases, in the mmap of a quantized checkpoint or
 * in a q4 view) with bf16 NULL when the checkpoint holds only that; plus an int8 copy with
 * per-row scales in the int8 view. Decode matvecs use int8, else q4, else bf16; prefills use q4
 * (the batched q4 matvec) when present, else bf16, so a q4 view and the same weights loaded from
 * a q4 checkpoint compute the same. */
typedef struct {
    const uint16_t *bf16;
    const int8_t *q8;
    const float *q8_scale;
    const uint8_t *q4;
    const uint16_t *q4_s, *q4_b; /* [n_out, n_in / 64] bf16 */
} qve_mat;

typedef struct {                     /* one Qwen3 decoder layer; PREFIX = talker.model.layers.N or
                                        talker.code_predictor.model.layers.N */
    float *input_layernorm;          /* [H]            PREFIX.input_layernorm.weight (f32 copy) */
    qve_mat q_proj;                  /* [nh*hd, H]     PREFIX.self_attn.q_proj.weight */
    qve_mat k_proj;                  /* [nkv*hd, H]    PREFIX.self_attn.k_proj.weight */
    qve_mat v_proj;                  /* [nkv*hd, H]    PREFIX.self_attn.v_proj.weight */
    qve_mat o_proj;                  /* [H, nh*hd]     PREFIX.self_attn.o_proj.weight */
    float *q_norm;                   /* [hd]           PREFIX.self_attn.q_norm.weight (f32) */
    float *k_norm;                   /* [hd]           PREFIX.self_attn.k_norm.weight (f32) */
    float *post_attention_layernorm; /* [H]            PREFIX.post_attention_layernorm.weight */
    qve_mat gate_proj;               /* [I, H]         PREFIX.mlp.gate_proj.weight (I per layer) */
    qve_mat up_proj;                 /* [I, H]         PREFIX.mlp.up_proj.weight */
    qve_mat down_proj;               /* [H, I]         PREFIX.mlp.down_proj.weight */
} qvm_layer;

/* The field of l that holds tensor k of qvm_layer_tensor (checkpoint/manifest.h): *mat for a
 * matrix, else *vec (the other is set to NULL). */
void qve_layer_field(qvm_layer *l, int k, qve_mat **mat, float ***vec);

typedef struct { /* a Qwen3 decoder stack without embeddings / head */
    qvm_stack_config cfg;
    qvm_layer *layers; /* [num_hidden_layers] */
    float *norm;       /* [H] *.model.norm.weight (f32) */
} qve_stack;

typedef struct { /* talker (§3) */
    qve_stack stack;
    const uint16_t
        *text_embedding;   /* [n_text_rows, text_hidden] talker.model.text_embedding.weight */
    const int32_t *text_token_map; /* [text_vocab] talker.model.text_token_map: token id -> row
                                      (0 = the zero row of a pruned vocabulary), or NULL */
    const uint16_t *fc1;   /* [text_hidden, text_hidden] talker.text_projection.linear_fc1.weight */
    const float *fc1_bias; /* [text_hidden]  talker.text_projection.linear_fc1.bias */
    const uint16_t *fc2;   /* [H, text_hidden] talker.text_projection.linear_fc2.weight */
    const float *fc2_bias; /* [H]            talker.text_projection.linear_fc2.bias */
    const uint16_t *codec_embedding; /* [3072, H]      talker.model.codec_embedding.weight */
    qve_mat codec_head;              /* [3072, H]      talker.codec_head.weight */
} qve_talker;

typedef struct {     /* code predictor (§4), prefix talker.code_predictor. */
    qve_stack stack; /* hidden 1024 on both sizes */
    const uint16_t
        *codec_embedding[QV_N_CODEBOOKS - 1];    /* [2048, H_talker] model.codec_embedding.g.weight */
    qve_mat lm_head[QV_N_CODEBOOKS - 1];         /* [2048, 1024] lm_head.g.weight */
    qve_mat mtp_proj; /* [1024, H_talker] small_to_mtp_projection.weight; all NULL = identity */
    float *mtp_bias;          /* [1024]         small_to_mtp_projection.bias */
} qve_code_predictor;

struct qv_model {
    qvm_ckpt *ck;      /* a reference: configs, and the mmap the weight pointers borrow from */
    qvm_textside text; /* the checkpoint's text side; talker's text fields point into it */
    qve_talker talker;
    qve_code_predictor cp;
    int n_f32_copies;
    float **f32_copies; /* every f32 copy above, freed at qv_model_free */
    int n_weight_copies;
    uint16_t **weight_copies; /* bf16 tensors made in RAM: by a voice's WDELTA (voice_load.c), q4
                                 scales of a non-bf16 checkpoint (model.c) */
    /* quantized views (same tensors, matrices quantized), made by the first int8 / q4 session */
    pthread_mutex_t q8_lock;
    struct qve_view *q8, *q4;
    /* the speech decoder, loaded by the first synthesis that needs it (synth.c) and shared
       read-only by all; and how many qv_synth use this model (a weight delta may change the
       weights only while one does) */
    pthread_mutex_t dec_lock;
    struct qve_decoder *dec;
    /* the text tokenizer, opened by the first session that needs it and shared by all; its
       scratch is not, so it is used under tok_lock (qve_model_tok) */
    pthread_mutex_t tok_lock;
    struct qve_tok *tok;
    int n_synths;
    struct qve_batcher *batch; /* the frame rendezvous of concurrent sessions, or NULL
                                  (qv_model_set_batching, batch.c) */
    int wdelta_on;             /* a voice's weight delta was applied (voice_load.c) */
    uint8_t wdelta_source[32]; /* that voice's source fingerprint */
};

struct qve_view {
    qve_talker talker;
    qve_code_predictor cp;
    void *q;        /* every quantized matrix, one allocation (NULL when cached) */
    void *scale;    /* every int8 row scale (f32), or every q4 group scale then bias (bf16) */
    size_t n_bytes; /* quantized weight bytes */
    struct qvm_prep *cache; /* the matrices, scales (q4: and text rounding) mapped from the cache file (prepared.h) */
    uint16_t *text_w;       /* q4: the text projection's q4 rounding (fc1 then fc2, bf16), or NULL */
};

/* Loads every talker/code-predictor tensor of ck (checked against the table built from its
 * config); m holds a reference to ck. 0 on success, -1 with a one-line error in err (then
 * qve_model_unload m). */
int qve_model_load(qv_model *m, qvm_ckpt *ck, char *err, size_t err_size);
void qve_model_unload(qv_model *m);
/* qv_model_load on an opened checkpoint (the model takes its own reference to ck). */
enum qv_status qve_model_new(qv_model **out, qvm_ckpt *ck, char *err, size_t err_size);
/* The model's tokenizer (opened on first use, from ck->tok_files), returned with m->tok_lock held:
 * the caller uses it, then calls qve_model_tok_done. NULL (lock not held) with err when it
 * cannot be opened. */
struct qve_tok *qve_model_tok(const qv_model *m, char *err, size_t err_size);
void qve_model_tok_done(const qv_model *m);
/* Makes the view of quant (enum qv_quant; once, thread-safe; later calls return at once):
 * QV_QUANT_INT8 quantizes every talker / code-predictor decode matrix whose n_in is a multiple of
 * QVK_Q8_GROUP to int8; QV_QUANT_Q4 every bf16 linear (layers, heads, text projection, mtp
 * projection) whose n_in is a multiple of QVK_Q4_GROUP to q4 as qvoice-compress --q4 stores it.
 * Matrices without bf16 (a q4 checkpoint) stay as they are. 0 (also for QV_QUANT_BF16), or -1
 * when out of memory. */
int qve_model_quantize(const qv_model *m, int quant, qvk_pool *pool);
/* Frees the quantized views (weights changed: voice_load.c); the next session quantizes again.
 * No session may be using them. */
void qve_model_drop_views(qv_model *m);
/* The weights a session with quantization quant (enum qv_quant) uses: m's own, or the view of
 * quant when it exists. */
const qve_talker *qve_model_talker(const qv_model *m, int quant);
const qve_code_predictor *qve_model_cp(const qv_model *m, int quant);

/* ==== decoder-stack state (KV cache + scratch) ================================================ */

typedef struct {
    const qve_stack *w;
    int max_ctx;              /* positions the cache holds */
    float *k_cache, *v_cache; /* [max_ctx][n_layers][nkv*hd] (position-major: talker.c kv_row) */
    /* single-token scratch */
    float *h, *q, *k, *v, *att, *gate, *up, *attn_scratch; /* attn_scratch [nh*max_ctx] */
    float *rope_c, *rope_s;                                /* [hd/2] */
    /* batched prefill scratch (n_batch rows); NULL when n_batch == 0 */
    int n_batch;
    float *bh, *bq, *bk, *bv, *batt, *bgate, *bup, *wscratch;
    /* calibration (qvoice-compress --prune-neurons): when set, max |SwiGLU output| of every
     * neuron so far, [n_layers][intermediate_size]; the caller's buffer */
    float *act_max;
} qve_stack_state;

/* Allocates caches for max_ctx positions and, when n_batch > 0, batch buffers for prefills of up
 * to n_batch rows. 0 / -1 (out of memory). */
int qve_stack_state_init(qve_stack_state *s, const qve_stack *w, int max_ctx, int n_batch);
void qve_stack_state_free(qve_stack_state *s);

/* Runs n tokens x[n, H] (in place: residual stream out) at positions pos0..pos0+n-1, writing the
 * cache; no final norm. n == 1 uses the matvecs; n > 1 needs n <= n_batch, uses the batched
 * linears (qvk_linear_bf16_multi) and leaves only the last row as output: the other rows keep
 * the last layer's input (their K/V is cached, which is all a prefill needs).
 * pos0 + n must be <= max_ctx (checked by callers). */
void qve_stack_forward(qve_stack_state *s, qvk_pool *pool, float *x, int n, int pos0);

/* Several matrices applied to one x[n_in] (n_mv <= 4) in one pool dispatch when they share a
 * weight tag (int8 if all have a copy, else q4 if all have one, else bf16); one dispatch per
 * matrix otherwise. */
typedef struct {
    float *y;
    const qve_mat *w;
    const float *bias;
    int n_out;
} qve_mv;
void qve_matvec(qvk_pool *pool, const float *x, int n_in, const qve_mv *mv, int n_mv);

/* Activation rows of a batched step: QVK_BATCH_MAX rows each as wide as the widest stack of the
 * model needs, one set per model used by one step at a time (batch.c); two rows in each code
 * predictor state for its 2-position start (code_predictor.c). */
typedef struct {
    float *x, *h, *q, *k, *v, *att, *gate, *up; /* decoder stack, as in qve_stack_state */
    float *in;                                  /* [talker H] code-predictor input */
    float *z;                                   /* [talker H] the frames' z */
    float *normed;                              /* [cp H] */
    float *logits;                              /* [max(talker, cp) vocab] */
    float *mem;                                 /* the one block every row is carved from */
} qve_batch_scratch;

/* Rows for n_rows tokens of either stack of c. 0 / -1 (out of memory, bs left empty);
 * qve_batch_scratch_free accepts an empty or zeroed bs. */
int qve_batch_scratch_init(qve_batch_scratch *bs, const qvm_model_config *c, int n_rows);
void qve_batch_scratch_free(qve_batch_scratch *bs);

/* qve_matvec for several x [n_x, n_in] through the same matrices, each mv.y [n_x, n_out]:
 * every row as qve_matvec computes it alone, each weight read once for all. n_x <= QVK_BATCH_MAX. */
void qve_matvec_batch(qvk_pool *pool, const float *x, int n_x, int n_in, const qve_mv *mv,
                      int n_mv);
/* One token for each of n sessions' stacks (the same weights s[i]->w), row i of x[n, H] at
 * position pos[i] on the cache of s[i]: bit-identical to qve_stack_forward(s[i], .., 1, pos[i]). */
void qve_stack_forward_multi(qve_stack_state *const *s, int n, qvk_pool *pool, float *x,
                             const int *pos, const qve_batch_scratch *bs);

/* ==== talker / code predictor ================================================================ */

/* out[n, H] = text_projection(E_txt[ids[i]]) (§3.1) with t's text side (the model's, or a
 * voice's WOVR bridge; ids through the token map of a pruned vocabulary): qvm_textside_project,
 * so a voice's TPAD (clone) is computed by the same code. tmp needs n*2*text_hidden floats,
 * wscratch qvk_linear_bf16_scratch(n, text_hidden, max(text_hidden, H)) floats. */
void qve_talker_project_text(const qve_talker *t, const qvm_model_config *c, qvk_pool *pool,
                             float *out, const int32_t *ids, int n, float *tmp, float *wscratch);
/* out[H] += (or =) row id of the codec embedding. */
void qve_talker_codec_embed(const qve_talker *t, float *out, int id, int accumulate);
/* logits[3072] = codec_head · z where z = final-norm of x (z written). */
void qve_talker_head(const qve_talker *t, qvk_pool *pool, float *z, float *logits, const float *x);

typedef struct { /* per-frame code-predictor working set */
    const qve_code_predictor *w; /* m->cp unless qve_cp_state_use chose another view */
    qve_stack_state st;
    float *x;       /* [1024] */
    float *proj_in; /* [H_talker] */
    float *logits;  /* [15][2048] raw logits of the current frame */
    qve_batch_scratch start; /* two rows: positions 0 and 1 run as one step */
} qve_cp_state;

int qve_cp_state_init(qve_cp_state *s, const qv_model *m);
void qve_cp_state_free(qve_cp_state *s);
/* Runs the state on the weights w (a view of the same model, e.g. qve_model_cp(m, quant)). */
void qve_cp_state_use(qve_cp_state *s, const qve_code_predictor *w);

/* Residual codes c1..c15 for one frame from (z, c0) (§4); talker supplies C(c0) (the session's
 * view, which a text bridge may change). pick(logits, group, ctx) chooses each
 * code from the 2048 raw logits (it may modify them in a copy, not these). */
typedef int (*qve_pick_fn)(const float *logits, int n, void *ctx);
void qve_cp_frame(qve_cp_state *s, const qv_model *m, const qve_talker *talker, qvk_pool *pool,
                  const float *z, int c0, int32_t codes[QV_N_CODEBOOKS], qve_pick_fn pick,
                  void *pick_ctx);

/* qve_cp_frame for n sessions in lockstep (states on the same weights), z [n, H_talker]: each
 * session's codes, picks and state as qve_cp_frame gives them, every matrix read once per pass. */
void qve_cp_frame_multi(qve_cp_state *const *s, int n, const qv_model *m,
                        const qve_talker *const *talker, qvk_pool *pool, const float *z,
                        const int *c0, int32_t (*codes)[QV_N_CODEBOOKS], qve_pick_fn pick,
                        void *const *pick_ctx, const qve_batch_scratch *bs);

/* ==== sampler (§3.6) ========================================================================= */

typedef struct {
    uint64_t s[4];
} qve_rng;
void qve_rng_seed(qve_rng *r, uint64_t seed);
double qve_rng_uniform(qve_rng *r); /* [0, 1), 53 bits */

typedef struct {
    int do_sample;
    float temperature, top_p;
    int top_k;
} qve_sample_params;

/* Temperature, top-k (ties kept), top-p, then multinomial (or argmax when !do_sample) over
 * logits[n] which is modified. work: n floats + n ints of scratch (work_idx). */
int qve_sample(float *logits, int n, const qve_sample_params *p, qve_rng *rng, float *work,
               int *work_idx);
/* Talker code0 rules before sampling: repetition penalty over the set seen[], EOS blocked while
 * n_generated < 2, [vocab-1024, vocab) suppressed except eos. */
void qve_talker_logits_process(float *logits, int vocab, const uint8_t *seen, float penalty,
                               int n_generated, int eos_id);

/* ==== session ================================================================================ */

enum qve_session_state { QVE_IDLE, QVE_RUNNING, QVE_DONE, QVE_FAILED };

struct qv_session {
    const qv_model *m;
    qv_params p;
    qvk_pool *pool;
    char err[QVE_ERR_MAX];
    char warn[QVE_ERR_MAX]; /* non-fatal note of the last start ("" when none) */
    enum qve_session_state state;
    qve_rng rng;
    qve_cp_state cp;
    /* per-frame buffers (allocated at qv_session_new) */
    float *x;          /* [H] talker input / residual */
    float *z;          /* [H] final-norm hidden of the last talker forward */
    float *z_frame;    /* [H] the z that produced the current frame's c0 */
    float *logits_raw; /* [vocab] codec-head logits of the last talker forward */
    float *logits;     /* [max(vocab, cp vocab)] processed copy */
    float *work;       /* [same] sampler scratch */
    int *work_idx;
    uint8_t *seen;        /* [vocab] code0 set for the repetition penalty */
    float *pad;           /* [H] PAD = P(tts_pad) of the current utterance */
    qve_talker tw;        /* the talker as this utterance sees it (text bridge applied) */
    uint16_t *codec_copy; /* [vocab, H] bridged codec table, or NULL */
    /* per-utterance buffers (allocated at qv_session_start) */
    qve_stack_state talker;
    float *prefill; /* [n_prefill, H] prompt embeddings, kept for inspection */
    int n_prefill;
    float *queue; /* [n_queue, H] trailing text embeddings */
    int n_queue;
    int n_frames, pos;
    int step_due;        /* the last frame's talker step has yet to run (qve_session_frame_codes) */
    int32_t role_ids[3]; /* role block: <|im_start|> assistant \n (§3.4) */
    float *act_max;      /* handed to each utterance's talker state (calibration), or NULL */
    /* teacher forcing (tests): frame k feeds forced[k][QV_N_CODEBOOKS] back into the talker
     * instead of the codes it picked (which next_frame still returns), or NULL */
    const int32_t *forced;
    int batch_presence; /* enum qve_batch_presence (batch.c, under its lock) */
};

/* The frame loop's parts, shared by qv_session_next_frame and the batched step (batch.c). */
/* Checks and code 0 of the next frame: 1 with *c0 set when the frame goes on; 0 when it ended
 * (*done set, or *st an error). */
int qve_session_frame_begin(qv_session *s, int *c0, int *done, enum qv_status *st);
/* The code predictor's pick for session ctx (sampling with its RNG and parameters). */
int qve_session_pick_cp(const float *logits, int n, void *ctx);
/* Counts the frame and sets s->x to the talker input of its codes (F(codes) + text row). */
void qve_session_frame_input(qv_session *s, const int32_t *frame);
/* A whole frame of one session (what qv_session_next_frame runs when batching is off). */
enum qv_status qve_session_frame(qv_session *s, int32_t codes[QV_N_CODEBOOKS], int *done);
/* qve_session_frame up to its codes: the talker step that makes the next frame's logits is left
 * due and runs when the next frame begins (not at all after the last). The same codes; streaming
 * hands them to the decoder one talker step (~35 ms of 0.6B bf16 on 2 threads) sooner. */
enum qv_status qve_session_frame_codes(qv_session *s, int32_t codes[QV_N_CODEBOOKS], int *done);

/* ==== batched frame steps (batch.c) ========================================================== */

/* Runs s's next frame in a step shared with the other sessions of its model that are waiting
 * for theirs (qv_model_set_batching). Same results as qve_session_frame. */
enum qv_status qve_batch_frame(struct qve_batcher *b, qv_session *s,
                               int32_t codes[QV_N_CODEBOOKS], int *done);
void qve_batcher_free(struct qve_batcher *b);
/* What a generating session tells the rendezvous, so that steps are not run without it (it would
 * then take a step of its own, at nearly the price of a full batch): AWAY, busy elsewhere but
 * coming back (its prefill, waiting for its first audio); HERE, generating (posting a frame sets
 * it); GONE, no longer generating (the default: sessions that never say anything are waited for
 * only as the last step's members, QVE_BATCH_WAIT_MS). A leader waits for the sessions HERE
 * that have not posted yet (at most QVE_BATCH_MEMBER_MS: runnable, but preempted) and for those
 * AWAY (as long as one comes back at least every QVE_BATCH_AWAY_MS). */
enum qve_batch_presence { QVE_BATCH_GONE, QVE_BATCH_HERE, QVE_BATCH_AWAY };
void qve_batch_presence(struct qve_batcher *b, qv_session *s, enum qve_batch_presence p);
/* One step for n sessions on the same weights, on the calling thread (the rendezvous runs it;
 * tests call it directly): for each i what qve_session_frame(s[i], codes[i], &done[i]) gives
 * (st[i]), every matrix read once for all. */
void qve_batch_step(struct qve_batcher *b, qv_session *const *s, int n, qvk_pool *pool,
                    int32_t (*codes)[QV_N_CODEBOOKS], int *done, enum qv_status *st);

#endif
