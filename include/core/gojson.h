/* gojson: JSON text as Go's encoding/json writes it (json.Marshal), for the answers of the
 * compatibility routes, whose clients may compare them with a Go server's byte for byte:
 * compact; <, > and & as \u003c, \u003e and \u0026, and U+2028 and U+2029 escaped (Go's
 * HTML-safe default); control characters as \b, \f, \n, \r, \t or \u00xx in lower-case hex;
 * other characters as they are (UTF-8); an object's members in their order (a Go struct's
 * fields) or sorted by name (a Go map's). Pure logic. */
#ifndef DQ_GOJSON_H
#define DQ_GOJSON_H

#include <jansson.h>

/* The text of v (malloc'd, NUL-terminated), members sorted by name when sort_keys is 1 (at
 * every depth); NULL when out of memory. */
char *gojson_dumps(const json_t *v, int sort_keys);

#endif
