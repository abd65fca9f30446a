/* --stage-image grammar and spec sets; see spec.h. */
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

_Static_assert(SH_SPEC_FORMAT_VERSION == SH_SPEC_FORMAT,
               "spec.h and meson.build disagree on the spec format version");

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

int sh_spec_set_default_registry(struct sh_spec_set *set, const char *registry)
{
    size_t len = registry != NULL ? strlen(registry) : 0;

    if (len >= sizeof(set->default_registry)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(set->default_registry, len > 0 ? registry : "", len + 1);
    return 0;
}

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

/* Whether paths @a, @b and @dst end in the same file name: two sources
 * whose default destinations (the default directory plus the file name)
 * collide. */
static bool same_file_name(const char *a, const char *b, const char *dst)
{
    const char *na = strrchr(a, '/'), *nb = strrchr(b, '/'), *nd = strrchr(dst, '/');

    return a[0] == '/' && b[0] == '/' && na != NULL && nb != NULL && nd != NULL &&
           strcmp(na, nb) == 0 && strcmp(na, nd) == 0;
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
                   "sources ('%s' and '%s')%s",
                   sh_spec_display(dst, s1, sizeof(s1)),
                   sh_spec_display(im->src, s2, sizeof(s2)),
                   sh_spec_display(src, s3, sizeof(s3)),
                   same_file_name(im->src, src, dst)
                       ? ": two sources of the same file name; give one of "
                         "them its own destination (SRC:DST)"
                       : "");
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
int spec_add_pair(const struct sh_spec_set *set, struct sh_spec_set *pending,
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
int spec_set_merge(struct sh_spec_set *set, struct sh_spec_set *pending,
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
    if (sh_ref_is_image(p)) {
        /* A reference has no escapes and no ',': it ends at ',', at the
         * end, or at the ":/" that starts an absolute DST (ref.h). */
        size_t len = strcspn(p, ",");
        const char *dst = strstr(p + SH_REF_SCHEME_LEN, ":/");

        if (dst != NULL && dst < p + len)
            len = (size_t)(dst - p);
        if (len >= sizeof(ri->src)) {
            sh_errf(err, errlen, "the image reference is too long");
            goto inval;
        }
        memcpy(ri->src, p, len);
        ri->src_len = len;
        p += len;
        if (*p == ':') {
            ri->has_dst = true;
            p++;
        }
    }
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
                size_t scheme = strspn(item, "abcdefghijklmnopqrstuvwxyz");

                /* "docker:/x", "https://x": a scheme stagehand does not
                 * read, so its ':' counted as SRC:DST's */
                sh_errf(err, errlen,
                       "more than one unescaped ':' in '%s' (SRC:DST has one "
                       "':'; write a ':' that is part of a path as '\\:')%s",
                       sh_spec_display(item, show, sizeof(show)),
                       scheme > 0 && item[scheme] == ':' && item[scheme + 1] == '/'
                           ? "; a registry image is written docker://REGISTRY/REPO[:TAG]"
                           : "");
                goto inval;
            }
            ri->has_dst = true;
            continue;
        }
        if (spec_control_at((const unsigned char *)p, what, sizeof(what))) {
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

/* The DST of an image: @ri's DST, or @name in @default_dir (or in @ri's DST
 * when that ends in '/'), normalised into @dst. */
static int image_dst(const struct raw_image *ri, const char *name, const char *default_dir,
                     char *dst, size_t dstlen, char *err, size_t errlen)
{
    char joined[PATH_MAX], show[SHOW_MAX], hint[SHOW_MAX], why[SHOW_MAX + 200];
    const char *dir;

    if (!ri->has_dst || ends_as_dir(ri->dst, ri->dst_len)) {
        dir = ri->has_dst ? ri->dst : default_dir;
        if (dir == NULL) {
            sh_errf(err, errlen, "no destination given and no default "
                   "destination is configured");
            errno = EINVAL;
            return -1;
        }
        if ((size_t)snprintf(joined, sizeof(joined), "%s/%s", dir, name) >= sizeof(joined)) {
            sh_errf(err, errlen, "destination '%s/%s' is too long (%d bytes "
                   "or more; PATH_MAX)",
                   sh_spec_display(dir, show, sizeof(show)),
                   sh_spec_display(name, hint, sizeof(hint)),
                   PATH_MAX);
            errno = ENAMETOOLONG;
            return -1;
        }
    } else {
        memcpy(joined, ri->dst, ri->dst_len + 1);
    }
    if (sh_spec_path_normalize(joined, dst, dstlen, why, sizeof(why)) != 0) {
        sh_errf(err, errlen, "destination %s", why);
        return -1;
    }
    return 0;
}

/* A docker:// image: its reference in canonical form, DST an absolute path
 * (default: the reference's file name in the default directory). */
static int resolve_ref(const struct sh_spec_set *set, struct sh_spec_set *pending,
                       const struct raw_image *ri, const char *default_dir,
                       const char *origin, char *err, size_t errlen)
{
    char src[SH_REF_TEXT_MAX], dst[PATH_MAX], name[NAME_MAX + 1], show[SHOW_MAX];
    struct sh_ref ref;

    if (sh_ref_parse(ri->src + SH_REF_SCHEME_LEN, ri->src_len - SH_REF_SCHEME_LEN,
                     set->default_registry, &ref, err, errlen) != 0)
        return -1;
    if (ri->has_dst && ri->dst_len == 0) {
        sh_errf(err, errlen, "empty destination after ':' (leave it out to use the default "
               "destination)");
        errno = EINVAL;
        return -1;
    }
    if (ri->has_dst && ri->dst[0] != '/') {
        sh_errf(err, errlen, "destination '%s' is not an absolute path",
               sh_spec_display(ri->dst, show, sizeof(show)));
        errno = EINVAL;
        return -1;
    }
    if (sh_ref_format(&ref, src, sizeof(src)) != 0 ||
        sh_ref_file_name(&ref, name, sizeof(name)) != 0) {
        sh_errf(err, errlen, "the image reference is too long for a file name");
        errno = ENAMETOOLONG;
        return -1;
    }
    if (image_dst(ri, name, default_dir, dst, sizeof(dst), err, errlen) != 0)
        return -1;
    return spec_add_pair(set, pending, src, dst, origin, err, errlen);
}

/* Turn one raw image into normalised (src, dst) and add it to @pending. */
static int resolve_image(const struct sh_spec_set *set,
                         struct sh_spec_set *pending, struct raw_image *ri,
                         size_t index, const char *default_dir,
                         const char *origin, char *err, size_t errlen)
{
    char src[PATH_MAX], dst[PATH_MAX];
    char show[SHOW_MAX], hint[SHOW_MAX], why[SHOW_MAX + 200];

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
    if (sh_ref_is_image(ri->src))
        return resolve_ref(set, pending, ri, default_dir, origin, err, errlen);
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
    if (image_dst(ri, base_name(src), default_dir, dst, sizeof(dst), err, errlen) != 0)
        return -1;
    return spec_add_pair(set, pending, src, dst, origin, err, errlen);

inval:
    errno = EINVAL;
    return -1;
}

int sh_spec_add_value(struct sh_spec_set *set, const char *value,
                      const char *default_dir, char *err, size_t errlen)
{
    struct sh_spec_set pending = { .img = NULL };
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
    if (spec_set_merge(set, &pending, err, errlen) != 0)
        goto out;
    rc = 0;
out:
    for (size_t i = 0; i < pending.n; i++)
        image_free(&pending.img[i]);
    free(pending.img);
    free(ri);
    return rc;
}
