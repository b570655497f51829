/* ui: finds a console file (or the API's description) among those embedded and names its
 * content type. The contract is in include/http/ui.h. */
#include <string.h>

#include "http/ui.h"

#define UI_PAGE "index.html"    /* what /delay-queue/ui/ itself serves */

/* By file name extension; the console uses no other kind of file. Module scripts must be
 * served as JavaScript, or browsers refuse to run them. */
static const struct { const char *ext; const char *type; } types[] = {
    { ".html", "text/html; charset=utf-8" },
    { ".js", "text/javascript; charset=utf-8" },
    { ".css", "text/css; charset=utf-8" },
    { ".svg", "image/svg+xml" },
    { ".json", "application/json" },
    { ".png", "image/png" },
};

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');

    for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    }
    return "application/octet-stream";
}

int ui_find(const char *path, struct ui_file *out)
{
    const char *name = path[0] ? path : UI_PAGE;

    for (size_t i = 0; i < ui_embedded_count; i++) {
        if (strcmp(ui_embedded[i].name, name) != 0)
            continue;
        out->data = (const char *)ui_embedded[i].data;
        out->len = ui_embedded[i].len;
        out->content_type = content_type(name);
        return 0;
    }
    return -1;
}
