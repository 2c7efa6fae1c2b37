/* fuzz_qvf_read.c — libFuzzer target: the v4 reader, the chunk lister and the signature check
 * (SIGN chunk) on an in-memory file.
 * Accepted tensors up to 16 MiB are decoded against a zero target with hash checks on, so every
 * block the reader lets through is really decompressed (ASan catches an escaping range).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "voicefmt/qvf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    qvf_voice *v = NULL;
    if (!qvf_read_mem(data, size, "fuzz.qvoice", 0, &v, err, sizeof err)) {
        for (uint32_t i = 0; i < v->n_tensors; i++) {
            const qvf_tensor *t = &v->tensors[i];
            if (t->raw_bytes > (16u << 20)) continue;
            void *z = calloc(1, t->raw_bytes), *o = malloc(t->raw_bytes);
            if (z && o) (void)qvf_wdelta_apply(t, z, o, 1, err, sizeof err);
            free(z);
            free(o);
        }
        const qvf_consent c = qvf_consent_get(v); /* the record, or the legacy note mapped */
        if (c.method && !c.statement && c.legacy) __builtin_trap();
        qvf_voice_free(v);
    }
    qvf_chunk_info ch[16];
    int n;
    (void)qvf_list_chunks(data, size, "fuzz", ch, 16, &n, err, sizeof err);
    qvf_signature sig;
    (void)qvf_signature_read(data, size, "fuzz", &sig, err, sizeof err);
    return 0;
}
