/* fileio.h — the one atomic file writer and the one whole-file reader of qvoice.
 * A written file appears at its path complete or not at all, and nothing is left beside it when
 * the writer is killed where Linux allows it: the data goes to an unnamed O_TMPFILE that only a
 * commit links into place. Where O_TMPFILE or /proc is missing, a named temp file
 * ".NAME.tmp.PID.N" is used and such files of dead processes are removed on the next write.
 */
#ifndef QVU_FILEIO_H
#define QVU_FILEIO_H

#include <stddef.h>
#include <stdio.h>

typedef struct qvu_wfile qvu_wfile;

/* Starts writing path (created 0666 & ~umask, or replaced on commit). 0, or -1 with err =
 * "PATH: problem". Not thread-safe per writer; separate writers are independent. */
int qvu_wfile_open(qvu_wfile **out, const char *path, char *err, size_t err_size);
/* The file descriptor (for libraries that write to an fd: do not close it). */
int qvu_wfile_fd(const qvu_wfile *w);
/* A stdio stream on the descriptor, made on first call and owned by w (do not fclose). NULL
 * when out of memory. */
FILE *qvu_wfile_stream(qvu_wfile *w);
/* The stream of qvu_wfile_stream with a 2 MB buffer (owned by w), for large files that are
 * mapped later (cache files, checkpoints): stdio then writes whole 2 MB blocks at 2 MB-aligned
 * offsets, so the page cache keeps the file in 2 MB folios, which a mapping takes with one
 * page-table entry each instead of 512 (populating 555 MB: 45 ms of CPU, 0.5 ms so). Call it
 * before anything is written. NULL when out of memory. */
FILE *qvu_wfile_stream_large(qvu_wfile *w);
/* Flushes, fsyncs, puts the file at its path (atomically replacing an old one), fsyncs the
 * directory, and frees w. 0, or -1 with err set and nothing left at or beside the path. */
int qvu_wfile_commit(qvu_wfile *w, char *err, size_t err_size);
/* Discards what was written and frees w; accepts NULL. */
void qvu_wfile_abort(qvu_wfile *w);

/* Reads a whole file (any kind: regular, pipe, /dev/stdin) into a malloc'd buffer with a NUL
 * after the last byte. Returns it and *n_bytes, or NULL with err = "PATH: problem" (cannot
 * open, read error, over max_bytes, out of memory) and errno left as the failing call set it
 * (ENOENT for a missing file, EFBIG over max_bytes). */
char *qvu_read_file(const char *path, size_t max_bytes, size_t *n_bytes, char *err,
                    size_t err_size);

#endif
