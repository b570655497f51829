/* producer: librdkafka handles configured from the config file. The project's defaults come
 * first and every kafka.properties entry after them, so an operator can override anything. */
#ifndef DQ_PRODUCER_H
#define DQ_PRODUCER_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "core/config.h"

/* Applies bootstrap.servers and every kafka.properties entry. Returns 0 or -1 with err. */
int kafka_conf_apply(rd_kafka_conf_t *conf, const struct config *cfg, char *err, size_t errlen);

/* A configuration: the n name/value defaults, then bootstrap.servers and every kafka.properties
 * entry (which may override them), and the log callback. NULL with err set on a bad property. */
rd_kafka_conf_t *kafka_conf_build(const struct config *cfg, const char *const (*defaults)[2],
                                  size_t n, char *err, size_t errlen);

/* librdkafka's log callback: its syslog levels mapped onto ours, one line per event. */
void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf);

/* Creates a producer (client.id delayq-<role>) whose messages time out after timeout_ms and
 * wait up to linger_ms to travel in batches, with dr called for every delivery report from
 * whichever thread polls it.
 * Returns NULL with err set on failure. */
rd_kafka_t *producer_new(const struct config *cfg, const char *role, int64_t timeout_ms,
                         int linger_ms,
                         void (*dr)(rd_kafka_t *, const rd_kafka_message_t *, void *),
                         void *opaque, char *err, size_t errlen);

/* Creates and destroys the producer that producer_new would make, without connecting or
 * logging: librdkafka checks the whole configuration then. 0, or -1 with its reason in err. */
int producer_check_config(const struct config *cfg, char *err, size_t errlen);

/* rd_kafka_new of a handle that logs nothing (for configuration checks); takes conf. NULL
 * with err set, conf destroyed. */
rd_kafka_t *kafka_new_quiet(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err, size_t errlen);

/* rk's message.max.bytes: librdkafka refuses to produce a larger message (SIZE_MAX if unknown). */
size_t producer_max_message_bytes(rd_kafka_t *rk);

/* Fetches the metadata of the delay topics and the dead-letter topic (up to timeout_ms in all),
 * so that the first produce to them does not wait for it. */
void producer_warm(rd_kafka_t *rk, const struct config *cfg, int timeout_ms);

/* Adds a header (value of len bytes) to hdrs. */
void headers_add(rd_kafka_headers_t *hdrs, const char *name, const char *value, size_t len);
/* Adds a header holding a decimal integer. */
void headers_add_int(rd_kafka_headers_t *hdrs, const char *name, int64_t value);

#endif
