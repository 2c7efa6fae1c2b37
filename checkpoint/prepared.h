/* prepared.h — weights derived from a checkpoint (the speech decoder's packed and Winograd
 * panels, the int8 view's matrices), kept on disk so that a later load maps them instead of
 * recomputing them (internal, prefix qvm_prep_).
 *
 * Where: $QVOICE_CACHE/prepared/, else $XDG_CACHE_HOME/qvoice/prepared/, else
 * $HOME/.cache/qvoice/prepared/; QVOICE_CACHE set to the empty string turns the cache off. One
 * file per (kind, checkpoint location), replaced when stale, written with the one atomic writer
 * (util/fileio.h): a file is complete or absent.
 *
 * Key design: a file is used only when its key matches, and the key covers everything its bytes
 * depend on: the kind, the identity (device, inode, size, mtime) of every checkpoint file read,
 * the model fingerprint where the caller adds it, and a probe: the caller prepares a small fixed
 * input with its own code and adds the result, so a change of the preparation code (a Winograd
 * point, a panel width, the quantizer's rounding) makes old files stale by itself. The arrays
 * are not checksummed (that would read every byte, the cost the cache removes).
 */
#ifndef QV_PREPARED_H
#define QV_PREPARED_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/safetensors.h"

typedef struct {
    uint8_t key[32];
    char path[4096];   /* the cache file */
    char source[4096]; /* the checkpoint file's real path (the file name derives from it) */
} qvm_prep_id;

/* The id of derived data `kind` ("decoder", "int8", ...) of checkpoint st; extra (n_extra bytes:
 * a fingerprint, the probe, a layout version) goes into the key. 0, or -1 when caching is off
 * or no cache directory can be named. */
int qvm_prep_id_make(qvm_prep_id *id, const char *kind, const qvm_st *st, const void *extra,
                     size_t n_extra);

/* The same for data derived from plain files (the tokenizer's tables): source's real path names
 * the cache file, and the identity of each of the n_files files goes into the key (a file that
 * does not exist counts as such: creating it later makes the id stale). 0, or -1 as above. */
int qvm_prep_id_files(qvm_prep_id *id, const char *kind, const char *source,
                      const char *const *files, int n_files, const void *extra, size_t n_extra);

/* A cache file mapped read-only (shared page cache across processes). */
typedef struct qvm_prep qvm_prep;

/* Opens id's file when it exists and matches the key (complete, same array count); NULL
 * otherwise (the caller prepares and saves). */
qvm_prep *qvm_prep_open(const qvm_prep_id *id);
/* The next array, which must be n_bytes long (64-byte aligned, valid until qvm_prep_close); NULL
 * when it is not, or none is left: the file does not fit this caller. */
const void *qvm_prep_take(qvm_prep *p, size_t n_bytes);
void qvm_prep_close(qvm_prep *p); /* accepts NULL */

typedef struct {
    const void *data;
    size_t n_bytes;
} qvm_prep_array;
/* Writes the n arrays as id's file (atomically; the directory is created). 0, or -1 (nothing
 * written: the cache is an optimisation, callers go on without it). */
int qvm_prep_save(const qvm_prep_id *id, const qvm_prep_array *a, int n);

#endif
