/* fuzz_legacy_read.c — libFuzzer target: the legacy v1–v3 .qvoice and raw .bin readers.
 * Input = one selector byte (value % 4: 0 = .bin, 1..3 = .qvoice version) + the bytes after the
 * 8-byte "QVCE"+version header, so the fuzzer never wastes time on the magic.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "voicefmt/qvf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0] % 4;
    uint8_t *buf = malloc(size + 7);
    if (!buf) return 0;
    size_t n;
    if (sel == 0) {
        memcpy(buf, data + 1, size - 1);
        n = size - 1;
    } else {
        memcpy(buf, "QVCE", 4);
        buf[4] = (uint8_t)sel;
        buf[5] = buf[6] = buf[7] = 0;
        memcpy(buf + 8, data + 1, size - 1);
        n = size + 7;
    }
    char err[256];
    qvf_voice *v = NULL;
    if (!qvf_read_mem(buf, n, sel ? "fuzz.qvoice" : "fuzz.bin", 0, &v, err, sizeof err)) {
        for (uint32_t i = 0; i < v->n_tensors; i++) {
            const qvf_tensor *t = &v->tensors[i];
            if (t->raw_bytes > (16u << 20)) continue;
            void *z = calloc(1, t->raw_bytes), *o = malloc(t->raw_bytes);
            if (z && o) (void)qvf_wdelta_apply(t, z, o, 0, err, sizeof err);
            free(z);
            free(o);
        }
        qvf_voice_free(v);
    }
    free(buf);
    return 0;
}
