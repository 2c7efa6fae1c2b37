/* test_qvf_tool.c — bin/voicefmt end to end: exit codes (0 ok / 1 failure / 2 usage; diff 0 same /
 * 1 different / 2 trouble), convert v4 -> v3 -> v4 unchanged, strip, extract formats, mix, list.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/helpers/shell.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/unit/helpers/qvf_sample.h"

static char dir[64], err[512];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/qvf_tool_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    qvf_voice *full = qvf_sample_voice(1), *lite = qvf_sample_voice(0);
    char p[256];
    snprintf(p, sizeof p, "%s/full.qvoice", dir);
    int rc = qvf_write_file(full, p, 4, err, sizeof err);
    snprintf(p, sizeof p, "%s/lite.qvoice", dir);
    rc |= qvf_write_file(lite, p, 4, err, sizeof err);
    qvf_voice_free(full);
    qvf_voice_free(lite);
    return rc;
}

static int teardown(void **state) {
    (void)state;
    return sh("rm -rf %s", dir);
}

#define V "bin/voicefmt"
#define Q " >/dev/null 2>&1"

static void test_usage_and_help(void **state) {
    (void)state;
    assert_int_equal(sh(V " --help | grep -q 'EXIT STATUS'"), 0);
    assert_int_equal(sh(V " --version | grep -qx 'voicefmt (qvoice) [0-9]*\\.[0-9]*\\.[0-9]*'"), 0);
    /* a directory named on the command line that does not exist: usage error, one line */
    assert_int_equal(sh(V " list %s/missing 2>%s/list.err", dir, dir), 2);
    assert_int_equal(sh("test $(wc -l < %s/list.err) -eq 1 && grep -q 'missing' %s/list.err", dir, dir), 0);
    assert_int_equal(sh(V Q), 2);
    assert_int_equal(sh(V " frobnicate" Q), 2);
    assert_int_equal(sh(V " convert --to v9 -o %s/x %s/full.qvoice" Q, dir, dir), 2);
    assert_int_equal(sh(V " extract %s/full.qvoice" Q, dir), 2);
    assert_int_equal(sh(V " mix -o %s/m.qvoice %s/full.qvoice" Q, dir, dir), 2); /* no :WEIGHT */
}

static void test_inspect_verify(void **state) {
    (void)state;
    assert_int_equal(sh(V " inspect %s/full.qvoice | grep -q 'chunk WDTN.*CRC ok'", dir), 0);
    assert_int_equal(sh(V " inspect --json %s/full.qvoice | grep -q '\"icl_frames\":.3'", dir), 0);
    assert_int_equal(sh(V " verify %s/full.qvoice %s/lite.qvoice" Q, dir, dir), 0);
    /* one flipped byte: verify fails naming the chunk, inspect marks the CRC bad */
    assert_int_equal(sh("cp %s/full.qvoice %s/flip.qvoice && printf 'X' | dd of=%s/flip.qvoice "
                        "bs=1 seek=1100 conv=notrunc" Q,
                        dir, dir, dir),
                     0);
    assert_int_equal(sh(V " verify %s/flip.qvoice 2>&1 | grep -q 'chunk TPAD.*CRC mismatch'", dir),
                     0);
    assert_int_equal(sh(V " verify %s/flip.qvoice" Q, dir), 1);
    assert_int_equal(sh(V " inspect %s/flip.qvoice 2>/dev/null | grep -q 'TPAD.*CRC BAD'", dir), 0);
    assert_int_equal(sh("head -c 1000 %s/full.qvoice > %s/cut.qvoice", dir, dir), 0);
    assert_int_equal(sh(V " verify %s/cut.qvoice 2>&1 | grep -q 'truncated'", dir), 0);
}

static void test_convert_diff_strip(void **state) {
    (void)state;
    assert_int_equal(sh(V " convert --to v3 -o %s/f3.qvoice %s/full.qvoice" Q, dir, dir), 0);
    assert_int_equal(sh(V " convert -o %s/f4.qvoice %s/f3.qvoice" Q, dir, dir), 0);
    assert_int_equal(sh(V " diff %s/full.qvoice %s/f4.qvoice" Q, dir, dir), 0);
    assert_int_equal(sh(V " diff %s/full.qvoice %s/f3.qvoice" Q, dir, dir), 0);
    assert_int_equal(sh(V " diff %s/full.qvoice %s/lite.qvoice" Q, dir, dir), 1);
    assert_int_equal(sh(V " diff %s/full.qvoice %s/missing.qvoice" Q, dir, dir), 2);
    assert_int_equal(sh(V " strip --drop wdelta -o %s/s.qvoice %s/full.qvoice" Q, dir, dir), 0);
    assert_int_equal(sh(V " diff %s/s.qvoice %s/lite.qvoice" Q, dir, dir), 0);
    assert_int_equal(sh(V " strip --drop icl -o %s/n.qvoice %s/lite.qvoice" Q, dir, dir), 0);
    assert_int_equal(sh(V " extract --codes %s/c.txt %s/n.qvoice" Q, dir, dir),
                     1); /* no codes left */
}

static void test_extract_mix_list(void **state) {
    (void)state;
    assert_int_equal(sh(V " extract --codes %s/c.txt %s/full.qvoice" Q, dir, dir), 0);
    assert_int_equal(
        sh("test $(wc -l < %s/c.txt) -eq 3 && test $(head -1 %s/c.txt | wc -w) -eq 16", dir, dir),
        0);
    assert_int_equal(sh(V " extract --xvector %s/x.bin %s/full.qvoice" Q, dir, dir), 0);
    assert_int_equal(sh("test $(stat -c %%s %s/x.bin) -eq 64", dir), 0);
    assert_int_equal(
        sh(V " extract -T %s/t.txt %s/full.qvoice && grep -q 'w.rld' %s/t.txt", dir, dir, dir), 0);
    /* mix of a voice with itself at 0.5 + 0.5 gives the same x-vector */
    assert_int_equal(
        sh(V " mix -n half -o %s/m.qvoice %s/full.qvoice:0.5 %s/lite.qvoice:0.5" Q, dir, dir, dir),
        0);
    assert_int_equal(
        sh(V " extract -x %s/mx.bin %s/m.qvoice && cmp -s %s/mx.bin %s/x.bin", dir, dir, dir, dir),
        0);
    assert_int_equal(sh(V " inspect %s/m.qvoice | grep -q 'meta mix: .*full.qvoice:0.5'", dir), 0);
    assert_int_equal(sh(V " mix -o %s/m2.qvoice %s/full.qvoice:1 %s/x.bin:1" Q, dir, dir, dir),
                     1); /* other model */
    assert_int_equal(sh(V " list %s | grep -c qvoice | grep -q '^[0-9]'", dir), 0);
    assert_int_equal(sh("QVOICE_PATH=%s " V " list | grep -q 'lite.qvoice'", dir), 0);
}

int main(void) {
    if (access("bin/voicefmt", X_OK)) {
        printf("bin/voicefmt not built\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_and_help),
        cmocka_unit_test(test_inspect_verify),
        cmocka_unit_test(test_convert_diff_strip),
        cmocka_unit_test(test_extract_mix_list),
    };
    return cmocka_run_group_tests_name("qvf_tool", tests, setup, teardown);
}
