/* test_engine_cli.c — bin/speak end to end on the tiny synthetic CustomVoice model
 * ($QVOICE_CACHE/tiny-cv): every preset speaker and every language give a WAV, the streamed WAV
 * (--stream -o) equals the one-shot WAV byte for byte, raw --stream equals the WAV data, a seed
 * gives identical audio for 1 and 3 threads, --dump-codes/--decode-codes round-trips, and the
 * error paths use the documented exit codes. Voices (a tiny-base clone with a WDELTA for tiny-cv,
 * made by bin/clone in setup): NAME lookup, the WDELTA promise and its refusals, long text with
 * the runaway guard, --verify. Runs with cwd = repo root (bin/speak, bin/clone built by make).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/wav.h"
#include "tests/unit/helpers/tmpdir.h"

static char model[1100], cache[1024], tmp[256], voice[512];

static int run(const char *fmt, ...) {
    char prefix[1200];
    snprintf(prefix, sizeof prefix, "bin/speak -m %s ", model);
    va_list ap;
    va_start(ap, fmt);
    int rc = vsh(prefix, fmt, ap);
    va_end(ap);
    return rc;
}

static int setup(void **st) {
    (void)st;
    snprintf(cache, sizeof cache, "%s", test_cache_dir());
    snprintf(model, sizeof model, "%s/tiny-cv", cache);
    snprintf(tmp, sizeof tmp, "/tmp/qv_cli_%d", (int)getpid());
    if (mkdir(tmp, 0700)) return -1;
    if (access("bin/speak", X_OK) || access("bin/clone", X_OK)) return -1;
    /* a voice with ICL codes and a weight delta for tiny-cv */
    snprintf(voice, sizeof voice, "%s/lib/th.qvoice", tmp);
    return sh("mkdir -p %s/lib && bin/clone -m %s/tiny-base --target-cv %s "
              "tests/audio/en_ohenry_chenevert.wav -s 8 -t 'One dollar and eighty seven cents. That "
              "was all. And sixty cents of it was in pennies saved one and two at a time.' "
              "-o %s > %s/clone.log 2>&1",
              tmp, cache, model, voice, tmp);
}

static int teardown(void **st) {
    (void)st;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *const SPEAKERS[] = {"serena",   "vivian", "uncle_fu", "ryan", "aiden",
                                       "ono_anna", "sohee",  "eric",     "dylan"};
static const char *const LANGS[] = {"auto",    "chinese",    "english", "german",
                                    "italian", "portuguese", "spanish", "japanese",
                                    "korean",  "french",     "russian"};

/* 11 runs pair the 9 speakers and 11 languages so that each occurs at least once. */
static void test_speakers_languages_stream(void **st) {
    (void)st;
    for (int i = 0; i < 11; i++) {
        const char *spk = SPEAKERS[i % 9], *lang = LANGS[i];
        char a[512], b[512], raw[512];
        snprintf(a, sizeof a, "%s/%s_%s.wav", tmp, spk, lang);
        snprintf(b, sizeof b, "%s/%s_%s_stream.wav", tmp, spk, lang);
        snprintf(raw, sizeof raw, "%s/%s_%s.raw", tmp, spk, lang);
        assert_int_equal(
            run("-q -s %s -l %s -t 'Hello world.' --max-frames 8 --seed 5 -o %s", spk, lang, a), 0);
        assert_int_equal(run("-q -s %s -l %s -t 'Hello world.' --max-frames 8 --seed 5 --stream "
                             "-o %s",
                             spk, lang, b),
                         0);
        assert_int_equal(run("-q -s %s -l %s -t 'Hello world.' --max-frames 8 --seed 5 --stream "
                             "> %s",
                             spk, lang, raw),
                         0);
        long n = file_bytes(a), n_raw = file_bytes(raw);
        printf("%-9s %-10s wav %ld bytes, stream wav %ld, raw %ld\n", spk, lang, n, file_bytes(b),
               n_raw);
        assert_true(n > 44 && n_raw > 0 && n_raw % (1920 * 2) == 0 && n_raw <= 8 * 1920 * 2);
        assert_true(tmp_first_diff(a, 0, b) < 0);
        assert_true(tmp_first_diff(a, (size_t)(n - n_raw), raw) < 0); /* PCM-16 WAV data == raw s16le */
    }
}

static void test_threads_codes_roundtrip(void **st) {
    (void)st;
    char a[512], b[512], codes[512], c[512];
    snprintf(a, sizeof a, "%s/j1.wav", tmp);
    snprintf(b, sizeof b, "%s/j3.wav", tmp);
    snprintf(codes, sizeof codes, "%s/codes.txt", tmp);
    snprintf(c, sizeof c, "%s/decoded.wav", tmp);
    assert_int_equal(run("-q -s ryan -t 'Threads.' --max-seconds 0.8 --seed 9 -j 1 -o %s "
                         "--dump-codes %s",
                         a, codes),
                     0);
    assert_int_equal(run("-q -s ryan -t 'Threads.' --max-seconds 0.8 --seed 9 -j 3 -o %s", b), 0);
    assert_true(tmp_first_diff(a, 0, b) < 0);
    /* -s names the speaker the codes are of: the same provenance, so the same bytes */
    assert_int_equal(run("-q -s ryan --decode-codes %s -o %s", codes, c), 0);
    assert_true(tmp_first_diff(a, 0, c) < 0);
}

/* Beyond 300 frames the decoder switches to the reference's chunking: streaming must still match.
 */
static void test_long_stream(void **st) {
    (void)st;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/long.wav", tmp);
    snprintf(b, sizeof b, "%s/long_stream.wav", tmp);
    assert_int_equal(run("-q -s ryan -t 'Long.' --max-frames 340 --seed 2 --no-guard -o %s", a), 0);
    assert_int_equal(run("-q -s ryan -t 'Long.' --max-frames 340 --seed 2 --no-guard --stream -o %s", b), 0);
    printf("long: %ld bytes\n", file_bytes(a));
    assert_true(file_bytes(a) > 44 + 301 * 1920 * 2);
    assert_true(tmp_first_diff(a, 0, b) < 0);
}

/* 0.6B CustomVoice: --instruct is dropped with a warning unless --force-instruct. */
static void test_instruct_policy(void **st) {
    (void)st;
    char a[512], b[512], c[512], warn[512];
    snprintf(a, sizeof a, "%s/plain.wav", tmp);
    snprintf(b, sizeof b, "%s/dropped.wav", tmp);
    snprintf(c, sizeof c, "%s/forced.wav", tmp);
    snprintf(warn, sizeof warn, "%s/warn.txt", tmp);
    assert_int_equal(run("-q -s ryan -t 'Hi.' --max-frames 6 --greedy -o %s", a), 0);
    assert_int_equal(
        run("-s ryan -t 'Hi.' -i 'Whisper.' --max-frames 6 --greedy -o %s 2> %s", b, warn), 0);
    assert_int_equal(run("-q -s ryan -t 'Hi.' -i 'Whisper.' --force-instruct --max-frames 6 "
                         "--greedy -o %s",
                         c),
                     0);
    assert_true(tmp_first_diff(a, 0, b) < 0);
    assert_true(tmp_first_diff(a, 0, c) >= 0);
    FILE *f = fopen(warn, "r");
    char line[512] = "";
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_non_null(strstr(line, "warning"));
}

static void test_errors_and_info(void **st) {
    (void)st;
    assert_int_equal(run("--help > /dev/null"), 0);
    assert_int_equal(run("--version > /dev/null"), 0);
    assert_int_equal(run("--bogus 2> /dev/null"), 2);
    assert_int_equal(run("--threads -1 -t x -o %s/x.wav 2> /dev/null", tmp), 2);
    assert_int_equal(run("-s nobody -t x -o %s/x.wav 2> /dev/null", tmp), 1);
    assert_int_equal(run("-s ryan -l klingon -t x -o %s/x.wav 2> /dev/null", tmp), 1);
    assert_int_equal(run("-t x -o %s/x.wav 2> /dev/null", tmp), 1); /* CustomVoice: a speaker */
    assert_int_equal(run("-s ryan -t x -o %s/x.mp4 2> /dev/null", tmp), 2);
    char out[512], cmd[1024], line[512];
    snprintf(out, sizeof out, "%s/list.txt", tmp);
    assert_int_equal(run("--list-speakers > %s", out), 0);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    int n = 0;
    while (fgets(line, sizeof line, f))
        n++;
    fclose(f);
    assert_int_equal(n, 9);
    snprintf(cmd, sizeof cmd, "--tokens -t 'Hello world, this is a test.' > %s", out);
    assert_int_equal(run("%s", cmd), 0);
    f = fopen(out, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "9707 1879 11 419 374 264 1273 13\n");
}

/* --batch with a voice that carries a weight delta: the voice is opened once and serves two jobs
 * (same seed, same bytes); a preset speaker after the delta rewrote the model fails, naming the
 * line that applied it. */
static void test_batch_wdelta(void **st) {
    (void)st;
    char jobs[512], res[512], b[3][512];
    snprintf(jobs, sizeof jobs, "%s/wd_jobs.jsonl", tmp);
    snprintf(res, sizeof res, "%s/wd_res.jsonl", tmp);
    for (int i = 0; i < 3; i++)
        snprintf(b[i], sizeof b[i], "%s/wd_b%d.wav", tmp, i + 1);
    FILE *f = fopen(jobs, "w");
    assert_non_null(f);
    for (int i = 0; i < 2; i++)
        fprintf(
            f, "{\"text\": \"Hello world.\", \"voice\": \"%s\", \"seed\": 4, \"output\": \"%s\"}\n",
            voice, b[i]);
    fprintf(f, "{\"text\": \"Hi.\", \"speaker\": \"ryan\", \"output\": \"%s\"}\n", b[2]);
    fclose(f);
    assert_int_equal(run("-q --max-frames 8 --batch %s > %s", jobs, res), 1);
    assert_true(file_has(res, "{\"line\":1,\"ok\":true"));
    assert_true(file_has(res, "{\"line\":2,\"ok\":true"));
    assert_true(file_has(res, "{\"line\":3,\"ok\":false,\"error\":\"speaker ryan: line 1's voice "
                              "rewrote the model"));
    assert_true(file_bytes(b[0]) > 44 && tmp_first_diff(b[0], 0, b[1]) < 0);
    assert_int_equal(file_bytes(b[2]), -1);
}

/* ---- voices ---------------------------------------------------------------------------------- */

/* --voice NAME: found through $QVOICE_PATH; a missing one lists every place looked at. */
static void test_voice_lookup(void **st) {
    (void)st;
    char out[512], log[512];
    snprintf(out, sizeof out, "%s/byname.wav", tmp);
    snprintf(log, sizeof log, "%s/lookup.log", tmp);
    assert_int_equal(sh("QVOICE_PATH=%s/none:%s/lib bin/speak -q -m %s --voice th -t 'Hi.' "
                        "--max-frames 4 -o %s",
                        tmp, tmp, model, out),
                     0);
    assert_true(file_bytes(out) > 44);
    assert_int_equal(sh("QVOICE_PATH=%s/a:%s/b bin/speak -m %s --voice nosuch -t 'Hi.' -o %s/x.wav "
                        "2> %s",
                        tmp, tmp, model, tmp, log),
                     1);
    char want[600];
    snprintf(want, sizeof want, "%s/b/nosuch.qvoice", tmp);
    assert_true(file_has(log, "voices/nosuch.qvoice"));
    assert_true(file_has(log, want));
}

/* Copy of tiny-cv (symlinks) in dir with config.json rewritten (a different checkpoint
 * identity) or one bit of a talker tensor flipped (same identity, other weights). */
static void modified_model(const char *dir, int flip_weight) {
    assert_int_equal(sh("mkdir -p %s && for f in %s/*; do ln -sf \"$f\" %s/; done", dir, model, dir),
                     0);
    if (!flip_weight) {
        assert_int_equal(sh("rm %s/config.json && (cat %s/config.json; echo) > %s/config.json", dir,
                            model, dir),
                         0);
        return;
    }
    char src[1200], dst[1200];
    snprintf(src, sizeof src, "%s/model.safetensors", model);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    assert_int_equal(sh("rm %s && cp %s %s", dst, src, dst), 0);
    const long pos = tmp_st_offset(dst, "talker.model.layers.0.mlp.up_proj.weight") + 100;
    FILE *f = fopen(dst, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, pos, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, pos, SEEK_SET), 0);
    fputc(c ^ 1, f);
    fclose(f);
}

/* 1 when the WAVs a and b hold the same samples (their provenance tags name other models). */
static int same_samples(const char *a, const char *b) {
    uint32_t na, nb;
    const long ha = wav_file_data_offset(a, &na), hb = wav_file_data_offset(b, &nb);
    return ha > 0 && hb > 0 && na == nb && !sh("cmp -s -i %ld:%ld %s %s", ha, hb, a, b);
}

/* The WDELTA promise on the tiny pair (x-vector + ICL): tiny-cv + the voice's delta gives the
 * same samples as tiny-base with the voice (unmarked: the watermark's payload names the model
 * that ran); without the delta it differs; a delta for another checkpoint identity or for other
 * weights is refused and writes nothing. */
static void test_wdelta(void **st) {
    (void)st;
    char base[512], cv[512], nod[512], log[512], mod[512], x[512];
    snprintf(base, sizeof base, "%s/wd_base.wav", tmp);
    snprintf(cv, sizeof cv, "%s/wd_cv.wav", tmp);
    snprintf(nod, sizeof nod, "%s/wd_nodelta.wav", tmp);
    snprintf(log, sizeof log, "%s/wd.log", tmp);
    snprintf(x, sizeof x, "%s/wd_refused.wav", tmp);
    assert_int_equal(sh("bin/speak -q -m %s/tiny-base --voice %s -t 'Hello world.' --seed 4 "
                        "--max-frames 8 --no-watermark -o %s",
                        cache, voice, base),
                     0);
    assert_int_equal(sh("bin/speak -m %s --voice %s -t 'Hello world.' --seed 4 --max-frames 8 "
                        "--no-watermark -o %s 2> %s",
                        model, voice, cv, log),
                     0);
    assert_true(file_has(log, "weight delta applied"));
    assert_int_equal(run("-q --voice %s --no-wdelta -t 'Hello world.' --seed 4 --max-frames 8 "
                         "--no-watermark -o %s",
                         voice, nod),
                     0);
    int same = same_samples(base, cv), differs = !same_samples(base, nod);
    printf("tiny WDELTA: CustomVoice + delta == Base: %s; without the delta: %s\n",
           same ? "same samples" : "DIFFERENT", differs ? "different" : "SAME");
    assert_true(file_bytes(base) > 44 && same && differs);
    /* the int8 view is quantized from the delta'd weights: again the Base model's bytes */
    assert_int_equal(sh("bin/speak -q -m %s/tiny-base --voice %s -t 'Hello world.' --seed 4 "
                        "--max-frames 8 --quant int8 --no-watermark -o %s",
                        cache, voice, base),
                     0);
    assert_int_equal(run("-q --voice %s -t 'Hello world.' --seed 4 --max-frames 8 --quant int8 "
                         "--no-watermark -o %s",
                         voice, cv),
                     0);
    printf("tiny WDELTA, --quant int8: %s\n", same_samples(base, cv) ? "same samples" : "DIFFERENT");
    assert_true(same_samples(base, cv));

    snprintf(mod, sizeof mod, "%s/mod_config", tmp);
    modified_model(mod, 0);
    assert_int_equal(sh("bin/speak -m %s --voice %s -t 'Hi.' --max-frames 4 -o %s 2> %s", mod,
                        voice, x, log),
                     1);
    assert_true(file_has(log, "made for another checkpoint"));
    assert_true(file_bytes(x) < 0);
    snprintf(mod, sizeof mod, "%s/mod_weights", tmp);
    modified_model(mod, 1);
    assert_int_equal(sh("bin/speak -m %s --voice %s -t 'Hi.' --max-frames 4 -o %s 2> %s", mod,
                        voice, x, log),
                     1);
    assert_true(file_has(log, "talker.model.layers.0.mlp.up_proj.weight was made against other "
                               "weights"));
    assert_true(file_bytes(x) < 0);
    /* the same voice without its delta still works there (x-vector + ICL only) */
    assert_int_equal(sh("bin/speak -q -m %s --voice %s --no-wdelta -t 'Hi.' --max-frames 4 -o %s",
                        mod, voice, x),
                     0);
}

/* Instruct combines with a cloned voice (after the delta the model is Base: instruct is kept). */
static void test_voice_instruct(void **st) {
    (void)st;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/vi_plain.wav", tmp);
    snprintf(b, sizeof b, "%s/vi_instruct.wav", tmp);
    assert_int_equal(run("-q --voice %s -t 'Hi.' --greedy --max-frames 6 -o %s", voice, a), 0);
    assert_int_equal(
        run("-q --voice %s -t 'Hi.' -i 'Speak slowly.' --greedy --max-frames 6 -o %s", voice, b),
        0);
    assert_true(file_bytes(b) > 44 && tmp_first_diff(a, 0, b) >= 0);
}

/* ---- long text and the runaway guard (issue 9) ---------------------------------------------- */

static const char *const PARAGRAPHS[] = {
    "The first paragraph has two sentences. It talks about the weather in spring.",
    "A second paragraph follows after a blank line. It is about trains and stations.",
    "The third paragraph ends the text. Nothing else remains to be said here."};

/* Random weights never emit end-of-speech: every chunk runs into the frame budget, is retried in
 * two halves, and speak fails with the guard's message and writes no file. With --max-frames
 * below the budget every chunk completes; --stream gives the same bytes. */
static void test_longtext_guard(void **st) {
    (void)st;
    char text[1024], out[512], log[512], str[512], raw[512];
    snprintf(text, sizeof text, "%s\n\n%s [pause:300ms]\n\n%s", PARAGRAPHS[0], PARAGRAPHS[1],
             PARAGRAPHS[2]);
    snprintf(out, sizeof out, "%s/guard.wav", tmp);
    snprintf(str, sizeof str, "%s/guard_stream.wav", tmp);
    snprintf(raw, sizeof raw, "%s/guard.raw", tmp);
    snprintf(log, sizeof log, "%s/guard.log", tmp);
    assert_int_equal(run("-s ryan -t '%s' --seed 1 -o %s 2> %s", text, out, log), 1);
    assert_true(file_has(log, "speak: chunk 1/3: runaway guard: no end of speech"));
    assert_true(file_has(log, "(after splitting it in two)"));
    assert_true(file_bytes(out) < 0);
    assert_int_equal(sh("ls -a %s | grep -q part-", tmp), 1); /* no temporary file left */
    for (int i = 0; i < 3; i++) { /* each chunk on its own trips the guard too */
        assert_int_equal(run("-q -s ryan -t '%s' --seed 1 -o %s 2> %s", PARAGRAPHS[i], out, log),
                         1);
        assert_true(file_has(log, "runaway guard"));
        assert_true(file_bytes(out) < 0);
    }
    assert_int_equal(run("-s ryan -t '%s' --seed 1 --max-frames 6 -o %s 2> %s", text, out, log),
                     0);
    assert_true(file_has(log, "3 chunks"));
    /* 3 chunks of 6 frames, 300 ms of pause, two 10 ms crossfades */
    uint32_t data;
    const long head = wav_file_data_offset(out, &data);
    const long want = head + 2L * (3 * 6 * 1920 + 300 * 24 - 2 * 240);
    printf("long text: %ld bytes (expected %ld)\n", file_bytes(out), want);
    assert_int_equal(file_bytes(out), want);
    assert_int_equal(
        run("-q -s ryan -t '%s' --seed 1 --max-frames 6 --stream -o %s", text, str), 0);
    assert_int_equal(run("-q -s ryan -t '%s' --seed 1 --max-frames 6 --stream > %s", text, raw),
                     0);
    assert_true(tmp_first_diff(out, 0, str) < 0);
    assert_true(tmp_first_diff(out, (size_t)head, raw) < 0);
    /* --no-chunk: one text chunk (the pause still splits) */
    assert_int_equal(run("-s ryan -t '%s' --seed 1 --max-frames 6 --no-chunk -o %s 2> %s", text,
                         out, log),
                     0);
    assert_true(file_has(log, "2 chunks"));
}

/* --verify: per-chunk speaker similarity against the voice with the Base speaker encoder. */
static void test_verify(void **st) {
    (void)st;
    char out[512], log[512];
    snprintf(out, sizeof out, "%s/verify.wav", tmp);
    snprintf(log, sizeof log, "%s/verify.log", tmp);
    assert_int_equal(run("--voice %s --verify-model %s/tiny-base -t 'One two three. Four five "
                         "six.' --max-chunk-chars 16 --max-frames 8 -o %s 2> %s",
                         voice, cache, out, log),
                     0);
    assert_true(file_has(log, "verify: chunk 1: speaker similarity"));
    assert_true(file_has(log, "verify: chunk 2: speaker similarity"));
    assert_true(file_has(log, "verify: lowest similarity"));
    assert_int_equal(run("-s ryan --verify -t 'Hi.' --max-frames 4 -o %s 2> %s", out, log), 0);
    assert_true(file_has(log, "verify: skipped"));
    assert_int_equal(run("--voice %s --verify -t 'Hi.' --max-frames 4 -o %s 2> %s", voice, out,
                         log),
                     1); /* tiny-cv has no speaker encoder */
    assert_true(file_has(log, "--verify-model"));
}

/* Every speak output names its voice and model and is marked with their payload
 * (docs/provenance.md): a file and a stream with a voice file (its id: the file's SHA-256), a
 * preset speaker ("speaker:NAME"), and a batch job. */
static void test_provenance(void **st) {
    (void)st;
    char a[512], b[512], jobs[512], j[512], fp[65], id[65];
    qv_model *m;
    assert_int_equal(qv_model_load(&m, model), 0);
    qv_model_fingerprint(m, fp);
    qv_model_free(m);
    qv_voice *v;
    assert_int_equal(qv_voice_open(&v, voice), 0);
    snprintf(id, sizeof id, "%s", qv_voice_id(v));
    qv_voice_free(v);
    assert_int_equal(sh("test \"$(sha256sum < %s | cut -c1-64)\" = %s", voice, id), 0);
    snprintf(a, sizeof a, "%s/prov_file.wav", tmp);
    snprintf(b, sizeof b, "%s/prov_stream.wav", tmp);
    /* 8 s: the mark's payload repeats every 5.1 s, shorter audio carries only part of it */
    const char *say = "-q --voice %s -t 'One dollar and eighty seven cents. That was all. And "
                      "sixty cents of it was in pennies.' --max-seconds 8 --seed 3";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -o %%s", say);
    assert_int_equal(run(cmd, voice, a), 0);
    assert_int_equal(wav_check_provenance(a, id, fp), 0);
    snprintf(cmd, sizeof cmd, "%s --stream -o %%s", say);
    assert_int_equal(run(cmd, voice, b), 0);
    assert_int_equal(wav_check_provenance(b, id, fp), 0);
    /* the samples carry that payload: the unmarked output marked with it gives them (to the
     * rounding of the unmarked file), another payload does not */
    char plain[512];
    snprintf(plain, sizeof plain, "%s/prov_plain.wav", tmp);
    snprintf(cmd, sizeof cmd, "%s --no-watermark -o %%s", say);
    assert_int_equal(run(cmd, voice, plain), 0);
    const int right = wav_mark_mismatch(a, plain, qv_watermark_payload(id, fp)),
              wrong = wav_mark_mismatch(a, plain, qv_watermark_payload(id, "")),
              stream = wav_mark_mismatch(b, plain, qv_watermark_payload(id, fp));
    printf("  marked vs unmarked + mark: %d per mille of samples off by more than a step with "
           "the voice/model payload (stream %d), %d with another\n", right, stream, wrong);
    assert_true(right >= 0 && right <= 20 && stream >= 0 && stream <= 20 && wrong > 5 * right + 50);
    /* and the detector reads it back from the file and the stream: the voice/model payload */
    const char *const marked[] = {a, b};
    for (int i = 0; i < 2; i++) {
        qv_watermark_report r = qv_watermark_default_report();
        assert_int_equal(qv_watermark_detect_file(marked[i], 0, &r), 0);
        printf("  %s: present %d, payload %s%08x\n", i ? "stream" : "file", r.present,
               r.all.payload_ok ? "" : "(not recovered) ", r.all.payload);
        assert_true(r.present && r.all.payload_ok);
        assert_int_equal(r.all.payload, qv_watermark_payload(id, fp));
    }
    assert_int_equal(run("-q -s ryan -t 'Hi.' --max-frames 4 -o %s", a), 0);
    assert_int_equal(wav_check_provenance(a, "speaker:ryan", fp), 0);
    snprintf(jobs, sizeof jobs, "%s/prov.jsonl", tmp);
    snprintf(j, sizeof j, "%s/prov_job.wav", tmp);
    assert_int_equal(sh("printf '{\"text\":\"Hi.\",\"speaker\":\"ryan\",\"output\":\"%s\"}\\n' > %s",
                        j, jobs),
                     0);
    assert_int_equal(run("-q --max-frames 4 --batch %s > /dev/null", jobs), 0);
    assert_int_equal(wav_check_provenance(j, "speaker:ryan", fp), 0);
}

QVT_MAIN(setup, teardown, test_speakers_languages_stream, test_threads_codes_roundtrip,
         test_long_stream, test_instruct_policy, test_errors_and_info, test_voice_lookup,
         test_wdelta, test_batch_wdelta, test_voice_instruct, test_longtext_guard, test_verify,
         test_provenance)
