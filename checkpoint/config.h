/* config.h — typed view of config.json, generation_config.json and speech_tokenizer/config.json
 * (internal, prefix qvm_). Field names are the JSON keys they come from. Parsing is strict:
 * a missing or mistyped key the engine needs is an error naming the file and the key.
 */
#ifndef QV_CONFIG_H
#define QV_CONFIG_H

#include <stddef.h>

#include "voicefmt/qvf.h" /* enum qvf_variant */

#define QVM_MAX_LANGS 32
#define QVM_MAX_SPEAKERS 64
#define QVM_NAME_MAX 64

enum qvm_size { QVM_SIZE_0B6, QVM_SIZE_1B7, QVM_SIZE_OTHER };

#define QVM_MAX_LAYERS 128

typedef struct {            /* a Qwen3 decoder stack (talker or code predictor) */
    int hidden_size, intermediate_size, num_hidden_layers;
    /* intermediate_size may be a per-layer list (then intermediate_size is its maximum); all 0
     * when it is one number: read widths with qvm_layer_intermediate */
    int layer_intermediate_size[QVM_MAX_LAYERS];
    int num_attention_heads, num_key_value_heads, head_dim;
    int vocab_size, num_code_groups;
    float rms_norm_eps, rope_theta;
    int max_position_embeddings;
} qvm_stack_config;

/* MLP width of layer l. */
static inline int qvm_layer_intermediate(const qvm_stack_config *s, int l) {
    return s->layer_intermediate_size[l] ? s->layer_intermediate_size[l] : s->intermediate_size;
}

typedef struct { char name[QVM_NAME_MAX]; int id; } qvm_named_id;
typedef struct { char name[QVM_NAME_MAX]; int id; char dialect[QVM_NAME_MAX]; } qvm_speaker;

typedef struct {
    /* config.json top level */
    char tts_model_size[16];              /* "0b6", "1b7" */
    char tts_model_type[32];              /* "base", "custom_voice", "voice_design" */
    enum qvm_size size;
    enum qvf_variant variant;             /* never QVF_VARIANT_UNKNOWN once loaded */
    int im_start_token_id, im_end_token_id, assistant_token_id;
    int tts_pad_token_id, tts_bos_token_id, tts_eos_token_id;
    /* quantization {group_size, bits} (MLX layout; 0, 0 when absent): q4 linears are the ones
     * whose `.scales` tensor is present */
    int quant_group_size, quant_bits;
    /* talker_config */
    qvm_stack_config talker;
    int text_hidden_size, text_vocab_size;
    int codec_pad_id, codec_bos_id, codec_eos_token_id;
    int codec_think_id, codec_nothink_id, codec_think_bos_id, codec_think_eos_id;
    int n_languages;
    qvm_named_id codec_language_id[QVM_MAX_LANGS];
    int n_speakers;
    qvm_speaker spk_id[QVM_MAX_SPEAKERS];  /* dialect "" when spk_is_dialect is false */
    /* talker_config.code_predictor_config */
    qvm_stack_config code_predictor;
    /* speaker_encoder_config (Base only; has_speaker_encoder = 0 otherwise) */
    int has_speaker_encoder;
    int enc_dim, mel_dim, sample_rate;
    int enc_channels[5], enc_kernel_sizes[5], enc_dilations[5];
    int enc_attention_channels, enc_res2net_scale, enc_se_channels;
} qvm_model_config;

typedef struct {            /* generation_config.json (wrapper fallbacks for missing keys) */
    int do_sample, top_k;
    float top_p, temperature, repetition_penalty;
    int subtalker_dosample, subtalker_top_k;
    float subtalker_top_p, subtalker_temperature;
    int max_new_tokens;
} qvm_generation_config;

typedef struct {            /* speech_tokenizer/config.json */
    int encoder_valid_num_quantizers, input_sample_rate, output_sample_rate;
    int encode_downsample_rate, decode_upsample_rate;
    struct {
        int codebook_size, codebook_dim, latent_dim, decoder_dim, hidden_size, intermediate_size;
        int num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim;
        float rms_norm_eps, rope_theta, layer_scale_initial_scale;
        int sliding_window, num_quantizers, num_semantic_quantizers;
        int upsample_rates[4], upsampling_ratios[2];
    } decoder;
    struct {
        int num_filters, kernel_size, last_kernel_size, residual_kernel_size;
        int num_residual_layers, dilation_growth_rate, compress, upsampling_ratios[4];
        int hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim;
        int intermediate_size, sliding_window, num_quantizers, num_semantic_quantizers;
        int codebook_size, codebook_dim;
        float norm_eps, rope_theta, layer_scale_initial_scale;
    } encoder;
} qvm_codec_config;

/* Each returns 0 on success, -1 with one line in err: "DIR/config.json: missing key
 * talker_config.hidden_size" or "DIR/config.json: key K: wrong type (expected integer, found
 * string)" / "...: out of range (...)". dir = model directory.
 * variant: from tts_model_type; "custom_voice" with an empty spk_id map counts as VoiceDesign.
 * size: 0B6 / 1B7 only when tts_model_size and the dimensions are the published ones, else OTHER
 * (the tiny synthetic models). Base configs may omit ECAPA fields (official defaults, §5.2).
 * generation_config.json: absent file or keys take the Python wrapper's fallbacks (§1.4). */
int qvm_model_config_load(qvm_model_config *c, const char *dir, char *err, size_t err_size);
/* The same from config.json's bytes (json[n]) already read from dir. */
int qvm_model_config_parse(qvm_model_config *c, const char *dir, const char *json, size_t n,
                           char *err, size_t err_size);
int qvm_generation_config_load(qvm_generation_config *g, const char *dir, char *err, size_t err_size);
/* The Python wrapper's fallbacks for keys absent from generation_config.json (§1.4): the one
 * set of generation defaults (qv_default_params is built from it). */
qvm_generation_config qvm_generation_defaults(void);
int qvm_codec_config_load(qvm_codec_config *c, const char *dir, char *err, size_t err_size);

/* Lookups (case-insensitive); -1 when absent. */
int qvm_language_id(const qvm_model_config *c, const char *name);
const qvm_speaker *qvm_speaker_find(const qvm_model_config *c, const char *name);

#endif
