#include <stdint.h>

#include "http/addrs.h"
#include "unit.h"

/* Each address is held to its limit, alone; a closed connection frees its place. */
static void per_address_limit(void)
{
    struct addrs a;
    uint8_t v4[4] = { 127, 0, 0, 1 }, other[4] = { 127, 0, 0, 2 }, v6[16] = { 0 };

    v6[15] = 1;
    CHECK_EQ_INT(addrs_init(&a, 64, 10), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ_INT(addrs_take(&a, v4, 4), 0);
    CHECK_EQ_INT(addrs_take(&a, v4, 4), -1);   /* the 11th */
    CHECK_EQ_INT(addrs_count(&a, v4, 4), 10);
    CHECK_EQ_INT(addrs_take(&a, other, 4), 0);
    CHECK_EQ_INT(addrs_take(&a, v6, 16), 0);
    addrs_give(&a, v4, 4);
    CHECK_EQ_INT(addrs_count(&a, v4, 4), 9);
    CHECK_EQ_INT(addrs_take(&a, v4, 4), 0);
    CHECK_EQ_INT(addrs_take(&a, v4, 17), -1);
    addrs_release(&a);
}

/* Addresses come and go many times over: freed slots are found again, and the table never
 * fills with addresses that hold nothing. */
static void churn(void)
{
    struct addrs a;

    CHECK_EQ_INT(addrs_init(&a, 8, 2), 0);
    for (uint32_t i = 0; i < 100000; i++) {
        uint32_t k = i, j = i + 1;
        CHECK_EQ_INT(addrs_take(&a, &k, 4), 0);
        CHECK_EQ_INT(addrs_take(&a, &j, 4), 0);
        addrs_give(&a, &k, 4);
        addrs_give(&a, &j, 4);
    }
    for (uint32_t i = 0; i < 8; i++)
        CHECK_EQ_INT(addrs_take(&a, &i, 4), 0);
    for (uint32_t i = 0; i < 8; i++)
        CHECK_EQ_INT(addrs_count(&a, &i, 4), 1);
    addrs_release(&a);
}

void unit_addrs(void)
{
    RUN(per_address_limit);
    RUN(churn);
}
