/* speak — text to speech with a Qwen3-TTS-12Hz checkpoint (CustomVoice, VoiceDesign or Base).
 *
 * Long text is cut into chunks (engine/textchunk.h), each generated under the runaway guard
 * (engine/guard.h) and decoded (while generating with --stream: decoder thread), then joined;
 * a chunk is emitted/kept only once it completed, so a guard trip never yields audio. Files are
 * written to a temporary name and renamed at the end: a failure leaves no partial output.
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

#include "clone/clone.h"
#include "engine/guard.h"
#include "kernels/kernels.h"
#include "voicefmt/qvf.h"
#include "include/qvoice.h"
#include "engine/speech_decoder.h"
#include "engine/textchunk.h"
#include "engine/voice_load.h"

#define TOOL "speak"

/* ==== options ================================================================================ */

typedef struct {
    const char *model_dir, *text, *speaker, *language, *instruct, *out_path;
    const char *dump_codes, *decode_codes, *voice;
    const char *verify_model;
    int no_icl, no_wdelta, no_guard, verify;
    int max_chunk_chars;
    int force_instruct, stream, greedy, tokens, list_speakers, list_languages, quiet;
    int quant, ignore_eos, strict_vocab;
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
    OPT_STRICT_VOCAB,
    OPT_NO_ICL,
    OPT_NO_WDELTA,
    OPT_MAX_CHUNK_CHARS,
    OPT_NO_CHUNK,
    OPT_NO_GUARD,
    OPT_VERIFY,
    OPT_VERIFY_MODEL
};

static void usage(FILE *f) {
    const qv_params d = qv_default_params();
    fprintf(
        f,
        "NAME\n"
        "    speak - say text with a Qwen3-TTS-12Hz model, a preset speaker or a cloned voice\n\n"
        "SYNOPSIS\n"
        "    speak -m MODEL_DIR [options] [--text TEXT | < text]\n"
        "    speak -m MODEL_DIR --decode-codes FILE -o OUT.wav\n"
        "    speak -m MODEL_DIR --tokens | --list-speakers | --list-languages\n\n"
        "DESCRIPTION\n"
        "    Tokenizes the text, runs the talker and code predictor frame by frame (80 ms each)\n"
        "    and decodes the codes to 24 kHz mono audio. Long text is split into chunks at\n"
        "    sentence ends; a runaway guard stops generations that never end.\n"
        "    Details: docs/speak.md, docs/robustness.md.\n\n"
        "OPTIONS\n"
        "  -m, --model DIR            model directory (config.json, model.safetensors, "
        "speech_tokenizer/)\n"
        "  -t, --text TEXT            text to speak (default: read stdin)\n"
        "  -s, --speaker NAME         preset speaker (CustomVoice; see --list-speakers)\n"
        "  -v, --voice FILE|NAME      cloned voice (.qvoice or raw .bin x-vector) instead of "
        "--speaker;\n"
        "                             NAME: voices/NAME.qvoice, then DIR/NAME.qvoice for each DIR "
        "of\n"
        "                             $QVOICE_PATH (colon-separated). Its reference codes + "
        "transcript\n"
        "                             are an ICL prompt on Base models unless --no-icl; its weight "
        "delta\n"
        "                             (clone --target-cv) turns the CustomVoice model it was made "
        "for\n"
        "                             into the Base model (refused for any other checkpoint)\n"
        "      --no-icl               use only the voice's x-vector\n"
        "      --no-wdelta            ignore the voice's weight delta\n"
        "  -l, --language NAME        language (default auto; see --list-languages)\n"
        "  -i, --instruct TEXT        style instruction / voice description (1.7B, VoiceDesign)\n"
        "      --force-instruct       pass --instruct to a 0.6B CustomVoice model anyway\n"
        "  -o, --output FILE          audio file; format by extension: .wav .flac .ogg\n"
        "      --stream               decode while generating: raw s16le 24 kHz mono to stdout,\n"
        "                             or a WAV written progressively with -o (renamed at the end);\n"
        "                             audio is emitted chunk by chunk as each one completes\n"
        "      --max-frames N         at most N frames of 80 ms (default: model's "
        "max_new_tokens-1)\n"
        "      --max-seconds S        at most S seconds of audio\n"
        "                             (both per chunk; reaching them is not an error)\n"
        "      --max-chunk-chars N    long text: chunks of at most N characters at sentence ends\n"
        "                             (default %d); [pause:500ms] inserts silence\n"
        "      --no-chunk             one chunk (only [pause:] tags split the text)\n"
        "      --no-guard             disable the runaway guard (frame budget 25 + 8 per token,\n"
        "                             code loops, long silence; on a trip the chunk is retried in\n"
        "                             two halves, then speak fails without writing output)\n"
        "      --verify               per chunk: speaker similarity of the audio to the voice\n"
        "      --verify-model DIR     Base model whose speaker encoder --verify uses (default -m)\n"
        "      --temperature T        talker temperature (default: generation_config.json, %.2g)\n"
        "      --top-k K              talker top-k, 0 = off (default: generation_config.json, %d)\n"
        "      --top-p P              talker top-p, 1 = off (default: generation_config.json, "
        "%.2g)\n"
        "      --repetition-penalty R (default: generation_config.json, %.3g)\n"
        "      --greedy               argmax talker and code predictor (penalty still applies)\n"
        "      --quant bf16|int8|q4   weights of the per-frame matvecs (default bf16; int8 and\n"
        "                             q4 are quantized at load: faster, codes differ; a q4\n"
        "                             checkpoint runs q4 anyway, docs/compression.md)\n"
        "      --ignore-eos           never stop at end-of-speech (benchmarks; with --max-frames)\n"
        "      --strict-vocab         vocabulary-pruned model: refuse text with tokens it lacks\n"
        "                             (default: warn, naming them, and read them as zero rows)\n"
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
        "EXIT STATUS\n"
        "    0 ok, 1 failure (bad model, bad input, runaway guard, I/O), 2 usage error.\n\n"
        "EXAMPLE\n"
        "    speak -m models/0.6B-CustomVoice -s ryan -l english -t \"Hello.\" -o hello.wav\n",
        QVE_MAX_CHUNK_CHARS_DEFAULT, d.temperature, d.top_k, d.top_p, d.repetition_penalty, d.n_threads,
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
                                       {"no-wdelta", no_argument, 0, OPT_NO_WDELTA},
                                       {"max-chunk-chars", required_argument, 0,
                                        OPT_MAX_CHUNK_CHARS},
                                       {"no-chunk", no_argument, 0, OPT_NO_CHUNK},
                                       {"no-guard", no_argument, 0, OPT_NO_GUARD},
                                       {"verify", no_argument, 0, OPT_VERIFY},
                                       {"verify-model", required_argument, 0, OPT_VERIFY_MODEL},
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
                                       {"strict-vocab", no_argument, 0, OPT_STRICT_VOCAB},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->n_threads = qv_default_params().n_threads;
    o->max_chunk_chars = QVE_MAX_CHUNK_CHARS_DEFAULT;
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
        case OPT_NO_WDELTA:
            o->no_wdelta = 1;
            break;
        case OPT_NO_CHUNK:
            o->max_chunk_chars = 0;
            break;
        case OPT_NO_GUARD:
            o->no_guard = 1;
            break;
        case OPT_VERIFY:
            o->verify = 1;
            break;
        case OPT_VERIFY_MODEL:
            o->verify_model = optarg;
            break;
        case OPT_MAX_CHUNK_CHARS:
            if (parse_long(optarg, 1, 1000000, &l))
                return usage_error("--max-chunk-chars: expected 1..1000000, found '%s'", optarg);
            o->max_chunk_chars = (int)l;
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
            if (strcmp(optarg, "bf16") && strcmp(optarg, "int8") && strcmp(optarg, "q4"))
                return usage_error("--quant: expected bf16, int8 or q4, found '%s'", optarg);
            o->quant = !strcmp(optarg, "int8") ? QV_QUANT_INT8
                       : !strcmp(optarg, "q4") ? QV_QUANT_Q4
                                               : QV_QUANT_BF16;
            break;
        case OPT_STRICT_VOCAB:
            o->strict_vocab = 1;
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

/* Temporary name next to path (same file system: the final rename is atomic). */
static void temp_name(char *buf, size_t n, const char *path) {
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path + 1) : 0;
    snprintf(buf, n, "%.*s.%s.part-%d", dl, path, path + dl, (int)getpid());
}

static int commit_file(const char *tmp, const char *path) {
    if (!rename(tmp, path)) return 0;
    fprintf(stderr, TOOL ": %s: %s\n", path, strerror(errno));
    unlink(tmp);
    return -1;
}

static int write_audio(const char *path, const float *wav, long n) {
    char tmp[4200];
    temp_name(tmp, sizeof tmp, path);
    SNDFILE *f = open_audio(tmp, format_for(path));
    if (!f) return -1;
    int ok = sf_writef_float(f, wav, n) == n;
    if (!ok) fprintf(stderr, TOOL ": %s: %s\n", path, sf_strerror(f));
    if (sf_close(f)) ok = 0;
    if (!ok) {
        unlink(tmp);
        return -1;
    }
    return commit_file(tmp, path);
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

/* ==== voices ================================================================================ */

/* Resolves --voice with qvf_voice_find; on failure the message lists every place looked at. */
static int find_voice(const char *name, char *path, size_t n) {
    char err[512];
    if (!qvf_voice_find(name, path, n, err, sizeof err)) return 0;
    size_t len = strlen(name);
    if (strchr(name, '/') || (len > 7 && !strcmp(name + len - 7, ".qvoice")) ||
        (len > 4 && !strcmp(name + len - 4, ".bin"))) {
        fprintf(stderr, TOOL ": %s: no such voice file\n", name);
        return -1;
    }
    fprintf(stderr, TOOL ": voice '%s' not found; looked for voices/%s.qvoice", name, name);
    const char *qp = getenv("QVOICE_PATH");
    if (!qp || !*qp) fprintf(stderr, " ($QVOICE_PATH is not set)");
    while (qp && *qp) {
        const char *end = strchr(qp, ':');
        int l = end ? (int)(end - qp) : (int)strlen(qp);
        if (l) fprintf(stderr, ", %.*s/%s.qvoice", l, qp, name);
        qp = end ? end + 1 : NULL;
    }
    fputc('\n', stderr);
    return -1;
}

/* ==== per-chunk synthesis ==================================================================== */

typedef struct {
    const options *o;
    qv_session *s;
    const qv_request *r; /* the voice / speaker prompt; text replaced per chunk */
    const qve_decoder *dec;
    int want_audio, progress;
    FILE *dump;
    /* --stream: the driver's joined audio, emitted up to its last crossfade window */
    qve_audio_buf *all;
    int64_t n_emitted, hold;
    sink *k;
    /* --verify */
    const qvc_ecapa *ecapa;
    qvc_mel *mel;
    qvk_pool *vpool;
    const float *ref_xvec;
    float *xvec;
    double cos[1024];
    int n_cos;
    /* per chunk */
    int32_t *codes;
    size_t cap_frames;
    int n_frames_total, n_pieces;
} synth_ctx;

static int emit(synth_ctx *c, int64_t upto) {
    if (upto <= c->n_emitted) return 0;
    if (on_audio(c->k, c->all->x + c->n_emitted, (int)(upto - c->n_emitted))) return -1;
    c->n_emitted = upto;
    return 0;
}

static int to_chunk_buf(void *user, const float *pcm, int n) {
    return qve_audio_append(user, pcm, n, 0) ? 1 : 0;
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

/* Speaker similarity of one chunk's audio to the voice (--verify); NAN when too short. */
static double verify_chunk(synth_ctx *c, const float *x, int64_t n, char *err, size_t es) {
    int nf = qvc_mel_n_frames(n);
    if (nf < 5) return NAN;
    float *mel = malloc((size_t)nf * QVC_MEL_BINS * sizeof(float));
    double r = NAN;
    if (!mel)
        snprintf(err, es, "out of memory");
    else if (!qvc_mel_compute(c->mel, mel, x, n) &&
             !qvc_ecapa_forward(c->ecapa, c->vpool, c->xvec, mel, nf, err, es))
        r = cosine(c->xvec, c->ref_xvec, qvc_ecapa_dim(c->ecapa));
    free(mel);
    return r;
}

/* qve_chunk_synth_fn: generate one chunk under the guard, decode it into out. */
static int synth_chunk(void *user, const char *text, qve_audio_buf *out, char *err, size_t es) {
    synth_ctx *c = user;
    if (c->k && emit(c, c->all->n - c->hold)) return snprintf(err, es, "audio write failed"), -1;
    int32_t *ids;
    int n_ids;
    if (qv_session_tokenize(c->s, text, &ids, &n_ids))
        return snprintf(err, es, "%s", qv_session_error(c->s)), -1;
    free(ids);
    qve_guard g;
    qve_guard_init(&g, n_ids, NULL);
    qv_request r = *c->r;
    r.text = text;
    qve_dec_stream *ds = NULL;
    int rc = -1, nf = 0;
    if (c->want_audio && c->o->stream &&
        !(ds = qve_dec_stream_start(c->dec, 1, to_chunk_buf, out, err, es)))
        return -1;
    if (qv_session_start(c->s, &r)) {
        snprintf(err, es, "%s", qv_session_error(c->s));
        goto done;
    }
    if (*qv_session_warning(c->s)) fprintf(stderr, TOOL ": warning: %s\n", qv_session_warning(c->s));
    for (;;) {
        int32_t fr[QV_N_CODEBOOKS];
        int done;
        if (qv_session_next_frame(c->s, fr, &done)) {
            snprintf(err, es, "%s", qv_session_error(c->s));
            goto done;
        }
        if (done) break;
        if (!c->o->no_guard && qve_guard_frame(&g, fr, NAN)) {
            snprintf(err, es, "%s", qve_guard_message(&g));
            rc = 1;
            goto done;
        }
        if ((size_t)nf == c->cap_frames) {
            size_t cap = c->cap_frames ? 2 * c->cap_frames : 256;
            int32_t *grown = realloc(c->codes, cap * QV_N_CODEBOOKS * sizeof(int32_t));
            if (!grown) {
                snprintf(err, es, "out of memory");
                goto done;
            }
            c->codes = grown, c->cap_frames = cap;
        }
        memcpy(c->codes + (size_t)nf * QV_N_CODEBOOKS, fr, sizeof fr);
        if (ds) {
            int frame[QV_N_CODEBOOKS];
            for (int i = 0; i < QV_N_CODEBOOKS; i++)
                frame[i] = fr[i];
            if (qve_dec_stream_push(ds, frame)) break; /* the error comes from finish */
        }
        nf++;
        if (c->progress)
            fprintf(stderr, "\r" TOOL ": chunk %d, frame %d (%.2f s)   ", c->n_pieces + 1, nf,
                    nf / QV_FRAME_RATE_HZ);
    }
    if (ds) {
        qve_dec_stream *d = ds;
        ds = NULL;
        if (qve_dec_stream_finish(d, err, es)) goto done;
    } else if (c->want_audio && nf > 0) {
        const int64_t n = (int64_t)nf * qve_decoder_samples_per_frame(c->dec);
        int *codes = malloc((size_t)nf * QV_N_CODEBOOKS * sizeof(int));
        float *wav = malloc((size_t)n * sizeof(float));
        int bad = !codes || !wav;
        if (bad) snprintf(err, es, "out of memory");
        for (size_t i = 0; !bad && i < (size_t)nf * QV_N_CODEBOOKS; i++)
            codes[i] = c->codes[i];
        qvk_blas_set_threads(c->o->n_threads); /* the talker is idle: the decoder gets every core */
        if (!bad) bad = qve_decoder_decode(c->dec, codes, nf, wav, err, es) != 0;
        qvk_blas_set_threads(1);
        if (!bad && qve_audio_append(out, wav, n, 0)) bad = 1, snprintf(err, es, "out of memory");
        free(codes);
        free(wav);
        if (bad) goto done;
    }
    if (c->want_audio && !c->o->no_guard &&
        qve_guard_audio(&g, out->x, nf, qve_decoder_samples_per_frame(c->dec))) {
        snprintf(err, es, "%s", qve_guard_message(&g));
        rc = 1;
        goto done;
    }
    if (c->ecapa && c->n_cos < (int)(sizeof c->cos / sizeof c->cos[0])) {
        char e[256] = "";
        double v = verify_chunk(c, out->x, out->n, e, sizeof e);
        if (e[0]) {
            snprintf(err, es, "--verify: %s", e);
            goto done;
        }
        c->cos[c->n_cos++] = v;
    }
    for (int f = 0; c->dump && f < nf; f++) {
        for (int i = 0; i < QV_N_CODEBOOKS; i++)
            fprintf(c->dump, "%s%d", i ? " " : "", c->codes[(size_t)f * QV_N_CODEBOOKS + i]);
        fputc('\n', c->dump);
    }
    c->n_frames_total += nf;
    c->n_pieces++;
    rc = 0;
done:
    if (ds) qve_dec_stream_finish(ds, err + strlen(err), es - strlen(err));
    if (c->progress) fputc('\n', stderr);
    return rc;
}

/* Prints --verify's per-chunk similarities and the lowest. */
static void report_verify(const synth_ctx *c) {
    int lo = -1;
    for (int i = 0; i < c->n_cos; i++) {
        if (isnan(c->cos[i]))
            fprintf(stderr, TOOL ": verify: chunk %d: too short to compare\n", i + 1);
        else
            fprintf(stderr, TOOL ": verify: chunk %d: speaker similarity %.4f\n", i + 1,
                    c->cos[i]);
        if (!isnan(c->cos[i]) && (lo < 0 || c->cos[i] < c->cos[lo])) lo = i;
    }
    if (lo >= 0)
        fprintf(stderr, TOOL ": verify: lowest similarity %.4f (chunk %d of %d)\n", c->cos[lo],
                lo + 1, c->n_cos);
}

/* ==== main =================================================================================== */

int main(int argc, char **argv) {
    options o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr == 1 ? 0 : 2;
    const int want_audio = o.out_path || o.stream || o.verify;
    if (o.out_path && !format_for(o.out_path))
        return usage_error("-o %s: unknown extension (expected .wav, .flac or .ogg)", o.out_path);
    if (o.stream && o.out_path && (format_for(o.out_path) & SF_FORMAT_TYPEMASK) != SF_FORMAT_WAV)
        return usage_error("--stream -o %s: progressive output is WAV only", o.out_path);
    if (o.stream && !o.out_path && isatty(STDOUT_FILENO))
        return usage_error("%s", "--stream without -o writes raw audio to stdout: redirect it");
    if (o.verify_model && !o.verify) o.verify = 1;

    char err[1024], voice_path[4200], out_tmp[4200] = "", dump_tmp[4200] = "";
    int rc = 1;
    qv_model *m = NULL;
    qv_session *s = NULL;
    qve_decoder *dec = NULL;
    FILE *dump = NULL;
    char *stdin_text = NULL;
    int32_t *ids = NULL, *ref_codes = NULL;
    qvf_voice *voice = NULL;
    qv_text_bridge bridge;
    SNDFILE *snd = NULL;
    sink k = {0};
    qve_audio_buf audio = {0};
    synth_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    qvc_ecapa *ecapa = NULL;

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

    /* -- the voice, before any session: its weight delta changes the model -- */
    const int H = qv_model_hidden_size(m);
    qve_wdelta_report wrep = {0};
    if (o.voice) {
        if (find_voice(o.voice, voice_path, sizeof voice_path)) goto out;
        if (qvf_read_file(voice_path, (uint32_t)H, &voice, err, sizeof err)) {
            fprintf(stderr, TOOL ": %s\n", err);
            goto out;
        }
        if (voice->has_wdelta && !o.no_wdelta) {
            const double tw0 = now_s();
            if (qve_voice_apply_wdelta(m, voice, &wrep, err, sizeof err)) {
                fprintf(stderr, TOOL ": %s: %s\n", voice_path, err);
                goto out;
            }
            if (!o.quiet && wrep.action == QVE_WDELTA_SOURCE)
                fprintf(stderr,
                        TOOL ": %s: %s is the voice's source model: its weight delta is not "
                             "needed\n",
                        voice_path, o.model_dir);
            else if (!o.quiet)
                fprintf(stderr,
                        TOOL ": %s: weight delta applied in %.2f s: %d of %d tensors changed "
                             "(%.0f MiB in RAM), %d already equal%s%s\n",
                        voice_path, now_s() - tw0, wrep.n_changed, wrep.n_tensors,
                        wrep.mib_copied, wrep.n_same,
                        wrep.n_unverified ? ", some unverified (legacy file)" : "",
                        wrep.became_source ? "; the model is now the voice's Base model" : "");
        }
    }

    if (voice && (!voice->xvector || (int)voice->enc_dim != H)) {
        fprintf(stderr, TOOL ": %s: x-vector of %u values, the model needs %d\n", voice_path,
                voice->xvector ? voice->enc_dim : 0, H);
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
        if ((st = qv_session_tokenize(s, text, &ids, &n))) {
            fprintf(stderr, TOOL ": %s\n", qv_session_error(s));
            goto out;
        }
        for (int i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
        rc = 0;
        goto out;
    }
    if (!text[0]) {
        fprintf(stderr, TOOL ": no text to speak\n");
        goto out;
    }

    qv_request r = qv_default_request();
    r.strict_vocab = o.strict_vocab;
    r.language = o.language;
    r.speaker = o.speaker;
    const char *type = qv_model_type(m); /* "base" after a full weight delta */
    if (voice) {
        r.speaker_vector = voice->xvector;
        r.n_speaker_vector = H;
        /* a weight delta supersedes TPAD and WOVR (legacy §6.2, §6.4): the model's own
           projection is the source's now */
        const int bridged = wrep.action == QVE_WDELTA_APPLIED;
        if (!bridged && voice->tpad && (int)voice->tpad_hidden == H) r.text_special = voice->tpad;
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
        if (voice->wovr_h && !bridged) {
            if ((int)voice->wovr_h == H && (int)voice->wovr_th == qv_model_text_hidden_size(m)) {
                bridge.fc1_weight = voice->wovr_fc1_w, bridge.fc1_bias = voice->wovr_fc1_b;
                bridge.fc2_weight = voice->wovr_fc2_w, bridge.fc2_bias = voice->wovr_fc2_b;
                bridge.codec_rows = voice->wovr_codec, bridge.n_codec_rows = (int)voice->wovr_cv;
                r.bridge = &bridge;
            } else if (!o.quiet) {
                fprintf(stderr,
                        TOOL ": warning: %s: model bridge for hidden %u/%u ignored (model "
                             "%d/%d)\n",
                        voice_path, voice->wovr_h, voice->wovr_th, H,
                        qv_model_text_hidden_size(m));
            }
        }
        if (voice->has_wdelta && o.no_wdelta && !o.quiet)
            fprintf(stderr, TOOL ": %s: weight delta ignored (--no-wdelta)\n", voice_path);
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

    if (o.verify) {
        if (!voice) {
            if (!o.quiet)
                fprintf(stderr, TOOL ": verify: skipped (a preset speaker has no x-vector to "
                                     "compare with; use --voice)\n");
        } else {
            const char *vdir = o.verify_model ? o.verify_model : o.model_dir;
            ecapa = qvc_ecapa_load(vdir, err, sizeof err);
            if (!ecapa) {
                fprintf(stderr, TOOL ": --verify: %s%s\n", err,
                        o.verify_model ? "" : " (give the Base model with --verify-model DIR)");
                goto out;
            }
            if (qvc_ecapa_dim(ecapa) != (int)voice->enc_dim) {
                fprintf(stderr,
                        TOOL ": --verify-model %s: speaker encoder of %d dims, the voice has %u\n",
                        vdir, qvc_ecapa_dim(ecapa), voice->enc_dim);
                goto out;
            }
            ctx.ecapa = ecapa;
            ctx.ref_xvec = voice->xvector;
            ctx.mel = qvc_mel_create();
            ctx.vpool = qvk_pool_create(o.n_threads);
            ctx.xvec = malloc((size_t)voice->enc_dim * sizeof(float));
            if (!ctx.mel || !ctx.vpool || !ctx.xvec) {
                fprintf(stderr, TOOL ": out of memory\n");
                goto out;
            }
        }
    }

    if (o.dump_codes) {
        if (strcmp(o.dump_codes, "-")) temp_name(dump_tmp, sizeof dump_tmp, o.dump_codes);
        dump = dump_tmp[0] ? fopen(dump_tmp, "w") : stdout;
        if (!dump) {
            fprintf(stderr, TOOL ": %s: %s\n", o.dump_codes, strerror(errno));
            dump_tmp[0] = 0;
            goto out;
        }
    }
    if (o.stream) {
        if (o.out_path) {
            temp_name(out_tmp, sizeof out_tmp, o.out_path);
            snd = open_audio(out_tmp, SF_FORMAT_WAV | SF_FORMAT_PCM_16);
            if (!snd) {
                out_tmp[0] = 0;
                goto out;
            }
            sf_command(snd, SFC_SET_UPDATE_HEADER_AUTO, NULL, SF_TRUE);
            k.snd = snd;
        }
        ctx.k = &k;
    }

    qve_longtext_params lp = qve_longtext_default_params();
    lp.max_chunk_chars = o.max_chunk_chars;
    if (o.no_guard) lp.max_splits = 0;
    ctx.o = &o;
    ctx.s = s;
    ctx.r = &r;
    ctx.dec = dec;
    ctx.want_audio = want_audio;
    ctx.progress = !o.quiet && isatty(STDERR_FILENO);
    ctx.dump = dump;
    ctx.all = &audio;
    ctx.hold = (int64_t)lp.xfade_ms * QV_SAMPLE_RATE_HZ / 1000;
    qve_longtext_report rep;
    const double t0 = now_s();
    if (qve_longtext_run(&audio, &rep, text, &lp, synth_chunk, &ctx, err, sizeof err)) {
        fprintf(stderr, TOOL ": %s\n", err);
        if (!o.quiet && rep.n_text_chunks > 0)
            fprintf(stderr, TOOL ": no output written (%d chunks, %d synthesized, %d split)\n",
                    rep.n_text_chunks, rep.n_synth_calls, rep.n_retries);
        goto out;
    }
    if (o.verify && ctx.ecapa) report_verify(&ctx);
    if (dump && dump != stdout) {
        FILE *d = dump;
        dump = NULL;
        if (fclose(d) || commit_file(dump_tmp, o.dump_codes)) {
            fprintf(stderr, TOOL ": %s: write failed\n", o.dump_codes);
            goto out;
        }
        dump_tmp[0] = 0;
    } else if (dump) {
        fflush(stdout);
    }
    if (ctx.k) {
        if (emit(&ctx, audio.n) || k.failed) {
            fprintf(stderr, TOOL ": audio write failed\n");
            goto out;
        }
        if (snd) {
            SNDFILE *f = snd;
            snd = NULL;
            if (sf_close(f) || commit_file(out_tmp, o.out_path)) goto out;
            out_tmp[0] = 0;
        }
    } else if (o.out_path && write_audio(o.out_path, audio.x, (long)audio.n)) {
        goto out;
    }
    const double wall = now_s() - t0, secs = (double)audio.n / QV_SAMPLE_RATE_HZ;
    if (!o.quiet)
        fprintf(stderr,
                TOOL ": %.2f s audio (%d frames, %d chunk%s%s) in %.2f s, RTF %.3f\n", secs,
                ctx.n_frames_total, rep.n_text_chunks, rep.n_text_chunks == 1 ? "" : "s",
                rep.n_retries ? ", some split after a guard trip" : "", wall,
                secs > 0 ? wall / secs : 0.0);
    rc = 0;
out:
    if (snd) sf_close(snd);
    if (out_tmp[0]) unlink(out_tmp);
    if (dump && dump != stdout) fclose(dump);
    if (dump_tmp[0]) unlink(dump_tmp);
    qve_audio_buf_free(&audio);
    free(ctx.codes);
    free(ctx.xvec);
    qvc_mel_free(ctx.mel);
    qvk_pool_free(ctx.vpool);
    qvc_ecapa_free(ecapa);
    free(ids);
    free(ref_codes);
    qvf_voice_free(voice);
    free(stdin_text);
    qv_session_free(s);
    qv_model_free(m);
    qve_decoder_free(dec);
    return rc;
}
