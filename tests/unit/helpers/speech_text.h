/* speech_text.h — texts for espeak-ng to read: the unmarked speech of the watermark's
 * false-positive runs (test_watermark, bench_watermark --false-positives).
 */
#ifndef QV_TEST_SPEECH_TEXT_H
#define QV_TEST_SPEECH_TEXT_H

#include <stdint.h>

/* Writes to path 640 words drawn with the seed from a small vocabulary, in sentences of 4 to 15
 * words: the same speech on every machine. 0, or -1 when path cannot be written. */
int write_speech_text(const char *path, uint64_t seed);

#endif
