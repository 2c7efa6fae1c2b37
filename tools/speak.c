/* speak — text to speech with a Qwen3-TTS-12Hz checkpoint (CustomVoice, VoiceDesign or Base).
 * Parses arguments, runs qv_synth (the library does chunking, the guard, decoding, streaming) and
 * writes the audio. Files are written to a temporary name and renamed at the end: a failure
 * (also a guard trip after streaming began, or Ctrl-C) leaves no partial output.
 */
#include <errno.h>
#include <signal.h>
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

#include <cJSON.h>

#include "include/qvoice.h"
#include "voicefmt/qvf.h"

#define TOOL "speak"

/* ==== options ================================================================================ */

typedef struct {
    const char *model_dir, *text, *speaker, *language, *instruct, *out_path;
    const char *dump_codes, *decode_codes, *voice;
    const char *verify_model;
    const char *batch; /* --batch: JSON Lines jobs file, "-" = stdin (docs/batch.md) */
    int format;        /* libsndfile format of -o: --format, else the extension */
    int json;          /* --json: a summary object on stdout */
    double loudness;   /* --loudness LUFS target; 0 = leave the level as generated */
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
    /* styles and scripts (docs/markup.md) */
    const char *style, *style_table, *script, *style_dirs[16];
    double style_strength;
    int n_style_dirs, strict_markup;
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
    OPT_VERIFY_MODEL,
    OPT_BATCH,
    OPT_FORMAT,
    OPT_JSON,
    OPT_LOUDNESS,
    OPT_STYLE,
    OPT_STYLE_STRENGTH,
    OPT_STYLE_DIR,
    OPT_STYLE_TABLE,
    OPT_STRICT_MARKUP,
    OPT_SCRIPT
};

static void usage(FILE *f) {
    const qv_params d = qv_default_params();
    fprintf(
        f,
        "NAME\n"
        "    speak - say text with a Qwen3-TTS-12Hz model, a preset speaker or a cloned voice\n\n"
        "SYNOPSIS\n"
        "    speak -m MODEL_DIR [options] [--text TEXT | < text] -o OUT | --stream\n"
        "    speak -m MODEL_DIR --decode-codes FILE -o OUT.wav\n"
        "    speak -m MODEL_DIR [options] --batch JOBS.jsonl\n"
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
        "  -o, --output FILE          audio file, written atomically; format by extension:\n"
        "                             .wav .flac .ogg .opus .mp3 .pcm (raw s16le); - = stdout\n"
        "      --format F             wav, flac, ogg, opus, mp3 or pcm (needed with -o -)\n"
        "      --loudness LUFS        normalise the output's integrated loudness (EBU R128),\n"
        "                             e.g. -23 (broadcast) or -16 (podcasts); not with --stream\n"
        "      --json                 a JSON summary on stdout (output, seconds, rtf, frames,\n"
        "                             loudness_lufs) when the audio goes to a file\n"
        "      --stream               raw s16le 24 kHz mono to stdout, or a WAV written\n"
        "                             progressively with -o (renamed at the end), from the first\n"
        "                             decoded frame on; a guard trip after that fails the run\n"
        "      --max-frames N         at most N frames of 80 ms (default: model's "
        "max_new_tokens-1)\n"
        "      --max-seconds S        at most S seconds of audio\n"
        "                             (both per chunk; reaching them is not an error)\n"
        "      --max-chunk-chars N    long text: chunks of at most N characters at sentence ends\n"
        "                             (default %d); [pause:500ms] inserts silence\n"
        "      --no-chunk             one chunk (only [pause:] tags split the text)\n"
        "      Markup in the text (docs/markup.md): [pause:400ms] [break:1s], style tags [sad]\n"
        "      [whisper] ... [style: free instruct text] [neutral], [voice:NAME] [lang:NAME]\n"
        "      --style NAME           style of the whole text: the voice's palette entry, else a\n"
        "                             --style-dir, plus its instruct text where the model takes\n"
        "                             one; an error when nothing applies\n"
        "      --style-strength S     strength of palette entries and directions, (0, 4]\n"
        "                             (default: each entry's own; variants 1, directions 0.25)\n"
        "      --style-dir NAME=FILE  a generic style direction (voicefmt palette derive), used\n"
        "                             when the voice's palette lacks NAME (repeatable, 16)\n"
        "      --style-table FILE     extra \"name = instruct text\" lines for style tags\n"
        "      --strict-markup        a tag the model and voice cannot honour is an error\n"
        "                             (default: a warning naming it)\n"
        "      --script FILE          a dialogue: \"NAME: text\" lines (NAME a voice or preset\n"
        "                             speaker), blank line = 600 ms pause; one output, a\n"
        "                             progress line per script line\n"
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
        "                             q4 are quantized at load: faster, codes differ; q4 also\n"
        "                             rounds the text projection; a q4 checkpoint runs q4\n"
        "                             anyway, docs/compression.md)\n"
        "      --strict-vocab         vocabulary-pruned model: refuse text with tokens it lacks\n"
        "                             (default: spell each with the smaller pieces it merges\n"
        "                             from, the same bytes, and warn, naming them)\n"
        "      --ignore-eos           never stop at end-of-speech (benchmarks; with --max-frames)\n"
        "  -j, --threads N            compute threads (default 0: all online CPUs)\n"
        "      --seed N               sampling seed (default %llu); output is identical across "
        "runs\n"
        "                             and thread counts\n"
        "      --list-speakers        print preset speakers and exit\n"
        "      --list-languages       print languages and exit\n"
        "      --dump-codes FILE      write the codes, one frame per line (16 integers); - = "
        "stdout\n"
        "      --decode-codes FILE    decode such a file to audio (-o) instead of synthesizing\n"
        "      --tokens               print the text's token ids and exit\n"
        "      --batch FILE           one model load for many texts: one JSON job per line\n"
        "                             (text, output, speaker|voice, language, instruct, style,\n"
        "                             seed); markup in the text and the --style-* options apply;\n"
        "                             one JSON result per job on stdout; exit 1 if any failed\n"
        "                             (docs/batch.md). - = stdin\n"
        "  -q, --quiet                no progress or summary on stderr\n"
        "  -h, --help                 this help;  -V, --version  version\n\n"
        "EXIT STATUS\n"
        "    0 ok, 1 failure (bad model, bad input, runaway guard, I/O; --batch: a job failed),\n"
        "    2 usage error.\n\n"
        "EXAMPLE\n"
        "    speak -m models/0.6B-CustomVoice -s ryan -l english -t \"Hello.\" -o hello.wav\n",
        qv_synth_default_request().max_chunk_chars, d.temperature, d.top_k, d.top_p,
        d.repetition_penalty,
        (unsigned long long)d.seed);
}

/* One line, as every tool: "speak: problem (see speak --help)". */
static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, TOOL ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see " TOOL " --help)\n");
    return 2;
}

/* ==== output formats ========================================================================= */

static const struct {
    const char *name; /* --format and the file extension */
    int sf;
} formats[] = {
    {"wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16},
    {"flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16},
    {"ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS},
    {"opus", SF_FORMAT_OGG | SF_FORMAT_OPUS},
    {"mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III},
    {"pcm", SF_FORMAT_RAW | SF_FORMAT_PCM_16 | SF_ENDIAN_LITTLE},
};
#define FORMAT_NAMES "wav, flac, ogg, opus, mp3 or pcm"

static int format_named(const char *name) {
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (!strcasecmp(name, formats[i].name)) return formats[i].sf;
    return 0;
}

/* The format of path's extension, or 0. */
static int format_for(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot && !strchr(dot, '/') ? format_named(dot + 1) : 0;
}

/* Whether this libsndfile writes fmt (MP3 and Opus depend on how it was built). */
static int format_writable(int fmt) {
    SF_INFO info = {.samplerate = QV_SAMPLE_RATE_HZ, .channels = 1, .format = fmt};
    return sf_format_check(&info);
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
                                       {"batch", required_argument, 0, OPT_BATCH},
                                       {"format", required_argument, 0, OPT_FORMAT},
                                       {"json", no_argument, 0, OPT_JSON},
                                       {"loudness", required_argument, 0, OPT_LOUDNESS},
                                       {"quant", required_argument, 0, OPT_QUANT},
                                       {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
                                       {"strict-vocab", no_argument, 0, OPT_STRICT_VOCAB},
                                       {"style", required_argument, 0, OPT_STYLE},
                                       {"style-strength", required_argument, 0,
                                        OPT_STYLE_STRENGTH},
                                       {"style-dir", required_argument, 0, OPT_STYLE_DIR},
                                       {"style-table", required_argument, 0, OPT_STYLE_TABLE},
                                       {"strict-markup", no_argument, 0, OPT_STRICT_MARKUP},
                                       {"script", required_argument, 0, OPT_SCRIPT},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, 'V'},
                                       {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->n_threads = qv_threads_resolve(0);
    o->max_chunk_chars = qv_synth_default_request().max_chunk_chars;
    int c;
    long l;
    double d;
    const char *format_name = NULL;
    opterr = 0; /* unknown options are reported below, in one line */
    while ((c = getopt_long(argc, argv, ":m:t:s:l:v:i:o:j:qhV", lo, NULL)) != -1) {
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
        case OPT_STYLE:
            o->style = optarg;
            break;
        case OPT_STYLE_STRENGTH:
            if (parse_double(optarg, 1e-6, 4, &d))
                return usage_error("--style-strength: expected (0, 4], found '%s'", optarg);
            o->style_strength = d;
            break;
        case OPT_STYLE_DIR:
            if (o->n_style_dirs == 16 || !strchr(optarg, '=') || *optarg == '=')
                return usage_error("--style-dir %s: expected NAME=FILE (at most 16)", optarg);
            o->style_dirs[o->n_style_dirs++] = optarg;
            break;
        case OPT_STYLE_TABLE:
            o->style_table = optarg;
            break;
        case OPT_STRICT_MARKUP:
            o->strict_markup = 1;
            break;
        case OPT_SCRIPT:
            o->script = optarg;
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
        case OPT_BATCH:
            o->batch = optarg;
            break;
        case OPT_FORMAT:
            if (!(o->format = format_named(optarg)))
                return usage_error("--format: expected " FORMAT_NAMES ", found '%s'", optarg);
            format_name = optarg;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_LOUDNESS:
            if (parse_double(optarg, -70, -1, &d))
                return usage_error("--loudness: expected -70..-1 LUFS, found '%s'", optarg);
            o->loudness = d;
            break;
        case 'j':
            if (parse_long(optarg, 0, 256, &l))
                return usage_error("--threads: expected 0..256 (0: all online CPUs), found '%s'",
                                   optarg);
            o->n_threads = qv_threads_resolve((int)l);
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
            printf(TOOL " (qvoice) %s\n", qv_version());
            return 1;
        case ':':
            return usage_error("option '%s' needs an argument", argv[optind - 1]);
        default:
            if (optopt) {
                const char opt[3] = {'-', (char)optopt, 0};
                return usage_error("unknown option '%s'", opt);
            }
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (!o->model_dir) return usage_error("%s", "-m/--model DIR is required");
    if (o->voice && o->speaker) return usage_error("%s", "--voice and --speaker are exclusive");
    if (o->decode_codes && !o->out_path && !o->stream)
        return usage_error("%s", "--decode-codes needs -o FILE or --stream");
    if (format_name && !o->out_path)
        return usage_error("--format %s: needs -o FILE or -o -", format_name);
    const int listing = o->tokens || o->list_speakers || o->list_languages;
    if (!o->out_path && !o->stream && !o->dump_codes && !o->verify && !o->verify_model &&
        !o->batch && !listing)
        return usage_error("%s", "nowhere to put the audio: give -o FILE, -o - --format F, "
                                 "--stream or --dump-codes");
    if (o->out_path && !o->format && !(o->format = format_for(o->out_path)))
        return usage_error(strcmp(o->out_path, "-")
                               ? "-o %s: unknown extension (expected " FORMAT_NAMES
                                 ", or give --format)"
                               : "-o %s (stdout): give --format " FORMAT_NAMES,
                           o->out_path);
    if (o->format && !format_writable(o->format))
        return usage_error("--format %s: this build of libsndfile cannot write it",
                           format_name ? format_name : strrchr(o->out_path, '.') + 1);
    if (o->stream && o->out_path) {
        const int type = o->format & SF_FORMAT_TYPEMASK;
        if (!strcmp(o->out_path, "-") && type != SF_FORMAT_RAW)
            return usage_error("%s", "--stream -o -: streams raw s16le only (--format pcm)");
        if (type != SF_FORMAT_WAV && type != SF_FORMAT_RAW)
            return usage_error("--stream -o %s: progressive output is WAV or PCM only",
                               o->out_path);
    }
    if (o->stream && o->loudness)
        return usage_error("%s", "--loudness needs the whole audio before writing: not with "
                                 "--stream");
    if (o->json && (o->stream || !o->out_path || !strcmp(o->out_path, "-") || o->decode_codes) &&
        !o->batch)
        return usage_error("%s", "--json summarises a synthesis to a file (-o FILE; not with -o -, "
                                 "--stream or --decode-codes)");
    if (o->dump_codes && !strcmp(o->dump_codes, "-") &&
        ((o->out_path && !strcmp(o->out_path, "-")) || (o->stream && !o->out_path)))
        return usage_error("%s", "--dump-codes - and the audio cannot both go to stdout");
    if (o->batch && (o->text || o->out_path || o->stream || o->dump_codes || o->decode_codes ||
                     listing || o->verify || o->verify_model || format_name))
        return usage_error("%s", "--batch: text and output come from the jobs file (no -t, -o, "
                                 "--format, --stream, --dump-codes, --decode-codes, --tokens, "
                                 "--list-*, --verify)");
    return 0;
}

/* ==== small helpers ========================================================================== */

/* The text on stdin (at most 64 MiB; release with qv_free), without the trailing newline of a
 * pipe; NULL after printing why it could not be read. */
static char *read_stdin_text(void) {
    size_t n;
    char *buf;
    if (qv_file_read("/dev/stdin", (size_t)64 << 20, &buf, &n)) {
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
        return NULL;
    }
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = 0;
    return buf;
}

/* libsndfile on the atomic writer's descriptor (the file appears at path only on commit). */
static SNDFILE *open_audio(qv_outfile *of, const char *path, int format) {
    SF_INFO info = {0};
    info.samplerate = QV_SAMPLE_RATE_HZ;
    info.channels = 1;
    info.format = format;
    SNDFILE *f = sf_open_fd(qv_outfile_fd(of), SFM_WRITE, &info, 0);
    if (!f) fprintf(stderr, TOOL ": %s: %s\n", path, sf_strerror(NULL));
    return f;
}

static qv_outfile *open_out(const char *path) {
    qv_outfile *of;
    if (qv_outfile_open(&of, path)) {
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
        return NULL;
    }
    return of;
}

static int commit_out(qv_outfile *of) {
    if (!qv_outfile_commit(of)) return 0;
    fprintf(stderr, TOOL ": %s\n", qv_last_error());
    return -1;
}

/* libsndfile's virtual I/O on a growing memory buffer: every format (also those that seek back
 * to finish a header) can then go to a pipe as well as to a file. */
typedef struct {
    unsigned char *p;
    sf_count_t n, cap, pos;
} membuf;

static sf_count_t mem_len(void *u) { return ((membuf *)u)->n; }
static sf_count_t mem_tell(void *u) { return ((membuf *)u)->pos; }

static sf_count_t mem_seek(sf_count_t off, int whence, void *u) {
    membuf *b = u;
    sf_count_t to = off + (whence == SEEK_CUR ? b->pos : whence == SEEK_END ? b->n : 0);
    if (to < 0) return -1;
    return b->pos = to;
}

static sf_count_t mem_read(void *dst, sf_count_t n, void *u) {
    membuf *b = u;
    if (n > b->n - b->pos) n = b->n - b->pos > 0 ? b->n - b->pos : 0;
    memcpy(dst, b->p + b->pos, (size_t)n);
    b->pos += n;
    return n;
}

static sf_count_t mem_write(const void *src, sf_count_t n, void *u) {
    membuf *b = u;
    if (b->pos + n > b->cap) {
        sf_count_t cap = b->cap ? b->cap : 65536;
        while (cap < b->pos + n)
            cap *= 2;
        unsigned char *g = realloc(b->p, (size_t)cap);
        if (!g) return 0;
        b->p = g, b->cap = cap;
    }
    if (b->pos > b->n) memset(b->p + b->n, 0, (size_t)(b->pos - b->n)); /* a seek past the end */
    memcpy(b->p + b->pos, src, (size_t)n);
    b->pos += n;
    if (b->pos > b->n) b->n = b->pos;
    return n;
}

/* Encodes wav[n] as fmt and writes it to path ("-": stdout), atomically for a file. */
static int write_audio(const char *path, int fmt, const float *wav, long n) {
    SF_VIRTUAL_IO io = {mem_len, mem_seek, mem_read, mem_write, mem_tell};
    SF_INFO info = {.samplerate = QV_SAMPLE_RATE_HZ, .channels = 1, .format = fmt};
    membuf b = {0};
    SNDFILE *f = sf_open_virtual(&io, SFM_WRITE, &info, &b);
    int ok = f && sf_writef_float(f, wav, n) == n;
    if (f && !ok) fprintf(stderr, TOOL ": %s: %s\n", path, sf_strerror(f));
    if (!f) fprintf(stderr, TOOL ": %s: %s\n", path, sf_strerror(NULL));
    if (f && sf_close(f)) ok = 0;
    if (ok && !strcmp(path, "-")) {
        ok = fwrite(b.p, 1, (size_t)b.n, stdout) == (size_t)b.n && !fflush(stdout);
        if (!ok) fprintf(stderr, TOOL ": stdout: %s\n", strerror(errno));
    } else if (ok) {
        qv_outfile *of = open_out(path);
        FILE *s = of ? qv_outfile_stream(of) : NULL;
        ok = s && fwrite(b.p, 1, (size_t)b.n, s) == (size_t)b.n;
        if (of && !ok)
            fprintf(stderr, TOOL ": %s: %s\n", path, s ? strerror(errno) : "out of memory");
        if (of) ok = ok ? !commit_out(of) : (qv_outfile_abort(of), 0);
    }
    free(b.p);
    return ok ? 0 : -1;
}

/* Scales wav[n] to an integrated loudness of target LUFS; samples beyond full scale are clipped
 * (counted in *n_clipped). 0, or -1 with err when there is nothing to measure. */
static int normalize_loudness(float *wav, int64_t n, double target, int64_t *n_clipped,
                              char *err, size_t err_size) {
    double lufs;
    if (qv_loudness_lufs(wav, n, &lufs)) return snprintf(err, err_size, "out of memory"), -1;
    if (!isfinite(lufs))
        return snprintf(err, err_size, "--loudness: nothing to measure (silent, or shorter than "
                                       "one 0.4 s EBU R128 block)"),
               -1;
    const float g = (float)pow(10.0, (target - lufs) / 20.0);
    *n_clipped = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = wav[i] * g;
        if (fabsf(v) > 1.0f) v = v > 0 ? 1.0f : -1.0f, ++*n_clipped;
        wav[i] = v;
    }
    return 0;
}

/* ==== audio sink ============================================================================= */

typedef struct {
    SNDFILE *snd; /* progressive file (--stream -o) */
    int raw;      /* raw s16le on stdout (--stream) */
    float *all;   /* everything, for a one-shot -o */
    int64_t n, cap;
    int failed;
} sink;

static int on_audio(void *user, const float *pcm, int n) {
    sink *k = user;
    if (k->snd) {
        if (sf_writef_float(k->snd, pcm, n) != n) return k->failed = 1;
    } else if (k->raw) {
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
    } else {
        if (k->n + n > k->cap) {
            int64_t cap = k->cap ? k->cap : QV_SAMPLE_RATE_HZ;
            while (cap < k->n + n)
                cap *= 2;
            float *g = realloc(k->all, (size_t)cap * sizeof *g);
            if (!g) return k->failed = 1;
            k->all = g, k->cap = cap;
        }
        memcpy(k->all + k->n, pcm, (size_t)n * sizeof *pcm);
    }
    k->n += n;
    return 0;
}

/* ==== output and its summary ================================================================ */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* --loudness, then the file: writes wav[n] (scaled in place) as fmt to path and its integrated
 * loudness to *lufs. 0, or -1 with err. */
static int emit(const options *o, const char *path, int fmt, float *wav, int64_t n, double *lufs,
                char *err, size_t err_size) {
    int64_t n_clipped = 0;
    if (o->loudness && normalize_loudness(wav, n, o->loudness, &n_clipped, err, err_size))
        return -1;
    if (n_clipped && !o->quiet)
        fprintf(stderr, TOOL ": %s: warning: --loudness %g clipped %lld sample(s)\n", path,
                o->loudness, (long long)n_clipped);
    if (qv_loudness_lufs(wav, n, lufs)) *lufs = -HUGE_VAL;
    if (write_audio(path, fmt, wav, (long)n))
        return snprintf(err, err_size, "%s: cannot write (details on stderr)", path), -1;
    return 0;
}

/* The summary of one synthesis written to out: --json and a --batch result line. */
static void add_summary(cJSON *res, const char *out, double secs, const qv_synth_stats *ss,
                        double lufs) {
    cJSON_AddStringToObject(res, "output", out);
    cJSON_AddNumberToObject(res, "seconds", round(secs * 1000) / 1000);
    cJSON_AddNumberToObject(res, "audio_seconds", round(ss->audio_seconds * 1000) / 1000);
    cJSON_AddNumberToObject(res, "rtf",
                            ss->audio_seconds > 0 ? round(secs / ss->audio_seconds * 1000) / 1000
                                                  : 0);
    cJSON_AddNumberToObject(res, "frames", ss->n_frames);
    cJSON_AddNumberToObject(res, "chunks", ss->n_chunks);
    if (isfinite(lufs)) cJSON_AddNumberToObject(res, "loudness_lufs", round(lufs * 100) / 100);
    if (ss->warning[0]) cJSON_AddStringToObject(res, "warning", ss->warning);
}

static void print_json(const cJSON *j) {
    char *txt = cJSON_PrintUnformatted(j);
    if (txt) printf("%s\n", txt), fflush(stdout);
    free(txt);
}

/* ==== codes files ============================================================================ */

static int32_t *read_codes(const char *path, int *n_frames) {
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, TOOL ": %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 256, n = 0;
    int32_t *codes = malloc(cap * QV_N_CODEBOOKS * sizeof *codes);
    char line[1024];
    int line_no = 0, bad = !codes;
    while (!bad && fgets(line, sizeof line, f)) {
        line_no++;
        char *p = line, *end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\n' || *p == 0 || *p == '#') continue;
        if (n == cap) {
            int32_t *g = realloc(codes, cap * 2 * QV_N_CODEBOOKS * sizeof *g);
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
            codes[n * QV_N_CODEBOOKS + (size_t)g] = (int32_t)v;
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

static int decode_only(const options *o, const qv_model *m) {
    int n_frames;
    int32_t *codes = read_codes(o->decode_codes, &n_frames);
    if (!codes) return 1;
    const long n = (long)n_frames * QV_SAMPLES_PER_FRAME;
    float *wav = malloc((size_t)n * sizeof(float));
    char err[512];
    int rc = 1;
    if (!wav)
        fprintf(stderr, TOOL ": out of memory\n");
    else if (qv_model_decode_codes(m, codes, n_frames, o->n_threads, wav))
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
    else if (o->out_path) {
        double lufs;
        rc = emit(o, o->out_path, o->format, wav, n, &lufs, err, sizeof err) ? 1 : 0;
        if (rc) fprintf(stderr, TOOL ": %s\n", err);
    }
    else {
        sink k = {.raw = 1};
        rc = on_audio(&k, wav, (int)n) ? 1 : 0;
    }
    free(wav);
    free(codes);
    return rc;
}

/* ==== per chunk: --dump-codes, --verify ====================================================== */

/* ==== styles and scripts (docs/markup.md) =================================================== */

typedef struct {
    qv_style_dir dirs[16]; /* their name and direction point into names / vecs */
    char *names[16];
    float *vecs[16];
    char *table, *markup;
    int *line_offsets, *line_numbers, n_lines, last_line;
} styling;

static void styling_free(styling *y) {
    for (int i = 0; i < 16; i++)
        free(y->names[i]), qv_free(y->vecs[i]);
    qv_free(y->table), qv_free(y->markup), qv_free(y->line_offsets), qv_free(y->line_numbers);
}

/* Reads --style-dir, --style-table and --script into y (printing what is wrong). */
static int styling_load(const options *o, styling *y) {
    for (int i = 0; i < o->n_style_dirs; i++) {
        const char *eq = strchr(o->style_dirs[i], '=');
        qv_style_dir *d = &y->dirs[i];
        d->struct_size = sizeof *d;
        if (!(d->name = y->names[i] = strndup(o->style_dirs[i], (size_t)(eq - o->style_dirs[i]))) ||
            qv_clone_xvector(NULL, eq + 1, 0, &y->vecs[i], &d->dim))
            return fprintf(stderr, TOOL ": --style-dir %s: %s\n", o->style_dirs[i],
                           d->name ? qv_last_error() : "out of memory"), 1;
        d->direction = y->vecs[i];
        d->strength = 0.25f;
    }
    size_t n;
    if (o->style_table && qv_file_read(o->style_table, 1 << 20, &y->table, &n))
        return fprintf(stderr, TOOL ": --style-table: %s\n", qv_last_error()), 1;
    if (!o->script) return 0;
    char *script;
    if (qv_file_read(o->script, 16 << 20, &script, &n))
        return fprintf(stderr, TOOL ": --script: %s\n", qv_last_error()), 1;
    enum qv_status st = qv_script_to_markup(script, 600, &y->markup, &y->line_offsets,
                                            &y->line_numbers, &y->n_lines);
    qv_free(script);
    if (st) return fprintf(stderr, TOOL ": %s: %s\n", o->script, qv_last_error()), 1;
    return 0;
}

/* The style fields of a request. */
static void styling_request(const options *o, const styling *y, qv_synth_request *r) {
    r->style = o->style;
    r->style_strength = (float)o->style_strength;
    r->style_dirs = y->dirs;
    r->n_style_dirs = o->n_style_dirs;
    r->style_table = y->table;
    r->strict_markup = o->strict_markup;
}

/* --script: one progress line when a chunk of a new script line completes. */
static void styling_progress(styling *y, int text_offset) {
    int i = y->n_lines - 1;
    while (i > 0 && y->line_offsets[i] > text_offset)
        i--;
    if (i == y->last_line - 1) return;
    y->last_line = i + 1;
    fprintf(stderr, TOOL ": script line %d (%d/%d)\n", y->line_numbers[i], i + 1, y->n_lines);
}

typedef struct {
    FILE *dump;
    double cos[1024];
    int n_cos;
    styling *script; /* --script progress, or NULL */
} chunks;

static void on_chunk(void *user, const qv_chunk_info *c) {
    chunks *k = user;
    for (int f = 0; k->dump && f < c->n_frames; f++) {
        for (int i = 0; i < QV_N_CODEBOOKS; i++)
            fprintf(k->dump, "%s%d", i ? " " : "", (int)c->codes[(size_t)f * QV_N_CODEBOOKS + i]);
        fputc('\n', k->dump);
    }
    if (k->n_cos < (int)(sizeof k->cos / sizeof k->cos[0])) k->cos[k->n_cos++] = c->verify;
    if (k->script) styling_progress(k->script, c->text_offset);
}

/* Prints --verify's per-chunk similarities and the lowest. */
static void report_verify(const chunks *c) {
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

/* The model's generation defaults overridden by the command line. */
static qv_params params_for(const options *o, const qv_model *m) {
    qv_params p = qv_model_params(m);
    p.n_threads = o->n_threads;
    if (o->have_seed) p.seed = o->seed;
    if (o->set_temperature) p.temperature = o->temperature;
    if (o->set_top_k) p.top_k = o->top_k;
    if (o->set_top_p) p.top_p = o->top_p;
    if (o->set_rp) p.repetition_penalty = o->repetition_penalty;
    if (o->greedy) p.do_sample = 0, p.subtalker_do_sample = 0;
    p.quant = o->quant, p.ignore_eos = o->ignore_eos;
    if (o->max_frames) p.max_frames = o->max_frames;
    return p;
}

/* An instruction the 0.6B CustomVoice model was not trained for is dropped (unless forced or a
 * weight delta makes the model another one). */
static int instruct_ignored(const options *o, const qv_model *m, const qv_voice *voice) {
    const int delta = voice && qv_voice_has_wdelta(voice) && !o->no_wdelta; /* makes it Base */
    return !strcmp(qv_model_type(m), qvf_variant_name(QVF_VARIANT_CUSTOM_VOICE)) &&
           !strcmp(qv_model_size(m), "0b6") && !delta && !o->force_instruct;
}

static void list(const qv_model *m, int speakers) {
    int n = speakers ? qv_model_n_speakers(m) : qv_model_n_languages(m);
    for (int i = 0; i < n; i++)
        puts(speakers ? qv_model_speaker(m, i) : qv_model_language(m, i));
}

static qv_synth *volatile g_synth; /* Ctrl-C cancels it; main then removes its temporary files */

static void on_signal(int sig) {
    (void)sig;
    qv_synth_cancel(g_synth);
}

/* The request fields the command line sets for every synthesis, single run or batch job. */
static qv_synth_request base_request(const options *o, const qv_voice *voice) {
    qv_synth_request r = qv_synth_default_request();
    r.voice = voice;
    r.force_voice = 1; /* a voice made with an unrelated checkpoint: a warning (stats.warning) */
    r.strict_vocab = o->strict_vocab;
    r.use_icl = !o->no_icl;
    r.use_wdelta = !o->no_wdelta;
    r.guard = !o->no_guard;
    r.max_chunk_chars = o->max_chunk_chars;
    r.max_seconds = o->max_seconds;
    return r;
}

/* ==== --batch (docs/batch.md) ================================================================ */

typedef struct {
    char *name; /* as the jobs name it */
    qv_voice *v;
} cached_voice;

typedef struct {
    const qv_model *m;
    qv_params p;   /* the command line's; a job's seed replaces p.seed */
    qv_synth *syn; /* made for p (a new seed makes a new one: cheap next to the model load) */
    cached_voice *voices; /* every voice a job named, opened once */
    int n_voices;
    int wdelta_line; /* the line whose voice's weight delta rewrote the model, or 0 */
    const styling *sty; /* --style-dir, --style-table (a job's "style" replaces --style) */
} batch;

/* The voice the jobs call name, opened on first use. NULL with err on failure. */
static const qv_voice *batch_voice(batch *b, const char *name, char *err, size_t n) {
    for (int i = 0; i < b->n_voices; i++)
        if (!strcmp(b->voices[i].name, name)) return b->voices[i].v;
    cached_voice *g = realloc(b->voices, (size_t)(b->n_voices + 1) * sizeof *g);
    if (!g) return snprintf(err, n, "out of memory"), NULL;
    b->voices = g;
    cached_voice *c = &b->voices[b->n_voices];
    if (qv_voice_open(&c->v, name)) return snprintf(err, n, "%s", qv_last_error()), NULL;
    if (!(c->name = strdup(name))) {
        qv_voice_free(c->v);
        return snprintf(err, n, "out of memory"), NULL;
    }
    b->n_voices++;
    return c->v;
}

/* The string field key of job j (checked to be a string), or dflt when absent. */
static const char *job_str(const cJSON *j, const char *key, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

/* Checks a job's fields; 0, or -1 with err = "FIELD: problem". */
static int job_check(const cJSON *j, char *err, size_t n) {
    static const char *const strs[] = {"text",     "output",   "speaker", "voice",
                                       "language", "instruct", "style"};
    if (!cJSON_IsObject(j)) return snprintf(err, n, "not a JSON object"), -1;
    for (const cJSON *f = j->child; f; f = f->next) {
        int known = 0;
        for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
            if (!strcmp(f->string, strs[i])) {
                known = 1;
                if (!cJSON_IsString(f)) return snprintf(err, n, "%s: not a string", f->string), -1;
            }
        if (!strcmp(f->string, "seed")) {
            known = 1;
            if (!cJSON_IsNumber(f) || f->valuedouble < 0 || f->valuedouble > 9007199254740992.0 ||
                f->valuedouble != floor(f->valuedouble))
                return snprintf(err, n, "seed: expected a non-negative integer"), -1;
        }
        if (!known) return snprintf(err, n, "%s: unknown field", f->string), -1;
    }
    if (!job_str(j, "text", NULL) || !job_str(j, "text", NULL)[0])
        return snprintf(err, n, "text: missing or empty"), -1;
    const char *out = job_str(j, "output", NULL);
    if (!out || !out[0]) return snprintf(err, n, "output: missing"), -1;
    if (!strcmp(out, "-")) return snprintf(err, n, "output: stdout carries the results"), -1;
    const int fmt = format_for(out);
    if (!fmt)
        return snprintf(err, n, "output: %s: unknown extension (expected " FORMAT_NAMES ")", out),
               -1;
    if (!format_writable(fmt))
        return snprintf(err, n, "output: %s: this build of libsndfile cannot write it", out), -1;
    if (cJSON_GetObjectItemCaseSensitive(j, "speaker") &&
        cJSON_GetObjectItemCaseSensitive(j, "voice"))
        return snprintf(err, n, "speaker and voice are exclusive"), -1;
    return 0;
}

/* Runs the job on line lineno; fills res with the job's result fields. 0 ok, -1 failed (err
 * set), QV_E_CANCELLED when Ctrl-C stopped it. */
static int job_run(const options *o, batch *b, int lineno, const char *line, cJSON *res,
                   char *err, size_t n) {
    cJSON *j = cJSON_Parse(line);
    int rc = -1;
    sink k = {0};
    if (!j) {
        const char *at = cJSON_GetErrorPtr();
        snprintf(err, n, "not valid JSON (at column %d)",
                 at && at >= line ? (int)(at - line) + 1 : 1);
        return -1;
    }
    if (job_check(j, err, n)) goto out;
    const char *speaker = job_str(j, "speaker", NULL), *vname = job_str(j, "voice", NULL);
    if (!speaker && !vname) speaker = o->speaker, vname = o->voice;
    const qv_voice *voice = vname ? batch_voice(b, vname, err, n) : NULL;
    if (vname && !voice) goto out;
    if (!voice && b->wdelta_line) {
        snprintf(err, n, "speaker %s: line %d's voice rewrote the model with its weight delta; "
                         "run preset speakers in another batch (or --no-wdelta)",
                 speaker ? speaker : "(none)", b->wdelta_line);
        goto out;
    }
    qv_params p = b->p;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(j, "seed");
    if (seed) p.seed = (uint64_t)seed->valuedouble;
    enum qv_status st;
    if (!b->syn || p.seed != b->p.seed) {
        qv_synth_free(b->syn), b->syn = NULL;
        if ((st = qv_synth_new(&b->syn, b->m, &p))) {
            snprintf(err, n, "%s", qv_strerror(st));
            goto out;
        }
        b->p.seed = p.seed;
    }
    qv_synth_request r = base_request(o, voice);
    styling_request(o, b->sty, &r);
    r.style = job_str(j, "style", o->style);
    r.text = job_str(j, "text", NULL);
    r.language = job_str(j, "language", o->language);
    r.speaker = voice ? NULL : speaker;
    r.whole_chunks = 1; /* the file is written at the end */
    const char *instruct = job_str(j, "instruct", o->instruct);
    if (instruct && instruct_ignored(o, b->m, r.voice))
        cJSON_AddStringToObject(res, "warning", "instruct ignored: the 0.6B CustomVoice model "
                                                "was not trained for instructions");
    else
        r.instruct = instruct;
    const double t0 = now_s();
    qv_synth_stats ss = {.struct_size = sizeof ss};
    g_synth = b->syn;
    st = qv_synth_run(b->syn, &r, on_audio, &k, &ss);
    g_synth = NULL;
    if (ss.wdelta_applied && !b->wdelta_line) b->wdelta_line = lineno;
    if (st) {
        snprintf(err, n, "%s", k.failed ? "out of memory" : qv_last_error());
        if (st == QV_E_CANCELLED) rc = QV_E_CANCELLED;
        goto out;
    }
    const char *out = job_str(j, "output", NULL);
    double lufs;
    if (emit(o, out, format_for(out), k.all, k.n, &lufs, err, n)) goto out;
    add_summary(res, out, now_s() - t0, &ss, lufs);
    rc = 0;
out:
    free(k.all);
    cJSON_Delete(j);
    return rc;
}

/* Runs every job of jobs; one result line per job on stdout. 0 all ok, 1 some failed. */
static int run_batch(const options *o, const qv_model *m, const styling *sty, FILE *jobs) {
    batch b = {.m = m, .p = params_for(o, m), .sty = sty};
    char *line = NULL, err[4400];
    size_t cap = 0;
    int n_failed = 0, n_jobs = 0;
    ssize_t len;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    for (int lineno = 1; (len = getline(&line, &cap, jobs)) >= 0; lineno++) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (!line[strspn(line, " \t")]) continue; /* blank line: no job */
        cJSON *res = cJSON_CreateObject();
        if (!res) {
            fprintf(stderr, TOOL ": out of memory\n");
            n_failed++;
            break;
        }
        cJSON_AddNumberToObject(res, "line", lineno);
        cJSON_AddFalseToObject(res, "ok"); /* set below: keeps "ok" next to "line" */
        err[0] = 0;
        int rc = job_run(o, &b, lineno, line, res, err, sizeof err);
        n_jobs++;
        cJSON_ReplaceItemInObject(res, "ok", cJSON_CreateBool(rc == 0));
        if (rc) cJSON_AddStringToObject(res, "error", err), n_failed++;
        print_json(res);
        cJSON_Delete(res);
        if (!o->quiet && rc) fprintf(stderr, TOOL ": %s: line %d: %s\n", o->batch, lineno, err);
        if (rc == QV_E_CANCELLED) break;
    }
    if (!o->quiet) fprintf(stderr, TOOL ": batch: %d job(s), %d failed\n", n_jobs, n_failed);
    free(line);
    for (int i = 0; i < b.n_voices; i++)
        free(b.voices[i].name), qv_voice_free(b.voices[i].v);
    free(b.voices);
    qv_synth_free(b.syn);
    return n_failed ? 1 : 0;
}

int main(int argc, char **argv) {
    options o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr == 1 ? 0 : 2;
    const int to_stdout = o.out_path && !strcmp(o.out_path, "-");
    if (o.stream && to_stdout) o.out_path = NULL; /* --format pcm: what --stream writes anyway */
    if (((o.stream && !o.out_path) || to_stdout) && isatty(STDOUT_FILENO))
        return usage_error("%s", "the audio would go to a terminal: redirect stdout");
    if (o.verify_model && !o.verify) o.verify = 1;
    FILE *jobs = NULL;
    if (o.batch && !(jobs = strcmp(o.batch, "-") ? fopen(o.batch, "r") : stdin))
        return usage_error("--batch %s: cannot open", o.batch);

    char err[1024];
    qv_outfile *out_file = NULL, *dump_file = NULL;
    int rc = 1;
    qv_model *m = NULL;
    qv_synth *syn = NULL;
    qv_voice *voice = NULL;
    char *stdin_text = NULL;
    SNDFILE *snd = NULL;
    sink k = {0};
    chunks ck = {0};
    styling sty = {0};
    enum qv_status st;

    if ((st = qv_model_load(&m, o.model_dir))) {
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
        goto out;
    }
    if (o.decode_codes) {
        rc = decode_only(&o, m);
        goto out;
    }
    if (o.list_speakers || o.list_languages) {
        if (o.list_speakers) list(m, 1);
        if (o.list_languages) list(m, 0);
        rc = 0;
        goto out;
    }
    if (styling_load(&o, &sty)) goto out;
    if (jobs) {
        rc = run_batch(&o, m, &sty, jobs);
        goto out;
    }
    const char *text = sty.markup ? sty.markup : o.text;
    if (sty.markup && !o.quiet) ck.script = &sty;
    if (!text) {
        if (!(stdin_text = read_stdin_text())) goto out;
        text = stdin_text;
    }
    qv_params p = params_for(&o, m);
    if (o.tokens) {
        qv_session *s;
        int32_t *ids;
        int n;
        if ((st = qv_session_new(&s, m, &p)) || (st = qv_session_tokenize(s, text, &ids, &n))) {
            fprintf(stderr, TOOL ": %s\n", qv_last_error());
            qv_session_free(s);
            goto out;
        }
        for (int i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
        qv_free(ids);
        qv_session_free(s);
        rc = 0;
        goto out;
    }
    if (!text[0]) {
        fprintf(stderr, TOOL ": no text to speak\n");
        goto out;
    }
    if (o.voice && (st = qv_voice_open(&voice, o.voice))) {
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
        goto out;
    }

    if ((st = qv_synth_new(&syn, m, &p))) {
        fprintf(stderr, TOOL ": %s: %s\n", qv_strerror(st), qv_last_error());
        goto out;
    }

    qv_synth_request r = base_request(&o, voice);
    styling_request(&o, &sty, &r);
    r.text = text;
    r.language = o.language;
    r.speaker = o.speaker;
    r.whole_chunks = !o.stream; /* a file written at the end can wait for each chunk */
    r.codes_only = !o.out_path && !o.stream && !o.verify;
    if (o.instruct && instruct_ignored(&o, m, voice)) {
        if (!o.quiet)
            fprintf(stderr,
                    TOOL ": warning: the 0.6B CustomVoice model was not trained for "
                         "instructions; ignoring --instruct (use --force-instruct to keep it)\n");
    } else {
        r.instruct = o.instruct;
    }
    if (o.verify && !voice && !o.quiet)
        fprintf(stderr, TOOL ": verify: skipped (a preset speaker has no x-vector to compare "
                             "with; use --voice)\n");
    if (o.verify && voice) r.verify_model_dir = o.verify_model ? o.verify_model : o.model_dir;
    if (voice && qv_voice_has_wdelta(voice) && o.no_wdelta && !o.quiet)
        fprintf(stderr, TOOL ": %s: weight delta ignored (--no-wdelta)\n", qv_voice_path(voice));

    if (o.dump_codes) {
        if (strcmp(o.dump_codes, "-") && !(dump_file = open_out(o.dump_codes))) goto out;
        ck.dump = dump_file ? qv_outfile_stream(dump_file) : stdout;
        if (!ck.dump) {
            fprintf(stderr, TOOL ": out of memory\n");
            goto out;
        }
    }
    if (o.stream && o.out_path) {
        if (!(out_file = open_out(o.out_path))) goto out;
        if (!(snd = open_audio(out_file, o.out_path, o.format))) goto out;
        sf_command(snd, SFC_SET_UPDATE_HEADER_AUTO, NULL, SF_TRUE);
        k.snd = snd;
    } else if (o.stream) {
        k.raw = 1;
    }
    qv_synth_set_chunk_fn(syn, on_chunk, &ck);
    g_synth = syn;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    qv_synth_stats ss = {.struct_size = sizeof ss};
    const double t0 = now_s();
    st = qv_synth_run(syn, &r, r.codes_only ? NULL : on_audio, &k, &ss);
    if (ss.warning[0] && !o.quiet) fprintf(stderr, TOOL ": warning: %s\n", ss.warning);
    if (ss.wdelta_applied && !o.quiet)
        fprintf(stderr, TOOL ": %s: weight delta applied: the model computes as the voice's "
                             "source model\n", qv_voice_path(voice));
    if (st) {
        fprintf(stderr, TOOL ": %s\n", k.failed ? "audio write failed" : qv_last_error());
        if (st == QV_E_MODEL && r.verify_model_dir && !o.verify_model)
            fprintf(stderr, TOOL ": --verify: give the Base model with --verify-model DIR\n");
        if (!o.quiet && (o.out_path || o.dump_codes))
            fprintf(stderr, TOOL ": no output written\n");
        goto out;
    }
    if (r.verify_model_dir) report_verify(&ck);
    if (dump_file) {
        qv_outfile *d = dump_file;
        dump_file = NULL;
        ck.dump = NULL;
        if (commit_out(d)) goto out;
    } else if (ck.dump) {
        fflush(stdout);
    }
    if (snd) {
        SNDFILE *f = snd;
        snd = NULL;
        qv_outfile *of = out_file;
        out_file = NULL;
        if (sf_close(f)) {
            fprintf(stderr, TOOL ": %s: %s\n", o.out_path, sf_strerror(NULL));
            qv_outfile_abort(of);
            goto out;
        }
        if (commit_out(of)) goto out;
    }
    double lufs = -HUGE_VAL;
    if (o.out_path && !o.stream &&
        emit(&o, o.out_path, o.format, k.all, k.n, &lufs, err, sizeof err)) {
        fprintf(stderr, TOOL ": %s\n", err);
        goto out;
    }
    if (o.json) {
        cJSON *j = cJSON_CreateObject();
        if (j) {
            cJSON_AddTrueToObject(j, "ok");
            add_summary(j, o.out_path, now_s() - t0, &ss, lufs);
            print_json(j);
            cJSON_Delete(j);
        }
    }
    if (!o.quiet)
        fprintf(stderr,
                TOOL ": %.2f s audio (%d frames, %d chunk%s%s) in %.2f s, RTF %.3f, first audio "
                     "after %.2f s\n",
                ss.audio_seconds, ss.n_frames, ss.n_chunks, ss.n_chunks == 1 ? "" : "s",
                ss.guard_trips ? ", some split after a guard trip" : "", ss.total_s, ss.rtf,
                ss.first_audio_s);
    rc = 0;
out:
    g_synth = NULL;
    if (jobs && jobs != stdin) fclose(jobs);
    if (snd) sf_close(snd);
    qv_outfile_abort(out_file);
    qv_outfile_abort(dump_file);
    free(k.all);
    qv_free(stdin_text);
    styling_free(&sty);
    qv_synth_free(syn);
    qv_voice_free(voice);
    qv_model_free(m);
    return rc;
}
