/* http: the HTTP server (libmicrohttpd): routes, limits, auth, and suspension of an add until
 * Kafka has answered, so no worker thread waits on a round trip. */
#ifndef DQ_HTTP_H
#define DQ_HTTP_H

#include <stdatomic.h>
#include <stddef.h>

#include "core/config.h"
#include "intake/intake.h"

struct http;
struct schedules;
struct dead;

/* Listens on http.listen and serves (schedules, dead: the schedule and dead-letter routes') with http.threads threads, over TLS when
 * http.tls_cert_file is set (tls_load done: main checks it before anything starts); loads the
 * certificate again whenever *reload is set (by SIGHUP; the server clears it). NULL with err
 * set on failure. */
struct http *http_new(const struct config *cfg, struct intake *jobs, struct schedules *schedules,
                      struct dead *dead, atomic_int *reload, char *err, size_t errlen);

/* Stops accepting connections, refuses further requests for the jobs module with 503, waits up
 * to timeout_ms for those in progress to be answered (one whose client left counts once it has
 * ended), and then until no HTTP thread is inside the jobs module: it may be freed after. */
void http_drain(struct http *http, int timeout_ms);

/* Stops the server and frees it. Call http_drain, then intake_free (which answers every request
 * still waiting), then this: the answers go out, for up to 2 s, before the daemons stop. */
void http_free(struct http *http);

#endif
