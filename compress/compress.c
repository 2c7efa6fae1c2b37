/* compress.c — writes a compressed copy of a model directory (qvz.h, docs/compression.md).
 *
 * A plan of output tensors is made first (name, dtype, shape, where the bytes come from: the
 * input mmap as is, selected embedding rows, f32 narrowed to f16 on the fly, or buffers made
 * here: token map, q4 matrices, neuron-pruned MLP matrices), then each safetensors file is written in one pass with data
 * 64-byte aligned. Everything goes into OUT.tmp-PID, fsync'd, and the directory is renamed.
 */
#define _XOPEN_SOURCE 700
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include "checkpoint/config.h"
#include "checkpoint/safetensors.h"
#include "compress/compress_impl.h"
#include "compress/qvz.h"
#include "include/qvoice.h"
#include "kernels/kernels.h"
#include "kernels/q4.h"
#include "util/fileio.h"

#define ALIGN 64

/* ==== plan =================================================================================== */

enum src_kind { SRC_COPY, SRC_OWNED, SRC_ROWS, SRC_F16 };

typedef struct {
    char name[160];
    enum qvm_dtype dtype;
    int n_dims;
    int64_t shape[4];
    size_t n_bytes;
    enum src_kind kind;
    const qvm_tensor *src; /* COPY, ROWS, F16 */
    void *owned;           /* OWNED (freed with the plan) */
    const int32_t *rows;   /* ROWS: source row of each output row, -1 = zeros */
} out_tensor;

typedef struct {
    out_tensor *t;
    int n, cap;
} plan;

static out_tensor *plan_add(plan *p, const char *name, enum qvm_dtype dtype, int n_dims,
                            const int64_t *shape, enum src_kind kind) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 512;
        out_tensor *t = realloc(p->t, sizeof *t * (size_t)cap);
        if (!t) return NULL;
        p->t = t, p->cap = cap;
    }
    out_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype, t->n_dims = n_dims, t->kind = kind;
    t->n_bytes = qvm_dtype_size(dtype);
    for (int i = 0; i < n_dims; i++)
        t->shape[i] = shape[i], t->n_bytes *= (size_t)shape[i];
    return t;
}

static void plan_free(plan *p) {
    for (int i = 0; i < p->n; i++)
        free(p->t[i].owned);
    free(p->t);
    memset(p, 0, sizeof *p);
}

/* ==== writing ================================================================================ */

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static int put(FILE *f, const void *buf, size_t n) {
    return fwrite(buf, 1, n, f) == n ? 0 : -1;
}

static int write_tensor(FILE *f, const out_tensor *t) {
    static const char zeros[ALIGN * 64];
    switch (t->kind) {
    case SRC_COPY: return put(f, t->src->data, t->n_bytes);
    case SRC_OWNED: return put(f, t->owned, t->n_bytes);
    case SRC_ROWS: {
        const size_t row = t->n_bytes / (size_t)t->shape[0];
        for (int64_t r = 0; r < t->shape[0]; r++) {
            const int32_t s = t->rows[r];
            for (size_t off = 0; s < 0 && off < row; off += sizeof zeros)
                if (put(f, zeros, row - off < sizeof zeros ? row - off : sizeof zeros)) return -1;
            if (s >= 0 && put(f, (const char *)t->src->data + (size_t)s * row, row)) return -1;
        }
        return 0;
    }
    case SRC_F16: {
        enum { CHUNK = 16384 };
        float x[CHUNK];
        uint16_t h[CHUNK];
        const size_t n = t->n_bytes / 2;
        for (size_t i = 0; i < n; i += CHUNK) {
            const size_t k = n - i < CHUNK ? n - i : CHUNK;
            memcpy(x, (const float *)t->src->data + i, k * sizeof(float));
            qvk_f32_to_f16(h, x, k);
            if (put(f, h, k * 2)) return -1;
        }
        return 0;
    }
    }
    return -1;
}

/* path: the plan as one safetensors file (fsync'd). *n_bytes: data bytes. */
static int write_st(const char *path, const plan *p, uint64_t *n_bytes, char *err, size_t es) {
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (int i = 0; i < p->n; i++) {
        const out_tensor *t = &p->t[i];
        cJSON *e = cJSON_AddObjectToObject(h, t->name);
        cJSON_AddStringToObject(e, "dtype", qvm_dtype_name(t->dtype));
        cJSON *s = cJSON_AddArrayToObject(e, "shape");
        for (int k = 0; k < t->n_dims; k++)
            cJSON_AddItemToArray(s, cJSON_CreateNumber((double)t->shape[k]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + t->n_bytes)));
        off = (off + t->n_bytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!js) return snprintf(err, es, "%s: out of memory", path), -1;
    /* header padded with spaces so that the data starts 64-byte aligned in the file */
    const size_t n_js = strlen(js), n_hdr = (8 + n_js + ALIGN - 1) / ALIGN * ALIGN - 8;
    char *hdr = malloc(n_hdr + 8);
    qvu_wfile *w = NULL;
    FILE *f = NULL;
    /* large: the page cache keeps the file in 2 MB folios, which every load maps one entry at a
       time (written tensor by tensor and row by row, it held 4 KB ones, and the prefill of the
       1.7B 4-bit directory spent ~0.1 s of CPU in page faults) */
    if (!hdr || qvu_wfile_open(&w, path, err, es) || !(f = qvu_wfile_stream_large(w))) {
        if (!hdr || w) snprintf(err, es, "%s: out of memory", path);
        qvu_wfile_abort(w);
        free(hdr);
        free(js);
        return -1;
    }
    for (int i = 0; i < 8; i++)
        hdr[i] = (char)((uint64_t)n_hdr >> (8 * i));
    memcpy(hdr + 8, js, n_js);
    memset(hdr + 8 + n_js, ' ', n_hdr - n_js);
    errno = 0;
    int rc = put(f, hdr, n_hdr + 8);
    uint64_t pos = 0;
    static const char zeros[ALIGN];
    for (int i = 0; i < p->n && !rc; i++) {
        rc = write_tensor(f, &p->t[i]);
        pos += p->t[i].n_bytes;
        const uint64_t pad = (ALIGN - pos % ALIGN) % ALIGN;
        if (!rc && i + 1 < p->n && pad) rc = put(f, zeros, pad);
        pos += pad;
    }
    *n_bytes = off;
    if (rc) {
        snprintf(err, es, "%s: cannot write (%s)", path, strerror(errno ? errno : EIO));
        qvu_wfile_abort(w);
    } else {
        rc = qvu_wfile_commit(w, err, es); /* flushed, fsync'd, linked into the directory */
    }
    free(hdr);
    free(js);
    return rc ? -1 : 0;
}

static int copy_file(const char *from, const char *to, char *err, size_t es) {
    int in = open(from, O_RDONLY), out = in >= 0 ? open(to, O_WRONLY | O_CREAT | O_EXCL, 0644) : -1;
    int rc = in >= 0 && out >= 0 ? 0 : -1;
    char buf[1 << 16];
    for (ssize_t n; !rc && (n = read(in, buf, sizeof buf)) != 0;)
        rc = n < 0 ? -1 : write_all(out, buf, (size_t)n);
    if (!rc) rc = fsync(out);
    if (in >= 0) close(in);
    if (out >= 0 && close(out)) rc = -1;
    if (rc) snprintf(err, es, "%s: cannot copy to %s (%s)", from, to, strerror(errno ? errno : EIO));
    return rc;
}

/* Every regular file of dir except *.safetensors and *.safetensors.index.json, into to. */
static int copy_small_files(const char *dir, const char *to, char *err, size_t es) {
    DIR *d = opendir(dir);
    if (!d) return snprintf(err, es, "%s: cannot open directory", dir), -1;
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        char a[4096], b[4096];
        struct stat st;
        snprintf(a, sizeof a, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || stat(a, &st) || !S_ISREG(st.st_mode) ||
            strstr(e->d_name, ".safetensors"))
            continue;
        snprintf(b, sizeof b, "%s/%s", to, e->d_name);
        rc = copy_file(a, b, err, es);
    }
    closedir(d);
    return rc;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) fsync(fd), close(fd);
}

/* ==== the steps ============================================================================== */

static int is_talker_layer_dropped(const char *name, int keep_layers) {
    int l;
    return sscanf(name, "talker.model.layers.%d.", &l) == 1 && l >= keep_layers;
}

static int is_linear(const qvm_tensor *t) {
    const size_t n = strlen(t->name);
    return t->n_dims == 2 && n > 7 && !strcmp(t->name + n - 7, ".weight") &&
           !strstr(t->name, "embedding") && !strncmp(t->name, "talker.", 7) &&
           t->shape[1] % QVK_Q4_GROUP == 0 && t->shape[1] <= QVK_Q4_MAX_IN;
}

/* X.weight [o, i] bf16 -> X.weight U32 [o, i/8], X.scales, X.biases bf16 [o, i/64]. */
static int plan_q4(plan *p, const qvm_tensor *t, qvk_pool *pool, qvz_report *r) {
    const int o = (int)t->shape[0], in = (int)t->shape[1], n_g = in / QVK_Q4_GROUP;
    const size_t n_s = (size_t)o * (size_t)n_g;
    uint8_t *q = malloc((size_t)o * (size_t)in / 2);
    uint16_t *s16 = malloc(n_s * 2), *b16 = malloc(n_s * 2);
    if (!q || !s16 || !b16 || qvk_q4_quantize_bf16(pool, q, s16, b16, t->data, o, in)) {
        free(q), free(s16), free(b16);
        return -1;
    }
    const size_t n = strlen(t->name) - 7;
    char name[200];
    out_tensor *w = plan_add(p, t->name, QVM_DTYPE_U32, 2, (int64_t[]){o, in / 8}, SRC_OWNED);
    if (w) w->owned = q;
    snprintf(name, sizeof name, "%.*s.scales", (int)n, t->name);
    out_tensor *ts = w ? plan_add(p, name, QVM_DTYPE_BF16, 2, (int64_t[]){o, n_g}, SRC_OWNED) : NULL;
    if (ts) ts->owned = s16;
    snprintf(name, sizeof name, "%.*s.biases", (int)n, t->name);
    out_tensor *tb = ts ? plan_add(p, name, QVM_DTYPE_BF16, 2, (int64_t[]){o, n_g}, SRC_OWNED) : NULL;
    if (tb) tb->owned = b16;
    if (!tb) {
        if (!w) free(q);
        if (!ts) free(s16);
        free(b16);
        return -1;
    }
    r->n_q4++;
    r->q4_bytes_in += t->n_bytes;
    r->q4_bytes_out += w->n_bytes + ts->n_bytes + tb->n_bytes;
    return 0;
}

/* The kept neurons of a talker MLP matrix whose layer loses some (gate/up: rows, down: columns)
 * as *pruned, its data in the malloc'd *owned; 0 when t is not one, 1 when made, -1 out of
 * memory. */
static int prune_mlp(const qvm_tensor *t, const qvm_model_config *c, int32_t *const *nkeep,
                     const int *width, qvm_tensor *pruned, void **owned) {
    int l, n = 0;
    char which[8];
    if (!nkeep || t->n_dims != 2 ||
        sscanf(t->name, "talker.model.layers.%d.mlp.%7[a-z]_proj.weight%n", &l, which, &n) != 2 ||
        t->name[n] || width[l] == qvm_layer_intermediate(&c->talker, l))
        return 0;
    const int down = !strcmp(which, "down"), w = width[l];
    const size_t es = qvm_dtype_size(t->dtype);
    const int64_t rows = down ? t->shape[0] : w, cols = down ? w : t->shape[1];
    char *buf = malloc((size_t)rows * (size_t)cols * es);
    if (!buf) return -1;
    const char *src = t->data;
    for (int64_t r = 0; r < rows; r++)
        if (down)
            for (int64_t k = 0; k < cols; k++)
                memcpy(buf + ((size_t)r * cols + k) * es,
                       src + ((size_t)r * t->shape[1] + nkeep[l][k]) * es, es);
        else
            memcpy(buf + (size_t)r * cols * es, src + (size_t)nkeep[l][r] * t->shape[1] * es,
                   (size_t)cols * es);
    *pruned = *t;
    *owned = buf;
    pruned->data = buf, pruned->shape[0] = rows, pruned->shape[1] = cols;
    pruned->n_bytes = (size_t)rows * (size_t)cols * es;
    return 1;
}

/* model.safetensors: token map, layer pruning, neuron pruning (nkeep/width, or NULL), q4. */
static int plan_model(plan *p, const qvm_st *st, const qvm_model_config *c, const qvz_options *o,
                      const uint8_t *keep, int32_t **rows_out, int32_t *const *nkeep,
                      const int *width, qvk_pool *pool, qvz_report *r, char *err, size_t es) {
    const int keep_layers = c->talker.num_hidden_layers - o->prune_layers;
    for (int i = 0; i < qvm_st_count(st); i++) {
        const qvm_tensor *t = qvm_st_at_sorted(st, i);
        r->model_bytes_in += t->n_bytes;
        if (is_talker_layer_dropped(t->name, keep_layers)) continue;
        qvm_tensor pruned;
        void *owned = NULL;
        const int pr = prune_mlp(t, c, nkeep, width, &pruned, &owned);
        if (pr < 0) return snprintf(err, es, "out of memory"), -1;
        if (pr) {
            if (o->q4 && is_linear(&pruned) && pruned.dtype == QVM_DTYPE_BF16) {
                const int q = plan_q4(p, &pruned, pool, r);
                free(owned);
                if (q) return snprintf(err, es, "out of memory"), -1;
                continue;
            }
            out_tensor *x = plan_add(p, t->name, t->dtype, 2, pruned.shape, SRC_OWNED);
            if (!x) {
                free(owned);
                return snprintf(err, es, "out of memory"), -1;
            }
            x->owned = owned;
            continue;
        }
        if (keep && !strcmp(t->name, "talker.model.text_embedding.weight")) {
            const int V = c->text_vocab_size;
            int32_t *map = calloc((size_t)V, sizeof *map), *rows = malloc(sizeof *rows * (size_t)(V + 1));
            if (!map || !rows) {
                free(map), free(rows);
                return snprintf(err, es, "out of memory"), -1;
            }
            int n = 1;
            rows[0] = -1; /* row 0: zeros, for every id the corpus cannot produce */
            for (int id = 0; id < V; id++)
                if (keep[id]) map[id] = n, rows[n++] = id;
            *rows_out = rows;
            out_tensor *e = plan_add(p, t->name, t->dtype, 2, (int64_t[]){n, t->shape[1]}, SRC_ROWS);
            out_tensor *m = e ? plan_add(p, "talker.model.text_token_map", QVM_DTYPE_I32, 1,
                                         (int64_t[]){V}, SRC_OWNED)
                              : NULL;
            if (!m) {
                free(map);
                return snprintf(err, es, "out of memory"), -1;
            }
            e->src = t, e->rows = rows, m->owned = map;
            r->n_text_ids = V, r->n_text_rows = n;
            r->embedding_bytes_in = t->n_bytes, r->embedding_bytes_out = e->n_bytes + m->n_bytes;
            continue;
        }
        if (o->q4 && is_linear(t)) {
            if (t->dtype != QVM_DTYPE_BF16)
                return snprintf(err, es, "%s: tensor %s: --q4 needs BF16 weights, found %s",
                                qvm_st_file(st, t), t->name, qvm_dtype_name(t->dtype)), -1;
            if (plan_q4(p, t, pool, r)) return snprintf(err, es, "out of memory"), -1;
            continue;
        }
        out_tensor *x = plan_add(p, t->name, t->dtype, t->n_dims, t->shape, SRC_COPY);
        if (!x) return snprintf(err, es, "out of memory"), -1;
        x->src = t;
    }
    return 0;
}

/* speech_tokenizer/model.safetensors: encoder strip, f16 decoder. */
static int plan_codec(plan *p, const qvm_st *st, const qvz_options *o, qvz_report *r, char *err,
                      size_t es) {
    for (int i = 0; i < qvm_st_count(st); i++) {
        const qvm_tensor *t = qvm_st_at_sorted(st, i);
        r->codec_bytes_in += t->n_bytes;
        const int enc = !strncmp(t->name, "encoder.", 8);
        /* the decoder's quantizer input projections map latents to codes, which only encoding
         * does (the official decoder's quantizers decode through output_proj alone) */
        const int encode_only = !strncmp(t->name, "decoder.quantizer.", 18) &&
                                strstr(t->name, ".input_proj.");
        if ((enc || encode_only) && o->strip_encoder) {
            r->n_encoder_tensors++, r->encoder_bytes += t->n_bytes;
            continue;
        }
        const int f16 = !enc && o->decoder_f16 && t->dtype == QVM_DTYPE_F32;
        if (!enc && t->dtype == QVM_DTYPE_F32) {
            const float *w = t->data;
            for (size_t k = 0; k < t->n_bytes / 4; k++)
                if (fabsf(w[k]) > r->decoder_max_abs) r->decoder_max_abs = fabsf(w[k]);
            if (f16 && !(r->decoder_max_abs < 65504.0f))
                return snprintf(err, es, "%s: tensor %s: |w| = %g does not fit float16",
                                qvm_st_file(st, t), t->name, (double)r->decoder_max_abs), -1;
        }
        out_tensor *x = plan_add(p, t->name, f16 ? QVM_DTYPE_F16 : t->dtype, t->n_dims, t->shape,
                                 f16 ? SRC_F16 : SRC_COPY);
        if (!x) return snprintf(err, es, "out of memory"), -1;
        x->src = t;
        if (!enc) r->decoder_bytes_in += t->n_bytes, r->decoder_bytes_out += x->n_bytes;
    }
    return 0;
}

/* config.json with the new layer count, the per-layer MLP widths (width, or NULL) and the
 * quantization block. */
static int write_config(const char *dir, const char *out, const qvm_model_config *c,
                        const qvz_options *o, const int *width, char *err, size_t es) {
    char path[8192];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n;
    char *txt = qvu_read_file(path, (size_t)16 << 20, &n, err, es);
    if (!txt) return -1;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    if (!root) return snprintf(err, es, "%s: not valid JSON", path), -1;
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "talker_config");
    if (o->prune_layers && tc) {
        const int L = c->talker.num_hidden_layers - o->prune_layers;
        cJSON_ReplaceItemInObjectCaseSensitive(tc, "num_hidden_layers", cJSON_CreateNumber(L));
        cJSON *is = cJSON_GetObjectItemCaseSensitive(tc, "intermediate_size");
        if (cJSON_IsArray(is)) /* a per-layer list loses its top entries too */
            while (cJSON_GetArraySize(is) > L) cJSON_DeleteItemFromArray(is, L);
    }
    if (width && tc)
        cJSON_ReplaceItemInObjectCaseSensitive(
            tc, "intermediate_size",
            cJSON_CreateIntArray(width, c->talker.num_hidden_layers - o->prune_layers));
    if (o->q4) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "quantization");
        cJSON *q = cJSON_AddObjectToObject(root, "quantization");
        cJSON_AddNumberToObject(q, "group_size", QVK_Q4_GROUP);
        cJSON_AddNumberToObject(q, "bits", 4);
    }
    char *js = cJSON_Print(root);
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/config.json", out);
    int fd = js ? open(path, O_WRONLY | O_CREAT | O_EXCL, 0644) : -1;
    int rc = fd >= 0 && !write_all(fd, js, strlen(js)) && !write_all(fd, "\n", 1) && !fsync(fd)
                 ? 0
                 : -1;
    if (fd >= 0) close(fd);
    free(js);
    if (rc) snprintf(err, es, "%s: cannot write", path);
    return rc;
}

/* ==== API ==================================================================================== */

/* What the options ask of the model c in dir, and out not existing yet: 0, or -1 with err. */
static int check_options(const qvm_model_config *c, const char *dir, const char *out,
                         const qvz_options *o, char *err, size_t es) {
    struct stat sb;
    if (o->prune_layers < 0 || o->prune_layers >= c->talker.num_hidden_layers)
        return snprintf(err, es, "%s/config.json: cannot remove %d of %d talker layers", dir,
                        o->prune_layers, c->talker.num_hidden_layers),
               -1;
    if (c->quant_bits && (o->q4 || o->prune_neurons > 0))
        return snprintf(err, es, "%s/config.json: already quantized (quantization block present)%s",
                        dir, o->q4 ? "" : ": prune neurons before or together with --q4"),
               -1;
    if (!stat(out, &sb)) return snprintf(err, es, "%s: already exists", out), -1;
    return 0;
}

qvz_options qvz_default_options(void) {
    return (qvz_options){.n_threads = 0, .protect_layers = 10};
}

/* Neuron pruning: calibration activations (*act), then per kept layer the neurons kept (*nkeep)
 * and the MLP width (*width), all owned by the caller; the counts go to r. 0, or -1 with err. */
static int select_neurons(qvm_ckpt *ck, const qvz_options *o, int n_keep_layers,
                          float **act, int32_t ***nkeep, int **width, qvz_report *r, char *err,
                          size_t es) {
    const qvm_stack_config *tc = &ck->cfg.talker;
    *act = malloc(sizeof **act * (size_t)tc->num_hidden_layers * (size_t)tc->intermediate_size);
    *nkeep = calloc((size_t)n_keep_layers, sizeof **nkeep);
    *width = calloc((size_t)n_keep_layers, sizeof **width);
    if (!*act || !*nkeep || !*width) {
        snprintf(err, es, "out of memory");
        return -1;
    }
    if (qvz_calibrate(ck, qv_threads_resolve(o->n_threads),
                      o->calib_frames > 0 ? o->calib_frames : QVZ_CALIB_FRAMES, *act, err, es))
        return -1;
    if (qvz_neuron_select(*act, tc, n_keep_layers, o->protect_layers, o->prune_neurons, *nkeep,
                          *width)) {
        snprintf(err, es, "out of memory");
        return -1;
    }
    for (int l = 0; l < n_keep_layers; l++) {
        r->neurons_in += qvm_layer_intermediate(tc, l), r->neurons_out += (*width)[l];
        r->n_neuron_layers += (*width)[l] < qvm_layer_intermediate(tc, l);
    }
    return 0;
}

/* The compressed model directory at tmp (*made once it exists): the small files of dir and its
 * speech_tokenizer/ copied, config.json rewritten, both safetensors written, all synced. */
static int write_tree(const char *dir, const char *tmp, const qvm_model_config *c,
                      const qvz_options *o, const int *width, const plan *pm, const plan *pc,
                      qvz_report *r, int *made, char *err, size_t es) {
    char path[4200], to[4200];
    snprintf(path, sizeof path, "%s/speech_tokenizer", tmp);
    if (mkdir(tmp, 0755) || (*made = 1, mkdir(path, 0755))) {
        snprintf(err, es, "%s: cannot create (%s)", *made ? path : tmp, strerror(errno));
        return -1;
    }
    if (copy_small_files(dir, tmp, err, es)) return -1;
    snprintf(path, sizeof path, "%s/speech_tokenizer", dir);
    snprintf(to, sizeof to, "%s/speech_tokenizer", tmp);
    if (copy_small_files(path, to, err, es)) return -1;
    snprintf(path, sizeof path, "%s/config.json", tmp); /* rewritten */
    if (unlink(path) || write_config(dir, tmp, c, o, width, err, es)) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    if (write_st(path, pm, &r->model_bytes_out, err, es)) return -1;
    snprintf(path, sizeof path, "%s/speech_tokenizer/model.safetensors", tmp);
    if (write_st(path, pc, &r->codec_bytes_out, err, es)) return -1;
    fsync_path(to);
    fsync_path(tmp);
    return 0;
}

/* Makes a rename of out durable: fsyncs the directory holding it. */
static void fsync_parent(const char *out) {
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = 0;
    fsync_path(slash ? parent : ".");
}

int qvz_compress(const char *dir, const char *out, const qvz_options *o, qvz_report *report,
                 char *err, size_t es) {
    qvz_report r_local;
    qvz_report *r = report ? report : &r_local;
    memset(r, 0, sizeof *r);
    qvm_ckpt *ck = qvm_ckpt_open(dir, err, es);
    if (!ck) return -1;
    const qvm_model_config *c = &ck->cfg;
    r->layers_in = c->talker.num_hidden_layers;
    r->layers_out = c->talker.num_hidden_layers - o->prune_layers;
    if (check_options(c, dir, out, o, err, es)) {
        qvm_ckpt_free(ck);
        return -1;
    }

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)getpid());
    uint8_t *keep = NULL;
    int32_t *rows = NULL;
    plan pm = {0}, pc = {0};
    const qvm_st *st = ck->st, *cst = ck->codec_st;
    qvk_pool *pool = NULL;
    float *act = NULL;
    int32_t **nkeep = NULL;
    int *width = NULL, rc = -1, made = 0;
    const int n_keep_layers = r->layers_out;
    if (o->vocab) {
        keep = malloc((size_t)c->text_vocab_size);
        if (!keep) {
            snprintf(err, es, "out of memory");
            goto done;
        }
        if (qvz_vocab_keep(ck, o->vocab, keep, c->text_vocab_size, err, es) < 0) goto done;
    }
    if (!(pool = qvk_pool_create(qv_threads_resolve(o->n_threads)))) {
        snprintf(err, es, "out of memory");
        goto done;
    }
    if (o->prune_neurons > 0 &&
        select_neurons(ck, o, n_keep_layers, &act, &nkeep, &width, r, err, es))
        goto done;
    if (plan_model(&pm, st, c, o, keep, &rows, nkeep, width, pool, r, err, es) ||
        plan_codec(&pc, cst, o, r, err, es))
        goto done;
    if (write_tree(dir, tmp, c, o, width, &pm, &pc, r, &made, err, es)) goto done;
    if (rename(tmp, out)) {
        snprintf(err, es, "%s: cannot rename to %s (%s)", tmp, out, strerror(errno));
        goto done;
    }
    made = 0;
    fsync_parent(out);
    rc = 0;
done:
    if (made) nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    plan_free(&pm), plan_free(&pc);
    free(rows), free(keep), free(act), free(width);
    for (int l = 0; nkeep && l < n_keep_layers; l++)
        free(nkeep[l]);
    free(nkeep);
    qvk_pool_free(pool);
    qvm_ckpt_free(ck);
    return rc;
}
