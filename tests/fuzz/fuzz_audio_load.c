/* fuzz_audio_load.c — the audio reader behind POST /v1/audio/voices on corrupt files. The server
 * stores the upload in a file and qv_clone_run reads it with qva_audio_load(path,
 * QVA_DEFAULT_MAX_SECONDS) (libsndfile, then libsamplerate); this harness calls exactly that on
 * the input, put in a memfd and opened by its /proc/self/fd path.
 *
 * One file, two builds:
 * - libFuzzer (scripts/fuzz.sh, make fuzz): LLVMFuzzerTestOneInput only.
 * - standalone (-DQV_FUZZ_MAIN; built with gcc's ASan + UBSan by the Makefile as
 *   build/fuzz-asan/fuzz_audio_load, run by tests/unit/test_audio_fuzz.c in make test):
 *     fuzz_audio_load --seeds DIR              write the seed files (below) into DIR
 *     fuzz_audio_load FILE...                  read each file once (a finding, replayed)
 *     fuzz_audio_load [--runs N] [--seconds S] [--seed X] [--clip CLIP]
 *   encodes 3.2 s of CLIP (default the bundled tests/audio clip) as WAV (16-bit, float, 8-bit
 *   stereo), FLAC, Ogg Vorbis, Ogg Opus and MP3 with libsndfile, then reads N mutated copies
 *   (bit flips, header words set to edge values, truncation, spliced and repeated bytes, cycling
 *   through the formats) until N runs or S seconds, whichever comes first. A sanitizer report
 *   aborts the run (non-zero exit); the last line counts the runs, and how many read as audio.
 * No binary is committed: the seeds are made from the clip each time.
 */
#include <sndfile.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "features/features.h"

/* a corrupt header must not make the reader allocate more than a real upload needs */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "max_allocation_size_mb=1024:detect_leaks=1";
}

static int g_fd = -1;

/* 0 when the input read as audio, 1 when it was refused (a clean error). */
static int read_one(const uint8_t *data, size_t size) {
    if (g_fd < 0 && (g_fd = memfd_create("upload", 0)) < 0) abort();
    if (ftruncate(g_fd, 0) || pwrite(g_fd, data, size, 0) != (ssize_t)size) abort();
    char path[64], err[512];
    snprintf(path, sizeof path, "/proc/self/fd/%d", g_fd);
    qva_audio a;
    if (qva_audio_load(&a, path, QVA_DEFAULT_MAX_SECONDS, err, sizeof err)) {
        if (!err[0]) abort(); /* a refusal always says why */
        return 1;
    }
    qva_audio_free(&a);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    read_one(data, size);
    return 0;
}

#ifdef QV_FUZZ_MAIN
#include <fcntl.h>
#include <time.h>

#define CLIP "tests/audio/en_ohenry_chenevert.wav"
#define SEED_SECONDS 3.2 /* just over QVA_MIN_SECONDS: an intact seed reads as audio */

typedef struct {
    uint8_t *p;
    size_t n;
} buf;

static const struct {
    const char *name;
    int format, channels, rate;
} kinds[] = {
    {"s16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 1, 24000},
    {"f32.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 1, 16000},
    {"u8-stereo.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 2, 22050},
    {"s16.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 1, 24000},
    {"vorbis.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 1, 24000},
    {"opus.ogg", SF_FORMAT_OGG | SF_FORMAT_OPUS, 1, 24000},
    {"l3.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 1, 24000},
};
#define N_KINDS (int)(sizeof kinds / sizeof *kinds)

/* libsndfile writes into a growing memory buffer (its virtual I/O). */
typedef struct {
    buf b;
    sf_count_t pos;
} vio;
static sf_count_t v_len(void *u) {
    return (sf_count_t)((vio *)u)->b.n;
}
static sf_count_t v_seek(sf_count_t off, int whence, void *u) {
    vio *v = u;
    v->pos = whence == SEEK_SET   ? off
             : whence == SEEK_CUR ? v->pos + off
                                  : (sf_count_t)v->b.n + off;
    return v->pos;
}
static sf_count_t v_read(void *p, sf_count_t n, void *u) {
    vio *v = u;
    if (v->pos >= (sf_count_t)v->b.n) return 0;
    if (n > (sf_count_t)v->b.n - v->pos) n = (sf_count_t)v->b.n - v->pos;
    memcpy(p, v->b.p + v->pos, (size_t)n);
    v->pos += n;
    return n;
}
static sf_count_t v_write(const void *p, sf_count_t n, void *u) {
    vio *v = u;
    size_t end = (size_t)(v->pos + n);
    if (end > v->b.n) {
        if (!(v->b.p = realloc(v->b.p, end))) abort();
        memset(v->b.p + v->b.n, 0, end - v->b.n);
        v->b.n = end;
    }
    memcpy(v->b.p + v->pos, p, (size_t)n);
    v->pos += n;
    return n;
}
static sf_count_t v_tell(void *u) {
    return ((vio *)u)->pos;
}

/* kinds[k] encoding of the first SEED_SECONDS of x (mono at rate_in, resampled by picking). */
static int encode(int k, const float *x, sf_count_t n_in, int rate_in, buf *out) {
    SF_VIRTUAL_IO io = {v_len, v_seek, v_read, v_write, v_tell};
    vio v = {{NULL, 0}, 0};
    SF_INFO info = {
        .samplerate = kinds[k].rate, .channels = kinds[k].channels, .format = kinds[k].format};
    SNDFILE *sf = sf_open_virtual(&io, SFM_WRITE, &info, &v);
    if (!sf) return -1; /* this libsndfile cannot write it */
    int n = (int)(SEED_SECONDS * kinds[k].rate), ch = kinds[k].channels;
    float *y = malloc(sizeof(float) * (size_t)n * (size_t)ch);
    if (!y) abort();
    for (int i = 0; i < n; i++) {
        sf_count_t j = (sf_count_t)((double)i * rate_in / kinds[k].rate);
        for (int c = 0; c < ch; c++)
            y[i * ch + c] = j < n_in ? x[j] * (c ? 0.5f : 1.0f) : 0.0f;
    }
    sf_writef_float(sf, y, n);
    sf_close(sf);
    free(y);
    *out = v.b;
    return 0;
}

static uint64_t g_rng;
static uint64_t rnd(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}
static size_t below(size_t n) {
    return n ? (size_t)(rnd() % n) : 0;
}

/* An offset, mostly within the first 256 bytes (the headers). */
static size_t offset(size_t n) {
    return rnd() % 4 ? below(n < 256 ? n : 256) : below(n);
}

static void mutate(buf *b, const buf *other) {
    static const uint32_t edge[] = {0,          1,          2,          0x7f,       0x80,
                                    0xff,       0x7fff,     0x8000,     0xffff,     0x10000,
                                    0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff, 44100};
    int steps = 1 + (int)below(4);
    for (int s = 0; s < steps && b->n; s++) {
        switch (below(7)) {
        case 0: /* bit flips */
            for (int i = 1 + (int)below(8); i > 0; i--)
                b->p[offset(b->n)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* a byte set to an edge value */
            b->p[offset(b->n)] = (uint8_t)edge[below(6)];
            break;
        case 2: /* a 16/32-bit word (LE or BE) set to an edge value or nudged */
        {
            size_t at = offset(b->n), w = rnd() & 1 ? 4 : 2;
            if (at + w > b->n) break;
            uint32_t v = edge[below(sizeof edge / sizeof *edge)];
            if (rnd() % 3 == 0) { /* the current value +- a little */
                v = 0;
                for (size_t i = 0; i < w; i++)
                    v |= (uint32_t)b->p[at + i] << (8 * i);
                v += (uint32_t)below(17) - 8u;
            }
            int be = rnd() & 1;
            for (size_t i = 0; i < w; i++)
                b->p[at + (be ? w - 1 - i : i)] = (uint8_t)(v >> (8 * i));
            break;
        }
        case 3: /* truncated */
            b->n = below(b->n);
            break;
        case 4: /* a span overwritten with bytes from elsewhere in the file */
        {
            size_t len = 1 + below(64), from = below(b->n), to = offset(b->n);
            if (from + len > b->n || to + len > b->n) break;
            memmove(b->p + to, b->p + from, len);
            break;
        }
        case 5: /* the other format's bytes spliced in after this one's start */
        {
            size_t keep = offset(b->n), len = other->n < 4096 ? other->n : 4096;
            if (!(b->p = realloc(b->p, keep + len + 1))) abort();
            memcpy(b->p + keep, other->p + below(other->n - len + 1), len);
            b->n = keep + len;
            break;
        }
        default: /* a span of random bytes */
            for (size_t i = 0, at = below(b->n), len = 1 + below(32); i < len && at + i < b->n; i++)
                b->p[at + i] = (uint8_t)rnd();
        }
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* libmpg123 prints a note on stderr for each bad frame: stderr goes to /dev/null, the
 * sanitizers' reports to the real one. */
void __sanitizer_set_report_fd(void *fd);
static void quiet_stderr(void) {
    int fd = dup(2), null = open("/dev/null", O_WRONLY);
    if (fd < 0 || null < 0) return;
    __sanitizer_set_report_fd((void *)(intptr_t)fd);
    dup2(null, 2);
    close(null);
}

static int replay(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') { /* an option and its value (main checked them) */
            i++;
            continue;
        }
        FILE *f = fopen(argv[i], "rb");
        buf b = {NULL, 0};
        if (!f) {
            printf("%s: cannot open\n", argv[i]);
            return 2;
        }
        uint8_t chunk[65536];
        for (size_t k; (k = fread(chunk, 1, sizeof chunk, f)) > 0; b.n += k) {
            if (!(b.p = realloc(b.p, b.n + k))) abort();
            memcpy(b.p + b.n, chunk, k);
        }
        fclose(f);
        printf("%s: %s\n", argv[i], read_one(b.p ? b.p : chunk, b.n) ? "refused" : "read as audio");
        free(b.p);
    }
    return 0;
}

int main(int argc, char **argv) {
    long runs = 2000;
    int n_files = 0;
    double seconds = 60;
    const char *clip = CLIP, *seeds_dir = NULL;
    g_rng = 0x9e3779b97f4a7c15ull;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            g_rng = strtoull(argv[++i], NULL, 0) | 1;
        else if (!strcmp(argv[i], "--seeds") && i + 1 < argc)
            seeds_dir = argv[++i];
        else if (!strcmp(argv[i], "--clip") && i + 1 < argc)
            clip = argv[++i];
        else if (argv[i][0] != '-')
            n_files++;
        else {
            fprintf(stderr,
                    "usage: %s [--seeds DIR] [--runs N] [--seconds S] [--seed X] "
                    "[--clip CLIP] [FILE...]\n",
                    argv[0]);
            return 2;
        }
    }
    quiet_stderr();
    if (n_files) return replay(argc, argv);
    SF_INFO in = {0};
    SNDFILE *sf = sf_open(clip, SFM_READ, &in);
    if (!sf || in.channels != 1) {
        fprintf(stderr, "%s: cannot read as mono audio (%s)\n", clip, sf_strerror(sf));
        return 2;
    }
    float *x = malloc(sizeof(float) * (size_t)in.frames);
    if (!x) return 2;
    sf_count_t n_in = sf_readf_float(sf, x, in.frames);
    sf_close(sf);
    buf seed[N_KINDS];
    int n_seeds = 0;
    for (int k = 0; k < N_KINDS; k++) {
        if (encode(k, x, n_in, in.samplerate, &seed[n_seeds])) {
            fprintf(stderr, "fuzz_audio_load: note: this libsndfile cannot write %s\n",
                    kinds[k].name);
            continue;
        }
        if (seeds_dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", seeds_dir, kinds[k].name);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(seed[n_seeds].p, 1, seed[n_seeds].n, f) != seed[n_seeds].n ||
                fclose(f)) {
                fprintf(stderr, "%s: cannot write\n", path);
                return 2;
            }
        }
        /* the unmutated seed must read (else the harness tests nothing) */
        if (read_one(seed[n_seeds].p, seed[n_seeds].n)) {
            fprintf(stderr, "fuzz_audio_load: the %s seed does not read back\n", kinds[k].name);
            return 1;
        }
        n_seeds++;
    }
    free(x);
    double t0 = now_s();
    long done = 0, accepted = 0;
    for (; !seeds_dir && done < runs && now_s() - t0 < seconds; done++) {
        const buf *s = &seed[done % n_seeds], *o = &seed[below((size_t)n_seeds)];
        buf m = {malloc(s->n), s->n};
        if (!m.p) abort();
        memcpy(m.p, s->p, s->n);
        mutate(&m, o);
        accepted += read_one(m.p, m.n) == 0;
        free(m.p);
    }
    for (int k = 0; k < n_seeds; k++)
        free(seed[k].p);
    if (seeds_dir) return 0;
    printf("fuzz_audio_load: %ld mutated files (%d formats) in %.1f s, %ld read as audio, "
           "the rest refused cleanly; no sanitizer report\n",
           done, n_seeds, now_s() - t0, accepted);
    return 0;
}
#endif
