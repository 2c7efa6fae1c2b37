/* palette.c — the emotion palette of a voice (PALT chunk, docs/qvoice-format.md §4.9): named
 * x-vector variants and unit directions, and the one place their arithmetic lives (synthesis and
 * voicefmt use it alike). Norms are computed in double and the result rounded once to f32.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "voicefmt/qvf_impl.h"

static double norm(const float *x, uint32_t n) {
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

int qvf_style_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > QVF_STYLE_NAME_MAX || name[0] < 'a' || name[0] > 'z') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '_' || name[i] == '-'))
            return 0;
    return 1;
}

static int find(const qvf_voice *v, const char *name) {
    for (int i = 0; v && i < v->n_styles; i++)
        if (!strcmp(v->styles[i].name, name)) return i;
    return -1;
}

const qvf_style *qvf_palette_find(const qvf_voice *v, const char *name) {
    const int i = find(v, name);
    return i < 0 ? NULL : &v->styles[i];
}

int qvf_palette_set(qvf_voice *v, const char *name, uint32_t kind, float strength,
                    const float *vec) {
    if (!v || !vec || !v->enc_dim || !qvf_style_name_ok(name) ||
        (kind != QVF_STYLE_VARIANT && kind != QVF_STYLE_DIRECTION) || !(strength > 0) ||
        strength > 4)
        return QVF_E_ARG;
    float *copy = malloc((size_t)v->enc_dim * sizeof *copy);
    if (!copy) return QVF_E_NOMEM;
    memcpy(copy, vec, (size_t)v->enc_dim * sizeof *copy);
    const int at = find(v, name);
    qvf_style *e = at < 0 ? NULL : &v->styles[at];
    if (!e) {
        if (v->n_styles >= QVF_MAX_STYLES) {
            free(copy);
            return QVF_E_LIMIT;
        }
        qvf_style *s = realloc(v->styles, (size_t)(v->n_styles + 1) * sizeof *s);
        if (!s) {
            free(copy);
            return QVF_E_NOMEM;
        }
        v->styles = s;
        e = &s[v->n_styles++];
        memset(e, 0, sizeof *e);
        strcpy(e->name, name);
    }
    free(e->vec);
    e->vec = copy;
    e->kind = kind;
    e->strength = strength;
    return QVF_OK;
}

int qvf_palette_remove(qvf_voice *v, const char *name) {
    const int i = find(v, name);
    if (i < 0) return QVF_E_ARG;
    free(v->styles[i].vec);
    memmove(&v->styles[i], &v->styles[i + 1], (size_t)(v->n_styles - i - 1) * sizeof *v->styles);
    v->n_styles--;
    return QVF_OK;
}

int qvf_style_apply(uint32_t kind, float strength, const float *x, const float *vec, uint32_t dim,
                    float *out) {
    const double s = strength, nx = norm(x, dim), nv = norm(vec, dim);
    if (!(s >= 0 && s <= 4) || nx == 0 || nv == 0 ||
        (kind != QVF_STYLE_VARIANT && kind != QVF_STYLE_DIRECTION))
        return QVF_E_ARG;
    double *y = malloc((size_t)dim * sizeof *y);
    if (!y) return QVF_E_NOMEM;
    double ny = 0;
    for (uint32_t i = 0; i < dim; i++) {
        y[i] = kind == QVF_STYLE_DIRECTION ? x[i] + s * nx * (vec[i] / nv)
                                           : x[i] + s * ((double)vec[i] - x[i]);
        ny += y[i] * y[i];
    }
    ny = sqrt(ny);
    const double want = kind == QVF_STYLE_DIRECTION ? nx : (1 - s) * nx + s * nv;
    const double k = ny > 0 ? want / ny : 0;
    for (uint32_t i = 0; i < dim; i++)
        out[i] = (float)(y[i] * k);
    free(y);
    return QVF_OK;
}

int qvf_style_direction(const float *neutral, const float *emotional, uint32_t dim, float *out,
                        double *shift_ratio) {
    double d = 0;
    for (uint32_t i = 0; i < dim; i++)
        d += ((double)emotional[i] - neutral[i]) * ((double)emotional[i] - neutral[i]);
    d = sqrt(d);
    const double nn = norm(neutral, dim);
    if (d == 0 || nn == 0) return QVF_E_ARG;
    for (uint32_t i = 0; i < dim; i++)
        out[i] = (float)(((double)emotional[i] - neutral[i]) / d);
    if (shift_ratio) *shift_ratio = d / nn;
    return QVF_OK;
}

/* ==== PALT chunk (§4.9) ===================================================================== */

/* 64-byte header (u32 version 1, u32 n, u32 dim, zeros), n 64-byte records (name[32] NUL-padded,
 * u32 kind, f32 strength, zeros), then n vectors f32[dim], each at a multiple of 64. */
uint64_t qvf_palt_len(const qvf_voice *v) {
    return 64 + 64ull * (uint64_t)v->n_styles +
           (uint64_t)v->n_styles * align_up(4ull * v->enc_dim, 64);
}

void qvf_out_palt(qvf_out *o, const qvf_voice *v) {
    const uint64_t start = o->pos;
    qvf_out_put32(o, 1);
    qvf_out_put32(o, (uint32_t)v->n_styles);
    qvf_out_put32(o, v->enc_dim);
    qvf_out_zero(o, 52);
    for (int i = 0; i < v->n_styles; i++) {
        const qvf_style *e = &v->styles[i];
        uint8_t rec[64] = {0};
        memcpy(rec, e->name, strlen(e->name));
        wr32(rec + 32, e->kind);
        uint32_t sb;
        memcpy(&sb, &e->strength, 4);
        wr32(rec + 36, sb);
        qvf_out_write(o, rec, sizeof rec);
    }
    for (int i = 0; i < v->n_styles; i++) {
        qvf_out_write(o, v->styles[i].vec, 4ull * v->enc_dim);
        qvf_out_pad(o, start, 64);
    }
}

int qvf_palt_parse(const qvf_chunk_ctx *c, const uint8_t *p, uint64_t n, qvf_voice *v) {
    if (n < 64)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (minimum 64)",
                        (unsigned long long)n);
    const uint32_t ver = rd32(p), k = rd32(p + 4), d = rd32(p + 8);
    if (ver != 1) return QVF_FAIL(c, QVF_E_VERSION, "palette version %u (expected 1)", ver);
    if (k > QVF_MAX_STYLES)
        return QVF_FAIL(c, QVF_E_LIMIT, "%u entries (maximum %d)", k, QVF_MAX_STYLES);
    if (d != v->enc_dim)
        return QVF_FAIL(c, QVF_E_MISMATCH, "dim %u but the x-vector has %u", d, v->enc_dim);
    if (!qvf_is_zero(p + 12, 52)) return QVF_FAIL(c, QVF_E_RESERVED, "reserved bytes not zero");
    const uint64_t stride = align_up(4ull * d, 64), want = 64 + 64ull * k + k * stride;
    if (n != want)
        return QVF_FAIL(c, QVF_E_CHUNK_SIZE, "payload is %llu bytes (expected %llu)",
                        (unsigned long long)n, (unsigned long long)want);
    if (k && !(v->styles = calloc(k, sizeof *v->styles)))
        return QVF_FAIL(c, QVF_E_NOMEM, "palette");
    for (uint32_t i = 0; i < k; i++) {
        const uint8_t *r = p + 64 + 64ull * i;
        qvf_style *e = &v->styles[i];
        const uint8_t *nul = memchr(r, 0, 32);
        if (!nul || !qvf_is_zero(nul, 32 - (size_t)(nul - r)) || !qvf_is_zero(r + 40, 24))
            return QVF_FAIL(c, QVF_E_RESERVED, "entry %u: name not NUL-padded or reserved bytes",
                            i);
        memcpy(e->name, r, (size_t)(nul - r));
        e->kind = rd32(r + 32);
        uint32_t sb = rd32(r + 36);
        memcpy(&e->strength, &sb, 4);
        if (!qvf_style_name_ok(e->name) || find(v, e->name) >= 0) /* n_styles == i here */
            return QVF_FAIL(c, QVF_E_RANGE, "entry %u: bad or repeated name", i);
        if ((e->kind != QVF_STYLE_VARIANT && e->kind != QVF_STYLE_DIRECTION) ||
            !(e->strength > 0 && e->strength <= 4))
            return QVF_FAIL(c, QVF_E_RANGE, "entry %s: kind %u, strength %g", e->name, e->kind,
                            (double)e->strength);
        const uint8_t *vec = p + 64 + 64ull * k + i * stride;
        if (!qvf_is_zero(vec + 4ull * d, stride - 4ull * d))
            return QVF_FAIL(c, QVF_E_RESERVED, "entry %s: padding not zero", e->name);
        if (!(e->vec = malloc(4ull * d))) return QVF_FAIL(c, QVF_E_NOMEM, "palette");
        memcpy(e->vec, vec, 4ull * d);
        v->n_styles = (int)i + 1; /* counted as filled so qvf_voice_free releases it */
        for (uint32_t j = 0; j < d; j++)
            if (!isfinite(e->vec[j]))
                return QVF_FAIL(c, QVF_E_RANGE, "entry %s: value %u not finite", e->name, j);
    }
    return QVF_OK;
}
