/* test_examples.c — the programs in examples/ (built by make into build/examples/): they include
 * only public headers, and stream_wav speaks a sentence with an instruction in the committed
 * voice (voices/ohenry.qvoice, made on the synthetic 0.6B Base: $QVOICE_CACHE/q06b-base) into a
 * WAV whose header matches its data. Runs with cwd = repo root.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/wav.h"

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_public_includes(void **st) {
    (void)st;
    /* every quoted include of an example is a public header */
    assert_int_equal(sh("grep -h '^#include \"' examples/*.c | grep -v -e '\"include/qvoice.h\"' "
                        "-e '\"voicefmt/qvf.h\"' >&2"),
                     1);
}

static void test_stream_wav(void **st) {
    (void)st;
    const char *cache = test_cache_dir();
    char out[256];
    snprintf(out, sizeof out, "/tmp/qv_example_%d.wav", (int)getpid());
    assert_int_equal(sh("%s %s/q06b-base voices/ohenry.qvoice %s", test_built("examples/stream_wav"),
                        cache, out),
                     0);
    FILE *f = fopen(out, "rb");
    assert_non_null(f);
    static unsigned char h[4096];
    const size_t got = fread(h, 1, sizeof h, f);
    assert_memory_equal(h, "RIFF", 4);
    assert_memory_equal(h + 8, "WAVEfmt ", 8);
    assert_int_equal(le32(h + 24), 24000);
    assert_int_equal(h[22], 1);  /* mono */
    assert_int_equal(h[34], 16); /* bits */
    uint32_t data;
    const long head = wav_data_offset(h, got, &data);
    assert_true(head > 44);
    const uint32_t n = data / 2;
    long size = file_bytes(out);
    printf("  %u samples (%.2f s), %ld bytes, a %ld-byte header\n", n, n / 24000.0, size, head);
    assert_int_equal(size, head + 2L * n);
    assert_int_equal(le32(h + 4), (uint32_t)(size - 8));
    /* tagged with the voice's id (the SHA-256 of its file) */
    assert_int_equal(sh("grep -aq \"voice_id=$(sha256sum < voices/ohenry.qvoice | cut -c1-64)\" %s",
                        out),
                     0);
    assert_int_equal(fseek(f, head, SEEK_SET), 0);
    /* 15 frames (1.2 s) at most, the lead trim cuts at most a part of it; not silent */
    assert_true(n > 8 * 1920 && n <= 15 * 1920);
    double e = 0;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char b[2];
        assert_int_equal(fread(b, 1, 2, f), 2);
        double v = (int16_t)(b[0] | b[1] << 8) / 32768.0;
        e += v * v;
    }
    fclose(f);
    printf("  RMS %.4f\n", sqrt(e / n));
    assert_true(sqrt(e / n) > 1e-3);
    unlink(out);
}

QVT_MAIN(NULL, NULL, test_public_includes, test_stream_wav)
