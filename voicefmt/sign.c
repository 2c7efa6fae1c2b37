/* sign.c — the SIGN chunk: an Ed25519 signature over every byte of a .qvoice before it
 * (docs/qvoice-format.md §4.10). The chunk is ancillary, so readers that do not know it skip it
 * and unsigned files keep working; it sits last before QEND, so every byte a reader uses except
 * the fixed QEND is covered: any edit after signing makes the signature fail. The chunk carries
 * the signer's raw public key (so validity needs no key store) and its id (first 8 bytes of the
 * key's SHA-256); whether that signer is trusted is the caller's decision (qvf_signature_trusted).
 */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fileio.h"
#include "util/sha256.h"
#include "voicefmt/qvf_impl.h"

#define SIGN_FIXED 128u /* fixed fields, then the signer name */
#define SIGN_VERSION 1u
#define SIGN_ED25519 1u
#define MAX_VOICE_BYTES (16ull << 30)

/* ---------------------------------------------------------------- layout */

/* Where the SIGN chunk (if any) and QEND start. The framing must be intact; a SIGN chunk that is
 * not the last before QEND, or a second one, is refused: bytes after it would not be covered. */
static int find_tail(const uint8_t *buf, size_t n, const char *name, uint64_t *sign_off,
                     uint64_t *sign_len, uint64_t *qend_off, char *err, size_t es) {
    int n_ch = 0;
    int rc = qvf_list_chunks(buf, n, name, NULL, 0, &n_ch, err, es);
    if (rc) return rc;
    if (n_ch < 2) return qvf_fail(err, es, QVF_E_MISSING, name, "no chunks to sign");
    qvf_chunk_info *ch = calloc((size_t)n_ch, sizeof *ch);
    if (!ch) return qvf_fail(err, es, QVF_E_NOMEM, name, "chunk list");
    rc = qvf_list_chunks(buf, n, name, ch, n_ch, &n_ch, err, es);
    *sign_off = *sign_len = 0;
    *qend_off = 0;
    for (int i = 0; !rc && i < n_ch; i++) {
        if (!ch[i].crc_ok) rc = qvf_fail(err, es, QVF_E_CRC, name, "chunk %s", ch[i].tag);
        else if (strcmp(ch[i].tag, "QEND") == 0) {
            *qend_off = ch[i].offset;
            if (ch[i].flags != 1 || ch[i].payload_bytes) /* not signed: it must be the fixed one */
                rc = qvf_fail(err, es, QVF_E_FLAGS, name, "QEND: not the fixed end chunk");
        }
        else if (strcmp(ch[i].tag, "SIGN") == 0) {
            if (*sign_len || i != n_ch - 2)
                rc = qvf_fail(err, es, QVF_E_ORDER, name, "SIGN must be the one chunk before QEND");
            else if (ch[i].flags != 0) /* its header is not signed: it must be the one allowed */
                rc = qvf_fail(err, es, QVF_E_FLAGS, name, "SIGN: flags %u (ancillary: 0)", ch[i].flags);
            *sign_off = ch[i].offset;
            *sign_len = ch[i].payload_bytes;
        }
    }
    if (!rc && strcmp(ch[n_ch - 1].tag, "QEND") != 0)
        rc = qvf_fail(err, es, QVF_E_MISSING, name, "QEND");
    /* SIGN's padding is the one part of the file neither signed nor under a CRC: it must be
     * zero, or a checker that reads only the signature would pass bytes an editor changed
     * (found by test_every_byte_flipped) */
    for (uint64_t b = *sign_off + 16 + *sign_len + 4; !rc && *sign_len && b < *qend_off; b++)
        if (buf[b]) rc = qvf_fail(err, es, QVF_E_RESERVED, name, "SIGN: padding not zero");
    free(ch);
    return rc;
}

/* The signed message: the file up to the SIGN chunk, then the payload without the signature. */
static uint8_t *message(const uint8_t *file, uint64_t sign_off, const uint8_t *payload,
                        uint64_t payload_len, size_t *n) {
    *n = (size_t)sign_off + 64 + (size_t)(payload_len - SIGN_FIXED);
    uint8_t *m = malloc(*n ? *n : 1);
    if (!m) return NULL;
    memcpy(m, file, (size_t)sign_off);
    memcpy(m + sign_off, payload, 64);
    memcpy(m + sign_off + 64, payload + SIGN_FIXED, (size_t)(payload_len - SIGN_FIXED));
    return m;
}

static void key_id(const uint8_t pub[32], uint8_t id[8]) {
    uint8_t h[32];
    qvu_sha256(pub, 32, h);
    memcpy(id, h, 8);
}

/* ---------------------------------------------------------------- keys */

int qvf_key_load(const char *path, int private_key, void **key, uint8_t pub[32], char *err,
                 size_t es) {
    *key = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return qvf_fail(err, es, QVF_E_IO, path, "%s", strerror(errno));
    EVP_PKEY *k = private_key ? PEM_read_PrivateKey(f, NULL, NULL, NULL)
                              : PEM_read_PUBKEY(f, NULL, NULL, NULL);
    fclose(f);
    size_t len = 32;
    if (!k || EVP_PKEY_id(k) != EVP_PKEY_ED25519 || !EVP_PKEY_get_raw_public_key(k, pub, &len) ||
        len != 32) {
        EVP_PKEY_free(k);
        return qvf_fail(err, es, QVF_E_UNSUPPORTED, path, "not an Ed25519 %s key in PEM",
                        private_key ? "private" : "public");
    }
    *key = k;
    return QVF_OK;
}

void qvf_key_free(void *key) { EVP_PKEY_free(key); }

int qvf_keygen(const char *private_path, const char *public_path, uint8_t id[8], char *err,
               size_t es) {
    EVP_PKEY *k = NULL;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
    if (!c || EVP_PKEY_keygen_init(c) <= 0 || EVP_PKEY_keygen(c, &k) <= 0) {
        EVP_PKEY_CTX_free(c);
        return qvf_fail(err, es, QVF_E_NOMEM, private_path, "Ed25519 key generation failed");
    }
    EVP_PKEY_CTX_free(c);
    const char *paths[2] = {private_path, public_path};
    int rc = QVF_OK;
    for (int i = 0; i < 2 && !rc; i++) {
        qvu_wfile *w = NULL;
        if (qvu_wfile_open(&w, paths[i], err, es)) {
            rc = QVF_E_IO;
            break;
        }
        FILE *f = qvu_wfile_stream(w);
        if (i == 0) fchmod(qvu_wfile_fd(w), 0600); /* the private key is the signer's alone */
        if (!f || !(i == 0 ? PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL)
                           : PEM_write_PUBKEY(f, k))) {
            qvu_wfile_abort(w);
            rc = qvf_fail(err, es, QVF_E_IO, paths[i], "cannot write the key");
        } else if (qvu_wfile_commit(w, err, es)) {
            rc = QVF_E_IO;
        }
    }
    uint8_t pub[32];
    size_t len = 32;
    if (!rc && EVP_PKEY_get_raw_public_key(k, pub, &len)) key_id(pub, id);
    EVP_PKEY_free(k);
    return rc;
}

/* ---------------------------------------------------------------- sign */

int qvf_sign(const void *buf_, size_t n, const char *name, void *key, const char *signer,
             uint64_t signed_utc, void **out, size_t *out_n, char *err, size_t es) {
    const uint8_t *buf = buf_;
    *out = NULL;
    *out_n = 0;
    uint64_t sign_off, sign_len, qend_off;
    int rc = find_tail(buf, n, name, &sign_off, &sign_len, &qend_off, err, es);
    if (rc) return rc;
    uint64_t start = sign_len ? sign_off : qend_off; /* a new signature replaces an old one */
    size_t s_len = signer ? strlen(signer) : 0;
    if (s_len > QVF_MAX_SIGNER_BYTES || !qvf_utf8_valid((const uint8_t *)signer, s_len))
        return qvf_fail(err, es, QVF_E_RANGE, name, "signer name: at most %u bytes of UTF-8",
                        QVF_MAX_SIGNER_BYTES);
    uint64_t p_len = SIGN_FIXED + s_len;
    /* the payload starts at a multiple of 64; after it and its CRC, zeros up to the next
     * header position, which is 16 bytes before a multiple of 64; then QEND (20 bytes) */
    uint64_t qend = start + align_up(p_len + 20, 64);
    size_t total = (size_t)qend + 20;
    uint8_t *f = calloc(1, total);
    if (!f) return qvf_fail(err, es, QVF_E_NOMEM, name, "signed copy");
    memcpy(f, buf, (size_t)start);
    uint8_t *h = f + start, *p = h + 16;
    memcpy(h, "SIGN", 4);
    wr32(h + 4, 0);
    wr64(h + 8, p_len);
    wr32(p, SIGN_VERSION);
    wr32(p + 4, SIGN_ED25519);
    size_t len = 32;
    if (!EVP_PKEY_get_raw_public_key(key, p + 16, &len) || len != 32) {
        free(f);
        return qvf_fail(err, es, QVF_E_ARG, name, "signing key is not Ed25519");
    }
    key_id(p + 16, p + 8);
    wr64(p + 48, signed_utc);
    wr32(p + 56, (uint32_t)s_len);
    if (s_len) memcpy(p + SIGN_FIXED, signer, s_len); /* signer may be NULL (none) */
    size_t m_len;
    uint8_t *m = message(f, start, p, p_len, &m_len);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    size_t sig_len = 64;
    int ok = m && c && EVP_DigestSignInit(c, NULL, NULL, NULL, key) == 1 &&
             EVP_DigestSign(c, p + 64, &sig_len, m, m_len) == 1 && sig_len == 64;
    EVP_MD_CTX_free(c);
    free(m);
    if (!ok) {
        free(f);
        return qvf_fail(err, es, QVF_E_NOMEM, name, "Ed25519 signing failed");
    }
    wr32(p + p_len, qvf_crc32c(0, h, 16 + p_len));
    uint8_t *q = f + qend;
    memcpy(q, "QEND", 4);
    wr32(q + 4, 1);
    wr32(q + 16, qvf_crc32c(0, q, 16));
    *out = f;
    *out_n = total;
    return QVF_OK;
}

/* ---------------------------------------------------------------- verify */

int qvf_signature_read(const void *buf_, size_t n, const char *name, qvf_signature *sig,
                       char *err, size_t es) {
    const uint8_t *buf = buf_;
    memset(sig, 0, sizeof *sig);
    uint64_t sign_off, sign_len, qend_off;
    int rc = find_tail(buf, n, name, &sign_off, &sign_len, &qend_off, err, es);
    if (rc || !sign_len) return rc;
    sig->present = 1;
    const uint8_t *p = buf + sign_off + 16;
    if (sign_len < SIGN_FIXED || sign_len > SIGN_FIXED + QVF_MAX_SIGNER_BYTES)
        return qvf_fail(err, es, QVF_E_CHUNK_SIZE, name, "SIGN: payload of %llu bytes",
                        (unsigned long long)sign_len);
    if (rd32(p) != SIGN_VERSION || rd32(p + 4) != SIGN_ED25519)
        return qvf_fail(err, es, QVF_E_UNSUPPORTED, name, "SIGN: version %u, algorithm %u",
                        rd32(p), rd32(p + 4));
    uint32_t s_len = rd32(p + 56);
    if (s_len != sign_len - SIGN_FIXED || rd32(p + 60) != 0)
        return qvf_fail(err, es, QVF_E_MISMATCH, name, "SIGN: signer name length");
    if (!qvf_utf8_valid(p + SIGN_FIXED, s_len))
        return qvf_fail(err, es, QVF_E_UTF8, name, "SIGN: signer name");
    memcpy(sig->key_id, p + 8, 8);
    memcpy(sig->public_key, p + 16, 32);
    sig->signed_utc = rd64(p + 48);
    memcpy(sig->signer, p + SIGN_FIXED, s_len);
    uint8_t id[8];
    key_id(sig->public_key, id);
    if (memcmp(id, sig->key_id, 8) != 0)
        return qvf_fail(err, es, QVF_E_SIGNATURE, name, "SIGN: key id does not match its key");
    EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, sig->public_key, 32);
    size_t m_len;
    uint8_t *m = message(buf, sign_off, p, sign_len, &m_len);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = k && m && c && EVP_DigestVerifyInit(c, NULL, NULL, NULL, k) == 1 &&
             EVP_DigestVerify(c, p + 64, 64, m, m_len) == 1;
    EVP_MD_CTX_free(c);
    EVP_PKEY_free(k);
    free(m);
    if (!ok) return qvf_fail(err, es, QVF_E_SIGNATURE, name, "signature does not verify");
    sig->valid = 1;
    return QVF_OK;
}

int qvf_signature_trusted(const qvf_signature *sig, const uint8_t (*keys)[32], int n_keys) {
    if (!sig->valid) return 0;
    for (int i = 0; i < n_keys; i++)
        if (memcmp(keys[i], sig->public_key, 32) == 0) return 1;
    return 0;
}
