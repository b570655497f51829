/* base64: bytes as base64 text (RFC 4648, with padding) and back, for bodies that are not UTF-8
 * text where JSON must carry them. GnuTLS's codec; pure logic, no network. */
#ifndef DQ_BASE64_H
#define DQ_BASE64_H

#include <stddef.h>

/* The base64 of len bytes at data, NUL-terminated, *outlen its length: malloc'd (caller frees),
 * or NULL when out of memory. */
char *base64_encode(const void *data, size_t len, size_t *outlen);

/* The bytes of len characters of base64 text, NUL-terminated after them (so that text stays a
 * C string), *outlen their count: malloc'd (caller frees), or NULL when text is not base64 or
 * memory ran out. */
char *base64_decode(const char *text, size_t len, size_t *outlen);

#endif
