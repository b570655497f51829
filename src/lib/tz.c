/* tz: TZif zones and civil dates. The contract is in include/lib/tz.h; the file format is RFC 8536. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/tz.h"

#define DAY 86400
/* No offset reaches 26 hours either way (RFC 8536 allows -25:59:59 .. +25:59:59): every
 * instant that shows a wall time lies within this of it. */
#define MAX_OFFSET (26 * 3600)
#define MAX_FILE (1 << 20)   /* real TZif files are a few KiB */
#define HEADER 44

/* One daylight-saving change of a POSIX TZ rule: its day in a year and the local time of day
 * (may be negative or past 24 h, RFC 8536's extension). */
struct rule {
    char kind;          /* 'J': Jn, day 1..365 never counting Feb 29; 'N': n, day 0..365;
                         * 'M': Mm.w.d, weekday d of week w (5: the last) of month m */
    int day, week, month;
    int32_t time;       /* seconds after local midnight; 02:00 unless given */
};

/* A POSIX TZ string ("CET-1CEST,M3.5.0,M10.5.0/3"): what a zone does after its table. */
struct posix {
    int32_t std, dst;   /* offsets, seconds east (the string counts west) */
    int has_dst;
    struct rule start;  /* daylight saving starts, in standard time */
    struct rule end;    /* and ends, in daylight time */
};

struct tz {
    struct tz *next;    /* the cache */
    char name[256];
    size_t ntrans;
    int64_t *trans;     /* UTC instants, strictly ascending */
    uint8_t *idx;       /* the type in effect from each */
    int32_t utoff[256]; /* per type; type 0 also holds before the first transition */
    int has_footer;
    struct posix footer;
};

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

int64_t tz_days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era;
    unsigned yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

void tz_civil_from_days(int64_t days, int64_t *y, unsigned *m, unsigned *d)
{
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;

    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

unsigned tz_weekday(int64_t days)
{
    return (unsigned)(days >= -4 ? (days + 4) % 7 : (days + 5) % 7 + 6);
}

/* ---- POSIX TZ rules (the footer) ---- */

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

/* A zone abbreviation: "<+1030>" quoted, or three or more letters. The end, or NULL. */
static const char *parse_abbr(const char *s)
{
    const char *p = s;

    if (*p == '<') {
        for (p++; is_alpha(*p) || is_digit(*p) || *p == '+' || *p == '-'; p++)
            ;
        return *p == '>' && p - s >= 4 ? p + 1 : NULL;
    }
    while (is_alpha(*p))
        p++;
    return p - s >= 3 ? p : NULL;
}

/* An unsigned number of up to three digits. */
static const char *parse_num(const char *s, int *out)
{
    int n = 0, v = 0;

    while (is_digit(*s) && n++ < 3)
        v = v * 10 + (*s++ - '0');
    *out = v;
    return n && !is_digit(*s) ? s : NULL;
}

/* [+-]h[h[h]][:mm[:ss]] with hours up to maxh, as signed seconds. */
static const char *parse_hms(const char *s, int maxh, int32_t *out)
{
    int sign = *s == '-' ? -1 : 1, part[3] = { 0, 0, 0 };

    if (*s == '+' || *s == '-')
        s++;
    for (int i = 0; i < 3; i++) {
        if (!(s = parse_num(s, &part[i])) || *s != ':' || i == 2)
            break;
        s++;
    }
    if (!s || part[0] > maxh || part[1] > 59 || part[2] > 59)
        return NULL;
    *out = sign * (part[0] * 3600 + part[1] * 60 + part[2]);
    return s;
}

static const char *parse_rule(const char *s, struct rule *r)
{
    r->kind = *s == 'M' || *s == 'J' ? *s++ : 'N';
    if (!(s = parse_num(s, &r->day)))
        return NULL;
    if (r->kind == 'M') {
        r->month = r->day;
        if (*s != '.' || !(s = parse_num(s + 1, &r->week)) || *s != '.' ||
            !(s = parse_num(s + 1, &r->day)) || r->month < 1 || r->month > 12 ||
            r->week < 1 || r->week > 5 || r->day > 6)
            return NULL;
    } else if (r->day > 365 || (r->kind == 'J' && r->day < 1)) {
        return NULL;
    }
    r->time = 7200;
    return *s == '/' ? parse_hms(s + 1, 167, &r->time) : s;
}

/* ",start[/time],end[/time]" to the end of the string. */
static int parse_posix_rules(const char *s, struct posix *p)
{
    if (*s != ',' || !(s = parse_rule(s + 1, &p->start)) || *s != ',' ||
        !(s = parse_rule(s + 1, &p->end)))
        return -1;
    return *s ? -1 : 0;
}

/* "std offset [dst [offset] [,start[/time],end[/time]]]"; 0, or -1 when it is not one. Without
 * rules, daylight saving follows the US rules (as glibc does). */
static int parse_posix(const char *s, struct posix *p)
{
    int32_t west;

    memset(p, 0, sizeof(*p));
    if (!(s = parse_abbr(s)) || !(s = parse_hms(s, 25, &west)))
        return -1;
    p->std = -west;
    if (!*s)
        return 0;
    if (!(s = parse_abbr(s)))
        return -1;
    p->has_dst = 1;
    p->dst = p->std + 3600;
    if (*s && *s != ',') {
        if (!(s = parse_hms(s, 25, &west)))
            return -1;
        p->dst = -west;
    }
    if (!*s)
        return parse_posix_rules(",M3.2.0,M11.1.0", p);
    return parse_posix_rules(s, p);
}

static int is_leap(int64_t y)
{
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

/* The day (since 1970-01-01) of a rule's change in year y. */
static int64_t rule_day(const struct rule *r, int64_t y)
{
    int64_t jan1 = tz_days_from_civil(y, 1, 1), first, day, end;

    if (r->kind == 'J')
        return jan1 + r->day - 1 + (is_leap(y) && r->day >= 60);
    if (r->kind == 'N')
        return jan1 + r->day;
    first = tz_days_from_civil(y, (unsigned)r->month, 1);
    end = r->month == 12 ? tz_days_from_civil(y + 1, 1, 1)
                         : tz_days_from_civil(y, (unsigned)r->month + 1, 1);
    day = first + (r->day - (int)tz_weekday(first) + 7) % 7 + (int64_t)(r->week - 1) * 7;
    while (day >= end)
        day -= 7;
    return day;
}

/* The UTC instants daylight saving starts and ends in year y (of local standard time). */
static int64_t posix_start(const struct posix *p, int64_t y)
{
    return rule_day(&p->start, y) * DAY + p->start.time - p->std;
}

static int64_t posix_end(const struct posix *p, int64_t y)
{
    return rule_day(&p->end, y) * DAY + p->end.time - p->dst;
}

static int64_t year_of(int64_t t)
{
    int64_t y;
    unsigned m, d;

    tz_civil_from_days(floor_div(t, DAY), &y, &m, &d);
    return y;
}

/* In the southern hemisphere (and Dublin's negative saving) the start comes after the end. */
static int32_t posix_offset(const struct posix *p, int64_t t)
{
    int64_t y, start, end;

    if (!p->has_dst)
        return p->std;
    y = year_of(t + p->std);
    start = posix_start(p, y);
    end = posix_end(p, y);
    if (start < end)
        return t >= start && t < end ? p->dst : p->std;
    return t >= end && t < start ? p->std : p->dst;
}

static int64_t posix_next(const struct posix *p, int64_t t)
{
    int64_t y = year_of(t + p->std), best = INT64_MAX;

    for (int64_t k = y - 1; k <= y + 1; k++) {
        int64_t start = posix_start(p, k), end = posix_end(p, k);
        if (start > t && start < best)
            best = start;
        if (end > t && end < best)
            best = end;
    }
    return best;
}

/* ---- Offsets and wall time ---- */

/* Stay clear of overflow: ±2^50 s is some 35 million years. */
static int64_t clamp(int64_t t)
{
    const int64_t lim = (int64_t)1 << 50;

    return t < -lim ? -lim : t > lim ? lim : t;
}

/* The index of the first transition after t (ntrans when none). */
static size_t upper_bound(const struct tz *z, int64_t t)
{
    size_t lo = 0, hi = z->ntrans;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int32_t tz_offset(const struct tz *z, int64_t t)
{
    size_t i;

    t = clamp(t);
    if (z->has_footer && (!z->ntrans || t >= z->trans[z->ntrans - 1]))
        return posix_offset(&z->footer, t);
    i = upper_bound(z, t);
    return i ? z->utoff[z->idx[i - 1]] : z->utoff[0];
}

int64_t tz_next_change(const struct tz *z, int64_t t)
{
    t = clamp(t);
    if (z->ntrans && t < z->trans[z->ntrans - 1])
        return z->trans[upper_bound(z, t)];
    if (!z->has_footer || !z->footer.has_dst)
        return INT64_MAX;
    return posix_next(&z->footer, t);
}

/* Every offset in effect within MAX_OFFSET of local, tried as local - offset: those that give
 * back their own offset are the instants showing local. None: local is in a gap, which began
 * at the change whose jump forward skipped it. */
int tz_to_utc(const struct tz *z, int64_t local, int64_t *first, int64_t *second)
{
    int64_t t = (local = clamp(local)) - MAX_OFFSET, gap = INT64_MIN, found[2];
    int32_t offs[16], before = tz_offset(z, t);
    int noffs = 1, n = 0;

    offs[0] = before;
    while (noffs < 16 && (t = tz_next_change(z, t)) <= local + MAX_OFFSET) {
        int32_t after = tz_offset(z, t);
        if (gap == INT64_MIN && after > before && t + before <= local && local < t + after)
            gap = t;
        offs[noffs++] = before = after;
    }
    for (int i = 0; i < noffs && n < 2; i++) {
        int64_t c = local - offs[i];
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= offs[j] == offs[i];
        if (!seen && tz_offset(z, c) == offs[i])
            found[n++] = c;
    }
    if (n == 0)
        *first = gap != INT64_MIN ? gap : local - offs[noffs - 1];
    else if (n == 1 || found[0] < found[1])
        *first = found[0], *second = found[n - 1];
    else
        *first = found[1], *second = found[0];
    return n;
}

int tz_format(const struct tz *z, int64_t t_ms, char *out, size_t outlen)
{
    int64_t t = floor_div(t_ms, 1000), local = t + tz_offset(z, t), days = floor_div(local, DAY);
    int32_t off = tz_offset(z, t), a = off < 0 ? -off : off;
    int sod = (int)(local - days * DAY), ms = (int)((t_ms % 1000 + 1000) % 1000);
    char zone[16];
    int64_t y;
    unsigned m, d;

    tz_civil_from_days(days, &y, &m, &d);
    if (a % 60)
        snprintf(zone, sizeof(zone), "%c%02d:%02d:%02d", off < 0 ? '-' : '+', a / 3600,
                 a / 60 % 60, a % 60);
    else
        snprintf(zone, sizeof(zone), "%c%02d:%02d", off < 0 ? '-' : '+', a / 3600, a / 60 % 60);
    return snprintf(out, outlen, "%04lld-%02u-%02uT%02d:%02d:%02d.%03d%s", (long long)y, m, d,
                    sod / 3600, sod / 60 % 60, sod % 60, ms, zone);
}

const char *tz_name(const struct tz *z)
{
    return z->name;
}

/* ---- TZif files ---- */

struct counts {
    uint32_t isut, isstd, leap, time, type, chars;
};

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* A header's version (1, 2, ...) and counts; -1 when p does not start one. */
static int read_header(const unsigned char *p, size_t len, struct counts *c)
{
    if (len < HEADER || memcmp(p, "TZif", 4) != 0)
        return -1;
    c->isut = be32(p + 20);
    c->isstd = be32(p + 24);
    c->leap = be32(p + 28);
    c->time = be32(p + 32);
    c->type = be32(p + 36);
    c->chars = be32(p + 40);
    return p[4] ? p[4] - '0' : 1;
}

/* The size of the data block after a header, with tsize-byte times; 0 when the counts are not
 * those of a zone (limits far above any real file's keep the sum from overflowing). */
static size_t block_size(const struct counts *c, size_t tsize)
{
    if (c->type < 1 || c->type > 256 || c->time > 1u << 20 || c->chars > 1u << 16 ||
        c->leap > 1u << 16 || (c->isstd && c->isstd != c->type) ||
        (c->isut && c->isut != c->type))
        return 0;
    return c->time * (tsize + 1) + c->type * 6 + c->chars + c->leap * (tsize + 4) + c->isstd +
           c->isut;
}

/* The zone of a data block; NULL when its values are inconsistent. */
static struct tz *read_block(const unsigned char *p, const struct counts *c, size_t tsize)
{
    struct tz *z = calloc(1, sizeof(*z) + c->time * (sizeof(int64_t) + 1));
    const unsigned char *types = p + c->time * (tsize + 1);

    if (!z)
        return NULL;
    z->ntrans = c->time;
    z->trans = (int64_t *)(z + 1);
    z->idx = (uint8_t *)(z->trans + c->time);
    for (size_t i = 0; i < c->time; i++) {
        z->trans[i] = tsize == 8 ? be64(p + i * 8) : (int32_t)be32(p + i * 4);
        z->idx[i] = p[c->time * tsize + i];
        if ((i && z->trans[i] <= z->trans[i - 1]) || z->idx[i] >= c->type)
            goto bad;
    }
    for (size_t i = 0; i < c->type; i++) {
        z->utoff[i] = (int32_t)be32(types + i * 6);
        if (z->utoff[i] <= -MAX_OFFSET || z->utoff[i] >= MAX_OFFSET || types[i * 6 + 4] > 1 ||
            types[i * 6 + 5] >= c->chars)
            goto bad;
    }
    return z;
bad:
    free(z);
    return NULL;
}

/* The footer "\n<TZ string>\n" after the v2+ data; 0 when there is none or it was read. */
static int read_footer(const unsigned char *p, size_t len, struct tz *z)
{
    const unsigned char *nl;
    char s[256];
    size_t n;

    if (len == 0)
        return 0;
    if (p[0] != '\n' || !(nl = memchr(p + 1, '\n', len - 1)) ||
        (n = (size_t)(nl - p - 1)) >= sizeof(s))
        return -1;
    memcpy(s, p + 1, n);
    s[n] = '\0';
    z->has_footer = n > 0;
    return n ? parse_posix(s, &z->footer) : 0;
}

/* The zone in a file's bytes: the v2+ (64-bit) block when there is one, else the v1 block. */
static struct tz *parse_tzif(const unsigned char *p, size_t len, const char **why)
{
    struct counts c;
    size_t off = 0, tsize = 4, size;
    struct tz *z;
    int version = read_header(p, len, &c);

    *why = "is not a TZif file";
    if (version < 0)
        return NULL;
    *why = "is a damaged TZif file";
    if (version >= 2) {
        if (!(size = block_size(&c, 4)) || size > len - HEADER ||
            read_header(p + HEADER + size, len - HEADER - size, &c) < 0)
            return NULL;
        off = HEADER + size;
        tsize = 8;
    }
    off += HEADER;
    if (!(size = block_size(&c, tsize)) || size > len - off)
        return NULL;
    if (c.leap) {
        *why = "counts leap seconds (\"right/\" zones are not supported)";
        return NULL;
    }
    if (!(z = read_block(p + off, &c, tsize)))
        return NULL;
    if (tsize == 8 && read_footer(p + off + size, len - off - size, z) < 0) {
        *why = "has a TZ rule that cannot be read";
        free(z);
        return NULL;
    }
    return z;
}

/* A regular file's bytes (malloc'd); -1 with errno when there is none (EISDIR for anything
 * but a file, EFBIG when it is too large to be a zone). */
static int slurp(const char *path, unsigned char **buf, size_t *len)
{
    FILE *f = fopen(path, "rbe");
    struct stat st;
    int e = 0;

    *buf = NULL;
    if (!f)
        return -1;
    if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode))
        e = EISDIR;
    else if (!(*buf = malloc(MAX_FILE + 1)))
        e = ENOMEM;
    else if ((*len = fread(*buf, 1, MAX_FILE + 1, f)) > MAX_FILE)
        e = EFBIG;
    else if (ferror(f))
        e = errno ? errno : EIO;
    fclose(f);
    if (e) {
        free(*buf);
        errno = e;
        return -1;
    }
    return 0;
}

/* A zone read from $TZDIR or the system's zoneinfo; NULL with err. */
static struct tz *load(const char *name, char *err, size_t errlen)
{
    const char *dir = getenv("TZDIR"), *why;
    char path[4096], ebuf[128];
    unsigned char *buf = NULL;
    size_t len = 0;
    struct tz *z;
    int rc = -1;

    if (!dir || !*dir)
        dir = "/usr/share/zoneinfo";
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        errno = ENAMETOOLONG;
    else
        rc = slurp(path, &buf, &len);
    if (rc < 0) {
        if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR || errno == ENAMETOOLONG)
            snprintf(err, errlen, "unknown time zone \"%s\"", name);
        else if (errno == EFBIG)
            snprintf(err, errlen, "time zone \"%s\" is not a TZif file", name);
        else
            snprintf(err, errlen, "time zone \"%s\": cannot read %s: %s", name, path,
                     strerror_r(errno, ebuf, sizeof(ebuf)));
        return NULL;
    }
    z = parse_tzif(buf, len, &why);
    free(buf);
    if (!z) {
        snprintf(err, errlen, "time zone \"%s\" %s", name, why);
        return NULL;
    }
    snprintf(z->name, sizeof(z->name), "%s", name);
    return z;
}

/* [A-Za-z0-9_+-] components between single '/'s; no ".": no way out of the zone directory. */
static int valid_name(const char *name)
{
    size_t n = strlen(name);

    if (n < 1 || n > 255 || name[0] == '/' || name[n - 1] == '/' || strstr(name, "//"))
        return 0;
    for (const char *p = name; *p; p++)
        if (!is_alpha(*p) && !is_digit(*p) && !strchr("_+-/", *p))
            return 0;
    return 1;
}

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tz *cache;
static struct tz utc = { .name = "UTC" };

const struct tz *tz_get(const char *name, char *err, size_t errlen)
{
    struct tz *z;

    if (!valid_name(name)) {
        snprintf(err, errlen, "invalid time zone name \"%.64s\" (expected letters, digits and "
                 "\"_+-\" in components between '/', like \"Europe/Berlin\")", name);
        return NULL;
    }
    if (strcmp(name, "UTC") == 0)
        return &utc;
    pthread_mutex_lock(&cache_mu);
    for (z = cache; z && strcmp(z->name, name) != 0; z = z->next)
        ;
    if (!z && (z = load(name, err, errlen))) {
        z->next = cache;
        cache = z;
    }
    pthread_mutex_unlock(&cache_mu);
    return z;
}
