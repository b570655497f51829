/* fuzz_config: the libconfig file loader (config_defaults, config_load_string).
 *
 * An input is the text of a config file. Invariants checked (abort() on violation):
 *  - an error names something ("config:LINE: ...");
 *  - an accepted config holds every value in its documented range: levels strictly ascending
 *    with valid topic names, every partition 0..partitions-1 in exactly one existing group,
 *    a dlq topic that is no delay topic, strings terminated inside their buffers;
 *  - loading the same text twice gives the same result (the loader keeps static state). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "fuzz.h"

#define MAX_HOPS 100000    /* as in src/core/config.c: max_delay_s over the largest level */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define IN_RANGE(v, lo, hi) ((v) >= (lo) && (v) <= (hi))
#define TERMINATED(buf) (memchr((buf), '\0', sizeof(buf)) != NULL)


static void check_levels(const struct levels *lv, const char *format)
{
    char why[128], topic[TOPIC_NAME_MAX + 1];

    ASSERT(IN_RANGE(lv->n, 1, LEVELS_MAX));
    for (int i = 0; i < lv->n; i++) {
        ASSERT(lv->ms[i] > 0);
        ASSERT(i == 0 || lv->ms[i] > lv->ms[i - 1]);
        ASSERT(TERMINATED(lv->name[i]) && TERMINATED(lv->topic[i]));
        ASSERT(topic_name_valid(lv->topic[i], why, sizeof(why)) == 0);
        ASSERT(topic_format_expand(format, lv->name[i], topic, sizeof(topic)) == 0);
        ASSERT(strcmp(topic, lv->topic[i]) == 0);
        ASSERT(levels_find_topic(lv, lv->topic[i]) == i);
    }
}

static void check_groups(const struct config *c)
{
    int used[CONFIG_GROUPS_MAX] = { 0 };

    ASSERT(IN_RANGE(c->delay.partitions, 1, CONFIG_PARTITIONS_MAX));
    ASSERT(IN_RANGE(c->delay.ngroups, 1, CONFIG_GROUPS_MAX));
    for (int p = 0; p < c->delay.partitions; p++) {
        ASSERT(IN_RANGE(c->delay.group_of[p], 0, c->delay.ngroups - 1));
        used[c->delay.group_of[p]] = 1;
    }
    for (int g = 0; g < c->delay.ngroups; g++)
        ASSERT(used[g]);
}

static void check_strings(const struct config *c)
{
    ASSERT(TERMINATED(c->http.listen) && TERMINATED(c->http.auth_token));
    ASSERT(TERMINATED(c->redis.host) && TERMINATED(c->redis.password));
    ASSERT(TERMINATED(c->redis.prefix));
    ASSERT(TERMINATED(c->kafka.brokers) && TERMINATED(c->kafka.group_id));
    ASSERT(TERMINATED(c->delay.topic_format) && TERMINATED(c->delay.dlq_topic));
    ASSERT(IN_RANGE(c->kafka.nproperties, 0, CONFIG_PROPS_MAX));
    for (int i = 0; i < c->kafka.nproperties; i++) {
        ASSERT(TERMINATED(c->kafka.properties[i]));
        ASSERT(strchr(c->kafka.properties[i], '=') > c->kafka.properties[i]);
    }
}

static void check_ints(const struct config *c)
{
    ASSERT(IN_RANGE(c->http.max_body_bytes, 64, 64 << 20));
    ASSERT(IN_RANGE(c->http.threads, 1, 64));
    ASSERT(IN_RANGE(c->http.max_connections, 1, 100000));
    ASSERT(IN_RANGE(c->http.connection_timeout_s, 1, 3600));
    ASSERT(IN_RANGE(c->redis.port, 1, 65535));
    ASSERT(IN_RANGE(c->redis.db, 0, 1 << 20));
    ASSERT(IN_RANGE(c->redis.timeout_ms, 10, 600000));
    ASSERT(IN_RANGE(c->kafka.produce_timeout_ms, 100, 600000));
    ASSERT(IN_RANGE(c->kafka.replication_factor, -1, 32));
    ASSERT(IN_RANGE(c->delay.claim_ttl_ms, 1000, 600000));
    ASSERT(IN_RANGE(c->delay.max_held, 100, 10000000));
    ASSERT(IN_RANGE(c->job.retention_s, 1, 365LL * 86400));
    ASSERT(IN_RANGE(c->job.max_delay_s, 1, 10LL * 365 * 86400));
    ASSERT(IN_RANGE(c->job.refused_retry_s, 0, 7LL * 86400));
    ASSERT(IN_RANGE((int)c->log.level, LOG_DEBUG, LOG_ERROR));
}

static void check_config(const struct config *c)
{
    const struct levels *lv = &c->delay.levels;
    char why[128];

    check_strings(c);
    check_ints(c);
    ASSERT(topic_format_valid(c->delay.topic_format, why, sizeof(why)) == 0);
    check_levels(lv, c->delay.topic_format);
    check_groups(c);
    ASSERT(topic_name_valid(c->delay.dlq_topic, why, sizeof(why)) == 0);
    ASSERT(levels_find_topic(lv, c->delay.dlq_topic) < 0);
    ASSERT(c->job.max_delay_s * 1000 / lv->ms[lv->n - 1] <= MAX_HOPS);
}

/* Loads text over the defaults into c; returns what config_load_string returned. */
static int load(const char *text, struct config *c, char *err, size_t errlen)
{
    int rc;

    config_defaults(c);
    err[0] = '\0';
    rc = config_load_string(c, text, err, errlen);
    ASSERT(rc == 0 || rc == -1);
    ASSERT(rc == 0 || (err[0] != '\0' && strncmp(err, "config:", 7) == 0));
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct config a, b;    /* about 60 KB each: not on the stack */
    char *text = malloc(size + 1), err_a[512], err_b[512];
    int rc;

    ASSERT(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    rc = load(text, &a, err_a, sizeof(err_a));
    if (rc == 0)
        check_config(&a);
    ASSERT(load(text, &b, err_b, sizeof(err_b)) == rc);
    ASSERT(strcmp(err_a, err_b) == 0);
    ASSERT(rc != 0 || memcmp(&a, &b, sizeof(a)) == 0);
    free(text);
    return 0;
}
