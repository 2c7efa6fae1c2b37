/* stream_wav.c — libqvoice example: say a sentence in a voice from a .qvoice file with a style
 * instruction, writing the audio into a WAV file block by block as it is decoded (the file is
 * playable while it grows). Uses only the public header.
 *
 *     stream_wav MODEL_DIR VOICE OUT.wav [TEXT [INSTRUCT]]
 *
 * VOICE is a .qvoice path or a name looked up in voices/ and $QVOICE_PATH. Build:
 *     cc -I. examples/stream_wav.c build/libqvoice.a $(LIBS) -o stream_wav   (see the Makefile)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/qvoice.h"

/* A 16-bit mono WAV whose header sizes are rewritten after every block. */
typedef struct {
    FILE *f;
    uint32_t n_samples;
} wav;

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static int wav_header(wav *w) {
    uint8_t h[44] = "RIFF....WAVEfmt \x10\0\0\0\x01\0\x01\0........\x02\0\x10\0data....";
    put32(h + 4, 36 + 2 * w->n_samples);
    put32(h + 24, QV_SAMPLE_RATE_HZ);
    put32(h + 28, 2 * QV_SAMPLE_RATE_HZ);
    put32(h + 40, 2 * w->n_samples);
    return fseek(w->f, 0, SEEK_SET) || fwrite(h, 1, 44, w->f) != 44 || fseek(w->f, 0, SEEK_END)
               ? -1
               : 0;
}

/* qv_pcm_fn: called with each new block of samples as soon as it is decoded. */
static int on_pcm(void *user, const float *pcm, int n) {
    wav *w = user;
    for (int i = 0; i < n; i++) {
        float v = pcm[i] * 32767.0f;
        int16_t s = (int16_t)(v > 32767.0f ? 32767 : v < -32768.0f ? -32768 : (int)v);
        uint8_t b[2] = {(uint8_t)s, (uint8_t)((uint16_t)s >> 8)};
        if (fwrite(b, 1, 2, w->f) != 2) return 1; /* non-zero: stop the synthesis */
    }
    w->n_samples += (uint32_t)n;
    return wav_header(w) || fflush(w->f);
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: stream_wav MODEL_DIR VOICE OUT.wav [TEXT [INSTRUCT]]\n");
        return 2;
    }
    const char *text = argc > 4 ? argv[4] : "The lighthouse keeper climbed the stairs at dusk.";
    const char *instruct = argc > 5 ? argv[5] : "Speak slowly, in a calm and warm voice.";
    qv_model *m = NULL;
    qv_voice *v = NULL;
    qv_synth *s = NULL;
    wav w = {0};
    int rc = 1;
    if (qv_model_load(&m, argv[1]) || qv_voice_open(&v, argv[2]) ||
        qv_voice_check(v, m, NULL)) {
        fprintf(stderr, "stream_wav: %s\n", qv_last_error());
        goto out;
    }
    qv_params p = qv_model_params(m);
    p.n_threads = qv_threads_resolve(0); /* every core: the pool and the decoder thread */
    p.seed = 7;
    if (qv_synth_new(&s, m, &p)) {
        fprintf(stderr, "stream_wav: cannot create the synthesizer\n");
        goto out;
    }
    if (!(w.f = fopen(argv[3], "wb")) || wav_header(&w)) {
        perror(argv[3]);
        goto out;
    }
    qv_synth_request r = qv_synth_default_request();
    r.text = text;
    r.voice = v;
    r.instruct = instruct;
    r.max_seconds = 1.2; /* synthetic (random) weights never end by themselves */
    qv_synth_stats st = {.struct_size = sizeof st};
    enum qv_status e = qv_synth_run(s, &r, on_pcm, &w, &st);
    if (e) {
        fprintf(stderr, "stream_wav: %s: %s\n", qv_strerror(e), qv_last_error());
        goto out;
    }
    printf("%s: %.2f s of audio (%d frames) in %.2f s, first audio after %.2f s\n", argv[3],
           st.audio_seconds, st.n_frames, st.total_s, st.first_audio_s);
    rc = 0;
out:
    if (w.f && fclose(w.f)) rc = 1;
    if (rc && w.f) remove(argv[3]);
    qv_synth_free(s);
    qv_voice_free(v);
    qv_model_free(m);
    return rc;
}
