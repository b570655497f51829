#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/config.h"
#include "unit.h"

/* A config with every section, in the layout of conf/delayq.conf and the README. */
static const char design_sample[] =
    "http:  { listen = \"127.0.0.1:9277\"; max_body_bytes = 1048576; auth_token = \"\"; };\n"
    "redis: { host = \"127.0.0.1\"; port = 6379; password = \"\"; db = 0; prefix = \"dq:\"; "
    "timeout_ms = 2000; };\n"
    "kafka: { brokers = \"127.0.0.1:9092\"; group_id = \"delayq\";\n"
    "         properties = ( \"security.protocol=plaintext\" ); };   "
    "# any librdkafka property, passed through\n"
    "delay: { topic_format = \"delay_topic_%s\";\n"
    "         levels = [ \"1s\", \"5s\", \"10s\", \"30s\", \"1m\", \"5m\", \"10m\", \"30m\", \"1h\", "
    "\"2h\", \"6h\", \"12h\", \"1d\" ];\n"
    "         partitions = 8; partition_groups = ( [0, 1, 2, 3, 4, 5, 6, 7] );\n"
    "         dlq_topic = \"delay_topic_dlq\"; claim_ttl_ms = 10000; };\n"
    "job:   { retention_s = 86400; max_delay_s = 2592000; };\n"
    "log:   { level = \"info\"; };\n";

/* One config for the whole file: struct config is large. */
static struct config cfg;

static int load(const char *text, char *err, size_t errlen)
{
    config_defaults(&cfg);
    err[0] = '\0';
    return config_load_string(&cfg, text, err, errlen);
}

static int load_ok(const char *text)
{
    char err[512];

    if (load(text, err, sizeof(err)) == 0)
        return 1;
    fprintf(stderr, "config refused: %s\n", err);
    return 0;
}

/* Loading text must fail with an error containing both want1 and want2. */
static int load_fails(const char *text, const char *want1, const char *want2)
{
    char err[512];

    if (load(text, err, sizeof(err)) == -1 && strstr(err, want1) && strstr(err, want2))
        return 1;
    fprintf(stderr, "config error \"%s\", wanted \"%s\" and \"%s\"\n", err, want1, want2);
    return 0;
}

static void defaults_servers(void)
{
    config_defaults(&cfg);
    CHECK_STR(cfg.http.listen, "127.0.0.1:9277");
    CHECK_EQ_INT(cfg.http.max_body_bytes, 1048576);
    CHECK_STR(cfg.http.auth_token, "");
    CHECK_STR(cfg.redis.host, "127.0.0.1");
    CHECK_EQ_INT(cfg.redis.port, 6379);
    CHECK_EQ_INT(cfg.redis.db, 0);
    CHECK_STR(cfg.redis.prefix, "dq:");
    CHECK_EQ_INT(cfg.redis.timeout_ms, 2000);
    CHECK_STR(cfg.kafka.brokers, "127.0.0.1:9092");
    CHECK_STR(cfg.kafka.group_id, "delayq");
    CHECK_EQ_INT(cfg.log.level, LOG_INFO);
}

static void defaults_delay(void)
{
    config_defaults(&cfg);
    CHECK_STR(cfg.delay.topic_format, "delay_topic_%s");
    CHECK_EQ_INT(cfg.delay.levels.n, 13);
    CHECK_EQ_INT(cfg.delay.levels.ms[0], 1000);
    CHECK_EQ_INT(cfg.delay.levels.ms[12], 86400000);
    CHECK_STR(cfg.delay.levels.name[4], "1m");
    CHECK_STR(cfg.delay.levels.topic[0], "delay_topic_1s");
    CHECK_STR(cfg.delay.levels.topic[12], "delay_topic_1d");
    CHECK_EQ_INT(cfg.delay.partitions, 8);
    CHECK_EQ_INT(cfg.delay.ngroups, 1);
    for (int p = 0; p < 8; p++)
        CHECK_EQ_INT(cfg.delay.group_of[p], 0);
    CHECK_STR(cfg.delay.dlq_topic, "delay_topic_dlq");
    CHECK_EQ_INT(cfg.delay.claim_ttl_ms, 10000);
    CHECK_EQ_INT(cfg.job.retention_s, 86400);
    CHECK_EQ_INT(cfg.job.max_delay_s, 2592000);
}

static void empty_text_keeps_defaults(void)
{
    CHECK(load_ok(""));
    CHECK_EQ_INT(cfg.delay.levels.n, 13);
    CHECK_EQ_INT(cfg.redis.port, 6379);
    CHECK_EQ_INT(cfg.delay.ngroups, 1);
}

static void design_sample_loads(void)
{
    CHECK(load_ok(design_sample));
    CHECK_STR(cfg.http.listen, "127.0.0.1:9277");
    CHECK_EQ_INT(cfg.kafka.nproperties, 1);
    CHECK_STR(cfg.kafka.properties[0], "security.protocol=plaintext");
    CHECK_EQ_INT(cfg.delay.levels.n, 13);
    CHECK_STR(cfg.delay.levels.topic[1], "delay_topic_5s");
    CHECK_EQ_INT(cfg.delay.partitions, 8);
    CHECK_EQ_INT(cfg.delay.ngroups, 1);
    CHECK_EQ_INT(cfg.delay.group_of[7], 0);
    CHECK_EQ_INT(cfg.job.max_delay_s, 2592000);
}

static void few_keys_leave_others_default(void)
{
    CHECK(load_ok("redis: { port = 6380; };\nlog: { level = \"debug\"; };\n"));
    CHECK_EQ_INT(cfg.redis.port, 6380);
    CHECK_EQ_INT(cfg.log.level, LOG_DEBUG);
    CHECK_STR(cfg.redis.host, "127.0.0.1");
    CHECK_STR(cfg.redis.prefix, "dq:");
    CHECK_STR(cfg.http.listen, "127.0.0.1:9277");
    CHECK_EQ_INT(cfg.delay.levels.n, 13);
    CHECK_EQ_INT(cfg.delay.partitions, 8);
    CHECK_STR(cfg.delay.dlq_topic, "delay_topic_dlq");
}

static void custom_levels_and_format(void)
{
    CHECK(load_ok("delay: { topic_format = \"dq.%s\"; levels = [ \"500ms\", \"1m\" ]; };"));
    CHECK_EQ_INT(cfg.delay.levels.n, 2);
    CHECK_EQ_INT(cfg.delay.levels.ms[0], 500);
    CHECK_STR(cfg.delay.levels.topic[1], "dq.1m");
}

static void format_alone_renames_default_levels(void)
{
    CHECK(load_ok("delay: { topic_format = \"dq_%s\"; };"));
    CHECK_EQ_INT(cfg.delay.levels.n, 13);
    CHECK_STR(cfg.delay.levels.topic[0], "dq_1s");
}

static void unknown_section(void)
{
    CHECK(load_fails("nope: { a = 1; };", "config:1:", "nope"));
    CHECK(load_fails("\n\nhttp = 5;", "config:3:", "http"));
}

static void unknown_key_names_key_and_line(void)
{
    CHECK(load_fails("http: {\n  listen = \"127.0.0.1:1\";\n  lisen = \"x\";\n};\n",
                     "config:3: http.lisen", "unknown key"));
    CHECK(load_fails("redis: { port = 1; };\ndelay: { level = [ \"1s\" ]; };",
                     "config:2:", "delay.level"));
}

static void wrong_types(void)
{
    CHECK(load_fails("redis: { port = \"6379\"; };", "config:1: redis.port", "integer"));
    CHECK(load_fails("redis: { port = 6379.0; };", "redis.port", "integer"));
    CHECK(load_fails("http: { listen = 9277; };", "config:1: http.listen", "string"));
    CHECK(load_fails("job: { retention_s = true; };", "job.retention_s", "integer"));
    CHECK(load_fails("compat: { go_delayqueue = 1; };", "compat.go_delayqueue", "true or false"));
}

/* Secrets: from a file (its trailing newline dropped), not both ways, no read token alone. */
static void secrets(void)
{
    char path[] = "/tmp/dq-unit-secretXXXXXX", text[256], err[256];
    int fd = mkstemp(path);

    CHECK(fd >= 0 && write(fd, "t0ken\n", 6) == 6);
    close(fd);
    snprintf(text, sizeof(text), "http: { auth_token_file = \"%s\"; read_token = \"r\"; };", path);
    config_defaults(&cfg);
    CHECK(config_load_string(&cfg, text, err, sizeof(err)) == 0);
    CHECK_STR(cfg.http.auth_token, "t0ken");
    CHECK_STR(cfg.http.read_token, "r");
    snprintf(text, sizeof(text), "kafka: { sasl_password_file = \"%s\"; };", path);
    config_defaults(&cfg);
    CHECK(config_load_string(&cfg, text, err, sizeof(err)) == 0);
    CHECK(cfg.kafka.nproperties == 1 && strcmp(cfg.kafka.properties[0], "sasl.password=t0ken") == 0);
    snprintf(text, sizeof(text), "http: { auth_token = \"a\"; auth_token_file = \"%s\"; };", path);
    CHECK(load_fails(text, "http.auth_token", "not both"));
    CHECK(load_fails("http: { read_token = \"r\"; };", "http.read_token", "auth_token"));
    CHECK(load_fails("redis: { password_file = \"/nonexistent/pw\"; };", "redis.password_file",
                     "cannot read /nonexistent/pw"));
    unlink(path);
}

static void compat_and_batch_keys(void)
{
    char err[256];

    config_defaults(&cfg);
    CHECK(cfg.compat.go_delayqueue == 0 && cfg.http.max_batch_jobs == 1000);
    CHECK(cfg.http.max_connections_per_ip == 256 && cfg.http.request_timeout_s == 10);
    CHECK(config_load_string(&cfg, "compat: { go_delayqueue = true; };\n"
                             "http: { max_batch_jobs = 10; };", err, sizeof(err)) == 0);
    CHECK(cfg.compat.go_delayqueue == 1 && cfg.http.max_batch_jobs == 10);
    CHECK(load_fails("http: { max_batch_jobs = 0; };", "http.max_batch_jobs", "from 1"));
}

static void out_of_range(void)
{
    CHECK(load_fails("redis: { port = 70000; };", "redis.port", "65535"));
    CHECK(load_fails("redis: { port = 0; };", "redis.port", "from 1"));
    CHECK(load_fails("delay: { partitions = 0; };", "delay.partitions", "from"));
    CHECK(load_fails("http: { threads = -1; };", "http.threads", "from"));
}

/* A port out of range once bound another port than the one logged, or a random one. */
static void listen_checked(void)
{
    CHECK(load_fails("http: { listen = \"127.0.0.1:99999\"; };", "http.listen", "1 to 65535"));
    CHECK(load_fails("http: { listen = \"127.0.0.1:65536\"; };", "http.listen", "1 to 65535"));
    CHECK(load_fails("http: { listen = \"127.0.0.1:0\"; };", "http.listen", "1 to 65535"));
    CHECK(load_fails("http: { listen = \"127.0.0.1:00000000000000000000080x\"; };", "http.listen",
                     "1 to 65535"));
    CHECK(load_fails("http: { listen = \"127.0.0.1:-1\"; };", "http.listen", "1 to 65535"));
    CHECK(load_fails("http: { listen = \"127.0.0.1:\"; };", "http.listen", "1 to 65535"));
    CHECK(load_fails("http: { listen = \"127.0.0.1\"; };", "http.listen", "host:port"));
    CHECK(load_fails("http: { listen = \":80\"; };", "http.listen", "host:port"));
    CHECK(load_fails("http: { listen = \"::1:80\"; };", "http.listen", "brackets"));
    CHECK(load_fails("http: { listen = \"\"; };", "config:1: http.listen", "host:port"));
    CHECK(load_ok("http: { listen = \"[::1]:9277\"; };"));
    CHECK_STR(cfg.http.listen, "[::1]:9277");
    CHECK(load_ok("http: { listen = \"localhost:65535\"; };"));
    CHECK(load_ok("http: { listen = \"0.0.0.0:1\"; };"));
}

/* An empty group id once crashed start-up; without brokers or a Redis host nothing works. */
static void required_texts(void)
{
    CHECK(load_fails("kafka: { group_id = \"\"; };", "config:1: kafka.group_id", "must not be empty"));
    CHECK(load_fails("kafka: { brokers = \"\"; };", "kafka.brokers", "must not be empty"));
    CHECK(load_fails("redis: { host = \"\"; };", "redis.host", "must not be empty"));
    CHECK(load_ok("redis: { prefix = \"\"; password = \"\"; };"));
}

static void sentinels(void)
{
    CHECK(load_ok("redis: { sentinels = [ \"10.0.0.1:26379\", \"[::1]:26380\" ];\n"
                  "  master_name = \"delayq\"; sentinel_password = \"s\"; username = \"dq\";\n"
                  "  password = \"p\"; wait_replicas = 1; wait_timeout_ms = 500; };"));
    CHECK_EQ_INT(cfg.redis.nsentinels, 2);
    CHECK_STR(cfg.redis.sentinels[1], "[::1]:26380");
    CHECK_STR(cfg.redis.master_name, "delayq");
    CHECK_STR(cfg.redis.username, "dq");
    CHECK_EQ_INT(cfg.redis.wait_replicas, 1);
    CHECK_EQ_INT(cfg.redis.wait_timeout_ms, 500);
    CHECK(load_ok(""));
    CHECK_EQ_INT(cfg.redis.nsentinels, 0);
    CHECK_EQ_INT(cfg.redis.wait_replicas, 0);
    CHECK_EQ_INT(cfg.redis.wait_timeout_ms, 1000);
    CHECK(load_fails("redis: {\n host = \"r\";\n sentinels = [ \"s:1\" ]; master_name = \"m\"; };",
                     "config:2: redis.host: not with redis.sentinels (line 3)", ""));
    CHECK(load_fails("redis: { port = 7000; sentinels = [ \"s:1\" ]; master_name = \"m\"; };",
                     "redis.port: not with redis.sentinels", ""));
    CHECK(load_fails("redis: { sentinels = [ \"s:1\" ]; };", "redis.master_name: required", ""));
    CHECK(load_fails("redis: { master_name = \"m\"; };", "redis.master_name: only with redis.sentinels", ""));
    CHECK(load_fails("redis: {\n port = 7000;\n cluster = [ \"c:1\" ]; };",
                     "config:2: redis.port: not with redis.cluster (line 3)", ""));
    CHECK(load_fails("redis: {\n sentinels = [ \"s:1\" ]; master_name = \"m\";\n cluster = [ \"c:1\" ]; };",
                     "config:3: redis.cluster: not with redis.sentinels (line 2)", ""));
    CHECK(load_fails("redis: { cluster = [ \"c:1\" ];\n db = 2; };", "config:2: redis.db: a Redis Cluster "
                     "has only database 0", ""));
    CHECK(load_fails("redis: { cluster = [ \"c\" ]; };", "redis.cluster: element 0", ""));
    CHECK(load_fails("redis: { cluster = [ ]; };", "redis.cluster: must be a list", ""));
    CHECK(load_ok("redis: { cluster = [ \"10.0.0.1:7000\", \"10.0.0.2:7000\" ]; password = \"\"; };"));
    CHECK(load_fails("redis: {\n prefix = \"{dq}:\"; };", "config:2: redis.prefix: must not hold", ""));
    CHECK(load_fails("redis: { prefix = \"dq}\"; };", "redis.prefix: must not hold", ""));
    CHECK(load_fails("redis: { sentinels = [ \"s\" ]; master_name = \"m\"; };",
                     "redis.sentinels", "element 0: must be"));
    CHECK(load_fails("redis: { sentinels = [ \"s:0\" ]; master_name = \"m\"; };",
                     "redis.sentinels", "1 to 65535"));
    CHECK(load_fails("redis: { sentinels = [ ]; master_name = \"m\"; };", "redis.sentinels", "list of 1"));
    CHECK(load_fails("redis: { wait_replicas = -1; };", "redis.wait_replicas", "from 0"));
}

static void syntax_error_has_line(void)
{
    CHECK(load_fails("http: {\n  listen = ;\n};", "config:2:", ""));
    CHECK(load_fails("log: { level = \"info\"; };\nhttp: { listen = \"x\";", "config:2:", ""));
}

static void levels_refused(void)
{
    CHECK(load_fails("\ndelay: { levels = [ \"5s\", \"1s\" ]; };", "config:2: delay.levels",
                     "ascending"));
    CHECK(load_fails("delay: { levels = [ \"1s\", \"1s\" ]; };", "delay.levels", "ascending"));
    CHECK(load_fails("delay: { levels = [ \"5x\" ]; };", "delay.levels", "5x"));
    CHECK(load_fails("delay: { levels = [ ]; };", "delay.levels", ""));
    CHECK(load_fails("delay: { levels = [ 5 ]; };", "delay.levels", ""));
    CHECK(load_fails("delay: { levels = \"5s\"; };", "delay.levels", ""));
}

static void bad_topic_format(void)
{
    CHECK(load_fails("delay: {\n topic_format = \"delay_%d\"; };", "config:2: delay.topic_format",
                     "%s"));
    CHECK(load_fails("delay: { topic_format = \"delay_topic\"; };", "delay.topic_format", ""));
    CHECK(load_fails("delay: { topic_format = \"delay topic %s\"; };", "delay.topic_format", ""));
}

static void partition_groups_split(void)
{
    CHECK(load_ok("delay: { partitions = 4; partition_groups = ( [0, 1], [3, 2] ); };"));
    CHECK_EQ_INT(cfg.delay.ngroups, 2);
    CHECK_EQ_INT(cfg.delay.group_of[0], 0);
    CHECK_EQ_INT(cfg.delay.group_of[1], 0);
    CHECK_EQ_INT(cfg.delay.group_of[2], 1);
    CHECK_EQ_INT(cfg.delay.group_of[3], 1);
}

static void partitions_without_groups(void)
{
    CHECK(load_ok("delay: { partitions = 16; };"));
    CHECK_EQ_INT(cfg.delay.ngroups, 1);
    CHECK_EQ_INT(cfg.delay.group_of[15], 0);
}

static void partition_groups_refused(void)
{
    CHECK(load_fails("delay: { partition_groups = ( [0, 1, 2, 3], [3, 4, 5, 6, 7] ); };",
                     "delay.partition_groups", "partition 3 is in more than one group"));
    CHECK(load_fails("delay: { partition_groups = ( [0, 1, 2, 3, 4, 5, 6] ); };",
                     "delay.partition_groups", "partition 7 is in no group"));
    CHECK(load_fails("delay: { partition_groups = ( [0, 1, 2, 3, 4, 5, 6, 7, 8] ); };",
                     "delay.partition_groups", "0 to 7"));
    CHECK(load_fails("delay: { partition_groups = ( [-1, 0, 1, 2, 3, 4, 5, 6, 7] ); };",
                     "delay.partition_groups", "0 to 7"));
}

static void partition_groups_malformed(void)
{
    CHECK(load_fails("delay: { partition_groups = ( [0, 1, 2, 3, 4, 5, 6, 7], [] ); };",
                     "delay.partition_groups", "group 1"));
    CHECK(load_fails("delay: { partition_groups = ( [\"0\"] ); };", "delay.partition_groups",
                     ""));
    CHECK(load_fails("delay: { partition_groups = 3; };", "delay.partition_groups", ""));
    CHECK(load_fails("delay: { partition_groups = ( ); };", "delay.partition_groups", ""));
}

static void properties(void)
{
    CHECK(load_ok("kafka: { properties = ( \"a.b=1\", \"sasl.password=x=y\", \"empty=\" ); };"));
    CHECK_EQ_INT(cfg.kafka.nproperties, 3);
    CHECK_STR(cfg.kafka.properties[1], "sasl.password=x=y");
    CHECK(load_fails("kafka: { properties = ( \"a=1\", \"security.protocol\" ); };",
                     "kafka.properties", "element 1"));
    CHECK(load_fails("kafka: { properties = ( \"=1\" ); };", "kafka.properties", "element 0"));
    CHECK(load_fails("kafka: { properties = \"a=1\"; };", "kafka.properties", "list"));
    CHECK(load_fails("kafka: { properties = ( 5 ); };", "kafka.properties", "element 0"));
}

static void log_level(void)
{
    CHECK(load_ok("log: { level = \"warn\"; };"));
    CHECK_EQ_INT(cfg.log.level, LOG_WARN);
    CHECK(load_fails("log: { level = \"verbose\"; };", "config:1: log.level", "debug"));
    CHECK(load_fails("log: { level = 1; };", "log.level", ""));
}

static void dlq_topic_checked(void)
{
    CHECK(load_fails("delay: { dlq_topic = \"delay_topic_5s\"; };", "delay.dlq_topic", ""));
    CHECK(load_fails("delay: { dlq_topic = \"dead letters\"; };", "delay.dlq_topic", ""));
    CHECK(load_fails("delay: { dlq_topic = \"\"; };", "delay.dlq_topic", ""));
}

static void max_delay_against_levels(void)
{
    CHECK(load_fails("delay: { levels = [ \"1s\" ]; };\njob: { max_delay_s = 100001; };",
                     "config:2: job.max_delay_s", "more than 100000 times the largest level"));
    CHECK(load_ok("delay: { levels = [ \"1s\" ]; };\njob: { max_delay_s = 100000; };"));
}

/* Left out, job.max_delay_s follows the levels: never a default that makes a config invalid. */
static void max_delay_default_follows_levels(void)
{
    CHECK(load_ok("delay: { levels = [ \"1s\", \"5s\", \"10s\" ]; };"));
    CHECK_EQ_INT(cfg.job.max_delay_s, 1000000);
    CHECK(load_ok("delay: { levels = [ \"1s\" ]; };"));
    CHECK_EQ_INT(cfg.job.max_delay_s, 100000);
    CHECK(load_ok("delay: { levels = [ \"1s\", \"25s\" ]; };"));   /* the last below 30 days */
    CHECK_EQ_INT(cfg.job.max_delay_s, 2500000);
    CHECK(load_ok("delay: { levels = [ \"1s\", \"26s\" ]; };"));
    CHECK_EQ_INT(cfg.job.max_delay_s, 2592000);
    CHECK(load_ok("delay: { levels = [ \"1s\", \"1m\" ]; };"));
    CHECK_EQ_INT(cfg.job.max_delay_s, 2592000);
    CHECK(load_ok("delay: { levels = [ \"1s\", \"99999999999d\" ]; };"));   /* no overflow */
    CHECK_EQ_INT(cfg.job.max_delay_s, 2592000);
    CHECK(load_ok(""));
    CHECK_EQ_INT(cfg.job.max_delay_s, 2592000);
}

/* A (silly) huge top level must not overflow the max_delay_s check. */
static void huge_level_no_overflow(void)
{
    CHECK(load_ok("delay: { levels = [ \"1s\", \"99999999999d\" ]; };"));
    CHECK_EQ_INT(cfg.delay.levels.ms[1], 99999999999LL * 86400000);
}

static void string_too_long(void)
{
    char text[CONFIG_STR_MAX + 64], big[CONFIG_STR_MAX + 1];

    memset(big, 'x', CONFIG_STR_MAX);
    big[CONFIG_STR_MAX] = '\0';
    snprintf(text, sizeof(text), "redis: { password = \"%s\"; };", big);
    CHECK(load_fails(text, "redis.password", "at most"));
    big[CONFIG_STR_MAX - 1] = '\0';
    snprintf(text, sizeof(text), "redis: { password = \"%s\"; };", big);
    CHECK(load_ok(text));
    CHECK_EQ_INT(strlen(cfg.redis.password), CONFIG_STR_MAX - 1);
}

static void file_missing(void)
{
    char err[512] = "";

    config_defaults(&cfg);
    CHECK_EQ_INT(config_load_file(&cfg, "/nonexistent/delayq-unit.conf", err, sizeof(err)), -1);
    CHECK_HAS(err, "/nonexistent/delayq-unit.conf");
    CHECK_HAS(err, "cannot read");
}

/* Writes text to a fresh temporary file; path gets its name. 0 or -1. */
static int write_temp(char path[64], const char *text)
{
    int fd;
    ssize_t n;

    snprintf(path, 64, "/tmp/delayq-unit-XXXXXX");
    if ((fd = mkstemp(path)) < 0)
        return -1;
    n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

static void file_loads_and_names_itself(void)
{
    char path[64], err[512] = "", want[128];
    int ok, bad;

    CHECK_EQ_INT(write_temp(path, "log: { level = \"error\"; };\nredis: { bogus = 1; };\n"), 0);
    config_defaults(&cfg);
    bad = config_load_file(&cfg, path, err, sizeof(err));
    unlink(path);
    CHECK_EQ_INT(bad, -1);
    snprintf(want, sizeof(want), "%s:2: redis.bogus", path);
    CHECK_HAS(err, want);
    CHECK_EQ_INT(write_temp(path, "log: { level = \"error\"; };\n"), 0);
    config_defaults(&cfg);
    ok = config_load_file(&cfg, path, err, sizeof(err));
    unlink(path);
    CHECK_EQ_INT(ok, 0);
    CHECK_EQ_INT(cfg.log.level, LOG_ERROR);
}

/* The callbacks section: secrets checked at load, endpoints, networks, retry rules. */
static void callbacks_section(void)
{
    CHECK(load_ok("callbacks: { secret = [ \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\", "
                  "\"whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\" ]; allow_private = true; "
                  "networks = [ \"10.1.0.0/16\", \"fd00::/8\", \"127.0.0.1\" ]; max_redirects = 2; "
                  "timeout_ms = 3000; max_concurrency = 8; rate_per_s = 100; "
                  "retry = { min_backoff_ms = 100; max_backoff_ms = 5000; max_attempts = 4; }; "
                  "endpoints = { billing = { url = \"https://billing.example/hook\"; "
                  "secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"; rate_per_s = 5; }; }; };"));
    CHECK_EQ_INT(cfg.callbacks.nsecrets, 2);
    CHECK_EQ_INT(cfg.callbacks.nnetworks, 3);
    CHECK_EQ_INT(cfg.callbacks.limits.max_concurrency, 8);
    CHECK_EQ_INT(cfg.callbacks.retry.max_attempts, 4);
    CHECK_EQ_INT(cfg.callbacks.retry.max_retry_duration_ms, 86400000);   /* default kept */
    CHECK_EQ_INT(cfg.callbacks.nendpoints, 1);
    CHECK_STR(cfg.callbacks.endpoints[0].name, "billing");
    CHECK_EQ_INT(cfg.callbacks.endpoints[0].limits.rate_per_s, 5);
    CHECK_EQ_INT(cfg.callbacks.endpoints[0].nsecrets, 1);
    CHECK(load_fails("callbacks: { secret = \"whsec_c2hvcnQ=\"; };", "callbacks.secret", "24"));
    CHECK(load_fails("callbacks: { networks = [ \"10.0.0.0/33\" ]; };", "callbacks.networks",
                     "element 0"));
    CHECK(load_fails("callbacks: { retry = { min_backoff_ms = 5000; max_backoff_ms = 100; }; };",
                     "callbacks.retry", "max_backoff_ms must not be below"));
    CHECK(load_fails("callbacks: { retry = { attempts = 3; }; };", "callbacks.retry", "attempts: unknown"));
    CHECK(load_fails("callbacks: { endpoints = { b = { url = \"ftp://x\"; }; }; };",
                     "callbacks.endpoints", "b: url"));
    CHECK(load_fails("callbacks: { max_redirects = 4; };", "callbacks.max_redirects", "0 to 3"));
}

void unit_config(void)
{
    RUN(callbacks_section);
    RUN(defaults_servers);
    RUN(defaults_delay);
    RUN(empty_text_keeps_defaults);
    RUN(design_sample_loads);
    RUN(few_keys_leave_others_default);
    RUN(custom_levels_and_format);
    RUN(format_alone_renames_default_levels);
    RUN(unknown_section);
    RUN(unknown_key_names_key_and_line);
    RUN(wrong_types);
    RUN(compat_and_batch_keys);
    RUN(secrets);
    RUN(out_of_range);
    RUN(listen_checked);
    RUN(required_texts);
    RUN(sentinels);
    RUN(syntax_error_has_line);
    RUN(levels_refused);
    RUN(bad_topic_format);
    RUN(partition_groups_split);
    RUN(partitions_without_groups);
    RUN(partition_groups_refused);
    RUN(partition_groups_malformed);
    RUN(properties);
    RUN(log_level);
    RUN(dlq_topic_checked);
    RUN(max_delay_against_levels);
    RUN(max_delay_default_follows_levels);
    RUN(huge_level_no_overflow);
    RUN(string_too_long);
    RUN(file_missing);
    RUN(file_loads_and_names_itself);
}
