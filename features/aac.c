/* aac.c — the AAC codec behind encode.c's `aac` format: FFmpeg's native AAC-LC encoder, loaded
 * with dlopen the first time aac is asked for, so libqvoice does not pull FFmpeg (27 Debian
 * packages) into every program that embeds it. Compiled against libavcodec-dev's headers; the
 * library loaded must have their major version (its structs' layout). Raw AAC frames get 7-byte
 * ADTS headers here (what OpenAI's and vLLM-Omni's `aac` return), so the stream needs no muxer
 * and can be cut and played frame by frame.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/features.h"
#include "util/api.h"

#if __has_include(<libavcodec/avcodec.h>)
#include <libavcodec/avcodec.h>
#include <libavutil/channel_layout.h>
#define HAVE_AVCODEC 1
#else
#define HAVE_AVCODEC 0
#endif

/* ==== the library, once ====================================================================== */

#define STR_(x) #x
#define STR(x) STR_(x)

#if HAVE_AVCODEC
#define LIBNAME "libavcodec.so." STR(LIBAVCODEC_VERSION_MAJOR)
#define DEBIAN_PKG "libavcodec" STR(LIBAVCODEC_VERSION_MAJOR)

/* The few functions used, resolved by name (libavutil's come through libavcodec's dependency). */
#define AV_FUNCS(X)                                                                                \
    X(unsigned, avcodec_version, (void))                                                           \
    X(unsigned, avutil_version, (void))                                                            \
    X(const AVCodec *, avcodec_find_encoder, (enum AVCodecID))                                     \
    X(AVCodecContext *, avcodec_alloc_context3, (const AVCodec *))                                 \
    X(int, avcodec_open2, (AVCodecContext *, const AVCodec *, AVDictionary **))                    \
    X(void, avcodec_free_context, (AVCodecContext **))                                             \
    X(int, avcodec_send_frame, (AVCodecContext *, const AVFrame *))                                \
    X(int, avcodec_receive_packet, (AVCodecContext *, AVPacket *))                                 \
    X(AVPacket *, av_packet_alloc, (void))                                                         \
    X(void, av_packet_free, (AVPacket **))                                                         \
    X(void, av_packet_unref, (AVPacket *))                                                         \
    X(AVFrame *, av_frame_alloc, (void))                                                           \
    X(void, av_frame_free, (AVFrame **))                                                           \
    X(int, av_frame_get_buffer, (AVFrame *, int))                                                  \
    X(int, av_frame_make_writable, (AVFrame *))                                                    \
    X(int, av_log_get_level, (void))                                                               \
    X(void, av_log_set_level, (int))

#define FIELD_(ret, name, args) ret(*name) args;
static struct {
    AV_FUNCS(FIELD_)
} av;
#undef FIELD_

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[QVU_DETAIL_SIZE]; /* "" when loaded */

/* QV_AVCODEC names another library to load (a custom FFmpeg build; the tests name a missing one
 * to check the refusal). */
static void load(void) {
    const char *name = getenv("QV_AVCODEC");
    if (!name || !*name) name = LIBNAME;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error,
                 "aac: cannot load %s (install Debian's %s, or FFmpeg's libavcodec %d)", name,
                 DEBIAN_PKG, LIBAVCODEC_VERSION_MAJOR);
        return;
    }
#define RESOLVE_(ret, fn, args)                                                                    \
    if (!(*(void **)&av.fn = dlsym(h, #fn))) {                                                     \
        snprintf(load_error, sizeof load_error, "aac: %s: no symbol %s", name, #fn);               \
        dlclose(h);                                                                                \
        return;                                                                                    \
    }
    AV_FUNCS(RESOLVE_)
#undef RESOLVE_
    /* the structs used here are laid out as in the headers only within one major version */
    const unsigned codec = av.avcodec_version() >> 16, util = av.avutil_version() >> 16;
    if (codec != LIBAVCODEC_VERSION_MAJOR || util != LIBAVUTIL_VERSION_MAJOR) {
        snprintf(load_error, sizeof load_error,
                 "aac: %s is libavcodec %u / libavutil %u; this build needs %d / %d", name, codec,
                 util, LIBAVCODEC_VERSION_MAJOR, LIBAVUTIL_VERSION_MAJOR);
        dlclose(h);
        return;
    }
    /* a library does not print: FFmpeg's default log level (info: the encoder's "Qavg" line on
     * stderr) is turned off; a program that set another level keeps it */
    if (av.av_log_get_level() == AV_LOG_INFO) av.av_log_set_level(AV_LOG_QUIET);
    if (!av.avcodec_find_encoder(AV_CODEC_ID_AAC)) {
        snprintf(load_error, sizeof load_error, "aac: %s has no AAC encoder", name);
        dlclose(h); /* the library stays loaded when it works: its functions are used for good */
    }
}
#endif

enum qv_status qva_aac_available(void) {
#if HAVE_AVCODEC
    pthread_once(&once, load);
    return load_error[0] ? qvu_fail(QV_E_UNSUPPORTED, load_error) : QV_OK;
#else
    return qvu_fail(QV_E_UNSUPPORTED,
                    "aac: this build has no AAC encoder (built without Debian's libavcodec-dev)");
#endif
}

/* ==== encoding =============================================================================== */

#if HAVE_AVCODEC
#define ADTS_BYTES 7
#define SF_INDEX_24K 6 /* ISO 14496-3 §1.6.3.4: 96000, 88200, 64000, 48000, 44100, 32000, 24000 */

struct qva_aac {
    AVCodecContext *ctx;
    AVFrame *frame;
    AVPacket *pkt;
    int filled;  /* samples in frame */
    int64_t pts; /* samples sent */
};

/* One ADTS header (ISO 14496-3 §1.A.2.2: MPEG-4, no CRC, AAC LC, one channel) before a
 * payload of n bytes. */
static void adts_header(uint8_t h[ADTS_BYTES], int n) {
    const unsigned len = (unsigned)n + ADTS_BYTES;
    h[0] = 0xFF;
    h[1] = 0xF1;                                       /* sync, MPEG-4, layer 0, no CRC */
    h[2] = (uint8_t)((2 - 1) << 6 | SF_INDEX_24K << 2); /* profile LC, 24 kHz, channels' top bit 0 */
    h[3] = (uint8_t)(1 << 6 | len >> 11);               /* one channel, frame length's top bits */
    h[4] = (uint8_t)(len >> 3);
    h[5] = (uint8_t)((len & 7) << 5 | 0x1F); /* buffer fullness 0x7FF: variable rate */
    h[6] = 0xFC;                             /* ... and one raw data block */
}

/* Every packet the encoder has ready, each with its ADTS header, to fn. */
static enum qv_status drain(qva_aac *a, qv_write_fn fn, void *user) {
    int rc;
    while ((rc = av.avcodec_receive_packet(a->ctx, a->pkt)) == 0) {
        uint8_t h[ADTS_BYTES];
        const int n = a->pkt->size;
        adts_header(h, n);
        const int bad = n > 8191 - ADTS_BYTES || fn(user, h, ADTS_BYTES) ||
                        fn(user, a->pkt->data, (size_t)n);
        av.av_packet_unref(a->pkt);
        if (bad) return qvu_fail(QV_E_IO, "aac: cannot write a frame");
    }
    return rc == AVERROR(EAGAIN) || rc == AVERROR_EOF ? QV_OK
                                                      : qvu_failf(QV_E_IO, "aac: encoder: %d", rc);
}

/* The frame as it is (a short last one padded with silence) to the encoder. */
static enum qv_status send_frame(qva_aac *a, qv_write_fn fn, void *user) {
    float *d = (float *)a->frame->data[0];
    memset(d + a->filled, 0, (size_t)(a->frame->nb_samples - a->filled) * sizeof *d);
    a->frame->pts = a->pts;
    a->pts += a->frame->nb_samples;
    a->filled = 0;
    if (av.avcodec_send_frame(a->ctx, a->frame) < 0) return qvu_fail(QV_E_IO, "aac: encoder failed");
    return drain(a, fn, user);
}

enum qv_status qva_aac_new(qva_aac **out, int bit_rate) {
    *out = NULL;
    enum qv_status st = qva_aac_available();
    if (st) return st;
    qva_aac *a = calloc(1, sizeof *a);
    const AVCodec *codec = av.avcodec_find_encoder(AV_CODEC_ID_AAC);
    if (!a || !(a->ctx = av.avcodec_alloc_context3(codec)) || !(a->frame = av.av_frame_alloc()) ||
        !(a->pkt = av.av_packet_alloc()))
        return qva_aac_free(a), qvu_fail(QV_E_NOMEM, "aac: out of memory");
    AVCodecContext *c = a->ctx;
    c->sample_fmt = AV_SAMPLE_FMT_FLTP; /* planar float: mono is one plane of our samples */
    c->sample_rate = QVA_SAMPLE_RATE_HZ;
    c->ch_layout = (AVChannelLayout)AV_CHANNEL_LAYOUT_MONO;
    c->bit_rate = bit_rate;
    c->thread_count = 1; /* one thread: the same bytes every time (streamed == whole) */
    c->time_base = (AVRational){1, QVA_SAMPLE_RATE_HZ};
    if (av.avcodec_open2(c, codec, NULL) < 0)
        return qva_aac_free(a), qvu_failf(QV_E_UNSUPPORTED, "aac: cannot open the encoder at %d "
                                                            "bit/s", bit_rate);
    a->frame->nb_samples = c->frame_size;
    a->frame->format = c->sample_fmt;
    a->frame->sample_rate = c->sample_rate;
    a->frame->ch_layout = c->ch_layout;
    if (av.av_frame_get_buffer(a->frame, 0) < 0)
        return qva_aac_free(a), qvu_fail(QV_E_NOMEM, "aac: out of memory");
    *out = a;
    return QV_OK;
}

enum qv_status qva_aac_write(qva_aac *a, const float *pcm, int64_t n, qv_write_fn fn, void *user) {
    while (n > 0) {
        if (a->filled == 0 && av.av_frame_make_writable(a->frame) < 0) /* the encoder may hold it */
            return qvu_fail(QV_E_NOMEM, "aac: out of memory");
        const int room = a->frame->nb_samples - a->filled;
        const int k = n < room ? (int)n : room;
        memcpy((float *)a->frame->data[0] + a->filled, pcm, (size_t)k * sizeof *pcm);
        a->filled += k, pcm += k, n -= k;
        if (a->filled == a->frame->nb_samples) {
            const enum qv_status st = send_frame(a, fn, user);
            if (st) return st;
        }
    }
    return QV_OK;
}

enum qv_status qva_aac_finish(qva_aac *a, qv_write_fn fn, void *user) {
    enum qv_status st = QV_OK;
    if (a->filled) {
        if (av.av_frame_make_writable(a->frame) < 0) return qvu_fail(QV_E_NOMEM, "aac: out of memory");
        st = send_frame(a, fn, user);
    }
    if (st) return st;
    if (av.avcodec_send_frame(a->ctx, NULL) < 0) return qvu_fail(QV_E_IO, "aac: encoder failed");
    return drain(a, fn, user);
}

void qva_aac_free(qva_aac *a) {
    if (!a) return;
    av.av_packet_free(&a->pkt);
    av.av_frame_free(&a->frame);
    av.avcodec_free_context(&a->ctx);
    free(a);
}
#else
struct qva_aac {
    int unused;
};
enum qv_status qva_aac_new(qva_aac **out, int bit_rate) {
    *out = NULL;
    return qva_aac_available();
}
enum qv_status qva_aac_write(qva_aac *a, const float *pcm, int64_t n, qv_write_fn fn, void *user) {
    return qva_aac_available();
}
enum qv_status qva_aac_finish(qva_aac *a, qv_write_fn fn, void *user) {
    return qva_aac_available();
}
void qva_aac_free(qva_aac *a) {
    free(a);
}
#endif
