/* fnv: FNV-1a's published values; a schedule's shard is kept in Redis keys by it. */
#include "lib/fnv.h"
#include "unit.h"

static void fnv1a_gives_the_published_values(void)
{
    CHECK_EQ_INT(fnv1a(FNV1A_BASIS, ""), 0x811c9dc5u);
    CHECK_EQ_INT(fnv1a(FNV1A_BASIS, "a"), 0xe40c292cu);
    CHECK_EQ_INT(fnv1a(FNV1A_BASIS, "foobar"), 0xbf9cf968u);
    CHECK_EQ_INT(fnv1a(fnv1a(FNV1A_BASIS, "foo"), "bar"), 0xbf9cf968u);   /* goes on */
}

void unit_fnv(void)
{
    RUN(fnv1a_gives_the_published_values);
}
