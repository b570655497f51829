#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "unit.h"

/* Route labels as the HTTP layer gives them. */
enum { R_ADD, R_GET, R_STATS, ROUTES };
static const char *const routes[ROUTES] = { "add", "get", "stats" };

/* The Prometheus text holds every counter with its value, and labels where they belong. */
static void render_counts_and_labels(void)
{
    char *text;

    metrics_reset();
    metrics_http_routes(routes, ROUTES);
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

/* The pending gauges appear once set, one line per label, and a new view replaces the old. */
static void render_families(void)
{
    const char *const levels[] = { "1s", "10s", "5m" }, *const dues[] = { "1m", "later" };
    const int64_t counts[] = { 0, 7, 5 }, by_due[] = { 7, 5 }, fewer[] = { 2 };
    char *text;

    metrics_reset();
    text = metrics_render();
    CHECK(text != NULL && !strstr(text, "delayq_pending_jobs{"));
    free(text);
    metrics_set_family(MF_PENDING, levels, counts, 3);
    metrics_set_family(MF_PENDING_BY_DUE, dues, by_due, 2);
    metrics_set(M_OVERDUE_MS, 1500);
    metrics_http(R_STATS, 200, 0.01);
    text = metrics_render();
    CHECK(text != NULL);
    CHECK_HAS(text, "# TYPE delayq_pending_jobs gauge\n");
    CHECK_HAS(text, "\ndelayq_pending_jobs{level=\"1s\"} 0\n");
    CHECK_HAS(text, "\ndelayq_pending_jobs{level=\"10s\"} 7\n");
    CHECK_HAS(text, "\ndelayq_pending_jobs{level=\"5m\"} 5\n");
    CHECK_HAS(text, "\ndelayq_pending_jobs_by_due{due=\"later\"} 5\n");
    CHECK_HAS(text, "\ndelayq_overdue_ms 1500\n");
    CHECK_HAS(text, "delayq_http_requests_total{route=\"stats\",status=\"200\"} 1\n");
    free(text);
    metrics_set_family(MF_PENDING, levels + 1, fewer, 1);
    text = metrics_render();
    CHECK(text != NULL);
    CHECK_HAS(text, "\ndelayq_pending_jobs{level=\"10s\"} 2\n");
    CHECK(!strstr(text, "level=\"5m\""));
    free(text);
    metrics_reset();
}

void unit_metrics(void)
{
    RUN(render_counts_and_labels);
    RUN(render_families);
}
