/* Paths in specs: shown safely in messages, escaped, normalised and checked
 * against roots; see spec.h. */
#include "config.h"
#include "stagehand/spec.h"
#include "stagehand/log.h"
#include "spec_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether a control character starts at @p: a C0 control or DEL (one
 * byte), or a C1 control (U+0080..U+009F, Unicode's "Cc" beyond ASCII) in
 * UTF-8, which a terminal that shows a log line can act on as on ESC (U+009B
 * is CSI). Paths may hold neither. With @what, describes it there ("byte
 * 0x1b", "U+009B, bytes 0xc2 0x9b"). */
bool spec_control_at(const unsigned char *p, char *what, size_t whatlen)
{
    if ((p[0] > 0 && p[0] < 0x20) || p[0] == 0x7f) {
        if (what != NULL)
            snprintf(what, whatlen, "byte 0x%02x", p[0]);
        return true;
    }
    if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
        if (what != NULL)
            snprintf(what, whatlen, "U+%04X, bytes 0xc2 0x%02x", p[1], p[1]);
        return true;
    }
    return false;
}

/* Length of the valid UTF-8 sequence at @p (1-4), or 0 when the byte at @p
 * does not start one (overlong forms and surrogates are invalid). */
static size_t utf8_len(const unsigned char *p)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        n = 3;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        n = 4;
    else
        return 0;
    if (p[0] == 0xe0)
        lo = 0xa0;
    else if (p[0] == 0xed)
        hi = 0x9f;
    else if (p[0] == 0xf0)
        lo = 0x90;
    else if (p[0] == 0xf4)
        hi = 0x8f;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}

/* Bytes the display of the byte sequence at @p takes, and how many input
 * bytes that covers (*used): a valid UTF-8 character as is, a control byte
 * or a byte that is not valid UTF-8 as "\xHH". */
static size_t display_len(const unsigned char *p, size_t *used)
{
    size_t n = utf8_len(p);

    if (n == 0 || spec_control_at(p, NULL, 0)) {
        *used = 1;
        return 4;
    }
    *used = n;
    return n;
}

char *sh_spec_display(const char *in, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    size_t total = 0, reserve, o = 0, used;
    const unsigned char *p;

    if (outlen == 0)
        return out;
    for (p = (const unsigned char *)in; *p != '\0'; p += used)
        total += display_len(p, &used);
    /* Room for "..." only when the whole string does not fit. */
    reserve = total + 1 > outlen && outlen >= 4 ? 3 : 0;
    for (p = (const unsigned char *)in; *p != '\0'; p += used) {
        size_t need = display_len(p, &used);

        if (o + need + reserve + 1 > outlen) {
            memcpy(out + o, "...", reserve);
            o += reserve;
            break;
        }
        if (need == 4 && used == 1) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 0xf];
        } else {
            memcpy(out + o, p, need);
            o += need;
        }
    }
    out[o] = '\0';
    return out;
}

int sh_spec_escape_path(const char *path, char *out, size_t outlen)
{
    size_t o = 0;

    if (outlen == 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (const char *p = path; *p != '\0'; p++) {
        bool esc = *p == '\\' || *p == ':' || *p == ',';

        if (o + (esc ? 2 : 1) >= outlen) {
            out[o] = '\0';
            errno = ENAMETOOLONG;
            return -1;
        }
        if (esc)
            out[o++] = '\\';
        out[o++] = *p;
    }
    out[o] = '\0';
    return 0;
}

int sh_spec_path_normalize(const char *in, char *out, size_t outlen,
                           char *err, size_t errlen)
{
    char show[SHOW_MAX];
    size_t limit = outlen < PATH_MAX ? outlen : PATH_MAX;
    size_t o = 0;
    const char *p = in;

    if (in[0] != '/') {
        sh_errf(err, errlen, "'%s' is not an absolute path",
               sh_spec_display(in, show, sizeof(show)));
        errno = EINVAL;
        return -1;
    }
    for (const unsigned char *c = (const unsigned char *)in; *c != '\0'; c++) {
        char what[32];

        if (spec_control_at(c, what, sizeof(what))) {
            sh_errf(err, errlen, "'%s': control character (%s) in a path",
                   sh_spec_display(in, show, sizeof(show)), what);
            errno = EINVAL;
            return -1;
        }
    }
    if (limit < 2)
        goto too_long;
    out[o++] = '/';
    while (*p != '\0') {
        const char *q;
        size_t len;

        while (*p == '/')
            p++;
        if (*p == '\0')
            break;
        for (q = p; *q != '\0' && *q != '/'; q++)
            ;
        len = (size_t)(q - p);
        if (len == 1 && p[0] == '.') {
            p = q;
            continue;
        }
        if (len == 2 && p[0] == '.' && p[1] == '.') {
            sh_errf(err, errlen,
                   "'%s': '..' components are not allowed (write the path "
                   "without '..')", sh_spec_display(in, show, sizeof(show)));
            errno = EINVAL;
            return -1;
        }
        if (len > NAME_MAX) {
            sh_errf(err, errlen,
                   "'%s': a component is longer than %d bytes (NAME_MAX)",
                   sh_spec_display(in, show, sizeof(show)), NAME_MAX);
            errno = ENAMETOOLONG;
            return -1;
        }
        if (o > 1)
            out[o++] = '/';
        if (o + len >= limit)
            goto too_long;
        memcpy(out + o, p, len);
        o += len;
        p = q;
    }
    out[o] = '\0';
    return 0;

too_long:
    sh_errf(err, errlen, "'%s': path is too long (%d bytes or more; PATH_MAX)",
           sh_spec_display(in, show, sizeof(show)), PATH_MAX);
    errno = ENAMETOOLONG;
    return -1;
}

int sh_spec_path_is_under(const char *path, const char *root)
{
    size_t rlen = strlen(root);

    if (strcmp(root, "/") == 0)
        return path[0] == '/' && path[1] != '\0';
    if (strncmp(path, root, rlen) != 0)
        return 0;
    return path[rlen] == '/' && path[rlen + 1] != '\0';
}
