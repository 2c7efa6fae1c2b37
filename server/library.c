/* library.c — the voice library's index: id -> name, owner, description, built from DIR at start
 * and kept by this server's uploads and deletes, so a list or a lookup opens no voice file.
 * Servers sharing DIR see each other's changes when the directory's mtime moves. The text side
 * (TPAD + WOVR, 16.8 MB of a 16.8 MB 0.6B voice, the same bytes in every voice of one model) is
 * stored once in DIR/.textside/<sha256>.qvoice-part; a voice keeps the rest in <id>.qvpart and is
 * put back together byte for byte to be downloaded or spoken with. Owners live in <id>.owner.
 * Servers sharing DIR store and remove text sides under an flock on DIR/.textside/.lock, and a
 * text side goes only when no part on disk names it (not when this server's index has none).
 */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/server_impl.h"
#include "util/fileio.h"
#include "util/sha256.h"
#include "voicefmt/qvf.h"

/* <id>.qvpart: this header, then the voice file without its text side, which goes back at
 * offset (the file's chunks start at 48 mod 64, so the rest stays a valid v4 file). */
#define PART_MAGIC "QVPT"
#define PART_HEAD 56 /* magic, u32 version 1, u64 offset, u64 length, sha256 of the text side */
#define TEXTSIDE_DIR ".textside"

typedef struct {
    char id[65];
    char *name, *owner; /* NULL: none */
    char ts[65];        /* the shared text side's sha256; "" for a whole <id>.qvoice */
    int64_t bytes;      /* on disk, the shared text side not counted */
    cJSON *desc;
    int seen; /* in the last directory read */
} entry;

typedef struct {
    char h[65];
    int64_t bytes;
    int refs; /* index entries using it */
} textside;

struct library {
    pthread_mutex_t mu;
    const char *dir;
    const qv_server *srv; /* its keys: which signatures are trusted */
    entry *v;
    int n, cap;
    textside *ts;
    int n_ts, cap_ts;
    int64_t bytes; /* voices and shared text sides on disk */
    struct timespec mtime; /* of dir when last read */
};

int qvs_is_id(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return 0;
    return n == 64;
}

/* id of a library file name "<64 hex>.qvoice" (1) or "<64 hex>.qvpart" (2), or 0. */
static int id_of(const char *fname, char id[65]) {
    size_t n = strlen(fname);
    if (n != 64 + 7 || (strcmp(fname + 64, ".qvoice") && strcmp(fname + 64, ".qvpart"))) return 0;
    memcpy(id, fname, 64);
    id[64] = 0;
    return qvs_is_id(id) ? 1 + !strcmp(fname + 64, ".qvpart") : 0;
}

static uint64_t rd64(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = x << 8 | p[i];
    return x;
}

static void wr64(uint8_t *p, uint64_t x) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(x >> 8 * i);
}

static void textside_path(const char *dir, const char *h, char *path, size_t size) {
    snprintf(path, size, "%s/" TEXTSIDE_DIR "/%s.qvoice-part", dir, h);
}

/* The text side of the v4 file b[n]: its TPAD and WOVR chunks when they are one run of whole
 * chunks (with padding). 1 (*off, *len set) or 0 (none, or not one run: kept whole). */
static int text_run(const uint8_t *b, size_t n, uint64_t *off, uint64_t *len) {
    qvf_chunk_info c[32];
    int nc, first = -1, end = -1;
    char err[256];
    if (qvf_list_chunks(b, n, "voice", c, 32, &nc, err, sizeof err) || nc > 32) return 0;
    for (int i = 0; i < nc; i++) {
        int t = !strcmp(c[i].tag, "TPAD") || !strcmp(c[i].tag, "WOVR");
        if (!c[i].crc_ok) return 0;
        if (t && end >= 0) return 0; /* a second run */
        if (t && first < 0) first = i;
        if (!t && first >= 0 && end < 0) end = i;
    }
    if (first < 0 || end < 0) return 0;
    *off = c[first].offset;
    *len = c[end].offset - c[first].offset;
    return 1;
}

/* Reads <id>.qvpart: the part (malloc'd, *n bytes) with the text side's offset, length and
 * hash; NULL when it is no such file. */
static uint8_t *read_part(const char *dir, const char *id, size_t *n, uint64_t *off,
                          uint64_t *len, char h[65]) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s.qvpart", dir, id);
    uint8_t *b = (uint8_t *)qvu_read_file(path, (size_t)1 << 31, n, err, sizeof err);
    if (!b) return NULL;
    if (*n < PART_HEAD || memcmp(b, PART_MAGIC, 4) || b[4] != 1 || b[5] || b[6] || b[7] ||
        rd64(b + 8) > *n - PART_HEAD) {
        free(b);
        return NULL;
    }
    *off = rd64(b + 8);
    *len = rd64(b + 16);
    qvu_hex(b + 24, 32, h);
    return b;
}

/* The whole voice file of a part, put back together (malloc'd, *n bytes), or NULL. */
static uint8_t *whole(const char *dir, const char *id, size_t *n) {
    size_t pn, tn;
    uint64_t off, len;
    char h[65], path[4096], err[512];
    uint8_t *part = read_part(dir, id, &pn, &off, &len, h), *b = NULL;
    textside_path(dir, h, path, sizeof path);
    char *t = part ? qvu_read_file(path, (size_t)1 << 31, &tn, err, sizeof err) : NULL;
    if (t && tn == len && (b = malloc(pn - PART_HEAD + tn))) {
        const uint8_t *body = part + PART_HEAD;
        memcpy(b, body, off);
        memcpy(b + off, t, tn);
        memcpy(b + off + tn, body + off, pn - PART_HEAD - off);
        *n = pn - PART_HEAD + tn;
    }
    free(part);
    free(t);
    return b;
}

/* The signature of voice id, whose bytes are b[n] (a part's: without its text side, so a signed
 * part is verified once put back together). Unsigned parts cost no text side read. */
static void signature_of(const char *dir, const char *id, const uint8_t *b, size_t n, int part,
                         qvf_signature *sig) {
    char err[256];
    int rc = qvf_signature_read(b, n, id, sig, err, sizeof err);
    if (part && sig->present) {
        size_t wn;
        uint8_t *w = whole(dir, id, &wn);
        qvf_signature got;
        rc = w ? qvf_signature_read(w, wn, id, &got, err, sizeof err) : -1;
        if (w) *sig = got;
        free(w);
    }
    if (rc) sig->valid = 0;
}

/* The text side h counted once more (refs); its size from the file when new. 0 or -1 (missing,
 * out of memory). */
static int textside_ref(struct library *L, const char *h) {
    for (int i = 0; i < L->n_ts; i++)
        if (!strcmp(L->ts[i].h, h)) return L->ts[i].refs++, 0;
    char path[4096];
    struct stat st;
    textside_path(L->dir, h, path, sizeof path);
    if (stat(path, &st)) return -1;
    if (L->n_ts == L->cap_ts) {
        int cap = L->cap_ts ? 2 * L->cap_ts : 8;
        textside *t = realloc(L->ts, (size_t)cap * sizeof *t);
        if (!t) return -1;
        L->ts = t;
        L->cap_ts = cap;
    }
    textside *t = &L->ts[L->n_ts++];
    memcpy(t->h, h, 65);
    t->bytes = st.st_size;
    t->refs = 1;
    L->bytes += t->bytes;
    return 0;
}

/* One user of h fewer in the index (the file is textside_gc's). */
static void textside_unref(struct library *L, const char *h) {
    for (int i = 0; i < L->n_ts; i++)
        if (!strcmp(L->ts[i].h, h)) {
            if (--L->ts[i].refs) return;
            L->bytes -= L->ts[i].bytes;
            L->ts[i] = L->ts[--L->n_ts];
            return;
        }
}

/* The text sides' lock, shared by every server on DIR (flock: released when fd closes, so a
 * killed server never leaves it held): an fd, or -1 (no .textside/, cannot lock). */
static int textside_lock(const char *dir, int create) {
    char path[4096];
    snprintf(path, sizeof path, "%s/" TEXTSIDE_DIR, dir);
    if (create && mkdir(path, 0755) && errno != EEXIST) return -1;
    snprintf(path, sizeof path, "%s/" TEXTSIDE_DIR "/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && flock(fd, LOCK_EX)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Removes text side h unless a part in DIR names it; under the lock, so no server adds one that
 * names it meanwhile (store writes a text side and its part under the same lock). Reads the head
 * of every part: ~1,000 small reads for a full library, once per delete. */
static void textside_gc(const char *dir, const char *h) {
    int lk = textside_lock(dir, 0);
    if (lk < 0) return;
    DIR *d = opendir(dir);
    struct dirent *de;
    char id[65], path[4096], ph[65];
    int used = !d;
    while (d && !used && (de = readdir(d))) {
        if (id_of(de->d_name, id) != 2) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        uint8_t head[PART_HEAD];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t got = read(fd, head, sizeof head);
        close(fd);
        if (got != PART_HEAD || memcmp(head, PART_MAGIC, 4)) continue;
        qvu_hex(head + 24, 32, ph);
        used = !strcmp(ph, h);
    }
    if (d) closedir(d);
    if (!used) {
        textside_path(dir, h, path, sizeof path);
        unlink(path);
    }
    close(lk);
}

/* The signature of a voice as the list shows it: null when unsigned; trusted when it verifies
 * and is by one of the --trusted keys or by this server's own signing key. */
static cJSON *describe_signature(const qv_server *s, const qvf_signature *sig) {
    if (!sig->present) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    char id[17];
    qvu_hex(sig->key_id, sizeof sig->key_id, id);
    int own = s->sign_key && sig->valid && !memcmp(sig->public_key, s->sign_pub, 32);
    cJSON_AddStringToObject(o, "signer", sig->signer);
    cJSON_AddStringToObject(o, "key_id", id);
    cJSON_AddNumberToObject(o, "signed_at", (double)sig->signed_utc);
    cJSON_AddBoolToObject(o, "valid", sig->valid);
    cJSON_AddBoolToObject(o, "trusted",
                          own || qvf_signature_trusted(sig, s->trusted, s->cfg.n_trusted_keys));
    return o;
}

static cJSON *describe(const struct library *L, const char *id, const qvf_voice *v,
                       const struct stat *st, const qvf_signature *sig) {
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
    const qvf_consent cr = qvf_consent_get(v); /* a legacy note reads as method "note" */
    cJSON_AddBoolToObject(o, "consent", cr.method != NULL);
    if (cr.method) cJSON_AddStringToObject(o, "consent_method", cr.method);
    cJSON *styles = cJSON_AddArrayToObject(o, "styles"); /* its palette: a request's style */
    for (int i = 0; i < v->n_styles; i++)
        cJSON_AddItemToArray(styles, cJSON_CreateString(v->styles[i].name));
    /* what vLLM-Omni's listing shows of an upload, when the file has it */
    const char *about = qvf_meta_get(v, QVS_META_DESCRIPTION);
    if (cr.statement) cJSON_AddStringToObject(o, "consent_statement", cr.statement);
    if (v->transcript) cJSON_AddStringToObject(o, "ref_text", v->transcript);
    if (about) cJSON_AddStringToObject(o, "speaker_description", about);
    cJSON_AddItemToObject(o, "signature", describe_signature(L->srv, sig));
    return o;
}

static entry *find_id(struct library *L, const char *id) {
    for (int i = 0; i < L->n; i++)
        if (!strcmp(L->v[i].id, id)) return &L->v[i];
    return NULL;
}

/* Removes entry i; gc: its text side's file too when no part on disk uses it. */
static void drop(struct library *L, int i, int gc) {
    L->bytes -= L->v[i].bytes;
    if (L->v[i].ts[0]) {
        textside_unref(L, L->v[i].ts);
        if (gc) textside_gc(L->dir, L->v[i].ts);
    }
    free(L->v[i].name);
    free(L->v[i].owner);
    cJSON_Delete(L->v[i].desc);
    L->v[i] = L->v[--L->n];
}

/* Adds the voice v (file id, stat st of the whole file, its signature sig) with owner, kept as a
 * part of disk bytes using the text side ts ("" for a whole file); 0 or -1 (out of memory, text
 * side missing). */
static int insert(struct library *L, const char *id, const qvf_voice *v, const struct stat *st,
                  const qvf_signature *sig, const char *owner, const char *ts, int64_t disk) {
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
    e->bytes = disk;
    memcpy(e->ts, ts, strlen(ts) + 1);
    e->desc = describe(L, id, v, st, sig);
    e->seen = 1;
    if (!e->desc || (name && name[0] && !e->name) || (owner && owner[0] && !e->owner) ||
        (ts[0] && textside_ref(L, ts))) {
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
 * checked, vanished ones dropped. A file that does not read cleanly is left out; on the first
 * read (the server's start) that, and a .qvoice not named by its id, is logged: a directory of
 * named voices given as the library must not look empty for no reason. */
static void refresh(struct library *L) {
    struct stat ds;
    if (stat(L->dir, &ds) || (ds.st_mtim.tv_sec == L->mtime.tv_sec &&
                              ds.st_mtim.tv_nsec == L->mtime.tv_nsec))
        return;
    DIR *d = opendir(L->dir);
    if (!d) return;
    const int first = L->mtime.tv_nsec == -1;
    L->mtime = ds.st_mtim;
    for (int i = 0; i < L->n; i++)
        L->v[i].seen = 0;
    struct dirent *de;
    char id[65], path[4096], err[256], owner[256];
    while ((de = readdir(d))) {
        int kind = id_of(de->d_name, id);
        const size_t nl = strlen(de->d_name);
        if (!kind && first && nl > 7 && !strcmp(de->d_name + nl - 7, ".qvoice"))
            qvs_srv_log(L->srv, "voices: %s/%s is not in the library, whose files are named by "
                        "their SHA-256 (<id>.qvoice): upload it (POST /v1/audio/voices)",
                        L->dir, de->d_name);
        if (!kind) continue;
        entry *e = find_id(L, id);
        if (e) {
            e->seen = 1;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", L->dir, de->d_name);
        qvf_voice *v;
        struct stat st;
        uint8_t *b = NULL; /* the file (a part: with its header) */
        size_t n = 0;
        uint64_t off = 0, len = 0;
        char h[65] = "";
        const size_t head = kind == 2 ? PART_HEAD : 0;
        if (stat(path, &st)) continue;
        snprintf(err, sizeof err, "its text side cannot be read");
        if (!(b = kind == 2 ? read_part(L->dir, id, &n, &off, &len, h)
                            : (uint8_t *)qvu_read_file(path, (size_t)1 << 31, &n, err, sizeof err)) ||
            qvf_read_mem(b + head, n - head, id, 0, &v, err, sizeof err)) {
            if (first) qvs_srv_log(L->srv, "voices: %s left out: %s", path, err);
            free(b);
            continue;
        }
        if (v->file_version == 0) { /* a raw x-vector named .qvoice is not a library voice */
            qvf_voice_free(v);
            free(b);
            continue;
        }
        qvf_signature sig;
        signature_of(L->dir, id, b + head, n - head, kind == 2, &sig);
        int64_t disk = st.st_size;
        st.st_size = (off_t)(disk - (int64_t)head + (int64_t)len); /* as served */
        read_owner(L->dir, id, owner, sizeof owner);
        insert(L, id, v, &st, &sig, owner, h, disk);
        qvf_voice_free(v);
        free(b);
    }
    closedir(d);
    for (int i = L->n - 1; i >= 0; i--)
        if (!L->v[i].seen) drop(L, i, 0); /* gone: the server that deleted it collected */
}

int qvs_library_open(qv_server *s, char *err, size_t es) {
    struct library *L = calloc(1, sizeof *L);
    if (!L) {
        snprintf(err, es, "server: out of memory");
        return -1;
    }
    pthread_mutex_init(&L->mu, NULL);
    L->dir = s->voices_dir;
    L->srv = s;
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
        drop(L, L->n - 1, 0);
    free(L->v);
    free(L->ts);
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

/* May key k delete or replace e? An admin any voice, a user key its own (k NULL: no auth). */
static int may_manage(const api_key *k, const entry *e) {
    return !k || k->admin || (e->owner && !strcmp(e->owner, k->name));
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

/* The whole voice file of a part, put together in a memfd: its descriptor, or -1. */
static int assemble(const char *dir, const char *id) {
    size_t n;
    uint8_t *b = whole(dir, id, &n);
    int fd = b ? memfd_create(id, MFD_CLOEXEC) : -1;
    if (fd >= 0 && write(fd, b, n) != (ssize_t)n) {
        close(fd);
        fd = -1;
    }
    free(b);
    return fd;
}

int qvs_voice_lookup(qv_server *s, const api_key *k, const char *id_or_name, qvs_voice_ref *r) {
    char ts[65] = "";
    r->fd = -1;
    pthread_mutex_lock(&s->lib->mu);
    entry *e = find(s, k, id_or_name);
    if (e) {
        memcpy(r->id, e->id, 65);
        memcpy(ts, e->ts, 65);
        r->icl_frames = cJSON_IsTrue(cJSON_GetObjectItem(e->desc, "has_icl"))
                            ? (int)lround(cJSON_GetNumberValue(cJSON_GetObjectItem(
                                              e->desc, "icl_seconds")) *
                                          QV_FRAME_RATE_HZ)
                            : 0;
        snprintf(r->path, sizeof r->path, "%s/%s.qvoice", s->voices_dir, e->id);
    }
    pthread_mutex_unlock(&s->lib->mu);
    if (!e) return -1;
    if (!ts[0]) return 0;
    /* outside the lock: 17 MB to copy; a delete meanwhile makes it fail (not found) */
    if ((r->fd = assemble(s->voices_dir, r->id)) < 0) return -1;
    snprintf(r->path, sizeof r->path, "/proc/self/fd/%d", r->fd);
    return 0;
}

void qvs_voice_ref_close(qvs_voice_ref *r) {
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
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
            cJSON_AddBoolToObject(o, "deletable", may_manage(k, x));
            if (!k || k->admin) cJSON_AddStringToObject(o, "owner", x->owner ? x->owner : "");
            cJSON_AddItemToArray(a, o);
        }
    } else if (e) {
        a = cJSON_Duplicate(e->desc, 1);
    }
    pthread_mutex_unlock(&s->lib->mu);
    return a;
}

void qvs_library_note_fit(qv_server *s, const char *id, int fits) {
    pthread_mutex_lock(&s->lib->mu);
    entry *e = find_id(s->lib, id);
    if (e) {
        cJSON_DeleteItemFromObjectCaseSensitive(e->desc, "fits");
        cJSON_AddBoolToObject(e->desc, "fits", fits);
    }
    pthread_mutex_unlock(&s->lib->mu);
}

/* Removes e's files and its entry (under the lock): 0, or 500 when its file stays. */
static int unlink_entry(qv_server *s, entry *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", s->voices_dir, e->id, e->ts[0] ? "qvpart" : "qvoice");
    if (unlink(path) && errno != ENOENT) return 500;
    snprintf(path, sizeof path, "%s/%s.owner", s->voices_dir, e->id);
    unlink(path);
    drop(s->lib, (int)(e - s->lib->v), 1);
    return 0;
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

/* Writes b[n] into the library as dst_id: the text side (when it has one) into .textside/ unless
 * there, then <id>.qvpart, else <id>.qvoice. *ts, *disk: what insert needs. 0 or -1. */
static int store(struct library *L, const char *id, const uint8_t *b, size_t n, char ts[65],
                 int64_t *disk) {
    uint64_t off, len;
    char path[4096], tpath[4096];
    ts[0] = 0;
    *disk = (int64_t)n;
    if (!text_run(b, n, &off, &len)) {
        snprintf(path, sizeof path, "%s/%s.qvoice", L->dir, id);
        return write_atomic(path, b, n);
    }
    uint8_t h[32];
    if (qvu_sha256(b + off, len, h)) return -1;
    qvu_hex(h, 32, ts);
    textside_path(L->dir, ts, tpath, sizeof tpath);
    size_t pn = PART_HEAD + n - len;
    uint8_t *p = malloc(pn);
    int lk = p ? textside_lock(L->dir, 1) : -1; /* the text side, then its part, as one step */
    if (lk < 0 || (access(tpath, F_OK) && write_atomic(tpath, b + off, len))) {
        if (lk >= 0) close(lk);
        free(p);
        return -1;
    }
    memcpy(p, PART_MAGIC "\x01\0\0\0", 8);
    wr64(p + 8, off);
    wr64(p + 16, len);
    memcpy(p + 24, h, 32);
    memcpy(p + PART_HEAD, b, off);
    memcpy(p + PART_HEAD + off, b + off + len, n - off - len);
    snprintf(path, sizeof path, "%s/%s.qvpart", L->dir, id);
    int rc = write_atomic(path, p, pn);
    close(lk);
    free(p);
    *disk = (int64_t)pn;
    return rc;
}

int qvs_library_add(qv_server *s, const api_key *k, const uint8_t *b, size_t n, const char *name,
                    char id[65], char replaced[65], cJSON **desc, char *why, size_t ws) {
    uint8_t h[32];
    char dst[4096], err[256], ts[65];
    if (qvu_sha256(b, n, h)) {
        snprintf(why, ws, "cannot hash the voice");
        return 500;
    }
    qvu_hex(h, 32, id);
    struct library *L = s->lib;
    int status = 0;
    replaced[0] = 0;
    qvf_signature sig; /* outside the lock: a signed 0.6B voice is 17 MB to verify (~25 ms) */
    signature_of(L->dir, id, b, n, 0, &sig);
    pthread_mutex_lock(&L->mu);
    refresh(L);
    entry *old = find_id(L, id), *prev = NULL; /* prev: the voice of that name, replaced */
    for (int i = 0; name && i < L->n; i++)
        if (L->v[i].name && !strcmp(L->v[i].name, name) && strcmp(L->v[i].id, id))
            prev = &L->v[i];
    if (prev && !may_manage(k, prev)) {
        snprintf(why, ws, "name %s: another key's voice has it", name);
        status = 403;
        goto out;
    }
    if (prev) snprintf(replaced, 65, "%s", prev->id);
    if (!old && (L->n - !!prev >= s->cfg.max_voices ||
                 L->bytes - (prev ? prev->bytes : 0) + (int64_t)n >
                     (int64_t)s->cfg.max_library_mb << 20)) {
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
    int64_t disk;
    if (!old && store(L, id, b, n, ts, &disk)) { /* the same id is the same bytes: kept */
        snprintf(dst, sizeof dst, "%s/%s.owner", s->voices_dir, id);
        unlink(dst); /* no voice: no owner record either */
        snprintf(why, ws, "cannot write the voice");
        status = 500;
        goto out;
    }
    qvf_voice *v;
    struct stat st = {0};
    st.st_size = (off_t)n;
    st.st_mtime = time(NULL);
    if (!old && !qvf_read_mem(b, n, id, 0, &v, err, sizeof err)) {
        if (insert(L, id, v, &st, &sig, k && !k->admin ? k->name : NULL, ts, disk) == 0)
            old = &L->v[L->n - 1];
        qvf_voice_free(v);
    }
    *desc = old ? cJSON_Duplicate(old->desc, 1) : cJSON_CreateObject();
    /* vLLM-Omni's rule: a name uploaded again replaces its voice (the new one is stored first;
       the index moved: look it up again) */
    if (prev && (prev = find_id(L, replaced)) && unlink_entry(s, prev))
        replaced[0] = 0;
out:
    pthread_mutex_unlock(&L->mu);
    return status;
}

int qvs_library_remove(qv_server *s, const api_key *k, const char *id_or_name, char id[65]) {
    struct library *L = s->lib;
    pthread_mutex_lock(&L->mu);
    entry *e = find(s, k, id_or_name);
    int status = 0;
    if (!e)
        status = 404;
    else if (!may_manage(k, e))
        status = 403;
    else {
        memcpy(id, e->id, 65);
        status = unlink_entry(s, e);
    }
    pthread_mutex_unlock(&L->mu);
    return status;
}
