/* topics: makes sure the delay topics and the dead-letter topic exist. */
#ifndef DQ_TOPICS_H
#define DQ_TOPICS_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "core/config.h"

/* Creates each missing delay topic and the dead-letter topic with delay.partitions partitions
 * and a retention well above the topic's delay, then reads back every delay topic's partition
 * count into partitions[level]. rk is any handle. Returns 0, or -1 with err set. */
int topics_ensure(rd_kafka_t *rk, const struct config *cfg, int partitions[LEVELS_MAX], char *err,
                  size_t errlen);

#endif
