/* qvoice.h — public API of libqvoice: load a Qwen3-TTS-12Hz checkpoint and synthesize speech.
 *
 * Thread safety: a qv_model is read-only after load and may be shared by threads; a qv_session
 * belongs to one thread at a time.
 */
#ifndef QVOICE_H
#define QVOICE_H

#define QV_VERSION_MAJOR 0
#define QV_VERSION_MINOR 1
#define QV_VERSION_PATCH 0
#define QV_VERSION_STRING "0.1.0"

/* Library version string, e.g. "0.1.0". */
const char *qv_version(void);

#endif
