/* speak — text to speech with a Qwen3-TTS-12Hz checkpoint (CustomVoice, VoiceDesign or Base).
 * An option table, calls into libqvoice (synthesis, the encoder, loudness, the codes format, batch
 * jobs, voice lookup, the sampling bounds and the 0.6B instruct rule all live there) and printing.
 * Files are written to a temporary name and renamed at the end: a failure (also a guard trip after
 * streaming began, or Ctrl-C) leaves no partial output.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "include/qvoice.h"
#include "voicefmt/qvf.h"

#define TOOL "speak"

/* ==== options ================================================================================ */

typedef struct {
    qv_synth_request r; /* what the options set of every synthesis (text, speaker, guard, ...) */
    const char *model_dir, *out_path, *format_name, *dump_codes, *decode_codes, *verify_model;
    const char *quant_name, *seed;
    const char *batch; /* --batch: JSON Lines jobs file, "-" = stdin (docs/batch.md) */
    int format;        /* enum qv_format of -o: --format, else the extension; -1 unset */
    int json, verify, stream, greedy, tokens, list_speakers, list_languages, quiet, ignore_eos;
    int no_watermark;  /* --no-watermark: the samples exactly as synthesized */
    int help, version, threads, quant;
    double temperature, top_k, top_p, repetition_penalty, max_frames, loudness; /* NAN: unset */
    const char *style_table, *script, *style_dirs[16]; /* styles and scripts (docs/markup.md) */
    int n_style_dirs;
    double style_strength;
} options;

/* FLAG/UNSET: an int field set to 1/0; NUM: a double; WHOLE: an integral double; INT: an int;
 * DIRS: one more --style-dir NAME=FILE. */
enum kind { FLAG, UNSET, STR, DIRS, NUM, WHOLE, INT };

/* One row per option: the getopt_long table, the help and where the value goes. A help text's
 * "%s" is the option's default (default_text). */
typedef struct {
    const char *name;
    char short_name;
    enum kind kind;
    size_t off;      /* into options */
    double lo, hi;   /* NUM/INT range (sampling: the library's, checked by qv_params_check) */
    const char *arg; /* the value's name in the help */
    const char *help;
} opt;

#define O(f) offsetof(options, f)
/* clang-format off */
#define FL(name, s, f, help) {name, s, FLAG, O(f), 0, 0, NULL, help}
#define UN(name, f, help) {name, 0, UNSET, O(f), 0, 0, NULL, help}
#define ST(name, s, f, arg, help) {name, s, STR, O(f), 0, 0, arg, help}
#define NU(name, s, k, f, lo, hi, arg, help) {name, s, k, O(f), lo, hi, arg, help}
/* clang-format on */
#define ANY 1e300 /* -ANY..ANY: a number, in the library's range (qv_params_check) */
static const opt opts[] = {
    ST("model", 'm', model_dir, "DIR", "model directory (config.json, model.safetensors, ...)"),
    ST("text", 't', r.text, "TEXT", "text to speak (default: read stdin)"),
    ST("speaker", 's', r.speaker, "NAME", "preset speaker (CustomVoice; --list-speakers)"),
    ST("voice", 'v', r.voice_path, "FILE|NAME",
       "cloned voice: a .qvoice, or NAME in voices/, $QVOICE_PATH"),
    UN("no-icl", r.use_icl, "use only the voice's x-vector (no ICL prompt)"),
    UN("no-wdelta", r.use_wdelta, "ignore the voice's weight delta"),
    ST("language", 'l', r.language, "NAME", "language (default auto; --list-languages)"),
    ST("instruct", 'i', r.instruct, "TEXT", "style instruction / voice description"),
    FL("force-instruct", 0, r.force_instruct, "keep --instruct on 0.6B CustomVoice (else dropped)"),
    ST("output", 'o', out_path, "FILE", "audio file (atomic), format by extension; - = stdout"),
    ST("format", 0, format_name, "F", QV_FORMAT_NAMES " (needed with -o -)"),
    NU("loudness", 0, NUM, loudness, QV_LOUDNESS_MIN_LUFS, QV_LOUDNESS_MAX_LUFS, "LUFS",
       "normalise the integrated loudness (EBU R128), e.g. -23"),
    FL("json", 0, json, "a JSON summary on stdout (output, seconds, rtf, frames, ...)"),
    FL("stream", 0, stream, "raw s16le to stdout, or a WAV/PCM -o file, as decoded"),
    FL("no-watermark", 0, no_watermark,
       "leave out the inaudible mark that tells the audio is synthetic (docs/provenance.md)"),
    NU("max-frames", 0, WHOLE, max_frames, 1, 1000000, "N", "at most N frames of 80 ms per chunk"),
    NU("max-seconds", 0, NUM, r.max_seconds, 0.08, 80000, "S",
       "at most S seconds of audio per chunk"),
    NU("speed", 0, NUM, r.speed, QV_SPEED_MIN, QV_SPEED_MAX, "X",
       "speak X times as fast, pitch kept (time stretch; default %s)"),
    NU("max-chunk-chars", 0, INT, r.max_chunk_chars, 1, 1000000, "N",
       "chunks of at most N characters at sentence ends (default %s)"),
    UN("no-chunk", r.max_chunk_chars, "one chunk (only [pause:500ms] tags split the text)"),
    UN("no-guard", r.guard, "disable the runaway guard (docs/robustness.md)"),
    ST("style", 0, r.style, "NAME", "style of the whole text: the voice's palette entry, else a "
       "--style-dir, plus its instruct text where the model takes one (docs/markup.md)"),
    NU("style-strength", 0, NUM, style_strength, 1e-6, QV_STYLE_STRENGTH_MAX, "S",
       "strength of palette entries and directions (default: each entry's own)"),
    {"style-dir", 0, DIRS, O(style_dirs), 0, 0, "NAME=FILE",
     "a generic style direction (voicefmt palette derive); repeatable, 16"},
    ST("style-table", 0, style_table, "FILE", "extra \"name = instruct text\" lines for style tags"),
    FL("strict-markup", 0, r.strict_markup, "a tag the model cannot honour is an error"),
    ST("script", 0, script, "FILE", "a dialogue: \"NAME: text\" lines, blank line = pause"),
    FL("verify", 0, verify, "per chunk: speaker similarity of the audio to the voice"),
    ST("verify-model", 0, verify_model, "DIR", "Base model --verify uses (default -m)"),
    NU("temperature", 0, NUM, temperature, -ANY, ANY, "T",
       "0.001..10 (default: generation_config, %s)"),
    NU("top-k", 0, WHOLE, top_k, INT_MIN, INT_MAX, "K", "0 = off (default: generation_config, %s)"),
    NU("top-p", 0, NUM, top_p, -ANY, ANY, "P", "(0, 1], 1 = off (default: generation_config, %s)"),
    NU("repetition-penalty", 0, NUM, repetition_penalty, -ANY, ANY, "R", "0.1..10 (default %s)"),
    FL("greedy", 0, greedy, "argmax talker and code predictor"),
    ST("quant", 0, quant_name, "Q", "bf16 (default), int8 or q4 (docs/compression.md)"),
    FL("strict-vocab", 0, r.strict_vocab, "pruned vocabulary: refuse text with tokens it lacks"),
    FL("ignore-eos", 0, ignore_eos, "never stop at end-of-speech (benchmarks)"),
    NU("threads", 'j', INT, threads, 0, 256, "N", "compute threads (default 0: all CPUs)"),
    ST("seed", 0, seed, "N", "sampling seed (default %s)"),
    FL("list-speakers", 0, list_speakers, "print preset speakers and exit"),
    FL("list-languages", 0, list_languages, "print languages and exit"),
    ST("dump-codes", 0, dump_codes, "FILE", "write the codes, one frame per line; - = stdout"),
    ST("decode-codes", 0, decode_codes, "FILE", "decode such a file instead; - = stdin"),
    FL("tokens", 0, tokens, "print the text's token ids and exit"),
    ST("batch", 0, batch, "FILE", "one JSON job per line, one result per job (docs/batch.md)"),
    FL("quiet", 'q', quiet, "no progress or summary on stderr"),
    FL("help", 'h', help, "this help"),
    FL("version", 'V', version, "version"),
};
#define N_OPTS (sizeof opts / sizeof *opts)

/* The default an option's help names, from the library's own defaults. */
static const char *default_text(const opt *p, char *buf, size_t n) {
    const qv_params d = qv_default_params();
    const char *f = p->name;
    snprintf(buf, n, "%g",
             !strcmp(f, "temperature")          ? d.temperature
             : !strcmp(f, "top-k")              ? d.top_k
             : !strcmp(f, "top-p")              ? d.top_p
             : !strcmp(f, "repetition-penalty") ? d.repetition_penalty
             : !strcmp(f, "seed")               ? (double)d.seed
             : !strcmp(f, "speed")              ? qv_synth_default_request().speed
                                                : qv_synth_default_request().max_chunk_chars);
    return buf;
}

static void usage(void) {
    printf(
        "NAME\n    speak - say text with a Qwen3-TTS-12Hz model, a preset speaker or a cloned "
        "voice\n\nSYNOPSIS\n    speak -m DIR [options] [-t TEXT | < text] -o OUT | --stream | "
        "--dump-codes F\n    speak -m DIR --decode-codes F -o OUT | --batch JOBS.jsonl | --tokens "
        "| --list-speakers\n\nDETAILS\n    docs/speak.md, docs/batch.md\n\nOPTIONS\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        const opt *p = &opts[i];
        char head[64], help[1024], def[32];
        snprintf(head, sizeof head, "%c%c%c --%s %s", p->short_name ? '-' : ' ',
                 p->short_name ? p->short_name : ' ', p->short_name ? ',' : ' ', p->name,
                 p->arg ? p->arg : "");
        snprintf(help, sizeof help, p->help, default_text(p, def, sizeof def));
        printf("  %-29s%s\n", head, help);
    }
    printf("\nEXIT STATUS\n    0 ok, 1 failure (bad model, bad input, runaway guard, I/O; --batch: "
           "a job failed),\n    2 usage error.\n\nEXAMPLE\n    speak -m "
           "models/0.6B-CustomVoice -s ryan -l english -t \"Hello.\" -o hello.wav\n");
}

/* One line, as every tool: "speak: problem (see speak --help)". */
static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, TOOL ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see " TOOL " --help)\n");
    return 2;
}

/* ==== parsing ================================================================================ */

/* Stores option p's value arg. 0, or 2 after a usage error. */
static int apply(options *o, const opt *p, const char *arg) {
    char *field = (char *)o + p->off, *end;
    if (p->kind == FLAG || p->kind == UNSET) return *(int *)(void *)field = p->kind == FLAG, 0;
    if (p->kind == STR) return *(const char **)(void *)field = arg, 0;
    if (p->kind == DIRS) {
        if (o->n_style_dirs == 16 || !strchr(arg, '=') || *arg == '=')
            return usage_error("--style-dir %s: expected NAME=FILE (at most 16)", arg);
        return o->style_dirs[o->n_style_dirs++] = arg, 0;
    }
    errno = 0;
    const double v = strtod(arg, &end);
    if (errno || end == arg || *end || !(v >= p->lo && v <= p->hi) ||
        (p->kind >= WHOLE && v != floor(v))) {
        char what[128];
        snprintf(what, sizeof what, "--%s: expected a%s %g..%g, found '%%s'", p->name,
                 p->kind >= WHOLE ? "n integer" : " number", p->lo, p->hi);
        return usage_error(what, arg);
    }
    if (p->kind == INT) return *(int *)(void *)field = (int)v, 0;
    *(double *)(void *)field = v;
    return 0;
}

static void getopt_tables(struct option *lo, char *shorts) {
    char *s = shorts;
    *s++ = ':'; /* a missing argument is ':' */
    for (size_t i = 0; i < N_OPTS; i++) {
        lo[i] =
            (struct option){opts[i].name, opts[i].kind <= UNSET ? no_argument : required_argument,
                            NULL, 256 + (int)i};
        if (!opts[i].short_name) continue;
        *s++ = opts[i].short_name;
        if (opts[i].kind > UNSET) *s++ = ':';
    }
    lo[N_OPTS] = (struct option){0, 0, 0, 0};
    *s = 0;
}

/* Every option of argv into o. 0, or 2 after a usage error. */
static int read_options(int argc, char **argv, options *o) {
    struct option lo[N_OPTS + 1];
    char shorts[2 * N_OPTS + 2];
    getopt_tables(lo, shorts);
    int c, rc = 0;
    opterr = 0; /* unknown options are reported below, in one line */
    while (!rc && (c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        const opt *p = NULL;
        for (size_t i = 0; i < N_OPTS; i++)
            if (c == 256 + (int)i || (opts[i].short_name && c == opts[i].short_name)) p = &opts[i];
        if (p)
            rc = apply(o, p, optarg);
        else if (c == ':')
            rc = usage_error("option '%s' needs an argument", argv[optind - 1]);
        else if (optopt)
            rc = usage_error("unknown option '%s'", (char[3]){'-', (char)optopt, 0});
        else
            rc = usage_error("unknown option '%s'", argv[optind - 1]);
    }
    if (!rc && optind < argc) rc = usage_error("unexpected argument '%s'", argv[optind]);
    return rc;
}

/* The command line's generation parameters over base (the model's, or the library's defaults). */
static qv_params params_over(const options *o, qv_params p) {
    p.n_threads = qv_threads_resolve(o->threads);
    if (o->seed) p.seed = strtoull(o->seed, NULL, 10);
    if (!isnan(o->temperature)) p.temperature = (float)o->temperature;
    if (!isnan(o->top_k)) p.top_k = (int)o->top_k;
    if (!isnan(o->top_p)) p.top_p = (float)o->top_p;
    if (!isnan(o->repetition_penalty)) p.repetition_penalty = (float)o->repetition_penalty;
    if (o->greedy) p.do_sample = 0, p.subtalker_do_sample = 0;
    p.quant = o->quant, p.ignore_eos = o->ignore_eos;
    if (!isnan(o->max_frames)) p.max_frames = (int)o->max_frames;
    return p;
}

/* Values that are not plain numbers, and the sampling bounds (the library's). 0 or 2. */
static int check_values(options *o) {
    o->quant = o->quant_name ? qv_quant_parse(o->quant_name) : QV_QUANT_BF16;
    if (o->quant < 0)
        return usage_error("--quant: expected bf16, int8 or q4, found '%s'", o->quant_name);
    char *end;
    errno = 0;
    if (o->seed &&
        (o->seed[0] < '0' || o->seed[0] > '9' || (strtoull(o->seed, &end, 10), errno) || *end))
        return usage_error("--seed: expected a non-negative integer, found '%s'", o->seed);
    if (o->format_name && (o->format = qv_format_parse(o->format_name)) < 0)
        return usage_error("--format: expected " QV_FORMAT_NAMES ", found '%s'", o->format_name);
    const qv_params p = params_over(o, qv_default_params());
    if (qv_params_check(&p)) return usage_error("%s", qv_last_error());
    return 0;
}

/* Which modes go together, and where the audio goes (-o, --format, --stream). 0 or 2. */
static int check_modes(options *o) {
    const int listing = o->tokens || o->list_speakers || o->list_languages;
    if (!o->model_dir) return usage_error("%s", "-m/--model DIR is required");
    if (o->r.voice_path && o->r.speaker)
        return usage_error("%s", "--voice and --speaker are exclusive");
    if (o->decode_codes && !o->out_path && !o->stream)
        return usage_error("%s", "--decode-codes needs -o FILE or --stream");
    if (o->r.speed != 1 && (o->decode_codes || o->dump_codes))
        return usage_error("%s", "--speed stretches synthesized audio: not with codes");
    if (o->format_name && !o->out_path)
        return usage_error("--format %s: needs -o FILE or -o -", o->format_name);
    if (!o->out_path && !o->stream && !o->dump_codes && !o->verify && !o->verify_model &&
        !o->batch && !listing)
        return usage_error("%s",
                           "nowhere to put the audio: give -o FILE, --stream or --dump-codes");
    if (o->json && !o->batch &&
        (o->stream || !o->out_path || !strcmp(o->out_path, "-") || o->decode_codes))
        return usage_error("%s", "--json summarises a synthesis to -o FILE (no --stream)");
    if (o->script && (o->r.text || o->batch))
        return usage_error("%s", "--script is the text: not with -t or --batch");
    if (o->batch && (o->r.text || o->out_path || o->stream || o->dump_codes || o->decode_codes ||
                     listing || o->verify || o->verify_model || o->format_name))
        return usage_error("%s", "--batch: text and output come from the jobs file (no -t, -o...)");
    if (o->out_path && o->format < 0 && (o->format = qv_format_of_path(o->out_path)) < 0)
        return usage_error("-o %s: unknown extension (give --format)", o->out_path);
    if (o->format >= 0 && !qv_format_writable(o->format))
        return usage_error("--format: %s", qv_last_error()); /* names the format, and why */
    if (o->stream && o->out_path && !strcmp(o->out_path, "-") && o->format != QV_FORMAT_PCM)
        return usage_error("%s", "--stream -o -: streams raw s16le only (--format pcm)");
    if (o->stream && o->out_path && !qv_format_progressive(o->format))
        return usage_error("--stream -o %s: progressive output is WAV, PCM or AAC only",
                           o->out_path);
    if (o->stream && !isnan(o->loudness))
        return usage_error("%s", "--loudness needs the whole audio: not with --stream");
    if (o->dump_codes && !strcmp(o->dump_codes, "-") &&
        ((o->out_path && !strcmp(o->out_path, "-")) || (o->stream && !o->out_path)))
        return usage_error("%s", "--dump-codes - and the audio cannot both go to stdout");
    return 0;
}

/* 0 ok, 1 exit 0 (help/version), 2 usage error */
static int parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->format = -1;
    o->temperature = o->top_k = o->top_p = o->repetition_penalty = NAN;
    o->max_frames = o->loudness = NAN;
    o->r = qv_synth_default_request();
    o->r.force_voice = 1; /* a voice made with an unrelated checkpoint: a warning (stats.warning) */
    int rc = read_options(argc, argv, o);
    if (!rc && o->help) return usage(), 1;
    if (!rc && o->version) return printf(TOOL " (qvoice) %s\n", qv_version()), 1;
    if (!rc) rc = check_values(o);
    if (!rc) rc = check_modes(o);
    if (o->verify_model) o->verify = 1;
    return rc;
}

/* ==== output ================================================================================= */

/* path ("-": stdout) as a stream; a file through the atomic writer *of. NULL after printing why. */
static FILE *open_out(const char *path, qv_outfile **of) {
    if (!strcmp(path, "-")) return stdout;
    if (qv_outfile_open(of, path)) return fprintf(stderr, TOOL ": %s\n", qv_last_error()), NULL;
    FILE *f = qv_outfile_stream(*of);
    if (!f) fprintf(stderr, TOOL ": %s: out of memory\n", path);
    return f;
}

/* Puts *of in place (none: nothing to do); 0, or -1 after printing why. */
static int commit_out(qv_outfile **of) {
    qv_outfile *f = *of;
    *of = NULL;
    if (!f || !qv_outfile_commit(f)) return 0;
    return fprintf(stderr, TOOL ": %s\n", qv_last_error()), -1;
}

/* --loudness, then the file: writes wav[n] (scaled in place) as fmt to path ("-": stdout) and
 * its integrated loudness to *lufs. 0, or -1 with qv_last_error(). */
static int emit(const options *o, const qv_provenance *prov, const char *path, int fmt, float *wav,
                int64_t n, double *lufs) {
    int64_t n_clipped;
    if (qv_loudness_normalize(wav, n, isnan(o->loudness) ? 0 : o->loudness, &n_clipped, lufs))
        return -1;
    if (n_clipped && !o->quiet)
        fprintf(stderr, TOOL ": %s: warning: --loudness %g clipped %lld sample(s)\n", path,
                o->loudness, (long long)n_clipped);
    if (strcmp(path, "-")) return qv_audio_write(path, fmt, wav, n, prov) ? -1 : 0;
    return qv_audio_write_stream(stdout, fmt, wav, n, prov) ? -1 : 0;
}

/* What the outputs of a synthesis on m with voice v (else the preset speaker) say of it. */
static qv_provenance provenance(const options *o, const qv_model *m, const qv_voice *v) {
    qv_provenance p = qv_provenance_of(m, v, o->r.speaker);
    p.watermark = !o->no_watermark;
    return p;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* --decode-codes: a codes file to audio. */
static int decode_only(const options *o, const qv_model *m) {
    float *wav;
    int64_t n;
    double lufs;
    const char *path = strcmp(o->decode_codes, "-") ? o->decode_codes : "/dev/stdin";
    const qv_provenance prov = provenance(o, m, NULL);
    int rc = qv_codes_decode(m, path, qv_threads_resolve(o->threads), &wav, &n) ||
             emit(o, &prov, o->out_path, o->format, wav, n, &lufs);
    if (rc) fprintf(stderr, TOOL ": %s\n", qv_last_error());
    qv_free(wav);
    return rc;
}

/* --script: one progress line when a chunk of a new script line completes. */
static void script_progress(const qv_styling *y, int text_offset, int *last) {
    int index, n, line = qv_styling_script_line(y, text_offset, &index, &n);
    if (index != *last) fprintf(stderr, TOOL ": script line %d (%d/%d)\n", line, index, n);
    *last = index;
}

/* ==== synthesis ============================================================================== */

static qv_synth *volatile g_synth; /* Ctrl-C cancels it; main then removes its temporary files */
static qv_jobs *volatile g_jobs;

static void on_signal(int sig) {
    (void)sig;
    qv_synth_cancel(g_synth);
    qv_jobs_cancel(g_jobs);
}

/* qv_job_fn: the result line on stdout, a failure on stderr. */
static void on_job(void *user, int line_no, enum qv_status st, const char *res, const char *err) {
    const options *o = user;
    if (res) printf("%s\n", res), fflush(stdout);
    if (st && !o->quiet) fprintf(stderr, TOOL ": %s: line %d: %s\n", o->batch, line_no, err);
}

/* Every job of the jobs file; one result line per job on stdout. 0 all ok, 1 some failed. */
static int run_batch(options *o, const qv_model *m, FILE *in) {
    qv_jobs_options jo = qv_jobs_default_options();
    jo.request = o->r, jo.loudness_lufs = isnan(o->loudness) ? 0 : o->loudness;
    jo.watermark = o->no_watermark ? QV_WATERMARK_OFF : QV_WATERMARK_DEFAULT;
    const qv_params p = params_over(o, qv_model_params(m));
    qv_jobs *jobs;
    int n_jobs, n_failed;
    if (qv_jobs_new(&jobs, m, &p, &jo)) return fprintf(stderr, TOOL ": %s\n", qv_last_error()), 1;
    g_jobs = jobs;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    qv_jobs_run_file(jobs, in, on_job, o, &n_jobs, &n_failed);
    g_jobs = NULL;
    if (!o->quiet) fprintf(stderr, TOOL ": batch: %d job(s), %d failed\n", n_jobs, n_failed);
    qv_jobs_free(jobs);
    return n_failed ? 1 : 0;
}

/* One synthesis and what it needs, freed by run_free. */
typedef struct {
    qv_synth *syn;
    qv_voice *voice;
    qv_outfile *out_file, *dump_file;
    qv_encoder *enc;   /* --stream: WAV/PCM to a file or raw s16le to stdout, as it comes */
    qv_pcm_buffer all; /* else everything, for a one-shot -o */
    qv_provenance prov;
    FILE *dump;        /* --dump-codes */
    int failed, dump_failed, verify, n_chunks, lowest; /* lowest: least similar chunk, or 0 */
    double lowest_cos;
    const qv_styling *script; /* --script progress, or NULL */
    int script_line;
} run;

static int on_audio(void *user, const float *pcm, int n) {
    run *x = user;
    if (!x->enc) return qv_pcm_collect(&x->all, pcm, n);
    return x->failed = qv_encoder_write(x->enc, pcm, n) != QV_OK;
}

/* --dump-codes and --verify's per-chunk similarities, as each chunk completes. */
static void on_chunk(void *user, const qv_chunk_info *c) {
    run *x = user;
    if (x->dump && qv_codes_write(x->dump, c->codes, c->n_frames)) x->dump_failed = 1;
    x->n_chunks++;
    if (x->script) script_progress(x->script, c->text_offset, &x->script_line);
    if (!x->verify) return;
    if (isnan(c->verify)) {
        fprintf(stderr, TOOL ": verify: chunk %d: too short to compare\n", x->n_chunks);
        return;
    }
    fprintf(stderr, TOOL ": verify: chunk %d: speaker similarity %.4f\n", x->n_chunks, c->verify);
    if (!x->lowest || c->verify < x->lowest_cos) x->lowest = x->n_chunks, x->lowest_cos = c->verify;
}

static void run_free(run *x) {
    qv_encoder_close(x->enc);
    qv_outfile_abort(x->out_file);
    qv_outfile_abort(x->dump_file);
    qv_free(x->all.pcm);
    qv_synth_free(x->syn);
    qv_voice_free(x->voice);
}

/* The voice, the synthesizer and the outputs that are written as the synthesis goes. 0 or -1. */
static int run_open(const options *o, const qv_model *m, run *x) {
    const qv_params p = params_over(o, qv_model_params(m));
    enum qv_status st;
    if (o->r.voice_path && qv_voice_open(&x->voice, o->r.voice_path))
        return fprintf(stderr, TOOL ": %s\n", qv_last_error()), -1;
    if ((st = qv_synth_new(&x->syn, m, &p)))
        return fprintf(stderr, TOOL ": %s: %s\n", qv_strerror(st), qv_last_error()), -1;
    x->prov = provenance(o, m, x->voice);
    if (o->dump_codes && !(x->dump = open_out(o->dump_codes, &x->dump_file))) return -1;
    if (!o->stream) return 0;
    FILE *to = open_out(o->out_path ? o->out_path : "-", &x->out_file);
    if (!to || qv_encoder_new(&x->enc, o->out_path ? o->format : QV_FORMAT_PCM, &x->prov, NULL,
                              NULL, to))
        return to ? fprintf(stderr, TOOL ": %s\n", qv_last_error()), -1 : -1;
    return 0;
}

/* After a synthesis: the streamed outputs closed and put in place, the one-shot file written. */
static int run_finish(const options *o, run *x, double *lufs) {
    if (x->dump_failed) return fprintf(stderr, TOOL ": %s: write failed\n", o->dump_codes), -1;
    if (commit_out(&x->dump_file) || fflush(stdout)) return -1;
    qv_encoder *e = x->enc;
    x->enc = NULL;
    if (qv_encoder_close(e))
        return fprintf(stderr, TOOL ": %s: %s\n", o->out_path ? o->out_path : "stdout",
                       qv_last_error()),
               -1;
    if (commit_out(&x->out_file)) return -1;
    *lufs = -HUGE_VAL;
    if (o->out_path && !o->stream &&
        emit(o, &x->prov, o->out_path, o->format, x->all.pcm, x->all.n, lufs))
        return fprintf(stderr, TOOL ": %s\n", qv_last_error()), -1;
    return 0;
}

static int speak_text(const options *o, const qv_model *m, const char *text, const qv_styling *y) {
    run x = {.all = {.struct_size = sizeof x.all}, .script = o->script && !o->quiet ? y : NULL};
    int rc = 1;
    if (run_open(o, m, &x)) goto out;
    qv_synth_request r = o->r;
    r.voice = x.voice;
    r.text = text;
    r.whole_chunks = !o->stream; /* a file written at the end can wait for each chunk */
    r.codes_only = !o->out_path && !o->stream && !o->verify;
    if (o->verify) r.verify_model_dir = o->verify_model ? o->verify_model : o->model_dir;
    x.verify = o->verify && x.voice;
    qv_synth_set_chunk_fn(x.syn, on_chunk, &x);
    g_synth = x.syn;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    qv_synth_stats ss = {.struct_size = sizeof ss};
    const double t0 = now_s();
    const enum qv_status st = qv_synth_run(x.syn, &r, r.codes_only ? NULL : on_audio, &x, &ss);
    g_synth = NULL;
    if (ss.warning[0] && !o->quiet) fprintf(stderr, TOOL ": warning: %s\n", ss.warning);
    if (ss.wdelta_applied && !o->quiet)
        fprintf(stderr,
                TOOL ": %s: weight delta applied: the model computes as the voice's "
                     "source model\n",
                qv_voice_path(x.voice));
    if (st) {
        fprintf(stderr, TOOL ": %s\n",
                x.failed || x.all.failed ? "audio write failed" : qv_last_error());
        if (st == QV_E_MODEL && o->verify && x.voice && !o->verify_model)
            fprintf(stderr, TOOL ": --verify: give the Base model with --verify-model DIR\n");
        if (!o->quiet && (o->out_path || o->dump_codes))
            fprintf(stderr, TOOL ": no output written\n");
        goto out;
    }
    if (x.lowest)
        fprintf(stderr, TOOL ": verify: lowest similarity %.4f (chunk %d of %d)\n", x.lowest_cos,
                x.lowest, x.n_chunks);
    double lufs;
    if (run_finish(o, &x, &lufs)) goto out;
    char *json = o->json ? qv_synth_summary_json(o->out_path, now_s() - t0, &ss, lufs) : NULL;
    if (json) printf("%s\n", json);
    qv_free(json);
    if (!o->quiet)
        fprintf(stderr,
                TOOL ": %.2f s audio (%d frames, %d chunk%s%s) in %.2f s, RTF %.3f, first audio "
                     "after %.2f s\n",
                ss.audio_seconds, ss.n_frames, ss.n_chunks, ss.n_chunks == 1 ? "" : "s",
                ss.guard_trips ? ", some split after a guard trip" : "", ss.total_s, ss.rtf,
                ss.first_audio_s);
    rc = 0;
out:
    run_free(&x);
    return rc;
}

/* ==== main =================================================================================== */

static int print_tokens(const options *o, const qv_model *m, const char *text) {
    const qv_params p = params_over(o, qv_model_params(m));
    qv_session *s = NULL;
    int32_t *ids;
    int n;
    enum qv_status st;
    if ((st = qv_session_new(&s, m, &p)) || (st = qv_session_tokenize(s, text, &ids, &n))) {
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
        qv_session_free(s);
        return 1;
    }
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    qv_free(ids);
    qv_session_free(s);
    return 0;
}

/* which 1: the speakers, -1: the languages, 0: nothing. */
static void list(const qv_model *m, int which) {
    const int n = which > 0 ? qv_model_n_speakers(m) : which < 0 ? qv_model_n_languages(m) : 0;
    for (int i = 0; i < n; i++)
        puts(which > 0 ? qv_model_speaker(m, i) : qv_model_language(m, i));
}

/* The text (-t, --script, or stdin without its trailing newlines), spoken or tokenized. */
static int text_mode(const options *o, const qv_model *m, const qv_styling *y) {
    size_t n;
    const char *given = o->script ? qv_styling_script(y) : o->r.text;
    char *t = NULL;
    if (given)
        t = strdup(given);
    else
        qv_file_read("/dev/stdin", (size_t)1 << 28, &t, &n); /* t stays NULL on failure */
    for (size_t len = t && !given ? strlen(t) : 0;
         len && (t[len - 1] == '\n' || t[len - 1] == '\r');)
        t[--len] = 0; /* a pipe's trailing newline */
    int rc = 1;
    if (!t)
        fprintf(stderr, TOOL ": %s\n", given ? "out of memory" : qv_last_error());
    else if (!t[0] && !o->tokens)
        fprintf(stderr, TOOL ": no text to speak\n");
    else
        rc = o->tokens ? print_tokens(o, m, t) : speak_text(o, m, t, y);
    qv_free(t);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr == 1 ? 0 : 2;
    const int to_stdout = o.out_path && !strcmp(o.out_path, "-");
    if (o.stream && to_stdout) o.out_path = NULL; /* --format pcm: what --stream writes anyway */
    if (((o.stream && !o.out_path) || to_stdout) && isatty(STDOUT_FILENO))
        return usage_error("%s", "the audio would go to a terminal: redirect stdout");
    if (o.decode_codes && !o.out_path) o.out_path = "-", o.format = QV_FORMAT_PCM; /* --stream */
    FILE *jobs = NULL;
    if (o.batch && !(jobs = strcmp(o.batch, "-") ? fopen(o.batch, "r") : stdin))
        return usage_error("--batch %s: cannot open", o.batch);
    qv_model *m = NULL;
    qv_styling *sty = NULL;
    int rc = 1;
    if (qv_styling_load(&sty, o.style_dirs, o.n_style_dirs, o.style_table, o.script))
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
    else if ((qv_styling_apply(sty, &o.r), o.r.style_strength = (float)o.style_strength, 0))
        ;
    else if (qv_model_load(&m, o.model_dir))
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
    else if (o.decode_codes)
        rc = decode_only(&o, m);
    else if (o.list_speakers || o.list_languages)
        rc = (list(m, o.list_speakers), list(m, -o.list_languages), 0);
    else
        rc = jobs ? run_batch(&o, m, jobs) : text_mode(&o, m, sty);
    if (jobs && jobs != stdin) fclose(jobs);
    qv_styling_free(sty);
    qv_model_free(m);
    return rc;
}
