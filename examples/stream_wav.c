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

/* qv_pcm_fn: called with each new block of samples as soon as it is decoded; the library's
 * encoder writes it and rewrites the WAV header's length, so the file plays while it grows. */
static int on_pcm(void *user, const float *pcm, int n) {
    return qv_encoder_write(user, pcm, n) != QV_OK; /* non-zero: stop the synthesis */
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
    FILE *f = NULL;
    qv_encoder *enc = NULL;
    int rc = 1;
    if (qv_model_load(&m, argv[1]) || qv_voice_open(&v, argv[2]) || qv_voice_check(v, m, NULL)) {
        fprintf(stderr, "stream_wav: %s\n", qv_last_error());
        goto out;
    }
    qv_params p = qv_model_params(m);
    p.n_threads = qv_threads_resolve(0); /* every core: the pool and the decoder thread */
    p.seed = 7;
    if (qv_synth_new(&s, m, &p)) {
        fprintf(stderr, "stream_wav: %s\n", qv_last_error());
        goto out;
    }
    if (!(f = fopen(argv[3], "wb"))) {
        perror(argv[3]);
        goto out;
    }
    /* marked and tagged for this voice and model (docs/provenance.md) */
    const qv_provenance prov = qv_provenance_of(m, v, NULL);
    if (qv_encoder_new(&enc, QV_FORMAT_WAV, &prov, NULL, NULL, f)) {
        fprintf(stderr, "stream_wav: %s\n", qv_last_error());
        goto out;
    }
    qv_synth_request r = qv_synth_default_request();
    r.text = text;
    r.voice = v;
    r.instruct = instruct;
    r.max_seconds = 1.2; /* synthetic (random) weights never end by themselves */
    qv_synth_stats st = {.struct_size = sizeof st};
    enum qv_status e = qv_synth_run(s, &r, on_pcm, enc, &st);
    const enum qv_status closed = qv_encoder_close(enc); /* the header's final length */
    enc = NULL;
    if (e || closed) {
        fprintf(stderr, "stream_wav: %s: %s\n", qv_strerror(e ? e : closed), qv_last_error());
        goto out;
    }
    printf("%s: %.2f s of audio (%d frames) in %.2f s, first audio after %.2f s\n", argv[3],
           st.audio_seconds, st.n_frames, st.total_s, st.first_audio_s);
    rc = 0;
out:
    qv_encoder_close(enc);
    if (f && fclose(f)) rc = 1;
    if (rc && f) remove(argv[3]);
    qv_synth_free(s);
    qv_voice_free(v);
    qv_model_free(m);
    return rc;
}
