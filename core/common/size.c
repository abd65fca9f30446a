/* Sizes and durations (stagehand/size.h). Library code: every program. */
#include "config.h"
#include "stagehand/size.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "stagehand/modes.h"

/* Parse the leading decimal digits of @text; *end points past them. */
static int parse_digits(const char *text, uint64_t *value, const char **end)
{
    uint64_t v = 0;
    const char *p = text;

    if (!isdigit((unsigned char)*p)) {
        errno = EINVAL;
        return -1;
    }
    while (isdigit((unsigned char)*p)) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) {
            errno = ERANGE;
            return -1;
        }
        v = v * 10 + d;
        p++;
    }
    *value = v;
    *end = p;
    return 0;
}

static int mul_checked(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b != 0 && a > UINT64_MAX / b) {
        errno = ERANGE;
        return -1;
    }
    *out = a * b;
    return 0;
}

int sh_parse_u64(const char *text, uint64_t *out)
{
    const char *end;
    uint64_t v;

    if (parse_digits(text, &v, &end) != 0)
        return -1;
    if (*end != '\0') {
        errno = EINVAL;
        return -1;
    }
    *out = v;
    return 0;
}

int sh_parse_size(const char *text, uint64_t *out)
{
    static const struct { const char *suffix; uint64_t mult; } units[] = {
        { "", 1 }, { "b", 1 },
        { "k", 1ULL << 10 }, { "kb", 1ULL << 10 }, { "kib", 1ULL << 10 },
        { "m", 1ULL << 20 }, { "mb", 1ULL << 20 }, { "mib", 1ULL << 20 },
        { "g", 1ULL << 30 }, { "gb", 1ULL << 30 }, { "gib", 1ULL << 30 },
        { "t", 1ULL << 40 }, { "tb", 1ULL << 40 }, { "tib", 1ULL << 40 },
    };
    uint64_t v;
    const char *end;

    if (text == NULL || parse_digits(text, &v, &end) != 0) {
        if (text == NULL || errno != ERANGE)
            errno = EINVAL;
        return -1;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(end, units[i].suffix) == 0)
            return mul_checked(v, units[i].mult, out);
    }
    errno = EINVAL;
    return -1;
}

int sh_parse_segment_size(const char *text, uint64_t *out)
{
    uint64_t v;

    if (sh_parse_size(text, &v) != 0)
        return -1;
    if (v == 0 || v > SH_SEGMENT_MAX) {
        errno = ERANGE;
        return -1;
    }
    *out = v;
    return 0;
}

int sh_parse_duration(const char *text, uint64_t *out_ns)
{
    static const struct { const char *suffix; uint64_t mult; } units[] = {
        { "", 1000000000ULL }, { "s", 1000000000ULL }, { "ms", 1000000ULL },
        { "m", 60000000000ULL }, { "min", 60000000000ULL },
        { "h", 3600000000000ULL },
    };
    uint64_t v;
    const char *end;

    if (text == NULL || parse_digits(text, &v, &end) != 0) {
        if (text == NULL || errno != ERANGE)
            errno = EINVAL;
        return -1;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(end, units[i].suffix) == 0)
            return mul_checked(v, units[i].mult, out_ns);
    }
    errno = EINVAL;
    return -1;
}

char *sh_format_size(uint64_t bytes, char *buf, unsigned len)
{
    static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)bytes;
    unsigned i = 0;

    while (v >= 1024.0 && i + 1 < sizeof(names) / sizeof(names[0])) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.2f %s", v, names[i]);
    return buf;
}

int sh_parse_mode(const char *text, unsigned *out)
{
    unsigned v = 0;
    size_t n = strlen(text);

    if (n == 0 || n > 4) {
        errno = EINVAL;
        return -1;
    }
    for (const char *p = text; *p != '\0'; p++) {
        if (*p < '0' || *p > '7') {
            errno = EINVAL;
            return -1;
        }
        v = v * 8 + (unsigned)(*p - '0');
    }
    if (v > 0777) {
        errno = ERANGE;
        return -1;
    }
    *out = v;
    return 0;
}
