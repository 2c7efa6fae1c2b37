/* audio.c — reference audio in: any format libsndfile reads → mono f32 at 24 kHz.
 * Channels are averaged, then libsamplerate (SRC_SINC_BEST_QUALITY) resamples; no trimming or
 * normalisation (the reference speaker encoder sees the signal as is). The checks a clone needs
 * (too short, silent, clipped, too long) are made here and reported as errors or flags.
 */
#include "features/features.h"

#include <math.h>
#include <ogg/ogg.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vorbis/codec.h>

static void set_err(char *err, size_t err_size, const char *name, const char *msg) {
    if (err && err_size) snprintf(err, err_size, "%s: %s", name, msg);
}

/* mono x[n] at rate → 24 kHz copy in *out. */
static int resample(float **out, int64_t *n_out, const float *x, int64_t n, int rate, char *why,
                    size_t why_size) {
    double ratio = (double)QVA_SAMPLE_RATE_HZ / rate;
    int64_t cap = (int64_t)ceil(n * ratio) + 16;
    float *y = malloc((size_t)cap * sizeof(float));
    if (!y) {
        snprintf(why, why_size, "out of memory resampling");
        return -1;
    }
    SRC_DATA d = {0};
    d.data_in = x;
    d.input_frames = (long)n;
    d.data_out = y;
    d.output_frames = (long)cap;
    d.src_ratio = ratio;
    int rc = src_simple(&d, SRC_SINC_BEST_QUALITY, 1);
    if (rc) {
        snprintf(why, why_size, "resampling from %d Hz failed (%s)", rate, src_strerror(rc));
        free(y);
        return -1;
    }
    *out = y;
    *n_out = d.output_frames_gen;
    return 0;
}

static int finish(qva_audio *a, const char *name, char *err, size_t err_size) {
    double sum2 = 0.0, peak = 0.0;
    int64_t n_bad = 0;
    for (int64_t i = 0; i < a->n_samples; i++) {
        double v = a->samples[i];
        if (!isfinite(v)) {
            n_bad++;
            continue;
        }
        sum2 += v * v;
        if (fabs(v) > peak) peak = fabs(v);
    }
    double rms = a->n_samples ? sqrt(sum2 / (double)a->n_samples) : 0.0;
    a->peak = peak;
    a->rms_dbfs = rms > 0.0 ? 20.0 * log10(rms) : -INFINITY;
    char msg[160];
    if (n_bad) {
        snprintf(msg, sizeof msg, "%lld samples are NaN or infinite (expected finite audio)",
                 (long long)n_bad);
        goto fail;
    }
    if (a->used_seconds < QVA_MIN_SECONDS) {
        snprintf(msg, sizeof msg, "too short (expected at least %.0f s of audio, found %.2f s)",
                 QVA_MIN_SECONDS, a->used_seconds);
        goto fail;
    }
    if (peak == 0.0) {
        snprintf(msg, sizeof msg, "digital silence (every sample is zero)");
        goto fail;
    }
    if (a->rms_dbfs < QVA_SILENCE_RMS_DBFS) {
        snprintf(msg, sizeof msg, "near-silence (RMS %.1f dBFS, expected at least %.0f dBFS)",
                 a->rms_dbfs, QVA_SILENCE_RMS_DBFS);
        goto fail;
    }
    a->short_warning = a->used_seconds < QVA_SHORT_SECONDS;
    a->clip_warning = a->clipped_fraction >= QVA_CLIP_WARN_FRACTION;
    return 0;
fail:
    set_err(err, err_size, name, msg);
    qva_audio_free(a);
    return -1;
}

static int from_mono_owned(qva_audio *a, float *mono, int64_t n, int rate, const char *name,
                           char *err, size_t err_size) {
    if (rate != QVA_SAMPLE_RATE_HZ && n > 0) {
        char why[128];
        float *y;
        int64_t ny;
        if (resample(&y, &ny, mono, n, rate, why, sizeof why)) {
            free(mono);
            set_err(err, err_size, name, why);
            return -1;
        }
        free(mono);
        mono = y;
        n = ny;
        a->resampled = 1;
    }
    a->samples = mono;
    a->n_samples = n;
    return finish(a, name, err, err_size);
}

/* A source's claimed rate and length, checked before any decoding or resampling: a 2 MB 8-bit WAV
 * claiming 6 MHz cost ~1 s of resampling before it was found too short. 0 or -1 with err. */
static int check_claim(int rate, double seconds, const char *name, char *err, size_t err_size) {
    char msg[160];
    if (rate < QVA_MIN_RATE_HZ || rate > QVA_MAX_RATE_HZ)
        snprintf(msg, sizeof msg, "sample rate %d Hz (expected %d to %d Hz)", rate,
                 QVA_MIN_RATE_HZ, QVA_MAX_RATE_HZ);
    else if (seconds < QVA_MIN_SECONDS)
        snprintf(msg, sizeof msg, "too short (expected at least %.0f s of audio, found %.2f s)",
                 QVA_MIN_SECONDS, seconds);
    else
        return 0;
    set_err(err, err_size, name, msg);
    return -1;
}

int qva_audio_from_mono(qva_audio *a, const float *x, int64_t n, int rate_hz, const char *name,
                        char *err, size_t err_size) {
    memset(a, 0, sizeof *a);
    if (rate_hz <= 0 || n < 0) {
        set_err(err, err_size, name, "invalid sample rate or length");
        return -1;
    }
    if (check_claim(rate_hz, (double)n / rate_hz, name, err, err_size)) return -1;
    float *copy = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!copy) {
        set_err(err, err_size, name, "out of memory");
        return -1;
    }
    memcpy(copy, x, (size_t)n * sizeof(float));
    int64_t clipped = 0;
    for (int64_t i = 0; i < n; i++) clipped += fabsf(x[i]) >= QVA_CLIP_LEVEL;
    a->src_rate_hz = rate_hz;
    a->src_channels = 1;
    snprintf(a->src_format, sizeof a->src_format, "memory");
    a->src_seconds = a->used_seconds = (double)n / rate_hz;
    a->clipped_fraction = n ? (double)clipped / (double)n : 0.0;
    return from_mono_owned(a, copy, n, rate_hz, name, err, err_size);
}

/* libsndfile (1.2.0 here; unchanged upstream as of 1.2.2) loses the codec setup libvorbis allocated
 * (5.8 kB) when an Ogg Vorbis file's three header packets do not all arrive intact: no
 * beginning-of-stream flag, extra packets on the first page, a first header libvorbis rejects, a
 * hole, the end of the file. tests/fuzz/fuzz_audio_load.c found it; a server would lose that much
 * per such upload. Such files are refused before libsndfile opens them: the same reading with
 * libogg and libvorbis (stricter: all three headers must parse), cleaned up. 1 for a file that
 * libsndfile would read as Ogg Vorbis with broken headers, else 0. */
static int vorbis_headers_broken(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* sf_open reports it */
    unsigned char h[10];
    long start = 0;
    int n = 0;
    /* where libsndfile looks for "OggS": after any ID3v2 tags (sndfile.c, id3.c) */
    while ((n = fseek(f, start, SEEK_SET) ? 0 : (int)fread(h, 1, sizeof h, f)) == 10 &&
           !memcmp(h, "ID3", 3) && start < (1L << 30))
        start += 10 + ((long)(h[6] & 0x7f) << 21 | (h[7] & 0x7f) << 14 | (h[8] & 0x7f) << 7 |
                       (h[9] & 0x7f));
    if (n < 4 || memcmp(h, "OggS", 4) || fseek(f, start, SEEK_SET)) {
        fclose(f);
        return 0;
    }
    ogg_sync_state oy;
    ogg_stream_state os;
    ogg_page og;
    ogg_packet op;
    vorbis_info vi;
    vorbis_comment vc;
    ogg_sync_init(&oy);
    vorbis_info_init(&vi);
    vorbis_comment_init(&vc);
    int got = 0, broken = 0, have_stream = 0;
    while (got < 3 && !broken) {
        int r = ogg_sync_pageout(&oy, &og);
        if (r == 0) {
            char *b = ogg_sync_buffer(&oy, 4096);
            size_t k = b ? fread(b, 1, 4096, f) : 0;
            if (!k) break; /* the end before three headers */
            ogg_sync_wrote(&oy, (long)k);
            continue;
        }
        if (r < 0) continue;               /* bytes skipped to the next page */
        if (!have_stream) {                /* the first page decides what the stream is */
            if (!ogg_page_bos(&og)) break; /* libsndfile refuses it before Vorbis */
            ogg_stream_init(&os, ogg_page_serialno(&og));
            have_stream = 1;
            if (ogg_stream_pagein(&os, &og) || ogg_stream_packetout(&os, &op) != 1) break;
            if (op.bytes < 7 || memcmp(op.packet, "\001vorbis", 7)) break; /* not Vorbis */
            broken = !op.b_o_s || ogg_stream_packetpeek(&os, NULL) ||
                     vorbis_synthesis_headerin(&vi, &vc, &op) < 0;
            got = 1;
            continue;
        }
        if (ogg_page_serialno(&og) != os.serialno) continue;
        if (ogg_stream_pagein(&os, &og)) broken = 1;
        while (!broken && got < 3 && (r = ogg_stream_packetout(&os, &op)) != 0)
            broken = r < 0 || vorbis_synthesis_headerin(&vi, &vc, &op) < 0 || (got++, 0);
        if (ogg_page_eos(&og)) break; /* libsndfile reads no page after an end-of-stream page */
    }
    broken |= got > 0 && got < 3;
    vorbis_comment_clear(&vc);
    vorbis_info_clear(&vi);
    if (have_stream) ogg_stream_clear(&os);
    ogg_sync_clear(&oy);
    fclose(f);
    return broken;
}

/* libsndfile's handle on path (NULL with "PATH: problem" in err), Ogg Vorbis with broken headers
 * refused first. */
static SNDFILE *open_audio(const char *path, SF_INFO *info, char *err, size_t err_size) {
    if (vorbis_headers_broken(path)) {
        set_err(err, err_size, path, "cannot read audio (Ogg Vorbis headers missing or corrupt)");
        return NULL;
    }
    memset(info, 0, sizeof *info);
    SNDFILE *sf = sf_open(path, SFM_READ, info);
    if (!sf) {
        char msg[256];
        if (sf_error(NULL) == SF_ERR_UNRECOGNISED_FORMAT) /* say what would do */
            snprintf(msg, sizeof msg, "cannot read audio (%s): reads WAV, FLAC, Ogg Vorbis, Opus "
                     "and MP3 (not AAC)", sf_strerror(NULL));
        else
            snprintf(msg, sizeof msg, "cannot read audio (%s)", sf_strerror(NULL));
        set_err(err, err_size, path, msg);
    }
    return sf;
}

int qva_audio_comment(const char *path, char *out, size_t size, char *err, size_t err_size) {
    if (size) out[0] = 0;
    SF_INFO info;
    SNDFILE *sf = open_audio(path, &info, err, err_size);
    if (!sf) return -1;
    const char *c = sf_get_string(sf, SF_STR_COMMENT);
    if (c && size) snprintf(out, size, "%s", c);
    sf_close(sf);
    return 0;
}

/* a->src_format: libsndfile's names of container and encoding ("WAV, Signed 16 bit PCM"). */
static void describe_format(qva_audio *a, int format) {
    SF_FORMAT_INFO major = {.format = format & SF_FORMAT_TYPEMASK};
    SF_FORMAT_INFO sub = {.format = format & SF_FORMAT_SUBMASK};
    if (sf_command(NULL, SFC_GET_FORMAT_INFO, &major, sizeof major) == 0 && major.name) {
        if (sf_command(NULL, SFC_GET_FORMAT_INFO, &sub, sizeof sub) == 0 && sub.name)
            snprintf(a->src_format, sizeof a->src_format, "%s, %s", major.name, sub.name);
        else
            snprintf(a->src_format, sizeof a->src_format, "%s", major.name);
    }
}

/* Reads up to n frames of sf downmixed to mono into *mono (the caller frees it), counting the
 * clipped samples in *clipped. Frames decoded (0: none), or -1 out of memory.
 * Read in blocks of 64k samples into a mono buffer that grows with what actually decodes: a
 * header's frame count is only a claim (a 100-byte FLAC can claim 30 s of 8 channels at
 * 655 kHz, 0.6 GB of floats), so nothing is allocated on its word. */
static int64_t read_mono(SNDFILE *sf, int channels, int64_t n, float **mono, int64_t *clipped) {
    enum { BLOCK_SAMPLES = 1 << 16 };
    sf_count_t block = channels < BLOCK_SAMPLES ? BLOCK_SAMPLES / channels : 1;
    float *inter = malloc((size_t)block * channels * sizeof(float));
    int64_t got = 0, cap = 0;
    int oom = !inter;
    while (!oom && got < n) {
        sf_count_t want = n - got < block ? n - got : block;
        if (got + want > cap) {
            int64_t grown = cap ? 2 * cap : BLOCK_SAMPLES;
            if (grown < got + want) grown = got + want;
            if (grown > n) grown = n;
            float *m = realloc(*mono, (size_t)grown * sizeof(float));
            if (!m) {
                oom = 1;
                break;
            }
            *mono = m;
            cap = grown;
        }
        sf_count_t k = sf_readf_float(sf, inter, want);
        if (k <= 0) break;
        for (sf_count_t i = 0; i < k; i++) {
            float s = 0.0f;
            for (int c = 0; c < channels; c++) {
                float v = inter[i * channels + c];
                *clipped += fabsf(v) >= QVA_CLIP_LEVEL;
                s += v;
            }
            (*mono)[got + i] = channels == 1 ? s : s / (float)channels;
        }
        got += k;
    }
    free(inter);
    return oom ? -1 : got;
}

int qva_audio_load(qva_audio *a, const char *path, double max_seconds, char *err,
                   size_t err_size) {
    memset(a, 0, sizeof *a);
    SF_INFO info;
    SNDFILE *sf = open_audio(path, &info, err, err_size);
    if (!sf) return -1;
    if (info.samplerate <= 0 || info.channels <= 0 || info.frames <= 0) {
        sf_close(sf);
        set_err(err, err_size, path, "no audio frames in the file");
        return -1;
    }
    if (check_claim(info.samplerate, (double)info.frames / info.samplerate, path, err,
                    err_size)) {
        sf_close(sf);
        return -1;
    }
    describe_format(a, info.format);
    a->src_rate_hz = info.samplerate;
    a->src_channels = info.channels;
    a->src_seconds = (double)info.frames / info.samplerate;
    int64_t n = info.frames;
    if (max_seconds > 0 && n > (int64_t)(max_seconds * info.samplerate)) {
        n = (int64_t)(max_seconds * info.samplerate);
        a->truncated = 1;
    }
    if ((uint64_t)n * (uint64_t)info.channels > (uint64_t)1 << 31) {
        sf_close(sf);
        set_err(err, err_size, path, "too long to load (use --max-seconds)");
        return -1;
    }
    float *mono = NULL;
    int64_t clipped = 0, got = read_mono(sf, info.channels, n, &mono, &clipped);
    sf_close(sf);
    if (got <= 0) {
        free(mono);
        set_err(err, err_size, path, got < 0 ? "out of memory" : "cannot decode audio frames");
        return -1;
    }
    n = got;
    a->clipped_fraction = (double)clipped / ((double)n * info.channels);
    a->used_seconds = (double)n / info.samplerate;
    return from_mono_owned(a, mono, n, info.samplerate, path, err, err_size);
}

void qva_audio_free(qva_audio *a) {
    if (!a) return;
    free(a->samples);
    a->samples = NULL;
    a->n_samples = 0;
}

double qva_l2norm(const float *a, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

