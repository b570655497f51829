/* sign: Standard Webhooks signatures, checked against the scheme's published example (the same
 * one its libraries test with). */
#include <stdio.h>

#include "lib/sign.h"
#include "unit.h"

#define SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define MSG_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define TIMESTAMP 1614265330
#define BODY "{\"test\": 2432232314}"
#define SIGNATURE "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

static void signs_the_published_example(void)
{
    struct sign_key k;
    char err[128], out[2 * (SIGN_VALUE_LEN + 1)];

    CHECK_EQ_INT(sign_key_parse(SECRET, &k, err, sizeof(err)), 0);
    CHECK_EQ_INT(k.len, 24);
    CHECK_EQ_INT(sign_header(&k, 1, MSG_ID, TIMESTAMP, BODY, strlen(BODY), out, sizeof(out)), 0);
    CHECK_STR(out, SIGNATURE);
    CHECK_EQ_INT(sign_key_parse("  MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", &k, err, sizeof(err)), 0);
    CHECK_EQ_INT(sign_header(&k, 1, MSG_ID, TIMESTAMP, BODY, strlen(BODY), out, sizeof(out)), 0);
    CHECK_STR(out, SIGNATURE);   /* the prefix and blanks are optional */
    CHECK_EQ_INT(sign_header(&k, 1, MSG_ID, TIMESTAMP + 1, BODY, strlen(BODY), out, sizeof(out)), 0);
    CHECK(strcmp(out, SIGNATURE) != 0);
}

static void rotation_signs_with_every_key(void)
{
    struct sign_key k[2];
    char err[128], out[2 * (SIGN_VALUE_LEN + 1)];

    CHECK_EQ_INT(sign_key_parse(SECRET, &k[0], err, sizeof(err)), 0);
    CHECK_EQ_INT(sign_key_parse("whsec_" "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &k[1], err, sizeof(err)), 0);
    CHECK_EQ_INT(sign_header(k, 2, MSG_ID, TIMESTAMP, BODY, strlen(BODY), out, sizeof(out)), 0);
    CHECK(strncmp(out, SIGNATURE " v1,", strlen(SIGNATURE) + 4) == 0);
    CHECK_EQ_INT(strlen(out), 2 * SIGN_VALUE_LEN + 1);
    CHECK_EQ_INT(sign_header(k, 2, MSG_ID, TIMESTAMP, BODY, strlen(BODY), out, SIGN_VALUE_LEN), -1);
}

static void bad_secrets_are_named_not_shown(void)
{
    struct sign_key k;
    char err[128];

    CHECK_EQ_INT(sign_key_parse("whsec_", &k, err, sizeof(err)), -1);
    CHECK_EQ_INT(sign_key_parse("whsec_not base64!", &k, err, sizeof(err)), -1);
    CHECK(strstr(err, "base64") != NULL && strstr(err, "not base64!") == NULL);
    CHECK_EQ_INT(sign_key_parse("whsec_c2hvcnQ=", &k, err, sizeof(err)), -1);   /* 5 bytes */
    CHECK(strstr(err, "24") != NULL);
}

void unit_sign(void)
{
    RUN(signs_the_published_example);
    RUN(rotation_signs_with_every_key);
    RUN(bad_secrets_are_named_not_shown);
}
