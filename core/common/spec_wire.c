/* The wire form of a spec set (plugin to agent); see spec.h. */
#include "config.h"
#include "stagehand/spec.h"
#include "stagehand/log.h"
#include "stagehand/ref.h"
#include "spec_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- wire form ---------------------------------------------------------- */

static bool wire_safe(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '/' || c == '.' || c == '_' ||
           c == '-' || c == '+' || c == '@' || c == '=' || c == '~';
}

static size_t wire_len(const char *s)
{
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        n += wire_safe(*p) ? 1 : 3;
    return n;
}

static char *wire_put(char *o, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";

    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (wire_safe(*p)) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 0xf];
        }
    }
    return o;
}

char *sh_spec_set_serialize(const struct sh_spec_set *set)
{
    char head[32];
    size_t len;
    char *out, *o;

    if (set == NULL || set->n == 0) {
        errno = EINVAL;
        return NULL;
    }
    snprintf(head, sizeof(head), "v%d;", SH_SPEC_FORMAT_VERSION);
    len = strlen(head);
    for (size_t i = 0; i < set->n; i++)
        len += wire_len(set->img[i].src) + wire_len(set->img[i].dst) + 2;
    out = malloc(len + 1);
    if (out == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    o = out + strlen(head);
    memcpy(out, head, strlen(head));
    for (size_t i = 0; i < set->n; i++) {
        if (i > 0)
            *o++ = ',';
        o = wire_put(o, set->img[i].src);
        *o++ = ':';
        o = wire_put(o, set->img[i].dst);
    }
    *o = '\0';
    return out;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1; /* lower case is not canonical */
}

/* Decode one wire path from *pp up to one of @stops; NUL-terminated. */
static int wire_get(const char **pp, const char *stops, char *out,
                    size_t outlen, char *err, size_t errlen)
{
    const char *p = *pp;
    size_t o = 0;

    for (; *p != '\0' && strchr(stops, *p) == NULL; p++) {
        unsigned char c = (unsigned char)*p;

        if (c == '%') {
            int hi = hex_digit(p[1]);
            int lo = hi < 0 ? -1 : hex_digit(p[2]);

            if (lo < 0) {
                sh_errf(err, errlen, "bad %%-escape");
                goto inval;
            }
            c = (unsigned char)(hi * 16 + lo);
            if (c == 0 || wire_safe(c)) {
                sh_errf(err, errlen, "not canonical: needless or NUL "
                       "%%-escape");
                goto inval;
            }
            p += 2;
        } else if (!wire_safe(c)) {
            sh_errf(err, errlen, "not canonical: unescaped byte 0x%02x",
                   (unsigned)c);
            goto inval;
        }
        if (o + 1 >= outlen) {
            sh_errf(err, errlen, "a path is too long (%d bytes or more; "
                   "PATH_MAX)", PATH_MAX);
            errno = ENAMETOOLONG;
            return -1;
        }
        out[o++] = (char)c;
    }
    out[o] = '\0';
    *pp = p;
    return 0;

inval:
    errno = EINVAL;
    return -1;
}

/* Check that @path (decoded from the wire) is normalised. */
static int wire_path_ok(const char *role, const char *path, char *err,
                        size_t errlen)
{
    char norm[PATH_MAX];
    char why[SHOW_MAX + 200];

    if (sh_spec_path_normalize(path, norm, sizeof(norm), why,
                               sizeof(why)) != 0) {
        sh_errf(err, errlen, "%s %s", role, why);
        return -1;
    }
    if (strcmp(norm, path) != 0 || strcmp(path, "/") == 0) {
        sh_errf(err, errlen, "%s '%s' is not in normal form", role,
               sh_spec_display(path, why, sizeof(why)));
        errno = EINVAL;
        return -1;
    }
    return 0;
}

struct sh_spec_set *sh_spec_set_deserialize(const char *text, char *err,
                                            size_t errlen)
{
    char src[PATH_MAX], dst[PATH_MAX];
    struct sh_spec_set *set = NULL, *pending = NULL;
    const char *p = text;
    unsigned long version = 0;
    char *again = NULL;
    int digits = 0;

    if (text == NULL || text[0] != 'v')
        goto not_spec;
    for (p = text + 1; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
        version = version * 10 + (unsigned long)(*p - '0');
    if (digits == 0 || *p != ';')
        goto not_spec;
    if (version != SH_SPEC_FORMAT_VERSION) {
        sh_errf(err, errlen,
               "spec format version %lu was written by a different stagehand "
               "version; this node reads version %d (install the same "
               "stagehand version on login and compute nodes and restart "
               "slurmd)", version, SH_SPEC_FORMAT_VERSION);
        errno = ENOTSUP;
        return NULL;
    }
    p++;
    if (*p == '\0') {
        sh_errf(err, errlen, "spec has no image");
        errno = EINVAL;
        return NULL;
    }
    set = sh_spec_set_new();
    pending = sh_spec_set_new();
    if (set == NULL || pending == NULL) {
        sh_errf(err, errlen, "out of memory");
        goto fail;
    }
    for (;;) {
        if (wire_get(&p, ":,", src, sizeof(src), err, errlen) != 0)
            goto fail;
        if (*p != ':') {
            sh_errf(err, errlen, "malformed spec: image without ':'");
            errno = EINVAL;
            goto fail;
        }
        p++;
        if (wire_get(&p, ":,", dst, sizeof(dst), err, errlen) != 0)
            goto fail;
        if (*p == ':') {
            sh_errf(err, errlen, "malformed spec: image with two ':'");
            errno = EINVAL;
            goto fail;
        }
        if (sh_ref_is_image(src)) {
            struct sh_ref ref;

            if (sh_ref_parse_canonical(src, &ref, err, errlen) != 0)
                goto fail;
        } else if (wire_path_ok("source", src, err, errlen) != 0) {
            goto fail;
        }
        if (wire_path_ok("destination", dst, err, errlen) != 0)
            goto fail;
        if (spec_add_pair(set, pending, src, dst, NULL, err, errlen) != 0 ||
            spec_set_merge(set, pending, err, errlen) != 0)
            goto fail;
        if (*p == '\0')
            break;
        p++;
    }
    again = sh_spec_set_serialize(set);
    if (again == NULL) {
        sh_errf(err, errlen, "out of memory");
        goto fail;
    }
    if (strcmp(again, text) != 0) {
        sh_errf(err, errlen, "not canonical (an image is repeated or "
               "empty)");
        errno = EINVAL;
        goto fail;
    }
    free(again);
    sh_spec_set_free(pending);
    return set;

not_spec:
    sh_errf(err, errlen, "not a stagehand spec (expected it to start with "
           "'v%d;')", SH_SPEC_FORMAT_VERSION);
    errno = EINVAL;
    return NULL;
fail:
    free(again);
    sh_spec_set_free(pending);
    sh_spec_set_free(set);
    return NULL;
}
