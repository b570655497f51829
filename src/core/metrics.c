/* metrics: the process-wide counters, gauges and histograms as relaxed atomics, and their
 * Prometheus text. The contract is in include/core/metrics.h. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"

/* Latency buckets in seconds: an add waits for Redis and a Kafka acknowledgement. */
static const double http_bounds[] = { 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5 };
#define HTTP_BUCKETS (sizeof(http_bounds) / sizeof(http_bounds[0]))
/* Lateness buckets in milliseconds: a few ms is normal, seconds mean an outage or a backlog. */
static const int64_t late_bounds[] = { 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 60000 };
#define LATE_BUCKETS (sizeof(late_bounds) / sizeof(late_bounds[0]))
/* HTTP statuses counted by label; any other is counted as "other". */
static const int statuses[] = { 200, 400, 401, 404, 405, 409, 413, 500, 503 };
#define STATUSES (sizeof(statuses) / sizeof(statuses[0]))

static const struct { const char *name, *help; } counter_info[M_COUNTERS] = {
    [M_JOBS_ADDED] = { "delayq_jobs_added_total", "Jobs added over HTTP." },
    [M_JOBS_DELIVERED] = { "delayq_jobs_delivered_total", "Messages delivered to business topics." },
    [M_JOBS_CANCELLED] = { "delayq_jobs_cancelled_total", "Pending jobs removed." },
    [M_JOBS_RESCHEDULED] = { "delayq_jobs_rescheduled_total", "Pending jobs moved to another due time." },
    [M_FORWARDS] = { "delayq_forwards_total", "Sends to business topics, counted when sent." },
    [M_COLD_DELIVERIES] = { "delayq_deliveries_to_cold_topics_total", "Sends to a business topic whose metadata delayqd had not fetched ahead: each may wait up to a second for it." },
    [M_MOVES] = { "delayq_moves_total", "Messages moved down a level." },
    [M_RESUMES] = { "delayq_partition_resumes_total", "Held partitions resumed; each one fetches again." },
    [M_LEASE_RENEW_FAILURES] = { "delayq_lease_renew_failures_total", "Lease renewals that failed or found the lease taken." },
    [M_GROUPS_FENCED] = { "delayq_groups_fenced_total", "Groups dropped because their lease could not be renewed in time." },
    [M_REDIS_ERRORS] = { "delayq_redis_errors_total", "Redis calls that failed." },
    [M_REDIS_PIPELINES] = { "delayq_redis_pipelines_total", "Batches of calls sent to Redis together." },
    [M_REDIS_ROUND_TRIPS] = { "delayq_redis_round_trips_total", "A batch's calls to one Redis node, sent and answered together (a redirected call costs another)." },
    [M_REDIS_CALLS] = { "delayq_redis_calls_total", "Commands and script calls sent to Redis." },
    [M_REDIS_MASTER_MOVES] = { "delayq_redis_master_moves_total", "Times the Redis master moved as the Sentinels announced it (a replica promoted, or a switch elsewhere): every connection moved to it." },
    [M_REDIS_FAILOVER_WAIT_MS] = { "delayq_redis_failover_wait_ms_total", "Milliseconds Redis calls waited for failovers (from the beginning announced to the promotion), summed over every batch of calls." },
    [M_KAFKA_ERRORS] = { "delayq_kafka_errors_total", "Kafka produce or delivery failures." },
    [M_PULL_READY] = { "delayq_pull_ready_total", "Due jobs of pull topics made ready for poppers." },
    [M_PULL_POPS] = { "delayq_pull_pops_total", "Pops answered with jobs." },
    [M_PULL_EMPTY_POPS] = { "delayq_pull_empty_pops_total", "Pops answered with no job: none became ready within their wait." },
    [M_PULL_POPS_LEFT] = { "delayq_pull_pops_left_total", "Waiting pops whose client closed its connection: dropped, they took no job." },
    [M_PULL_POPPED] = { "delayq_pull_jobs_popped_total", "Jobs handed out by pops (each reserved for its time to run)." },
    [M_PULL_FINISHES] = { "delayq_pull_finishes_total", "Reserved jobs finished." },
    [M_PULL_RELEASES] = { "delayq_pull_releases_total", "Reserved jobs released (ready again, now or after a delay)." },
    [M_PULL_EXPIRIES] = { "delayq_pull_expiries_total", "Reservations that ran out: the job is ready again, its attempt raised." },
    [M_PULL_DEAD] = { "delayq_pull_dead_letters_total", "Pull jobs sent to the dead-letter topic: buried, or out of attempts." },
    [M_SCHED_RUN] = { "delayq_schedule_runs_total", "Occurrences of recurring schedules that came due and were run." },
    [M_SCHED_SKIPPED] = { "delayq_schedule_skips_total", "Occurrences that came due and were skipped: a later fire time had passed too (catch_up skip, or beyond catch_up_max), their schedule was changed, paused or deleted since they were made, or overlap skip." },
    [M_SCHED_OVERLAPPED] = { "delayq_schedule_overlaps_total", "Occurrences skipped because the occurrence before them had not finished (overlap skip)." },
    [M_SCHED_MADE] = { "delayq_schedule_occurrences_made_total", "Occurrence jobs made by this instance: each schedule's next, triggered ones, and those a sweep made again." },
    [M_DEAD_REDRIVEN] = { "delayq_dead_letters_redriven_total", "Dead letters added again as jobs by a redrive." },
    [M_CALL_DEFERRED] = { "delayq_callback_deferrals_total", "Callback jobs not called but sent back to wait in the delay topics: their endpoint's queue was seconds long (its calls slow or timing out)." },
};

static const struct { const char *name, *help; } gauge_info[M_GAUGES] = {
    [M_HELD_PARTITIONS] = { "delayq_held_partitions", "Partitions paused until their head is due." },
    [M_GROUPS_OWNED] = { "delayq_groups_owned", "Partition groups this instance holds the lease of." },
    [M_IN_MEMORY] = { "delayq_messages_in_memory", "Messages held in memory (read ahead or retried)." },
    [M_LIVE_INSTANCES] = { "delayq_live_instances", "Instances with a live heartbeat." },
    [M_OVERDUE_MS] = { "delayq_overdue_ms", "How late the most overdue delay-topic head is, milliseconds, at the last look at Kafka." },
    [M_SCHEDULES] = { "delayq_schedules", "Recurring schedules in Redis, paused ones included: counted every 30 s, and a second after this instance makes or deletes one." },
    [M_LEASE_LEFT_MS] = { "delayq_lease_left_ms", "The least time any lease of this instance had left when its last round of renewals began, milliseconds (two thirds of delay.claim_ttl_ms when on time; near 0, the groups are about to be fenced)." },
    [M_CALL_RETRIES_WAITING] = { "delayq_callback_retries_waiting", "Callback jobs of every instance waiting for their next attempt, at most a second old." },
};

static const char *const dlq_names[DLQ_REASONS] = {
    [DLQ_ENVELOPE] = "envelope", [DLQ_TOPIC] = "bad_topic", [DLQ_LOOP] = "delay_topic",
    [DLQ_DEAD_LETTER_TOPIC] = "dead_letter_topic",
    [DLQ_TOO_FAR] = "too_far", [DLQ_ID] = "bad_id", [DLQ_RECORD] = "bad_record",
    [DLQ_REFUSED] = "refused", [DLQ_CALLBACK] = "callback",
};

static const char *const skip_names[SKIP_REASONS] = {
    [SKIP_EXPIRED] = "expired", [SKIP_MISSING] = "record_missing", [SKIP_CANCELLED] = "removed",
    [SKIP_DELIVERED] = "already_delivered", [SKIP_FAILED] = "already_failed",
    [SKIP_EARLIER_JOB] = "earlier_job", [SKIP_COPY] = "copy_in_flight",
    [SKIP_FOREIGN] = "not_its_message", [SKIP_ELSEWHERE] = "delivering_elsewhere",
};

static const char *const *route_names;   /* the HTTP layer's, nroutes of them */
static size_t nroutes;

#define FAMILY_LABEL_MAX 249   /* a Kafka topic name at most */

static const struct { const char *name, *label, *help; } family_info[M_FAMILIES] = {
    [MF_PENDING] = { "delayq_pending_jobs", "level", "Messages in each level's delay topic past the group's committed offsets, at the last look at Kafka." },
    [MF_PENDING_BY_DUE] = { "delayq_pending_jobs_by_due", "due", "The same messages by when they next act: within 1m (overdue included), 10m, 1h, 1d, or later." },
    [MF_PULL_READY] = { "delayq_pull_ready_jobs", "topic", "Jobs of each pull topic that may be popped now, at the last count." },
    [MF_PULL_RESERVED] = { "delayq_pull_reserved_jobs", "topic", "Jobs of each pull topic popped and not yet finished, at the last count." },
    [MF_PULL_DELAYED] = { "delayq_pull_delayed_jobs", "topic", "Jobs of each pull topic added and not yet due, or released with a delay that has not run out, at the last count." },
    [MF_PULL_OLDEST] = { "delayq_pull_oldest_ready_age_ms", "topic", "How long the oldest job of each pull topic that may be popped has been so (0: none), at the last count." },
    [MF_PULL_PAUSED] = { "delayq_pull_paused", "topic", "1 for each pull topic that is paused (pops hand out none of its jobs), at the last count." },
};

/* Labels and values of a family are set and read together, under one lock: a scrape never
 * sees half a view. */
static struct family {
    int n;
    char label[METRICS_FAMILY_MAX][FAMILY_LABEL_MAX + 1];
    int64_t value[METRICS_FAMILY_MAX];
} families[M_FAMILIES];
static pthread_mutex_t families_mu = PTHREAD_MUTEX_INITIALIZER;

static atomic_uint_fast64_t counters[M_COUNTERS];
static atomic_int_fast64_t gauges[M_GAUGES];
static atomic_uint_fast64_t dead[DLQ_REASONS];
static atomic_uint_fast64_t skipped[SKIP_REASONS];
static atomic_uint_fast64_t http_count[METRICS_ROUTES_MAX][STATUSES + 1];
static atomic_uint_fast64_t http_bucket[METRICS_ROUTES_MAX][HTTP_BUCKETS];
static atomic_uint_fast64_t http_sum_us[METRICS_ROUTES_MAX];
/* [0]: deliveries to Kafka, [1]: first pops of pull jobs, [2]: first calls of callbacks */
#define LATE_KINDS 4
static atomic_uint_fast64_t late_bucket[LATE_KINDS][LATE_BUCKETS];
static atomic_uint_fast64_t late_count[LATE_KINDS], late_sum_ms[LATE_KINDS];

/* Callbacks per endpoint: calls by status class, their latency, retries, dead letters, in
 * flight. Rows are taken by the first METRICS_ENDPOINTS_MAX endpoints, the last row is
 * "other". */
enum call_class { CC_2XX, CC_3XX, CC_4XX, CC_5XX, CC_NONE, CALL_CLASSES };
static const char *const call_class_names[CALL_CLASSES] = { "2xx", "3xx", "4xx", "5xx", "none" };
static const double call_bounds[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30 };
#define CALL_BUCKETS (sizeof(call_bounds) / sizeof(call_bounds[0]))
struct call_row {
    char endpoint[300];
    uint64_t calls[CALL_CLASSES];
    uint64_t bucket[CALL_BUCKETS];
    double sum_s;
    uint64_t retries, dead;
    int64_t in_flight;
};
static struct call_row call_rows[METRICS_ENDPOINTS_MAX + 1];
static int ncall_rows;
static pthread_mutex_t calls_mu = PTHREAD_MUTEX_INITIALIZER;

/* The row of endpoint, taken when new; with calls_mu held. */
static struct call_row *call_row(const char *endpoint)
{
    struct call_row *r;

    for (int i = 0; i < ncall_rows; i++)
        if (strcmp(call_rows[i].endpoint, endpoint) == 0)
            return &call_rows[i];
    if (ncall_rows < METRICS_ENDPOINTS_MAX) {
        r = &call_rows[ncall_rows++];
        snprintf(r->endpoint, sizeof(r->endpoint), "%s", endpoint);
        return r;
    }
    r = &call_rows[METRICS_ENDPOINTS_MAX];
    snprintf(r->endpoint, sizeof(r->endpoint), "other");
    return r;
}

void metrics_call(const char *endpoint, int status, double seconds)
{
    enum call_class c = status >= 200 && status < 600 ? (enum call_class)(status / 100 - 2) : CC_NONE;
    struct call_row *r;

    pthread_mutex_lock(&calls_mu);
    r = call_row(endpoint);
    r->calls[c]++;
    for (size_t b = 0; b < CALL_BUCKETS; b++)
        if (seconds <= call_bounds[b])
            r->bucket[b]++;
    r->sum_s += seconds;
    pthread_mutex_unlock(&calls_mu);
}

void metrics_call_in_flight(const char *endpoint, int64_t n)
{
    pthread_mutex_lock(&calls_mu);
    call_row(endpoint)->in_flight = n;
    pthread_mutex_unlock(&calls_mu);
}

void metrics_call_retry(const char *endpoint)
{
    pthread_mutex_lock(&calls_mu);
    call_row(endpoint)->retries++;
    pthread_mutex_unlock(&calls_mu);
}

void metrics_call_dead(const char *endpoint)
{
    pthread_mutex_lock(&calls_mu);
    call_row(endpoint)->dead++;
    pthread_mutex_unlock(&calls_mu);
}

#define ADD(a, n) atomic_fetch_add_explicit(&(a), (n), memory_order_relaxed)
#define GET(a) atomic_load_explicit(&(a), memory_order_relaxed)

void metrics_inc(enum metric_counter c) { ADD(counters[c], 1); }
void metrics_add(enum metric_counter c, uint64_t n) { ADD(counters[c], n); }
void metrics_set(enum metric_gauge g, int64_t v) { atomic_store_explicit(&gauges[g], v, memory_order_relaxed); }
int64_t metrics_gauge(enum metric_gauge g) { return GET(gauges[g]); }
void metrics_dead_letter(enum dlq_reason r) { ADD(dead[r], 1); }
void metrics_skipped(enum skip_reason r) { ADD(skipped[r], 1); }

void metrics_http_routes(const char *const *names, size_t n)
{
    route_names = names;
    nroutes = n < METRICS_ROUTES_MAX ? n : METRICS_ROUTES_MAX;
}

void metrics_http(size_t r, int status, double seconds)
{
    size_t s = 0;

    if (r >= nroutes)
        return;
    while (s < STATUSES && statuses[s] != status)
        s++;
    ADD(http_count[r][s], 1);
    for (size_t b = 0; b < HTTP_BUCKETS; b++)
        if (seconds <= http_bounds[b])
            ADD(http_bucket[r][b], 1);
    ADD(http_sum_us[r], (uint64_t)(seconds * 1e6));
}

void metrics_set_family(enum metric_family f, const char *const *labels, const int64_t *values,
                        int n)
{
    struct family *fam = &families[f];

    pthread_mutex_lock(&families_mu);
    fam->n = n < METRICS_FAMILY_MAX ? n : METRICS_FAMILY_MAX;
    for (int i = 0; i < fam->n; i++) {
        snprintf(fam->label[i], sizeof(fam->label[i]), "%s", labels[i]);
        fam->value[i] = values[i];
    }
    pthread_mutex_unlock(&families_mu);
}

static void late(int kind, int64_t ms)
{
    if (ms < 0)
        ms = 0;
    for (size_t b = 0; b < LATE_BUCKETS; b++)
        if (ms <= late_bounds[b])
            ADD(late_bucket[kind][b], 1);
    ADD(late_count[kind], 1);
    ADD(late_sum_ms[kind], (uint64_t)ms);
}

void metrics_lateness(int64_t ms)
{
    late(0, ms);
}

void metrics_pop_lateness(int64_t ms)
{
    late(1, ms);
}

void metrics_call_lateness(int64_t ms)
{
    late(2, ms);
}

void metrics_sched_lateness(int64_t ms)
{
    late(3, ms);
}

void metrics_reset(void)
{
    memset((void *)counters, 0, sizeof(counters));
    memset((void *)gauges, 0, sizeof(gauges));
    memset((void *)dead, 0, sizeof(dead));
    memset((void *)http_count, 0, sizeof(http_count));
    memset((void *)http_bucket, 0, sizeof(http_bucket));
    memset((void *)http_sum_us, 0, sizeof(http_sum_us));
    memset((void *)late_bucket, 0, sizeof(late_bucket));
    memset((void *)late_count, 0, sizeof(late_count));
    memset((void *)late_sum_ms, 0, sizeof(late_sum_ms));
    pthread_mutex_lock(&families_mu);
    memset(families, 0, sizeof(families));
    pthread_mutex_unlock(&families_mu);
    pthread_mutex_lock(&calls_mu);
    memset(call_rows, 0, sizeof(call_rows));
    ncall_rows = 0;
    pthread_mutex_unlock(&calls_mu);
}

/* A growing text buffer; on out of memory it stops growing and buf_take returns NULL. */
struct buf {
    char *s;
    size_t len, cap;
    int oom;
};

__attribute__((format(printf, 2, 3))) static void put(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        if (b->oom)
            return;
        va_start(ap, fmt);
        n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        char *s = realloc(b->s, b->cap * 2);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap *= 2;
    }
}

static void render_http(struct buf *b)
{
    put(b, "# HELP delayq_http_requests_total HTTP requests by route and status.\n"
           "# TYPE delayq_http_requests_total counter\n");
    for (size_t r = 0; r < nroutes; r++)
        for (size_t s = 0; s <= STATUSES; s++)
            if (GET(http_count[r][s])) {
                char st[16];
                snprintf(st, sizeof(st), "%d", s < STATUSES ? statuses[s] : 0);
                put(b, "delayq_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
                    route_names[r], s < STATUSES ? st : "other",
                    (unsigned long long)GET(http_count[r][s]));
            }
    put(b, "# HELP delayq_http_request_seconds HTTP request latency by route.\n"
           "# TYPE delayq_http_request_seconds histogram\n");
    for (size_t r = 0; r < nroutes; r++) {
        uint64_t total = 0;
        for (size_t s = 0; s <= STATUSES; s++)
            total += GET(http_count[r][s]);
        if (!total)
            continue;
        for (size_t k = 0; k < HTTP_BUCKETS; k++)
            put(b, "delayq_http_request_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n", route_names[r],
                http_bounds[k], (unsigned long long)GET(http_bucket[r][k]));
        put(b, "delayq_http_request_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n"
               "delayq_http_request_seconds_sum{route=\"%s\"} %.6f\n"
               "delayq_http_request_seconds_count{route=\"%s\"} %llu\n",
            route_names[r], (unsigned long long)total, route_names[r],
            (double)GET(http_sum_us[r]) / 1e6, route_names[r], (unsigned long long)total);
    }
}

static void render_lateness(struct buf *b)
{
    static const char *const name[LATE_KINDS] = { "delayq_delivery_lateness_ms",
                                                  "delayq_pull_lateness_ms",
                                                  "delayq_callback_lateness_ms",
                                                  "delayq_schedule_fire_lateness_ms" };
    static const char *const help[LATE_KINDS] = {
        "Kafka's acknowledgement of a delivered message minus its due time, milliseconds.",
        "When a pull job was first handed out by a pop minus its due time, milliseconds (a pop "
        "waiting for it: how soon it heard; none waiting: how long the job waited ready).",
        "When a callback job's first call was sent minus its due time, milliseconds.",
        "When a schedule's occurrence that ran was taken for delivery minus its due time, "
        "milliseconds (its delivery follows as any job's).",
    };

    for (int i = 0; i < LATE_KINDS; i++) {
        put(b, "# HELP %s %s\n# TYPE %s histogram\n", name[i], help[i], name[i]);
        for (size_t k = 0; k < LATE_BUCKETS; k++)
            put(b, "%s_bucket{le=\"%lld\"} %llu\n", name[i], (long long)late_bounds[k],
                (unsigned long long)GET(late_bucket[i][k]));
        put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %llu\n%s_count %llu\n", name[i],
            (unsigned long long)GET(late_count[i]), name[i], (unsigned long long)GET(late_sum_ms[i]),
            name[i], (unsigned long long)GET(late_count[i]));
    }
}

static void render_calls(struct buf *b)
{
    pthread_mutex_lock(&calls_mu);
    put(b, "# HELP delayq_callback_calls_total Callback calls by endpoint and status class "
           "(none: no answer came).\n# TYPE delayq_callback_calls_total counter\n");
    for (int i = 0; i <= METRICS_ENDPOINTS_MAX; i++)
        for (int c = 0; c < CALL_CLASSES && call_rows[i].endpoint[0]; c++)
            put(b, "delayq_callback_calls_total{endpoint=\"%s\",class=\"%s\"} %llu\n",
                call_rows[i].endpoint, call_class_names[c], (unsigned long long)call_rows[i].calls[c]);
    put(b, "# HELP delayq_callback_seconds Callback call latency by endpoint.\n"
           "# TYPE delayq_callback_seconds histogram\n");
    for (int i = 0; i <= METRICS_ENDPOINTS_MAX; i++) {
        const struct call_row *r = &call_rows[i];
        uint64_t total = 0;
        if (!r->endpoint[0])
            continue;
        for (int c = 0; c < CALL_CLASSES; c++)
            total += r->calls[c];
        for (size_t k = 0; k < CALL_BUCKETS; k++)
            put(b, "delayq_callback_seconds_bucket{endpoint=\"%s\",le=\"%g\"} %llu\n", r->endpoint,
                call_bounds[k], (unsigned long long)r->bucket[k]);
        put(b, "delayq_callback_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} %llu\n"
               "delayq_callback_seconds_sum{endpoint=\"%s\"} %.6f\n"
               "delayq_callback_seconds_count{endpoint=\"%s\"} %llu\n",
            r->endpoint, (unsigned long long)total, r->endpoint, r->sum_s, r->endpoint,
            (unsigned long long)total);
    }
    put(b, "# HELP delayq_callback_retries_total Failed calls planned again, by endpoint.\n"
           "# TYPE delayq_callback_retries_total counter\n");
    for (int i = 0; i <= METRICS_ENDPOINTS_MAX && call_rows[i].endpoint[0]; i++)
        put(b, "delayq_callback_retries_total{endpoint=\"%s\"} %llu\n", call_rows[i].endpoint,
            (unsigned long long)call_rows[i].retries);
    put(b, "# HELP delayq_callback_dead_letters_total Callback jobs dead-lettered, by endpoint.\n"
           "# TYPE delayq_callback_dead_letters_total counter\n");
    for (int i = 0; i <= METRICS_ENDPOINTS_MAX && call_rows[i].endpoint[0]; i++)
        put(b, "delayq_callback_dead_letters_total{endpoint=\"%s\"} %llu\n", call_rows[i].endpoint,
            (unsigned long long)call_rows[i].dead);
    put(b, "# HELP delayq_callback_in_flight Calls in flight now, by endpoint.\n"
           "# TYPE delayq_callback_in_flight gauge\n");
    for (int i = 0; i <= METRICS_ENDPOINTS_MAX && call_rows[i].endpoint[0]; i++)
        put(b, "delayq_callback_in_flight{endpoint=\"%s\"} %lld\n", call_rows[i].endpoint,
            (long long)call_rows[i].in_flight);
    pthread_mutex_unlock(&calls_mu);
}

static void render_families(struct buf *b)
{
    pthread_mutex_lock(&families_mu);
    for (int f = 0; f < M_FAMILIES; f++) {
        if (!families[f].n)
            continue;
        put(b, "# HELP %s %s\n# TYPE %s gauge\n", family_info[f].name, family_info[f].help,
            family_info[f].name);
        for (int i = 0; i < families[f].n; i++)
            put(b, "%s{%s=\"%s\"} %lld\n", family_info[f].name, family_info[f].label,
                families[f].label[i], (long long)families[f].value[i]);
    }
    pthread_mutex_unlock(&families_mu);
}

char *metrics_render(void)
{
    struct buf b = { .s = malloc(4096), .cap = 4096 };

    if (!b.s)
        return NULL;
    b.s[0] = '\0';
    for (int c = 0; c < M_COUNTERS; c++)
        put(&b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", counter_info[c].name,
            counter_info[c].help, counter_info[c].name, counter_info[c].name,
            (unsigned long long)GET(counters[c]));
    for (int g = 0; g < M_GAUGES; g++)
        put(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", gauge_info[g].name, gauge_info[g].help,
            gauge_info[g].name, gauge_info[g].name, (long long)GET(gauges[g]));
    put(&b, "# HELP delayq_dead_letters_total Messages sent to the dead-letter topic, by reason.\n"
            "# TYPE delayq_dead_letters_total counter\n");
    for (int r = 0; r < DLQ_REASONS; r++)
        put(&b, "delayq_dead_letters_total{reason=\"%s\"} %llu\n", dlq_names[r],
            (unsigned long long)GET(dead[r]));
    put(&b, "# HELP delayq_jobs_skipped_total Due messages of jobs not delivered, by reason.\n"
            "# TYPE delayq_jobs_skipped_total counter\n");
    for (int r = 0; r < SKIP_REASONS; r++)
        put(&b, "delayq_jobs_skipped_total{reason=\"%s\"} %llu\n", skip_names[r],
            (unsigned long long)GET(skipped[r]));
    render_http(&b);
    render_lateness(&b);
    render_calls(&b);
    render_families(&b);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
