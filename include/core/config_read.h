/* config_read: the inside of config, shared by its two files and nothing else: config.c (the
 * table of every key, the walk of a libconfig file, the checks that need several keys at once)
 * and config_read.c (the readers of the keys that are more than one string, integer or bool).
 * Callers use include/core/config.h. */
#ifndef DQ_CONFIG_READ_H
#define DQ_CONFIG_READ_H

#include <stddef.h>

#include <libconfig.h>

#include "core/config.h"

/* One read of a config file: the struct it fills, and what the readers of single keys leave
 * for the checks of the whole file. Valid while the libconfig file read is. */
struct config_read {
    struct config *cfg;
    char clear_secret[CONFIG_STR_MAX + 32];   /* the first key read that holds a secret in
                                               * clear ("group.name"), or "" */
    char clear_secret_fix[64];                /* the key to give it in instead */
    const char *level_names[LEVELS_MAX];      /* delay.levels: checked once delay.topic_format
                                               * is known */
    int nlevel_names;                         /* -1: delay.levels not given */
    config_setting_t *groups;                 /* delay.partition_groups: checked against
                                               * delay.partitions; NULL: not given */
};

/* The readers of single keys, each named for its key: http.listen, redis.sentinels and
 * redis.cluster, kafka.properties, delay.levels and delay.partition_groups (noted in rd, checked
 * once the whole file is read), log.level, pull.topics, and callbacks.secret, secret_file,
 * networks, retry and endpoints. Each takes the setting s of its key, fills rd->cfg (or rd) and
 * returns 0, or -1 with why set (whylen bytes; the caller adds the file, line and key). */
int config_read_listen(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_sentinels(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_cluster(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_props(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_levels(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_groups(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_log_level(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_pull_topics(config_setting_t *s, struct config_read *rd, char *why,
                            size_t whylen);
int config_read_cb_secret(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_cb_secret_file(config_setting_t *s, struct config_read *rd, char *why,
                               size_t whylen);
int config_read_cb_networks(config_setting_t *s, struct config_read *rd, char *why,
                            size_t whylen);
int config_read_compat_networks(config_setting_t *s, struct config_read *rd, char *why,
                                size_t whylen);
int config_read_cb_retry(config_setting_t *s, struct config_read *rd, char *why, size_t whylen);
int config_read_cb_endpoints(config_setting_t *s, struct config_read *rd, char *why,
                             size_t whylen);

/* Reads the secret in file path into out (outlen bytes at most, a NUL included): the whole
 * file but one trailing newline ("\n" or "\r\n"). Only a regular file: a FIFO would hang the
 * start. 0, or -1 with why set (unreadable, too long, empty, or a control character). */
int config_read_secret(const char *path, char *out, size_t outlen, char *why, size_t whylen);

#endif
