/* ui: the operations console's files (ui/ of the source tree), compiled into the binary so
 * that delayqd serves the console at /delay-queue/ui/ with nothing to install beside it; and
 * the API's description (docs/openapi.yaml as JSON), embedded with them. */
#ifndef DQ_UI_H
#define DQ_UI_H

#include <stddef.h>

#define UI_PREFIX "/delay-queue/ui/"   /* where delayqd serves the console */
#define UI_OPENAPI "openapi.json"       /* the embedded file that describes the API */

/* One file of the console. The bytes are static: valid for the life of the process, never
 * freed. */
struct ui_file {
    const char *data;
    size_t len;                 /* bytes */
    const char *content_type;   /* the Content-Type header's value */
};

/* The console file at path below /delay-queue/ui/ ("" or "index.html" is the page), without
 * a query string: 0 with *out set, or -1 when there is none. Paths are matched whole, so
 * nothing outside the embedded files can be named. */
int ui_find(const char *path, struct ui_file *out);

/* The embedded files, in $(BUILD)/ui_files.c, written by scripts/embed-ui.sh from ui/ and
 * $(BUILD)/openapi.json. */
struct ui_embedded {
    const char *name;           /* the file's name, e.g. "console.js" */
    const unsigned char *data;
    size_t len;                 /* bytes */
};

extern const struct ui_embedded ui_embedded[];
extern const size_t ui_embedded_count;

#endif
