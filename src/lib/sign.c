/* sign: Standard Webhooks signatures. The contract is in include/lib/sign.h. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include "lib/sign.h"

int sign_key_parse(const char *secret, struct sign_key *k, char *err, size_t errlen)
{
    size_t plen = strlen(SIGN_SECRET_PREFIX), len;
    gnutls_datum_t in, out = { NULL, 0 };
    const char *s = secret;

    while (isspace((unsigned char)*s))
        s++;
    if (strncmp(s, SIGN_SECRET_PREFIX, plen) == 0)
        s += plen;
    len = strlen(s);
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    in = (gnutls_datum_t){ (unsigned char *)(uintptr_t)s, (unsigned)len };
    if (len == 0 || strcspn(s, " \t\r\n") < len || gnutls_base64_decode2(&in, &out) < 0) {
        snprintf(err, errlen, "secret is not %s followed by base64", SIGN_SECRET_PREFIX);
        return -1;
    }
    if (out.size < SIGN_KEY_MIN || out.size > SIGN_KEY_MAX) {
        snprintf(err, errlen, "secret holds %u bytes; a key is %d to %d bytes", out.size,
                 SIGN_KEY_MIN, SIGN_KEY_MAX);
        gnutls_free(out.data);
        return -1;
    }
    memcpy(k->key, out.data, out.size);
    k->len = out.size;
    gnutls_free(out.data);
    return 0;
}

/* "v1," and the base64 of one key's HMAC of the signed bytes, into out. */
static int sign_one(const struct sign_key *k, const void *signed_bytes, size_t len,
                    char out[SIGN_VALUE_LEN + 1])
{
    unsigned char digest[32];
    gnutls_datum_t in = { digest, sizeof(digest) }, b64 = { NULL, 0 };
    int rc = -1;

    if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, k->key, k->len, signed_bytes, len, digest) < 0 ||
        gnutls_base64_encode2(&in, &b64) < 0)
        return -1;
    if (b64.size == SIGN_VALUE_LEN - 3) {
        snprintf(out, SIGN_VALUE_LEN + 1, "v1,%.*s", (int)b64.size, (const char *)b64.data);
        rc = 0;
    }
    gnutls_free(b64.data);
    return rc;
}

int sign_header(const struct sign_key *keys, size_t n, const char *id, int64_t timestamp_s,
                const void *body, size_t len, char *out, size_t outlen)
{
    char prefix[256 + 32], value[SIGN_VALUE_LEN + 1];
    size_t plen, at = 0;
    unsigned char *msg;
    int rc = -1;

    plen = (size_t)snprintf(prefix, sizeof(prefix), "%s.%" PRId64 ".", id, timestamp_s);
    if (n == 0 || n > SIGN_KEYS_MAX || plen >= sizeof(prefix) ||
        outlen < n * (SIGN_VALUE_LEN + 1) || !(msg = malloc(plen + len + 1)))
        return -1;
    memcpy(msg, prefix, plen);
    if (len)
        memcpy(msg + plen, body, len);
    for (size_t i = 0; i < n; i++) {
        if (sign_one(&keys[i], msg, plen + len, value) < 0)
            goto out;
        at += (size_t)snprintf(out + at, outlen - at, "%s%s", i ? " " : "", value);
    }
    rc = 0;
out:
    free(msg);
    return rc;
}
