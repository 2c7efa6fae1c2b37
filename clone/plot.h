/* plot.h — a PNG picture of a reference's log-mel spectrogram (prefix qvc_), so a user can see
 * silence, clipping or a second speaker before trusting a voice. Time runs left to right, mel bins
 * bottom (low) to top (high), 80 dB of range under the loudest bin in a computed colour map; the
 * frames outside the used part are dimmed and its two ends are drawn as cyan lines.
 *
 *     qvc_plot_mel_png("ref.png", mel, n_frames, 0, n_used, err, sizeof err);
 *
 * Thread safety: no shared state; each call works on its own buffers.
 */
#ifndef QV_CLONE_PLOT_H
#define QV_CLONE_PLOT_H

#include <stddef.h>

#define QVC_PLOT_MAX_WIDTH 1600  /* longer spectrograms are pooled (max) to at most this many columns */
#define QVC_PLOT_BIN_PX 2        /* pixel rows per mel bin */
#define QVC_PLOT_AXIS_PX 10      /* strip under the spectrogram: a tick per second, longer every 5 s */

/* Image size for n_frames (> 0) mel frames. */
void qvc_plot_size(int n_frames, int *width_px, int *height_px);
/* Column of the image that frame f (0 <= f <= n_frames) falls in; the used part's boundary lines
 * are drawn at plot_column(used_start_frame) and plot_column(used_end_frame) (clamped to the last
 * column), so a caller or a test can find them. */
int qvc_plot_column(int n_frames, int frame);

/* Writes path as an 8-bit RGB PNG of mel [n_frames, 128] (time-major, natural-log values as
 * qva_mel_compute returns them). Frames [used_start_frame, used_end_frame) are the part that was
 * used; 0 <= start < end <= n_frames. Non-finite values are drawn as the quietest colour. The write
 * is atomic (util/fileio.h): on any failure nothing is left at path (an existing file there is
 * untouched). Returns 0, or -1 with
 * "PATH: problem" in err (bad arguments, out of memory, I/O). */
int qvc_plot_mel_png(const char *path, const float *mel, int n_frames, int used_start_frame,
                     int used_end_frame, char *err, size_t err_size);

#endif
