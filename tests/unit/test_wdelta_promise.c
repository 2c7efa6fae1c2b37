/* test_wdelta_promise.c — the WDELTA promise (issue 6) on the synthetic 0.6B pair
 * ($QVOICE_CACHE/q06b-base, q06b-cv): bin/clone --target-cv makes a heavy voice (x-vector + ICL +
 * weight delta) from the bundled clip; bin/speak on q06b-cv with it gives the same bytes as on
 * q06b-base with the same seed (the delta makes the CustomVoice weights the Base weights bit for
 * bit, and the model then builds Base's prompt), and differs without the delta; the same voice is
 * refused by another checkpoint (tiny-cv). Few frames keep it short; the clone takes ~15-30 s.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

static char cache[1024], tmp[256], voice[512];

static int setup(void **st) {
    (void)st;
    snprintf(cache, sizeof cache, "%s", test_cache_dir());
    snprintf(tmp, sizeof tmp, "/tmp/qv_wdp_%d", (int)getpid());
    snprintf(voice, sizeof voice, "%s/heavy.qvoice", tmp);
    if (mkdir(tmp, 0700) || access("bin/speak", X_OK) || access("bin/clone", X_OK)) {
        printf("setup: cannot create %s or no bin/speak, bin/clone (cwd must be the repo root)\n",
               tmp);
        return -1;
    }
    return 0;
}

static int teardown(void **st) {
    (void)st;
    return sh("rm -rf %s", tmp) == 0 ? 0 : -1;
}

static void test_promise(void **st) {
    (void)st;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/q06b-cv/model.safetensors", cache);
    if (access(dir, R_OK)) {
        printf("no %s (make models-full): skipped\n", dir);
        skip();
    }
    assert_int_equal(sh("bin/clone -m %s/q06b-base --target-cv %s/q06b-cv "
                        "tests/audio/en_ohenry_chenevert.wav -s 8 -t 'One dollar and eighty seven "
                        "cents. That was all. And sixty cents of it was in pennies saved one and "
                        "two at a time.' -o %s > %s/clone.log 2>&1",
                        cache, cache, voice, tmp),
                     0);
    printf("heavy voice: %ld bytes\n", file_bytes(voice));
    char base[512], cv[512], nod[512], log[512], x[512];
    snprintf(base, sizeof base, "%s/base.pcm", tmp);
    snprintf(cv, sizeof cv, "%s/cv.pcm", tmp);
    snprintf(nod, sizeof nod, "%s/nodelta.pcm", tmp);
    snprintf(log, sizeof log, "%s/speak.log", tmp);
    snprintf(x, sizeof x, "%s/refused.wav", tmp);
    /* the samples as synthesized: the mark's payload and the provenance tags name the model,
     * which differs here by design (docs/provenance.md) */
    const char *args = "-t 'Hello world.' --seed 11 --max-frames 8 --no-watermark";
    assert_int_equal(sh("bin/speak -q -m %s/q06b-base --voice %s %s -o %s", cache, voice, args,
                        base),
                     0);
    assert_int_equal(sh("bin/speak -m %s/q06b-cv --voice %s %s -o %s 2> %s", cache, voice, args,
                        cv, log),
                     0);
    assert_true(file_has(log, "weight delta applied"));
    assert_int_equal(sh("bin/speak -q -m %s/q06b-cv --voice %s --no-wdelta %s -o %s", cache,
                        voice, args, nod),
                     0);
    long d = tmp_first_diff(base, 0, cv), dn = tmp_first_diff(base, 0, nod);
    printf("0.6B WDELTA: CustomVoice + delta vs Base: %s (%ld bytes); without the delta: %s\n",
           d < 0 ? "byte-identical" : "DIFFERENT", file_bytes(base),
           dn < 0 ? "SAME" : "different");
    assert_true(file_bytes(base) > 0);
    assert_int_equal(d, -1);
    assert_true(dn >= 0);
    /* another checkpoint refuses it and writes nothing */
    assert_int_equal(sh("bin/speak -m %s/tiny-cv --voice %s -t 'Hi.' --max-frames 4 -o %s 2> %s",
                        cache, voice, x, log),
                     1);
    assert_true(file_has(log, "made for another checkpoint"));
    assert_true(file_bytes(x) < 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_promise)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
