#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "unit.h"

/* The Prometheus text holds every counter with its value, and labels where they belong. */
static void render_counts_and_labels(void)
{
    char *text;

    metrics_reset();
    metrics_inc(M_JOBS_ADDED);
    metrics_add(M_JOBS_DELIVERED, 41);
    metrics_inc(M_JOBS_DELIVERED);
    metrics_set(M_GROUPS_OWNED, 3);
    metrics_dead_letter(DLQ_REFUSED);
    metrics_http(R_ADD, 200, 0.003);
    metrics_http(R_ADD, 503, 2.0);
    metrics_http(R_GET, 299, 0.0001);
    metrics_lateness(7);
    metrics_lateness(-3);
    text = metrics_render();
    CHECK(text != NULL);
    CHECK_HAS(text, "\ndelayq_jobs_added_total 1\n");
    CHECK_HAS(text, "\ndelayq_jobs_delivered_total 42\n");
    CHECK_HAS(text, "\ndelayq_groups_owned 3\n");
    CHECK_HAS(text, "delayq_dead_letters_total{reason=\"refused\"} 1\n");
    CHECK_HAS(text, "delayq_dead_letters_total{reason=\"envelope\"} 0\n");
    CHECK_HAS(text, "delayq_http_requests_total{route=\"add\",status=\"503\"} 1\n");
    CHECK_HAS(text, "delayq_http_requests_total{route=\"get\",status=\"other\"} 1\n");
    CHECK_HAS(text, "delayq_http_request_seconds_bucket{route=\"add\",le=\"0.005\"} 1\n");
    CHECK_HAS(text, "delayq_http_request_seconds_bucket{route=\"add\",le=\"+Inf\"} 2\n");
    CHECK_HAS(text, "delayq_delivery_lateness_ms_bucket{le=\"5\"} 1\n");    /* -3 counts as 0 */
    CHECK_HAS(text, "delayq_delivery_lateness_ms_bucket{le=\"10\"} 2\n");
    CHECK_HAS(text, "delayq_delivery_lateness_ms_count 2\n");
    CHECK_HAS(text, "# TYPE delayq_delivery_lateness_ms histogram\n");
    free(text);
    metrics_reset();
}

void unit_metrics(void)
{
    RUN(render_counts_and_labels);
}
