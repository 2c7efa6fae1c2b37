/* models.h — the synthetic checkpoints the unit tests load ($QVOICE_CACHE, default ./cache). */
#ifndef QV_TEST_MODELS_H
#define QV_TEST_MODELS_H

#include "include/qvoice.h"

/* Loads $QVOICE_CACHE/<name>; fails the running test (cmocka fail_msg) when it cannot. */
qv_model *test_model_load(const char *name);
/* Opens the model directory dir (checkpoint/ckpt.h); fails the running test when it cannot. The
 * loaders take their own reference: free it with qvm_ckpt_free once they are made. */
struct qvm_ckpt *test_ckpt_open(const char *dir);

#endif
