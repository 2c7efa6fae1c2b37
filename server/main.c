/* qvoice-server — the OpenAI-compatible speech server and voice library over HTTP (CLI only:
 * arguments, signals, the log sink; the server is server/qvserver.h).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __GLIBC__ /* defined by the headers above */
#include <malloc.h>
#endif

#include "include/qvoice.h"
#include "server/qvserver.h"
#include "util/slowdown.h"

#define TOOL "qvoice-server"
#define EXIT_USAGE 2
#define MAX_MODELS 8
#define MAX_TRUSTED 64
/* in-flight requests finish within this after SIGTERM (longer in a sanitizer build, which runs
 * them several times slower: the drain test checks they end in full) */
#define DRAIN_SECONDS (60 * QVU_SLOWDOWN)

static void usage(const qv_server_config *d) {
    printf("NAME\n"
           "    qvoice-server - OpenAI-compatible text-to-speech server with a voice library\n"
           "\n"
           "SYNOPSIS\n"
           "    qvoice-server -m MODEL_DIR [-m MODEL_DIR...] --voices DIR [--clone-model BASE_DIR]\n"
           "                  [--listen HOST:PORT] [--api-key-file F] [--threads N]\n"
           "                  [--max-concurrency N] [--max-queue N] [--batch N] [--quant bf16|int8|q4]\n"
           "                  [--max-seconds S] [--max-text-chars N] [--max-upload-mb N]\n"
           "                  [--timeout S] [--receive-timeout S] [--max-connections N]\n"
           "                  [--max-connections-per-ip N] [--probe-listen HOST:PORT]\n"
           "                  [--max-voices N] [--max-library-mb N] [--no-studio]\n"
           "                  [--no-watermark] [--sign-key KEY.pem [--signer NAME]] [--trusted PUB.pem]\n"
           "                  [--ref-audio-dir DIR] [--ref-cache-mb N]\n"
           "    qvoice-server --help | --version\n"
           "\n"
           "DESCRIPTION\n"
           "    Serves POST /v1/audio/speech (OpenAI's fields; stream_format audio or sse),\n"
           "    WS /v1/audio/speech/stream (text in pieces, spoken sentence by sentence), the\n"
           "    voice library GET/POST /v1/audio/voices and GET/DELETE /v1/audio/voices/{id}\n"
           "    (with GET .../{id}/reference, /fit and /similarity?to=ID),\n"
           "    GET /health, /ready, /metrics, and the studio, a page to speak, clone and manage\n"
           "    voices in a browser, at GET / (docs/server.md, docs/studio.md). Models are loaded\n"
           "    once and shared by all syntheses. One line per request goes to stderr. SIGTERM or\n"
           "    SIGINT stops accepting connections, lets requests in flight finish (up to %d s),\n"
           "    exits 0.\n"
           "\n"
           "OPTIONS\n"
           "    -m, --model DIR         a model to serve (repeatable; the first is the default;\n"
           "                            requests name it by the directory's base name)\n"
           "    -v, --voices DIR        voice library directory, created if missing (required)\n"
           "    -c, --clone-model DIR   Base model for cloning uploaded reference audio\n"
           "    -l, --listen HOST:PORT  address (default %s; port 0: any free port)\n"
           "    -k, --api-key-file F    accept only Authorization: Bearer KEY with a key from F\n"
           "                            on /v1/ routes; a line is NAME:admin:KEY, NAME:user:KEY\n"
           "                            (a user key's voices are its own; it deletes only them)\n"
           "                            or a plain KEY (an admin key)\n"
           "    -j, --threads N         compute threads per synthesis (default %d: all online CPUs)\n"
           "    -C, --max-concurrency N syntheses at once (default %d)\n"
           "    -q, --max-queue N       requests waiting beyond that before 429 (default %d)\n"
           "    -B, --batch N           concurrent syntheses of a model that advance together,\n"
           "                            frame by frame, reading each weight once per step for\n"
           "                            all of them (same audio as alone); 0 or 1 turns it off\n"
           "                            (default %d, at most %d)\n"
           "    -Q, --quant bf16|int8|q4\n"
           "                            weights of the matvecs (default bf16; a directory of\n"
           "                            qvoice-compress --q4 runs q4 whatever it says)\n"
           "    -s, --max-seconds S     cap on audio per request, 0 = none (default %g)\n"
           "    -n, --max-text-chars N  longest input in characters (default %d)\n"
           "    -u, --max-upload-mb N   largest voice upload (default %d)\n"
           "    -N, --max-voices N      voices in the library; more uploads get 507 (default %d)\n"
           "    -L, --max-library-mb N  bytes of the library's voice files; the same (default %d)\n"
           "    -T, --timeout S         idle connection timeout and wall time per request\n"
           "                            (default %d)\n"
           "    -R, --receive-timeout S total time to send one request's headers and body; a\n"
           "                            slower client is disconnected (default %d)\n"
           "    -M, --max-connections N open connections at once (default %d)\n"
           "    -P, --max-connections-per-ip N\n"
           "                            of them from one address (default %d; behind a proxy\n"
           "                            set it to --max-connections)\n"
           "    -p, --probe-listen HOST:PORT\n"
           "                            a second address serving only /health, /ready and\n"
           "                            /metrics with 16 connections of its own, answerable\n"
           "                            while the main ones are all taken\n"
           "    -r, --ref-audio-dir DIR speech requests may give ref_audio as a file:// URL of a\n"
           "                            file inside DIR (default: file:// refused)\n"
           "    -U, --ref-audio-urls P1[,P2...]\n"
           "                            ref_audio may be an http(s) URL starting with one of\n"
           "                            these prefixes, each ending in '/' after its host;\n"
           "                            fetched whole within 10 s, up to --max-upload-mb, no\n"
           "                            redirects (default: http(s) refused)\n"
           "    -e, --ref-cache-mb N    MB of per-request reference voices kept, least\n"
           "                            recently used evicted (default %d)\n"
           "    -S, --no-studio         do not serve the studio page (GET / answers 404)\n"
           "    -W, --no-watermark      audio without the inaudible mark that tells it is synthetic\n"
           "                            (docs/provenance.md; default: marked)\n"
           "    -K, --sign-key KEY.pem  sign the voices the server makes (cloned from audio, or an\n"
           "                            upload whose name, consent or description it rewrote)\n"
           "                            with this Ed25519 private key (voicefmt keygen)\n"
           "    -G, --signer NAME       the signer name in those signatures\n"
           "    -t, --trusted PUB.pem   take .qvoice uploads only when signed by this public key\n"
           "                            (repeatable: any of them; default: signed or not)\n"
           "    -h, --help              this text\n"
           "    -V, --version           version\n"
           "\n"
           "EXIT STATUS\n"
           "    0 after a clean shutdown, 1 when a model or the address cannot be used, 2 usage\n"
           "    error.\n"
           "\n"
           "EXAMPLE\n"
           "    qvoice-server -m cache/tiny-cv --voices voices --listen 127.0.0.1:8080 &\n"
           "    curl -s localhost:8080/v1/audio/speech -H 'Content-Type: application/json' \\\n"
           "         -d '{\"input\":\"Hello.\",\"voice\":\"ryan\"}' -o hello.wav\n",
           DRAIN_SECONDS, d->listen, d->n_threads, d->max_concurrency, d->max_queue,
           d->batch_streams, QV_BATCH_MAX_STREAMS,
           d->max_seconds, d->max_text_chars, d->max_upload_mb, d->max_voices, d->max_library_mb,
           d->timeout_s, d->receive_s,
           d->max_connections, d->max_connections_per_ip, d->ref_cache_mb);
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, TOOL ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see " TOOL " --help)\n");
    return EXIT_USAGE;
}

/* Each prefix names its host whole: http(s)://HOST[:PORT]/ and then anything. */
static int url_prefixes_ok(const char *list) {
    for (const char *p = list;;) {
        const char *host = !strncmp(p, "http://", 7) ? p + 7 : !strncmp(p, "https://", 8) ? p + 8 : 0;
        const char *end = strchr(p, ','), *slash = host ? strchr(host, '/') : NULL;
        if (!slash || slash == host || (end && slash > end) || memchr(host, '@', (size_t)(slash - host)))
            return 0;
        if (!end) return 1;
        p = end + 1;
    }
}

/* Whole number in [lo, hi], or -1 on a usage error. */
static int int_arg(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static void log_line(void *user, const char *line) {
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    fprintf(stderr, "%s %s\n", ts, line);
}

static const struct option opts[] = {
    {"model", required_argument, 0, 'm'},       {"voices", required_argument, 0, 'v'},
    {"clone-model", required_argument, 0, 'c'}, {"listen", required_argument, 0, 'l'},
    {"api-key-file", required_argument, 0, 'k'}, {"threads", required_argument, 0, 'j'},
    {"max-concurrency", required_argument, 0, 'C'}, {"max-queue", required_argument, 0, 'q'},
    {"batch", required_argument, 0, 'B'},
    {"quant", required_argument, 0, 'Q'},       {"max-seconds", required_argument, 0, 's'},
    {"max-text-chars", required_argument, 0, 'n'}, {"max-upload-mb", required_argument, 0, 'u'},
    {"timeout", required_argument, 0, 'T'},     {"receive-timeout", required_argument, 0, 'R'},
    {"max-connections", required_argument, 0, 'M'},
    {"max-connections-per-ip", required_argument, 0, 'P'},
    {"probe-listen", required_argument, 0, 'p'}, {"max-voices", required_argument, 0, 'N'},
    {"max-library-mb", required_argument, 0, 'L'}, {"no-studio", no_argument, 0, 'S'},
    {"no-watermark", no_argument, 0, 'W'},
    {"sign-key", required_argument, 0, 'K'},    {"signer", required_argument, 0, 'G'},
    {"trusted", required_argument, 0, 't'},
    {"ref-audio-dir", required_argument, 0, 'r'},
    {"ref-audio-urls", required_argument, 0, 'U'}, {"ref-cache-mb", required_argument, 0, 'e'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, 'V'},           {0, 0, 0, 0}};

/* The whole-number limits: option, range (the error names the unit, if any) and config field. */
#define LIMIT(o, flag, lo, hi, unit, field) {o, flag, lo, hi, unit, offsetof(qv_server_config, field)}
static const struct {
    int opt;
    const char *flag;
    int lo, hi;
    const char *unit;
    size_t off;
} limits[] = {
    LIMIT('e', "--ref-cache-mb", 0, 1048576, "", ref_cache_mb),
    LIMIT('j', "--threads", 0, 256, "", n_threads),
    LIMIT('C', "--max-concurrency", 1, 256, "", max_concurrency),
    LIMIT('q', "--max-queue", 0, 4096, "", max_queue),
    LIMIT('B', "--batch", 0, QV_BATCH_MAX_STREAMS, "", batch_streams),
    LIMIT('n', "--max-text-chars", 1, 1000000, "", max_text_chars),
    LIMIT('u', "--max-upload-mb", 1, 4096, "", max_upload_mb),
    LIMIT('T', "--timeout", 1, 86400, " seconds", timeout_s),
    LIMIT('R', "--receive-timeout", 1, 86400, " seconds", receive_s),
    LIMIT('M', "--max-connections", 1, 65536, "", max_connections),
    LIMIT('P', "--max-connections-per-ip", 1, 65536, "", max_connections_per_ip),
    LIMIT('N', "--max-voices", 0, 1000000, "", max_voices),
    LIMIT('L', "--max-library-mb", 0, 1 << 30, "", max_library_mb),
};

/* A numeric option (the server's limits, --quant, --max-seconds) into c: 0, EXIT_USAGE when its
 * value is out of range, -1 when o is not one of them. */
static int limit_option(int o, const char *arg, qv_server_config *c) {
    char *end, msg[256];
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        if (limits[i].opt != o) continue;
        if (!int_arg(arg, limits[i].lo, limits[i].hi, (int *)((char *)c + limits[i].off)))
            return 0;
        snprintf(msg, sizeof msg, "%s: expected %d..%d%s, found '%s'", limits[i].flag,
                 limits[i].lo, limits[i].hi, limits[i].unit, arg);
        return usage_error("%s", msg);
    }
    switch (o) {
    case 'Q':
        if ((c->quant = qv_quant_parse(arg)) < 0)
            return usage_error("--quant: expected bf16, int8 or q4, found '%s'", arg);
        return 0;
    case 's':
        c->max_seconds = strtod(arg, &end);
        if (end == arg || *end || !(c->max_seconds >= 0 && c->max_seconds <= 86400))
            return usage_error("--max-seconds: expected 0..86400, found '%s'", arg);
        return 0;
    default: return -1;
    }
}

/* The command line into c (its models in models): -1 to serve, else the exit status (help,
 * version, usage error). */
static int parse_options(int argc, char **argv, qv_server_config *c, const char **models,
                         const char **trusted) {
    int o, rc;
    opterr = 0;
    while ((o = getopt_long(argc, argv, ":m:v:c:l:k:j:C:q:B:Q:s:n:u:T:R:M:P:p:N:L:SWK:G:t:r:U:e:hV", opts,
                            NULL)) != -1) {
        if ((rc = limit_option(o, optarg, c)) >= 0) {
            if (rc) return rc;
            continue;
        }
        switch (o) {
        case 'm':
            if (c->n_models == MAX_MODELS) return usage_error("-m: at most %s models", "8");
            models[c->n_models++] = optarg;
            break;
        case 'v': c->voices_dir = optarg; break;
        case 'c': c->clone_model_dir = optarg; break;
        case 'r': c->ref_audio_dir = optarg; break;
        case 'U':
            if (!url_prefixes_ok(optarg))
                return usage_error("--ref-audio-urls: expected http(s)://HOST[:PORT]/... prefixes, "
                                   "comma-separated, found '%s'", optarg);
            c->ref_audio_urls = optarg;
            break;
        case 'l': c->listen = optarg; break;
        case 'k': c->api_key_file = optarg; break;
        case 'p': c->probe_listen = optarg; break;
        case 'S': c->no_studio = 1; break;
        case 'W': c->no_watermark = 1; break;
        case 'K': c->sign_key = optarg; break;
        case 'G': c->signer = optarg; break;
        case 't':
            if (c->n_trusted_keys == MAX_TRUSTED)
                return usage_error("--trusted: at most %s keys", "64");
            trusted[c->n_trusted_keys++] = optarg;
            break;
        case 'h': usage(c); return 0;
        case 'V': printf(TOOL " %s\n", qv_version()); return 0;
        case ':': return usage_error("%s needs an argument", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (!c->n_models) return usage_error("%s", "-m/--model DIR is required");
    if (!c->voices_dir) return usage_error("%s", "--voices DIR is required");
    if (c->signer && !c->sign_key) return usage_error("%s", "--signer needs --sign-key");
    c->model_dirs = models;
    c->trusted_keys = trusted;
    c->log = log_line;
    return -1;
}

/* Serves c until SIGTERM or SIGINT, then drains: the exit status. */
static int serve(const qv_server_config *c) {
    /* Blocked before the server's threads exist, so they inherit the mask and sigwait here
     * receives the signal. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    qv_server *s;
    char err[1024];
    if (qv_server_start(&s, c, err, sizeof err)) {
        fprintf(stderr, TOOL ": %s\n", err);
        return 1;
    }
    char line[512];
    snprintf(line, sizeof line, "listening on %.*s:%d", (int)(strrchr(c->listen, ':') - c->listen),
             c->listen, qv_server_port(s));
    log_line(NULL, line);
    if (c->probe_listen) {
        snprintf(line, sizeof line, "probes on %.*s:%d",
                 (int)(strrchr(c->probe_listen, ':') - c->probe_listen), c->probe_listen,
                 qv_server_probe_port(s));
        log_line(NULL, line);
    }
    int sig = 0;
    sigwait(&set, &sig);
    snprintf(line, sizeof line, "%s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    log_line(NULL, line);
    qv_server_drain(s, DRAIN_SECONDS);
    qv_server_free(s);
    log_line(NULL, "stopped");
    return 0;
}

int main(int argc, char **argv) {
    /* Every request allocates its buffers (KV caches, decoder state, audio) on new threads. With
     * glibc's sliding mmap threshold, once the first such buffer is freed the later ones come
     * from per-thread arenas that keep what is freed: over a 300 s soak the anonymous RSS rose
     * from 87 to 358 MB and was still rising. A fixed threshold (glibc's starting 128 KiB) maps
     * and unmaps each large buffer: 100-169 MB, flat (docs/server.md, "Soak RSS"). */
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
    qv_server_config c = qv_server_default_config();
    const char *models[MAX_MODELS], *trusted[MAX_TRUSTED];
    int rc = parse_options(argc, argv, &c, models, trusted);
    return rc >= 0 ? rc : serve(&c);
}
