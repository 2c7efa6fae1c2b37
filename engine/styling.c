/* styling.c — what a front end loads for styles and scripts (docs/markup.md): generic style
 * directions from voice files (NAME=FILE), a style table file and a dialogue script, held for the
 * requests that point at them (speak uses it; any front end may); the synthesis reads the
 * request only. */
#include <stdlib.h>
#include <string.h>

#include "include/qvoice.h"
#include "util/api.h"
#include "voicefmt/qvf.h"

#define MAX_DIRS 16

struct qv_styling {
    qv_style_dir dirs[MAX_DIRS]; /* name and direction point into names / vecs */
    char *names[MAX_DIRS];
    float *vecs[MAX_DIRS];
    int n_dirs;
    char *table, *markup;
    int *line_offsets, *line_numbers, n_lines;
};

void qv_styling_free(qv_styling *y) {
    if (!y) return;
    for (int i = 0; i < y->n_dirs; i++)
        free(y->names[i]), free(y->vecs[i]);
    qv_free(y->table), qv_free(y->markup), qv_free(y->line_offsets), qv_free(y->line_numbers);
    free(y);
}

/* "NAME=FILE": the x-vector of FILE (a .qvoice or .bin) as the direction NAME. */
static enum qv_status load_dir(qv_styling *y, const char *spec) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec) return qvu_failf(QV_E_INVALID, "style direction %s: expected NAME=FILE", spec);
    qv_style_dir *d = &y->dirs[y->n_dirs];
    qvf_voice *v = NULL;
    char err[QVU_DETAIL_SIZE];
    if (qvf_read_file(eq + 1, 0, &v, err, sizeof err))
        return qvu_failf(QV_E_VOICE, "style direction %s: %s", spec, err);
    y->names[y->n_dirs] = strndup(spec, (size_t)(eq - spec));
    y->vecs[y->n_dirs] = malloc((size_t)v->enc_dim * sizeof(float));
    if (y->vecs[y->n_dirs]) memcpy(y->vecs[y->n_dirs], v->xvector, (size_t)v->enc_dim * sizeof(float));
    *d = (qv_style_dir){.struct_size = sizeof *d, .name = y->names[y->n_dirs],
                        .direction = y->vecs[y->n_dirs], .dim = (int)v->enc_dim, .strength = 0.25f};
    qvf_voice_free(v);
    y->n_dirs++;
    if (!d->name || !d->direction) return qvu_fail(QV_E_NOMEM, "style direction: out of memory");
    return QV_OK;
}

enum qv_status qv_styling_load(qv_styling **out, const char *const *dirs, int n_dirs,
                               const char *table_path, const char *script_path) {
    if (!out) return qvu_fail(QV_E_INVALID, "qv_styling_load: NULL output");
    *out = NULL;
    if (n_dirs < 0 || n_dirs > MAX_DIRS)
        return qvu_failf(QV_E_LIMIT, "style directions: %d, at most %d", n_dirs, MAX_DIRS);
    qv_styling *y = calloc(1, sizeof *y);
    if (!y) return qvu_fail(QV_E_NOMEM, "styling: out of memory");
    enum qv_status st = QV_OK;
    size_t n;
    for (int i = 0; !st && i < n_dirs; i++) st = load_dir(y, dirs[i]);
    if (!st && table_path) st = qv_file_read(table_path, 1 << 20, &y->table, &n);
    char *script = NULL;
    if (!st && script_path && !(st = qv_file_read(script_path, 16 << 20, &script, &n))) {
        st = qv_script_to_markup(script, 600, &y->markup, &y->line_offsets, &y->line_numbers,
                                 &y->n_lines);
        if (st) qvu_failf(st, "%s: %s", script_path, qv_last_error());
    }
    qv_free(script);
    if (st) {
        qv_styling_free(y);
        return st;
    }
    *out = y;
    return QV_OK;
}

void qv_styling_apply(const qv_styling *y, qv_synth_request *r) {
    r->style_dirs = y->n_dirs ? y->dirs : NULL;
    r->n_style_dirs = y->n_dirs;
    r->style_table = y->table;
}

const char *qv_styling_script(const qv_styling *y) { return y ? y->markup : NULL; }

int qv_styling_script_line(const qv_styling *y, int text_offset, int *index, int *n_lines) {
    int i = y->n_lines - 1;
    while (i > 0 && y->line_offsets[i] > text_offset)
        i--;
    *index = i + 1;
    *n_lines = y->n_lines;
    return y->n_lines ? y->line_numbers[i] : 0;
}
