/* openapi: the API's description as this instance serves it. docs/openapi.yaml (embedded as
 * JSON, ui.h) holds the defaults; where a value depends on the config, the schema object that
 * holds it says so with an extension member, x-delayq-limits: {<keyword>: <setting>}, and the
 * served description has that keyword set from the config:
 *
 *   job.max_delay_s       the longest delay, in seconds
 *   job.max_delay_ms      the same in milliseconds
 *   http.max_batch_jobs   jobs one add_batch may carry
 *   dead.partition_max    the highest dead-letter partition (delay.partitions - 1)
 *   delay.group_max       the highest partition group (delay.partition_groups' count - 1)
 *   topics.not_business   {"enum": [".", "..", the delay topics, the dead-letter topic]}:
 *                         the names a business topic may not have
 *   callbacks.endpoints   the names of the configured endpoints: an enum, the schema's "not"
 *                         dropped; with none, nothing is set (the description holds the
 *                         default, "not: {}": no name is one)
 *
 * so that a client generated from it, or a tool that tests the API by it, asks what this
 * instance accepts. */
#ifndef DQ_HTTP_OPENAPI_H
#define DQ_HTTP_OPENAPI_H

#include <stddef.h>

#include "core/config.h"

/* The description for cfg as compact JSON (malloc'd, *len bytes), or NULL with err set (none
 * embedded, or it does not read, or it names a setting this build does not know). */
char *openapi_build(const struct config *cfg, size_t *len, char *err, size_t errlen);

#endif
