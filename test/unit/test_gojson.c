#include <stdlib.h>

#include "core/gojson.h"
#include "unit.h"

/* v's gojson text, checked against want; takes v. */
static int dumps_as(json_t *v, int sort, const char *want)
{
    char *got = gojson_dumps(v, sort);
    int same = got && strcmp(got, want) == 0;

    if (!same)
        unit_fail(__FILE__, __LINE__, "gojson: \"%s\" != \"%s\"", got ? got : "(null)", want);
    free(got);
    json_decref(v);
    return same;
}

static void escapes_as_go_marshal_does(void)
{
    /* Go: json.Marshal("<a href=\"x\">&</a>\n\t\x01\u2028é/") */
    CHECK(dumps_as(json_string("<a href=\"x\">&</a>\n\t\x01\xe2\x80\xa8\xc3\xa9/\\\b\f\r\x1f"), 0,
                   "\"\\u003ca href=\\\"x\\\"\\u003e\\u0026\\u003c/a\\u003e\\n\\t\\u0001\\u2028\xc3\xa9/"
                   "\\\\\\b\\f\\r\\u001f\""));
    CHECK(dumps_as(json_string("\xe2\x80\xa9 \xe2\x80\xa7"), 0, "\"\\u2029 \xe2\x80\xa7\""));
}

static void keeps_member_order_or_sorts_like_a_go_map(void)
{
    CHECK(dumps_as(json_pack("{s:i, s:s, s:n}", "code", 0, "message", "ok", "data"), 0,
                   "{\"code\":0,\"message\":\"ok\",\"data\":null}"));
    CHECK(dumps_as(json_pack("{s:b, s:s, s:{s:s, s:I, s:s}}", "success", 1, "message", "ok", "data",
                             "topic", "t", "ttr", (json_int_t)30, "body", "b"), 1,
                   "{\"data\":{\"body\":\"b\",\"topic\":\"t\",\"ttr\":30},\"message\":\"ok\",\"success\":true}"));
    CHECK(dumps_as(json_pack("[i, b, s]", -5, 0, ""), 0, "[-5,false,\"\"]"));
}

void unit_gojson(void)
{
    RUN(escapes_as_go_marshal_does);
    RUN(keeps_member_order_or_sorts_like_a_go_map);
}
