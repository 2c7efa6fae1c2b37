/* speak — text to speech with a Qwen3-TTS-12Hz checkpoint (CustomVoice, VoiceDesign or Base).
 *
 * The talker/code-predictor loop runs on this thread (plus the compute pool); audio goes through
 * the speech decoder either at the end (-o FILE) or while frames are generated (--stream, decoder
 * thread). Codes can be dumped (--dump-codes) and decoded later (--decode-codes).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sndfile.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"
#include "qvf.h"
#include "qvoice.h"
#include "speech_decoder.h"

#define TOOL "speak"

/* ==== options ================================================================================ */

typedef struct {
    const char *model_dir, *text, *speaker, *language, *instruct, *out_path;
    const char *dump_codes, *decode_codes, *voice;
    int no_icl;
    int force_instruct, stream, greedy, tokens, list_speakers, list_languages, quiet;
    int quant, ignore_eos;
    int max_frames;     /* 0 = model default */
    double max_seconds; /* 0 = none */
    int n_threads;
    int have_seed;
    uint64_t seed;
    float temperature, top_p, repetition_penalty;
    int top_k;
    int set_temperature, set_top_p, set_rp, set_top_k;
} options;

enum {
    OPT_FORCE_INSTRUCT = 256,
    OPT_STREAM,
    OPT_MAX_FRAMES,
    OPT_MAX_SECONDS,
    OPT_TEMPERATURE,
    OPT_TOP_K,
    OPT_TOP_P,
    OPT_RP,
    OPT_GREEDY,
    OPT_SEED,
    OPT_LIST_SPEAKERS,
    OPT_LIST_LANGUAGES,
    OPT_DUMP_CODES,
    OPT_DECODE_CODES,
    OPT_TOKENS,
    OPT_QUANT,
    OPT_IGNORE_EOS,
    OPT_NO_ICL
};

static void usage(FILE *f) {
    const qv_params d = qv_default_params();
    fprintf(
        f,
        "usage: speak -m DIR [options] [--text TEXT | < text]\n"
        "Synthesize speech with a Qwen3-TTS-12Hz model directory.\n\n"
        "  -m, --model DIR            model directory (config.json, model.safetensors, "
        "speech_tokenizer/)\n"
        "  -t, --text TEXT            text to speak (default: read stdin)\n"
        "  -s, --speaker NAME         preset speaker (CustomVoice; see --list-speakers)\n"
        "  -v, --voice FILE           cloned voice (.qvoice or raw .bin x-vector) instead of "
        "--speaker;\n"
        "                             its reference codes + transcript are used as an ICL prompt "
        "on\n"
        "                             Base models (the official clone mode) unless --no-icl\n"
        "      --no-icl               use only the voice's x-vector\n"
        "  -l, --language NAME        language (default auto; see --list-languages)\n"
        "  -i, --instruct TEXT        style instruction / voice description (1.7B, VoiceDesign)\n"
        "      --force-instruct       pass --instruct to a 0.6B CustomVoice model anyway\n"
        "  -o, --output FILE          audio file; format by extension: .wav .flac .ogg\n"
        "      --stream               decode while generating: raw s16le 24 kHz mono to stdout,\n"
        "                             or a WAV written progressively with -o\n"
        "      --max-frames N         at most N frames of 80 ms (default: model's "
        "max_new_tokens-1)\n"
        "      --max-seconds S        at most S seconds of audio\n"
        "      --temperature T        talker temperature (default: generation_config.json, %.2g)\n"
        "      --top-k K              talker top-k, 0 = off (default: generation_config.json, %d)\n"
        "      --top-p P              talker top-p, 1 = off (default: generation_config.json, "
        "%.2g)\n"
        "      --repetition-penalty R (default: generation_config.json, %.3g)\n"
        "      --greedy               argmax talker and code predictor (penalty still applies)\n"
        "      --quant bf16|int8      weights of the per-frame matvecs (default bf16; int8 is\n"
        "                             quantized at load: about twice as fast, codes differ)\n"
        "      --ignore-eos           never stop at end-of-speech (benchmarks; with --max-frames)\n"
        "  -j, --threads N            compute threads (default %d)\n"
        "      --seed N               sampling seed (default %llu); output is identical across "
        "runs\n"
        "                             and thread counts\n"
        "      --list-speakers        print preset speakers and exit\n"
        "      --list-languages       print languages and exit\n"
        "      --dump-codes FILE      write the codes, one frame per line (16 integers); - = "
        "stdout\n"
        "      --decode-codes FILE    decode such a file to audio (-o) instead of synthesizing\n"
        "      --tokens               print the text's token ids and exit\n"
        "  -q, --quiet                no progress or summary on stderr\n"
        "  -h, --help                 this help;  -V, --version  version\n\n"
        "Exit status: 0 ok, 1 failure (bad model, bad input, I/O), 2 usage error.\n"
        "Example: speak -m models/0.6B-CustomVoice -s ryan -l english -t \"Hello.\" -o hello.wav\n",
        d.temperature, d.top_k, d.top_p, d.repetition_penalty, d.n_threads,
        (unsigned long long)d.seed);
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, TOOL ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'speak --help'.\n");
    return 2;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* 0 ok, 1 exit 0 (help/version), 2 usage error */
static int parse_args(int argc, char **argv, options *o) {
    static const struct option lo[] = {{"model", required_argument, 0, 'm'},
                                       {"text", required_argument, 0, 't'},
                                       {"speaker", required_argument, 0, 's'},
                                       {"language", required_argument, 0, 'l'},
                                       {"voice", required_argument, 0, 'v'},
                                       {"no-icl", no_argument, 0, OPT_NO_ICL},
                                       {"instruct", required_argument, 0, 'i'},
                                       {"force-instruct", no_argument, 0, OPT_FORCE_INSTRUCT},
                                       {"output", required_argument, 0, 'o'},
                                       {"stream", no_argument, 0, OPT_STREAM},
                                       {"max-frames", required_argument, 0, OPT_MAX_FRAMES},
                                       {"max-seconds", required_argument, 0, OPT_MAX_SECONDS},
                                       {"temperature", required_argument, 0, OPT_TEMPERATURE},
                                       {"top-k", required_argument, 0, OPT_TOP_K},
                                       {"top-p", required_argument, 0, OPT_TOP_P},
                                       {"repetition-penalty", required_argument, 0, OPT_RP},
                                       {"greedy", no_argument, 0, OPT_GREEDY},
                                       {"threads", required_argument, 0, 'j'},
                                       {"seed", required_argument, 0, OPT_SEED},
                                       {"list-speakers", no_argument, 0, OPT_LIST_SPEAKERS},
                                       {"list-languages", no_argument, 0, OPT_LIST_LANGUAGES},
                                       {"dump-codes", required_argument, 0, OPT_DUMP_CODES},
                                       {"decode-codes", required_argument, 0, OPT_DECODE_CODES},
                                       {"tokens", no_argument, 0, OPT_TOKENS},
                                       {"quant", required_argument, 0, OPT_QUANT},
                                       {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->n_threads = qv_default_params().n_threads;
    int c;
    long l;
    double d;
    while ((c = getopt_long(argc, argv, "m:t:s:l:v:i:o:j:qhV", lo, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->model_dir = optarg;
            break;
        case 't':
            o->text = optarg;
            break;
        case 's':
            o->speaker = optarg;
            break;
        case 'v':
            o->voice = optarg;
            break;
        case OPT_NO_ICL:
            o->no_icl = 1;
            break;
        case 'l':
            o->language = optarg;
            break;
        case 'i':
            o->instruct = optarg;
            break;
        case 'o':
            o->out_path = optarg;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case OPT_FORCE_INSTRUCT:
            o->force_instruct = 1;
            break;
        case OPT_STREAM:
            o->stream = 1;
            break;
        case OPT_GREEDY:
            o->greedy = 1;
            break;
        case OPT_QUANT:
            if (strcmp(optarg, "bf16") && strcmp(optarg, "int8"))
                return usage_error("--quant: expected bf16 or int8, found '%s'", optarg);
            o->quant = strcmp(optarg, "int8") ? QV_QUANT_BF16 : QV_QUANT_INT8;
            break;
        case OPT_IGNORE_EOS:
            o->ignore_eos = 1;
            break;
        case OPT_TOKENS:
            o->tokens = 1;
            break;
        case OPT_LIST_SPEAKERS:
            o->list_speakers = 1;
            break;
        case OPT_LIST_LANGUAGES:
            o->list_languages = 1;
            break;
        case OPT_DUMP_CODES:
            o->dump_codes = optarg;
            break;
        case OPT_DECODE_CODES:
            o->decode_codes = optarg;
            break;
        case 'j':
            if (parse_long(optarg, 1, 256, &l))
                return usage_error("--threads: expected 1..256, found '%s'", optarg);
            o->n_threads = (int)l;
            break;
        case OPT_MAX_FRAMES:
            if (parse_long(optarg, 1, 1000000, &l))
                return usage_error("--max-frames: expected 1..1000000, found '%s'", optarg);
            o->max_frames = (int)l;
            break;
        case OPT_MAX_SECONDS:
            if (parse_double(optarg, 0.08, 80000, &d))
                return usage_error("--max-seconds: expected 0.08..80000, found '%s'", optarg);
            o->max_seconds = d;
            break;
        case OPT_TEMPERATURE:
            if (parse_double(optarg, 1e-3, 100, &d))
                return usage_error("--temperature: expected 0.001..100, found '%s'", optarg);
            o->temperature = (float)d, o->set_temperature = 1;
            break;
        case OPT_TOP_K:
            if (parse_long(optarg, 0, 1000000, &l))
                return usage_error("--top-k: expected >= 0, found '%s'", optarg);
            o->top_k = (int)l, o->set_top_k = 1;
            break;
        case OPT_TOP_P:
            if (parse_double(optarg, 1e-6, 1, &d))
                return usage_error("--top-p: expected (0, 1], found '%s'", optarg);
            o->top_p = (float)d, o->set_top_p = 1;
            break;
        case OPT_RP:
            if (parse_double(optarg, 1e-3, 100, &d))
                return usage_error("--repetition-penalty: expected 0.001..100, found '%s'", optarg);
            o->repetition_penalty = (float)d, o->set_rp = 1;
            break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-')
                return usage_error("--seed: expected a non-negative integer, found '%s'", optarg);
            o->seed = v, o->have_seed = 1;
            break;
        }
        case 'h':
            usage(stdout);
            return 1;
        case 'V':
            printf(TOOL " %s\n", qv_version());
            return 1;
        default:
            fprintf(stderr, "Try 'speak --help'.\n");
            return 2;
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (!o->model_dir) return usage_error("%s", "-m/--model DIR is required");
    if (o->voice && o->speaker) return usage_error("%s", "--voice and --speaker are exclusive");
    if (o->decode_codes && !o->out_path && !o->stream)
        return usage_error("%s", "--decode-codes needs -o FILE or --stream");
    return 0;
}

/* ==== small helpers ========================================================================== */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static char *read_all(FILE *f) {
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 2) {
            char *g = realloc(buf, cap * 2);
            if (!g) return free(buf), NULL;
            buf = g, cap *= 2;
        }
    }
    buf[n] = 0;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = 0; /* trailing newline of a pipe */
    return buf;
}

static int format_for(const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot) return 0;
    if (!strcasecmp(dot, ".wav")) return SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    if (!strcasecmp(dot, ".flac")) return SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
    if (!strcasecmp(dot, ".ogg")) return SF_FORMAT_OGG | SF_FORMAT_VORBIS;
    return 0;
}

static SNDFILE *open_audio(const char *path, int format) {
    SF_INFO info = {0};
    info.samplerate = QV_SAMPLE_RATE_HZ;
    info.channels = 1;
    info.format = format;
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f) fprintf(stderr, TOOL ": %s: %s\n", path, sf_strerror(NULL));
    return f;
}

/* ==== audio sinks ============================================================================ */

typedef struct {
    SNDFILE *snd; /* progressive file, or NULL for raw s16le on stdout */
    int failed;
    long n_samples;
} sink;

static int on_audio(void *user, const float *pcm, int n) {
    sink *k = user;
    if (k->snd) {
        if (sf_writef_float(k->snd, pcm, n) != n) return k->failed = 1;
    } else {
        int16_t buf[4096];
        for (int i = 0; i < n;) {
            int m = n - i < 4096 ? n - i : 4096;
            for (int j = 0; j < m; j++) {
                float v = pcm[i + j] * 32767.0f;
                buf[j] = (int16_t)lrintf(v > 32767.0f ? 32767.0f : v < -32768.0f ? -32768.0f : v);
            }
            if (fwrite(buf, sizeof(int16_t), (size_t)m, stdout) != (size_t)m) return k->failed = 1;
            i += m;
        }
        fflush(stdout);
    }
    k->n_samples += n;
    return 0;
}

static int write_audio(const char *path, const float *wav, long n) {
    int fmt = format_for(path);
    SNDFILE *f = open_audio(path, fmt);
    if (!f) return -1;
    int ok = sf_writef_float(f, wav, n) == n;
    if (!ok) fprintf(stderr, TOOL ": %s: %s\n", path, sf_strerror(f));
    if (sf_close(f)) ok = 0;
    return ok ? 0 : -1;
}

/* ==== codes files ============================================================================ */

static int *read_codes(const char *path, int *n_frames) {
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, TOOL ": %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 256, n = 0;
    int *codes = malloc(cap * QV_N_CODEBOOKS * sizeof(int));
    char line[1024];
    int line_no = 0, bad = !codes;
    while (!bad && fgets(line, sizeof line, f)) {
        line_no++;
        char *p = line, *end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\n' || *p == 0 || *p == '#') continue;
        if (n == cap) {
            int *g = realloc(codes, cap * 2 * QV_N_CODEBOOKS * sizeof(int));
            if (!g) {
                bad = 1;
                break;
            }
            codes = g, cap *= 2;
        }
        for (int g = 0; g < QV_N_CODEBOOKS; g++) {
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v >= 2048) {
                fprintf(stderr, TOOL ": %s:%d: expected 16 codes in [0, 2048)\n", path, line_no);
                bad = 1;
                break;
            }
            codes[n * QV_N_CODEBOOKS + (size_t)g] = (int)v;
            p = end;
        }
        n++;
    }
    if (f != stdin) fclose(f);
    if (bad || n == 0) {
        if (!bad) fprintf(stderr, TOOL ": %s: no frames\n", path);
        free(codes);
        return NULL;
    }
    *n_frames = (int)n;
    return codes;
}

/* ==== main =================================================================================== */

static void list(const qv_model *m, int speakers) {
    int n = speakers ? qv_model_n_speakers(m) : qv_model_n_languages(m);
    for (int i = 0; i < n; i++)
        puts(speakers ? qv_model_speaker(m, i) : qv_model_language(m, i));
}

static int decode_only(const options *o, const qve_decoder *dec) {
    int n_frames;
    int *codes = read_codes(o->decode_codes, &n_frames);
    if (!codes) return 1;
    const long n = (long)n_frames * qve_decoder_samples_per_frame(dec);
    float *wav = malloc((size_t)n * sizeof(float));
    char err[512];
    int rc = 1;
    if (!wav)
        fprintf(stderr, TOOL ": out of memory\n");
    else if (qvk_blas_set_threads(o->n_threads),
             qve_decoder_decode(dec, codes, n_frames, wav, err, sizeof err))
        fprintf(stderr, TOOL ": %s\n", err);
    else if (o->out_path)
        rc = write_audio(o->out_path, wav, n) ? 1 : 0;
    else {
        sink k = {0};
        rc = on_audio(&k, wav, (int)n) ? 1 : 0;
    }
    free(wav);
    free(codes);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr == 1 ? 0 : 2;
    const int want_audio = o.out_path || o.stream;
    if (o.out_path && !format_for(o.out_path))
        return usage_error("-o %s: unknown extension (expected .wav, .flac or .ogg)", o.out_path);
    if (o.stream && o.out_path && (format_for(o.out_path) & SF_FORMAT_TYPEMASK) != SF_FORMAT_WAV)
        return usage_error("--stream -o %s: progressive output is WAV only", o.out_path);
    if (o.stream && !o.out_path && isatty(STDOUT_FILENO))
        return usage_error("%s", "--stream without -o writes raw audio to stdout: redirect it");

    char err[1024];
    int rc = 1;
    qv_model *m = NULL;
    qv_session *s = NULL;
    qve_decoder *dec = NULL;
    qve_dec_stream *ds = NULL;
    FILE *dump = NULL;
    char *stdin_text = NULL;
    int32_t *all = NULL, *ref_codes = NULL;
    qvf_voice *voice = NULL;
    qv_text_bridge bridge;
    SNDFILE *snd = NULL;
    sink k = {0};

    if (want_audio || o.decode_codes) {
        dec = qve_decoder_load(o.model_dir, err, sizeof err);
        if (!dec) {
            fprintf(stderr, TOOL ": %s\n", err);
            goto out;
        }
    }
    if (o.decode_codes) {
        rc = decode_only(&o, dec);
        goto out;
    }
    if (qv_model_load(&m, o.model_dir, err, sizeof err)) {
        fprintf(stderr, TOOL ": %s\n", err);
        goto out;
    }
    if (o.list_speakers || o.list_languages) {
        if (o.list_speakers) list(m, 1);
        if (o.list_languages) list(m, 0);
        rc = 0;
        goto out;
    }

    qv_params p = qv_model_params(m);
    /* cores: with --stream the decoder thread takes one of them (style rule 35) */
    p.n_threads = o.stream && o.n_threads > 1 ? o.n_threads - 1 : o.n_threads;
    if (o.have_seed) p.seed = o.seed;
    if (o.set_temperature) p.temperature = o.temperature;
    if (o.set_top_k) p.top_k = o.top_k;
    if (o.set_top_p) p.top_p = o.top_p;
    if (o.set_rp) p.repetition_penalty = o.repetition_penalty;
    if (o.greedy) p.do_sample = 0, p.subtalker_do_sample = 0;
    p.quant = o.quant, p.ignore_eos = o.ignore_eos;
    if (o.max_frames) p.max_frames = o.max_frames;
    if (o.max_seconds > 0) {
        int f = (int)floor(o.max_seconds * QV_FRAME_RATE_HZ + 1e-9);
        if (f < 1) f = 1;
        if (f < p.max_frames) p.max_frames = f;
    }
    enum qv_status st = qv_session_new(&s, m, &p);
    if (st) {
        fprintf(stderr, TOOL ": %s: %s\n", qv_strerror(st), s ? qv_session_error(s) : "");
        goto out;
    }

    const char *text = o.text;
    if (!text) {
        stdin_text = read_all(stdin);
        if (!stdin_text) {
            fprintf(stderr, TOOL ": out of memory reading stdin\n");
            goto out;
        }
        text = stdin_text;
    }
    if (o.tokens) {
        int n;
        if ((st = qv_session_tokenize(s, text, &all, &n))) {
            fprintf(stderr, TOOL ": %s\n", qv_session_error(s));
            goto out;
        }
        for (int i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", all[i]);
        printf("\n");
        rc = 0;
        goto out;
    }
    if (!text[0]) {
        fprintf(stderr, TOOL ": no text to speak\n");
        goto out;
    }

    qv_request r = qv_default_request();
    r.text = text;
    r.language = o.language;
    r.speaker = o.speaker;
    const char *type = qv_model_type(m);
    if (o.voice) {
        const int H = qv_model_hidden_size(m);
        int vst = qvf_read_file(o.voice, (uint32_t)H, &voice, err, sizeof err);
        if (vst) {
            fprintf(stderr, TOOL ": %s\n", err);
            goto out;
        }
        if (!voice->xvector || (int)voice->enc_dim != H) {
            fprintf(stderr, TOOL ": %s: x-vector of %u values, the model needs %d\n", o.voice,
                    voice->xvector ? voice->enc_dim : 0, H);
            goto out;
        }
        r.speaker_vector = voice->xvector;
        r.n_speaker_vector = H;
        if (voice->tpad && (int)voice->tpad_hidden == H) r.text_special = voice->tpad;
        if (!o.no_icl && !strcmp(type, "base") && voice->n_frames && voice->codes &&
            voice->transcript) {
            ref_codes = malloc((size_t)voice->n_frames * QV_N_CODEBOOKS * sizeof(int32_t));
            if (!ref_codes) {
                fprintf(stderr, TOOL ": out of memory\n");
                goto out;
            }
            for (size_t i = 0; i < (size_t)voice->n_frames * QV_N_CODEBOOKS; i++)
                ref_codes[i] = voice->codes[i];
            r.ref_codes = ref_codes;
            r.n_ref_frames = (int)voice->n_frames;
            r.ref_text = voice->transcript;
        }
        if (voice->wovr_h) {
            if ((int)voice->wovr_h == H && (int)voice->wovr_th == qv_model_text_hidden_size(m)) {
                bridge.fc1_weight = voice->wovr_fc1_w, bridge.fc1_bias = voice->wovr_fc1_b;
                bridge.fc2_weight = voice->wovr_fc2_w, bridge.fc2_bias = voice->wovr_fc2_b;
                bridge.codec_rows = voice->wovr_codec, bridge.n_codec_rows = (int)voice->wovr_cv;
                r.bridge = &bridge;
            } else if (!o.quiet) {
                fprintf(stderr,
                        TOOL ": warning: %s: model bridge for hidden %u/%u ignored (model "
                             "%d/%d)\n",
                        o.voice, voice->wovr_h, voice->wovr_th, H, qv_model_text_hidden_size(m));
            }
        }
        if (voice->has_wdelta && !o.quiet)
            fprintf(stderr, TOOL ": warning: %s: weight deltas are not applied by this version\n",
                    o.voice);
    } else if (!strcmp(type, "custom_voice") && !o.speaker) {
        fprintf(stderr, TOOL ": %s: a CustomVoice model needs --speaker (see --list-speakers)\n",
                o.model_dir);
        goto out;
    }
    if (o.instruct && !strcmp(type, "custom_voice") && !strcmp(qv_model_size(m), "0b6") &&
        !o.force_instruct) {
        if (!o.quiet)
            fprintf(stderr,
                    TOOL ": warning: the 0.6B CustomVoice model was not trained for "
                         "instructions; ignoring --instruct (use --force-instruct to keep it)\n");
    } else {
        r.instruct = o.instruct;
    }

    if (o.dump_codes) {
        dump = strcmp(o.dump_codes, "-") ? fopen(o.dump_codes, "w") : stdout;
        if (!dump) {
            fprintf(stderr, TOOL ": %s: %s\n", o.dump_codes, strerror(errno));
            goto out;
        }
    }
    if (o.stream) {
        if (o.out_path) {
            snd = open_audio(o.out_path, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
            if (!snd) goto out;
            sf_command(snd, SFC_SET_UPDATE_HEADER_AUTO, NULL, SF_TRUE);
            k.snd = snd;
        }
        ds = qve_dec_stream_start(dec, 1, on_audio, &k, err, sizeof err);
        if (!ds) {
            fprintf(stderr, TOOL ": %s\n", err);
            goto out;
        }
    }

    const double t0 = now_s();
    if ((st = qv_session_start(s, &r))) {
        fprintf(stderr, TOOL ": %s\n",
                qv_session_error(s)[0] ? qv_session_error(s) : qv_strerror(st));
        goto out;
    }
    const int progress = !o.quiet && isatty(STDERR_FILENO);
    size_t cap = 0;
    int n_frames = 0;
    for (;;) {
        int32_t fr[QV_N_CODEBOOKS];
        int done;
        if ((st = qv_session_next_frame(s, fr, &done))) {
            fprintf(stderr, TOOL ": %s\n", qv_session_error(s));
            goto out;
        }
        if (done) break;
        if (dump) {
            for (int g = 0; g < QV_N_CODEBOOKS; g++)
                fprintf(dump, "%s%d", g ? " " : "", fr[g]);
            fputc('\n', dump);
        }
        if (ds) {
            int frame[QV_N_CODEBOOKS];
            for (int g = 0; g < QV_N_CODEBOOKS; g++)
                frame[g] = fr[g];
            if (qve_dec_stream_push(ds, frame)) break; /* the error comes from finish */
        } else if (want_audio) {
            if ((size_t)n_frames == cap) {
                size_t nc = cap ? cap * 2 : 256;
                int32_t *g = realloc(all, nc * QV_N_CODEBOOKS * sizeof(int32_t));
                if (!g) {
                    fprintf(stderr, TOOL ": out of memory\n");
                    goto out;
                }
                all = g, cap = nc;
            }
            memcpy(all + (size_t)n_frames * QV_N_CODEBOOKS, fr, sizeof fr);
        }
        n_frames++;
        if (progress)
            fprintf(stderr, "\r" TOOL ": frame %d (%.2f s)", n_frames, n_frames / QV_FRAME_RATE_HZ);
    }
    if (progress) fputc('\n', stderr);
    if (dump && dump != stdout && fclose(dump)) {
        dump = NULL;
        fprintf(stderr, TOOL ": %s: write failed\n", o.dump_codes);
        goto out;
    }
    if (dump == stdout) fflush(stdout);
    dump = NULL;
    if (ds) {
        qve_dec_stream *d = ds;
        ds = NULL;
        if (qve_dec_stream_finish(d, err, sizeof err) || k.failed) {
            fprintf(stderr, TOOL ": %s\n", k.failed ? "audio write failed" : err);
            goto out;
        }
    } else if (want_audio && n_frames > 0) {
        const long n = (long)n_frames * qve_decoder_samples_per_frame(dec);
        float *wav = malloc((size_t)n * sizeof(float));
        int *codes = malloc((size_t)n_frames * QV_N_CODEBOOKS * sizeof(int));
        int bad = !wav || !codes;
        if (bad) fprintf(stderr, TOOL ": out of memory\n");
        for (long i = 0; !bad && i < (long)n_frames * QV_N_CODEBOOKS; i++)
            codes[i] = all[i];
        qvk_blas_set_threads(o.n_threads); /* the talker is done: the decoder gets every core */
        if (!bad && qve_decoder_decode(dec, codes, n_frames, wav, err, sizeof err))
            bad = 1, fprintf(stderr, TOOL ": %s\n", err);
        if (!bad) bad = write_audio(o.out_path, wav, n) != 0;
        free(wav);
        free(codes);
        if (bad) goto out;
    }
    const double wall = now_s() - t0, audio = n_frames / QV_FRAME_RATE_HZ;
    if (!o.quiet)
        fprintf(stderr, TOOL ": %.2f s audio (%d frames) in %.2f s, RTF %.3f\n", audio, n_frames,
                wall, audio > 0 ? wall / audio : 0.0);
    rc = 0;
out:
    if (ds) qve_dec_stream_finish(ds, err, sizeof err);
    if (snd && sf_close(snd) && rc == 0) rc = 1;
    if (dump && dump != stdout) fclose(dump);
    free(all);
    free(ref_codes);
    qvf_voice_free(voice);
    free(stdin_text);
    qv_session_free(s);
    qv_model_free(m);
    qve_decoder_free(dec);
    return rc;
}
