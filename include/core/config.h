/* config: the libconfig file, its defaults and its validation. Every key has a default; an
 * unknown key or an invalid value is an error naming the key and its line. */
#ifndef DQ_CONFIG_H
#define DQ_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/levels.h"
#include "lib/log.h"

#define CONFIG_STR_MAX 512
#define CONFIG_PROPS_MAX 64       /* librdkafka properties passed through */
#define CONFIG_PARTITIONS_MAX 1024
#define CONFIG_GROUPS_MAX 1024
#define CONFIG_ADDRS_MAX 16       /* Sentinels asked for the master, or cluster seed nodes */
#define CONFIG_SENTINELS_MAX CONFIG_ADDRS_MAX
#define CONFIG_PULL_TOPICS_MAX 64 /* names or patterns of pull topics */
#define CONFIG_TTR_MAX_S 86400    /* a reservation lasts a day at most, as in the queues it serves */
#define CONFIG_ENDPOINTS_MAX 64   /* named callback endpoints */
#define CONFIG_NETWORKS_MAX 32    /* networks callbacks may call though private */
#define CONFIG_NAME_MAX 64        /* an endpoint's name */
#define CONFIG_SECRETS_MAX 4      /* signing secrets at once: a rotation needs two (sign.h) */
#define CALL_REDIRECTS_MAX 3        /* redirect hops a callback may follow, each checked again */
#define CALL_TIMEOUT_MIN_MS 100
#define CALL_TIMEOUT_MAX_MS 300000  /* five minutes: a callback that works longer should answer
                                     * at once and work on (Cloud Tasks allows 30 minutes) */
#define CALL_CONCURRENCY_MAX 10000
#define CALL_RATE_MAX 1000000
#define CALL_BACKOFF_MAX_MS (86400LL * 1000)
#define CALL_ATTEMPTS_MAX 1000
#define CALL_RETRY_DURATION_MAX_MS (30LL * 86400 * 1000)

/* How one callback endpoint (scheme, host and port) is called. */
struct config_call_limits {
    int64_t timeout_ms;          /* one call, connecting included */
    int64_t max_concurrency;     /* calls in flight to the endpoint at once */
    int64_t rate_per_s;          /* calls started per second (token bucket); 0: no limit */
};

/* How failed calls are retried; a job may lower each. */
struct config_call_retry {
    int64_t min_backoff_ms;      /* the first retry's wait; each next doubles, with jitter */
    int64_t max_backoff_ms;      /* no wait longer than this (Retry-After included) */
    int64_t max_attempts;        /* calls at most, the first included */
    int64_t max_retry_duration_ms;   /* no retry later than this after the first call */
};

/* A callback target named in the config: jobs say {"endpoint": name}. */
struct config_endpoint {
    char name[CONFIG_NAME_MAX];
    char url[CONFIG_STR_MAX];
    char secrets[CONFIG_SECRETS_MAX][CONFIG_STR_MAX];   /* none: callbacks.secrets */
    int nsecrets;
    struct config_call_limits limits;   /* unset fields: callbacks' */
};

struct config {
    struct {
        char listen[CONFIG_STR_MAX];       /* "host:port" */
        int64_t max_body_bytes;
        char auth_token[CONFIG_STR_MAX];   /* every path; empty: no auth */
        char read_token[CONFIG_STR_MAX];   /* the reading routes (docs/security.md); empty: none */
        char metrics_token[CONFIG_STR_MAX];   /* /metrics needs it (or auth_token); empty: open */
        int64_t max_connections_per_ip;    /* connections from one address at once */
        int64_t request_timeout_s;         /* a request must arrive whole within this */
        char tls_cert_file[CONFIG_STR_MAX];   /* PEM chain; empty: plain HTTP */
        char tls_key_file[CONFIG_STR_MAX];    /* PEM private key */
        int64_t threads;                   /* HTTP threads */
        int64_t workers;                   /* threads that serve get, remove, reschedule, claims */
        int64_t max_connections;
        int64_t connection_timeout_s;      /* idle or slow connection is closed after this */
        int64_t max_batch_jobs;            /* jobs in one add_batch request at most */
    } http;
    struct {
        char host[CONFIG_STR_MAX];
        int64_t port;
        char sentinels[CONFIG_SENTINELS_MAX][CONFIG_STR_MAX];   /* "host:port"; none: host/port */
        int nsentinels;
        char cluster[CONFIG_ADDRS_MAX][CONFIG_STR_MAX];   /* Redis Cluster seed nodes, "host:port" */
        int ncluster;
        char master_name[CONFIG_STR_MAX];  /* the master the Sentinels watch */
        char sentinel_password[CONFIG_STR_MAX];   /* AUTH on the Sentinels; empty for none */
        char username[CONFIG_STR_MAX];     /* ACL user for AUTH; empty: the default user */
        char password[CONFIG_STR_MAX];
        int64_t db;
        char prefix[CONFIG_STR_MAX];
        int64_t timeout_ms;                /* connect and command timeout */
        int64_t wait_replicas;             /* writes a guarantee rests on wait for this many */
        int64_t wait_timeout_ms;           /* replicas to confirm them (WAIT), this long at most */
        int64_t failover_wait_ms;          /* calls wait this long at most for a failover or a
                                            * slot migration to end */
        int require_noeviction;            /* 1: refuse to start on a Redis that evicts keys */
    } redis;
    struct {
        char brokers[CONFIG_STR_MAX];
        char group_id[CONFIG_STR_MAX];
        char properties[CONFIG_PROPS_MAX][CONFIG_STR_MAX];   /* "name=value" */
        int nproperties;
        int64_t produce_timeout_ms;        /* an add gives up on Kafka after this */
        int64_t replication_factor;        /* of topics delayqd creates; -1: broker default */
        char sasl_password[CONFIG_STR_MAX];   /* from sasl_password_file: the property
                                               * sasl.password; empty: none */
        char ssl_key_password[CONFIG_STR_MAX];   /* from ssl_key_password_file: ssl.key.password */
    } kafka;
    struct {
        char topic_format[CONFIG_STR_MAX];
        struct levels levels;
        int64_t partitions;
        int ngroups;
        int group_of[CONFIG_PARTITIONS_MAX];   /* partition -> group index */
        char dlq_topic[CONFIG_STR_MAX];
        int64_t claim_ttl_ms;
        int64_t max_held;                  /* messages held in memory at most, all partitions */
    } delay;
    struct {
        int64_t retention_s;               /* records stay this long after due */
        int64_t max_delay_s;
        int64_t refused_retry_s;           /* a delivery the business topic refuses is retried
                                              this long, then dead-lettered */
    } job;
    struct {
        enum log_level level;
    } log;
    struct {
        int64_t redrive_confirm_over;      /* a redrive by filter of more letters than this
                                            * needs "confirm": true */
    } dead;
    struct {
        char topics[CONFIG_PULL_TOPICS_MAX][CONFIG_STR_MAX];   /* names, or fnmatch patterns */
        int ntopics;
        int64_t ttr_s;                     /* a popped job is reserved this long by default */
        int64_t max_attempts;              /* pops whose time ran out before the dead letters;
                                            * 0: no limit */
        int also_kafka;                    /* 1: a due pull job goes to its Kafka topic too */
        int64_t max_wait_ms;               /* a pop waits this long at most, whatever it asks */
    } pull;
    struct {
        char secrets[CONFIG_SECRETS_MAX][CONFIG_STR_MAX];   /* "whsec_..." each; sign calls to
                                            * URLs given in jobs; none: unsigned */
        int nsecrets;
        int allow_private;                 /* 1: any address may be called */
        int raw_urls;                      /* 1: an add's callback may give a url, else only a
                                            * named endpoint */
        int direct_urls;                   /* 1: a direct producer's dq-callback may give a url */
        char networks[CONFIG_NETWORKS_MAX][CONFIG_NAME_MAX];   /* "10.1.0.0/16", "fd00::/8":
                                            * private addresses callable all the same */
        int nnetworks;
        int64_t max_redirects;             /* 0: a redirect is a failure */
        int redirect_across_origins;       /* 1: a redirect may lead to another scheme, host or
                                            * port (the job's headers are not sent there) */
        int64_t max_response_bytes;        /* of a response, read and kept for a dead letter */
        struct config_call_limits limits;  /* every endpoint's unless it names its own */
        struct config_call_retry retry;
        struct config_endpoint endpoints[CONFIG_ENDPOINTS_MAX];
        int nendpoints;
    } callbacks;
    struct {
        int go_delayqueue;                 /* 1: a delivered message's value is the job id */
        int ouqiang;                       /* 1: ouqiang/delay-queue's routes (compat.h) */
        int changsongl;                    /* 1: changsongl/delay-queue's routes (compat.h) */
        char networks[CONFIG_NETWORKS_MAX][CONFIG_NAME_MAX];   /* clients from these need no
                                            * token on those routes (theirs send none) */
        int nnetworks;
        int64_t ouqiang_max_attempts;      /* their jobs' receives before the dead letters; */
        int64_t changsongl_max_attempts;   /* 0: none, as the originals */
    } compat;
};

/* Fills cfg with every default (the levels of the shipped config included). */
void config_defaults(struct config *cfg);

/* Loads a file over the defaults. Returns 0, or -1 with "FILE:LINE: key: reason" in err. */
int config_load_file(struct config *cfg, const char *path, char *err, size_t errlen);

/* As config_load_file, from text (for tests). */
int config_load_string(struct config *cfg, const char *text, char *err, size_t errlen);

#endif
