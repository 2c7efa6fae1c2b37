/* textchunk.h — long-text handling for synth.c (prefix qve_): split text into chunks at sentence
 * boundaries and a maximum length, turn markup tags (markup.h) into pause and tag entries, pick a split point
 * for the runaway-guard retry, join / trim the chunks' audio. Pure functions; nothing prints.
 * Decision: chunks are normalised copies of byte ranges of the input (whitespace runs become one
 * space), so CJK keeps its no-space joins and no UTF-8 sequence is cut. See docs/robustness.md.
 */
#ifndef QVE_TEXTCHUNK_H
#define QVE_TEXTCHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/markup.h"

#define QVE_MAX_CHUNK_CHARS_DEFAULT 200 /* code points per chunk (--max-chunk-chars) */
#define QVE_XFADE_MS_DEFAULT 10         /* crossfade between joined chunks */
#define QVE_LEAD_PAD_MS_DEFAULT 100     /* leading silence kept by qve_audio_lead_start */
#define QVE_LEAD_DBFS (-50.0)           /* speech starts at the first 10 ms frame above this */

enum qve_chunk_kind { QVE_CHUNK_TEXT, QVE_CHUNK_PAUSE, QVE_CHUNK_TAG };

typedef struct {
    enum qve_chunk_kind kind;
    char *text;   /* TEXT: NUL-terminated UTF-8, whitespace-normalised, non-empty; TAG: the tag's
                     value (qve_tag.value); owned by the list. PAUSE: NULL */
    int n_chars;  /* TEXT: code points in text; TAG: character offset of the tag in the input */
    int pause_ms; /* PAUSE: silence to insert (consecutive tags are summed) */
    enum qve_tag_kind tag; /* TAG: STYLE, VOICE or LANG */
    int is_name;           /* TAG STYLE: text is a style name (else free instruct text) */
} qve_chunk;

typedef struct {
    qve_chunk *chunks;
    int n_chunks;
} qve_chunk_list;

/* Splits UTF-8 text into TEXT, PAUSE and TAG entries, in order.
 * - Markup tags are read by qve_markup_tag with styles (NULL: the built-in style names only):
 *   `[pause:500ms]`, `[break:1.5s]` become PAUSE entries, style, voice and language tags TAG
 *   entries; a malformed tag of a known kind is an error. Other brackets are text.
 * - With max_chunk_chars > 0: text between pauses is cut into sentences (after . ! ? … followed
 *   by whitespace or the end, with trailing quotes/brackets; after 。！？ always; at blank lines),
 *   and consecutive sentences of one paragraph are packed while the chunk stays within
 *   max_chunk_chars code points. A longer sentence is cut at the last comma-like mark
 *   (, ， 、 ; ； : ：) in the second half of the limit, else the last space, else at the limit
 *   (between code points). A single newline counts as a space (hard-wrapped text).
 * - With max_chunk_chars <= 0 (--no-chunk): only pause tags split.
 * Returns 0 (out filled; may have 0 entries for blank text), or -1 with a one-line err for
 * invalid UTF-8, a bad pause tag (with its character offset) or allocation failure (out empty). */
int qve_text_chunk(qve_chunk_list *out, const char *text, int max_chunk_chars,
                   const qve_styles *styles, char *err, size_t err_size);
void qve_chunk_list_free(qve_chunk_list *l); /* accepts zeroed lists */

/* Where to cut a chunk in two for a retry: the sentence end nearest the middle (within the
 * middle half of the text), else the nearest comma-like mark, else space, else the code point
 * boundary nearest the middle. *cut is a byte offset: halves are text[0, cut) and text[cut, …)
 * (trim them). Returns 0, or -1 when text has fewer than 2 code points (nothing to split). */
int qve_text_bisect(const char *text, size_t *cut);

/* ---- audio ---------------------------------------------------------------------------------- */

typedef struct {
    float *x; /* [n] owned; free with qve_audio_buf_free */
    int64_t n, cap;
} qve_audio_buf;

/* Appends x[n]; the last min(xfade_samples, b->n, n) samples of b and the first of x are
 * crossfaded linearly (the result is that much shorter than the plain concatenation).
 * Returns 0, or -1 on allocation failure (b unchanged). */
int qve_audio_append(qve_audio_buf *b, const float *x, int64_t n, int64_t xfade_samples);
/* Appends n zero samples. 0 or -1 (allocation). */
int qve_audio_append_silence(qve_audio_buf *b, int64_t n);
void qve_audio_buf_free(qve_audio_buf *b); /* accepts zeroed buffers */

/* Lead trim that can run while audio arrives: judges the whole 10 ms frames of x[0, n) from
 * *scanned on (advancing it) and returns the first sample to keep, the start of the first frame
 * above QVE_LEAD_DBFS less pad_samples (at least 0), or -1 while every frame so far is quieter.
 * Feeding a signal in any pieces gives the same answer as feeding it whole, so streamed and
 * one-shot audio are trimmed alike. */
int64_t qve_audio_lead_start(const float *x, int64_t n, int64_t pad_samples, int64_t *scanned);

#endif
