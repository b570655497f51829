/* base64: GnuTLS's codec, in malloc'd buffers. The contract is in include/lib/base64.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/gnutls.h>

#include "lib/base64.h"

/* A copy of d (gnutls_malloc'd, freed here) in a malloc'd buffer with a NUL after it. */
static char *copy_out(gnutls_datum_t *d, size_t *outlen)
{
    char *out = malloc((size_t)d->size + 1);

    if (out) {
        if (d->size)
            memcpy(out, d->data, d->size);
        out[d->size] = '\0';
        *outlen = d->size;
    }
    gnutls_free(d->data);
    return out;
}

char *base64_encode(const void *data, size_t len, size_t *outlen)
{
    gnutls_datum_t in = { (unsigned char *)(uintptr_t)data, (unsigned)len }, out = { NULL, 0 };

    if (len > UINT32_MAX / 2 || (len && gnutls_base64_encode2(&in, &out) < 0))
        return NULL;
    return copy_out(&out, outlen);
}

char *base64_decode(const char *text, size_t len, size_t *outlen)
{
    gnutls_datum_t in = { (unsigned char *)(uintptr_t)text, (unsigned)len }, out = { NULL, 0 };

    if (len > UINT32_MAX || (len && gnutls_base64_decode2(&in, &out) < 0))
        return NULL;
    return copy_out(&out, outlen);
}
