/* library.c — the voice library's index: id -> name, owner, description, built from DIR at start
 * (each file read and checked once) and kept by the uploads and deletes of this server, so a
 * list or a lookup by name opens no voice file (it opened and CRC-checked every one). Servers
 * sharing DIR see each other's changes: when the directory's mtime moves, its names are re-read
 * and only new files are parsed. The duplicate-name check, the caps and the write are one step
 * under the index lock. Owners live beside each voice in <id>.owner (the key's name).
 */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/server_impl.h"
#include "util/fileio.h"
#include "util/sha256.h"
#include "voicefmt/qvf.h"

typedef struct {
    char id[65];
    char *name, *owner; /* NULL: none */
    int64_t bytes;
    cJSON *desc;
    int seen; /* in the last directory read */
} entry;

struct library {
    pthread_mutex_t mu;
    const char *dir;
    entry *v;
    int n, cap;
    int64_t bytes;
    struct timespec mtime; /* of dir when last read */
};

int qvs_is_id(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return 0;
    return n == 64;
}

/* id of a library file name "<64 hex>.qvoice", or 0. */
static int id_of(const char *fname, char id[65]) {
    size_t n = strlen(fname);
    if (n != 64 + 7 || strcmp(fname + 64, ".qvoice")) return 0;
    memcpy(id, fname, 64);
    id[64] = 0;
    return qvs_is_id(id);
}

static cJSON *describe(const char *id, const qvf_voice *v, const struct stat *st) {
    cJSON *o = cJSON_CreateObject();
    const char *name = qvf_meta_get(v, "name"), *lang = qvf_meta_get(v, "language");
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "voice");
    cJSON_AddStringToObject(o, "name", name ? name : "");
    cJSON_AddStringToObject(o, "language", lang ? lang : "");
    cJSON_AddNumberToObject(o, "created_at", (double)st->st_mtime);
    cJSON_AddNumberToObject(o, "bytes", (double)st->st_size);
    cJSON_AddNumberToObject(o, "file_version", v->file_version);
    cJSON_AddNumberToObject(o, "xvector_dim", v->enc_dim);
    cJSON_AddBoolToObject(o, "has_icl", v->n_frames > 0 && v->transcript);
    cJSON_AddNumberToObject(o, "icl_seconds", v->n_frames / QV_FRAME_RATE_HZ);
    cJSON_AddBoolToObject(o, "has_wdelta", v->has_wdelta);
    cJSON_AddStringToObject(o, "source_variant", qvf_variant_name(v->source.variant));
    const char *consent = qvf_meta_get(v, "consent");
    cJSON_AddBoolToObject(o, "consent", consent && consent[0]);
    return o;
}

static entry *find_id(struct library *L, const char *id) {
    for (int i = 0; i < L->n; i++)
        if (!strcmp(L->v[i].id, id)) return &L->v[i];
    return NULL;
}

static void drop(struct library *L, int i) {
    L->bytes -= L->v[i].bytes;
    free(L->v[i].name);
    free(L->v[i].owner);
    cJSON_Delete(L->v[i].desc);
    L->v[i] = L->v[--L->n];
}

/* Adds the voice v (file id, stat st) with owner; 0 or -1 (out of memory). */
static int insert(struct library *L, const char *id, const qvf_voice *v, const struct stat *st,
                  const char *owner) {
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 64;
        entry *e = realloc(L->v, (size_t)cap * sizeof *e);
        if (!e) return -1;
        L->v = e;
        L->cap = cap;
    }
    entry *e = &L->v[L->n];
    memset(e, 0, sizeof *e);
    memcpy(e->id, id, 65);
    const char *name = qvf_meta_get(v, "name");
    e->name = name && name[0] ? strdup(name) : NULL;
    e->owner = owner && owner[0] ? strdup(owner) : NULL;
    e->bytes = st->st_size;
    e->desc = describe(id, v, st);
    e->seen = 1;
    if (!e->desc || (name && name[0] && !e->name) || (owner && owner[0] && !e->owner)) {
        free(e->name);
        free(e->owner);
        cJSON_Delete(e->desc);
        return -1;
    }
    L->n++;
    L->bytes += e->bytes;
    return 0;
}

/* The owner recorded for id ("" when none). */
static void read_owner(const char *dir, const char *id, char *out, size_t size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.owner", dir, id);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, size - 1, f) : 0;
    out[n] = 0;
    out[strcspn(out, "\r\n")] = 0;
    if (f) fclose(f);
}

/* Re-reads the directory's names when its mtime moved (L->mu held): new files are read and
 * checked, vanished ones dropped. A file that does not read cleanly is left out. */
static void refresh(struct library *L) {
    struct stat ds;
    if (stat(L->dir, &ds) || (ds.st_mtim.tv_sec == L->mtime.tv_sec &&
                              ds.st_mtim.tv_nsec == L->mtime.tv_nsec))
        return;
    DIR *d = opendir(L->dir);
    if (!d) return;
    L->mtime = ds.st_mtim;
    for (int i = 0; i < L->n; i++)
        L->v[i].seen = 0;
    struct dirent *de;
    char id[65], path[4096], err[256], owner[256];
    while ((de = readdir(d))) {
        if (!id_of(de->d_name, id)) continue;
        entry *e = find_id(L, id);
        if (e) {
            e->seen = 1;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", L->dir, de->d_name);
        qvf_voice *v;
        struct stat st;
        if (stat(path, &st) || qvf_read_file(path, 0, &v, err, sizeof err)) continue;
        if (v->file_version == 0) { /* a raw x-vector named .qvoice is not a library voice */
            qvf_voice_free(v);
            continue;
        }
        read_owner(L->dir, id, owner, sizeof owner);
        insert(L, id, v, &st, owner);
        qvf_voice_free(v);
    }
    closedir(d);
    for (int i = L->n - 1; i >= 0; i--)
        if (!L->v[i].seen) drop(L, i);
}

int qvs_library_open(qv_server *s, char *err, size_t es) {
    struct library *L = calloc(1, sizeof *L);
    if (!L) {
        snprintf(err, es, "server: out of memory");
        return -1;
    }
    pthread_mutex_init(&L->mu, NULL);
    L->dir = s->voices_dir;
    L->mtime.tv_nsec = -1; /* never equal: the first refresh reads */
    s->lib = L;
    pthread_mutex_lock(&L->mu);
    refresh(L);
    pthread_mutex_unlock(&L->mu);
    return 0;
}

void qvs_library_free(qv_server *s) {
    struct library *L = s->lib;
    if (!L) return;
    while (L->n)
        drop(L, L->n - 1);
    free(L->v);
    pthread_mutex_destroy(&L->mu);
    free(L);
    s->lib = NULL;
}

/* May key k use (see, speak with) e? Voices of no owner or of an admin key are shared; a user
 * key's voices are its own. k NULL: no auth, everything. */
static int may_use(const qv_server *s, const api_key *k, const entry *e) {
    if (!k || k->admin || !e->owner || !strcmp(e->owner, k->name)) return 1;
    for (int i = 0; i < s->n_keys; i++)
        if (!strcmp(s->keys[i].name, e->owner)) return s->keys[i].admin;
    return 0; /* a key no longer in the file: its voices stay private */
}

static entry *find(qv_server *s, const api_key *k, const char *id_or_name) {
    struct library *L = s->lib;
    refresh(L);
    for (int i = 0; i < L->n; i++) {
        entry *e = &L->v[i];
        if ((!strcmp(e->id, id_or_name) || (e->name && !strcmp(e->name, id_or_name))) &&
            may_use(s, k, e))
            return e;
    }
    return NULL;
}

int qvs_voice_lookup(qv_server *s, const api_key *k, const char *id_or_name, char *path,
                     size_t size) {
    pthread_mutex_lock(&s->lib->mu);
    entry *e = find(s, k, id_or_name);
    if (e) snprintf(path, size, "%s/%s.qvoice", s->voices_dir, e->id);
    pthread_mutex_unlock(&s->lib->mu);
    return e ? 0 : -1;
}

cJSON *qvs_library_describe(qv_server *s, const api_key *k, const char *id_or_name) {
    pthread_mutex_lock(&s->lib->mu);
    entry *e = id_or_name ? find(s, k, id_or_name) : NULL;
    cJSON *a = NULL;
    if (!id_or_name) {
        refresh(s->lib);
        a = cJSON_CreateArray();
        for (int i = 0; a && i < s->lib->n; i++) {
            entry *x = &s->lib->v[i];
            if (!may_use(s, k, x)) continue;
            cJSON *o = cJSON_Duplicate(x->desc, 1);
            cJSON_AddBoolToObject(o, "deletable", !k || k->admin ||
                                                      (x->owner && !strcmp(x->owner, k->name)));
            if (!k || k->admin) cJSON_AddStringToObject(o, "owner", x->owner ? x->owner : "");
            cJSON_AddItemToArray(a, o);
        }
    } else if (e) {
        a = cJSON_Duplicate(e->desc, 1);
    }
    pthread_mutex_unlock(&s->lib->mu);
    return a;
}

/* util's atomic writer (temp, fsync, rename, fsync of the directory); 0 or -1. */
static int write_atomic(const char *path, const void *p, size_t n) {
    char err[512];
    qvu_wfile *w;
    FILE *f;
    if (qvu_wfile_open(&w, path, err, sizeof err)) return -1;
    if (!(f = qvu_wfile_stream(w)) || fwrite(p, 1, n, f) != n) {
        qvu_wfile_abort(w);
        return -1;
    }
    return qvu_wfile_commit(w, err, sizeof err) ? -1 : 0;
}

int qvs_library_add(qv_server *s, const api_key *k, const uint8_t *b, size_t n, const char *name,
                    char id[65], cJSON **desc, char *why, size_t ws) {
    uint8_t h[32];
    char dst[4096], err[256];
    if (qvu_sha256(b, n, h)) {
        snprintf(why, ws, "cannot hash the voice");
        return 500;
    }
    qvu_sha256_hex(h, id);
    struct library *L = s->lib;
    int status = 0;
    pthread_mutex_lock(&L->mu);
    refresh(L);
    entry *old = find_id(L, id);
    for (int i = 0; name && i < L->n; i++)
        if (L->v[i].name && !strcmp(L->v[i].name, name) && strcmp(L->v[i].id, id)) {
            snprintf(why, ws, "name %s: another library voice has it (DELETE it first)", name);
            status = 409;
            goto out;
        }
    if (!old && (L->n >= s->cfg.max_voices ||
                 L->bytes + (int64_t)n > (int64_t)s->cfg.max_library_mb << 20)) {
        snprintf(why, ws, "the voice library is full (%d voices, %lld MB; limits %d, %d MB)",
                 L->n, (long long)(L->bytes >> 20), s->cfg.max_voices, s->cfg.max_library_mb);
        status = 507;
        goto out;
    }
    if (!old && k && !k->admin) { /* the owner first: the voice never shows without it */
        snprintf(dst, sizeof dst, "%s/%s.owner", s->voices_dir, id);
        if (write_atomic(dst, k->name, strlen(k->name))) {
            snprintf(why, ws, "cannot write the voice's owner");
            status = 500;
            goto out;
        }
    }
    snprintf(dst, sizeof dst, "%s/%s.qvoice", s->voices_dir, id);
    if (write_atomic(dst, b, n)) {
        if (!old) { /* no voice: no owner record either */
            snprintf(dst, sizeof dst, "%s/%s.owner", s->voices_dir, id);
            unlink(dst);
        }
        snprintf(why, ws, "cannot write the voice");
        status = 500;
        goto out;
    }
    qvf_voice *v;
    struct stat st;
    if (!old && !stat(dst, &st) && !qvf_read_mem(b, n, id, 0, &v, err, sizeof err)) {
        if (insert(L, id, v, &st, k && !k->admin ? k->name : NULL) == 0) old = &L->v[L->n - 1];
        qvf_voice_free(v);
    }
    *desc = old ? cJSON_Duplicate(old->desc, 1) : cJSON_CreateObject();
out:
    pthread_mutex_unlock(&L->mu);
    return status;
}

int qvs_library_remove(qv_server *s, const api_key *k, const char *id_or_name, char id[65]) {
    struct library *L = s->lib;
    char path[4096];
    pthread_mutex_lock(&L->mu);
    entry *e = find(s, k, id_or_name);
    int status = 0;
    if (!e)
        status = 404;
    else if (k && !k->admin && (!e->owner || strcmp(e->owner, k->name)))
        status = 403;
    else {
        memcpy(id, e->id, 65);
        snprintf(path, sizeof path, "%s/%s.qvoice", s->voices_dir, e->id);
        if (unlink(path) && errno != ENOENT) {
            status = 500;
        } else {
            snprintf(path, sizeof path, "%s/%s.owner", s->voices_dir, e->id);
            unlink(path);
            drop(L, (int)(e - L->v));
        }
    }
    pthread_mutex_unlock(&L->mu);
    return status;
}
