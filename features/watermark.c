/* watermark.c — the inaudible mark in qvoice's output audio and its detector (docs/provenance.md).
 * The mark is a spread-spectrum spectral ripple: y = x ± g∗x with a 1024-tap FIR g whose response
 * is ±1 chips on a 23.4 Hz grid over 422 Hz – 6.98 kHz, 37 dB under the signal; the ± flips every
 * 0.256 s of stream time. The detector averages log-power spectra of the two flip halves (trying
 * every flip phase) and correlates their difference with the chips, so excerpts at any offset,
 * resampled or re-encoded, are scored; a stream marked call by call equals the whole file marked.
 */
#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "features/features.h"
#include "features/fft.h"
#include "include/qvoice.h"
#include "util/api.h"

/* ==== constants ============================================================================= */

#define TAPS 1024          /* FIR length; chip grid = 24000 / 1024 = 23.4375 Hz */
#define DELAY (TAPS / 2)   /* the FIR is symmetric about this tap (linear phase) */
#define CHIP_LO 18         /* 421.9 Hz: above the range hum filters and telephone cuts touch */
#define CHIP_HI 298        /* 6984 Hz: below 8 kHz, so resampling to 16 kHz keeps every chip */
#define N_CHIPS (CHIP_HI - CHIP_LO + 1)
#define N_BITS 40          /* 32 payload bits + CRC-8 */
#define BITS_CHIPS 3       /* chips per payload bit; the other chips carry the sync pattern */
#define LEVEL_DB (-37.0)   /* mark power relative to the signal in the band; third-octave bands
                              of speech then measure 35.4 dB or more under (test_watermark) */
#define KEY 0x71766f6963652d31ull /* "qvoice-1": the public key of the chip pattern */
#define CHUNK 4096         /* samples filtered per pass over the history buffer */
/* The ripple's sign flips every FLIP samples (0.256 s): the detector takes the difference of
 * the two halves, which cancels what the host's spectrum keeps still (room, microphone, a codec's
 * banding, the speaker's long-term shape) and leaves the mark. */
#define FLIP 6144
#define RAMP 480           /* 20 ms turn at each flip */

/* Detector: Hann frames of 2048 (11.7 Hz bins: chip k sits on bin 2k), hop 512; frames are
 * summed in blocks of 48 (1.02 s) per flip phase and scored over windows of 3 blocks (3 s excerpts). */
#define N_FFT 2048
#define HOP 512
#define BIN_LO (2 * CHIP_LO - 16)
#define BIN_HI (2 * CHIP_HI + 16)
#define N_DBINS (BIN_HI - BIN_LO + 1)
#define DETREND 8          /* half-width of the moving average taken off the log spectrum */
#define BLOCK_FRAMES 48     /* a multiple of PHASES */
#define PHASES (2 * FLIP / HOP) /* flip phases tried: a frame's sign is fixed by (frame + phase) % PHASES */
#define WINDOW_BLOCKS 3
#define Z_PRESENT 5.0      /* score for presence; see docs/provenance.md for the null figures */
#define SIGMA_MIN 0.01     /* nepers: steady tones leave almost no spread; a mark leaves 0.06 */
#define POWER_FLOOR 1e-9   /* of the frame's power, added to each bin: near-empty bins read steady */
#define ACTIVE_POWER 1e-7  /* mean windowed power (−70 dBFS) below which a frame is skipped */

/* ==== the chip pattern ====================================================================== */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* role[c] = -1 (sync) or the payload bit that chip c carries; sign[c] = ±1. Fixed by KEY. */
static void chip_layout(int role[N_CHIPS], int sign[N_CHIPS]) {
    uint64_t s = KEY;
    int perm[N_CHIPS];
    for (int c = 0; c < N_CHIPS; c++) perm[c] = c;
    for (int c = N_CHIPS - 1; c > 0; c--) {
        int j = (int)(splitmix(&s) % (uint64_t)(c + 1)), t = perm[c];
        perm[c] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < N_CHIPS; i++) role[perm[i]] = i < N_BITS * BITS_CHIPS ? i / BITS_CHIPS : -1;
    for (int c = 0; c < N_CHIPS; c++) sign[c] = (splitmix(&s) >> 63) ? 1 : -1;
}

static uint8_t crc8(uint32_t v) {
    uint8_t crc = 0;
    for (int i = 3; i >= 0; i--) {
        crc ^= (uint8_t)(v >> (8 * i));
        for (int b = 0; b < 8; b++) crc = (uint8_t)(crc & 0x80 ? (crc << 1) ^ 0x07 : crc << 1);
    }
    return crc;
}

static int coded_bit(uint32_t payload, int i) {
    return i < 32 ? (int)(payload >> (31 - i)) & 1 : (crc8(payload) >> (39 - i)) & 1;
}

/* cs[i] = cos(2πi / N_FFT): every angle below is a multiple of 2π / N_FFT (TAPS divides N_FFT),
 * so one table of 2048 values replaces millions of cos() calls. */
typedef struct {
    double cs[N_FFT];
} cos_table;

static void cos_table_init(cos_table *t) {
    for (int i = 0; i < N_FFT; i++) t->cs[i] = cos(2.0 * M_PI * i / N_FFT);
}

/* cos(2π·x / N_FFT) for any integer x. */
static double cos_at(const cos_table *t, int64_t x) {
    return t->cs[((x % N_FFT) + N_FFT) % N_FFT];
}

/* FIR taps of the chips spec[c] (zero-phase spectrum → centred on DELAY, Hann-tapered). */
static void fir_from_chips(double *g, const double spec[N_CHIPS], const cos_table *t) {
    for (int j = 0; j < TAPS; j++) {
        double acc = 0.0;
        for (int c = 0; c < N_CHIPS; c++)
            acc += spec[c] * cos_at(t, (int64_t)2 * (CHIP_LO + c) * (j - DELAY));
        double taper = 0.5 - 0.5 * cos_at(t, 2 * j);
        g[j] = 2.0 * acc / TAPS * taper;
    }
}

/* Re G(ω_m) at detector bin m: the log-power ripple the FIR leaves there (its phase, e^{-iωD},
 * turns into cos(πm/2): even bins carry it, odd bins do not). */
static void fir_template(float *p, const double *g, const cos_table *t) {
    for (int m = BIN_LO; m <= BIN_HI; m++) {
        double re = 0.0;
        for (int j = 0; j < TAPS; j++) re += g[j] * t->cs[(m * j) % N_FFT];
        p[m - BIN_LO] = (float)re;
    }
}

/* ==== embedding ============================================================================= */

struct qv_watermark {
    int64_t pos;               /* samples marked so far: where the stream is in the flip pattern */
    float taps_rev[TAPS];      /* g reversed, scaled to LEVEL_DB: y[i] = x[i] + Σ taps_rev · x[i−1023..i] */
    float buf[TAPS - 1 + CHUNK]; /* the last TAPS−1 inputs, then the chunk being filtered */
};

uint32_t qv_watermark_payload(const char *voice_id, const char *model_fingerprint) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    uint8_t h[32] = {0};
    unsigned n = 0;
    if (c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1) {
        EVP_DigestUpdate(c, voice_id ? voice_id : "", voice_id ? strlen(voice_id) : 0);
        EVP_DigestUpdate(c, "\n", 1);
        EVP_DigestUpdate(c, model_fingerprint ? model_fingerprint : "",
                         model_fingerprint ? strlen(model_fingerprint) : 0);
        EVP_DigestFinal_ex(c, h, &n);
    }
    EVP_MD_CTX_free(c);
    uint32_t id = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    return QV_WATERMARK_SYNTHETIC | (id & ~QV_WATERMARK_SYNTHETIC);
}

enum qv_status qv_watermark_new(qv_watermark **out, uint32_t payload) {
    *out = NULL;
    qv_watermark *w = calloc(1, sizeof *w);
    double *g = malloc(TAPS * sizeof *g);
    cos_table *ct = malloc(sizeof *ct);
    if (!w || !g || !ct)
        return free(w), free(g), free(ct), qvu_fail(QV_E_NOMEM, "watermark: out of memory");
    cos_table_init(ct);
    int role[N_CHIPS], sign[N_CHIPS];
    chip_layout(role, sign);
    double spec[N_CHIPS];
    for (int c = 0; c < N_CHIPS; c++)
        spec[c] = sign[c] * (role[c] < 0 || coded_bit(payload, role[c]) ? 1.0 : -1.0);
    fir_from_chips(g, spec, ct);
    /* Scale so that the mean |G|² over the chip band is 10^(LEVEL_DB/10): a host with a smooth
     * spectrum then gets a mark LEVEL_DB under it in any band of a few chips or more. */
    double mean = 0.0;
    for (int k = 2 * CHIP_LO; k <= 2 * CHIP_HI; k++) {
        double re = 0.0, im = 0.0;
        for (int j = 0; j < TAPS; j++) {
            re += g[j] * ct->cs[(k * j) % N_FFT];
            im -= g[j] * cos_at(ct, (int64_t)k * j - N_FFT / 4); /* sin */
        }
        mean += re * re + im * im;
    }
    mean /= 2 * (CHIP_HI - CHIP_LO) + 1;
    double scale = pow(10.0, LEVEL_DB / 20.0) / sqrt(mean);
    for (int j = 0; j < TAPS; j++) w->taps_rev[TAPS - 1 - j] = (float)(g[j] * scale);
    free(g);
    free(ct);
    *out = w;
    return QV_OK;
}

void qv_watermark_free(qv_watermark *w) { free(w); }

/* +1 in even flip blocks, -1 in odd ones, with a raised-cosine turn over the first RAMP samples. */
static float flip_sign(int64_t n) {
    int64_t k = n / FLIP, i = n % FLIP;
    float cur = (k & 1) ? -1.0f : 1.0f;
    if (k == 0 || i >= RAMP) return cur;
    return cur * (float)(-cos(M_PI * (double)i / RAMP));
}

/* Each output sample is one dot product in a fixed order, so the result does not depend on how
 * the stream is cut into calls. */
void qv_watermark_apply(qv_watermark *w, float *pcm, int64_t n_samples) {
    float *hist = w->buf;
    while (n_samples > 0) {
        int n = n_samples < CHUNK ? (int)n_samples : CHUNK;
        memcpy(hist + TAPS - 1, pcm, (size_t)n * sizeof *pcm);
        for (int i = 0; i < n; i++) {
            const float *x = hist + i, *t = w->taps_rev;
            float a[8] = {0};
            for (int j = 0; j < TAPS; j += 8)
                for (int l = 0; l < 8; l++) a[l] += t[j + l] * x[j + l];
            pcm[i] += flip_sign(w->pos + i) *
                      (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
        }
        w->pos += n;
        memmove(hist, hist + n, (TAPS - 1) * sizeof *hist);
        pcm += n;
        n_samples -= n;
    }
}

/* ==== detection ============================================================================= */

/* One Hann-windowed real frame and its spectrum; the plan comes from features/fft.c, the one
 * owner of FFTW planning. */
typedef struct {
    float *in, win[N_FFT];
    fftwf_complex *out;
    fftwf_plan plan;
} fft_ctx;

static int fft_open(fft_ctx *f) {
    f->in = fftwf_alloc_real(N_FFT);
    f->out = fftwf_alloc_complex(N_FFT / 2 + 1);
    f->plan = f->in && f->out ? qva_fft_plan_r2c(N_FFT, 1, f->in, f->out) : NULL;
    for (int i = 0; i < N_FFT; i++) f->win[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / N_FFT));
    return f->plan ? 0 : -1;
}

static void fft_close(fft_ctx *f) {
    if (!f) return;
    qva_fft_destroy(f->plan);
    fftwf_free(f->in);
    fftwf_free(f->out);
}

typedef struct {
    float sync[N_DBINS];          /* template of the sync chips */
    float bit[N_BITS][N_DBINS];   /* template of each payload bit's chips, sign +1 */
    double sync_norm, bit_norm[N_BITS];
} templates;

static int templates_make(templates *t) {
    double *g = malloc(TAPS * sizeof *g);
    cos_table *ct = malloc(sizeof *ct);
    if (!g || !ct) return free(g), free(ct), -1;
    cos_table_init(ct);
    int role[N_CHIPS], sign[N_CHIPS];
    chip_layout(role, sign);
    double spec[N_CHIPS];
    for (int r = -1; r < N_BITS; r++) {
        for (int c = 0; c < N_CHIPS; c++) spec[c] = role[c] == r ? sign[c] : 0.0;
        fir_from_chips(g, spec, ct);
        float *p = r < 0 ? t->sync : t->bit[r];
        fir_template(p, g, ct);
        double n2 = 0.0;
        for (int m = 0; m < N_DBINS; m++) n2 += (double)p[m] * p[m];
        *(r < 0 ? &t->sync_norm : &t->bit_norm[r]) = sqrt(n2);
    }
    free(g);
    free(ct);
    return 0;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Normalised correlation of the detrended spectrum difference d with each template: z[0] sync,
 * and with bits, z[1 + i] payload bit i. Under no mark each is about N(0, 1). */
static void score(const templates *t, const double *d, int bits, double z[1 + N_BITS]) {
    float r[N_DBINS], dev[N_DBINS];
    double run = 0.0; /* sum of d over [m - DETREND, m + DETREND], clipped to the band */
    for (int k = 0; k < DETREND && k < N_DBINS; k++) run += d[k];
    for (int m = 0; m < N_DBINS; m++) {
        int lo = m - DETREND < 0 ? 0 : m - DETREND, hi = m + DETREND >= N_DBINS ? N_DBINS - 1 : m + DETREND;
        if (m + DETREND < N_DBINS) run += d[m + DETREND];
        if (m - DETREND - 1 >= 0) run -= d[m - DETREND - 1];
        r[m] = (float)(d[m] - run / (hi - lo + 1));
        dev[m] = fabsf(r[m]);
    }
    /* Spread from the median absolute deviation, so a tone's few bins do not set the scale;
     * residuals beyond 4 spreads are clipped for the same reason. */
    qsort(dev, N_DBINS, sizeof *dev, cmp_float);
    double sigma = 1.4826 * dev[N_DBINS / 2];
    if (sigma < SIGMA_MIN) sigma = SIGMA_MIN;
    for (int m = 0; m < N_DBINS; m++) {
        double lim = 4.0 * sigma;
        r[m] = (float)(r[m] > lim ? lim : r[m] < -lim ? -lim : r[m]);
    }
    for (int i = -1; i < (bits ? N_BITS : 0); i++) {
        const float *p = i < 0 ? t->sync : t->bit[i];
        double acc = 0.0;
        for (int m = 0; m < N_DBINS; m++) acc += (double)p[m] * r[m];
        z[1 + i] = acc / (sigma * (i < 0 ? t->sync_norm : t->bit_norm[i]));
    }
}

/* Frames are summed per block and per residue fr % PHASES (the flip phase a frame sits at).
 * Scores blocks [b0, b1) under every flip phase, keeping the best: z of that phase, 0 when the
 * blocks hold too few loud frames. */
typedef struct {
    const templates *t;
    const float *bsum;        /* [n_blocks][PHASES][N_DBINS] */
    const int64_t *bcount;    /* [n_blocks][PHASES] */
} sums;

static double score_span(const sums *s, int64_t b0, int64_t b1, double z[1 + N_BITS]) {
    static const double none[1 + N_BITS];
    double acc[PHASES][N_DBINS];
    int64_t cnt[PHASES] = {0}, total = 0;
    memset(acc, 0, sizeof acc);
    for (int64_t b = b0; b < b1; b++)
        for (int r = 0; r < PHASES; r++) {
            const float *src = s->bsum + (b * PHASES + r) * N_DBINS;
            for (int m = 0; m < N_DBINS; m++) acc[r][m] += src[m];
            cnt[r] += s->bcount[b * PHASES + r];
            total += s->bcount[b * PHASES + r];
        }
    memcpy(z, none, sizeof none);
    if (total < BLOCK_FRAMES / 2) return 0.0;
    double best = -INFINITY, d[N_DBINS], best_d[N_DBINS], zh[1 + N_BITS];
    for (int h = 0; h < PHASES; h++) {
        double plus[N_DBINS] = {0}, minus[N_DBINS] = {0};
        int64_t np = 0, nm = 0;
        for (int r = 0; r < PHASES; r++) {
            /* a frame's centre is HOP·(r + N_FFT / 2 / HOP) into the pattern, shifted by h */
            int neg = (((r + h + N_FFT / 2 / HOP) % PHASES) * HOP / FLIP) & 1;
            double *dst = neg ? minus : plus;
            for (int m = 0; m < N_DBINS; m++) dst[m] += acc[r][m];
            *(neg ? &nm : &np) += cnt[r];
        }
        if (np == 0 || nm == 0) continue;
        for (int m = 0; m < N_DBINS; m++) d[m] = plus[m] / (double)np - minus[m] / (double)nm;
        score(s->t, d, 0, zh);
        if (zh[0] > best) best = zh[0], memcpy(best_d, d, sizeof d);
    }
    if (best == -INFINITY) return 0.0;
    score(s->t, best_d, 1, z); /* the payload bits under the best phase only */
    return best > 0.0 ? best : 0.0;
}

static void decode(const double z[1 + N_BITS], qv_watermark_range *g) {
    uint32_t v = 0;
    uint8_t crc = 0;
    double zmin = INFINITY;
    for (int i = 0; i < N_BITS; i++) {
        int b = z[1 + i] > 0;
        if (i < 32) v = v << 1 | (uint32_t)b;
        else crc = (uint8_t)(crc << 1 | b);
        if (fabs(z[1 + i]) < zmin) zmin = fabs(z[1 + i]);
    }
    g->payload_ok = crc8(v) == crc;
    g->payload = g->payload_ok ? v : 0;
    g->payload_score = zmin;
}

qv_watermark_report qv_watermark_default_report(void) {
    return (qv_watermark_report){.struct_size = sizeof(qv_watermark_report)};
}

enum qv_status qv_watermark_detect(const float *pcm, int64_t n_samples, qv_watermark_report *rep) {
    enum qv_status st = qvu_check_size("qv_watermark_report", rep ? rep->struct_size : 0,
                                       sizeof *rep);
    if (st) return st;
    uint32_t size = rep->struct_size;
    memset(rep, 0, sizeof *rep);
    rep->struct_size = size;
    if (!pcm || n_samples < 0) return qvu_fail(QV_E_INVALID, "watermark: no samples");
    rep->seconds = (double)n_samples / QVA_SAMPLE_RATE_HZ;
    int64_t n_frames = n_samples >= N_FFT ? (n_samples - N_FFT) / HOP + 1 : 0;
    int64_t n_blocks = (n_frames + BLOCK_FRAMES - 1) / BLOCK_FRAMES;
    if (n_blocks == 0) return QV_OK; /* under 85 ms: nothing to say */
    if ((uint64_t)n_blocks > SIZE_MAX / (PHASES * N_DBINS * sizeof(float)))
        return qvu_failf(QV_E_LIMIT, "watermark: %lld samples: too many", (long long)n_samples);
    fft_ctx *f = calloc(1, sizeof *f);
    templates *t = malloc(sizeof *t);
    float *bsum = calloc((size_t)n_blocks * PHASES * N_DBINS, sizeof *bsum);
    int64_t *bcount = calloc((size_t)n_blocks * PHASES, sizeof *bcount);
    if (!f || !t || !bsum || !bcount || fft_open(f) || templates_make(t)) {
        fft_close(f);
        free(f), free(t), free(bsum), free(bcount);
        return qvu_failf(QV_E_NOMEM, "watermark: out of memory for %.1f s of audio", rep->seconds);
    }
    for (int64_t fr = 0; fr < n_frames; fr++) {
        const float *x = pcm + fr * HOP;
        double pw = 0.0;
        for (int i = 0; i < N_FFT; i++) {
            f->in[i] = x[i] * f->win[i];
            pw += (double)f->in[i] * f->in[i];
        }
        if (!(pw / N_FFT >= ACTIVE_POWER) || !isfinite(pw)) continue;
        fftwf_execute(f->plan);
        double floor_pw = POWER_FLOOR * pw + 1e-30;
        int64_t slot = (fr / BLOCK_FRAMES) * PHASES + fr % PHASES;
        float *dst = bsum + slot * N_DBINS;
        for (int m = 0; m < N_DBINS; m++) {
            float a = f->out[BIN_LO + m][0], b = f->out[BIN_LO + m][1];
            dst[m] += (float)log((double)a * a + (double)b * b + floor_pw);
        }
        bcount[slot]++;
    }
    /* Slide a window of WINDOW_BLOCKS blocks (the whole input when shorter); windows scoring
     * Z_PRESENT or more are merged into ranges, each decoded from the blocks it covers. */
    sums sm = {t, bsum, bcount};
    int64_t w = n_blocks < WINDOW_BLOCKS ? n_blocks : WINDOW_BLOCKS;
    double z[1 + N_BITS];
    const double sec_per_block = (double)BLOCK_FRAMES * HOP / QVA_SAMPLE_RATE_HZ;
    int64_t run_start = -1;
    double run_z = 0.0;
    for (int64_t b0 = 0; b0 + w <= n_blocks + 1; b0++) {
        double zs = b0 + w <= n_blocks ? score_span(&sm, b0, b0 + w, z) : 0.0;
        int present = zs >= Z_PRESENT;
        if (zs > rep->score) rep->score = zs;
        if (present && run_start < 0) run_start = b0, run_z = zs;
        else if (present && zs > run_z) run_z = zs;
        if (!present && run_start >= 0) {
            int64_t b1 = b0 - 1 + w; /* the run covers blocks [run_start, b1) */
            if (rep->n_ranges < QV_WATERMARK_MAX_RANGES) {
                qv_watermark_range *g = &rep->ranges[rep->n_ranges++];
                score_span(&sm, run_start, b1, z);
                decode(z, g);
                g->start_s = (double)run_start * sec_per_block;
                double end = (double)b1 * sec_per_block + (double)(N_FFT - HOP) / QVA_SAMPLE_RATE_HZ;
                g->end_s = end < rep->seconds ? end : rep->seconds;
                g->score = run_z;
            } else {
                rep->ranges_dropped++;
            }
            run_start = -1;
        }
    }
    /* The whole input as one window: a long file too faint for any 3 s window may still show it. */
    rep->score_all = score_span(&sm, 0, n_blocks, z);
    decode(z, &rep->all);
    rep->all.end_s = rep->seconds;
    rep->all.score = rep->score_all;
    rep->present = rep->n_ranges > 0 || rep->ranges_dropped > 0 || rep->score_all >= Z_PRESENT;
    fft_close(f);
    free(f), free(t), free(bsum), free(bcount);
    return QV_OK;
}

enum qv_status qv_watermark_detect_file(const char *path, double max_seconds,
                                        qv_watermark_report *rep) {
    enum qv_status st = qvu_check_size("qv_watermark_report", rep ? rep->struct_size : 0,
                                       sizeof *rep);
    if (st) return st;
    qva_audio a = {0};
    char err[QVU_DETAIL_SIZE];
    if (qva_audio_load(&a, path, max_seconds, err, sizeof err)) return qvu_fail(QV_E_AUDIO, err);
    st = qv_watermark_detect(a.samples, a.n_samples, rep);
    qva_audio_free(&a);
    return st;
}
