/* config_read: the readers of the config keys that are more than one string, integer or bool:
 * addresses, the librdkafka properties, the levels and partition groups (kept for the checks of
 * the whole file), the log level, the pull topics, and the callbacks' secrets, networks, retry
 * and endpoints; and the secrets read from files. Part of config: the contract is in
 * include/core/config.h, the shared inside in include/core/config_read.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config_read.h"
#include "lib/netaddr.h"
#include "lib/sign.h"

/* "host:port" or "[v6 address]:port", the port a decimal 1-65535: anything else would bind
 * or reach another port than the one written, or a random one. 0, or -1 with why set. */
static int host_port_valid(const char *v, char *why, size_t whylen)
{
    const char *colon = strrchr(v, ':');
    long port = 0;

    if (!colon || colon == v || (strchr(v, ':') != colon && (v[0] != '[' || colon[-1] != ']'))) {
        snprintf(why, whylen, "must be a string \"host:port\" (an IPv6 host in brackets: \"[::1]:9277\")");
        return -1;
    }
    for (const char *p = colon + 1; *p; p++)
        port = *p >= '0' && *p <= '9' && port <= 65535 ? port * 10 + (*p - '0') : 65536;
    if (port < 1 || port > 65535) {
        snprintf(why, whylen, "port \"%s\" must be a number from 1 to 65535", colon + 1);
        return -1;
    }
    return 0;
}

/* A list of 1 to CONFIG_ADDRS_MAX "host:port" strings into out and *n. */
static int set_addrs(config_setting_t *s, char out[][CONFIG_STR_MAX], int *n, char *why,
                     size_t whylen)
{
    int len = config_setting_length(s);
    char what[256];

    if (!config_setting_is_aggregate(s) || len < 1 || len > CONFIG_ADDRS_MAX) {
        snprintf(why, whylen, "must be a list of 1 to %d \"host:port\" strings", CONFIG_ADDRS_MAX);
        return -1;
    }
    for (int i = 0; i < len; i++) {
        const char *v = config_setting_get_string_elem(s, i);
        if (!v || strlen(v) >= CONFIG_STR_MAX) {
            snprintf(why, whylen, "element %d must be a \"host:port\" string", i);
            return -1;
        }
        if (host_port_valid(v, what, sizeof(what)) < 0) {
            snprintf(why, whylen, "element %d: %s", i, what);
            return -1;
        }
        snprintf(out[i], CONFIG_STR_MAX, "%s", v);
    }
    *n = len;
    return 0;
}

/* A secret (or a list of them while keys rotate, the newest first) in clear, or the path of a
 * file holding one (or a list of paths): "whsec_" and base64, checked here (sign.h). */
static int read_cb_secrets(config_setting_t *s, int from_file, char out[][CONFIG_STR_MAX], int *n,
                           char *why, size_t whylen)
{
    int list = config_setting_is_aggregate(s), len = list ? config_setting_length(s) : 1;
    struct sign_key key;
    char kerr[128];

    if (len < 1 || len + *n > CONFIG_SECRETS_MAX) {
        snprintf(why, whylen, "must be a string or a list of 1 to %d strings (secret and "
                 "secret_file together)", CONFIG_SECRETS_MAX);
        return -1;
    }
    for (int i = 0; i < len; i++) {
        const char *v = list ? config_setting_get_string_elem(s, i) : config_setting_get_string(s);
        char *dst = out[*n];
        if (!v || !*v || strlen(v) >= CONFIG_STR_MAX) {
            snprintf(why, whylen, "element %d must be a %s", i, from_file ? "path" : "secret");
            return -1;
        }
        if (from_file && config_read_secret(v, dst, CONFIG_STR_MAX, why, whylen) < 0)
            return -1;
        if (!from_file)
            snprintf(dst, CONFIG_STR_MAX, "%s", v);
        if (sign_key_parse(dst, &key, kerr, sizeof(kerr)) < 0) {
            snprintf(why, whylen, "element %d: %s", i, kerr);
            return -1;
        }
        (*n)++;
    }
    return 0;
}

/* An integer member of a group setting: 0 when absent, 1 set, -1 out of [lo, hi] (why set). */
static int member_int(config_setting_t *g, const char *name, int64_t lo, int64_t hi, int64_t *out,
                      char *why, size_t whylen)
{
    config_setting_t *m = config_setting_get_member(g, name);

    if (!m)
        return 0;
    if ((config_setting_type(m) != CONFIG_TYPE_INT && config_setting_type(m) != CONFIG_TYPE_INT64) ||
        config_setting_get_int64(m) < lo || config_setting_get_int64(m) > hi) {
        snprintf(why, whylen, "%s: must be an integer from %lld to %lld", name, (long long)lo,
                 (long long)hi);
        return -1;
    }
    *out = config_setting_get_int64(m);
    return 1;
}

/* 0 when every member of group g is one of names (NULL-terminated), else -1 naming it. */
static int only_members(config_setting_t *g, const char *const *names, char *why, size_t whylen)
{
    for (int i = 0; i < config_setting_length(g); i++) {
        const char *name = config_setting_name(config_setting_get_elem(g, (unsigned)i));
        const char *const *p = names;
        while (*p && strcmp(*p, name) != 0)
            p++;
        if (!*p) {
            snprintf(why, whylen, "%s: unknown key", name);
            return -1;
        }
    }
    return 0;
}

/* One named endpoint: { url = "https://..."; secret or secret_file; timeout_ms;
 * max_concurrency; rate_per_s; }. */
static int set_endpoint(config_setting_t *s, struct config_endpoint *e, char *why, size_t whylen)
{
    static const char *const names[] = { "url", "secret", "secret_file", "timeout_ms",
                                         "max_concurrency", "rate_per_s", NULL };
    const char *url = NULL, *name = config_setting_name(s);
    config_setting_t *m;

    if (!config_setting_is_group(s) || only_members(s, names, why, whylen) < 0) {
        if (!config_setting_is_group(s))
            snprintf(why, whylen, "must be a group { url = \"https://...\"; ... }");
        return -1;
    }
    snprintf(e->name, sizeof(e->name), "%s", name);
    if (!config_setting_lookup_string(s, "url", &url) || strlen(url) >= sizeof(e->url) ||
        (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        snprintf(why, whylen, "url: must be an http:// or https:// URL of at most %zu bytes",
                 sizeof(e->url) - 1);
        return -1;
    }
    snprintf(e->url, sizeof(e->url), "%s", url);
    if (((m = config_setting_get_member(s, "secret")) &&
         read_cb_secrets(m, 0, e->secrets, &e->nsecrets, why, whylen) < 0) ||
        ((m = config_setting_get_member(s, "secret_file")) &&
         read_cb_secrets(m, 1, e->secrets, &e->nsecrets, why, whylen) < 0))
        return -1;
    if (member_int(s, "timeout_ms", CALL_TIMEOUT_MIN_MS, CALL_TIMEOUT_MAX_MS, &e->limits.timeout_ms,
                   why, whylen) < 0 ||
        member_int(s, "max_concurrency", 1, CALL_CONCURRENCY_MAX, &e->limits.max_concurrency, why,
                   whylen) < 0 ||
        member_int(s, "rate_per_s", 0, CALL_RATE_MAX, &e->limits.rate_per_s, why, whylen) < 0)
        return -1;
    return 0;
}

int config_read_log_level(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    const char *v = config_setting_get_string(s);

    if (!v || log_parse_level(v, &rd->cfg->log.level) < 0) {
        snprintf(why, whylen, "must be one of \"debug\", \"info\", \"warn\", \"error\"");
        return -1;
    }
    return 0;
}

int config_read_listen(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    const char *v = config_setting_get_string(s);

    if (!v || strlen(v) >= sizeof(rd->cfg->http.listen)) {
        snprintf(why, whylen, "must be a string \"host:port\" (an IPv6 host in brackets: \"[::1]:9277\")");
        return -1;
    }
    if (host_port_valid(v, why, whylen) < 0)
        return -1;
    snprintf(rd->cfg->http.listen, sizeof(rd->cfg->http.listen), "%s", v);
    return 0;
}

int config_read_sentinels(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    return set_addrs(s, rd->cfg->redis.sentinels, &rd->cfg->redis.nsentinels, why, whylen);
}

int config_read_cluster(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    return set_addrs(s, rd->cfg->redis.cluster, &rd->cfg->redis.ncluster, why, whylen);
}

/* Pull topics: names or fnmatch patterns ("orders.*"), at most CONFIG_PULL_TOPICS_MAX. */
int config_read_pull_topics(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    int n = config_setting_length(s);

    if (!config_setting_is_aggregate(s) || n > CONFIG_PULL_TOPICS_MAX) {
        snprintf(why, whylen, "must be a list of at most %d topic names or patterns",
                 CONFIG_PULL_TOPICS_MAX);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const char *v = config_setting_get_string_elem(s, i);
        if (!v || !*v || strlen(v) >= CONFIG_STR_MAX) {
            snprintf(why, whylen, "element %d must be a topic name or pattern", i);
            return -1;
        }
        snprintf(rd->cfg->pull.topics[i], CONFIG_STR_MAX, "%s", v);
    }
    rd->cfg->pull.ntopics = n;
    return 0;
}

int config_read_cb_secret(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    struct config *cfg = rd->cfg;

    if (!rd->clear_secret[0]) {
        snprintf(rd->clear_secret, sizeof(rd->clear_secret), "callbacks.secret");
        snprintf(rd->clear_secret_fix, sizeof(rd->clear_secret_fix), "callbacks.secret_file");
    }
    return read_cb_secrets(s, 0, cfg->callbacks.secrets, &cfg->callbacks.nsecrets, why, whylen);
}

int config_read_cb_secret_file(config_setting_t *s, struct config_read *rd, char *why,
                               size_t whylen)
{
    struct config *cfg = rd->cfg;

    return read_cb_secrets(s, 1, cfg->callbacks.secrets, &cfg->callbacks.nsecrets, why, whylen);
}

/* A list of networks ("10.1.0.0/16", "fd00::/8", or an address alone) into nets and *nnets. */
static int read_networks(config_setting_t *s, char (*nets)[CONFIG_NAME_MAX], int *nnets, char *why,
                         size_t whylen)
{
    int n = config_setting_length(s);

    if (!config_setting_is_aggregate(s) || n > CONFIG_NETWORKS_MAX) {
        snprintf(why, whylen, "must be a list of at most %d networks", CONFIG_NETWORKS_MAX);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const char *v = config_setting_get_string_elem(s, i);
        struct netaddr_net net;
        char err[128];

        if (!v || strlen(v) >= CONFIG_NAME_MAX ||
            netaddr_net_parse(v, &net, err, sizeof(err)) < 0) {
            snprintf(why, whylen, "element %d must be a network such as \"10.1.0.0/16\" or "
                     "\"fd00::/8\", or an address", i);
            return -1;
        }
        snprintf(nets[i], CONFIG_NAME_MAX, "%s", v);
    }
    *nnets = n;
    return 0;
}

/* Networks whose addresses callbacks may call though private. */
int config_read_cb_networks(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    return read_networks(s, rd->cfg->callbacks.networks, &rd->cfg->callbacks.nnetworks, why, whylen);
}

/* Networks whose clients use the compatibility routes without a token. */
int config_read_compat_networks(config_setting_t *s, struct config_read *rd, char *why,
                                size_t whylen)
{
    return read_networks(s, rd->cfg->compat.networks, &rd->cfg->compat.nnetworks, why, whylen);
}

int config_read_cb_retry(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    static const char *const names[] = { "min_backoff_ms", "max_backoff_ms", "max_attempts",
                                         "max_retry_duration_ms", NULL };
    struct config_call_retry *r = &rd->cfg->callbacks.retry;

    if (!config_setting_is_group(s)) {
        snprintf(why, whylen, "must be a group { min_backoff_ms = ...; ... }");
        return -1;
    }
    if (only_members(s, names, why, whylen) < 0 ||
        member_int(s, "min_backoff_ms", 10, CALL_BACKOFF_MAX_MS, &r->min_backoff_ms, why, whylen) < 0 ||
        member_int(s, "max_backoff_ms", 10, CALL_BACKOFF_MAX_MS, &r->max_backoff_ms, why, whylen) < 0 ||
        member_int(s, "max_attempts", 1, CALL_ATTEMPTS_MAX, &r->max_attempts, why, whylen) < 0 ||
        member_int(s, "max_retry_duration_ms", 0, CALL_RETRY_DURATION_MAX_MS,
                   &r->max_retry_duration_ms, why, whylen) < 0)
        return -1;
    if (r->max_backoff_ms < r->min_backoff_ms) {
        snprintf(why, whylen, "max_backoff_ms must not be below min_backoff_ms");
        return -1;
    }
    return 0;
}

int config_read_cb_endpoints(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    int n = config_setting_length(s);
    char sub[200];

    if (!config_setting_is_group(s) || n > CONFIG_ENDPOINTS_MAX) {
        snprintf(why, whylen, "must be a group of at most %d endpoints { billing = { url = ...; }; }",
                 CONFIG_ENDPOINTS_MAX);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        if (strlen(config_setting_name(e)) >= CONFIG_NAME_MAX) {
            snprintf(why, whylen, "%.40s...: a name of at most %d characters", config_setting_name(e),
                     CONFIG_NAME_MAX - 1);
            return -1;
        }
        if (set_endpoint(e, &rd->cfg->callbacks.endpoints[i], sub, sizeof(sub)) < 0) {
            snprintf(why, whylen, "%s: %s", config_setting_name(e), sub);
            return -1;
        }
    }
    rd->cfg->callbacks.nendpoints = n;
    return 0;
}

int config_read_props(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    int n = config_setting_length(s);

    if (!config_setting_is_aggregate(s) || n > CONFIG_PROPS_MAX) {
        snprintf(why, whylen, "must be a list of at most %d \"name=value\" strings", CONFIG_PROPS_MAX);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const char *v = config_setting_get_string_elem(s, i);
        const char *eq = v ? strchr(v, '=') : NULL;
        if (!eq || eq == v || strlen(v) >= CONFIG_STR_MAX) {
            snprintf(why, whylen, "element %d must be a \"name=value\" string", i);
            return -1;
        }
        snprintf(rd->cfg->kafka.properties[i], CONFIG_STR_MAX, "%s", v);
    }
    rd->cfg->kafka.nproperties = n;
    return 0;
}

int config_read_levels(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    int n = config_setting_length(s);

    if (!config_setting_is_aggregate(s) || n < 1 || n > LEVELS_MAX) {
        snprintf(why, whylen, "must be a list of 1 to %d durations like \"5s\"", LEVELS_MAX);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!(rd->level_names[i] = config_setting_get_string_elem(s, i))) {
            snprintf(why, whylen, "element %d must be a string like \"5s\"", i);
            return -1;
        }
    }
    rd->nlevel_names = n;
    return 0;
}

int config_read_groups(config_setting_t *s, struct config_read *rd, char *why, size_t whylen)
{
    if (!config_setting_is_aggregate(s) || config_setting_length(s) < 1 ||
        config_setting_length(s) > CONFIG_GROUPS_MAX) {
        snprintf(why, whylen, "must be a list of arrays of partition numbers");
        return -1;
    }
    rd->groups = s;
    return 0;
}

int config_read_secret(const char *path, char *out, size_t outlen, char *why, size_t whylen)
{
    char buf[CONFIG_STR_MAX + 2];
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    ssize_t n = -1;

    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        n = read(fd, buf, sizeof(buf));
    else if (fd >= 0)
        errno = EINVAL;   /* not a regular file */
    if (fd >= 0)
        close(fd);
    if (n < 0) {
        snprintf(why, whylen, "cannot read %s: %s", path,
                 errno == EINVAL ? "not a regular file" : strerror(errno));
        return -1;
    }
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if ((size_t)n >= outlen) {
        snprintf(why, whylen, "%s holds more than %zu bytes", path, outlen - 1);
        return -1;
    }
    for (ssize_t i = 0; i < n; i++) {
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f) {
            snprintf(why, whylen, "%s holds a control character (only its last line end is "
                     "dropped)", path);
            return -1;
        }
    }
    if (n == 0) {
        snprintf(why, whylen, "%s is empty", path);
        return -1;
    }
    memcpy(out, buf, (size_t)n);
    out[n] = '\0';
    return 0;
}

