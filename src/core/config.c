/* config: the table of every config key with its type, range and default, the libconfig walk
 * that fills struct config from a file, and the checks that need several keys at once. The
 * keys that are more than one string, integer or bool are read by config_read.c. The contract
 * is in include/core/config.h, the shared inside in include/core/config_read.h. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <libconfig.h>

#include "core/config.h"
#include "core/config_read.h"
#include "core/job.h"

#define LOG_MODULE "config"
/* A job of job.max_delay_s hops down from the largest level at most this often. */
#define MAX_HOPS 100000
/* job.max_delay_s unless the levels allow less: 30 days, the longest delay users ask of a delay
 * queue for reminders and expiries (SQS allows 15 minutes, RabbitMQ's plugin about 49 days). */
#define DEFAULT_MAX_DELAY_S (30LL * 86400)

enum kind { K_STR, K_SECRET, K_SECRET_FILE, K_INT, K_BOOL, K_CUSTOM };

typedef int (*custom_fn)(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);

struct key {
    const char *group, *name;
    enum kind kind;
    size_t offset;            /* into struct config */
    size_t size;              /* K_STR: buffer size */
    int64_t min, max;         /* K_INT: inclusive range; K_STR: min 1 for a required text */
    custom_fn fn;             /* K_CUSTOM */
};

#define STR(g, n, field) { #g, #n, K_STR, offsetof(struct config, field), \
                           sizeof(((struct config *)0)->field), 0, 0, NULL }
/* A text that may not be empty: nothing could work without it. */
#define STR1(g, n, field) { #g, #n, K_STR, offsetof(struct config, field), \
                            sizeof(((struct config *)0)->field), 1, 0, NULL }
/* A secret read from a file (as systemd's LoadCredential= provides); and a secret in clear,
 * with its _file twin. */
#define SECRET_FILE(g, n, field) { #g, #n "_file", K_SECRET_FILE, offsetof(struct config, field), \
                                   sizeof(((struct config *)0)->field), 0, 0, NULL }
#define SECRET(g, n, field) { #g, #n, K_SECRET, offsetof(struct config, field), \
                              sizeof(((struct config *)0)->field), 0, 0, NULL }, \
                            SECRET_FILE(g, n, field)
#define INT(g, n, field, lo, hi) { #g, #n, K_INT, offsetof(struct config, field), 0, lo, hi, NULL }
#define BOOL(g, n, field) { #g, #n, K_BOOL, offsetof(struct config, field), 0, 0, 0, NULL }
#define FN(g, n, f) { #g, #n, K_CUSTOM, 0, 0, 0, 0, f }

static const struct key keys[] = {
    FN(http, listen, config_read_listen),
    INT(http, max_body_bytes, http.max_body_bytes, 64, 64 << 20),
    SECRET(http, auth_token, http.auth_token),
    SECRET(http, read_token, http.read_token),
    SECRET(http, metrics_token, http.metrics_token),
    INT(http, max_connections_per_ip, http.max_connections_per_ip, 1, 100000),
    INT(http, request_timeout_s, http.request_timeout_s, 1, 3600),
    STR(http, tls_cert_file, http.tls_cert_file),
    STR(http, tls_key_file, http.tls_key_file),
    INT(http, threads, http.threads, 1, 64),
    INT(http, workers, http.workers, 1, 256),
    INT(http, max_connections, http.max_connections, 1, 100000),
    INT(http, connection_timeout_s, http.connection_timeout_s, 1, 3600),
    INT(http, max_batch_jobs, http.max_batch_jobs, 1, 100000),
    STR1(redis, host, redis.host),
    INT(redis, port, redis.port, 1, 65535),
    FN(redis, sentinels, config_read_sentinels),
    FN(redis, cluster, config_read_cluster),
    STR(redis, master_name, redis.master_name),
    SECRET(redis, sentinel_password, redis.sentinel_password),
    STR(redis, username, redis.username),
    SECRET(redis, password, redis.password),
    INT(redis, db, redis.db, 0, 1 << 20),
    STR(redis, prefix, redis.prefix),
    INT(redis, timeout_ms, redis.timeout_ms, 10, 600000),
    INT(redis, wait_replicas, redis.wait_replicas, 0, 64),
    INT(redis, wait_timeout_ms, redis.wait_timeout_ms, 1, 600000),
    INT(redis, failover_wait_ms, redis.failover_wait_ms, 0, 600000),
    BOOL(redis, require_noeviction, redis.require_noeviction),
    STR1(kafka, brokers, kafka.brokers),
    STR1(kafka, group_id, kafka.group_id),
    FN(kafka, properties, config_read_props),
    INT(kafka, produce_timeout_ms, kafka.produce_timeout_ms, 100, 600000),
    INT(kafka, replication_factor, kafka.replication_factor, -1, 32),
    SECRET_FILE(kafka, sasl_password, kafka.sasl_password),
    SECRET_FILE(kafka, ssl_key_password, kafka.ssl_key_password),
    STR(delay, topic_format, delay.topic_format),
    FN(delay, levels, config_read_levels),
    INT(delay, partitions, delay.partitions, 1, CONFIG_PARTITIONS_MAX),
    FN(delay, partition_groups, config_read_groups),
    STR(delay, dlq_topic, delay.dlq_topic),
    INT(delay, claim_ttl_ms, delay.claim_ttl_ms, 1000, 600000),
    INT(delay, max_held, delay.max_held, 100, 10000000),
    INT(job, retention_s, job.retention_s, 1, 365LL * 86400),
    INT(job, max_delay_s, job.max_delay_s, 1, 10LL * 365 * 86400),
    INT(job, refused_retry_s, job.refused_retry_s, 0, 7LL * 86400),
    INT(dead, redrive_confirm_over, dead.redrive_confirm_over, 0, 10000),
    FN(log, level, config_read_log_level),
    FN(pull, topics, config_read_pull_topics),
    INT(pull, ttr_s, pull.ttr_s, 1, CONFIG_TTR_MAX_S),
    INT(pull, max_attempts, pull.max_attempts, 0, JOB_POPS_MAX),
    BOOL(pull, also_kafka, pull.also_kafka),
    INT(pull, max_wait_ms, pull.max_wait_ms, 0, 180000),
    FN(callbacks, secret, config_read_cb_secret),
    FN(callbacks, secret_file, config_read_cb_secret_file),
    BOOL(callbacks, allow_private, callbacks.allow_private),
    BOOL(callbacks, raw_urls, callbacks.raw_urls),
    BOOL(callbacks, direct_urls, callbacks.direct_urls),
    FN(callbacks, networks, config_read_cb_networks),
    INT(callbacks, max_redirects, callbacks.max_redirects, 0, CALL_REDIRECTS_MAX),
    BOOL(callbacks, redirect_across_origins, callbacks.redirect_across_origins),
    INT(callbacks, max_response_bytes, callbacks.max_response_bytes, 0, 64 << 20),
    INT(callbacks, timeout_ms, callbacks.limits.timeout_ms, CALL_TIMEOUT_MIN_MS, CALL_TIMEOUT_MAX_MS),
    INT(callbacks, max_concurrency, callbacks.limits.max_concurrency, 1, CALL_CONCURRENCY_MAX),
    INT(callbacks, rate_per_s, callbacks.limits.rate_per_s, 0, CALL_RATE_MAX),
    FN(callbacks, retry, config_read_cb_retry),
    FN(callbacks, endpoints, config_read_cb_endpoints),
    BOOL(compat, go_delayqueue, compat.go_delayqueue),
    BOOL(compat, ouqiang, compat.ouqiang),
    BOOL(compat, changsongl, compat.changsongl),
    FN(compat, networks, config_read_compat_networks),
    INT(compat, ouqiang_max_attempts, compat.ouqiang_max_attempts, 0, JOB_POPS_MAX),
    INT(compat, changsongl_max_attempts, compat.changsongl_max_attempts, 0, JOB_POPS_MAX),
};

static const char *const default_levels[] = {
    "1s", "5s", "10s", "30s", "1m", "5m", "10m", "30m", "1h", "2h", "6h", "12h", "1d",
};

void config_defaults(struct config *cfg)
{
    char err[128];

    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->http.listen, sizeof(cfg->http.listen), "127.0.0.1:9277");
    cfg->http.max_body_bytes = 1048576;
    cfg->http.threads = 2;
    cfg->http.workers = 4;
    cfg->http.max_connections = 1024;
    cfg->http.connection_timeout_s = 30;
    cfg->http.max_batch_jobs = 1000;
    cfg->http.max_connections_per_ip = 256;
    cfg->http.request_timeout_s = 10;
    snprintf(cfg->redis.host, sizeof(cfg->redis.host), "127.0.0.1");
    cfg->redis.port = 6379;
    snprintf(cfg->redis.prefix, sizeof(cfg->redis.prefix), "dq:");
    cfg->redis.timeout_ms = 2000;
    cfg->redis.wait_timeout_ms = 1000;
    cfg->redis.failover_wait_ms = 5000;
    snprintf(cfg->kafka.brokers, sizeof(cfg->kafka.brokers), "127.0.0.1:9092");
    snprintf(cfg->kafka.group_id, sizeof(cfg->kafka.group_id), "delayq");
    cfg->kafka.produce_timeout_ms = 5000;
    cfg->kafka.replication_factor = -1;
    cfg->pull.ttr_s = 60;
    cfg->pull.max_attempts = 10;
    cfg->pull.max_wait_ms = 180000;
    cfg->callbacks.max_response_bytes = 65536;
    cfg->callbacks.limits = (struct config_call_limits){ .timeout_ms = 10000, .max_concurrency = 64 };
    cfg->callbacks.retry = (struct config_call_retry){ .min_backoff_ms = 1000,
                                                       .max_backoff_ms = 600000,
                                                       .max_attempts = 10,
                                                       .max_retry_duration_ms = 86400000 };
    snprintf(cfg->delay.topic_format, sizeof(cfg->delay.topic_format), "delay_topic_%%s");
    levels_init(&cfg->delay.levels, default_levels,
                (int)(sizeof(default_levels) / sizeof(default_levels[0])), cfg->delay.topic_format,
                err, sizeof(err));
    cfg->delay.partitions = 8;
    cfg->delay.ngroups = 1;     /* one group holding every partition */
    snprintf(cfg->delay.dlq_topic, sizeof(cfg->delay.dlq_topic), "delay_topic_dlq");
    cfg->delay.claim_ttl_ms = 10000;
    cfg->callbacks.raw_urls = 1;
    cfg->delay.max_held = 100000;
    cfg->job.retention_s = 86400;
    cfg->dead.redrive_confirm_over = 100;
    cfg->job.max_delay_s = DEFAULT_MAX_DELAY_S;
    cfg->job.refused_retry_s = 60;
    cfg->log.level = LOG_INFO;
}

/* delay.partition_groups (groups, a list of arrays) against delay.partitions: every partition
 * in exactly one group, into cfg->delay.group_of and ngroups. 0, or -1 with why set. */
static int check_groups(struct config *cfg, config_setting_t *groups, char *why, size_t whylen)
{
    int ng = config_setting_length(groups);

    for (int p = 0; p < cfg->delay.partitions; p++)
        cfg->delay.group_of[p] = -1;
    for (int g = 0; g < ng; g++) {
        config_setting_t *grp = config_setting_get_elem(groups, (unsigned)g);
        if (!config_setting_is_aggregate(grp) || config_setting_length(grp) < 1) {
            snprintf(why, whylen, "group %d must be a non-empty array of partition numbers", g);
            return -1;
        }
        for (int i = 0; i < config_setting_length(grp); i++) {
            config_setting_t *e = config_setting_get_elem(grp, (unsigned)i);
            long long p = config_setting_type(e) == CONFIG_TYPE_INT ||
                          config_setting_type(e) == CONFIG_TYPE_INT64
                              ? config_setting_get_int64(e) : -1;
            if (p < 0 || p >= cfg->delay.partitions) {
                snprintf(why, whylen, "group %d: partition numbers must be 0 to %lld", g,
                         (long long)cfg->delay.partitions - 1);
                return -1;
            }
            if (cfg->delay.group_of[p] >= 0) {
                snprintf(why, whylen, "partition %lld is in more than one group", p);
                return -1;
            }
            cfg->delay.group_of[p] = g;
        }
    }
    for (int p = 0; p < cfg->delay.partitions; p++) {
        if (cfg->delay.group_of[p] < 0) {
            snprintf(why, whylen, "partition %d is in no group", p);
            return -1;
        }
    }
    cfg->delay.ngroups = ng;
    return 0;
}

static const struct key *find_key(const char *group, const char *name)
{
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(keys[i].group, group) == 0 && (!name || strcmp(keys[i].name, name) == 0))
            return &keys[i];
    return NULL;
}

static int set_key(const struct key *k, config_setting_t *s, struct config_read *rd, char *why,
                   size_t whylen)
{
    char *base = (char *)rd->cfg + k->offset;
    const char *str;
    long long v;

    switch (k->kind) {
    case K_SECRET_FILE:
        str = config_setting_get_string(s);
        if (!str || !str[0]) {
            snprintf(why, whylen, "must be the path of a file holding the secret");
            return -1;
        }
        return config_read_secret(str, base, k->size, why, whylen);
    case K_SECRET:
        str = config_setting_get_string(s);
        if (str && !str[0])
            return 0;   /* empty is none: it leaves a secret from its _file twin */
        if (str && !rd->clear_secret[0]) {
            snprintf(rd->clear_secret, sizeof(rd->clear_secret), "%s.%s", k->group, k->name);
            snprintf(rd->clear_secret_fix, sizeof(rd->clear_secret_fix), "%s.%s_file", k->group,
                     k->name);
        }
        /* fall through */
    case K_STR:
        str = config_setting_get_string(s);
        if (!str || strlen(str) >= k->size) {
            snprintf(why, whylen, "must be a string of at most %zu bytes", k->size - 1);
            return -1;
        }
        if (strlen(str) < (size_t)k->min) {
            snprintf(why, whylen, "must not be empty");
            return -1;
        }
        memcpy(base, str, strlen(str) + 1);
        return 0;
    case K_INT:
        if (config_setting_type(s) != CONFIG_TYPE_INT && config_setting_type(s) != CONFIG_TYPE_INT64) {
            snprintf(why, whylen, "must be an integer");
            return -1;
        }
        v = config_setting_get_int64(s);
        if (v < k->min || v > k->max) {
            snprintf(why, whylen, "must be from %lld to %lld", (long long)k->min, (long long)k->max);
            return -1;
        }
        *(int64_t *)(void *)base = v;
        return 0;
    case K_BOOL:
        if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
            snprintf(why, whylen, "must be true or false");
            return -1;
        }
        *(int *)(void *)base = config_setting_get_bool(s);
        return 0;
    case K_CUSTOM:
        return k->fn(s, rd, why, whylen);
    }
    return -1;
}

static int walk(config_t *lc, struct config_read *rd, const char *src, char *err, size_t errlen)
{
    config_setting_t *root = config_root_setting(lc);
    char why[256];

    for (int i = 0; i < config_setting_length(root); i++) {
        config_setting_t *grp = config_setting_get_elem(root, (unsigned)i);
        const char *gname = config_setting_name(grp);
        if (!find_key(gname, NULL) || !config_setting_is_group(grp)) {
            snprintf(err, errlen, "%s:%d: %s: unknown section (expected http, redis, kafka, delay, job, dead, log, pull, callbacks, compat)",
                     src, config_setting_source_line(grp), gname);
            return -1;
        }
        for (int j = 0; j < config_setting_length(grp); j++) {
            config_setting_t *s = config_setting_get_elem(grp, (unsigned)j);
            const struct key *k = find_key(gname, config_setting_name(s));
            if (!k) {
                snprintf(err, errlen, "%s:%d: %s.%s: unknown key", src,
                         config_setting_source_line(s), gname, config_setting_name(s));
                return -1;
            }
            if (set_key(k, s, rd, why, sizeof(why)) < 0) {
                snprintf(err, errlen, "%s:%d: %s.%s: %s", src, config_setting_source_line(s), gname,
                         k->name, why);
                return -1;
            }
        }
    }
    return 0;
}

/* job.max_delay_s when the file leaves it out: 30 days, or less when the largest level is so short
 * that a job would hop down from it more than MAX_HOPS times. */
static int64_t default_max_delay_s(const struct levels *lv)
{
    int64_t largest_s = lv->ms[lv->n - 1] / 1000;

    /* compared before multiplying: a (silly) huge level must not overflow */
    return largest_s > DEFAULT_MAX_DELAY_S / MAX_HOPS ? DEFAULT_MAX_DELAY_S : MAX_HOPS * largest_s;
}

static int line_of(config_t *lc, const char *path)
{
    config_setting_t *s = config_lookup(lc, path);
    return s ? config_setting_source_line(s) : 0;
}

/* Checks that need several keys at once. */
/* Where Redis is: one server (host, port), the master that Sentinels name, or a Redis Cluster
 * (its seed nodes); exactly one of them. */
static int check_redis_mode(config_t *lc, const struct config *cfg, const char *src, char *err,
                            size_t errlen)
{
    const char *server = config_lookup(lc, "redis.host") ? "redis.host"
                       : config_lookup(lc, "redis.port") ? "redis.port" : NULL;
    const char *mode = cfg->redis.nsentinels ? "redis.sentinels" : cfg->redis.ncluster ? "redis.cluster" : NULL;
    const char *mixed = cfg->redis.nsentinels && cfg->redis.ncluster ? "redis.cluster" : server;

    if (mode && mixed) {
        snprintf(err, errlen, "%s:%d: %s: not with %s (line %d): give one server, the Sentinels "
                 "that name the master, or the nodes of a cluster", src, line_of(lc, mixed), mixed,
                 mode, line_of(lc, mode));
        return -1;
    }
    if (cfg->redis.nsentinels && !cfg->redis.master_name[0]) {
        snprintf(err, errlen, "%s:%d: redis.master_name: required with redis.sentinels", src,
                 line_of(lc, "redis.sentinels"));
        return -1;
    }
    if (!cfg->redis.nsentinels && (cfg->redis.master_name[0] || cfg->redis.sentinel_password[0])) {
        const char *k = cfg->redis.master_name[0] ? "redis.master_name" : "redis.sentinel_password";
        snprintf(err, errlen, "%s:%d: %s: only with redis.sentinels", src, line_of(lc, k), k);
        return -1;
    }
    if (cfg->redis.ncluster && cfg->redis.db != 0) {
        snprintf(err, errlen, "%s:%d: redis.db: a Redis Cluster has only database 0", src,
                 line_of(lc, "redis.db"));
        return -1;
    }
    return 0;
}

/* A secret given both in clear and in a file, or a read token without the token for the rest:
 * 0, or -1 with err set. */
static int check_secrets(config_t *lc, const struct config *cfg, const char *src, char *err,
                         size_t errlen)
{
    char clear[64], file[72];

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (keys[i].kind != K_SECRET)
            continue;
        snprintf(clear, sizeof(clear), "%s.%s", keys[i].group, keys[i].name);
        snprintf(file, sizeof(file), "%s_file", clear);
        if (config_lookup(lc, clear) && config_lookup(lc, file) &&
            config_setting_get_string(config_lookup(lc, clear)) &&
            config_setting_get_string(config_lookup(lc, clear))[0]) {
            snprintf(err, errlen, "%s:%d: %s: give the secret in clear or in %s, not both", src,
                     line_of(lc, clear), clear, file);
            return -1;
        }
    }
    if (!cfg->http.tls_cert_file[0] != !cfg->http.tls_key_file[0]) {
        snprintf(err, errlen, "%s:%d: http.%s: give http.tls_cert_file and http.tls_key_file "
                 "together", src, line_of(lc, cfg->http.tls_cert_file[0] ? "http.tls_cert_file"
                                                                      : "http.tls_key_file"),
                 cfg->http.tls_cert_file[0] ? "tls_cert_file" : "tls_key_file");
        return -1;
    }
    if (cfg->http.read_token[0] && !cfg->http.auth_token[0]) {
        snprintf(err, errlen, "%s:%d: http.read_token: set http.auth_token too (without it every "
                 "path is open, and a token only for reading would guard nothing)", src,
                 line_of(lc, "http.read_token"));
        return -1;
    }
    return 0;
}

/* Whether a "name=value" librdkafka property holds a secret: a password, a client secret, an
 * inline private key. */
static int names_secret(const char *prop)
{
    char name[CONFIG_STR_MAX];
    size_t n = strcspn(prop, "=");

    snprintf(name, sizeof(name), "%.*s", (int)n, prop);
    return strstr(name, "password") || strstr(name, "secret") || strcmp(name, "ssl.key.pem") == 0;
}

/* Adds the Kafka secrets read from files to the librdkafka properties, and notes a password
 * written in clear among them. 0, or -1 with err set. */
static int kafka_secrets(config_t *lc, struct config_read *rd, const char *src, char *err,
                         size_t errlen)
{
    struct config *cfg = rd->cfg;
    static const struct { const char *prop; size_t off; } secret[] = {
        { "sasl.password", offsetof(struct config, kafka.sasl_password) },
        { "ssl.key.password", offsetof(struct config, kafka.ssl_key_password) },
    };
    char prop[2 * CONFIG_STR_MAX];   /* checked to fit CONFIG_STR_MAX below */

    for (int i = 0; i < cfg->kafka.nproperties; i++) {
        const char *p = cfg->kafka.properties[i];
        if (!names_secret(p))
            continue;
        for (size_t k = 0; k < sizeof(secret) / sizeof(secret[0]); k++) {
            const char *v = (const char *)cfg + secret[k].off;
            if (v[0] && strncmp(p, secret[k].prop, strlen(secret[k].prop)) == 0 &&
                p[strlen(secret[k].prop)] == '=') {
                snprintf(err, errlen, "%s:%d: kafka.properties: %s is also read from a file; give "
                         "it one way", src, line_of(lc, "kafka.properties"), secret[k].prop);
                return -1;
            }
        }
        if (!rd->clear_secret[0]) {
            snprintf(rd->clear_secret, sizeof(rd->clear_secret), "kafka.properties %.*s",
                     (int)strcspn(p, "="), p);
            snprintf(rd->clear_secret_fix, sizeof(rd->clear_secret_fix),
                     "kafka.sasl_password_file or kafka.ssl_key_password_file");
        }
    }
    for (size_t k = 0; k < sizeof(secret) / sizeof(secret[0]); k++) {
        const char *v = (const char *)cfg + secret[k].off;
        if (!v[0])
            continue;
        if (cfg->kafka.nproperties >= CONFIG_PROPS_MAX ||
            strlen(secret[k].prop) + 1 + strlen(v) >= CONFIG_STR_MAX) {
            snprintf(err, errlen, "%s:%d: kafka.properties: no room for %s from its file", src,
                     line_of(lc, "kafka.properties"), secret[k].prop);
            return -1;
        }
        snprintf(prop, sizeof(prop), "%s=%s", secret[k].prop, v);
        memcpy(cfg->kafka.properties[cfg->kafka.nproperties++], prop, CONFIG_STR_MAX);
    }
    return 0;
}

/* A file holding a secret in clear must not be readable by anyone but its owner: 0, or -1 with
 * err set. */
static int check_private(const struct config_read *rd, const char *path, char *err,
                         size_t errlen)
{
    struct stat st;

    if (!rd->clear_secret[0] || stat(path, &st) < 0 || !(st.st_mode & S_IROTH))
        return 0;
    snprintf(err, errlen, "%s: holds a secret in clear (%s) but anyone may read it (mode %04o): "
             "give the secret in a file of its own (%s), or take the file's read right from "
             "others (chmod o-r; the service's user or group must still read it)", path,
             rd->clear_secret, (unsigned)(st.st_mode & 07777), rd->clear_secret_fix);
    return -1;
}

static int finish(config_t *lc, struct config_read *rd, const char *src, char *err, size_t errlen)
{
    struct config *cfg = rd->cfg;
    char why[256];

    if (check_secrets(lc, cfg, src, err, errlen) < 0 || kafka_secrets(lc, rd, src, err, errlen) < 0)
        return -1;

    if (check_redis_mode(lc, cfg, src, err, errlen) < 0)
        return -1;
    if (strpbrk(cfg->redis.prefix, "{}")) {
        snprintf(err, errlen, "%s:%d: redis.prefix: must not hold \"{\" or \"}\": Redis Cluster would "
                 "hash every key by what they enclose, and put all jobs in one slot", src,
                 line_of(lc, "redis.prefix"));
        return -1;
    }

    if (topic_format_valid(cfg->delay.topic_format, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "%s:%d: delay.topic_format: %s", src, line_of(lc, "delay.topic_format"), why);
        return -1;
    }
    if (rd->nlevel_names < 0) {
        rd->nlevel_names = (int)(sizeof(default_levels) / sizeof(default_levels[0]));
        memcpy(rd->level_names, default_levels, sizeof(default_levels));
    }
    if (levels_init(&cfg->delay.levels, rd->level_names, rd->nlevel_names,
                    cfg->delay.topic_format, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "%s:%d: delay.levels: %s", src, line_of(lc, "delay.levels"), why);
        return -1;
    }
    if (rd->groups) {
        if (check_groups(cfg, rd->groups, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "%s:%d: delay.partition_groups: %s", src,
                     config_setting_source_line(rd->groups), why);
            return -1;
        }
    } else {
        cfg->delay.ngroups = 1;
        for (int p = 0; p < cfg->delay.partitions; p++)
            cfg->delay.group_of[p] = 0;
    }
    if (topic_name_valid(cfg->delay.dlq_topic, why, sizeof(why)) < 0 ||
        levels_find_topic(&cfg->delay.levels, cfg->delay.dlq_topic) >= 0) {
        snprintf(err, errlen, "%s:%d: delay.dlq_topic: must be a valid topic name and no delay topic",
                 src, line_of(lc, "delay.dlq_topic"));
        return -1;
    }
    if (!line_of(lc, "job.max_delay_s"))
        cfg->job.max_delay_s = default_max_delay_s(&cfg->delay.levels);
    if (cfg->job.max_delay_s * 1000 / cfg->delay.levels.ms[cfg->delay.levels.n - 1] > MAX_HOPS) {
        snprintf(err, errlen, "%s:%d: job.max_delay_s: more than %d times the largest level "
                 "(a job would hop that often); add a larger level", src,
                 line_of(lc, "job.max_delay_s") ? line_of(lc, "job.max_delay_s") : line_of(lc, "delay.levels"),
                 MAX_HOPS);
        return -1;
    }
    return 0;
}

static int load(struct config *cfg, const char *path, const char *text, char *err, size_t errlen)
{
    const char *src = path ? path : "config";
    struct config_read rd = { .cfg = cfg, .nlevel_names = -1 };
    config_t lc;
    int ok, rc = -1;

    config_init(&lc);
    ok = path ? config_read_file(&lc, path) : config_read_string(&lc, text);
    if (ok != CONFIG_TRUE) {
        if (config_error_type(&lc) == CONFIG_ERR_FILE_IO)
            snprintf(err, errlen, "%s: cannot read the file", src);
        else
            snprintf(err, errlen, "%s:%d: %s", src, config_error_line(&lc), config_error_text(&lc));
        goto out;
    }
    if (walk(&lc, &rd, src, err, errlen) == 0 && finish(&lc, &rd, src, err, errlen) == 0 &&
        (!path || check_private(&rd, path, err, errlen) == 0))
        rc = 0;
out:
    config_destroy(&lc);
    return rc;
}

int config_load_file(struct config *cfg, const char *path, char *err, size_t errlen)
{
    return load(cfg, path, NULL, err, errlen);
}

int config_load_string(struct config *cfg, const char *text, char *err, size_t errlen)
{
    return load(cfg, NULL, text, err, errlen);
}
