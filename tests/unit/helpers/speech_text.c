/* speech_text.c — texts for espeak-ng to read (speech_text.h). */
#include "tests/unit/helpers/speech_text.h"

#include <stdio.h>

int write_speech_text(const char *path, uint64_t seed) {
    static const char *const words[] = {
        "the", "voice", "of", "a", "river", "morning", "quiet", "station", "seven", "people",
        "never", "listen", "before", "winter", "strong", "coffee", "yesterday", "market", "under",
        "bridge", "we", "found", "simple", "answer", "music", "through", "open", "window", "and",
        "travel", "north", "garden", "light", "question", "because", "everyone", "remembers",
        "small", "houses", "near", "water", "children", "laugh", "while", "teacher", "reads",
        "history", "tomorrow", "perhaps", "machine", "will", "speak", "clearly", "about",
        "weather", "mountains", "silver", "number", "thirty", "eight"};
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull;
    for (int i = 0, left = 0; i < 640; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if (left == 0) left = 4 + (int)((s >> 33) % 12);
        fprintf(f, "%s%s", words[(s >> 40) % (sizeof words / sizeof *words)],
                --left ? " " : (s >> 20) % 4 ? ".\n" : "?\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}
