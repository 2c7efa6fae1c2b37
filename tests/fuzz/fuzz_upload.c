/* fuzz_upload.c — libFuzzer target: POST /v1/audio/voices as the server receives it. The input is
 * a multipart/form-data body (boundary "qvfuzz"), sent to an in-process server (fuzz_server.h) over
 * loopback: libmicrohttpd's multipart parser, the server's part handler, the limits, the voice-file
 * acceptance path and the library's store all run as in bin/qvoice-server. Every reply must be an
 * HTTP status with a body that names no server path.
 */
#include <stddef.h>
#include <stdint.h>

#include "tests/fuzz/fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_post(fuzz_server(), "/v1/audio/voices", "multipart/form-data; boundary=qvfuzz", data, size);
    return 0;
}
