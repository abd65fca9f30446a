/* --stage-image grammar, spec sets and their wire form; see spec.h. */
#include "config.h"
#include "stagehand/spec.h"
#include "stagehand/log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SH_SPEC_FORMAT_VERSION == SH_SPEC_FORMAT,
               "spec.h and meson.build disagree on the spec format version");

struct sh_spec_image {
    char *src;
    char *dst;
    char *origin; /* option value, or NULL */
};

struct sh_spec_set {
    struct sh_spec_image *img;
    size_t n;
    size_t cap;
};

/* Room for one path in a message (longer ones end in "..."). */
#define SHOW_MAX 320

/* Whether a control character starts at @p: a C0 control or DEL (one
 * byte), or a C1 control (U+0080..U+009F, Unicode's "Cc" beyond ASCII) in
 * UTF-8, which a terminal that shows a log line can act on as on ESC (U+009B
 * is CSI). Paths may hold neither. With @what, describes it there ("byte
 * 0x1b", "U+009B, bytes 0xc2 0x9b"). */
static bool control_at(const unsigned char *p, char *what, size_t whatlen)
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

    if (n == 0 || control_at(p, NULL, 0)) {
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

        if (control_at(c, what, sizeof(what))) {
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

/* ---- the set ---------------------------------------------------------- */

struct sh_spec_set *sh_spec_set_new(void)
{
    struct sh_spec_set *set = calloc(1, sizeof(*set));

    if (set == NULL)
        errno = ENOMEM;
    return set;
}

static void image_free(struct sh_spec_image *img)
{
    free(img->src);
    free(img->dst);
    free(img->origin);
}

void sh_spec_set_free(struct sh_spec_set *set)
{
    int saved = errno;

    if (set != NULL) {
        for (size_t i = 0; i < set->n; i++)
            image_free(&set->img[i]);
        free(set->img);
        free(set);
    }
    errno = saved;
}

size_t sh_spec_set_count(const struct sh_spec_set *set) { return set->n; }

const char *sh_spec_set_src(const struct sh_spec_set *set, size_t i)
{
    return i < set->n ? set->img[i].src : NULL;
}

const char *sh_spec_set_dst(const struct sh_spec_set *set, size_t i)
{
    return i < set->n ? set->img[i].dst : NULL;
}

const char *sh_spec_set_origin(const struct sh_spec_set *set, size_t i)
{
    return i < set->n ? set->img[i].origin : NULL;
}

static int set_reserve(struct sh_spec_set *set, size_t want)
{
    struct sh_spec_image *img;
    size_t cap;

    if (want <= set->cap)
        return 0;
    cap = set->cap == 0 ? 4 : set->cap;
    while (cap < want)
        cap *= 2;
    img = realloc(set->img, cap * sizeof(*img));
    if (img == NULL) {
        errno = ENOMEM;
        return -1;
    }
    set->img = img;
    set->cap = cap;
    return 0;
}

/* Compare (src, dst) with every image of @set. Returns 1 if the identical
 * image is present, 0 if it can be added, -1 (message in err) on conflict. */
static int set_check(const struct sh_spec_set *set, const char *src,
                     const char *dst, char *err, size_t errlen)
{
    char s1[SHOW_MAX], s2[SHOW_MAX], s3[SHOW_MAX];

    for (size_t i = 0; i < set->n; i++) {
        const struct sh_spec_image *im = &set->img[i];

        if (strcmp(im->dst, dst) == 0) {
            if (strcmp(im->src, src) == 0)
                return 1;
            sh_errf(err, errlen,
                   "destination '%s' specified multiple times with different "
                   "sources ('%s' and '%s')",
                   sh_spec_display(dst, s1, sizeof(s1)),
                   sh_spec_display(im->src, s2, sizeof(s2)),
                   sh_spec_display(src, s3, sizeof(s3)));
            return -1;
        }
        if (sh_spec_path_is_under(dst, im->dst) ||
            sh_spec_path_is_under(im->dst, dst)) {
            sh_errf(err, errlen,
                   "destinations '%s' and '%s' overlap (one would have to be "
                   "a file and a directory)",
                   sh_spec_display(im->dst, s1, sizeof(s1)),
                   sh_spec_display(dst, s2, sizeof(s2)));
            return -1;
        }
    }
    return 0;
}

/* Append an image; takes ownership of the three strings (also on error). */
static int set_push(struct sh_spec_set *set, char *src, char *dst,
                    char *origin)
{
    if (set_reserve(set, set->n + 1) != 0) {
        free(src);
        free(dst);
        free(origin);
        return -1;
    }
    set->img[set->n].src = src;
    set->img[set->n].dst = dst;
    set->img[set->n].origin = origin;
    set->n++;
    return 0;
}

/* Validate a normalised (src, dst) pair against @set and @pending, and add it
 * to @pending unless it is already present. */
static int add_pair(const struct sh_spec_set *set, struct sh_spec_set *pending,
                    const char *src, const char *dst, const char *origin,
                    char *err, size_t errlen)
{
    char *s, *d, *o = NULL;
    int rc;

    if (strcmp(src, dst) == 0) {
        char show[SHOW_MAX];

        sh_errf(err, errlen, "destination '%s' is the source itself",
               sh_spec_display(dst, show, sizeof(show)));
        errno = EINVAL;
        return -1;
    }
    rc = set_check(set, src, dst, err, errlen);
    if (rc == 0)
        rc = set_check(pending, src, dst, err, errlen);
    if (rc < 0) {
        errno = EINVAL;
        return -1;
    }
    if (rc == 1)
        return 0; /* case F27: identical image given again */
    if (set->n + pending->n >= SH_SPEC_MAX_IMAGES) {
        sh_errf(err, errlen, "more than %d images in one job",
               SH_SPEC_MAX_IMAGES);
        errno = E2BIG;
        return -1;
    }
    s = strdup(src);
    d = strdup(dst);
    if (origin != NULL)
        o = strdup(origin);
    if (s == NULL || d == NULL || (origin != NULL && o == NULL)) {
        free(s);
        free(d);
        free(o);
        sh_errf(err, errlen, "out of memory");
        errno = ENOMEM;
        return -1;
    }
    return set_push(pending, s, d, o);
}

/* Move every image of @pending to the end of @set. */
static int set_merge(struct sh_spec_set *set, struct sh_spec_set *pending,
                     char *err, size_t errlen)
{
    if (pending->n == 0)
        return 0;
    if (set_reserve(set, set->n + pending->n) != 0) {
        sh_errf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(set->img + set->n, pending->img, pending->n * sizeof(*set->img));
    set->n += pending->n;
    pending->n = 0;
    return 0;
}

/* ---- the option grammar ---------------------------------------------- */

/* One image of an option value, unescaped. */
struct raw_image {
    char src[PATH_MAX];
    char dst[PATH_MAX];
    size_t src_len;
    size_t dst_len;
    bool has_dst;   /* an unescaped ':' was seen */
};

static bool ends_as_dir(const char *path, size_t len)
{
    return (len >= 1 && path[len - 1] == '/') ||
           (len >= 2 && path[len - 1] == '.' && path[len - 2] == '/');
}

/* Read one image from *pp up to an unescaped ',' or the end. */
static int scan_image(const char **pp, struct raw_image *ri, char *err,
                      size_t errlen)
{
    const char *p = *pp;
    const char *start = p;

    ri->src_len = ri->dst_len = 0;
    ri->has_dst = false;
    for (; *p != '\0' && *p != ','; p++) {
        char c = *p;
        char *buf, what[32];
        size_t *len;

        if (c == '\\') {
            char n = p[1];

            if (n == '\\' || n == ':' || n == ',') {
                c = n;
                p++;
            } else if (n == '\0') {
                sh_errf(err, errlen, "the value ends in a lone '\\' (write a "
                       "backslash that is part of a path as '\\\\')");
                goto inval;
            } else {
                char show[8];
                char one[2] = { n, '\0' };

                sh_errf(err, errlen,
                       "invalid escape '\\%s': only '\\\\', '\\:' and '\\,' "
                       "are escapes (write a backslash that is part of a "
                       "path as '\\\\')", sh_spec_display(one, show,
                                                         sizeof(show)));
                goto inval;
            }
        } else if (c == ':') {
            if (ri->has_dst) {
                char show[SHOW_MAX];
                char item[SHOW_MAX];
                size_t n = strcspn(start, ",");

                snprintf(item, sizeof(item), "%.*s",
                         n < sizeof(item) ? (int)n : (int)sizeof(item) - 1,
                         start);
                sh_errf(err, errlen,
                       "more than one unescaped ':' in '%s' (SRC:DST has one "
                       "':'; write a ':' that is part of a path as '\\:')",
                       sh_spec_display(item, show, sizeof(show)));
                goto inval;
            }
            ri->has_dst = true;
            continue;
        }
        if (control_at((const unsigned char *)p, what, sizeof(what))) {
            sh_errf(err, errlen, "control character (%s) in a path", what);
            goto inval;
        }
        buf = ri->has_dst ? ri->dst : ri->src;
        len = ri->has_dst ? &ri->dst_len : &ri->src_len;
        if (*len + 1 >= PATH_MAX) {
            sh_errf(err, errlen, "the %s path is too long (%d bytes or more; "
                   "PATH_MAX)", ri->has_dst ? "destination" : "source", PATH_MAX);
            errno = ENAMETOOLONG;
            return -1;
        }
        buf[(*len)++] = c;
    }
    ri->src[ri->src_len] = '\0';
    ri->dst[ri->dst_len] = '\0';
    *pp = p;
    return 0;

inval:
    errno = EINVAL;
    return -1;
}

static const char *base_name(const char *norm)
{
    const char *slash = strrchr(norm, '/');

    return slash != NULL ? slash + 1 : norm;
}

/* Turn one raw image into normalised (src, dst) and add it to @pending. */
static int resolve_image(const struct sh_spec_set *set,
                         struct sh_spec_set *pending, struct raw_image *ri,
                         size_t index, const char *default_dir,
                         const char *origin, char *err, size_t errlen)
{
    char src[PATH_MAX], dst[PATH_MAX], joined[PATH_MAX];
    char show[SHOW_MAX], hint[SHOW_MAX], why[SHOW_MAX + 200];
    const char *dir;

    if (ri->src_len == 0 && !ri->has_dst) {
        sh_errf(err, errlen, "empty image (a stray ','?)");
        goto inval;
    }
    if (ri->src_len == 0) {
        sh_errf(err, errlen, "empty source before ':'");
        goto inval;
    }
    if (ri->has_dst && ri->dst_len == 0) {
        sh_errf(err, errlen,
               "empty destination after ':' (leave out the ':' to use the "
               "default destination; write a ':' that is part of a path as "
               "'\\:')");
        goto inval;
    }
    if (ri->src[0] != '/') {
        sh_spec_display(ri->src, show, sizeof(show));
        if (index > 0)
            sh_errf(err, errlen,
                   "source '%s' is not an absolute path (if the ',' before "
                   "it is part of a path, write it as '\\,')", show);
        else
            sh_errf(err, errlen,
                   "source '%s' is not an absolute path (relative paths are "
                   "not accepted: give the full path, e.g. \"$PWD/%s\")",
                   show, show);
        goto inval;
    }
    if (ri->has_dst && ri->dst[0] != '/') {
        char both[2 * PATH_MAX];

        snprintf(both, sizeof(both), "%s:%s", ri->src, ri->dst);
        if (sh_spec_escape_path(both, hint, sizeof(hint)) != 0)
            snprintf(hint, sizeof(hint), "...\\:...");
        sh_errf(err, errlen,
               "destination '%s' is not an absolute path: DST is where each node "
               "writes its copy, a full path under a directory the cluster allows "
               "(if the ':' is part of the source path, write it as '\\:': %s)",
               sh_spec_display(ri->dst, show, sizeof(show)),
               sh_spec_display(hint, why, sizeof(show)));
        goto inval;
    }
    if (ends_as_dir(ri->src, ri->src_len)) {
        sh_errf(err, errlen, "source '%s' ends in '/': it must name a file",
               sh_spec_display(ri->src, show, sizeof(show)));
        goto inval;
    }
    if (sh_spec_path_normalize(ri->src, src, sizeof(src), why,
                               sizeof(why)) != 0) {
        sh_errf(err, errlen, "source %s", why);
        return -1;
    }
    if (strcmp(src, "/") == 0) {
        sh_errf(err, errlen, "source '/' must name a file");
        goto inval;
    }
    if (!ri->has_dst || ends_as_dir(ri->dst, ri->dst_len)) {
        dir = ri->has_dst ? ri->dst : default_dir;
        if (dir == NULL) {
            sh_errf(err, errlen, "no destination given and no default "
                   "destination is configured");
            goto inval;
        }
        if ((size_t)snprintf(joined, sizeof(joined), "%s/%s", dir,
                             base_name(src)) >= sizeof(joined)) {
            sh_errf(err, errlen, "destination '%s/%s' is too long (%d bytes "
                   "or more; PATH_MAX)",
                   sh_spec_display(dir, show, sizeof(show)),
                   sh_spec_display(base_name(src), hint, sizeof(hint)),
                   PATH_MAX);
            errno = ENAMETOOLONG;
            return -1;
        }
    } else {
        memcpy(joined, ri->dst, ri->dst_len + 1);
    }
    if (sh_spec_path_normalize(joined, dst, sizeof(dst), why,
                               sizeof(why)) != 0) {
        sh_errf(err, errlen, "destination %s", why);
        return -1;
    }
    return add_pair(set, pending, src, dst, origin, err, errlen);

inval:
    errno = EINVAL;
    return -1;
}

int sh_spec_add_value(struct sh_spec_set *set, const char *value,
                      const char *default_dir, char *err, size_t errlen)
{
    struct sh_spec_set pending = { NULL, 0, 0 };
    struct raw_image *ri = NULL;
    const char *p = value;
    size_t index = 0;
    int rc = -1;

    if (value == NULL || value[0] == '\0') {
        sh_errf(err, errlen, "empty value (expected SRC[:DST])");
        errno = EINVAL;
        return -1;
    }
    if (strlen(value) > SH_SPEC_MAX_VALUE) {
        sh_errf(err, errlen, "value longer than %zu bytes", SH_SPEC_MAX_VALUE);
        errno = E2BIG;
        return -1;
    }
    ri = malloc(sizeof(*ri));
    if (ri == NULL) {
        sh_errf(err, errlen, "out of memory");
        errno = ENOMEM;
        return -1;
    }
    for (;;) {
        if (scan_image(&p, ri, err, errlen) != 0)
            goto out;
        if (resolve_image(set, &pending, ri, index, default_dir, value, err,
                          errlen) != 0)
            goto out;
        if (*p == '\0')
            break;
        p++; /* the ',' */
        index++;
    }
    if (set_merge(set, &pending, err, errlen) != 0)
        goto out;
    rc = 0;
out:
    for (size_t i = 0; i < pending.n; i++)
        image_free(&pending.img[i]);
    free(pending.img);
    free(ri);
    return rc;
}

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
        if (wire_path_ok("source", src, err, errlen) != 0 ||
            wire_path_ok("destination", dst, err, errlen) != 0)
            goto fail;
        if (add_pair(set, pending, src, dst, NULL, err, errlen) != 0 ||
            set_merge(set, pending, err, errlen) != 0)
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
