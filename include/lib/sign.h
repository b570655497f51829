/* sign: the Standard Webhooks signature of a callback request, so that a receiver verifies it
 * with the scheme's own libraries: webhook-signature is "v1," and the base64 of
 * HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>"), several separated by spaces
 * while keys rotate. A secret is "whsec_" and the base64 of its key. Pure logic: GnuTLS's HMAC
 * and base64 only, no network. */
#ifndef DQ_SIGN_H
#define DQ_SIGN_H

#include <stddef.h>
#include <stdint.h>

#define SIGN_SECRET_PREFIX "whsec_"
#define SIGN_KEY_MIN 24      /* the scheme's bounds on a key: 24 to 64 random bytes are usual, */
#define SIGN_KEY_MAX 512     /* 512 its most */
#define SIGN_VALUE_LEN 47    /* "v1," and 44 characters of base64 (32 bytes) */
#define SIGN_KEYS_MAX 4      /* keys one request is signed with (a rotation needs two) */

struct sign_key {
    unsigned char key[SIGN_KEY_MAX];
    size_t len;
};

/* Reads a secret ("whsec_" and base64, or the base64 alone; blanks around it ignored) into k.
 * 0, or -1 with what is wrong in err (never the secret itself). */
int sign_key_parse(const char *secret, struct sign_key *k, char *err, size_t errlen);

/* The webhook-signature header of a request with id, timestamp (Unix seconds) and body,
 * signed with each of n keys (1 <= n <= SIGN_KEYS_MAX), into out (NUL-terminated; at least
 * n * (SIGN_VALUE_LEN + 1) bytes). 0, or -1 when out is too small or GnuTLS failed. */
int sign_header(const struct sign_key *keys, size_t n, const char *id, int64_t timestamp_s,
                const void *body, size_t len, char *out, size_t outlen);

#endif
