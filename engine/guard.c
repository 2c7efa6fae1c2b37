/* guard.c — runaway guard (see guard.h). Loop detection keeps, per period p, the length of the
 * current stretch where c0 equals c0 p frames back: a pattern of period p repeated k times gives
 * a stretch of (k − 1)·p, so one comparison per period per frame suffices.
 */
#include "engine/guard.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FRAME_HZ 12.5

qve_guard_params qve_guard_default_params(void) {
    qve_guard_params p = {
        .base_frames = 25,
        .frames_per_token = 8.0,
        .max_frames = 0,
        .loop_max_period = QVE_GUARD_MAX_PERIOD,
        .loop_min_frames = 38,
        .loop_min_repeats = 3,
        .silence_dbfs = -55.0,
        .silence_rel_db = 35.0,
        .silence_max_frames = 38,
    };
    return p;
}

int qve_guard_budget(int n_text_tokens, const qve_guard_params *p) {
    double b = p->base_frames + p->frames_per_token * (n_text_tokens > 0 ? n_text_tokens : 0);
    if (b > 1e9) b = 1e9;
    int budget = (int)ceil(b);
    if (p->max_frames > 0 && budget > p->max_frames) budget = p->max_frames;
    return budget < 1 ? 1 : budget;
}

void qve_guard_init(qve_guard *g, int n_text_tokens, const qve_guard_params *p) {
    memset(g, 0, sizeof *g);
    g->p = p ? *p : qve_guard_default_params();
    if (g->p.loop_max_period > QVE_GUARD_MAX_PERIOD) g->p.loop_max_period = QVE_GUARD_MAX_PERIOD;
    g->n_text_tokens = n_text_tokens;
    g->budget_frames = qve_guard_budget(n_text_tokens, &g->p);
    g->loud_dbfs = -INFINITY;
}

static double secs(int frames) {
    return frames / FRAME_HZ;
}

static void silence_step(qve_guard *g, int t, float frame_rms) {
    double db = frame_rms > 0 ? 20.0 * log10(frame_rms) : -200.0;
    int silent = db < g->p.silence_dbfs || db < g->loud_dbfs - g->p.silence_rel_db;
    if (db > g->loud_dbfs) g->loud_dbfs = db;
    if (!silent) {
        g->silent_run = 0;
        return;
    }
    if (g->silent_run++ == 0) g->silence_start = t;
    if (g->silent_run >= g->p.silence_max_frames) {
        g->verdict = QVE_GUARD_SILENCE;
        snprintf(g->msg, sizeof g->msg,
                 "runaway guard: %.2f s of near-silence (frames %d-%d below %.0f dBFS or %.0f dB "
                 "under the loudest frame) without end of speech",
                 secs(g->silent_run), g->silence_start, t, g->p.silence_dbfs, g->p.silence_rel_db);
    }
}

int qve_guard_frame(qve_guard *g, const int32_t codes[16], float frame_rms) {
    if (g->verdict != QVE_GUARD_OK) return g->verdict;
    int t = g->n_frames++;
    if (g->n_frames > g->budget_frames) {
        g->verdict = QVE_GUARD_BUDGET;
        snprintf(g->msg, sizeof g->msg,
                 "runaway guard: no end of speech within the frame budget: %d frames (%.1f s) "
                 "for %d text tokens (budget %d + %.3g/token = %d frames)",
                 g->n_frames, secs(g->n_frames), g->n_text_tokens, g->p.base_frames,
                 g->p.frames_per_token, g->budget_frames);
        return g->verdict;
    }

    const int ring = QVE_GUARD_MAX_PERIOD + 1;
    int32_t c0 = codes[0];
    for (int per = 1; per <= g->p.loop_max_period; per++) {
        int same = t >= per && g->c0[(t - per) % ring] == c0;
        g->run[per] = same ? g->run[per] + 1 : 0;
        int need = g->p.loop_min_repeats * per;
        if (need < g->p.loop_min_frames) need = g->p.loop_min_frames;
        if (same && g->run[per] + per >= need) {
            int span = g->run[per] + per;
            g->verdict = QVE_GUARD_LOOP;
            g->loop_period = per;
            g->loop_start = t + 1 - span;
            snprintf(g->msg, sizeof g->msg,
                     "runaway guard: repeating code loop: a %d-frame c0 pattern repeated %.1f "
                     "times over frames %d-%d (%.2f-%.2f s)",
                     per, (double)span / per, g->loop_start, t, secs(g->loop_start), secs(t + 1));
            return g->verdict;
        }
    }
    g->c0[t % ring] = c0;

    if (!isnan(frame_rms)) silence_step(g, t, frame_rms);
    return g->verdict;
}

int qve_guard_audio(qve_guard *g, const float *wav, int first_frame, int n_frames,
                    int samples_per_frame) {
    if (first_frame == 0) {
        g->silent_run = 0;
        g->loud_dbfs = -INFINITY;
    }
    for (int t = first_frame; t < first_frame + n_frames && g->verdict == QVE_GUARD_OK; t++) {
        const float *x = wav + (size_t)(t - first_frame) * samples_per_frame;
        double s = 0;
        for (int i = 0; i < samples_per_frame; i++)
            s += (double)x[i] * x[i];
        silence_step(g, t, (float)sqrt(s / samples_per_frame));
    }
    return g->verdict;
}

const char *qve_guard_message(const qve_guard *g) {
    return g->msg;
}

const char *qve_guard_verdict_name(int verdict) {
    switch (verdict) {
    case QVE_GUARD_OK:
        return "ok";
    case QVE_GUARD_BUDGET:
        return "budget";
    case QVE_GUARD_LOOP:
        return "loop";
    case QVE_GUARD_SILENCE:
        return "silence";
    default:
        return "?";
    }
}
