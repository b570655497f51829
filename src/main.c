/* delayqd: start-up and shutdown order. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "delivery/holder.h"
#include "http/http.h"
#include "intake/intake.h"
#include "lib/log.h"
#include "kafka/producer.h"
#include "dead/dead.h"
#include "schedules/schedules.h"
#include "redis/store.h"
#include "http/tls.h"
#include "kafka/topics.h"
#include "redis/watch.h"

#define LOG_MODULE "main"
#define DELAYQ_VERSION "0.4.0"

static volatile sig_atomic_t stop_requested;   /* read by this thread's loop (holder_run) */
static atomic_int reload_requested;            /* read by an HTTP thread: lock-free, so a handler may set it */

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        atomic_store(&reload_requested, 1);
    else
        stop_requested = 1;
}

/* The signals delayqd handles: stop (TERM, INT) and reload the TLS certificate (HUP). */
static const sigset_t *handled_signals(void)
{
    static sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    return &set;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: delayqd -c FILE [--check-config]\n"
            "       delayqd --version | --help\n"
            "  -c, --config FILE   libconfig file (see conf/delayq.conf)\n"
            "      --check-config  load and validate the config, then exit\n"
            "  -v, --version       print the version\n"
            "  -h, --help          print this help\n");
}

/* librdkafka checks kafka.properties only when a handle is created: create the producer and
 * the consumer that delayqd runs, without connecting, so that --check-config and start-up
 * refuse any property that cannot work, with librdkafka's reason. */
static int check_kafka(const struct config *cfg, char *err, size_t errlen)
{
    if (producer_check_config(cfg, err, errlen) < 0)
        return -1;
    return holder_check_config(cfg, err, errlen);
}

static int ensure_topics(const struct config *cfg, int partitions[LEVELS_MAX])
{
    char err[512];
    rd_kafka_t *admin = producer_new(cfg, "admin", 10000, 0, NULL, NULL, err, sizeof(err));
    int rc;

    if (!admin) {
        log_error("%s", err);
        return -1;
    }
    if ((rc = topics_ensure(admin, cfg, partitions, err, sizeof(err))) < 0)
        log_error("%s", err);
    rd_kafka_destroy(admin);
    return rc;
}

/* Redis at start: not answering yet is a warning; one that may evict job records refuses the
 * start with redis.require_noeviction (-1). */
static int check_redis(const struct config *cfg)
{
    struct store *st = store_new(cfg);
    char err[256], policy[64];
    int rc = 0;

    if (st && store_ping(st, err, sizeof(err)) < 0) {
        if (cfg->redis.require_noeviction && store_evicts(policy, sizeof(policy))) {
            log_error("%s", err);
            rc = -1;
        } else {
            log_warn("Redis is not answering yet (adds get 503, due jobs wait): %s", err);
        }
    }
    store_free(st);
    return rc;
}

static int serve(const struct config *cfg)
{
    int partitions[LEVELS_MAX];
    struct holder *holder = NULL;
    struct intake *jobs = NULL;
    struct schedules *schedules = NULL;
    struct dead *dead = NULL;
    struct http *http = NULL;
    char err[512];
    int rc = 1;

    if (watch_start(cfg, err, sizeof(err)) < 0) {
        log_error("%s", err);
        return 1;
    }
    if (check_redis(cfg) < 0 || ensure_topics(cfg, partitions) < 0)
        goto out;
    if (!(holder = holder_new(cfg, partitions, err, sizeof(err))) ||
        !(jobs = intake_new(cfg, holder_warm(holder), err, sizeof(err))) ||
        !(schedules = schedules_new(cfg, jobs, err, sizeof(err))) ||
        !(dead = dead_new(cfg, jobs, err, sizeof(err))) ||
        !(http = http_new(cfg, jobs, schedules, dead, &reload_requested, err, sizeof(err)))) {
        log_error("%s", err);
        goto out;
    }
    holder_on_occurrence(holder, schedules_occurred, schedules_check, schedules);
    /* Every thread is started, with these signals blocked: from here on they come to this
     * one, whose loop looks at the flags, and no other thread's call is cut short by them. */
    pthread_sigmask(SIG_UNBLOCK, handled_signals(), NULL);
    log_info("delayqd %s ready", DELAYQ_VERSION);
    holder_run(holder, &stop_requested);
    holder_on_occurrence(holder, NULL, NULL, NULL);   /* schedules go first, below */
    log_info("stopping");
    http_drain(http, (int)cfg->kafka.produce_timeout_ms + 1000);
    rc = 0;
out:
    /* schedules and dead letters, then jobs: they answer every request still waiting (their
     * own adds are the jobs'), so none is left suspended in the HTTP server, and none is
     * answered after it is gone. The schedules are freed once their adds are answered. */
    schedules_stop(schedules);
    dead_free(dead);
    intake_free(jobs, (int)cfg->kafka.produce_timeout_ms);
    http_free(http);
    schedules_free(schedules);
    holder_free(holder);
    watch_stop();
    log_info("stopped");
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "check-config", no_argument, NULL, 'C' },
        { "version", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    static struct config cfg;   /* large: keep it off the stack */
    const char *path = NULL;
    int check = 0, c;
    char err[1024];
    struct sigaction sa;

    while ((c = getopt_long(argc, argv, "c:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'C': check = 1; break;
        case 'v': printf("delayqd %s (librdkafka %s)\n", DELAYQ_VERSION, rd_kafka_version_str()); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!path || optind != argc) {
        usage(stderr);
        return 2;
    }
    pthread_sigmask(SIG_BLOCK, handled_signals(), NULL);   /* inherited by every thread */
    config_defaults(&cfg);
    if (config_load_file(&cfg, path, err, sizeof(err)) < 0 ||
        check_kafka(&cfg, err, sizeof(err)) < 0 ||
        (cfg.http.tls_cert_file[0] &&
         tls_load(cfg.http.tls_cert_file, cfg.http.tls_key_file, err, sizeof(err)) < 0)) {
        fprintf(stderr, "delayqd: %s\n", err);
        return 1;
    }
    if (check) {
        tls_release();
        printf("%s: ok\n", path);
        return 0;
    }
    log_set_level(cfg.log.level);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    c = serve(&cfg);
    tls_release();   /* the HTTP server is gone: no handshake uses them any more */
    return c;
}
