/* cron: parsing and next fire times. The contract is in include/lib/cron.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "lib/cron.h"

#define DAY 86400
/* The Gregorian calendar repeats every 400 years (146097 days, a whole number of weeks): an
 * expression that matches no second in that long matches none ever. */
#define HORIZON_DAYS 146097
/* Twice the largest offset a zone may have (26 h): the offsets in effect within this of an
 * instant bound the wall times that can show near it. */
#define SPAN (52 * 3600)
/* Years 1..9999, far from overflow. */
#define MIN_SECONDS (-62135596800LL)
#define MAX_SECONDS 253402300799LL
/* No time: times before 1970 are negative, so -1 only means none in the public answers. */
#define NONE INT64_MIN

struct field {
    const char *name;
    int lo, hi;
    const char *const *names;   /* by value from lo, or NULL */
};

static const char *const month_names[] = { "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL",
                                           "AUG", "SEP", "OCT", "NOV", "DEC", NULL };
static const char *const day_names[] = { "SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", NULL };

/* In the order of a six-field expression; five fields start at "minute". Weekday 7 is
 * Sunday again, folded onto 0 once parsed. */
static const struct field fields[6] = {
    { "second", 0, 59, NULL },       { "minute", 0, 59, NULL },
    { "hour", 0, 23, NULL },         { "day-of-month", 1, 31, NULL },
    { "month", 1, 12, month_names }, { "day-of-week", 0, 7, day_names },
};

/* The field being parsed, for messages. */
struct ctx {
    const struct field *f;
    int pos, count;   /* its place (from 1) among count fields */
    char *err;
    size_t errlen;
};

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* "cron: field "hour" (the 2nd of 5): <what>"; always -1. */
__attribute__((format(printf, 2, 3)))
static int fail(const struct ctx *x, const char *fmt, ...)
{
    static const char *const nth[] = { "", "st", "nd", "rd", "th", "th", "th" };
    int n = snprintf(x->err, x->errlen, "cron: field \"%s\" (the %d%s of %d): ", x->f->name,
                     x->pos, nth[x->pos], x->count);
    va_list ap;

    if (n >= 0 && (size_t)n < x->errlen) {
        va_start(ap, fmt);
        vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The Quartz extensions that Vixie cron lacks; always -1. */
static int unsupported(const struct ctx *x, char what)
{
    snprintf(x->err, x->errlen, "cron: %s is not supported",
             what == 'L' ? "\"L\" (last day)" : what == 'W' ? "\"W\" (nearest weekday)"
                                                            : "\"#\" (nth weekday)");
    return -1;
}

/* A number or a name at s, in *v; the end, or NULL with the error. */
static const char *parse_value(const struct ctx *x, const char *s, const char *end, int *v)
{
    const char *q = s;

    if (q < end && is_digit(*q)) {
        for (*v = 0; q < end && is_digit(*q); q++)
            *v = *v < 100000 ? *v * 10 + (*q - '0') : *v;
        if (q < end && (*q == 'L' || *q == 'l' || *q == 'W' || *q == 'w'))
            return unsupported(x, (char)(*q & ~0x20)), NULL;
        return q;
    }
    while (q < end && is_alpha(*q))
        q++;
    if (q == s)
        return fail(x, "expected a number at \"%.*s\"", (int)(end - s), s), NULL;
    if ((q - s == 1 || (q - s == 2 && (s[1] == 'W' || s[1] == 'w'))) && (*s == 'L' || *s == 'l'))
        return unsupported(x, 'L'), NULL;
    if (q - s == 1 && (*s == 'W' || *s == 'w'))
        return unsupported(x, 'W'), NULL;
    for (int i = 0; x->f->names && x->f->names[i]; i++)
        if (q - s == 3 && strncasecmp(s, x->f->names[i], 3) == 0) {
            *v = x->f->lo + i;
            return q;
        }
    if (x->f->names)
        return fail(x, "\"%.*s\" is not a %s name", (int)(q - s), s,
                    x->f->lo ? "month" : "weekday"), NULL;
    return fail(x, "\"%.*s\" is not a number", (int)(q - s), s), NULL;
}

/* A value within the field's range, at s. */
static const char *parse_bound(const struct ctx *x, const char *s, const char *end, int *v)
{
    const char *q = parse_value(x, s, end, v);

    if (q && (*v < x->f->lo || *v > x->f->hi))
        return fail(x, "%.*s is out of range %d-%d", (int)(q - s), s, x->f->lo, x->f->hi), NULL;
    return q;
}

/* "/s" at s, 1 up to the field's span. */
static const char *parse_step(const struct ctx *x, const char *s, const char *end, int *step)
{
    const char *q = s;
    int span = x->f->hi - x->f->lo + 1;

    for (*step = 0; q < end && is_digit(*q); q++)
        *step = *step < 100000 ? *step * 10 + (*q - '0') : *step;
    if (q == s)
        return fail(x, "a step needs a number after \"/\""), NULL;
    if (*step < 1 || *step > span)
        return fail(x, "step %.*s is out of range 1-%d", (int)(q - s), s, span), NULL;
    return q;
}

/* One element of a list: "*", "?", a, a-b, each with an optional "/s". */
static int parse_element(const struct ctx *x, const char *s, const char *end, uint64_t *bits)
{
    int a = x->f->lo, b = x->f->hi, step = 1;
    const char *q = s;

    if (s == end)
        return fail(x, "an element of the list is empty");
    if (*q == '?') {
        if (x->f != &fields[3] && x->f != &fields[5])
            return fail(x, "\"?\" is only allowed in day-of-month and day-of-week");
        if (end - q != 1)
            return fail(x, "\"?\" takes no range or step");
        q++;
    } else if (*q == '*') {
        q++;
    } else {
        if (!(q = parse_bound(x, q, end, &a)))
            return -1;
        b = q < end && *q == '/' ? x->f->hi : a;
        if (q < end && *q == '-' && !(q = parse_bound(x, q + 1, end, &b)))
            return -1;
        if (a > b)
            return fail(x, "range %.*s runs backwards", (int)(q - s), s);
    }
    if (q < end && *q == '/' && !(q = parse_step(x, q + 1, end, &step)))
        return -1;
    if (q != end)
        return fail(x, "unexpected \"%.*s\"", (int)(end - q), q);
    for (int v = a; v <= b; v += step)
        *bits |= (uint64_t)1 << v;
    return 0;
}

/* A whole field: elements separated by ",". */
static int parse_field(const struct ctx *x, const char *s, const char *end, uint64_t *bits)
{
    *bits = 0;
    for (;;) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        if (parse_element(x, s, comma ? comma : end, bits) < 0)
            return -1;
        if (!comma)
            return 0;
        s = comma + 1;
    }
}

static const char *const macros[][2] = {
    { "@yearly", "0 0 1 1 *" }, { "@annually", "0 0 1 1 *" }, { "@monthly", "0 0 1 * *" },
    { "@weekly", "0 0 * * 0" }, { "@daily", "0 0 * * *" },    { "@midnight", "0 0 * * *" },
    { "@hourly", "0 * * * *" },
};

static int parse_macro(const char *s, struct cron *out, char *err, size_t errlen)
{
    size_t n = 0;

    while (s[n] && !is_space(s[n]))
        n++;
    for (const char *rest = s + n; *rest; rest++)
        if (!is_space(*rest)) {
            snprintf(err, errlen, "cron: %.*s takes nothing after it", (int)n, s);
            return -1;
        }
    for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
        if (strlen(macros[i][0]) == n && strncasecmp(s, macros[i][0], n) == 0)
            return cron_parse(macros[i][1], out, err, errlen);
    if (n == 7 && strncasecmp(s, "@reboot", n) == 0)
        snprintf(err, errlen, "cron: @reboot is not supported (a schedule has no boot to run at)");
    else
        snprintf(err, errlen, "cron: unknown macro \"%.*s\" (expected @yearly, @annually, "
                 "@monthly, @weekly, @daily, @midnight or @hourly)", (int)(n < 32 ? n : 32), s);
    return -1;
}

/* Splits s at spaces: the number of fields, the first 7 in start/stop. */
static int split(const char *s, const char **start, const char **stop)
{
    int n = 0;

    for (;;) {
        while (is_space(*s))
            s++;
        if (!*s)
            return n;
        if (n < 7)
            start[n] = s;
        while (*s && !is_space(*s))
            s++;
        if (n < 7)
            stop[n] = s;
        n++;
    }
}

int cron_parse(const char *expr, struct cron *out, char *err, size_t errlen)
{
    const char *start[7], *stop[7];
    uint64_t bits[6] = { 1 };   /* five fields fire at second 0 */
    int n, first;

    while (is_space(*expr))
        expr++;
    if (*expr == '@')
        return parse_macro(expr, out, err, errlen);
    if (strchr(expr, '#'))
        return unsupported(&(struct ctx){ .err = err, .errlen = errlen }, '#');
    n = split(expr, start, stop);
    if (n == 0) {
        snprintf(err, errlen, "cron: the expression is empty");
        return -1;
    }
    if (n < 5 || n > 6) {
        snprintf(err, errlen, "cron: %d field%s%s; expected 5 (minute hour day-of-month month "
                 "day-of-week) or 6 (second first)", n, n == 1 ? "" : "s",
                 n == 7 ? " (a year field is not supported)" : "");
        return -1;
    }
    first = 6 - n;
    for (int i = 0; i < n; i++) {
        struct ctx x = { &fields[first + i], i + 1, n, err, errlen };
        if (parse_field(&x, start[i], stop[i], &bits[first + i]) < 0)
            return -1;
    }
    *out = (struct cron){
        .sec = bits[0], .min = bits[1], .hour = (uint32_t)bits[2], .dom = (uint32_t)bits[3],
        .month = (uint16_t)bits[4], .dow = (uint8_t)((bits[5] | bits[5] >> 7) & 0x7f),
        .dom_any = *start[3 - first] == '*' || *start[3 - first] == '?',
        .dow_any = *start[5 - first] == '*' || *start[5 - first] == '?',
        .hour_any = *start[2 - first] == '*', .seconds = n == 6,
    };
    return 0;
}

/* ---- Next fire times ---- */

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

/* The lowest set bit from from to hi; -1 when none. */
static int next_bit(uint64_t bits, int from, int hi)
{
    for (int b = from; b <= hi; b++)
        if (bits >> b & 1)
            return b;
    return -1;
}

static int day_matches(const struct cron *c, int64_t days, unsigned d)
{
    int dom = (int)(c->dom >> d & 1), dow = (int)(c->dow >> tz_weekday(days) & 1);

    return c->dom_any || c->dow_any ? dom && dow : dom || dow;
}

/* The first matching second of a day at or after sod (second of the day); -1 when none. */
static int first_time(const struct cron *c, int sod)
{
    int h0 = sod / 3600, m0 = sod / 60 % 60;

    for (int h = next_bit(c->hour, h0, 23); h >= 0; h = next_bit(c->hour, h + 1, 23))
        for (int m = next_bit(c->min, h == h0 ? m0 : 0, 59); m >= 0;
             m = next_bit(c->min, m + 1, 59)) {
            int s = next_bit(c->sec, h == h0 && m == m0 ? sod % 60 : 0, 59);
            if (s >= 0)
                return h * 3600 + m * 60 + s;
        }
    return -1;
}

/* The next matching wall time after local, day by day through the matching months; NONE. */
static int64_t next_match(const struct cron *c, int64_t local)
{
    int64_t day, last, y;
    unsigned m, d;
    int sod, s;

    if (local < MIN_SECONDS || local > MAX_SECONDS)
        return NONE;
    day = floor_div(local + 1, DAY);
    sod = (int)(local + 1 - day * DAY);
    for (last = day + HORIZON_DAYS; day <= last; sod = 0) {
        tz_civil_from_days(day, &y, &m, &d);
        if (!(c->month >> m & 1))
            day = tz_days_from_civil(m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1);
        else if (day_matches(c, day, d) && (s = first_time(c, sod)) >= 0)
            return day * DAY + s;
        else
            day++;
    }
    return NONE;
}

int64_t cron_next_local(const struct cron *c, int64_t local)
{
    int64_t next = next_match(c, local);

    return next == NONE ? -1 : next;
}

/* The earliest and the latest wall time that the instants from..to show. Wall time rises with
 * the instant but at the changes: the earliest is at from or just after a change, the latest
 * at to or just before one. */
static void walls(const struct tz *z, int64_t from, int64_t to, int64_t *lo, int64_t *hi)
{
    *lo = from + tz_offset(z, from);
    *hi = to + tz_offset(z, to);
    for (int64_t t = from; (t = tz_next_change(z, t)) <= to;) {
        int64_t shown = t + tz_offset(z, t), before = t - 1 + tz_offset(z, t - 1);
        *lo = shown < *lo ? shown : *lo;
        *hi = before > *hi ? before : *hi;
    }
}

/* Walks the matching wall times in order, each to its fire instant. An instant after
 * after_utc shows a wall time no earlier than the earliest that the instants in the SPAN
 * after it show (and later ones, later still), so the walk starts there. Once a fire instant
 * "best" is known, only the wall times up to the latest that the instants before it show can
 * fire earlier, so the walk ends there. */
int64_t cron_next(const struct cron *c, const struct tz *z, int64_t after_utc)
{
    int64_t best = NONE, limit, local, first, second, unused;

    if (after_utc < MIN_SECONDS || after_utc > MAX_SECONDS)
        return -1;
    walls(z, after_utc, after_utc + SPAN, &local, &unused);
    for (limit = INT64_MAX, local--; (local = next_match(c, local)) != NONE && local <= limit;) {
        int n = tz_to_utc(z, local, &first, &second);
        int64_t fire = first > after_utc ? first
                       : n == 2 && c->hour_any && second > after_utc ? second : NONE;
        if (fire != NONE && (best == NONE || fire < best)) {
            best = fire;
            walls(z, best - SPAN > after_utc ? best - SPAN : after_utc, best, &unused, &limit);
        }
    }
    return best == NONE ? -1 : best;
}
