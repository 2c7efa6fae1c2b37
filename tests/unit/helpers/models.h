/* models.h — the synthetic checkpoints the unit tests load ($QVOICE_CACHE, default ./cache). */
#ifndef QV_TEST_MODELS_H
#define QV_TEST_MODELS_H

#include <stdint.h>

#include "include/qvoice.h"

/* Where the synthetic checkpoints are: $QVOICE_CACHE, or "cache" when it is unset or empty. */
const char *test_cache_dir(void);
/* rel ("tools/mkmodel", "examples/stream_wav") in the build this test belongs to: the build
 * dir holds <build dir>/tests/<this test> (build/, or build-asan/ under make asan, where build/
 * may not exist). A static buffer, valid until the next call. */
const char *test_built(const char *rel);
/* Loads $QVOICE_CACHE/<name>; fails the running test (cmocka fail_msg) when it cannot. */
qv_model *test_model_load(const char *name);
/* Opens the model directory dir (checkpoint/ckpt.h); fails the running test when it cannot. The
 * loaders take their own reference: free it with qvm_ckpt_free once they are made. */
struct qvm_ckpt *test_ckpt_open(const char *dir);

/* For qv_pcm callbacks: appends the k samples at x to the malloc'd *buf holding *n of *cap
 * (grown by doubling; fails the running test when out of memory). */
void test_pcm_append(float **buf, int64_t *n, int64_t *cap, const float *x, int k);

#endif
