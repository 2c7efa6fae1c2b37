/* plot.h — a PNG picture of a reference's log-mel spectrogram (prefix qvc_), so a user can see
 * silence, clipping or a second speaker before trusting a voice. Time runs left to right (an axis
 * in seconds under it), mel bins bottom (low) to top (high) with a frequency axis in Hz on the
 * left, 80 dB of range under the loudest bin in a computed colour map. A legend names the marks:
 * the kept span (what the x-vector used: a green bar above the spectrogram, cyan lines at its
 * ends, everything outside it dimmed) and the ICL window (a blue bar and blue lines; dashed when
 * it is only suggested, i.e. no transcript made it the ICL span).
 *
 *     qvc_plot_marks k = {.used_start = 0, .used_end = n_used, .icl_end = -1};
 *     qvc_plot_mel_png("ref.png", mel, n_frames, &k, err, sizeof err);
 *
 * Thread safety: no shared state; each call works on its own buffers.
 */
#ifndef QV_CLONE_PLOT_H
#define QV_CLONE_PLOT_H

#include <stddef.h>

#define QVC_PLOT_MAX_WIDTH 1600 /* longer spectrograms are pooled (max) to this many columns */
#define QVC_PLOT_BIN_PX 2       /* pixel rows per mel bin */
#define QVC_PLOT_LEFT_PX 52     /* frequency labels left of the spectrogram */
#define QVC_PLOT_RIGHT_PX 12
#define QVC_PLOT_TOP_PX 34      /* legend (22 px), then the kept-span and ICL bars (12 px) */
#define QVC_PLOT_AXIS_PX 28     /* under the spectrogram: a tick per second, labels every 1-10 s */

/* The spans to mark, in mel frames. 0 <= used_start < used_end <= n_frames; an ICL window with
 * icl_end <= icl_start is not drawn (else it is clamped to the frames). */
typedef struct {
    int used_start, used_end; /* the kept span */
    int icl_start, icl_end;   /* the ICL window */
    int icl_used;             /* 1: the ICL codes come from it; 0: only suggested (dashed) */
} qvc_plot_marks;

/* Image size for n_frames (> 0) mel frames. */
void qvc_plot_size(int n_frames, int *width_px, int *height_px);
/* Image column that frame f (0 <= f <= n_frames) falls in (the left margin included; clamped to
 * the last spectrogram column): the kept span's cyan lines are at the columns of used_start and
 * used_end, so a caller or a test can find them. The spectrogram's rows start at
 * QVC_PLOT_TOP_PX. */
int qvc_plot_column(int n_frames, int frame);

/* Writes path as an 8-bit RGB PNG of mel [n_frames, 128] (time-major, natural-log values as
 * qva_mel_compute returns them) with the marks k. Non-finite values are drawn as the quietest
 * colour. The write is atomic (util/fileio.h): on any failure nothing is left at path (an
 * existing file there is untouched). Returns 0, or -1 with "PATH: problem" in err (bad
 * arguments, out of memory, I/O). */
int qvc_plot_mel_png(const char *path, const float *mel, int n_frames, const qvc_plot_marks *k,
                     char *err, size_t err_size);

#endif
