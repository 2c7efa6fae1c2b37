/* wav.h — where a WAV's samples are: the tests' own RIFF walk, so that they read qvoice's WAV
 * output (whose header carries provenance chunks before the data) independently of the encoder.
 */
#ifndef QV_TEST_WAV_H
#define QV_TEST_WAV_H

#include <stddef.h>
#include <stdint.h>

/* Offset of the data chunk's samples in the RIFF/WAVE bytes p[n] (*data_bytes: its declared
 * size), or -1 when p is no WAV or has no data chunk. */
long wav_data_offset(const uint8_t *p, size_t n, uint32_t *data_bytes);
/* The same for the file at path (its first 64 KiB). */
long wav_file_data_offset(const char *path, uint32_t *data_bytes);
/* The payload of the first chunk with id (e.g. "qvpr"; "LIST" finds the INFO list), *len bytes;
 * NULL when none. Points into p. */
const uint8_t *wav_chunk(const uint8_t *p, size_t n, const char *id, uint32_t *len);

/* 0 when the WAV at path names voice_id and model_fingerprint in its qvpr chunk, marked with
 * their qv_watermark_payload; else -1 after printing what differs. */
int wav_check_provenance(const char *path, const char *voice_id, const char *model_fingerprint);

/* Per mille of samples of the WAV marked that differ by more than one 16-bit step from the
 * unmarked WAV plain marked here with payload (qv_watermark_mark, then qv_pcm_s16le). Near 0
 * when marked carries that payload: plain was rounded before marking, and a slot's projection
 * that lands near the middle between two lattice points may round the other way and move its
 * block's loud tiles. -1 when a file cannot be read or the lengths differ. */
int wav_mark_mismatch(const char *marked, const char *plain, uint32_t payload);

#endif
