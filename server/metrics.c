/* metrics.c — counters and histograms behind GET /metrics (Prometheus text format 0.0.4). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

#define ROUTE_NAME_(name, text) text,
static const char *const route_names[] = {ROUTE_LIST(ROUTE_NAME_)};
#undef ROUTE_NAME_

static void hist_init(histogram *h, const double *le) {
    memset(h, 0, sizeof *h);
    memcpy(h->le, le, sizeof h->le);
}

static void hist_add(histogram *h, double v) {
    int i = 0;
    while (i < N_BUCKETS && v > h->le[i])
        i++;
    h->count[i]++;
    h->n++;
    h->sum += v;
}

void qvs_metrics_init(metrics *m) {
    static const double rtf_le[N_BUCKETS] = {0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30};
    static const double ttfa_le[N_BUCKETS] = {0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5, 10, 30};
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    hist_init(&m->rtf, rtf_le);
    hist_init(&m->ttfa_s, ttfa_le);
}

void qvs_metrics_request(metrics *m, enum route r, int status) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < N_STATUS_SLOTS; i++) {
        if (m->status[r][i] == 0) m->status[r][i] = status;
        if (m->status[r][i] == status) {
            m->requests[r][i]++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

void qvs_metrics_synth(metrics *m, const qv_synth_stats *st) {
    pthread_mutex_lock(&m->mu);
    m->audio_seconds += st->audio_seconds;
    if (st->n_samples > 0) {
        hist_add(&m->rtf, st->rtf);
        hist_add(&m->ttfa_s, st->first_audio_s);
    }
    pthread_mutex_unlock(&m->mu);
}

static void out(bytes *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(bytes *b, const char *fmt, ...) {
    char line[2048]; /* the longest call below is ~900 bytes */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) qvs_bytes_add(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void hist_out(bytes *b, const char *name, const char *help, const histogram *h) {
    out(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < N_BUCKETS; i++) {
        cum += h->count[i];
        out(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    out(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
        (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
}

char *qvs_metrics_render(metrics *m, int active, int queued, int64_t batch_steps,
                         int64_t batch_frames, const ref_stats *refs) {
    bytes b = {0};
    pthread_mutex_lock(&m->mu);
    out(&b, "# HELP qvoice_requests_total HTTP requests by route and status.\n"
            "# TYPE qvoice_requests_total counter\n");
    for (int r = 0; r < ROUTE_COUNT; r++)
        for (int i = 0; i < N_STATUS_SLOTS && m->status[r][i]; i++)
            out(&b, "qvoice_requests_total{route=\"%s\",status=\"%d\"} %llu\n", route_names[r],
                m->status[r][i], (unsigned long long)m->requests[r][i]);
    out(&b, "# HELP qvoice_errors_total HTTP requests answered with status >= 400 by route.\n"
            "# TYPE qvoice_errors_total counter\n");
    for (int r = 0; r < ROUTE_COUNT; r++) {
        uint64_t n = 0;
        for (int i = 0; i < N_STATUS_SLOTS && m->status[r][i]; i++)
            if (m->status[r][i] >= 400) n += m->requests[r][i];
        out(&b, "qvoice_errors_total{route=\"%s\"} %llu\n", route_names[r], (unsigned long long)n);
    }
    out(&b,
        "# HELP qvoice_stream_errors_total Streamed responses cut short after their 200.\n"
        "# TYPE qvoice_stream_errors_total counter\nqvoice_stream_errors_total %llu\n"
        "# HELP qvoice_guard_failures_total Syntheses ended by the runaway guard.\n"
        "# TYPE qvoice_guard_failures_total counter\nqvoice_guard_failures_total %llu\n"
        "# HELP qvoice_cancelled_total Syntheses cancelled by a disconnect or the time limit.\n"
        "# TYPE qvoice_cancelled_total counter\nqvoice_cancelled_total %llu\n"
        "# HELP qvoice_slow_clients_total Connections cut: request not received in time.\n"
        "# TYPE qvoice_slow_clients_total counter\nqvoice_slow_clients_total %llu\n"
        "# HELP qvoice_audio_seconds_total Audio delivered.\n"
        "# TYPE qvoice_audio_seconds_total counter\nqvoice_audio_seconds_total %.3f\n",
        (unsigned long long)m->stream_errors, (unsigned long long)m->guard_failures,
        (unsigned long long)m->cancelled, (unsigned long long)m->slow_cut, m->audio_seconds);
    hist_out(&b, "qvoice_rtf", "Real-time factor of syntheses (wall / audio).", &m->rtf);
    hist_out(&b, "qvoice_time_to_first_audio_seconds",
             "Start of synthesis to the first audio block.", &m->ttfa_s);
    pthread_mutex_unlock(&m->mu);
    out(&b,
        "# HELP qvoice_active_sessions Syntheses running.\n# TYPE qvoice_active_sessions gauge\n"
        "qvoice_active_sessions %d\n"
        "# HELP qvoice_queued_sessions Requests waiting for a synthesis slot.\n"
        "# TYPE qvoice_queued_sessions gauge\nqvoice_queued_sessions %d\n"
        "# HELP qvoice_batch_steps_total Batched frame steps (frames / steps = mean batch).\n"
        "# TYPE qvoice_batch_steps_total counter\nqvoice_batch_steps_total %lld\n"
        "# HELP qvoice_batch_frames_total Frames produced by batched frame steps.\n"
        "# TYPE qvoice_batch_frames_total counter\nqvoice_batch_frames_total %lld\n",
        active, queued, (long long)batch_steps, (long long)batch_frames);
    out(&b,
        "# HELP qvoice_ref_cache_hits_total Per-request references found in the cache.\n"
        "# TYPE qvoice_ref_cache_hits_total counter\nqvoice_ref_cache_hits_total %llu\n"
        "# HELP qvoice_ref_cache_misses_total Per-request references cloned (not cached).\n"
        "# TYPE qvoice_ref_cache_misses_total counter\nqvoice_ref_cache_misses_total %llu\n"
        "# HELP qvoice_ref_cache_evictions_total References evicted to keep the byte bound.\n"
        "# TYPE qvoice_ref_cache_evictions_total counter\nqvoice_ref_cache_evictions_total %llu\n"
        "# HELP qvoice_ref_cache_bytes Bytes of cached reference voices.\n"
        "# TYPE qvoice_ref_cache_bytes gauge\nqvoice_ref_cache_bytes %zu\n"
        "# HELP qvoice_ref_cache_entries Cached reference voices.\n"
        "# TYPE qvoice_ref_cache_entries gauge\nqvoice_ref_cache_entries %d\n",
        (unsigned long long)refs->hits, (unsigned long long)refs->misses,
        (unsigned long long)refs->evictions, refs->n_bytes, refs->n_entries);
    if (qvs_bytes_add(&b, "", 1)) {
        free(b.p);
        return NULL;
    }
    return (char *)b.p;
}
