/* clone — make a .qvoice from a reference recording, or compare two voices' x-vectors.
 * Parses arguments, calls the public cloning API (qv_clone_run, qv_clone_similarity) and prints
 * its JSON report: a human summary on stdout and warnings on stderr, or the report itself with
 * --json.
 */
#include <cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/qvoice.h"

#define TOOL "clone"
#define MAX_TRANSCRIPT_BYTES (1u << 20)

typedef struct {
    const char *model_dir, *audio, *out, *ref_text_file;
    int xvector_only, json, threads, compare;
    qv_clone_request r;
} options;

static void usage(FILE *f, const qv_clone_request *d) {
    fprintf(f,
            "NAME\n"
            "    clone - make a qvoice voice file from a reference recording\n"
            "\n"
            "SYNOPSIS\n"
            "    clone -m BASE_MODEL_DIR REF_AUDIO -o VOICE.qvoice [-t TEXT | -T FILE] [options]\n"
            "    clone -m BASE_MODEL_DIR REF_AUDIO --icl-window auto\n"
            "    clone --compare A B [-m BASE_MODEL_DIR]\n"
            "\n"
            "DESCRIPTION\n"
            "    Reads REF_AUDIO (WAV, FLAC, OGG/Vorbis, Opus, MP3 if libsndfile supports it; any\n"
            "    rate and channel count; mono 24 kHz after resampling) and, with a Qwen3-TTS Base\n"
            "    model, stores its ECAPA-TDNN x-vector and, when a transcript is given, the\n"
            "    speech-tokenizer codes of the reference (in-context cloning, ICL), plus the Base\n"
            "    model's text-side bridge: TPAD (pad/bos/eos text embeddings) and WOVR (text\n"
            "    projection and codebook embedding rows 0..2047; see --no-wovr).\n"
            "    The transcript must say exactly what is spoken in the ICL span: by default the\n"
            "    whole clip after trimming (at most %.0f s; --max-seconds cuts longer files), so\n"
            "    the transcript of the whole clip is what to give. --icl-window auto picks the\n"
            "    cleanest 10-15 s instead and prints it: give that span's transcript.\n"
            "    Reference hygiene (default on, docs/robustness.md): trims leading/trailing\n"
            "    silence, normalises the loudness (EBU R128, -20 LUFS, peak <= -1 dBFS) and reports\n"
            "    clipping, refuses < 3 s of voiced speech, refuses a transcript implausible for the\n"
            "    ICL span (letters per voiced second, with the numbers), and warns when windows of\n"
            "    the clip sound like another speaker. Every step is printed and recorded in the\n"
            "    voice file's META (key \"hygiene\").\n"
            "\n"
            "OPTIONS\n"
            "    -m, --model DIR           Base model directory (required; CustomVoice and\n"
            "                              VoiceDesign models have no speaker encoder)\n"
            "    -o, --output FILE         voice file to write, atomically (required, except for\n"
            "                              --icl-window auto without a transcript)\n"
            "    -t, --ref-text TEXT       transcript of the ICL span: adds ICL codes (default:\n"
            "                              none, x-vector only)\n"
            "    -T, --ref-text-file F     same, read from a UTF-8 file\n"
            "    -w, --icl-window SPAN     the ICL span: full (the whole trimmed clip, <= %.0f s),\n"
            "                              auto (the cleanest 10-15 s, printed; without -t only\n"
            "                              the span is reported), or START-END seconds of the\n"
            "                              clip, e.g. 18.5-30 (default full)\n"
            "    -n, --name NAME           voice name (default: the audio file's base name)\n"
            "    -l, --language LANG       language of the reference, e.g. English (default: none)\n"
            "    -x, --xvector-only        store only the x-vector even with a transcript (off)\n"
            "    -c, --target-cv DIR       add a WDELTA (Base - CustomVoice weights) for DIR (off)\n"
            "    -W, --no-wovr             leave out WOVR, the Base text projection and codebook\n"
            "                              rows (16 MB for 0.6B) that make a CustomVoice model\n"
            "                              speak with Base's text side (default: written; TPAD,\n"
            "                              the Base pad/bos/eos vectors, is always written)\n"
            "    -s, --max-seconds S       use at most the first S seconds, 3..3600 (default %.0f)\n"
            "    -H, --no-hygiene          use the clip exactly as given: no trim, no level change,\n"
            "                              the whole clip for ICL, no checks (default: hygiene on)\n"
            "    -F, --allow-xvector-fallback\n"
            "                              an implausible transcript drops ICL (x-vector only)\n"
            "                              instead of failing (default: fail)\n"
            "    -S, --speaker-threshold C second-speaker warning below this cosine to the main\n"
            "                              speaker, -1..1 (default %.2f; for a trained encoder)\n"
            "    -A, --consent TEXT        the consent record (docs/provenance.md), stored in META\n"
            "                              consent.* with the UTC time and the user running clone:\n"
            "                              the statement the speaker gave (method typed)\n"
            "    -K, --consent-speaker WHO who consented (default: not recorded)\n"
            "    -G, --consent-scope TEXT  to what: the uses agreed to (default: not recorded)\n"
            "    -R, --consent-recording F audio file of the spoken consent: method recording, its\n"
            "                              SHA-256 stored (default: none; method typed)\n"
            "    -P, --plot FILE.png       also write the reference's log-mel spectrogram as a PNG:\n"
            "                              seconds and Hz axes, the kept span and the ICL window\n"
            "                              marked, a legend (default: none)\n"
            "        --json                print the JSON report instead of the summary (off)\n"
            "    -j, --threads N           threads, 1..256 (default: all online CPUs; -p is the\n"
            "                              older spelling)\n"
            "    -C, --compare A B         cosine similarity of two x-vectors (audio files need -m;\n"
            "                              .qvoice/.bin files are read as voices)\n"
            "    -h, --help                this text\n"
            "    -V, --version             version\n"
            "\n"
            "EXIT STATUS\n"
            "    0  success\n"
            "    1  failure: unreadable or refused audio, transcript that does not fit, bad model,\n"
            "       I/O error (no output file is left behind)\n"
            "    2  usage error\n"
            "\n"
            "EXAMPLE\n"
            "    clone -m models/Qwen3-TTS-12Hz-0.6B-Base me.wav -l English \\\n"
            "          -t \"<the transcript of the whole 30 s clip>\" \\\n"
            "          --consent \"I agree to my voice being cloned.\" -o me.qvoice\n",
            QV_ICL_MAX_SECONDS, QV_ICL_MAX_SECONDS, d->max_seconds, d->speaker_threshold);
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, TOOL ": ");
    fprintf(stderr, msg, arg);
    fprintf(stderr, " (see " TOOL " --help)\n");
    return 2;
}

/* The transcript, or NULL (said why); release with qv_free. */
static char *read_text_file(const char *path) {
    size_t n;
    char *buf;
    if (qv_file_read(path, MAX_TRANSCRIPT_BYTES, &buf, &n)) {
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
        return NULL;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = 0;
    if (!n) {
        fprintf(stderr, TOOL ": %s: empty transcript\n", path);
        qv_free(buf);
        return NULL;
    }
    return buf;
}

/* ---- reading the report -------------------------------------------------------------------- */

static const cJSON *at(const cJSON *j, const char *dotted) {
    char key[128];
    snprintf(key, sizeof key, "%s", dotted);
    char *save = NULL;
    for (char *k = strtok_r(key, ".", &save); k && j; k = strtok_r(NULL, ".", &save))
        j = cJSON_GetObjectItemCaseSensitive(j, k);
    return j;
}
static double num(const cJSON *j, const char *k) {
    const cJSON *o = at(j, k);
    return cJSON_IsNumber(o) ? o->valuedouble : cJSON_IsTrue(o) ? 1 : 0;
}
static const char *str(const cJSON *j, const char *k) {
    const cJSON *o = at(j, k);
    return cJSON_IsString(o) ? o->valuestring : "";
}
/* A META value of the report (META keys may hold dots, so not through at()). */
static const char *meta_str(const cJSON *j, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(at(j, "meta"), key));
    return s ? s : "";
}

/* The hygiene lines, "  hygiene    " before the first. */
static void print_hygiene(FILE *f, const cJSON *j) {
    char *buf = strdup(str(j, "hygiene_text"));
    const char *lead = "  hygiene    ";
    char *save = NULL;
    for (char *line = buf ? strtok_r(buf, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        fprintf(f, "%s%s\n", lead, line);
        lead = "             ";
    }
    free(buf);
}

static void print_warnings(const cJSON *j, const char *audio) {
    const cJSON *w;
    cJSON_ArrayForEach(w, at(j, "warnings")) fprintf(stderr, TOOL ": %s: warning: %s\n", audio,
                                                     w->valuestring);
}

/* --icl-window auto without a transcript: the span, and what to give next. */
static void print_span_request(const cJSON *j, const options *o) {
    double a = num(j, "hygiene.icl_window.start_s"), b = num(j, "hygiene.icl_window.end_s");
    printf("ICL window: %.2f-%.2f s of %s (%.2f s, %.2f s voiced: the cleanest 10-15 s).\n"
           "For ICL, give the transcript of exactly these seconds:\n"
           "  " TOOL " -m %s %s --icl-window %.2f-%.2f -t \"<what is said in %.2f-%.2f s>\" -o "
           "VOICE.qvoice\n",
           a, b, o->audio, b - a, num(j, "hygiene.icl_window.voiced_s"), o->model_dir, o->audio, a, b, a, b);
}

static void print_summary(const cJSON *j, const options *o) {
    int ch = (int)num(j, "source_channels");
    printf(TOOL ": %s -> %s\n", o->audio, o->out ? o->out : "(nothing written)");
    printf("  audio      %s, %g Hz, %d channel%s, %.2f s%s\n", str(j, "format"),
           num(j, "source_sample_rate_hz"), ch, ch == 1 ? "" : "s", num(j, "source_seconds"),
           ch > 1 ? " (channels averaged)" : "");
    printf("  used       %.2f s%s%s, RMS %.1f dBFS, %.1f LUFS\n", num(j, "seconds_used"),
           num(j, "truncated") ? " (first part only, --max-seconds)" : "",
           num(j, "resampled") ? ", resampled to 24 kHz (libsamplerate best sinc)"
                               : ", 24 kHz as is",
           num(j, "rms_dbfs"), num(j, "loudness_lufs"));
    if (cJSON_IsString(at(j, "hygiene"))) printf("  hygiene    off (--no-hygiene: the clip as given)\n");
    else print_hygiene(stdout, j);
    printf("  x-vector   %g dims, norm %.3f (%.2f s, %g mel frames)\n", num(j, "xvector_dim"),
           num(j, "xvector_norm"), num(j, "xvector_seconds"), num(j, "mel_frames"));
    if (num(j, "icl_frames"))
        printf("  ICL        %g frames (12.5 Hz, %.2f s) + transcript (%zu bytes)\n",
               num(j, "icl_frames"), num(j, "icl_seconds"), strlen(str(j, "transcript")));
    else
        printf("  ICL        none (x-vector only%s)\n",
               num(j, "hygiene.transcript.fallback_xvector_only")
                   ? ": transcript implausible, --allow-xvector-fallback"
                   : "");
    if (o->r.consent || o->r.consent_recording)
        printf("  consent    %s by %s for %s, collected by %s%s%s%s\n", meta_str(j, "consent.method"),
               o->r.consent_speaker ? o->r.consent_speaker : "(speaker not recorded)",
               o->r.consent_scope ? o->r.consent_scope : "(scope not recorded)",
               meta_str(j, "consent.collected_by"), o->r.consent ? ": \"" : "",
               o->r.consent ? o->r.consent : "", o->r.consent ? "\"" : "");
    if (o->out) {
        printf("  sections  ");
        const cJSON *s, *secs = at(j, "sections");
        int first = 1;
        cJSON_ArrayForEach(s, secs) {
            double count = num(s, "count"), bytes = num(s, "payload_bytes");
            printf("%s %s", first ? "" : ",", s->string);
            if (count > 1) printf(" %g × (%.0f B total)", count, bytes);
            else printf(" %.0f B", bytes);
            first = 0;
        }
        if (first) printf(" (not listed: file over 256 MB)");
        printf("\n  file       %.0f bytes%s\n", num(j, "file_bytes"),
               num(j, "wdelta_tensors") ? " (with the WDELTA weight stream)" : "");
    }
    if (o->r.plot_path)
        printf("  plot       %s (log-mel, the kept span and ICL window marked)\n", o->r.plot_path);
    printf("  timings    load %.2f s, audio %.2f s, hygiene %.2f s, mel+ECAPA %.2f s, speech "
           "encoder %.2f s, write %.2f s\n",
           num(j, "timings_s.load"), num(j, "timings_s.audio"), num(j, "timings_s.hygiene"),
           num(j, "timings_s.mel_ecapa"), num(j, "timings_s.speech_encoder"),
           num(j, "timings_s.write"));
}

/* ---- the two modes ------------------------------------------------------------------------- */

static int run_compare(const options *o, const char *a, const char *b) {
    qv_cloner *c = NULL;
    if (o->model_dir && qv_cloner_load(&c, o->model_dir, o->threads)) {
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
        return 1;
    }
    char *report = NULL;
    double cs;
    enum qv_status st = qv_clone_similarity(c, a, b, o->r.max_seconds, &cs, &report);
    qv_cloner_free(c);
    if (st) {
        fprintf(stderr, TOOL ": %s\n", qv_last_error());
        return 1;
    }
    cJSON *j = cJSON_Parse(report);
    if (o->json) puts(report);
    else
        printf("cosine similarity %.6f (x-vector norms %.3f, %.3f; dim %g)\n", cs,
               num(j, "norm_a"), num(j, "norm_b"), num(j, "dim"));
    cJSON_Delete(j);
    qv_free(report);
    return 0;
}

static int run_clone(const options *o) {
    qv_cloner *c = NULL;
    enum qv_status st = qv_cloner_load(&c, o->model_dir, o->threads);
    char *report = NULL;
    if (!st) st = qv_clone_run(c, &o->r, o->out, &report);
    qv_cloner_free(c);
    cJSON *j = report ? cJSON_Parse(report) : NULL;
    if (j) print_warnings(j, o->audio);
    if (o->json) {
        if (report) puts(report);
        else printf("{\"ok\": false, \"error\": \"%s\"}\n", qv_strerror(st));
    } else if (st == QV_OK) {
        if (o->out) print_summary(j, o);
        if (o->r.icl_window == QV_ICL_AUTO && !o->r.ref_text) print_span_request(j, o);
    } else if (j) {
        print_hygiene(stderr, j);
    }
    if (st) fprintf(stderr, TOOL ": %s\n", qv_last_error());
    cJSON_Delete(j);
    qv_free(report);
    return st ? 1 : 0;
}

/* ---- arguments ------------------------------------------------------------------------------ */

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !(d >= lo && d <= hi)) return -1;
    *out = d;
    return 0;
}

enum { OPT_JSON = 1000 };

/* Parses the options into o (*hygiene_flags: one that needs hygiene was given). -1 to go on,
 * else the exit status: 0 after --help or --version, 2 on a usage error. */
static int parse_options(int argc, char **argv, options *o, int *hygiene_flags) {
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'},         {"output", required_argument, 0, 'o'},
        {"ref-text", required_argument, 0, 't'},      {"ref-text-file", required_argument, 0, 'T'},
        {"name", required_argument, 0, 'n'},          {"language", required_argument, 0, 'l'},
        {"xvector-only", no_argument, 0, 'x'},        {"target-cv", required_argument, 0, 'c'},
        {"max-seconds", required_argument, 0, 's'},   {"json", no_argument, 0, OPT_JSON},
        {"threads", required_argument, 0, 'j'},       {"compare", no_argument, 0, 'C'},
        {"no-hygiene", no_argument, 0, 'H'},          {"icl-window", required_argument, 0, 'w'},
        {"allow-xvector-fallback", no_argument, 0, 'F'},
        {"speaker-threshold", required_argument, 0, 'S'},
        {"consent", required_argument, 0, 'A'},       {"plot", required_argument, 0, 'P'},
        {"consent-speaker", required_argument, 0, 'K'},
        {"consent-scope", required_argument, 0, 'G'},
        {"consent-recording", required_argument, 0, 'R'},
        {"no-wovr", no_argument, 0, 'W'},
        {"help", no_argument, 0, 'h'},                {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0}};
    opterr = 0; /* unknown options are reported below, in one line */
    int ch;
    while ((ch = getopt_long(argc, argv, ":m:o:t:T:n:l:xc:s:j:p:CHw:FS:A:K:G:R:P:WhV", longs, NULL)) !=
           -1) {
        switch (ch) {
        case 'm': o->model_dir = optarg; break;
        case 'o': o->out = optarg; break;
        case 't': o->r.ref_text = optarg; break;
        case 'T': o->ref_text_file = optarg; break;
        case 'n': o->r.name = optarg; break;
        case 'l': o->r.language = optarg; break;
        case 'x': o->xvector_only = 1; break;
        case 'c': o->r.target_cv_dir = optarg; break;
        case 's':
            if (parse_double(optarg, 3, 3600, &o->r.max_seconds))
                return usage_error("--max-seconds: expected a number of seconds in [3, 3600], found '%s'", optarg);
            break;
        case OPT_JSON: o->json = 1; break;
        case 'j':
        case 'p': {
            double n;
            if (parse_double(optarg, 1, 256, &n) || n != (int)n)
                return usage_error("--threads: expected 1..256, found '%s'", optarg);
            o->threads = (int)n;
            break;
        }
        case 'C': o->compare = 1; break;
        case 'H': o->r.hygiene = 0; break;
        case 'w':
            if (qv_icl_window_parse(optarg, &o->r))
                return usage_error("--icl-window: expected full, auto or START-END seconds, found '%s'", optarg);
            break;
        case 'F': o->r.allow_xvector_fallback = 1, *hygiene_flags = 1; break;
        case 'S':
            if (parse_double(optarg, -1, 1, &o->r.speaker_threshold))
                return usage_error("--speaker-threshold: expected a cosine in [-1, 1], found '%s'", optarg);
            *hygiene_flags = 1;
            break;
        case 'A': o->r.consent = optarg; break;
        case 'K': o->r.consent_speaker = optarg; break;
        case 'G': o->r.consent_scope = optarg; break;
        case 'R': o->r.consent_recording = optarg; break;
        case 'P': o->r.plot_path = optarg; break;
        case 'W': o->r.with_wovr = 0; break;
        case 'h': usage(stdout, &o->r); return 0;
        case 'V': printf(TOOL " (qvoice) %s\n", qv_version()); return 0;
        case ':': return usage_error("option '%s' needs an argument", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    return -1;
}

int main(int argc, char **argv) {
    options o = {.r = qv_clone_default_request()};
    int hygiene_flags = 0;
    int st = parse_options(argc, argv, &o, &hygiene_flags);
    if (st >= 0) return st;
    o.threads = qv_threads_resolve(o.threads);
    if (o.compare) {
        if (argc - optind != 2) return usage_error("%s", "--compare needs exactly two files");
        return run_compare(&o, argv[optind], argv[optind + 1]);
    }
    if (argc - optind != 1) return usage_error("%s", "expected exactly one reference audio file");
    o.audio = o.r.audio_path = argv[optind];
    if (!o.model_dir) return usage_error("%s", "-m BASE_MODEL_DIR is required");
    if (o.r.ref_text && o.ref_text_file)
        return usage_error("%s", "--ref-text and --ref-text-file exclude each other");
    if (o.r.ref_text && !*o.r.ref_text) return usage_error("%s", "--ref-text: empty transcript");
    if (!o.out && !(o.r.icl_window == QV_ICL_AUTO && !o.r.ref_text && !o.ref_text_file))
        return usage_error("%s", "-o VOICE.qvoice is required");
    if (o.r.consent && !*o.r.consent) return usage_error("%s", "--consent: empty statement");
    if ((o.r.consent_speaker || o.r.consent_scope) && !o.r.consent && !o.r.consent_recording)
        return usage_error("%s", "--consent-speaker and --consent-scope need --consent or "
                                 "--consent-recording");
    if (!o.r.hygiene && (hygiene_flags || o.r.icl_window != QV_ICL_FULL))
        return usage_error("%s", "--allow-xvector-fallback, --speaker-threshold and --icl-window "
                                 "need hygiene (no --no-hygiene)");
    char *text = NULL;
    if (o.ref_text_file && !(text = read_text_file(o.ref_text_file))) return 1;
    if (text) o.r.ref_text = text;
    if (o.xvector_only) o.r.ref_text = NULL;
    int rc = run_clone(&o);
    qv_free(text);
    return rc;
}
