/* watermark.c — the inaudible mark in qvoice's output audio and its detector (docs/provenance.md).
 * Spread-transform dither modulation (Chen & Wornell 2001) in a frame-synchronous STFT domain:
 * each 107 ms block of the signal is cut into tiles of one of 12 log-spaced bands × one 10.7 ms
 * frame over 188 Hz – 6.8 kHz; tiles of the same band in neighbouring frames form pairs, and the
 * block's weighted pair differences of log energy, projected on twelve ±1 chip vectors, are
 * moved most of the way to the nearest point of a dithered lattice (informed embedding: the host's
 * own projection is cancelled, not fought). Seven slots of every block carry a known sync symbol,
 * five the payload in a convolutional code. The detector searches the block grid (320 offsets of
 * 8 samples) and the dither phase (4), scores the agreement of the sync projections with their
 * lattice over 3 s windows (each vote weighed by what the input's stationary noise leaves of it),
 * and decodes the payload from the blocks of a marked range: the best words of the code by
 * Viterbi's algorithm, the first whose CRC matches.
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

#define N_FFT 512          /* sqrt-Hann frames, 46.9 Hz bins; hop N_FFT/2 reconstructs exactly */
#define HOP (N_FFT / 2)    /* 10.7 ms */
#define BLOCK_FRAMES 9
/* A block is 10 hops (2560 samples, 107 ms): its 9 frames lie inside it, so neither a block's
 * analysis nor its mark (which fades out with the frames' windows) overlaps another block's. */
#define BLOCK ((BLOCK_FRAMES + 1) * HOP)
#define N_BANDS 12
/* Bands of equal width in log frequency (bin edges 4·(146/4)^(i/12)), but at least 2 bins wide,
 * from 188 Hz to 6.8 kHz (under the 8 kHz a 16 kHz resampling keeps). A band of one bin (188–234
 * Hz) was too unsure a log energy: the frames' position, the mark's spill into the next band and
 * a codec all move it, and the four slots holding its pairs kept 0.66–0.74 of the mark on clean
 * audio against 0.77–0.83 for the others (after MP3 they made most of the payload's bit errors).
 * The bands under 500 Hz are where voiced speech is loudest against added noise and what codecs
 * spend their bits on: they carry most of what survives MP3, noise and Opus (`bench_watermark
 * --channels`, docs/provenance.md). Lower, the band under a low voice's fundamental can be empty,
 * and the mark's spill into it would not be 35 dB under it (espeak-ng's voice: −28.6 dB in the
 * 125 Hz third octave with bands from 141 Hz). A tile is one band of one frame. */
static const int band_edge[N_BANDS + 1] = {4, 6, 8, 11, 14, 18, 24, 33, 44, 59, 80, 108, 146};
#define BIN_LO 4
#define BIN_HI 145
#define N_TILES (N_BANDS * BLOCK_FRAMES)
/* Tiles are paired within a band, frames 2q and 2q + 1 (frame 8 carries nothing): a pair's
 * difference of log energies does not see the band's gain, so a codec's tilt or an equaliser
 * leaves it alone whatever weight the pair gets in its projection. */
#define FRAME_PAIRS (BLOCK_FRAMES / 2)
#define N_PAIRS (N_BANDS * FRAME_PAIRS)
#define N_SLOTS 12         /* projections per block: N_SYNC sync slots, then payload slots */
/* Seven sync slots, five for the payload: with six of each (the payload's code then unpunctured)
 * every 10 s payload was recovered after MP3 and noise, but fewer 3 s excerpts were found
 * (docs/provenance.md). */
#define N_SYNC 7           /* many short sync projections: a 3 s window holds 189 votes */
#define N_PAY (N_SLOTS - N_SYNC)
#define SLOT_PAIRS (N_PAIRS / N_SLOTS) /* 4: one per frame pair, two +1, two -1 */
/* Each slot takes one pair from each quarter of the spectrum (3 bands each), one in each frame
 * pair: every slot holds loud low bands and survives a channel about as well as the others
 * (slots of keyed random pairs, some all high bands, voted less after noise or MP3). */
#define QUARTERS 4
/* A slot's dither takes two points half a step apart, a b b a over PHASES blocks: a projection
 * that does not change (a steady tone) votes exactly 0 over any two blocks, and one that
 * alternates block by block votes 0 over four. Speech whose syllables come every two blocks
 * (4.7 Hz) alternates so: with the dithers alternating, a stretch of espeak-ng's regular en-us
 * scored 5.99; now 4.10. Each phase tried is another chance for unmarked audio to score; a keyed
 * period of 48 blocks put the best of 10,000 unmarked windows 0.4-0.7 higher, which the
 * threshold had to clear (docs/provenance.md). */
#define DITHERS 2 /* a quarter step either side of a lattice point: votes are ±sin */
#define PHASES 4
static int dither_of(int64_t b) {
    return (int)(0x6 >> (b % PHASES) & 1); /* a b b a */
}
#define N_WORD 48          /* 32 payload bits + CRC-16 */
#define N_MOTHER (2 * N_WORD) /* the word in a rate-1/2 convolutional code (below) */
/* 20 blocks (2.1 s) carry the 96 bits of the code once, 4 of them twice: N_CODED symbols. */
#define BIT_BLOCKS 20
#define N_CODED (BIT_BLOCKS * N_PAY)
/* Lattice step of a projection (nepers of tile energy). What bounds the mark's level is the
 * level limiter (below), and MAX_SHIFT on the loud tiles that carry it (the floor below leaves
 * the quiet ones nearly unmoved). */
#define STEP 0.2
/* Distortion compensation (Chen & Wornell 2001, §V): a projection is moved ALPHA of the way to its
 * lattice point, not all of it. The shift a block can take is bounded (MAX_SHIFT), so the lattice
 * is only as fine as that bound allows; moving part of the way lets the step be 1/ALPHA wider for
 * the same shifts, and what a channel adds to a projection then wraps around the lattice less
 * often: more 3 s excerpts are found after noise or MP3, a clean one scores a little less
 * (docs/provenance.md). */
#define ALPHA 0.8
#define KEY 0x71766f6963652d34ull /* "qvoice-4": the public key of the chips and dithers */
/* Blocks whose band energy is under that of −70 dBFS white noise carry no mark (and are not
 * scored): a log energy there says nothing. Σ over frames and band bins of |X|², for unit-
 * variance noise, is frames × bins × Σw² = frames × bins × N_FFT/2. */
#define GATE (1e-7 * BLOCK_FRAMES * (BIN_HI - BIN_LO + 1) * (N_FFT / 2))
/* A tile's log energy is taken over a floor of FLOOR_REL of the block's mean energy per bin
 * (times the tile's bins): tiles 7 dB or more under it, the ones a codec or noise rewrites
 * first, barely count and barely carry the mark. */
#define FLOOR_REL 0.1
/* A pair weighs as much as its weaker tile stands over PAIR_FLOOR floors (10 dB over the floor,
 * half), times bins / (bins + 1) of its band: part of a pair's spread falls with its bins (their
 * energies' own fluctuation), part does not (what a channel changes), and taking the two as
 * equal at one bin weighs the narrow low bands down a little (2 bins: 0.67, 38: 0.97). */
#define PAIR_FLOOR 10.0
/* Bound of a slot's shift (log energy per unit chip; a tile's amplitude changes by at most
 * 5.1 %): a block whose tiles barely answer stays off its lattice rather than get a loud mark.
 * The limiter holds the level; with it, bounds of 0.09-0.12 did alike on the clips after MP3
 * and noise, 0.13 and 0.16 found fewer after MP3 (56 and 55 of 58 3 s excerpts), 0.065 (3.3 %)
 * fewer after MP3 and noise (docs/provenance.md). */
#define MAX_SHIFT 0.10
/* A block is marked once all of it is in; the first block of a stream goes out unmarked. */
_Static_assert(QV_WATERMARK_DELAY == BLOCK, "the public delay is one block");

/* Detector: frames every SUB samples give every block grid offset in SUB steps. A pair's
 * difference of log energies moves with the frames' position at a word's onset: an excerpt 8
 * samples off the grid scores 40 % less, 4 samples off 15 % (16 off: 60 %). */
#define SUB 8
#define PER_HOP (HOP / SUB)
#define WINDOW_BLOCKS 27   /* the blocks a 3 s excerpt holds whole at any offset */
#define MIN_ACTIVE 12      /* scored blocks (1.3 s) a window needs before it says anything */
/* Presence: the best of BLOCK / SUB × PHASES = 320 × 4 = 1280 scores, each about N(0, 1) for
 * unmarked audio (docs/provenance.md: the false-positive runs); marked speech scores 8 or more,
 * after gain or resampling too. */
#define Z_PRESENT QV_WATERMARK_PRESENT
/* Ranges found in longer windows join those of a mark whose grid is within NEAR_STEPS search
 * steps: after a codec the best grid of a window wanders by a few. */
#define NEAR_STEPS 4
/* Presence in a window longer than 3 s: unmarked speech's longer windows scored up to 5.71 (109
 * files of espeak-ng speech, 4.5 min each, and make test's unmarked inputs: 5.60), over more
 * trials than a 3 s excerpt's; a marked minute after Opus 32 kbit/s scores 7.2-14.3 in them. */
#define Z_LONG QV_WATERMARK_PRESENT_LONG
#define MAX_SCALES 12 /* windows up to WINDOW_BLOCKS · 2^11 blocks (1.6 h) */

/* ==== the pattern ============================================================================ */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Pair i (tiles pa[i], pb[i]) belongs to slot pslot[i] with chip psign[i] (both keyed); tile
 * t moves with slot[t] by sign[t] (the pair's chip, negated on its second tile; 0 for frame 8);
 * dither[d][k] in [0, STEP): slot k's dither d (block b takes d = dither_of(b)). */
typedef struct {
    int pa[N_PAIRS], pb[N_PAIRS], pslot[N_PAIRS];
    float psign[N_PAIRS];
    int slot[N_TILES];
    float sign[N_TILES];
    double dither[DITHERS][N_SLOTS];
    float dsign[DITHERS][N_SLOTS]; /* sin(2π·dither/STEP), ±1: the detector's side */
} pattern;

/* a[0..n) = 0..n-1 in a keyed order (Fisher–Yates on the key's stream s). */
static void keyed_order(int *a, int n, uint64_t *s) {
    for (int i = 0; i < n; i++) a[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(splitmix(s) % (uint64_t)(i + 1)), x = a[i];
        a[i] = a[j];
        a[j] = x;
    }
}

static void pattern_make(pattern *p) {
    uint64_t s = KEY;
    int at[N_SLOTS][FRAME_PAIRS]; /* the pair slot k takes in frame pair q */
    memset(p->slot, 0, sizeof p->slot);
    memset(p->sign, 0, sizeof p->sign);
    for (int q = 0; q < FRAME_PAIRS; q++)
        for (int r = 0; r < QUARTERS; r++) {
            int order[N_BANDS / QUARTERS];
            keyed_order(order, N_BANDS / QUARTERS, &s);
            for (int c = 0; c < N_BANDS / QUARTERS; c++) {
                const int band = r * (N_BANDS / QUARTERS) + order[c], i = q * N_BANDS + band;
                const int k = (r - q + QUARTERS) % QUARTERS * (N_BANDS / QUARTERS) + c;
                p->pa[i] = 2 * q * N_BANDS + band, p->pb[i] = p->pa[i] + N_BANDS;
                p->pslot[i] = k, at[k][q] = i;
            }
        }
    /* each slot's chips: two +1 and two -1 in a keyed order (a level that changes steadily
     * through the block moves no projection) */
    for (int k = 0; k < N_SLOTS; k++) {
        int order[FRAME_PAIRS];
        keyed_order(order, FRAME_PAIRS, &s);
        for (int q = 0; q < FRAME_PAIRS; q++) {
            const int i = at[k][q];
            p->psign[i] = order[q] < FRAME_PAIRS / 2 ? 1.0f : -1.0f;
            p->slot[p->pa[i]] = p->slot[p->pb[i]] = k;
            p->sign[p->pa[i]] = p->psign[i], p->sign[p->pb[i]] = -p->psign[i];
        }
    }
    /* A slot's dithers are the DITHERS equally spaced points of [0, STEP) in a keyed order. */
    for (int k = 0; k < N_SLOTS; k++) {
        int order[DITHERS];
        keyed_order(order, DITHERS, &s);
        for (int b = 0; b < DITHERS; b++) {
            p->dither[b][k] = STEP * (order[b] + 0.5) / DITHERS;
            p->dsign[b][k] = order[b] ? -1.0f : 1.0f; /* sin(π/2), sin(3π/2) */
        }
    }
}

/* CRC-16/CCITT (0x1021, init 0xffff) of the 4 bytes, most significant first. */
static uint16_t crc16(uint32_t v) {
    uint16_t crc = 0xffff;
    for (int i = 3; i >= 0; i--) {
        crc ^= (uint16_t)((v >> (8 * i)) & 0xff) << 8;
        for (int b = 0; b < 8; b++) crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

/* The 48-bit word: the payload, then its CRC-16; bit i of the word is bit 47 − i here. */
static uint64_t word_of(uint32_t payload) { return (uint64_t)payload << 16 | crc16(payload); }

static int word_bit(uint64_t word, int i) { return (int)(word >> (N_WORD - 1 - i) & 1); }

/* The payload's code: convolutional, rate 1/2, K = 7, generators 133 and 171 (octal), the
 * standard pair with free distance 10; tail-biting (the encoder starts in the state the word ends
 * in), so the word needs no tail and every bit is as well protected. In place of the word
 * repeated every 0.85 s with its CRC checked alone, the 10 s payloads recovered after MP3 went
 * from 85 % to 99 % (the clips and six espeak-ng voices, docs/provenance.md). */
#define CODE_K 7
#define CODE_STATES (1 << (CODE_K - 1))
static const int code_gen[2] = {0133, 0171};

/* The two coded bits of input bit b in state s (the 6 bits before it, the latest highest). */
static int code_out(int s, int b, int j) {
    return __builtin_parity((unsigned)((b << (CODE_K - 1) | s) & code_gen[j]));
}

/* The code bit the j-th symbol of the period sends (every 25th is sent twice). */
static int mother_bit(int j) { return j * N_MOTHER / N_CODED; }

/* The N_MOTHER code bits of a word (any 48 bits, its CRC met or not). */
static void code_mother(uint64_t word, unsigned char mother[N_MOTHER]) {
    int s = 0;
    for (int i = N_WORD - (CODE_K - 1); i < N_WORD; i++)
        s = s >> 1 | word_bit(word, i) << (CODE_K - 2);
    for (int i = 0; i < N_WORD; i++) {
        const int b = word_bit(word, i);
        mother[2 * i] = (unsigned char)code_out(s, b, 0);
        mother[2 * i + 1] = (unsigned char)code_out(s, b, 1);
        s = s >> 1 | b << (CODE_K - 2);
    }
}

/* The N_CODED symbols of a payload's word. */
static void code_word(uint32_t payload, unsigned char coded[N_CODED]) {
    unsigned char mother[N_MOTHER];
    code_mother(word_of(payload), mother);
    for (int j = 0; j < N_CODED; j++) coded[j] = mother[mother_bit(j)];
}

/* The period's N_CODED payload places (block b mod BIT_BLOCKS, slot k) hold its symbols
 * interleaved: place i holds symbol i · INTERLEAVE mod N_CODED, so symbol j lies at place
 * j · 79 mod 100, about 4 blocks from symbol j − 1. A convolutional code corrects scattered
 * errors, not bursts, and what a channel loses comes in runs of blocks (a pause, a loud second of
 * noise, a consonant a codec smears): in code order, one block lost 5 of any 14 consecutive
 * symbols (the 7 input bits a code bit depends on) and three blocks all 14. Interleaved, a run of
 * 1, 2, 3, 4 or 6 blocks loses at most 1, 2, 3, 3 or 5 of any 14, the least any multiplier
 * coprime with 100 gives (19, 43, 57 and 81 tie; 19 recovered the most payloads of 6 s
 * excerpts of the four, docs/provenance.md). The map is linear: a period that starts 4 blocks
 * later moves every symbol by the same amount, so the decoder still tries the period's starts as
 * rotations of the symbols. */
#define INTERLEAVE 19

/* The symbol payload slot k (N_SYNC..) of pattern block b carries. */
static int bit_index(int64_t b, int k) {
    return (int)(((b % BIT_BLOCKS) * N_PAY + k - N_SYNC) * INTERLEAVE % N_CODED);
}

/* The symbol slot k of block b carries: 0 for sync, a coded bit for the payload. */
static int symbol(const unsigned char coded[N_CODED], int64_t b, int k) {
    return k < N_SYNC ? 0 : coded[bit_index(b, k)];
}

/* Projections of a block's tile energies e[N_TILES] (Σ|X|² per tile, frame-major) on the slots'
 * chips: Σ chip · w · (log(e_a + f) − log(e_b + f)) / √(2 Σ w²) over the slot's pairs, f the floor
 * FLOOR_REL of the block's mean energy per bin times the band's bins (empty and quiet tiles stay
 * finite and barely count), w = e_min / (e_min + PAIR_FLOOR·f) of the pair's weaker tile, times
 * bins / (bins + 1): a pair noise or a codec rewrites (its weaker tile near the floor) barely
 * counts, so the loud pairs' agreement is not drowned. With sens, each tile's d log(e + f) / d log e: the share of a shift
 * the tile's projection sees; with rel, each slot's RMS pair weight, how far its projection can
 * be trusted (the detector weighs its vote by it), times, with noise (the input's stationary
 * noise per tile of each band), what that noise leaves of a vote: exp(−2π²σ²/STEP²), the mean
 * cos of a lattice phase blurred by σ, σ² = Σ w² (v_a + v_b) / Σ w² over the slot's pairs and v =
 * (2c + c²) / bins for a tile whose energy is 1/c times the noise's, the variance noise adds to a
 * log energy (clamped at c = 1). Noise-filled blocks then barely vote instead of voting as loud
 * as speech (after white noise at 20 dB SNR, 3 s excerpts of the clips found 36/58 -> 47/58,
 * docs/provenance.md). 0 when the block is under GATE (nothing to say), else 1. */
static int project(const pattern *p, const double *e, double proj[N_SLOTS], float *sens,
                   float *rel, const double *noise) {
    double sum = 0.0, w2[N_SLOTS] = {0}, v2[N_SLOTS] = {0};
    for (int k = 0; k < N_SLOTS; k++) proj[k] = 0.0;
    for (int k = 0; k < N_SLOTS && rel; k++) rel[k] = 0.0f;
    for (int t = 0; t < N_TILES; t++) sum += e[t];
    if (!(sum >= GATE) || !isfinite(sum)) return 0;
    const double fl = FLOOR_REL * sum / (BLOCK_FRAMES * (BIN_HI - BIN_LO + 1));
    for (int i = 0; i < N_PAIRS; i++) {
        const int a = p->pa[i], b = p->pb[i], band = a % N_BANDS;
        const int bins = band_edge[band + 1] - band_edge[band];
        const double f = fl * bins;
        const double lo = e[a] < e[b] ? e[a] : e[b];
        const double w = lo / (lo + PAIR_FLOOR * f) * bins / (bins + 1.0);
        proj[p->pslot[i]] += p->psign[i] * w * log((e[a] + f) / (e[b] + f));
        w2[p->pslot[i]] += 2.0 * w * w;
        if (noise) {
            double ca = noise[band] / e[a], cb = noise[band] / e[b];
            ca = ca < 1.0 ? ca : 1.0, cb = cb < 1.0 ? cb : 1.0; /* a libm call costs more */
            v2[p->pslot[i]] += w * w * (2.0 * (ca + cb) + ca * ca + cb * cb) / bins;
        }
    }
    for (int k = 0; k < N_SLOTS; k++) proj[k] = w2[k] > 0.0 ? proj[k] / sqrt(w2[k]) : 0.0;
    for (int k = 0; k < N_SLOTS && rel; k++)
        rel[k] = (float)(sqrt(w2[k] / (2.0 * SLOT_PAIRS)) *
                         (w2[k] > 0.0 ? exp(-2.0 * M_PI * M_PI / (STEP * STEP) * 2.0 * v2[k] / w2[k])
                                      : 0.0));
    for (int t = 0; t < N_TILES && sens; t++) {
        const double f = fl * (band_edge[t % N_BANDS + 1] - band_edge[t % N_BANDS]);
        sens[t] = (float)(e[t] / (e[t] + f));
    }
    return 1;
}


/* Σ |X|² over each band of a spectrum. */
static void band_energies(const fftwf_complex *c, double e[N_BANDS]) {
    for (int b = 0; b < N_BANDS; b++) {
        e[b] = 0.0;
        for (int m = band_edge[b]; m < band_edge[b + 1]; m++)
            e[b] += (double)c[m][0] * c[m][0] + (double)c[m][1] * c[m][1];
    }
}

static void sqrt_hann(float *w) {
    for (int i = 0; i < N_FFT; i++) w[i] = (float)sqrt(0.5 - 0.5 * cos(2.0 * M_PI * i / N_FFT));
}

/* ==== embedding ============================================================================= */

/* A block's spectra sit SPEC_STRIDE apart: FFTW's new-array execute wants the plan's
 * alignment. */
#define SPEC_STRIDE (N_FFT / 2 + 8)

/* The level limiter. The tiles' gains change frame by frame, so each harmonic of a voice gets
 * sidebands ±47 Hz away; where a voice's harmonics lie further apart than a third octave is wide
 * (under about 500 Hz for a high voice), a sideband can fall in a band that holds little else,
 * and MAX_SHIFT alone left the mark 25-31 dB under espeak-ng's voices there. So in every third
 * octave the mark is held LVL_LIMIT under the speech, as a budget over about 10 s (leaky sums
 * kept LVL_KEEP a block: the level is a measure over a signal, not a block): a block may add
 * LVL_LIMIT × the speech's sum less the mark's sum. Energies are kept per bin of a 2560-point
 * spectrum (9.4 Hz), from two Hann windows a block: one on the block, one across its start (the
 * previous block's second half and its first): Hann windows half a block apart weigh every
 * sample alike, and the mark is not spread evenly over its block (under 190 Hz, a third of it
 * lies in the block's first 30 %; a measure of the block's own window alone read 2 dB low there).
 * A band is every run of bins that a third octave placed anywhere holds whole (from a bin lo, the
 * runs up to each bin some third octave from (lo − 1, lo] ends in; LVL_MIN_BINS at the least),
 * and a bin's gain is the least of its bands'. LVL_LIMIT is 0.5 dB under the goal: a measurement's
 * bins and windows fall elsewhere than these (test_mark_level reads up to 0.2 dB more). */
#define LVL_LIMIT 2.818e-4 /* −35.5 dB */
#define LVL_KEEP 0.99
#define LVL_MIN_BINS 3   /* under 125 Hz the bands are 3 bins (28 Hz) at the least */
#define LVL_BINS (BLOCK / 2 + 1)
#define LVL_RUNS 3       /* bands from each bin, at most: a third octave's top can fall in 3 bins */

struct qv_watermark {
    unsigned char coded[N_CODED]; /* the payload's code */
    int64_t block;              /* blocks complete so far (the first one passed unmarked) */
    int n_in;                   /* samples of the current block taken (held in x after the first) */
    float x[BLOCK];             /* the block's input */
    float y[BLOCK];             /* x with the block's mark: what the detector will see */
    float mark[BLOCK];
    pattern pat;
    float win[N_FFT];
    float *in, *out;
    fftwf_complex *spec, *mod;
    fftwf_plan fwd, inv;
    /* the level limiter: the leaky sums of the speech's and the mark's energy per bin of BLOCK's
     * spectrum, their running totals (scratch), the previous block's second half (speech, mark)
     * and the n_lvl bands: band i holds bins lvl_lo[i] to lvl_hi[i] − 1 */
    double lvl_host[LVL_BINS], lvl_mark[LVL_BINS], cum_host[LVL_BINS + 1], cum_mark[LVL_BINS + 1];
    float prev_x[BLOCK / 2], prev_mark[BLOCK / 2];
    int n_lvl, lvl_lo[LVL_RUNS * LVL_BINS], lvl_hi[LVL_RUNS * LVL_BINS];
    float ramp[BLOCK]; /* Σ of the frames' windows squared: 1, fading at the block's ends */
    float *lvl_in;
    fftwf_complex *lvl_spec;
    fftwf_plan lvl_fwd, lvl_inv;
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

void qv_watermark_free(qv_watermark *w) {
    if (!w) return;
    qva_fft_destroy(w->fwd);
    qva_fft_destroy(w->inv);
    fftwf_free(w->in);
    fftwf_free(w->out);
    fftwf_free(w->spec);
    fftwf_free(w->mod);
    qva_fft_destroy(w->lvl_fwd);
    qva_fft_destroy(w->lvl_inv);
    fftwf_free(w->lvl_in);
    fftwf_free(w->lvl_spec);
    free(w);
}

/* The limiter's bands: from each bin lo, the runs lo..h that hold whole the third octaves
 * [f, f·2^(1/3)] starting in (lo − 1, lo] (in bins), h from ⌊(lo − 1)·2^(1/3)⌋ to ⌊lo·2^(1/3)⌋. */
static void lvl_bands(qv_watermark *w) {
    w->n_lvl = 0;
    for (int lo = 0; lo < LVL_BINS - 1; lo++) {
        const int top = (int)floor(lo * cbrt(2.0)) + 1;
        for (int hi = (int)floor((lo - 1) * cbrt(2.0)) + 1, last = 0; hi <= top; hi++) {
            int h = hi < lo + LVL_MIN_BINS ? lo + LVL_MIN_BINS : hi;
            if (h > LVL_BINS - 1) h = LVL_BINS - 1;
            if (h == last) continue; /* the same run again */
            w->lvl_lo[w->n_lvl] = lo < 1 ? 1 : lo, w->lvl_hi[w->n_lvl++] = last = h;
        }
    }
}

enum qv_status qv_watermark_new(qv_watermark **out, uint32_t payload) {
    *out = NULL;
    if (!(payload & QV_WATERMARK_SYNTHETIC)) /* the detector takes the flag as known */
        return qvu_failf(QV_E_INVALID, "watermark: payload %08x lacks the synthetic flag (%08x)",
                         payload, QV_WATERMARK_SYNTHETIC);
    qv_watermark *w = calloc(1, sizeof *w);
    if (!w) return qvu_fail(QV_E_NOMEM, "watermark: out of memory");
    w->in = fftwf_alloc_real(N_FFT);
    w->out = fftwf_alloc_real(N_FFT);
    w->spec = fftwf_alloc_complex(BLOCK_FRAMES * SPEC_STRIDE);
    w->mod = fftwf_alloc_complex(N_FFT / 2 + 1);
    w->fwd = w->in && w->spec ? qva_fft_plan_r2c(N_FFT, 1, w->in, w->spec) : NULL;
    w->inv = w->mod && w->out ? qva_fft_plan_c2r(N_FFT, w->mod, w->out) : NULL;
    w->lvl_in = fftwf_alloc_real(BLOCK);
    w->lvl_spec = fftwf_alloc_complex(BLOCK / 2 + 1);
    if (w->lvl_in && w->lvl_spec) {
        w->lvl_fwd = qva_fft_plan_r2c(BLOCK, 1, w->lvl_in, w->lvl_spec);
        w->lvl_inv = qva_fft_plan_c2r(BLOCK, w->lvl_spec, w->lvl_in);
    }
    if (!w->fwd || !w->inv || !w->lvl_fwd || !w->lvl_inv)
        return qv_watermark_free(w), qvu_fail(QV_E_NOMEM, "watermark: out of memory");
    code_word(payload, w->coded);
    pattern_make(&w->pat);
    sqrt_hann(w->win);
    lvl_bands(w);
    for (int j = 0; j < BLOCK_FRAMES; j++)
        for (int i = 0; i < N_FFT; i++) w->ramp[j * HOP + i] += w->win[i] * w->win[i];
    *out = w;
    return QV_OK;
}

/* Tile energies of the block's frames of src into e; the spectra stay in w->spec. */
static void block_tiles(qv_watermark *w, const float *src, double e[N_TILES]) {
    memset(e, 0, N_TILES * sizeof *e);
    for (int j = 0; j < BLOCK_FRAMES; j++) {
        for (int i = 0; i < N_FFT; i++) w->in[i] = src[j * HOP + i] * w->win[i];
        fftwf_complex *c = w->spec + j * SPEC_STRIDE;
        fftwf_execute_dft_r2c(w->fwd, w->in, c);
        band_energies(c, e + j * N_BANDS);
    }
}

/* Adds the energies per bin of lvl_in's Hann-windowed spectrum to e; lvl_in's own spectrum stays
 * in lvl_spec (a Hann window's spectrum is the rectangular one smoothed by −1/4, 1/2, −1/4). */
static void lvl_add(qv_watermark *w, double *e) {
    fftwf_execute_dft_r2c(w->lvl_fwd, w->lvl_in, w->lvl_spec);
    const fftwf_complex *c = w->lvl_spec;
    for (int k = 1; k < LVL_BINS - 1; k++) {
        const double re = 0.5 * c[k][0] - 0.25 * ((double)c[k - 1][0] + c[k + 1][0]);
        const double im = 0.5 * c[k][1] - 0.25 * ((double)c[k - 1][1] + c[k + 1][1]);
        e[k] += re * re + im * im;
    }
}

/* The limiter's energies per bin of the block src (whose previous block ended in prev): its
 * window across the blocks' joint, then its own, whose spectrum stays in lvl_spec. */
static void lvl_energies(qv_watermark *w, const float *prev, const float *src, double e[LVL_BINS]) {
    memset(e, 0, LVL_BINS * sizeof *e);
    memcpy(w->lvl_in, prev, BLOCK / 2 * sizeof *prev);
    memcpy(w->lvl_in + BLOCK / 2, src, BLOCK / 2 * sizeof *src);
    lvl_add(w, e);
    memcpy(w->lvl_in, src, BLOCK * sizeof *src);
    lvl_add(w, e);
}

/* Scales w->mark down where a band has no room left (the limiter above) and fades it out with
 * the frames' windows again, so that it stays inside its block. e: the mark's energies per bin,
 * as they were when it returns 0, stale when it returns 1 (the mark was scaled). */
static int limit_mark(qv_watermark *w, double e[LVL_BINS]) {
    double cum[LVL_BINS + 1];
    float g[LVL_BINS];
    lvl_energies(w, w->prev_mark, w->mark, e);
    cum[0] = 0.0;
    for (int k = 0; k < LVL_BINS; k++) cum[k + 1] = cum[k] + e[k], g[k] = 1.0f;
    int any = 0;
    for (int i = 0; i < w->n_lvl; i++) {
        const int lo = w->lvl_lo[i], hi = w->lvl_hi[i];
        const double eb = cum[hi] - cum[lo];
        const double room = LVL_LIMIT * (w->cum_host[hi] - w->cum_host[lo]) -
                            (w->cum_mark[hi] - w->cum_mark[lo]);
        if (eb <= room) continue;
        const float a = room > 0.0 ? (float)sqrt(room / eb) : 0.0f;
        for (int k = lo - 1; k <= hi; k++) g[k] = fminf(g[k], a); /* with the Hann's reach */
        any = 1;
    }
    if (!any) return 0;
    fftwf_complex *c = w->lvl_spec;
    for (int k = 0; k < LVL_BINS; k++) c[k][0] *= g[k] / BLOCK, c[k][1] *= g[k] / BLOCK;
    fftwf_execute_dft_c2r(w->lvl_inv, c, w->lvl_in);
    for (int i = 0; i < BLOCK; i++) w->mark[i] = w->lvl_in[i] * w->ramp[i];
    return 1;
}

/* w->mark from the host spectra: each tile of the frames scaled by exp(shift[slot] · sign / 2)
 * (shift: log energy per unit chip), as a difference, overlap-added with the frames' windows,
 * then limited (e and the result: limit_mark's). */
static int synth_mark(qv_watermark *w, const fftwf_complex *host, const double shift[N_SLOTS],
                      const float *sens, double e[LVL_BINS]) {
    float g[N_TILES]; /* amplitude factor − 1 of each tile */
    for (int t = 0; t < N_TILES; t++)
        g[t] = (float)expm1(0.5 * shift[w->pat.slot[t]] * w->pat.sign[t] * sens[t]);
    memset(w->mark, 0, sizeof w->mark);
    for (int j = 0; j < BLOCK_FRAMES; j++) {
        const fftwf_complex *c = host + j * SPEC_STRIDE;
        memset(w->mod, 0, (N_FFT / 2 + 1) * sizeof *w->mod);
        for (int b = 0; b < N_BANDS; b++)
            for (int m = band_edge[b]; m < band_edge[b + 1]; m++) {
                w->mod[m][0] = g[j * N_BANDS + b] * c[m][0];
                w->mod[m][1] = g[j * N_BANDS + b] * c[m][1];
            }
        fftwf_execute(w->inv);
        for (int i = 0; i < N_FFT; i++) w->mark[j * HOP + i] += w->out[i] * w->win[i] / N_FFT;
    }
    return limit_mark(w, e);
}

/* Marks the full block in w->x into out[BLOCK]: each slot's projection goes ALPHA of the way to
 * the nearest point of its symbol's lattice. The projection's response to a shift is nearly
 * linear; two secant steps, each measured on the block as the detector will see it, settle it. */
static void mark_block(qv_watermark *w, float *out) {
    double e[N_TILES], p0[N_SLOTS], p[N_SLOTS], target[N_SLOTS], shift[N_SLOTS];
    block_tiles(w, w->x, e);
    memset(w->mark, 0, sizeof w->mark);
    float sens[N_TILES];
    if (project(&w->pat, e, p0, sens, NULL, NULL)) {
        double e_lvl[LVL_BINS];
        lvl_energies(w, w->prev_x, w->x, e_lvl);
        w->cum_host[0] = w->cum_mark[0] = 0.0;
        for (int k = 0; k < LVL_BINS; k++) {
            w->lvl_host[k] = LVL_KEEP * w->lvl_host[k] + e_lvl[k], w->lvl_mark[k] *= LVL_KEEP;
            w->cum_host[k + 1] = w->cum_host[k] + w->lvl_host[k];
            w->cum_mark[k + 1] = w->cum_mark[k] + w->lvl_mark[k];
        }
        fftwf_complex host[BLOCK_FRAMES * SPEC_STRIDE];
        memcpy(host, w->spec, sizeof host);
        for (int k = 0; k < N_SLOTS; k++) {
            double t = w->pat.dither[dither_of(w->block)][k] +
                       0.5 * STEP * symbol(w->coded, w->block, k);
            target[k] = p0[k] + ALPHA * (t + STEP * nearbyint((p0[k] - t) / STEP) - p0[k]);
            /* first guess; the secant steps below correct it */
            shift[k] = 1.5 * (target[k] - p0[k]) / sqrt(2.0 * SLOT_PAIRS);
        }
        for (int it = 0; it < 2; it++) {
            synth_mark(w, host, shift, sens, e_lvl);
            memcpy(w->y, w->x, sizeof w->y);
            for (int i = 0; i < BLOCK; i++) w->y[i] += w->mark[i];
            block_tiles(w, w->y, e);
            if (!project(&w->pat, e, p, NULL, NULL, NULL)) break;
            for (int k = 0; k < N_SLOTS; k++) /* secant through (0, p0) and (shift, p) */
                if (fabs(p[k] - p0[k]) > 1e-9) {
                    shift[k] *= (target[k] - p0[k]) / (p[k] - p0[k]);
                    shift[k] = fmax(-MAX_SHIFT, fmin(MAX_SHIFT, shift[k]));
                }
        }
        if (synth_mark(w, host, shift, sens, e_lvl)) lvl_energies(w, w->prev_mark, w->mark, e_lvl);
        for (int k = 0; k < LVL_BINS; k++) w->lvl_mark[k] += e_lvl[k];
    }
    for (int i = 0; i < BLOCK; i++) out[i] = w->x[i] + w->mark[i];
    memcpy(w->prev_x, w->x + BLOCK / 2, sizeof w->prev_x);
    memcpy(w->prev_mark, w->mark + BLOCK / 2, sizeof w->prev_mark);
    w->n_in = 0;
    w->block++;
}

/* Takes n input samples from pcm and writes to out the samples that are final; returns how many.
 * The first block goes out as it comes, unmarked: a stream's first audio waits for nothing, and
 * the detector, which scores 27-block windows, loses one block of the first. Later samples wait
 * until their block is complete. Blocks are cut and marked the same whatever the calls' sizes.
 * out may be pcm when no samples are held at the call (each write lands on samples read). */
static int64_t run(qv_watermark *w, const float *pcm, int64_t n, float *out) {
    int64_t at = 0, out_at = 0;
    if (w->block == 0) {
        at = out_at = BLOCK - w->n_in < n ? BLOCK - w->n_in : n;
        memmove(out, pcm, (size_t)at * sizeof *pcm);
        w->n_in += (int)at;
        if (w->n_in == BLOCK) w->n_in = 0, w->block = 1;
    }
    while (at < n) {
        int m = BLOCK - w->n_in;
        if (m > n - at) m = (int)(n - at);
        memcpy(w->x + w->n_in, pcm + at, (size_t)m * sizeof *pcm);
        w->n_in += m;
        at += m;
        if (w->n_in == BLOCK) {
            mark_block(w, out + out_at);
            out_at += BLOCK;
        }
    }
    return out_at;
}

int64_t qv_watermark_apply(qv_watermark *w, const float *pcm, int64_t n_samples, float *out) {
    return n_samples > 0 ? run(w, pcm, n_samples, out) : 0;
}

/* The held samples of the last block, marked with zeros after them (as a whole signal ends). */
int qv_watermark_flush(qv_watermark *w, float tail[QV_WATERMARK_DELAY]) {
    const int n = w->block == 0 ? 0 : w->n_in;
    if (n == 0) return 0;
    memset(w->x + n, 0, (size_t)(BLOCK - n) * sizeof *w->x);
    mark_block(w, tail);
    return n;
}

enum qv_status qv_watermark_mark(uint32_t payload, float *pcm, int64_t n_samples) {
    if (!pcm || n_samples < 0) return qvu_fail(QV_E_INVALID, "watermark: no samples");
    qv_watermark *w;
    enum qv_status st = qv_watermark_new(&w, payload);
    if (st) return st;
    const int64_t done = run(w, pcm, n_samples, pcm); /* a new marker holds nothing: in place */
    float tail[BLOCK];
    const int k = qv_watermark_flush(w, tail);
    memcpy(pcm + done, tail, (size_t)k * sizeof *pcm);
    qv_watermark_free(w);
    return QV_OK;
}

/* ==== detection ============================================================================= */

qv_watermark_report qv_watermark_default_report(void) {
    return (qv_watermark_report){.struct_size = sizeof(qv_watermark_report)};
}

/* The block grids whose offsets (in samples) are base + j · HOP (0 <= base < HOP, j = 0 ..
 * GRID_OFFSETS − 1): their frames all fall on one lattice of hops, so one pass of FFTs serves
 * them all. Per offset j and block m of [f0, f1): the slots' projections and their weights, and
 * whether the block was loud enough to score. The detector fills the bases one after the other:
 * its memory stays that of 10 offsets, not of all 320. */
#define GRID_OFFSETS (BLOCK / HOP)
typedef struct {
    int64_t n_blocks;          /* per offset */
    int base;                  /* the offsets filled, -1 none */
    int64_t f0, f1;            /* the blocks filled */
    float *proj;               /* [GRID_OFFSETS][n_blocks][N_SLOTS]: sin(2π·projection/STEP) */
    float *rel;                /* [GRID_OFFSETS][n_blocks][N_SLOTS]: the projection's weight (0: silent) */
    unsigned char *active;     /* [GRID_OFFSETS][n_blocks] */
    float *in, win[N_FFT];
    fftwf_complex *out;
    fftwf_plan plan;
    double noise[N_BANDS]; /* the input's stationary noise per tile of each band (noise_floor) */
} grid;

/* Where slot k's projection of block m at offset o sits against the lattice of symbol 0 under
 * dither phase ph, times the projection's weight: cos(2π(projection − dither)/STEP), +1 on the
 * lattice, −1 half a step off (symbol 1). The weight is set by the block's own energies, never by
 * the projection, so unmarked audio still votes cos of a uniform phase: mean 0, variance 1/2.
 * The two dithers lie a quarter and three quarters of a step on, where the cos is ±sin(2π ·
 * projection/STEP): the grid keeps that sine alone and the dither gives its sign. */
static double lattice_cos(const grid *g, const pattern *p, int64_t i, int64_t m, int ph, int k) {
    const float d = p->dsign[dither_of(m + ph)][k];
    return (double)g->rel[i * N_SLOTS + k] * g->proj[i * N_SLOTS + k] * d;
}

/* Sync agreement of block m at offset o under dither phase ph: Σ weighted cos against the sync
 * lattices. */
static double vote(const grid *g, const pattern *p, int o, int64_t m, int ph) {
    const int64_t i = (int64_t)o * g->n_blocks + m;
    double v = 0.0;
    for (int k = 0; k < N_SYNC && g->active[i]; k++) v += lattice_cos(g, p, i, m, ph, k);
    return v;
}

/* Σ of the squared weights of block m's sync votes: twice their variance on unmarked audio. */
static double vote_w2(const grid *g, int o, int64_t m) {
    const float *r = g->rel + ((int64_t)o * g->n_blocks + m) * N_SLOTS;
    double q = 0.0;
    for (int k = 0; k < N_SYNC; k++) q += (double)r[k] * r[k];
    return q;
}

/* The sync term of a span's score from its Σ votes s, Σ squared weights q and n scored blocks:
 * s / sqrt(q/2), about N(0, 1) for unmarked audio; 0 with fewer than MIN_ACTIVE scored blocks, or
 * when the weights are all but 0 (q under Q_MIN: a sliding sum's rounding would then be the
 * score). */
#define Q_MIN 1e-6
static double window_z(double s, double q, int64_t n) {
    return n >= MIN_ACTIVE && q >= Q_MIN ? s / sqrt(0.5 * q) : 0.0;
}

/* A span's sums: sync votes s and their squared weights q, scored blocks n; per symbol of the
 * code its soft sum (bit) and the Σ of its squared weights (bq), each cosine weighted by 1 + the
 * weighted mean of its block's sync cosines (0 to 2): seven known symbols say how well a block
 * kept the mark through a channel (more 10 s payloads after MP3 and noise, docs/provenance.md). */
typedef struct {
    double s, q;
    int64_t n;
    double bit[N_CODED], bq[N_CODED];
} tally;

static void span_tally(const grid *g, const pattern *p, int o, int ph, int64_t m0, int64_t m1,
                       tally *t) {
    memset(t, 0, sizeof *t);
    for (int64_t m = m0; m < m1; m++) {
        const int64_t i = (int64_t)o * g->n_blocks + m;
        if (!g->active[i]) continue; /* its weights are 0 */
        t->n++;
        double v = 0.0, rs = 0.0;
        for (int k = 0; k < N_SYNC; k++) {
            const double c = lattice_cos(g, p, i, m, ph, k), r = g->rel[i * N_SLOTS + k];
            v += c, rs += r, t->q += r * r;
        }
        t->s += v;
        const double kept = rs > 0.0 ? 1.0 + v / rs : 0.0; /* |v| <= rs */
        for (int k = N_SYNC; k < N_SLOTS; k++) {
            const double c = lattice_cos(g, p, i, m, ph, k), r = g->rel[i * N_SLOTS + k];
            const int b = bit_index(m + ph, k);
            t->bit[b] += kept * c, t->bq[b] += kept * kept * r * r;
        }
    }
}

/* The sync term of blocks [m0, m1) at offset o and phase ph. */
static double span_score(const grid *g, const pattern *p, int o, int ph, int64_t m0, int64_t m1) {
    tally t;
    span_tally(g, p, o, ph, m0, m1, &t);
    return window_z(t.s, t.q, t.n);
}

/* The decoder's list: the words whose code agrees best with the soft symbols, in that order; the
 * first of the LIST_WORDS best (over the period's 5 starts) whose CRC-16 matches is the payload.
 * The best word alone (Viterbi's decision) missed the payload of 10 s excerpts whose soft symbols
 * had one error event more than the code corrects and the next words did not: after MP3
 * 356/362 -> 360/362, after noise at 20 dB 349 -> 357 (the clips and six espeak-ng voices,
 * docs/provenance.md). A wrong word passes a CRC-16 with probability 2^-16, so one of the list
 * passes with probability LIST_WORDS / 2^16 = 1.5e-4 where the true word is not in it. */
#define LIST_WORDS 10
#define CANDIDATES (N_WORD * CODE_STATES)

/* Candidate words for soft symbols soft[N_MOTHER] (+: 0, −: 1; 0 for a bit not heard): Viterbi's
 * algorithm around the circle twice from all states alike (the start state of a tail-biting code
 * is not known; the first turn settles it), and from every state at every step of the second
 * turn, the best path into it read back one turn: the best word, and each word that
 * leaves it in one error event ending there. Words whose bit 0, the synthetic flag, is 0 are left
 * out. The count. */
static int candidates(const double *soft, uint64_t word[CANDIDATES]) {
    enum { TURNS = 2, STEPS = TURNS * N_WORD };
    double m[CODE_STATES] = {0}, next[CODE_STATES];
    unsigned char from[STEPS][CODE_STATES]; /* the predecessor's lowest bit, per step and state */
    for (int t = 0; t < STEPS; t++) {
        const double *y = soft + 2 * (t % N_WORD);
        for (int n = 0; n < CODE_STATES; n++) {
            const int b = n >> (CODE_K - 2); /* the input bit that leads into state n */
            double best = -INFINITY;
            from[t][n] = 0; /* a state no path reaches (the flag taken as 1) is still read back */
            for (int low = 0; low < 2; low++) {
                const int s = (n << 1 & (CODE_STATES - 1)) | low;
                const double v = m[s] + (code_out(s, b, 0) ? -y[0] : y[0]) +
                                 (code_out(s, b, 1) ? -y[1] : y[1]);
                if (v > best) best = v, from[t][n] = (unsigned char)low;
            }
            next[n] = t % N_WORD == 0 && !b ? -INFINITY : best;
        }
        memcpy(m, next, sizeof m);
    }
    int count = 0;
    for (int t0 = N_WORD; t0 < STEPS; t0++)
        for (int n = 0; n < CODE_STATES; n++) {
            uint64_t w = 0;
            for (int t = t0, s = n; t > t0 - N_WORD; t--) {
                w |= (uint64_t)(s >> (CODE_K - 2)) << (N_WORD - 1 - t % N_WORD);
                s = (s << 1 & (CODE_STATES - 1)) | from[t][s];
            }
            if (word_bit(w, 0)) word[count++] = w;
        }
    return count;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A candidate: a word, its code's agreement with the soft symbols, the period's start. */
typedef struct {
    double agree;
    uint64_t word;
    int rot;
} candidate;

/* Keeps the LIST_WORDS best of list[*n] with c, best first. */
static void list_add(candidate *list, int *n, candidate c) {
    int i = *n < LIST_WORDS ? (*n)++ : LIST_WORDS;
    if (i == LIST_WORDS && c.agree <= list[LIST_WORDS - 1].agree) return;
    if (i == LIST_WORDS) i--;
    for (; i > 0 && list[i - 1].agree < c.agree; i--) list[i] = list[i - 1];
    list[i] = c;
}

/* The payload of blocks [m0, m1) at offset o and phase ph, from the tally's soft symbols. The
 * dither phase fixes which slots carry one symbol, not which: the period may start in any of
 * BIT_BLOCKS / PHASES = 5 blocks, and each start's candidates go in one list. Only where the
 * mark is present. payload_score: how far the soft symbols agree with the payload's code, in
 * standard deviations of unmarked audio's agreement with a given code. */
static void decode(const grid *g, const pattern *p, int o, int ph, int64_t m0, int64_t m1,
                   qv_watermark_range *r) {
    tally t;
    span_tally(g, p, o, ph, m0, m1, &t);
    r->payload_ok = 0, r->payload = 0, r->payload_score = 0.0;
    double q = 0.0;
    for (int i = 0; i < N_CODED; i++) {
        if (t.bq[i] <= 0.0) return; /* a symbol no block carried: too little to say */
        q += t.bq[i];
    }
    candidate list[LIST_WORDS];
    int n_list = 0;
    for (int rot = 0; rot < BIT_BLOCKS / PHASES; rot++) {
        const int shift = rot * PHASES * N_PAY;
        double soft[N_MOTHER] = {0};
        for (int i = 0; i < N_CODED; i++) soft[mother_bit((i + shift) % N_CODED)] += t.bit[i];
        uint64_t word[CANDIDATES];
        const int n = candidates(soft, word);
        qsort(word, (size_t)n, sizeof *word, cmp_u64);
        for (int i = 0; i < n; i++) {
            if (i > 0 && word[i] == word[i - 1]) continue;
            unsigned char mother[N_MOTHER];
            code_mother(word[i], mother);
            double agree = 0.0;
            for (int j = 0; j < N_MOTHER; j++) agree += mother[j] ? -soft[j] : soft[j];
            list_add(list, &n_list, (candidate){agree, word[i], rot});
        }
    }
    for (int i = 0; i < n_list; i++) {
        const uint32_t v = (uint32_t)(list[i].word >> 16);
        if (word_of(v) != list[i].word) continue;
        const int shift = list[i].rot * PHASES * N_PAY;
        unsigned char code[N_CODED];
        code_word(v, code);
        double agree = 0.0;
        for (int k = 0; k < N_CODED; k++) agree += code[(k + shift) % N_CODED] ? -t.bit[k] : t.bit[k];
        r->payload_ok = 1, r->payload = v, r->payload_score = agree / sqrt(0.5 * q);
        return;
    }
}

/* The band energies of the frame of N_FFT samples at x (non-finite samples taken as 0). */
static void frame_bands(grid *g, const float *x, double e[N_BANDS]) {
    for (int i = 0; i < N_FFT; i++) g->in[i] = isfinite(x[i]) ? x[i] * g->win[i] : 0.0f;
    fftwf_execute(g->plan);
    band_energies(g->out, e);
}

/* Fills g with the offsets base + j · HOP over blocks [f0, f1): frames every HOP from base, their
 * tile energies summed into the blocks of each offset, each finished block projected. */
static void grid_fill(grid *g, const pattern *p, const float *pcm, int64_t n, int base, int64_t f0,
                      int64_t f1) {
    double acc[GRID_OFFSETS][N_TILES];
    const int64_t cells = GRID_OFFSETS * g->n_blocks;
    memset(g->rel, 0, (size_t)(cells * N_SLOTS) * sizeof *g->rel);
    memset(g->active, 0, (size_t)cells);
    g->base = base, g->f0 = f0, g->f1 = f1;
    /* frame k is frame jf of block m at grid offset j when k = j + GRID_OFFSETS · m + jf */
    for (int64_t k = GRID_OFFSETS * f0;
         k < GRID_OFFSETS * f1 + BLOCK_FRAMES - 1 && base + k * HOP + N_FFT <= n; k++) {
        double e[N_BANDS];
        frame_bands(g, pcm + base + k * HOP, e);
        for (int j = 0; j < GRID_OFFSETS && j <= k; j++) {
            const int64_t m = (k - j) / GRID_OFFSETS;
            const int jf = (int)((k - j) % GRID_OFFSETS);
            if (jf >= BLOCK_FRAMES || m < f0) continue;
            memcpy(acc[j] + jf * N_BANDS, e, sizeof e);
            if (jf != BLOCK_FRAMES - 1 || m >= f1) continue;
            const int64_t i = (int64_t)j * g->n_blocks + m;
            double pr[N_SLOTS];
            g->active[i] =
                (unsigned char)project(p, acc[j], pr, NULL, g->rel + i * N_SLOTS, g->noise);
            for (int s = 0; s < N_SLOTS; s++)
                g->proj[i * N_SLOTS + s] = (float)sin(2.0 * M_PI * pr[s] / STEP);
        }
    }
}

static void grid_free(grid *g) {
    qva_fft_destroy(g->plan);
    fftwf_free(g->in), fftwf_free(g->out);
    free(g->proj), free(g->rel), free(g->active);
}

/* g filled at sample offset off over blocks [m0, m1); returns off's index in it. */
static int grid_at(grid *g, const pattern *p, const float *pcm, int64_t n, int off, int64_t m0,
                   int64_t m1) {
    if (g->base != off % HOP || g->f0 > m0 || g->f1 < m1) grid_fill(g, p, pcm, n, off % HOP, m0, m1);
    return off / HOP;
}

/* The sample offset, within half a search step of o · SUB, where blocks [m0, m1) score best:
 * a pair's difference of log energies is sensitive to where the frames fall, and the payload
 * is read there. */
static int refine(grid *g, const pattern *p, const float *pcm, int64_t n, int o, int ph,
                  int64_t m0, int64_t m1) {
    int off = o * SUB;
    double top = span_score(g, p, grid_at(g, p, pcm, n, off, m0, m1), ph, m0, m1);
    for (int d = -SUB / 2; d <= SUB / 2; d += 2) {
        const int at = o * SUB + d;
        if (d == 0 || at < 0 || at >= BLOCK) continue;
        const double z = span_score(g, p, grid_at(g, p, pcm, n, at, m0, m1), ph, m0, m1);
        if (z > top) top = z, off = at;
    }
    return off;
}

/* The windows of a range reach up to a window's length past the marked blocks at each end. The
 * marked stretch is the run of blocks [m0, m1) maximising Σ (vote − half the range's mean
 * vote): marked blocks gain, unmarked ones (mean vote 0) lose. Kept when it holds MIN_ACTIVE
 * blocks or more. */
static void trim(const grid *g, const pattern *p, int o, int ph, int64_t *m0, int64_t *m1) {
    double mean = 0.0;
    for (int64_t m = *m0; m < *m1; m++) mean += vote(g, p, o, m, ph);
    const double c = 0.5 * mean / (double)(*m1 - *m0);
    double run = 0.0, top = -INFINITY;
    int64_t start = *m0, b0 = *m0, b1 = *m1;
    for (int64_t m = *m0; m < *m1; m++) {
        if (run <= 0.0) run = 0.0, start = m;
        run += vote(g, p, o, m, ph) - c;
        if (run > top) top = run, b0 = start, b1 = m + 1;
    }
    if (b1 - b0 >= MIN_ACTIVE) *m0 = b0, *m1 = b1;
}

/* Whether two windows' best trials (o · PHASES + phase) are one mark: the same phase, grids at
 * most `steps` search steps apart. The grid wraps: a block of offset BLOCK / SUB − 1 lies next to
 * the following block of offset 0, whose pattern block is the same when the phase is one more,
 * so offsets near both ends are as near as the wrap makes them. */
static int same_mark(int a, int b, int steps) {
    const int oa = a / PHASES, ob = b / PHASES, n = BLOCK / SUB;
    if (a % PHASES == b % PHASES) return abs(oa - ob) <= steps;
    return (oa + n - ob <= steps && b % PHASES == (a % PHASES + 1) % PHASES) ||
           (ob + n - oa <= steps && a % PHASES == (b % PHASES + 1) % PHASES);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The input's stationary noise per tile of each band: the NOISE_QUANTILE of its frames' band
 * energies (the quietest 2 %: pauses, where only the noise is left; in clean speech nearly 0,
 * which changes nothing). Only an input with pauses has a floor to tell from its signal: when its
 * quietest frames (all bands) are within NOISE_GAP of its median frame, it is taken as all
 * signal, noise 0 (a marked steady sound, or noise-like output, would otherwise weigh its own
 * votes away). Nor is a floor that is not steady, as noise is: the quietest 0.5 % of frames more
 * than NOISE_STEADY under the quietest 2 % are a fade or an onset (a steady output 4.5 s long
 * whose first 100 ms fade in took the fade as its noise, and its every vote was weighed to 0).
 * 0, or -1 when out of memory. */
#define NOISE_QUANTILE 0.02
#define NOISE_GAP 0.2     /* 7 dB */
#define NOISE_STEADY 0.35 /* 4.6 dB */
static int noise_floor(grid *g, const float *pcm, int64_t n) {
    const int64_t nf = (n - N_FFT) / HOP + 1; /* n >= MIN_ACTIVE blocks */
    float *be = malloc((size_t)nf * (N_BANDS + 1) * sizeof *be), *tot;
    if (!be) return -1;
    tot = be + nf * N_BANDS; /* each frame's energy over all bands */
    for (int64_t k = 0; k < nf; k++) {
        double e[N_BANDS];
        frame_bands(g, pcm + k * HOP, e);
        tot[k] = 0.0f;
        for (int b = 0; b < N_BANDS; b++) be[b * nf + k] = (float)e[b], tot[k] += (float)e[b];
    }
    const int64_t q = (int64_t)(NOISE_QUANTILE * (double)(nf - 1));
    qsort(tot, (size_t)nf, sizeof *tot, cmp_float);
    const int pauses = tot[q] < NOISE_GAP * tot[nf / 2] && tot[q / 4] > NOISE_STEADY * tot[q];
    for (int b = 0; b < N_BANDS; b++) {
        qsort(be + b * nf, (size_t)nf, sizeof *be, cmp_float);
        g->noise[b] = pauses ? be[b * nf + q] : 0.0;
    }
    free(be);
    return 0;
}

static void range_times(int off, int64_t m0, int64_t m1, double seconds, qv_watermark_range *r) {
    r->start_s = (double)(off + m0 * BLOCK) / QVA_SAMPLE_RATE_HZ;
    double end = (double)(off + m1 * BLOCK) / QVA_SAMPLE_RATE_HZ;
    r->end_s = end < seconds ? end : seconds;
}

/* A marked range found: its best window's trial (o · PHASES + phase) and score, its windows'
 * length w and the blocks [m0, m1) its windows cover on that trial's grid. */
typedef struct {
    int at;
    int64_t m0, m1, w;
    double score, score3; /* its best window's; its best 3 s window's (0: none) */
} span;

/* Windows of w blocks (n_win of them, best[i] the best score of the one from block i, best_at[i]
 * its trial) at z or more merge into ranges, added to sp[*n_sp] up to cap; the count of those
 * past it. A range of windows longer than 3 s is trimmed to its marked blocks here (its windows
 * reach far past them, and merged with others it would be trimmed among unmarked blocks). */
static int find_ranges(grid *g, const pattern *p, const float *pcm, int64_t n_samples,
                       const double *best, const int *best_at, int64_t n_win, int64_t w, double z,
                       span *sp, int *n_sp, int cap) {
    int dropped = 0;
    for (int64_t i = 0; i < n_win;) {
        if (best[i] < z) {
            i++;
            continue;
        }
        /* A dip under z shorter than a window (at the edge of a mark, the windows that
         * still hold part of it) does not end the range; a window found at another mark's trial
         * does, dip or not: another dither phase, or a grid more than a search step away (two
         * outputs joined). */
        int64_t j = i, top = i, gap = 0;
        for (; j < n_win && gap < w; j++) {
            if (best[j] >= z && !same_mark(best_at[j], best_at[top], 1)) break;
            gap = best[j] >= z ? 0 : gap + 1;
            if (best[j] > best[top]) top = j;
        }
        j -= gap;
        if (*n_sp < cap) {
            span *r = &sp[(*n_sp)++];
            *r = (span){.at = best_at[top], .score = best[top], .w = w, .m0 = i, .m1 = j - 1 + w,
                        .score3 = w > WINDOW_BLOCKS ? 0.0 : best[top]};
            if (w > WINDOW_BLOCKS)
                trim(g, p, grid_at(g, p, pcm, n_samples, r->at / PHASES * SUB, r->m0, r->m1),
                     r->at % PHASES, &r->m0, &r->m1);
        } else {
            dropped++;
        }
        i = j;
    }
    return dropped;
}

static int64_t span_start(const span *r) { return r->at / PHASES * SUB + r->m0 * BLOCK; }
static int64_t span_end(const span *r) { return r->at / PHASES * SUB + r->m1 * BLOCK; }

static int span_cmp(const void *a, const void *b) {
    const int64_t x = span_start(a), y = span_start(b);
    return x < y ? -1 : x > y;
}

/* The ranges of every scale as one list, sp[n] (shortest windows first) in place: a range that
 * overlaps another mark's range found in shorter windows is left out (those tell two outputs
 * apart more closely); ranges of one mark that overlap or lie less than the longer one's window
 * apart, one of them found in longer windows than 3 s, are one (the pieces of a long stretch that
 * a codec left under presence in places). In order of time; the count. */
static int merge_spans(span *sp, int n) {
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int keep = 1;
        for (int j = 0; j < kept && keep; j++)
            keep = !(sp[j].w < sp[i].w && !same_mark(sp[j].at, sp[i].at, NEAR_STEPS) &&
                     span_start(&sp[j]) < span_end(&sp[i]) &&
                     span_start(&sp[i]) < span_end(&sp[j]));
        if (keep) sp[kept++] = sp[i];
    }
    qsort(sp, (size_t)kept, sizeof *sp, span_cmp);
    int out = 0;
    for (int i = 0; i < kept; i++) {
        span *r = &sp[out];
        if (out > 0 && same_mark(sp[out - 1].at, sp[i].at, NEAR_STEPS) &&
            (sp[out - 1].w > WINDOW_BLOCKS || sp[i].w > WINDOW_BLOCKS)) {
            span *q = &sp[out - 1];
            const int64_t w = q->w > sp[i].w ? q->w : sp[i].w;
            if (span_start(&sp[i]) < span_end(q) + w * BLOCK) {
                const int64_t end = span_end(&sp[i]) > span_end(q) ? span_end(&sp[i]) : span_end(q);
                q->m1 = (end - q->at / PHASES * SUB + BLOCK - 1) / BLOCK, q->w = w;
                if (sp[i].score > q->score) q->score = sp[i].score;
                if (sp[i].score3 > q->score3) q->score3 = sp[i].score3;
                continue;
            }
        }
        *r = sp[i], out++;
    }
    return out;
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
    rep->all.end_s = rep->seconds;
    grid g = {.n_blocks = n_samples / BLOCK, .base = -1};
    if (g.n_blocks < MIN_ACTIVE) return QV_OK; /* under 1.3 s: nothing to say */
    if ((uint64_t)g.n_blocks > SIZE_MAX / (GRID_OFFSETS * N_SLOTS * 2 * sizeof(float)))
        return qvu_failf(QV_E_LIMIT, "watermark: %lld samples: too many", (long long)n_samples);
    pattern *p = malloc(sizeof *p);
    g.proj = calloc((size_t)(GRID_OFFSETS * g.n_blocks * N_SLOTS), sizeof *g.proj);
    g.rel = calloc((size_t)(GRID_OFFSETS * g.n_blocks * N_SLOTS), sizeof *g.rel);
    g.active = calloc((size_t)(GRID_OFFSETS * g.n_blocks), 1);
    g.in = fftwf_alloc_real(N_FFT);
    g.out = fftwf_alloc_complex(N_FFT / 2 + 1);
    g.plan = g.in && g.out ? qva_fft_plan_r2c(N_FFT, 1, g.in, g.out) : NULL;
    sqrt_hann(g.win);
    /* Windows of WINDOW_BLOCKS · 2^s blocks, s = 0 .. n_scales - 1: a longer one where the input
     * holds two of it (as the whole input), so that a long marked stretch whose 3 s windows a
     * codec left under presence is still found where it is. */
    int n_scales = 1;
    while (n_scales < MAX_SCALES && (int64_t)WINDOW_BLOCKS << (n_scales + 1) <= g.n_blocks)
        n_scales++;
    int64_t w[MAX_SCALES], n_win[MAX_SCALES], total = 0;
    for (int s = 0; s < n_scales; s++) {
        w[s] = g.n_blocks < (int64_t)WINDOW_BLOCKS << s ? g.n_blocks : (int64_t)WINDOW_BLOCKS << s;
        n_win[s] = g.n_blocks - w[s] + 1, total += n_win[s];
    }
    double *best = calloc((size_t)total, sizeof *best);    /* per scale and window start: best */
    int *best_at = calloc((size_t)total, sizeof *best_at); /* score, and its o·PHASES + phase */
    double *vb = malloc((size_t)g.n_blocks * sizeof *vb);    /* one offset and phase's votes */
    double *qb = malloc((size_t)g.n_blocks * sizeof *qb);    /* and their squared weights */
    if (!p || !g.proj || !g.rel || !g.active || !g.plan || !best || !best_at || !vb || !qb ||
        noise_floor(&g, pcm, n_samples)) {
        grid_free(&g), free(p), free(best), free(best_at), free(vb), free(qb);
        return qvu_failf(QV_E_NOMEM, "watermark: out of memory for %.1f s of audio", rep->seconds);
    }
    pattern_make(p);
    /* Sliding sums of sync votes, squared weights and active counts over each scale's windows,
     * for every offset and phase (each vote computed once); the whole input is scored as one
     * span alongside. */
    int all_at = 0;
    rep->score_all = 0.0;
    for (int r = 0; r < PER_HOP; r++) {
        grid_fill(&g, p, pcm, n_samples, r * SUB, 0, g.n_blocks);
        for (int j = 0; j < GRID_OFFSETS; j++) {
            const unsigned char *act = g.active + (int64_t)j * g.n_blocks;
            double q_all = 0.0;
            int64_t n_all = 0;
            for (int64_t m = 0; m < g.n_blocks; m++) /* the weights do not depend on the phase */
                qb[m] = vote_w2(&g, j, m), q_all += qb[m], n_all += act[m];
            for (int ph = 0; ph < PHASES; ph++) {
                const int at = (r + PER_HOP * j) * PHASES + ph;
                double s_all = 0.0;
                for (int64_t m = 0; m < g.n_blocks; m++) vb[m] = vote(&g, p, j, m, ph), s_all += vb[m];
                double *bs = best;
                int *ba = best_at;
                for (int k = 0; k < n_scales; bs += n_win[k], ba += n_win[k], k++) {
                    double s = 0.0, q = 0.0;
                    int64_t n = 0;
                    for (int64_t m = 0; m < g.n_blocks; m++) {
                        s += vb[m], q += qb[m], n += act[m];
                        if (m >= w[k]) s -= vb[m - w[k]], q -= qb[m - w[k]], n -= act[m - w[k]];
                        if (m < w[k] - 1) continue;
                        const double z = window_z(s, q, n);
                        if (z > bs[m - w[k] + 1]) bs[m - w[k] + 1] = z, ba[m - w[k] + 1] = at;
                    }
                }
                const double z_all = window_z(s_all, q_all, n_all);
                if (z_all > rep->score_all) rep->score_all = z_all, all_at = at;
            }
        }
    }
    for (int64_t i = 0; i < n_win[0]; i++)
        if (best[i] > rep->score) rep->score = best[i];
    /* Windows at presence merge into ranges, in each scale, then over the scales; each range is
     * trimmed to its marked blocks and decoded at its best window's grid. */
    span sp[MAX_SCALES * QV_WATERMARK_MAX_RANGES];
    int n_sp = 0;
    const double *bs = best;
    const int *ba = best_at;
    for (int k = 0; k < n_scales; bs += n_win[k], ba += n_win[k], k++) {
        const int dropped = find_ranges(&g, p, pcm, n_samples, bs, ba, n_win[k], w[k],
                                        k ? Z_LONG : Z_PRESENT, sp, &n_sp,
                                        n_sp + QV_WATERMARK_MAX_RANGES);
        if (k == 0) rep->ranges_dropped = dropped;
    }
    n_sp = merge_spans(sp, n_sp);
    for (int i = 0; i < n_sp; i++) {
        if (rep->n_ranges == QV_WATERMARK_MAX_RANGES) {
            rep->ranges_dropped++;
            continue;
        }
        qv_watermark_range *r = &rep->ranges[rep->n_ranges++];
        const int ph = sp[i].at % PHASES;
        int64_t m0 = sp[i].m0, m1 = sp[i].m1 < g.n_blocks ? sp[i].m1 : g.n_blocks;
        const int off = refine(&g, p, pcm, n_samples, sp[i].at / PHASES, ph, m0, m1);
        const int k = grid_at(&g, p, pcm, n_samples, off, m0, m1);
        trim(&g, p, k, ph, &m0, &m1);
        decode(&g, p, k, ph, m0, m1, r);
        range_times(off, m0, m1, rep->seconds, r);
        r->score = sp[i].score3 > 0.0 ? sp[i].score3 : sp[i].score;
    }
    /* The whole input says more than its windows only when it holds two of them or more; as one
     * more set of trials on a short input it would only add false positives. */
    rep->present = rep->n_ranges > 0 || rep->ranges_dropped > 0 ||
                   (rep->score_all >= Z_PRESENT && g.n_blocks >= 2 * WINDOW_BLOCKS);
    /* The whole input as one range: decoded only where a mark is present, so that unmarked audio
     * never shows a payload (a CRC passes by chance 1 time in 6,500). */
    if (rep->present) {
        const int ph = all_at % PHASES;
        const int off = refine(&g, p, pcm, n_samples, all_at / PHASES, ph, 0, g.n_blocks);
        decode(&g, p, grid_at(&g, p, pcm, n_samples, off, 0, g.n_blocks), ph, 0, g.n_blocks, &rep->all);
    }
    rep->all.end_s = rep->seconds;
    rep->all.score = rep->score_all;
    grid_free(&g), free(p), free(best), free(best_at), free(vb), free(qb);
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
