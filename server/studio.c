/* studio.c — GET / and GET /studio/NAME: the studio's static files (server/studio/), embedded into
 * the binary at build time (scripts/embed-studio.sh), so an installed server needs no data
 * directory. Every reply carries a strict Content-Security-Policy: scripts, styles and requests
 * only from this origin, no inline script, no framing.
 */
#include <string.h>

#include "server/server_impl.h"

/* blob: for the takes' audio and the recorder's clip; data: for nothing but canvas exports. */
#define CSP                                                                                        \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "       \
    "media-src 'self' blob:; connect-src 'self'; worker-src 'self'; object-src 'none'; "          \
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

static const char *content_type(const char *name) {
    static const struct {
        const char *ext, *type;
    } types[] = {{".html", "text/html; charset=utf-8"},
                 {".css", "text/css; charset=utf-8"},
                 {".js", "text/javascript; charset=utf-8"},
                 {".svg", "image/svg+xml"},
                 {".png", "image/png"}};
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof *types; i++)
        if (!strcmp(dot, types[i].ext)) return types[i].type;
    return "application/octet-stream";
}

enum MHD_Result qvs_studio_get(qv_server *s, struct MHD_Connection *c, req *q) {
    const char *name = !strcmp(q->url, "/") ? "index.html" : q->url + sizeof "/studio/" - 1;
    const qvs_asset *a = qvs_studio_assets;
    while (!s->cfg.no_studio && a->name && strcmp(a->name, name))
        a++;
    if (s->cfg.no_studio || !a->name)
        return qvs_reply_error(c, q, MHD_HTTP_NOT_FOUND, "invalid_request_error", "not_found", NULL,
                               "GET %s: %s", q->url,
                               s->cfg.no_studio ? "the studio is off (--no-studio)"
                                                : "no such file");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(a->size, (void *)(uintptr_t)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type(a->name));
    MHD_add_response_header(r, "Content-Security-Policy", CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    q->status = MHD_HTTP_OK;
    return ret;
}
