/* sibling.c — the text-side row comparison of sibling.h: one cosine per row pair, the lowest
 * decides, so a single foreign row (a voice whose TPAD came from another checkpoint) is enough.
 */
#include "checkpoint/sibling.h"

#include <stdio.h>

#include "kernels/kernels.h"

enum qvm_kinship qvm_sibling_judge(const qvm_text_rows *voice, const qvm_text_rows *model,
                                   int hidden, int text_hidden, double *min_cos, char *why,
                                   size_t why_size) {
    const struct {
        const char *what;
        const float *a, *b;
        int n;
    } rows[5] = {
        {"TPAD pad row", voice->tpad, model->tpad, hidden},
        {"TPAD bos row", voice->tpad ? voice->tpad + hidden : NULL,
         model->tpad ? model->tpad + hidden : NULL, hidden},
        {"TPAD eos row", voice->tpad ? voice->tpad + 2 * hidden : NULL,
         model->tpad ? model->tpad + 2 * hidden : NULL, hidden},
        {"WOVR fc1 bias", voice->fc1_bias, model->fc1_bias, text_hidden},
        {"WOVR fc2 bias", voice->fc2_bias, model->fc2_bias, hidden},
    };
    double lo = 1.0;
    const char *worst = NULL;
    int n = 0;
    for (int i = 0; i < 5; i++) {
        if (!rows[i].a || !rows[i].b || rows[i].n <= 0) continue;
        double c = qvk_cosine(rows[i].a, rows[i].b, rows[i].n);
        if (!n++ || c < lo) lo = c, worst = rows[i].what;
    }
    if (min_cos) *min_cos = lo;
    enum qvm_kinship k = !n                          ? QVM_KIN_UNKNOWN
                         : lo >= QVM_SIBLING_MIN_COS ? QVM_KIN_SIBLING
                                                     : QVM_KIN_FOREIGN;
    if (why && why_size) {
        if (k == QVM_KIN_UNKNOWN)
            snprintf(why, why_size,
                     "no TPAD or WOVR rows: cannot tell which checkpoint it was "
                     "made with");
        else
            snprintf(why, why_size,
                     "text-side rows %s the model's (%d compared, lowest cosine %.6f: %s; a "
                     "sibling checkpoint gives >= %.2f)",
                     k == QVM_KIN_SIBLING ? "match" : "do not match", n, lo, worst,
                     QVM_SIBLING_MIN_COS);
    }
    return k;
}
