/* bench_tokenizer.c — encode throughput (MB/s of UTF-8 input, one thread) on the mixed-language
 * corpus tests/tokenizer/corpus.jsonl, with the word cache cold (fresh tokenizer, first pass) and
 * warm (later passes). usage: bench_tokenizer [MODEL_DIR]  (default $QVOICE_CACHE/q06b-cv, then
 * tiny-cv, then tokref/vm). Runs from the repo root.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/tokenizer.h"
#include "tests/bench/helpers/measure.h"

int main(int argc, char **argv)
{
    const char *cache = getenv("QVOICE_CACHE");
    char dirs[3][1024], err[256] = "";
    int n_dirs = 0;
    if (argc > 1) snprintf(dirs[n_dirs++], sizeof dirs[0], "%s", argv[1]);
    else {
        static const char *const sub[] = {"q06b-cv", "tiny-cv", "tokref/vm"};
        for (int i = 0; i < 3; i++)
            snprintf(dirs[n_dirs++], sizeof dirs[0], "%s/%s", cache ? cache : "cache", sub[i]);
    }
    qve_tok *tok = NULL;
    const char *used = NULL;
    double t0 = bench_clock_s(CLOCK_MONOTONIC);
    for (int i = 0; i < n_dirs && !tok; i++) tok = qve_tok_open(used = dirs[i], err, sizeof err);
    if (!tok) {
        fprintf(stderr, "bench_tokenizer: %s\n", err);
        return 1;
    }
    double t_open = bench_clock_s(CLOCK_MONOTONIC) - t0;
    /* the corpus lines joined by "\n": one mixed text */
    FILE *f = fopen("tests/tokenizer/corpus.jsonl", "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenizer: tests/tokenizer/corpus.jsonl: cannot open\n");
        return 1;
    }
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap), line[65536];
    while (fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const char *s = cJSON_GetStringValue(j);
        size_t k = s ? strlen(s) : 0;
        if (n + k + 2 > cap) text = realloc(text, cap = 2 * (n + k + 2));
        memcpy(text + n, s ? s : "", k);
        n += k;
        text[n++] = '\n';
        cJSON_Delete(j);
    }
    fclose(f);
    qve_tok_ids ids = {0};
    double best = 0, cold = 0;
    for (int pass = 0; pass < 30; pass++) {
        ids.n_ids = 0;
        t0 = bench_clock_s(CLOCK_MONOTONIC);
        if (qve_tok_encode(tok, text, n, &ids, err, sizeof err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err);
            return 1;
        }
        double mbs = (double)n / 1e6 / (bench_clock_s(CLOCK_MONOTONIC) - t0);
        if (pass == 0) cold = mbs;
        else if (mbs > best) best = mbs;
    }
    printf("tokenizer  %s: load %.0f ms; encode %.2f MB mixed text -> %zu ids: "
           "%.1f MB/s cold cache, %.1f MB/s warm (1 thread)\n",
           used, 1e3 * t_open, (double)n / 1e6, ids.n_ids, cold, best);
    qve_tok_ids_free(&ids);
    free(text);
    qve_tok_free(tok);
    return 0;
}
