/* model_info.c — the smallest program on the installed library: prints the library and voice-file
 * versions and, given a model directory, what the checkpoint offers. Build it with nothing but
 * pkg-config:
 *
 *     cc model_info.c $(pkg-config --cflags --libs qvoice) -o model_info
 *     ./model_info models/Qwen3-TTS-12Hz-0.6B-CustomVoice
 */
#include <qvf.h>
#include <qvoice.h>
#include <stdio.h>

int main(int argc, char **argv) {
    printf("qvoice %s, qvf %s\n", qv_version(), qvf_version());
    if (argc < 2) return 0;
    qv_model *m;
    if (qv_model_load(&m, argv[1])) {
        fprintf(stderr, "model_info: %s\n", qv_last_error());
        return 1;
    }
    qv_params p = qv_model_params(m);
    printf("%s %s, hidden %d, max_frames %d\n", qv_model_type(m), qv_model_size(m),
           qv_model_hidden_size(m), p.max_frames);
    for (int i = 0; i < qv_model_n_speakers(m); i++) printf("speaker %s\n", qv_model_speaker(m, i));
    for (int i = 0; i < qv_model_n_languages(m); i++)
        printf("language %s\n", qv_model_language(m, i));
    qv_model_free(m);
    return 0;
}
