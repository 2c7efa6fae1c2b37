/* test_sign.c — signed voice files (voicefmt/sign.c, docs/qvoice-format.md §4.10): a signed file
 * still reads as the same voice (the SIGN chunk is ancillary), verifies, and names its key; every
 * edit after signing is caught even when the attacker fixes the chunk CRCs (each chunk's payload
 * and header fields, the file header, and each field of the SIGN chunk itself; and bytes of
 * every region flipped one at a time, padding and QEND included); a re-signature
 * replaces the old one; trust is by public key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/helpers/qvf_sample.h"
#include "tests/unit/helpers/tmpdir.h"
#include "voicefmt/qvf.h"
#include "tests/unit/helpers/run.h"

static uint8_t *g_plain, *g_signed;
static size_t g_n_plain, g_n_signed;
static void *g_key;
static uint8_t g_pub[32];

static int setup(void **state) {
    if (tmpdir_setup(state)) return -1;
    char err[512], priv[4096], pub[4096];
    uint8_t id[8];
    snprintf(priv, sizeof priv, "%s", tmp_path("k.pem"));
    snprintf(pub, sizeof pub, "%s", tmp_path("k.pub.pem"));
    qvf_voice *v = qvf_sample_voice(1);
    if (!v || !(g_plain = qvf_sample_serialize(v, 4, &g_n_plain))) return -1;
    qvf_voice_free(v);
    if (qvf_keygen(priv, pub, id, err, sizeof err) ||
        qvf_key_load(priv, 1, &g_key, g_pub, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    void *out;
    if (qvf_sign(g_plain, g_n_plain, "s.qvoice", g_key, "Studio A", 1790000000, &out, &g_n_signed,
                 err, sizeof err))
        return -1;
    g_signed = out;
    return 0;
}

static int teardown(void **state) {
    free(g_plain);
    free(g_signed);
    qvf_key_free(g_key);
    return tmpdir_teardown(state);
}

static int sig_of(const uint8_t *b, size_t n, qvf_signature *sig) {
    char err[512];
    return qvf_signature_read(b, n, "t.qvoice", sig, err, sizeof err);
}

static void test_signed_reads_and_verifies(void **state) {
    (void)state;
    char err[512], why[256];
    qvf_voice *a, *b;
    assert_int_equal(qvf_read_mem(g_plain, g_n_plain, "a", 0, &a, err, sizeof err), 0);
    assert_int_equal(qvf_read_mem(g_signed, g_n_signed, "b", 0, &b, err, sizeof err), 0);
    assert_true(qvf_sample_equal(a, b, 1, why, sizeof why));
    qvf_voice_free(a);
    qvf_voice_free(b);
    qvf_signature sig;
    assert_int_equal(sig_of(g_plain, g_n_plain, &sig), 0);
    assert_int_equal(sig.present, 0);
    assert_int_equal(sig_of(g_signed, g_n_signed, &sig), 0);
    assert_true(sig.present && sig.valid);
    assert_string_equal(sig.signer, "Studio A");
    assert_int_equal(sig.signed_utc, 1790000000);
    assert_memory_equal(sig.public_key, g_pub, 32);
    assert_int_equal(qvf_signature_trusted(&sig, (const uint8_t(*)[32])g_pub, 1), 1);
    uint8_t other[1][32] = {{1}};
    assert_int_equal(qvf_signature_trusted(&sig, (const uint8_t(*)[32])other, 1), 0);
    printf("  signed %zu -> %zu bytes, signature valid, old reader content identical\n",
           g_n_plain, g_n_signed);
}

static void test_every_edit_is_caught(void **state) {
    (void)state;
    qvf_chunk_info ch[64];
    int nc = 0, n_edits = 0;
    char err[512];
    assert_int_equal(qvf_list_chunks(g_signed, g_n_signed, "s", ch, 64, &nc, err, sizeof err), 0);
    uint8_t *b = malloc(g_n_signed);
    for (int i = 0; i < nc && i < 64; i++) {
        if (!strcmp(ch[i].tag, "QEND")) continue;
        /* the header's flags and length word, then bytes spread over the payload */
        uint64_t at[40];
        int n_at = 0;
        at[n_at++] = ch[i].offset + 4;
        for (uint64_t k = 0; k < 32 && k < ch[i].payload_bytes; k++)
            at[n_at++] = ch[i].offset + 16 + k * ch[i].payload_bytes / 32;
        for (int j = 0; j < n_at; j++) {
            memcpy(b, g_signed, g_n_signed);
            b[at[j]] ^= 0x01;
            qvf_sample_fix_crcs(b, g_n_signed);
            qvf_signature sig;
            int rc = sig_of(b, g_n_signed, &sig);
            if (rc == 0) fail_msg("edit at byte %llu of chunk %s not caught",
                                  (unsigned long long)at[j], ch[i].tag);
            n_edits++;
        }
    }
    /* the file header (version minor, reserved words) */
    for (size_t off = 8; off < 12; off++) {
        memcpy(b, g_signed, g_n_signed);
        b[off] ^= 0x80;
        qvf_sample_fix_crcs(b, g_n_signed);
        qvf_signature sig;
        assert_int_not_equal(sig_of(b, g_n_signed, &sig), 0);
        n_edits++;
    }
    free(b);
    printf("  %d edits (CRCs recomputed after each): every one caught\n", n_edits);
}

/* Bytes of the signed file flipped one at a time, CRCs recomputed: the result never verifies as
 * signed. Every byte of the file header, each chunk header, CRC padding, META and SIGN; every
 * 61st byte of the larger payloads (tensors). The CRC fields themselves are not edits (qvf_sample_fix_crcs
 * writes them back). An edit of SIGN's tag leaves an unknown ancillary chunk: the file then reads
 * as unsigned (as one whose signature was dropped), which a check for a trusted signer refuses. */
static void test_every_byte_flipped(void **state) {
    (void)state;
    qvf_chunk_info ch[64];
    int nc = 0;
    char err[512];
    assert_int_equal(qvf_list_chunks(g_signed, g_n_signed, "s", ch, 64, &nc, err, sizeof err), 0);
    uint8_t *skip = calloc(g_n_signed, 1), *b = malloc(g_n_signed);
    assert_true(skip && b);
    memset(skip + 12, 1, 4);
    for (int i = 0; i < nc && i < 64; i++) {
        const uint64_t crc = ch[i].offset + 16 + ch[i].payload_bytes;
        if (crc + 4 <= g_n_signed) memset(skip + crc, 1, 4);
        if (ch[i].payload_bytes > 1024) /* a tensor: sampled */
            for (uint64_t k = 0; k < ch[i].payload_bytes; k++)
                skip[ch[i].offset + 16 + k] = k % 61 != 0;
    }
    int n_edits = 0, n_unsigned = 0;
    for (size_t off = 0; off < g_n_signed; off++) {
        if (skip[off]) continue;
        memcpy(b, g_signed, g_n_signed);
        b[off] ^= 0x01;
        qvf_sample_fix_crcs(b, g_n_signed);
        qvf_signature sig;
        if (sig_of(b, g_n_signed, &sig) == 0 && sig.present && sig.valid)
            fail_msg("byte %zu of %zu flipped: the signature still verifies", off, g_n_signed);
        n_unsigned += sig_of(b, g_n_signed, &sig) == 0 && !sig.present;
        n_edits++;
    }
    free(b), free(skip);
    printf("  %d single-byte edits of a %zu-byte signed file: none verifies (%d read as "
           "unsigned: SIGN's tag edited)\n",
           n_edits, g_n_signed, n_unsigned);
    assert_true(n_unsigned <= 4);
}

static void test_resign_and_trailing(void **state) {
    (void)state;
    char err[512];
    void *again;
    size_t n_again;
    assert_int_equal(qvf_sign(g_signed, g_n_signed, "s", g_key, NULL, 1790000001, &again,
                              &n_again, err, sizeof err),
                     0);
    qvf_signature sig;
    assert_int_equal(sig_of(again, n_again, &sig), 0);
    assert_true(sig.valid);
    assert_string_equal(sig.signer, "");
    assert_int_equal(sig.signed_utc, 1790000001);
    /* one SIGN chunk only: the old one was replaced, not kept */
    qvf_chunk_info ch[64];
    int nc = 0, n_sign = 0;
    assert_int_equal(qvf_list_chunks(again, n_again, "s", ch, 64, &nc, err, sizeof err), 0);
    for (int i = 0; i < nc; i++) n_sign += !strcmp(ch[i].tag, "SIGN");
    assert_int_equal(n_sign, 1);
    free(again);
    /* a legacy file cannot be signed */
    qvf_voice *v = qvf_sample_voice(0);
    size_t n3;
    uint8_t *v3 = qvf_sample_serialize(v, 3, &n3);
    qvf_voice_free(v);
    assert_int_not_equal(qvf_sign(v3, n3, "v3", g_key, NULL, 0, &again, &n_again, err, sizeof err),
                         0);
    printf("  legacy v3: %s\n", err);
    free(v3);
}

QVT_MAIN(setup, teardown, test_signed_reads_and_verifies, test_every_edit_is_caught,
         test_every_byte_flipped,
         test_resign_and_trailing)
