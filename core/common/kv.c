/* One-line key=value records (stagehand/kv.h). Library code: the plugin and the agent. */
#include "config.h"
#include "stagehand/kv.h"
#include "stagehand/bytes.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sh_kv_put(FILE *f, const char *key, const char *value)
{
    char line[SH_KV_LINE_MAX];
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++) {
        if (o + 5 >= sizeof(line)) {
            errno = E2BIG;
            return -1;
        }
        if (*p < 0x20 || *p == 0x7f || *p == '\\') {
            snprintf(line + o, sizeof(line) - o, "\\x%02x", *p);
            o += 4;
        } else {
            line[o++] = (char)*p;
        }
    }
    line[o] = '\0';
    return fprintf(f, "%s=%s\n", key, line) < 0 ? -1 : 0;
}

int sh_kv_putf(FILE *f, const char *key, const char *fmt, ...)
{
    char value[SH_KV_LINE_MAX];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(value)) {
        errno = E2BIG;
        return -1;
    }
    return sh_kv_put(f, key, value);
}

int sh_kv_split(char *line, char **key, char **value)
{
    size_t len = strlen(line);
    char *eq, *w;

    if (len > 0 && line[len - 1] == '\n')
        line[--len] = '\0';
    eq = strchr(line, '=');
    if (eq == NULL || eq == line) {
        errno = EPROTO;
        return -1;
    }
    *eq = '\0';
    *key = line;
    *value = eq + 1;
    w = eq + 1;
    for (const char *r = eq + 1; *r != '\0'; r++) {
        if (*r == '\\') {
            int hi, lo;
            if (r[1] != 'x' || (hi = sh_hex_digit(r[2])) < 0 || (lo = sh_hex_digit(r[3])) < 0) {
                errno = EPROTO;
                return -1;
            }
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return 0;
}
