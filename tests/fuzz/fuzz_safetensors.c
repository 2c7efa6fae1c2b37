/* fuzz_safetensors.c — libFuzzer target: the safetensors header parser on an in-memory image.
 * Every accepted tensor is looked up by name, shape-checked and widened, so any range the parser
 * lets through is actually read (ASan catches a range that escapes the buffer).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "checkpoint/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    qvm_st *st = qvm_st_open_memory(data, size, "fuzz", err, sizeof err);
    if (!st) return 0;
    for (int i = 0; i < qvm_st_count(st); i++) {
        const qvm_tensor *t = qvm_st_at(st, i);
        if (qvm_st_find(st, t->name) != t) abort();
        (void)qvm_st_expect(st, t->name, t->dtype, t->n_dims, t->shape, err, sizeof err);
        if (t->n_bytes <= (1u << 20)) qvk_free(qvm_tensor_to_f32(t));
    }
    qvm_st_close(st);
    return 0;
}
