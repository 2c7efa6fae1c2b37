/* qvoice-compress — writes a compressed copy of a Qwen3-TTS model directory (CLI only; the work
 * is in compress/, docs/compression.md). Parses options, calls qvz_compress, prints the report.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/qvz.h"

#define TOOL "qvoice-compress"

static void usage(FILE *f) {
    fprintf(f,
            "Usage: " TOOL " MODEL_DIR -o OUT_DIR [options]\n"
            "Writes a compressed copy of a Qwen3-TTS-12Hz model directory that speak, clone and\n"
            "the library load like the original (docs/compression.md). OUT_DIR must not exist;\n"
            "it is written as OUT_DIR.tmp-PID and renamed when complete.\n"
            "\n"
            "  -o, --output OUT_DIR     the compressed model directory\n"
            "      --vocab LIST|FILE    keep only the text-embedding rows the words of a\n"
            "                           vocabulary can produce, behind a token map. LIST:\n"
            "                           english        Debian wamerican\n"
            "                           english-small  Debian wamerican-small: 37 MB less for\n"
            "                                          the 0.6B, a little less coverage\n"
            "                           (word files %s\n"
            "                           and %s);\n"
            "                           FILE: any text, split at whitespace. Lossless for text\n"
            "                           those words cover; other tokens are spelled with the\n"
            "                           smaller pieces they merge from (a warning names them)\n"
            "      --strip-encoder      drop the speech tokenizer's encoder and the decoder's\n"
            "                           encode-only quantizer input projections (a Base model then\n"
            "                           clones from x-vectors only, no ICL reference codes)\n"
            "      --decoder-f16        store the speech decoder in float16\n"
            "      --q4                 every talker and code-predictor linear (the text\n"
            "                           projection too) to 4-bit affine, group 64 (MLX's layout);\n"
            "                           embeddings stay bf16\n"
            "      --prune-layers N     remove the top N talker layers\n"
            "      --prune-neurons T    drop talker MLP neurons whose max |activation| stays below\n"
            "                           T while the model speaks a few built-in texts (greedy,\n"
            "                           --calib-frames each, default %d); widths rounded up to 64\n"
            "      --calib-frames N     frames per calibration text\n"
            "      --protect-layers N   the first N talker layers keep every neuron (default 10)\n"
            "  -j, --threads N          quantization threads (default 0: all online CPUs)\n"
            "      --report             print what each step did\n"
            "  -h, --help               this help\n"
            "\n"
            "Exit status: 0 on success, 1 on error, 2 on a usage error.\n",
            QVZ_ENGLISH_WORDS, QVZ_ENGLISH_SMALL_WORDS, QVZ_CALIB_FRAMES);
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, TOOL ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry '" TOOL " --help'.\n");
    return 2;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static double mb(uint64_t n) {
    return (double)n / 1e6;
}

static void print_report(const qvz_report *r, const qvz_options *o) {
    printf("model.safetensors: %.1f MB -> %.1f MB\n", mb(r->model_bytes_in), mb(r->model_bytes_out));
    if (o->vocab)
        printf("  vocabulary: %d of %d token ids kept (+ zero row), text embedding %.1f MB -> "
               "%.1f MB with the map\n",
               r->n_text_rows - 1, r->n_text_ids, mb(r->embedding_bytes_in),
               mb(r->embedding_bytes_out));
    if (o->q4)
        printf("  q4: %d matrices, %.1f MB -> %.1f MB\n", r->n_q4, mb(r->q4_bytes_in),
               mb(r->q4_bytes_out));
    if (o->prune_layers)
        printf("  talker layers: %d -> %d\n", r->layers_in, r->layers_out);
    if (o->prune_neurons > 0)
        printf("  MLP neurons: %ld -> %ld (%d layers narrowed)\n", r->neurons_in, r->neurons_out,
               r->n_neuron_layers);
    printf("speech_tokenizer/model.safetensors: %.1f MB -> %.1f MB\n", mb(r->codec_bytes_in),
           mb(r->codec_bytes_out));
    if (o->strip_encoder)
        printf("  encoder: %d tensors dropped, %.1f MB\n", r->n_encoder_tensors,
               mb(r->encoder_bytes));
    printf("  decoder: %.1f MB -> %.1f MB (max |w| %.4g)\n", mb(r->decoder_bytes_in),
           mb(r->decoder_bytes_out), (double)r->decoder_max_abs);
    printf("total: %.1f MB -> %.1f MB\n", mb(r->model_bytes_in + r->codec_bytes_in),
           mb(r->model_bytes_out + r->codec_bytes_out));
}

int main(int argc, char **argv) {
    enum { OPT_VOCAB = 256, OPT_STRIP, OPT_F16, OPT_Q4, OPT_PRUNE, OPT_NEURONS, OPT_CALIB,
           OPT_PROTECT, OPT_REPORT };
    static const struct option longs[] = {{"output", required_argument, 0, 'o'},
                                           {"vocab", required_argument, 0, OPT_VOCAB},
                                           {"strip-encoder", no_argument, 0, OPT_STRIP},
                                           {"decoder-f16", no_argument, 0, OPT_F16},
                                           {"q4", no_argument, 0, OPT_Q4},
                                           {"prune-layers", required_argument, 0, OPT_PRUNE},
                                           {"prune-neurons", required_argument, 0, OPT_NEURONS},
                                           {"calib-frames", required_argument, 0, OPT_CALIB},
                                           {"protect-layers", required_argument, 0, OPT_PROTECT},
                                           {"threads", required_argument, 0, 'j'},
                                           {"report", no_argument, 0, OPT_REPORT},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
    qvz_options o = qvz_default_options();
    const char *out = NULL;
    int report = 0, c;
    while ((c = getopt_long(argc, argv, "o:j:h", longs, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case OPT_VOCAB: o.vocab = optarg; break;
        case OPT_STRIP: o.strip_encoder = 1; break;
        case OPT_F16: o.decoder_f16 = 1; break;
        case OPT_Q4: o.q4 = 1; break;
        case OPT_PRUNE:
            if (parse_int(optarg, 0, 1000, &o.prune_layers))
                return usage_error("--prune-layers: expected a count, found '%s'", optarg);
            break;
        case OPT_NEURONS: {
            char *end;
            errno = 0;
            o.prune_neurons = strtof(optarg, &end);
            if (errno || end == optarg || *end || !(o.prune_neurons > 0))
                return usage_error("--prune-neurons: expected a threshold > 0, found '%s'", optarg);
            break;
        }
        case OPT_CALIB:
            if (parse_int(optarg, 1, 100000, &o.calib_frames))
                return usage_error("--calib-frames: expected a frame count, found '%s'", optarg);
            break;
        case OPT_PROTECT:
            if (parse_int(optarg, 0, 1000, &o.protect_layers))
                return usage_error("--protect-layers: expected a layer count, found '%s'", optarg);
            break;
        case 'j':
            if (parse_int(optarg, 0, 256, &o.n_threads))
                return usage_error("--threads: expected 1..256, found '%s'", optarg);
            break;
        case OPT_REPORT: report = 1; break;
        case 'h': usage(stdout); return 0;
        default: return usage_error("%s", "unknown option");
        }
    }
    if (optind + 1 != argc) return usage_error("%s", "expected one MODEL_DIR");
    if (!out) return usage_error("%s", "missing -o OUT_DIR");
    qvz_report r;
    char err[1024];
    if (qvz_compress(argv[optind], out, &o, &r, err, sizeof err)) {
        fprintf(stderr, TOOL ": %s\n", err);
        return 1;
    }
    if (report) print_report(&r, &o);
    return 0;
}
