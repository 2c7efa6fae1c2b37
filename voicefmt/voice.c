/* voice.c — the in-memory voice: lifecycle, META access, error texts and small shared helpers.
 * Everything a qvf_voice points to is owned by it except tensor data borrowed from the file mapping
 * (backing_), so one qvf_voice_free releases all of it.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "util/sha256.h"
#include "voicefmt/qvf_impl.h"

#define QVF_TEXT_(name, text) text,
#define QVF_NAME_(name, text) "QVF_E_" #name,
static const char *const error_texts[] = {QVF_ERRORS(QVF_TEXT_)};
static const char *const error_names[] = {QVF_ERRORS(QVF_NAME_)};

const char *qvf_strerror(int code) {
    return code >= 0 && code < QVF_E_COUNT_ ? error_texts[code] : "unknown error";
}
const char *qvf_errname(int code) {
    return code >= 0 && code < QVF_E_COUNT_ ? error_names[code] : "QVF_E_?";
}
const char *qvf_version(void) {
    return QVF_VERSION_STRING;
}

int qvf_fail(char *err, size_t err_size, int code, const char *name, const char *fmt, ...) {
    if (err && err_size) {
        int k = snprintf(err, err_size, "%s: ", name ? name : "(buffer)");
        if (k < 0) k = 0;
        if ((size_t)k < err_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + k, err_size - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return code;
}

void qvf_err_rename(char *err, size_t err_size, const char *name) {
    if (!err || !err_size || strncmp(err, "WDELTA: ", 8)) return;
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", err + 8);
    snprintf(err, err_size, "%s: %s", name, tmp);
}

int qvf_is_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

uint64_t qvf_shape_elems(uint32_t n_dims, const uint64_t *shape) {
    uint64_t e = 1;
    if (n_dims < 1 || n_dims > 4) return 0;
    for (uint32_t i = 0; i < n_dims; i++) {
        if (shape[i] == 0 || e > UINT64_MAX / shape[i]) return 0;
        e *= shape[i];
    }
    return e;
}

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, max U+10FFFF. */
int qvf_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
            min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
            min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
            min = 0x10000;
        } else
            return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

qvf_voice *qvf_voice_new(void) {
    return calloc(1, sizeof(qvf_voice));
}

void qvf_tensor_free(qvf_tensor *t) {
    if (!t) return;
    free(t->name);
    free(t->block_offsets);
    free(t->owned_data);
    memset(t, 0, sizeof *t);
}

void qvf_voice_drop_wdelta(qvf_voice *v) {
    for (uint32_t i = 0; i < v->n_tensors; i++)
        qvf_tensor_free(&v->tensors[i]);
    free(v->tensors);
    v->tensors = NULL;
    v->n_tensors = 0;
    v->has_wdelta = 0;
    v->wdelta_kind = 0;
    memset(&v->target, 0, sizeof v->target);
}

void qvf_voice_drop_icl(qvf_voice *v) {
    free(v->transcript);
    free(v->codes);
    v->transcript = NULL;
    v->codes = NULL;
    v->transcript_bytes = 0;
    v->n_frames = 0;
}

static void palette_free(qvf_voice *v) {
    for (int i = 0; i < v->n_styles; i++)
        free(v->styles[i].vec);
    free(v->styles);
    v->styles = NULL;
    v->n_styles = 0;
}

void qvf_voice_free(qvf_voice *v) {
    if (!v) return;
    qvf_voice_drop_wdelta(v);
    qvf_voice_drop_icl(v);
    free(v->xvector);
    palette_free(v);
    for (int i = 0; i < v->n_meta; i++) {
        free(v->meta[i].key);
        free(v->meta[i].value);
    }
    free(v->meta);
    free(v->tpad);
    free(v->wovr_fc1_w);
    free(v->wovr_fc1_b);
    free(v->wovr_fc2_w);
    free(v->wovr_fc2_b);
    free(v->wovr_codec);
    if (v->backing_kind_ == 1)
        munmap(v->backing_, v->backing_bytes_);
    else if (v->backing_kind_ == 2)
        free(v->backing_);
    free(v);
}

const char *qvf_meta_get(const qvf_voice *v, const char *key) {
    for (int i = 0; i < v->n_meta; i++)
        if (!strcmp(v->meta[i].key, key)) return v->meta[i].value;
    return NULL;
}

qvf_consent qvf_consent_get(const qvf_voice *v) {
    qvf_consent c = {0};
    const char *m = qvf_meta_get(v, "consent.method");
    if (m && *m) {
        c.method = m;
        c.statement = qvf_meta_get(v, "consent.statement");
        c.speaker = qvf_meta_get(v, "consent.speaker");
        c.scope = qvf_meta_get(v, "consent.scope");
        c.utc = qvf_meta_get(v, "consent.utc");
        c.collected_by = qvf_meta_get(v, "consent.collected_by");
        c.recording_sha256 = qvf_meta_get(v, "consent.recording_sha256");
    } else if ((c.statement = qvf_meta_get(v, "consent")) && *c.statement) {
        c.method = "note", c.legacy = 1;
        c.utc = qvf_meta_get(v, "consent_utc");
        c.collected_by = qvf_meta_get(v, "consent_by");
    } else {
        c.statement = NULL;
    }
    return c;
}

static int key_valid(const char *k) {
    size_t n = strlen(k);
    if (n < 1 || n > QVF_MAX_KEY_BYTES) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '_' ||
              k[i] == '.'))
            return 0;
    return 1;
}

int qvf_meta_set(qvf_voice *v, const char *key, const char *value) {
    if (!key || !key_valid(key)) return QVF_E_ARG;
    if (value && (strlen(value) > QVF_MAX_VALUE_BYTES ||
                  !qvf_utf8_valid((const uint8_t *)value, strlen(value))))
        return QVF_E_ARG;
    for (int i = 0; i < v->n_meta; i++) {
        if (strcmp(v->meta[i].key, key)) continue;
        if (!value) {
            free(v->meta[i].key);
            free(v->meta[i].value);
            memmove(&v->meta[i], &v->meta[i + 1], (size_t)(v->n_meta - i - 1) * sizeof *v->meta);
            v->n_meta--;
            return QVF_OK;
        }
        char *nv = strdup(value);
        if (!nv) return QVF_E_NOMEM;
        free(v->meta[i].value);
        v->meta[i].value = nv;
        return QVF_OK;
    }
    if (!value) return QVF_OK;
    if ((unsigned)v->n_meta >= QVF_MAX_META_ENTRIES) return QVF_E_LIMIT;
    qvf_meta_entry *m = realloc(v->meta, (size_t)(v->n_meta + 1) * sizeof *m);
    if (!m) return QVF_E_NOMEM;
    v->meta = m;
    char *k = strdup(key), *val = strdup(value);
    if (!k || !val) {
        free(k);
        free(val);
        return QVF_E_NOMEM;
    }
    m[v->n_meta].key = k;
    m[v->n_meta].value = val;
    v->n_meta++;
    v->has_meta = 1;
    return QVF_OK;
}

int qvf_voice_set_xvector(qvf_voice *v, const float *x, uint32_t enc_dim) {
    if (enc_dim < 1 || enc_dim > QVF_MAX_DIM) return QVF_E_LIMIT;
    float *nx = malloc((size_t)enc_dim * sizeof *nx);
    if (!nx) return QVF_E_NOMEM;
    memcpy(nx, x, (size_t)enc_dim * sizeof *nx);
    free(v->xvector);
    v->xvector = nx;
    v->enc_dim = enc_dim;
    v->source.enc_dim = enc_dim;
    return QVF_OK;
}

int qvf_voice_set_icl(qvf_voice *v, const char *transcript, const uint16_t *codes,
                      uint32_t n_frames) {
    size_t tl = transcript ? strlen(transcript) : 0;
    if (tl > QVF_MAX_TEXT_BYTES || n_frames > QVF_MAX_FRAMES) return QVF_E_LIMIT;
    if (!qvf_utf8_valid((const uint8_t *)(transcript ? transcript : ""), tl)) return QVF_E_UTF8;
    char *t = NULL;
    uint16_t *c = NULL;
    if (tl && !(t = strdup(transcript))) return QVF_E_NOMEM;
    if (n_frames) {
        c = malloc((size_t)n_frames * QVF_N_CODEBOOKS * sizeof *c);
        if (!c) {
            free(t);
            return QVF_E_NOMEM;
        }
        memcpy(c, codes, (size_t)n_frames * QVF_N_CODEBOOKS * sizeof *c);
    }
    qvf_voice_drop_icl(v);
    v->transcript = t;
    v->transcript_bytes = (uint32_t)tl;
    v->codes = c;
    v->n_frames = n_frames;
    return QVF_OK;
}

static const char *const variant_names[] = {
    [QVF_VARIANT_UNKNOWN] = "unknown",
    [QVF_VARIANT_BASE] = "base",
    [QVF_VARIANT_CUSTOM_VOICE] = "custom_voice",
    [QVF_VARIANT_VOICE_DESIGN] = "voice_design",
};
enum { N_VARIANTS = sizeof variant_names / sizeof *variant_names };

const char *qvf_variant_name(uint32_t variant) {
    return variant < N_VARIANTS ? variant_names[variant] : "invalid";
}

enum qvf_variant qvf_variant_from_name(const char *name) {
    for (int v = QVF_VARIANT_BASE; name && v < N_VARIANTS; v++)
        if (!strcmp(name, variant_names[v])) return (enum qvf_variant)v;
    return QVF_VARIANT_UNKNOWN;
}

static int ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n > k && !memcmp(s + n - k, suffix, k);
}

enum qvf_file_kind qvf_file_kind(const char *name, const void *head, size_t n_head) {
    size_t n = name ? strlen(name) : 0;
    if ((head && n_head >= 4 && !memcmp(head, "QVCE", 4)) || ends_with(name, n, ".qvoice"))
        return QVF_KIND_QVOICE;
    return ends_with(name, n, ".bin") ? QVF_KIND_BIN : QVF_KIND_NONE;
}

static int try_path(const char *p, char *path, size_t path_size) {
    if (access(p, R_OK)) return 0;
    return (size_t)snprintf(path, path_size, "%s", p) < path_size;
}

char *qvf_hex(const uint8_t *bytes, size_t n, char *out) { return qvu_hex(bytes, n, out); }

int qvf_voice_dir(int i, char *dir, size_t dir_size) {
    if (i == 0) return snprintf(dir, dir_size, "voices") < (int)dir_size ? 0 : -1;
    const char *qp = getenv("QVOICE_PATH");
    for (int k = 1; qp && *qp;) {
        const char *end = strchr(qp, ':');
        const size_t len = end ? (size_t)(end - qp) : strlen(qp);
        if (len && k++ == i)
            return snprintf(dir, dir_size, "%.*s", (int)len, qp) < (int)dir_size ? 0 : -1;
        qp = end ? end + 1 : NULL;
    }
    return -1;
}

int qvf_voice_find(const char *name, char *path, size_t path_size, char *err, size_t err_size) {
    size_t n = name ? strlen(name) : 0;
    if (!n || !path || !path_size)
        return qvf_fail(err, err_size, QVF_E_ARG, name, "empty voice name");
    if (strchr(name, '/') || qvf_file_kind(name, NULL, 0)) {
        if (try_path(name, path, path_size)) return QVF_OK;
        return qvf_fail(err, err_size, QVF_E_IO, name, "no such voice file");
    }
    char dir[4096], buf[8192];
    for (int i = 0; !qvf_voice_dir(i, dir, sizeof dir); i++) {
        snprintf(buf, sizeof buf, "%s/%s.qvoice", dir, name);
        if (try_path(buf, path, path_size)) return QVF_OK;
    }
    /* the one text for a missing voice: every place looked at, in order */
    size_t o = (size_t)snprintf(buf, sizeof buf,
                                "voice '%s' not found; looked for voices/%s.qvoice", name, name);
    for (int i = 1; o < sizeof buf && !qvf_voice_dir(i, dir, sizeof dir); i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s/%s.qvoice",
                              i == 1 ? " and, from $QVOICE_PATH, " : ", ", dir, name);
    if (o < sizeof buf && qvf_voice_dir(1, dir, sizeof dir))
        snprintf(buf + o, sizeof buf - o, " ($QVOICE_PATH is not set)");
    if (err && err_size) snprintf(err, err_size, "%s", buf);
    return QVF_E_IO;
}
