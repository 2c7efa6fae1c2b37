/* voicefmt — inspect, verify, compare, convert and edit .qvoice voice files (CLI only).
 * File handling is in the qvf_ library (voicefmt/qvf.h); verify --model goes through
 * qv_voice_file_verify (include/qvoice.h). This file parses options and prints.
 */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "include/qvoice.h"
#include "voicefmt/qvf.h"

#define EXIT_USAGE 2

static const char *usage_text =
    "NAME\n"
    "    voicefmt - inspect, verify and convert qvoice voice files\n"
    "\n"
    "SYNOPSIS\n"
    "    voicefmt inspect [--json] FILE...\n"
    "    voicefmt verify [--model DIR [--deep] [--force]] [--trusted PUB.pem]... FILE...\n"
    "    voicefmt diff A B\n"
    "    voicefmt convert --to v3|v4 -o OUT FILE\n"
    "    voicefmt extract (--xvector OUT.bin | --codes OUT.txt | --transcript OUT.txt) FILE\n"
    "    voicefmt strip --drop wdelta|icl [--to v3|v4] -o OUT FILE\n"
    "    voicefmt list [DIR...]\n"
    "    voicefmt mix [--name NAME] -o OUT A.qvoice:W [B.qvoice:W...]\n"
    "    voicefmt palette list VOICE\n"
    "    voicefmt palette add VOICE --name NAME (--from AUDIO -m BASE_DIR | --direction FILE)\n"
    "                     [--strength S] [--min-similarity C] [-o OUT]\n"
    "    voicefmt palette rm VOICE --name NAME [-o OUT]\n"
    "    voicefmt palette derive -m BASE_DIR -o OUT.bin NEUTRAL:EMOTIONAL...\n"
    "    voicefmt keygen -o PREFIX\n"
    "    voicefmt sign --key KEY.pem [--signer NAME] [-o OUT] FILE\n"
    "    voicefmt detect [--json] [--max-seconds S] AUDIO...\n"
    "    voicefmt --help | --version\n"
    "\n"
    "DESCRIPTION\n"
    "    Reads v4 .qvoice files (docs/qvoice-format.md), legacy v1-v3 .qvoice files and raw .bin\n"
    "    x-vectors (any file not starting with QVCE whose name does not end in .qvoice). Every\n"
    "    write is atomic (nothing is left at or beside OUT on failure or kill).\n"
    "\n"
    "COMMANDS AND OPTIONS\n"
    "    inspect     version, chunks with sizes and CRC status, name, language, duration, the\n"
    "                consent record, model identity, x-vector norm, ICL frames, weight stream.\n"
    "        -j, --json          one JSON array of objects on stdout instead of text\n"
    "    verify      full structural check (lengths, CRCs, order, limits, LZ4 blocks) and the\n"
    "                signature, when the file has one (an edit after signing fails).\n"
    "        -t, --trusted PUB.pem  also require a signature by this key (repeatable: any of them)\n"
    "        -m, --model DIR     also check that the voice fits the model in DIR: x-vector size,\n"
    "                            TPAD/WOVR sizes, WDELTA target fingerprint and tensor table,\n"
    "                            and that it was made with DIR's sibling checkpoint (the\n"
    "                            Base/CustomVoice pair of one release), judged from its TPAD\n"
    "                            and WOVR rows; without those: a warning (cannot tell)\n"
    "        -d, --deep          with --model: also hash every WDELTA target tensor (SHA-256)\n"
    "        -f, --force         with --model: a voice made with an unrelated checkpoint is a\n"
    "                            warning, not a failure\n"
    "    diff        compare two voices by content (exit 0 same, 1 different, 2 trouble)\n"
    "    convert     write FILE as version v3 (legacy engine) or v4 (default v4)\n"
    "        -t, --to v3|v4      output version\n"
    "        -o, --output OUT    output file (required)\n"
    "    extract     write one part of the voice\n"
    "        -x, --xvector OUT   raw little-endian f32 x-vector (legacy .bin)\n"
    "        -c, --codes OUT     ICL codes as text, one frame per line, 16 integers\n"
    "        -T, --transcript OUT  reference transcript (UTF-8)\n"
    "    strip       drop a part and write the rest\n"
    "        -D, --drop wdelta|icl  the weight stream, or the transcript + ICL codes\n"
    "        -t, --to v3|v4      output version (default v4)\n"
    "        -o, --output OUT    output file (required)\n"
    "    list        the voice library: *.qvoice in DIR, default voices/ then each directory of\n"
    "                $QVOICE_PATH (colon-separated)\n"
    "    mix         weighted sum of x-vectors (weights used as given, not normalised); all\n"
    "                inputs must have the same source model identity. Keeps TPAD/WOVR of the\n"
    "                first input, drops ICL and WDELTA, records the recipe in META key \"mix\".\n"
    "        -n, --name NAME     META name of the result (default \"mix\")\n"
    "        -o, --output OUT    output file (required)\n"
    "    palette     the voice's named styles (PALT chunk; docs/markup.md): speak --style NAME\n"
    "                and markup tags [NAME] use them. add and rm drop a signature (re-sign)\n"
    "        list                name, kind, default strength, cosine to the voice's x-vector\n"
    "        add                 -n NAME ([a-z][a-z0-9_-]*, at most 31 bytes) and one of:\n"
    "          -f, --from AUDIO  a recording of this voice performing the style (its x-vector,\n"
    "                            computed with -m BASE_DIR, is stored as a variant; refused\n"
    "                            below --min-similarity C to the voice, default 0.5)\n"
    "          -d, --direction FILE  a unit direction (.bin from palette derive, or a voice's\n"
    "                            x-vector), stored normalised\n"
    "          -s, --strength S  default strength, (0, 4] (variant 1, direction 0.25)\n"
    "          -o, --output OUT  write there (default: VOICE itself, atomically)\n"
    "        rm                  -n NAME: remove an entry (-o OUT as for add)\n"
    "        derive              the averaged unit direction of NEUTRAL:EMOTIONAL pairs (audio\n"
    "                            or voice files, ideally of several speakers) into OUT.bin (raw\n"
    "                            f32); prints each pair's shift |e-n|/|n| and the cosine between\n"
    "                            every two pairs' directions (their agreement)\n"
    "    keygen      make an Ed25519 key pair: PREFIX.pem (private, mode 0600) and PREFIX.pub.pem\n"
    "        -o, --output PREFIX path prefix of the two files (required)\n"
    "    sign        sign a v4 voice file (an Ed25519 SIGN chunk over every byte before it;\n"
    "                docs/qvoice-format.md); replaces an earlier signature\n"
    "        -k, --key KEY.pem   private key (voicefmt keygen, or openssl genpkey -algorithm ed25519)\n"
    "        -s, --signer NAME   who signs, stored in the signature (default: none)\n"
    "        -o, --output OUT    output file (default: FILE itself, replaced atomically)\n"
    "    detect      look for qvoice's audio watermark (docs/provenance.md) in audio files of any\n"
    "                format libsndfile reads: presence, the 32-bit payload and where the mark is\n"
    "                (3 s windows every 107 ms; the whole file as one window too), and the\n"
    "                provenance tags its container claims (what made it: model, voice, time).\n"
    "                Exit 0 when every file carries the mark, 1 when one does not or cannot be\n"
    "                read.\n"
    "        -j, --json          one JSON array of objects on stdout instead of text\n"
    "        -M, --max-seconds S read at most S seconds of each file (default 1200)\n"
    "    -h, --help              this text\n"
    "    -V, --version           version\n"
    "\n"
    "EXIT STATUS\n"
    "    0 success (diff: same), 1 failure or invalid file (diff: different), 2 usage error\n"
    "    (diff: trouble reading).\n"
    "\n"
    "EXAMPLE\n"
    "    voicefmt convert --to v3 -o alice_06b.qvoice alice.qvoice\n"
    "    voicefmt verify --model cache/tiny-cv heavy.qvoice\n";

static int usage_error(const char *msg) {
    fprintf(stderr, "voicefmt: %s (see voicefmt --help)\n", msg);
    return EXIT_USAGE;
}

static qvf_voice *load(const char *path) {
    qvf_voice *v;
    char err[512];
    if (qvf_read_file(path, 0, &v, err, sizeof err)) {
        fprintf(stderr, "voicefmt: %s\n", err);
        return NULL;
    }
    return v;
}

/* Writes n bytes to path atomically (the library's writer); 0, or 1 after printing why. */
static int write_bytes(const char *path, const void *buf, size_t n) {
    qv_outfile *f;
    if (qv_outfile_open(&f, path)) {
        fprintf(stderr, "voicefmt: %s\n", qv_last_error());
        return 1;
    }
    FILE *s = qv_outfile_stream(f);
    if (!s || fwrite(buf, 1, n, s) != n) {
        qv_outfile_abort(f);
        fprintf(stderr, "voicefmt: %s: write failed\n", path);
        return 1;
    }
    if (qv_outfile_commit(f)) {
        fprintf(stderr, "voicefmt: %s\n", qv_last_error());
        return 1;
    }
    return 0;
}

static int write_voice(const qvf_voice *v, const char *path, int version) {
    char err[512];
    if (qvf_write_file(v, path, version, err, sizeof err)) {
        fprintf(stderr, "voicefmt: %s\n", err);
        return 1;
    }
    return 0;
}

static int parse_version(const char *s, int *out) {
    if (!strcmp(s, "v3") || !strcmp(s, "3"))
        *out = 3;
    else if (!strcmp(s, "v4") || !strcmp(s, "4"))
        *out = 4;
    else
        return -1;
    return 0;
}

static const char *wkind_name(uint32_t k) {
    static const char *const n[] = {"delta", "delta (legacy header)", "full"};
    return k < 3 ? n[k] : "invalid";
}

static double xnorm(const qvf_voice *v) {
    double s = 0;
    for (uint32_t i = 0; i < v->enc_dim; i++)
        s += (double)v->xvector[i] * v->xvector[i];
    return sqrt(s);
}

static uint64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? 0 : (uint64_t)st.st_size;
}

/* ---------------------------------------------------------------- inspect */

static void id_json(cJSON *o, const char *key, const qvf_model_id *id) {
    char fp[65];
    qvf_hex(id->fingerprint, 32, fp);
    cJSON *m = cJSON_AddObjectToObject(o, key);
    cJSON_AddNumberToObject(m, "hidden_size", id->hidden_size);
    cJSON_AddNumberToObject(m, "text_hidden_size", id->text_hidden_size);
    cJSON_AddNumberToObject(m, "enc_dim", id->enc_dim);
    cJSON_AddStringToObject(m, "variant", qvf_variant_name(id->variant));
    cJSON_AddStringToObject(m, "fingerprint", fp);
}

static void id_text(const char *label, const qvf_model_id *id) {
    char fp[65];
    qvf_hex(id->fingerprint, 32, fp);
    printf("  %s model: hidden %u, text hidden %u, enc_dim %u, %s, fingerprint %s\n", label,
           id->hidden_size, id->text_hidden_size, id->enc_dim, qvf_variant_name(id->variant), fp);
}

static uint64_t wdelta_bytes(const qvf_voice *v, uint64_t *raw) {
    uint64_t s = 0;
    *raw = 0;
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        s += v->tensors[i].data_bytes;
        *raw += v->tensors[i].raw_bytes;
    }
    return s;
}

/* Chunk table of a v4 file (also when the voice itself does not parse). */
static void chunks_out(const char *path, cJSON *jo, int *framing_ok) {
    size_t n = 0;
    char *data;
    qv_file_read(path, SIZE_MAX / 2, &data, &n);
    uint8_t *b = (uint8_t *)data;
    *framing_ok = 1;
    if (!b || n < 8 || memcmp(b, "QVCE", 4) || b[4] != 4 || b[5] || b[6] || b[7]) {
        qv_free(b);
        return;
    }
    qvf_chunk_info ch[256];
    int nc = 0;
    char err[512];
    if (qvf_list_chunks(b, n, path, ch, 256, &nc, err, sizeof err)) *framing_ok = 0;
    if (nc > 256) nc = 256;
    cJSON *arr = jo ? cJSON_AddArrayToObject(jo, "chunks") : NULL;
    for (int i = 0; i < nc; i++) {
        if (arr) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "tag", ch[i].tag);
            cJSON_AddBoolToObject(c, "critical", ch[i].flags & 1);
            cJSON_AddNumberToObject(c, "offset", (double)ch[i].offset);
            cJSON_AddNumberToObject(c, "payload_bytes", (double)ch[i].payload_bytes);
            cJSON_AddBoolToObject(c, "crc_ok", ch[i].crc_ok);
            cJSON_AddItemToArray(arr, c);
        } else {
            printf("  chunk %-4s %-9s offset %10llu  payload %12llu B  CRC %s\n", ch[i].tag,
                   (ch[i].flags & 1) ? "critical" : "ancillary", (unsigned long long)ch[i].offset,
                   (unsigned long long)ch[i].payload_bytes, ch[i].crc_ok ? "ok" : "BAD");
        }
    }
    qv_free(b);
}

/* The signature of a v4 file (sig->present = 0 for other files). 0, or 1 with a message printed
 * when it does not verify or cannot be read. */
static int signature_of(const char *path, qvf_signature *sig) {
    memset(sig, 0, sizeof *sig);
    size_t n = 0;
    char err[512], *data;
    if (qv_file_read(path, SIZE_MAX / 2, &data, &n))
        return fprintf(stderr, "voicefmt: %s\n", qv_last_error()), 1;
    const uint8_t *b = (const uint8_t *)data;
    int rc = n >= 8 && !memcmp(b, "QVCE", 4) && b[4] == 4
                 ? qvf_signature_read(b, n, path, sig, err, sizeof err)
                 : 0;
    qv_free(data);
    if (rc) fprintf(stderr, "voicefmt: %s\n", err);
    return rc ? 1 : 0;
}

static void signature_out(const qvf_signature *sig, cJSON *jo) {
    char id[17], when[32] = "?";
    time_t t = (time_t)sig->signed_utc;
    struct tm tm;
    qvf_hex(sig->key_id, 8, id);
    if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (jo) {
        cJSON *o = cJSON_AddObjectToObject(jo, "signature");
        cJSON_AddBoolToObject(o, "present", sig->present);
        if (!sig->present) return;
        cJSON_AddBoolToObject(o, "valid", sig->valid);
        cJSON_AddStringToObject(o, "key_id", id);
        cJSON_AddStringToObject(o, "signer", sig->signer);
        cJSON_AddStringToObject(o, "signed_utc", when);
    } else if (!sig->present) {
        printf("  signature: none\n");
    } else {
        printf("  signature: %s, key %s%s%s, signed %s\n", sig->valid ? "valid" : "INVALID", id,
               sig->signer[0] ? ", signer " : "", sig->signer, when);
    }
}

/* inspect --json: one voice's object (jo) from v; comp/raw: its weight delta's stored/raw bytes. */
static void inspect_json(cJSON *jo, const qvf_voice *v, uint64_t comp, uint64_t raw) {
    cJSON_AddNumberToObject(jo, "version", v->file_version);
    id_json(jo, "source_model", &v->source);
    if (v->has_wdelta) id_json(jo, "target_model", &v->target);
    cJSON *m = cJSON_AddObjectToObject(jo, "meta");
    for (int i = 0; i < v->n_meta; i++)
        cJSON_AddStringToObject(m, v->meta[i].key, v->meta[i].value);
    cJSON_AddNumberToObject(jo, "enc_dim", v->enc_dim);
    cJSON_AddNumberToObject(jo, "xvector_norm", xnorm(v));
    cJSON_AddNumberToObject(jo, "icl_frames", v->n_frames);
    cJSON_AddNumberToObject(jo, "icl_seconds", v->n_frames / 12.5);
    cJSON_AddNumberToObject(jo, "transcript_bytes", v->transcript_bytes);
    cJSON_AddNumberToObject(jo, "tpad_hidden", v->tpad_hidden);
    if (v->wovr_h) {
        cJSON *w = cJSON_AddObjectToObject(jo, "wovr");
        cJSON_AddNumberToObject(w, "h", v->wovr_h);
        cJSON_AddNumberToObject(w, "th", v->wovr_th);
        cJSON_AddNumberToObject(w, "cv", v->wovr_cv);
    }
    if (v->n_styles) {
        cJSON *p = cJSON_AddArrayToObject(jo, "palette");
        for (int i = 0; p && i < v->n_styles; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", v->styles[i].name);
            cJSON_AddStringToObject(e, "kind", v->styles[i].kind == QVF_STYLE_VARIANT
                                                   ? "variant"
                                                   : "direction");
            cJSON_AddNumberToObject(e, "strength", v->styles[i].strength);
            cJSON_AddItemToArray(p, e);
        }
    }
    if (v->has_wdelta) {
        cJSON *w = cJSON_AddObjectToObject(jo, "wdelta");
        cJSON_AddStringToObject(w, "kind", wkind_name(v->wdelta_kind));
        cJSON_AddNumberToObject(w, "n_tensors", v->n_tensors);
        cJSON_AddNumberToObject(w, "stored_bytes", (double)comp);
        cJSON_AddNumberToObject(w, "raw_bytes", (double)raw);
    }
}

/* inspect: one voice as text. */
/* The consent record (META consent.*, docs/qvoice-format.md §4.3), when there is one. */
static void consent_text(const qvf_voice *v) {
    const qvf_consent c = qvf_consent_get(v);
    if (!c.method) return;
    printf("  consent: %s%s, speaker %s, scope %s, %s, collected by %s\n", c.method,
           c.legacy ? " (legacy note)" : "", c.speaker ? c.speaker : "(not recorded)",
           c.scope ? c.scope : "(not recorded)", c.utc ? c.utc : "-",
           c.collected_by ? c.collected_by : "-");
    if (c.statement) printf("    statement: \"%s\"\n", c.statement);
    if (c.recording_sha256) printf("    recording SHA-256: %s\n", c.recording_sha256);
}

static void inspect_text(const char *path, const qvf_voice *v, uint64_t comp, uint64_t raw) {
    const char *name = qvf_meta_get(v, "name"), *lang = qvf_meta_get(v, "language"),
               *lid = qvf_meta_get(v, "language_id"), *dur = qvf_meta_get(v, "duration_s");
    printf("%s: qvoice v%d%s, %llu bytes\n", path, v->file_version,
           v->file_version ? "" : " (raw .bin x-vector)", (unsigned long long)file_size(path));
    printf("  name: %s   language: %s%s%s%s   duration: %s%s\n", name ? name : "-",
           lang ? lang : "-", lid ? " (" : "", lid ? lid : "", lid ? ")" : "", dur ? dur : "-",
           dur ? " s" : "");
    consent_text(v);
    const int legacy = qvf_consent_get(v).legacy;
    for (int i = 0; i < v->n_meta; i++)
        if (strcmp(v->meta[i].key, "name") && strcmp(v->meta[i].key, "language") &&
            strcmp(v->meta[i].key, "language_id") && strcmp(v->meta[i].key, "duration_s") &&
            strncmp(v->meta[i].key, "consent.", 8) &&
            !(legacy && (!strcmp(v->meta[i].key, "consent") ||
                         !strcmp(v->meta[i].key, "consent_by") ||
                         !strcmp(v->meta[i].key, "consent_utc")))) /* shown as the record */
            printf("  meta %s: %s\n", v->meta[i].key, v->meta[i].value);
    id_text("source", &v->source);
    if (v->has_wdelta) id_text("target", &v->target);
    printf("  x-vector: %u floats, norm %.4f\n", v->enc_dim, xnorm(v));
    printf("  ICL: %u frames (%.2f s), transcript %u bytes%s%.60s%s\n", v->n_frames,
           v->n_frames / 12.5, v->transcript_bytes, v->transcript ? ": \"" : "",
           v->transcript ? v->transcript : "", v->transcript ? "\"" : "");
    if (v->tpad_hidden) printf("  TPAD: hidden %u\n", v->tpad_hidden);
    if (v->wovr_h) printf("  WOVR: h %u, th %u, cv %u\n", v->wovr_h, v->wovr_th, v->wovr_cv);
    for (int i = 0; i < v->n_styles; i++)
        printf("%s %s (%s %.3g)%s", i ? "," : "  palette:", v->styles[i].name,
               v->styles[i].kind == QVF_STYLE_VARIANT ? "variant" : "direction",
               (double)v->styles[i].strength, i + 1 == v->n_styles ? "\n" : "");
    if (v->has_wdelta)
        printf("  weights: %s, %u tensors, %.1f MB stored for %.1f MB\n",
               wkind_name(v->wdelta_kind), v->n_tensors, comp / 1e6, raw / 1e6);
}

static int inspect_one(const char *path, cJSON *jarr) {
    char err[512];
    qvf_voice *v = NULL;
    int rc = qvf_read_file(path, 0, &v, err, sizeof err);
    cJSON *jo = jarr ? cJSON_CreateObject() : NULL;
    int framing_ok;
    if (jo) {
        cJSON_AddItemToArray(jarr, jo);
        cJSON_AddStringToObject(jo, "file", path);
        cJSON_AddNumberToObject(jo, "file_bytes", (double)file_size(path));
    }
    if (rc) {
        fprintf(stderr, "voicefmt: %s\n", err);
        if (jo) {
            cJSON_AddStringToObject(jo, "error", err);
            cJSON_AddStringToObject(jo, "error_code", qvf_errname(rc));
        }
        chunks_out(path, jo, &framing_ok);
        return 1;
    }
    uint64_t raw, comp = wdelta_bytes(v, &raw);
    if (jo)
        inspect_json(jo, v, comp, raw);
    else
        inspect_text(path, v, comp, raw);
    qvf_signature sig;
    int bad = signature_of(path, &sig);
    signature_out(&sig, jo);
    chunks_out(path, jo, &framing_ok);
    qvf_voice_free(v);
    return bad;
}

static int cmd_inspect(int argc, char **argv) {
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int json = 0, c;
    while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
        if (c == 'j')
            json = 1;
        else if (c == 'h')
            return fputs(usage_text, stdout), 0;
        else
            return usage_error("inspect: unknown option");
    }
    if (optind >= argc) return usage_error("inspect: no FILE");
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    int rc = 0;
    for (int i = optind; i < argc; i++)
        rc |= inspect_one(argv[i], arr);
    if (arr) {
        char *s = cJSON_Print(arr);
        if (s) puts(s);
        free(s);
        cJSON_Delete(arr);
    }
    return rc;
}

/* ---------------------------------------------------------------- verify */

/* The model checks, through the library (qv_voice_file_verify); its lines go to stderr. */
static int verify_model(const char *path, const char *dir, int flags) {
    char *report;
    enum qv_status st = qv_voice_file_verify(dir, path, flags, &report);
    if (!report) fprintf(stderr, "voicefmt: %s\n", qv_last_error());
    for (char *line = report, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        next = next ? (*next = 0, next + 1) : line + strlen(line);
        fprintf(stderr, "voicefmt: %s\n", line);
    }
    qv_free(report);
    return st != QV_OK;
}

/* Decodes every LZ4 block so a corrupt block is caught by verify, not at load. */
static int verify_blocks(const char *path, const qvf_voice *v) {
    char err[512];
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        const qvf_tensor *t = &v->tensors[i];
        if (t->encoding != QVF_ENC_DELTA16_LZ4) continue;
        uint16_t *zero = calloc(1, t->raw_bytes), *out = malloc(t->raw_bytes);
        int rc = (!zero || !out) ? QVF_E_NOMEM : qvf_wdelta_apply(t, zero, out, 0, err, sizeof err);
        free(zero);
        free(out);
        if (rc) {
            fprintf(stderr, "voicefmt: %s: %s\n", path, rc == QVF_E_NOMEM ? "out of memory" : err);
            return 1;
        }
    }
    return 0;
}

static int cmd_verify(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"deep", no_argument, 0, 'd'},
                                         {"force", no_argument, 0, 'f'},
                                         {"trusted", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL;
    int deep = 0, force = 0, c, n_trusted = 0;
    uint8_t trusted[16][32];
    char err[512];
    while ((c = getopt_long(argc, argv, "m:dft:h", opts, NULL)) != -1) {
        if (c == 't') {
            void *k = NULL;
            if (n_trusted == 16) return usage_error("verify: at most 16 --trusted keys");
            if (qvf_key_load(optarg, 0, &k, trusted[n_trusted], err, sizeof err))
                return fprintf(stderr, "voicefmt: %s\n", err), 1;
            qvf_key_free(k);
            n_trusted++;
        } else if (c == 'm')
            model = optarg;
        else if (c == 'd')
            deep = 1;
        else if (c == 'f')
            force = 1;
        else if (c == 'h')
            return fputs(usage_text, stdout), 0;
        else
            return usage_error("verify: unknown option");
    }
    if (optind >= argc) return usage_error("verify: no FILE");
    int rc = 0;
    for (int i = optind; i < argc; i++) {
        qvf_voice *v = load(argv[i]);
        if (!v) {
            rc = 1;
            continue;
        }
        qvf_signature sig;
        int bad = verify_blocks(argv[i], v) || signature_of(argv[i], &sig);
        if (!bad && model)
            bad = verify_model(argv[i], model, (deep ? QV_VERIFY_DEEP : 0) | (force ? QV_VERIFY_FORCE : 0));
        if (!bad && n_trusted && !qvf_signature_trusted(&sig, (const uint8_t(*)[32])trusted, n_trusted)) {
            char id[17];
            qvf_hex(sig.key_id, 8, id);
            if (sig.present)
                fprintf(stderr, "voicefmt: %s: signed by key %s (signer \"%s\"), not one of the "
                        "trusted keys\n", argv[i], id, sig.signer);
            else
                fprintf(stderr, "voicefmt: %s: not signed\n", argv[i]);
            bad = 1;
        }
        if (!bad) {
            char id[17] = "";
            qvf_hex(sig.key_id, 8, id);
            printf("%s: ok (v%d%s%s%s%s%s%s)\n", argv[i], v->file_version, model ? ", fits " : "",
                   model ? model : "", sig.present ? ", signed by key " : "", sig.present ? id : "",
                   sig.signer[0] ? " " : "", sig.signer);
        }
        rc |= bad;
        qvf_voice_free(v);
    }
    return rc;
}

/* ---------------------------------------------------------------- diff */

static int same_mem(const void *a, const void *b, size_t n) {
    return !n || (a && b && !memcmp(a, b, n));
}

static int diff_voices(const qvf_voice *a, const qvf_voice *b) {
    int d = 0;
#define DIFFER(...) (printf(__VA_ARGS__), d = 1)
    if (a->enc_dim != b->enc_dim)
        DIFFER("x-vector: %u vs %u floats\n", a->enc_dim, b->enc_dim);
    else if (!same_mem(a->xvector, b->xvector, 4ull * a->enc_dim)) {
        double m = 0;
        for (uint32_t i = 0; i < a->enc_dim; i++)
            m = fmax(m, fabs((double)a->xvector[i] - b->xvector[i]));
        DIFFER("x-vector: max |diff| %.6g\n", m);
    }
    if (memcmp(&a->source, &b->source, sizeof a->source)) DIFFER("source model identity differs\n");
    if (memcmp(&a->target, &b->target, sizeof a->target)) DIFFER("target model identity differs\n");
    if (a->transcript_bytes != b->transcript_bytes ||
        !same_mem(a->transcript, b->transcript, a->transcript_bytes))
        DIFFER("transcript differs\n");
    if (a->n_frames != b->n_frames || !same_mem(a->codes, b->codes, 32ull * a->n_frames))
        DIFFER("ICL codes differ (%u vs %u frames)\n", a->n_frames, b->n_frames);
    for (int i = 0; i < a->n_meta; i++) {
        const char *o = qvf_meta_get(b, a->meta[i].key);
        if (!o)
            DIFFER("meta %s: only in A\n", a->meta[i].key);
        else if (strcmp(o, a->meta[i].value))
            DIFFER("meta %s: \"%s\" vs \"%s\"\n", a->meta[i].key, a->meta[i].value, o);
    }
    for (int i = 0; i < b->n_meta; i++)
        if (!qvf_meta_get(a, b->meta[i].key)) DIFFER("meta %s: only in B\n", b->meta[i].key);
    if (a->tpad_hidden != b->tpad_hidden || !same_mem(a->tpad, b->tpad, 12ull * a->tpad_hidden))
        DIFFER("TPAD differs\n");
    uint64_t h = a->wovr_h, th = a->wovr_th, cv = a->wovr_cv;
    if (h != b->wovr_h || th != b->wovr_th || cv != b->wovr_cv ||
        !same_mem(a->wovr_fc1_w, b->wovr_fc1_w, 2 * th * th) ||
        !same_mem(a->wovr_fc1_b, b->wovr_fc1_b, 4 * th) ||
        !same_mem(a->wovr_fc2_w, b->wovr_fc2_w, 2 * h * th) ||
        !same_mem(a->wovr_fc2_b, b->wovr_fc2_b, 4 * h) ||
        !same_mem(a->wovr_codec, b->wovr_codec, 2 * cv * h))
        DIFFER("WOVR differs\n");
    if (a->has_wdelta != b->has_wdelta || a->n_tensors != b->n_tensors ||
        a->wdelta_kind != b->wdelta_kind) {
        DIFFER("weight stream: %u vs %u tensors\n", a->n_tensors, b->n_tensors);
        return d;
    }
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        const qvf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) || x->raw_bytes != y->raw_bytes || x->dtype != y->dtype ||
            x->encoding != y->encoding) {
            DIFFER("tensor %u: %s vs %s\n", i, x->name, y->name);
            continue;
        }
        /* compare decoded content: same deltas in different block layouts are the same voice */
        uint8_t *zero = calloc(1, x->raw_bytes), *dx = malloc(x->raw_bytes),
                *dy = malloc(x->raw_bytes);
        char err[512];
        int ok = zero && dx && dy && !qvf_wdelta_apply(x, zero, dx, 0, err, sizeof err) &&
                 !qvf_wdelta_apply(y, zero, dy, 0, err, sizeof err);
        if (!ok) {
            free(zero);
            free(dx);
            free(dy);
            return -1;
        }
        if (memcmp(dx, dy, x->raw_bytes)) DIFFER("tensor %s: data differs\n", x->name);
        free(zero);
        free(dx);
        free(dy);
    }
#undef DIFFER
    return d;
}

static int cmd_diff(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return fputs(usage_text, stdout), 0;
    if (argc != 3) return usage_error("diff: needs exactly two files");
    qvf_voice *a = load(argv[1]), *b = a ? load(argv[2]) : NULL;
    int rc = 2;
    if (a && b) {
        int d = diff_voices(a, b);
        if (d < 0)
            fprintf(stderr, "voicefmt: %s / %s: cannot decode a weight tensor\n", argv[1], argv[2]);
        else if (!d)
            printf("same\n");
        rc = d < 0 ? 2 : d;
    }
    qvf_voice_free(a);
    qvf_voice_free(b);
    return rc;
}

/* ---------------------------------------------------------------- convert / strip */

static int cmd_convert_strip(int argc, char **argv, int strip) {
    static const struct option opts[] = {{"to", required_argument, 0, 't'},
                                         {"output", required_argument, 0, 'o'},
                                         {"drop", required_argument, 0, 'D'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL, *drop = NULL;
    int version = 4, c;
    while ((c = getopt_long(argc, argv, strip ? "t:o:D:h" : "t:o:h", opts, NULL)) != -1) {
        if (c == 't') {
            if (parse_version(optarg, &version)) return usage_error("--to must be v3 or v4");
        } else if (c == 'o')
            out = optarg;
        else if (c == 'D' && strip)
            drop = optarg;
        else if (c == 'h')
            return fputs(usage_text, stdout), 0;
        else
            return usage_error("unknown option");
    }
    if (!out || optind != argc - 1)
        return usage_error(strip ? "strip: needs --drop, -o OUT and one FILE"
                                 : "convert: needs -o OUT and one FILE");
    if (strip && (!drop || (strcmp(drop, "wdelta") && strcmp(drop, "icl"))))
        return usage_error("strip: --drop wdelta|icl");
    qvf_voice *v = load(argv[optind]);
    if (!v) return 1;
    if (drop && !strcmp(drop, "wdelta")) qvf_voice_drop_wdelta(v);
    if (drop && !strcmp(drop, "icl")) {
        qvf_voice_drop_icl(v);
        const char *f = qvf_meta_get(v, "v3_flags");
        if (f) { /* keep the legacy flags word honest: bit1 = has ICL codes */
            char b[24];
            snprintf(b, sizeof b, "%lu", strtoul(f, NULL, 10) & ~2ul);
            qvf_meta_set(v, "v3_flags", b);
        }
    }
    int rc = write_voice(v, out, version);
    qvf_voice_free(v);
    return rc;
}

/* ---------------------------------------------------------------- extract */

static int cmd_extract(int argc, char **argv) {
    static const struct option opts[] = {{"xvector", required_argument, 0, 'x'},
                                         {"codes", required_argument, 0, 'c'},
                                         {"transcript", required_argument, 0, 'T'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL;
    int what = 0, c;
    while ((c = getopt_long(argc, argv, "x:c:T:h", opts, NULL)) != -1) {
        if (c == 'h') return fputs(usage_text, stdout), 0;
        if (c != 'x' && c != 'c' && c != 'T') return usage_error("extract: unknown option");
        if (what) return usage_error("extract: give one of --xvector, --codes, --transcript");
        what = c;
        out = optarg;
    }
    if (!what || optind != argc - 1)
        return usage_error("extract: needs one of --xvector/--codes/--transcript and one FILE");
    qvf_voice *v = load(argv[optind]);
    if (!v) return 1;
    if ((what == 'c' && !v->n_frames) || (what == 'T' && !v->transcript)) {
        fprintf(stderr, "voicefmt: %s: has no %s\n", argv[optind],
                what == 'c' ? "ICL codes" : "transcript");
        qvf_voice_free(v);
        return 1;
    }
    qv_outfile *of;
    if (qv_outfile_open(&of, out)) {
        fprintf(stderr, "voicefmt: %s\n", qv_last_error());
        qvf_voice_free(v);
        return 1;
    }
    FILE *f = qv_outfile_stream(of);
    int ok = f != NULL;
    if (ok && what == 'x') ok = fwrite(v->xvector, 4, v->enc_dim, f) == v->enc_dim;
    if (ok && what == 'T')
        ok = fwrite(v->transcript, 1, v->transcript_bytes, f) == v->transcript_bytes;
    for (uint32_t i = 0; ok && what == 'c' && i < v->n_frames; i++)
        for (int k = 0; k < QVF_N_CODEBOOKS; k++)
            ok = fprintf(f, "%u%c", v->codes[i * QVF_N_CODEBOOKS + k],
                         k == QVF_N_CODEBOOKS - 1 ? '\n' : ' ') > 0;
    if (!ok) {
        fprintf(stderr, "voicefmt: %s: cannot write: %s\n", out, strerror(errno));
        qv_outfile_abort(of);
    } else if (qv_outfile_commit(of)) {
        fprintf(stderr, "voicefmt: %s\n", qv_last_error());
        ok = 0;
    }
    qvf_voice_free(v);
    return ok ? 0 : 1;
}

/* ---------------------------------------------------------------- list */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists the voices in dir; a missing dir is skipped (the default search path) or, when named on
 * the command line (required), a usage error. */
static int list_dir(const char *dir, int *any, int required) {
    DIR *d = opendir(dir);
    if (!d && required) {
        fprintf(stderr, "voicefmt: list: %s: %s (see voicefmt --help)\n", dir, strerror(errno));
        return EXIT_USAGE;
    }
    if (!d) return 0;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (qvf_file_kind(e->d_name, NULL, 0) != QVF_KIND_QVOICE) continue;
        char **nn = realloc(names, (n + 1) * sizeof *names);
        char *name = nn ? strdup(e->d_name) : NULL;
        if (nn) names = nn;
        if (!name) {
            fprintf(stderr, "voicefmt: %s: out of memory listing the directory\n", dir);
            rc = 1;
            break;
        }
        names[n++] = name;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str); /* qsort(NULL, 0) is undefined */
    for (size_t i = 0; i < n; i++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        qvf_voice *v;
        *any = 1;
        if (qvf_read_file(path, 0, &v, err, sizeof err)) {
            printf("%-40s  INVALID: %s\n", path, err);
            rc = 1;
        } else {
            const char *nm = qvf_meta_get(v, "name"), *lang = qvf_meta_get(v, "language");
            printf("%-40s  v%d  %-20s %-10s hidden %-5u %4u ICL frames%s  %8.1f KB\n", path,
                   v->file_version, nm ? nm : "-", lang ? lang : "-", v->source.hidden_size,
                   v->n_frames, v->has_wdelta ? "  +WDELTA" : "", file_size(path) / 1024.0);
            qvf_voice_free(v);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static int cmd_list(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return fputs(usage_text, stdout), 0;
    int rc = 0, any = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            int r = list_dir(argv[i], &any, 1);
            if (r == EXIT_USAGE) return r;
            rc |= r;
        }
        return rc;
    }
    char dir[4096];
    for (int i = 0; !qvf_voice_dir(i, dir, sizeof dir); i++) /* voices/, then $QVOICE_PATH */
        rc |= list_dir(dir, &any, 0);
    if (!any) fprintf(stderr, "voicefmt: no .qvoice files in voices/ or $QVOICE_PATH\n");
    return rc;
}

/* ---------------------------------------------------------------- mix */

static int cmd_mix(int argc, char **argv) {
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"name", required_argument, 0, 'n'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL, *name = "mix";
    int c;
    while ((c = getopt_long(argc, argv, "o:n:h", opts, NULL)) != -1) {
        if (c == 'o')
            out = optarg;
        else if (c == 'n')
            name = optarg;
        else if (c == 'h')
            return fputs(usage_text, stdout), 0;
        else
            return usage_error("mix: unknown option");
    }
    if (!out || optind >= argc)
        return usage_error("mix: needs -o OUT and at least one FILE:WEIGHT");
    int n = argc - optind, rc = 1;
    qvf_voice *first = NULL;
    float *acc = NULL;
    char recipe[8192] = "";
    for (int i = 0; i < n; i++) {
        char *arg = argv[optind + i], *colon = strrchr(arg, ':'), *end;
        if (!colon)
            return free(acc), qvf_voice_free(first), usage_error("mix: each input is FILE:WEIGHT");
        errno = 0;
        double w = strtod(colon + 1, &end);
        if (errno || *end || end == colon + 1 || !isfinite(w))
            return free(acc), qvf_voice_free(first),
                   usage_error("mix: weight is not a finite number");
        *colon = 0;
        qvf_voice *v = load(arg);
        *colon = ':';
        if (!v) goto done;
        if (!first) {
            first = v;
            if (!(acc = calloc(v->enc_dim, sizeof *acc))) goto done;
        } else if (memcmp(&v->source, &first->source, sizeof v->source) ||
                   v->enc_dim != first->enc_dim) {
            const char *a0 = argv[optind];
            fprintf(
                stderr,
                "voicefmt: %.*s: made with a different model than %.*s (model identities differ)\n",
                (int)(colon - arg), arg, (int)(strrchr(a0, ':') - a0), a0);
            qvf_voice_free(v);
            goto done;
        }
        for (uint32_t k = 0; k < first->enc_dim; k++)
            acc[k] += (float)(w * v->xvector[k]);
        snprintf(recipe + strlen(recipe), sizeof recipe - strlen(recipe), "%s%s", i ? "," : "",
                 arg);
        if (v != first) qvf_voice_free(v);
    }
    memcpy(first->xvector, acc, first->enc_dim * sizeof *acc);
    while (first->n_styles) /* the first voice's styles do not fit the mix */
        qvf_palette_remove(first, first->styles[0].name);
    qvf_voice_drop_icl(first);
    qvf_voice_drop_wdelta(first);
    char now[32];
    time_t t = time(NULL);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    static const char *const drop[] = {"source_sha256", "duration_s", "source_sample_rate_hz",
                                       "source_channels", "v3_flags"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        qvf_meta_set(first, drop[i], NULL);
    if (qvf_meta_set(first, "name", name) || qvf_meta_set(first, "mix", recipe) ||
        qvf_meta_set(first, "created_utc", now) ||
        qvf_meta_set(first, "tool", "qvoice voicefmt " QVF_VERSION_STRING)) {
        fprintf(stderr, "voicefmt: %s: invalid META value (name must be UTF-8, at most 64 KiB)\n",
                out);
        goto done;
    }
    rc = write_voice(first, out, 4);
done:
    free(acc);
    qvf_voice_free(first);
    return rc;
}

/* ---------------------------------------------------------------- palette */

static double cosine(const float *a, const float *b, uint32_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (uint32_t i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

/* A number in (lo, hi]; -1 otherwise. */
static int parse_real(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || *end || end == s || !(x > lo && x <= hi)) return -1;
    *out = x;
    return 0;
}

/* The x-vector of a voice file or (with a cloner) of audio, of *dim values (0: any, then set);
 * NULL after printing the error. */
static float *xvector(const qv_cloner *cl, const char *path, uint32_t *dim) {
    float *x;
    int n;
    if (qv_clone_xvector(cl, path, 30, &x, &n)) {
        fprintf(stderr, "voicefmt: %s\n", qv_last_error());
        return NULL;
    }
    if (*dim && (uint32_t)n != *dim) {
        fprintf(stderr, "voicefmt: %s: %d values, expected %u\n", path, n, *dim);
        qv_free(x);
        return NULL;
    }
    *dim = (uint32_t)n;
    return x;
}

static qv_cloner *cloner(const char *base_dir) {
    qv_cloner *c;
    if (!base_dir) {
        fprintf(stderr, "voicefmt: palette: audio needs the Base model (-m BASE_DIR)\n");
        return NULL;
    }
    if (qv_cloner_load(&c, base_dir, 0)) {
        fprintf(stderr, "voicefmt: %s\n", qv_last_error());
        return NULL;
    }
    return c;
}


/* The method of issue 26: each pair's unit shift, their mean, normalised. */
static int palette_derive(const char *base_dir, const char *out, char **pairs, int n) {
    qv_cloner *cl = NULL;
    float **d = calloc((size_t)n, sizeof *d);
    double *ratio = calloc((size_t)n, sizeof *ratio);
    float *mean = NULL;
    uint32_t dim = 0;
    int rc = 1;
    if (!d || !ratio) goto done;
    for (int i = 0; i < n; i++) {
        char *colon = strrchr(pairs[i], ':');
        if (!colon || colon == pairs[i] || !colon[1]) {
            fprintf(stderr, "voicefmt: palette derive: %s: expected NEUTRAL:EMOTIONAL\n",
                    pairs[i]);
            goto done;
        }
        *colon = 0;
        const char *files[2] = {pairs[i], colon + 1};
        float *x[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            const int voice = qvf_file_kind(files[k], NULL, 0) != QVF_KIND_NONE;
            if (!voice && !cl && !(cl = cloner(base_dir))) break;
            if (!(x[k] = xvector(cl, files[k], &dim))) break;
        }
        int bad = !x[1] || !(d[i] = malloc(dim * sizeof **d)) ||
                  qvf_style_direction(x[0], x[1], dim, d[i], &ratio[i]);
        if (x[1] && d[i] && bad)
            fprintf(stderr, "voicefmt: palette derive: %s and %s have the same x-vector\n",
                    files[0], files[1]);
        *colon = ':';
        qv_free(x[0]), qv_free(x[1]);
        if (bad) goto done;
        printf("pair %d  %s  shift |e-n|/|n| = %.4f\n", i + 1, pairs[i], ratio[i]);
    }
    double sum = 0;
    int m = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            double c = cosine(d[i], d[j], dim);
            printf("agreement  pair %d vs %d: cosine %.4f\n", i + 1, j + 1, c);
            sum += c, m++;
        }
    if (m)
        printf("agreement  mean cosine between pairs' directions: %.4f (%d pairs)\n", sum / m, n);
    else
        printf("agreement  one pair: nothing to compare (use pairs of several speakers)\n");
    if (!(mean = calloc(dim, sizeof *mean))) goto done;
    double nn = 0;
    for (uint32_t k = 0; k < dim; k++) {
        double s = 0;
        for (int i = 0; i < n; i++)
            s += d[i][k];
        mean[k] = (float)(s / n);
        nn += (double)mean[k] * mean[k];
    }
    if (!(nn > 0)) {
        fprintf(stderr, "voicefmt: palette derive: the pairs' directions cancel out\n");
        goto done;
    }
    for (uint32_t k = 0; k < dim; k++)
        mean[k] = (float)(mean[k] / sqrt(nn));
    rc = write_bytes(out, mean, dim * sizeof *mean);
    if (!rc) printf("direction  %s (%u values, unit norm)\n", out, dim);
done:
    if (!d || !ratio) fprintf(stderr, "voicefmt: out of memory\n");
    for (int i = 0; d && i < n; i++)
        free(d[i]);
    free(d), free(ratio), free(mean);
    qv_cloner_free(cl);
    return rc;
}

static int palette_list(const qvf_voice *v) {
    if (!v->n_styles) printf("(no palette)\n");
    for (int i = 0; i < v->n_styles; i++) {
        const qvf_style *e = &v->styles[i];
        printf("%-16s %-9s strength %.3g  cosine to the voice %.4f\n", e->name,
               e->kind == QVF_STYLE_VARIANT ? "variant" : "direction", (double)e->strength,
               cosine(e->vec, v->xvector, v->enc_dim));
    }
    return 0;
}

/* palette add: a variant (--from AUDIO, its x-vector; refused below min_sim to the voice) or a
 * direction (--direction FILE, stored normalised) named name, written to out or path. */
static int palette_add(qvf_voice *v, const char *path, const char *name, const char *from,
                       const char *dirf, const char *model, const char *out, double strength,
                       double min_sim) {
    qv_cloner *cl = from ? cloner(model) : NULL;
    uint32_t dim = v->enc_dim;
    float *x = (!from || cl) ? xvector(cl, from ? from : dirf, &dim) : NULL;
    qv_cloner_free(cl);
    if (!x) return 1;
    int rc = 1;
    const double sim = cosine(x, v->xvector, dim);
    uint32_t kind = from ? QVF_STYLE_VARIANT : QVF_STYLE_DIRECTION;
    if (from) printf("%s: speaker similarity to %s: %.4f\n", from, path, sim);
    if (from && sim < min_sim) {
        fprintf(stderr,
                "voicefmt: %s: speaker similarity %.4f to %s is below %.2f: not the same "
                "voice? (--min-similarity)\n",
                from, sim, path, min_sim);
    } else {
        if (!from) { /* stored normalised */
            double nn = 0;
            for (uint32_t k = 0; k < dim; k++)
                nn += (double)x[k] * x[k];
            for (uint32_t k = 0; nn > 0 && k < dim; k++)
                x[k] = (float)(x[k] / sqrt(nn));
        }
        if (!strength) strength = from ? 1.0 : 0.25;
        int e = qvf_palette_set(v, name, kind, (float)strength, x);
        if (e)
            fprintf(stderr, "voicefmt: %s: palette entry \"%s\": %s%s\n", path, name,
                    qvf_strerror(e),
                    e == QVF_E_ARG ? " (name [a-z][a-z0-9_-]*, at most 31 bytes)" : "");
        else
            rc = write_voice(v, out ? out : path, 4);
    }
    qv_free(x);
    return rc;
}

static int cmd_palette(int argc, char **argv) {
    static const struct option opts[] = {{"name", required_argument, 0, 'n'},
                                         {"from", required_argument, 0, 'f'},
                                         {"direction", required_argument, 0, 'd'},
                                         {"strength", required_argument, 0, 's'},
                                         {"min-similarity", required_argument, 0, 'S'},
                                         {"model", required_argument, 0, 'm'},
                                         {"output", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    if (argc < 2) return usage_error("palette: list, add, rm or derive");
    const char *sub = argv[1], *name = NULL, *from = NULL, *dirf = NULL, *model = NULL,
               *out = NULL;
    double strength = 0, min_sim = 0.5;
    int c;
    argc--, argv++; /* past the subcommand, as main is past the command */
    while ((c = getopt_long(argc, argv, "n:f:d:s:S:m:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': name = optarg; break;
        case 'f': from = optarg; break;
        case 'd': dirf = optarg; break;
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case 's':
            if (parse_real(optarg, 0, 4, &strength))
                return usage_error("palette: --strength must be in (0, 4]");
            break;
        case 'S':
            if (parse_real(optarg, -1, 1, &min_sim))
                return usage_error("palette: --min-similarity must be in (-1, 1]");
            break;
        case 'h': return fputs(usage_text, stdout), 0;
        default: return usage_error("palette: unknown option");
        }
    }
    if (!strcmp(sub, "derive")) {
        if (!out || optind >= argc)
            return usage_error("palette derive: needs -o OUT.bin and NEUTRAL:EMOTIONAL pairs");
        return palette_derive(model, out, argv + optind, argc - optind);
    }
    if (optind + 1 != argc) return usage_error("palette: needs exactly one VOICE");
    const char *path = argv[optind];
    int is_add = !strcmp(sub, "add"), is_rm = !strcmp(sub, "rm");
    if (!is_add && !is_rm && strcmp(sub, "list"))
        return usage_error("palette: list, add, rm or derive");
    if ((is_add || is_rm) && !name) return usage_error("palette: needs --name NAME");
    if (is_add && !from == !dirf)
        return usage_error("palette add: needs one of --from AUDIO or --direction FILE");
    qvf_voice *v = load(path);
    if (!v) return 1;
    int rc = 1;
    if (!is_add && !is_rm) {
        rc = palette_list(v);
    } else if (is_rm) {
        if (qvf_palette_remove(v, name))
            fprintf(stderr, "voicefmt: %s: no palette entry \"%s\"\n", path, name);
        else
            rc = write_voice(v, out ? out : path, 4);
    } else {
        rc = palette_add(v, path, name, from, dirf, model, out, strength, min_sim);
    }
    qvf_voice_free(v);
    return rc;
}

/* ---------------------------------------------------------------- keygen, sign */

static int cmd_keygen(int argc, char **argv) {
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *prefix = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        if (c == 'o') prefix = optarg;
        else if (c == 'h') return fputs(usage_text, stdout), 0;
        else return usage_error("keygen: unknown option");
    }
    if (!prefix || optind != argc) return usage_error("keygen: give -o PREFIX and nothing else");
    char priv[4096], pub[4096], err[512], id[17];
    uint8_t kid[8];
    snprintf(priv, sizeof priv, "%s.pem", prefix);
    snprintf(pub, sizeof pub, "%s.pub.pem", prefix);
    if (qvf_keygen(priv, pub, kid, err, sizeof err)) return fprintf(stderr, "voicefmt: %s\n", err), 1;
    qvf_hex(kid, 8, id);
    printf("%s (private), %s (public): key id %s\n", priv, pub, id);
    return 0;
}

static int cmd_sign(int argc, char **argv) {
    static const struct option opts[] = {{"key", required_argument, 0, 'k'},
                                         {"signer", required_argument, 0, 's'},
                                         {"output", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *key_path = NULL, *signer = NULL, *out = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "k:s:o:h", opts, NULL)) != -1) {
        if (c == 'k') key_path = optarg;
        else if (c == 's') signer = optarg;
        else if (c == 'o') out = optarg;
        else if (c == 'h') return fputs(usage_text, stdout), 0;
        else return usage_error("sign: unknown option");
    }
    if (!key_path || optind != argc - 1) return usage_error("sign: give --key KEY.pem and one FILE");
    const char *in = argv[optind];
    if (!out) out = in;
    char err[512];
    void *key = NULL, *signed_buf = NULL;
    uint8_t pub[32];
    size_t n = 0, n_out = 0;
    char *buf = NULL;
    int rc = 1;
    if (qvf_key_load(key_path, 1, &key, pub, err, sizeof err)) {
        fprintf(stderr, "voicefmt: %s\n", err);
        goto done;
    }
    if (qv_file_read(in, SIZE_MAX / 2, &buf, &n)) {
        fprintf(stderr, "voicefmt: %s\n", qv_last_error());
        goto done;
    }
    if (qvf_sign(buf, n, in, key, signer, (uint64_t)time(NULL), &signed_buf, &n_out, err,
                 sizeof err)) {
        fprintf(stderr, "voicefmt: %s\n", err);
        goto done;
    }
    rc = write_bytes(out, signed_buf, n_out);
done:
    qvf_key_free(key);
    free(signed_buf);
    qv_free(buf);
    return rc;
}

/* ---------------------------------------------------------------- detect */

static void range_out(const qv_watermark_range *g) {
    char hexid[16];
    snprintf(hexid, sizeof hexid, "%08x", g->payload);
    printf("  %8.2f - %8.2f s  score %5.1f  ", g->start_s, g->end_s, g->score);
    if (g->payload_ok) /* the detector takes the synthetic flag as set */
        printf("payload %s (synthetic)\n", hexid);
    else
        printf("payload not recovered (longer audio helps)\n");
}

static int cmd_detect(int argc, char **argv) {
    static const struct option opts[] = {{"json", no_argument, 0, 'j'},
                                         {"max-seconds", required_argument, 0, 'M'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int json = 0, c;
    double max_seconds = 1200.0;
    while ((c = getopt_long(argc, argv, "jM:h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = 1;
        } else if (c == 'M') {
            char *end;
            errno = 0;
            max_seconds = strtod(optarg, &end);
            if (errno || *end || !(max_seconds >= 3.0 && max_seconds <= 86400.0))
                return usage_error("detect: --max-seconds must be a number from 3 to 86400");
        } else if (c == 'h') {
            return fputs(usage_text, stdout), 0;
        } else {
            return usage_error("detect: unknown option");
        }
    }
    if (optind >= argc) return usage_error("detect: no AUDIO file");
    cJSON *jarr = json ? cJSON_CreateArray() : NULL;
    int rc = 0;
    for (int i = optind; i < argc; i++) {
        qv_watermark_report r = qv_watermark_default_report();
        if (qv_watermark_detect_file(argv[i], max_seconds, &r)) {
            fprintf(stderr, "voicefmt: %s\n", qv_last_error());
            rc = 1;
            continue;
        }
        if (!r.present) rc = 1;
        char tags[QV_PROVENANCE_TEXT_BYTES]; /* what the container claims, beside the mark */
        if (qv_provenance_read(argv[i], tags)) tags[0] = 0;
        if (jarr) { /* the library's report, with the file's name and its tags first */
            char *txt = qv_watermark_report_json(&r);
            cJSON *rep = txt ? cJSON_Parse(txt) : NULL, *jo = cJSON_CreateObject();
            qv_free(txt);
            cJSON_AddStringToObject(jo, "file", argv[i]);
            cJSON_AddStringToObject(jo, "tags", tags);
            for (cJSON *e; rep && (e = rep->child);) /* moved over, key copied */
                cJSON_AddItemToObject(jo, e->string, cJSON_DetachItemViaPointer(rep, e));
            cJSON_Delete(rep);
            cJSON_AddItemToArray(jarr, jo);
            continue;
        }
        printf("%s: %.2f s, mark %s (best 3 s window %.2f, whole file %.2f; present from %.1f, "
               "in longer windows from %.1f)\n",
               argv[i], r.seconds, r.present ? "present" : "not found", r.score, r.score_all,
               QV_WATERMARK_PRESENT, QV_WATERMARK_PRESENT_LONG);
        printf("  tags: %s\n", tags[0] ? tags : "none");
        if (r.present) {
            printf("  whole file:\n");
            range_out(&r.all);
        }
        if (r.n_ranges) printf("  marked ranges:\n");
        for (int k = 0; k < r.n_ranges; k++) range_out(&r.ranges[k]);
        if (r.ranges_dropped) printf("  (%d more marked ranges)\n", r.ranges_dropped);
    }
    if (jarr) {
        char *txt = cJSON_Print(jarr);
        if (txt) puts(txt);
        free(txt);
        cJSON_Delete(jarr);
    }
    return rc;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
    if (argc < 2) return usage_error("no command");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) return fputs(usage_text, stdout), 0;
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V"))
        return printf("voicefmt (qvoice) %s\n", qv_version()), 0;
    argc--;
    argv++;
    optind = 1;
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc, argv);
    if (!strcmp(cmd, "verify")) return cmd_verify(argc, argv);
    if (!strcmp(cmd, "diff")) return cmd_diff(argc, argv);
    if (!strcmp(cmd, "convert")) return cmd_convert_strip(argc, argv, 0);
    if (!strcmp(cmd, "strip")) return cmd_convert_strip(argc, argv, 1);
    if (!strcmp(cmd, "extract")) return cmd_extract(argc, argv);
    if (!strcmp(cmd, "list")) return cmd_list(argc, argv);
    if (!strcmp(cmd, "mix")) return cmd_mix(argc, argv);
    if (!strcmp(cmd, "palette")) return cmd_palette(argc, argv);
    if (!strcmp(cmd, "keygen")) return cmd_keygen(argc, argv);
    if (!strcmp(cmd, "sign")) return cmd_sign(argc, argv);
    if (!strcmp(cmd, "detect")) return cmd_detect(argc, argv);
    fprintf(stderr, "voicefmt: unknown command '%s' (see voicefmt --help)\n", cmd);
    return EXIT_USAGE;
}
