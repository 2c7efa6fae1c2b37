/* sampler.c — the reference's logits processing and sampling (§3.6: HF generate with repetition
 * penalty, min_new_tokens, suppress_tokens, then temperature, top-k, top-p, multinomial).
 *
 * Sampling is single-threaded over logits that the kernels compute bit-identically for any thread
 * count, with a seeded xoshiro256** stream: a seed fixes the output on every machine run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"

/* ==== RNG ==================================================================================== */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void qve_rng_seed(qve_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(qve_rng *r) {
    uint64_t *s = r->s;
    const uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double qve_rng_uniform(qve_rng *r) {
    return (double)(next_u64(r) >> 11) * 0x1.0p-53;
}

/* ==== logits processing ====================================================================== */

void qve_talker_logits_process(float *logits, int vocab, const uint8_t *seen, float penalty,
                               int n_generated, int eos_id) {
    if (penalty != 1.0f) /* RepetitionPenaltyLogitsProcessor: once per distinct token */
        for (int i = 0; i < vocab; i++)
            if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / penalty : logits[i] * penalty;
    if (n_generated < 2) logits[eos_id] = -INFINITY; /* min_new_tokens = 2 */
    for (int i = vocab - 1024; i < vocab; i++)
        if (i != eos_id && i >= 0) logits[i] = -INFINITY;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The k-th largest of x[n] (1 <= k <= n), x reordered: quickselect, the value a descending sort
 * would put at k - 1 (the code predictor's top-k ran a full qsort of 2048 logits 15 times per
 * frame). */
static float kth_largest(float *x, int n, int k) {
    int lo = 0, hi = n - 1;
    const int t = k - 1;
    while (lo < hi) {
        const float p = x[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (x[i] > p)
                i++;
            while (x[j] < p)
                j--;
            if (i <= j) {
                float v = x[i];
                x[i++] = x[j];
                x[j--] = v;
            }
        }
        if (t <= j)
            hi = j;
        else if (t >= i)
            lo = i;
        else
            break;
    }
    return x[t];
}

static int cmp_idx_asc(const void *a, const void *b, void *keys) {
    int i = *(const int *)a, j = *(const int *)b;
    float x = ((const float *)keys)[i], y = ((const float *)keys)[j];
    if (x != y) return (x > y) - (x < y);
    return (i > j) - (i < j);
}

int qve_sample(float *logits, int n, const qve_sample_params *p, qve_rng *rng, float *work,
               int *work_idx) {
    if (!p->do_sample || p->temperature <= 0) return argmax(logits, n);
    if (p->temperature != 1.0f)
        for (int i = 0; i < n; i++)
            logits[i] /= p->temperature;
    if (p->top_k > 0 && p->top_k < n) { /* TopKLogitsWarper: keep >= k-th largest (ties kept) */
        memcpy(work, logits, (size_t)n * sizeof(float));
        const float kth = kth_largest(work, n, p->top_k);
        for (int i = 0; i < n; i++)
            if (logits[i] < kth) logits[i] = -INFINITY;
    }
    const float mx = logits[argmax(logits, n)];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        work[i] = logits[i] == -INFINITY ? 0.0f : expf(logits[i] - mx);
        sum += work[i];
    }
    if (p->top_p < 1.0f) { /* TopPLogitsWarper: drop the low tail whose mass is <= 1 - top_p */
        for (int i = 0; i < n; i++)
            work_idx[i] = i;
        qsort_r(work_idx, (size_t)n, sizeof(int), cmp_idx_asc, logits);
        double cum = 0;
        for (int r = 0; r < n - 1; r++) {
            int i = work_idx[r];
            cum += work[i] / sum;
            if (cum > 1.0 - p->top_p) break;
            work[i] = 0;
        }
        sum = 0;
        for (int i = 0; i < n; i++)
            sum += work[i];
    }
    const double u = qve_rng_uniform(rng) * sum;
    double acc = 0;
    int last = argmax(logits, n);
    for (int i = 0; i < n; i++) {
        if (work[i] <= 0) continue;
        acc += work[i];
        last = i;
        if (acc > u) return i;
    }
    return last;
}
