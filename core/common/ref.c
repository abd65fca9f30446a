/* Registry image references (docker://); see include/stagehand/ref.h. The
 * grammar follows the distribution project's reference grammar (docker,
 * podman, skopeo), restricted to what a node can name on a command line. */
#include "config.h"
#include "stagehand/ref.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "stagehand/log.h"
#include "stagehand/spec.h"

#define SHOW 160

bool sh_ref_is_image(const char *src)
{
    return src != NULL && strncmp(src, SH_REF_SCHEME, SH_REF_SCHEME_LEN) == 0;
}

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
    return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* Copy @len bytes of @s for a message. */
static const char *show_part(const char *s, size_t len, char *out, size_t outlen)
{
    char raw[SHOW];

    snprintf(raw, sizeof(raw), "%.*s", len < sizeof(raw) ? (int)len : (int)sizeof(raw) - 1, s);
    return sh_spec_display(raw, out, outlen);
}

/* Store the checked @len bytes at @s as a string in @out (room checked by
 * the caller). */
static int keep(char *out, const char *s, size_t len)
{
    memcpy(out, s, len);
    out[len] = '\0';
    return 0;
}

static int inval(void)
{
    errno = EINVAL;
    return -1;
}

/* host[:port]: labels of [A-Za-z0-9-], not starting or ending in '-'. */
static int check_registry(const char *s, size_t len, struct sh_ref *ref, char *err,
                          size_t errlen)
{
    const char *colon = memchr(s, ':', len);
    size_t hlen = colon != NULL ? (size_t)(colon - s) : len;
    char show[SHOW];
    size_t label = 0;

    if (hlen == 0) {
        sh_errf(err, errlen, "empty registry host in '%s'", show_part(s, len, show, sizeof(show)));
        return inval();
    }
    for (size_t i = 0; i < hlen; i++) {
        char c = s[i];

        if (c == '.') {
            if (label == 0 || s[i - 1] == '-')
                goto bad_host;
            label = 0;
            continue;
        }
        if (!is_alnum(c) && c != '-')
            goto bad_host;
        if (c == '-' && label == 0)
            goto bad_host;
        label++;
    }
    if (label == 0 || s[hlen - 1] == '-')
        goto bad_host;
    if (colon != NULL) {
        size_t plen = len - hlen - 1;
        unsigned long port = 0;

        if (plen == 0 || plen > 5)
            goto bad_port;
        for (size_t i = 0; i < plen; i++) {
            if (colon[1 + i] < '0' || colon[1 + i] > '9')
                goto bad_port;
            port = port * 10 + (unsigned long)(colon[1 + i] - '0');
        }
        if (port == 0 || port > 65535 || colon[1] == '0')
            goto bad_port;
    }
    if (len >= sizeof(ref->registry)) {
        sh_errf(err, errlen, "registry name longer than %d bytes", SH_REF_REGISTRY_MAX - 1);
        return inval();
    }
    for (size_t i = 0; i < len; i++)
        ref->registry[i] = (char)tolower((unsigned char)s[i]);
    ref->registry[len] = '\0';
    return 0;

bad_host:
    sh_errf(err, errlen,
            "registry '%s' is not a host name (letters, digits, '-' and '.', "
            "optionally ':PORT')",
            show_part(s, len, show, sizeof(show)));
    return inval();
bad_port:
    sh_errf(err, errlen, "registry '%s' has a bad port (1-65535 after ':')",
            show_part(s, len, show, sizeof(show)));
    return inval();
}

/* One repository component: [a-z0-9] ... [a-z0-9], separators . _ - between
 * letters, no ".." ".-" "-." "._" "_.". */
static bool component_ok(const char *s, size_t len)
{
    if (len == 0 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[len - 1]))
        return false;
    for (size_t i = 1; i < len; i++) {
        char c = s[i], p = s[i - 1];

        if (is_lower_alnum(c))
            continue;
        if (c != '.' && c != '_' && c != '-')
            return false;
        if (c == '.' && !is_lower_alnum(p))
            return false;
        if (p == '.' || (p == '_' && c != '_') || (p == '-' && c != '-'))
            return false;
    }
    return true;
}

static int check_repo(const char *s, size_t len, struct sh_ref *ref, char *err, size_t errlen)
{
    char show[SHOW];
    size_t start = 0;

    if (len == 0) {
        sh_errf(err, errlen, "no repository (expected docker://[REGISTRY/]REPO[:TAG])");
        return inval();
    }
    if (len >= sizeof(ref->repo)) {
        sh_errf(err, errlen, "repository longer than %d bytes", SH_REF_REPO_MAX - 1);
        return inval();
    }
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '/')
            continue;
        if (!component_ok(s + start, i - start)) {
            bool upper = false;

            for (size_t k = start; k < i; k++)
                upper = upper || (s[k] >= 'A' && s[k] <= 'Z');
            sh_errf(err, errlen,
                    "repository '%s': component '%s' is %s", show_part(s, len, show, sizeof(show)),
                    i == start ? "" : show_part(s + start, i - start, (char[SHOW]){ 0 }, SHOW),
                    upper ? "not lower case (repository names are lower case)"
                          : "not valid (lower-case letters and digits, joined by '.', "
                            "'_', '__' or dashes)");
            return inval();
        }
        start = i + 1;
    }
    return keep(ref->repo, s, len);
}

static int check_tag(const char *s, size_t len, struct sh_ref *ref, char *err, size_t errlen)
{
    char show[SHOW];
    bool ok = len > 0 && len < sizeof(ref->tag) && (is_alnum(s[0]) || s[0] == '_');

    for (size_t i = 1; ok && i < len; i++)
        ok = is_alnum(s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-';
    if (!ok) {
        sh_errf(err, errlen,
                "tag '%s' is not valid (1-128 letters, digits, '_', '.' and '-', "
                "not starting with '.' or '-'; a DST after the image is an "
                "absolute path: ':/...')",
                show_part(s, len, show, sizeof(show)));
        return inval();
    }
    return keep(ref->tag, s, len);
}

static int check_digest(const char *s, size_t len, struct sh_ref *ref, char *err, size_t errlen)
{
    char show[SHOW];
    size_t hex = 0;
    bool ok = false;

    if (len > 7 && strncmp(s, "sha256:", 7) == 0)
        hex = 64, ok = len == 7 + hex;
    else if (len > 7 && strncmp(s, "sha512:", 7) == 0)
        hex = 128, ok = len == 7 + hex;
    for (size_t i = 7; ok && i < len; i++)
        ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
    if (!ok) {
        sh_errf(err, errlen,
                "digest '%s' is not valid (sha256: and 64 or sha512: and 128 "
                "lower-case hex digits)",
                show_part(s, len, show, sizeof(show)));
        return inval();
    }
    return keep(ref->digest, s, len);
}

int sh_ref_parse(const char *text, size_t len, const char *default_registry,
                 struct sh_ref *ref, char *err, size_t errlen)
{
    const char *hash = memchr(text, '#', len);
    const char *name = text, *end = text + len, *at, *colon;
    char show[SHOW];

    memset(ref, 0, sizeof(*ref));
    if (len == 0) {
        sh_errf(err, errlen, "the image reference after docker:// is empty (write "
                "docker://REGISTRY/REPO[:TAG])");
        return inval();
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];

        if (c <= 0x20 || c >= 0x7f || c == '\\' || c == ',') {
            sh_errf(err, errlen, "the image reference '%s' contains '%s' (only "
                    "printable ASCII without spaces, '\\' or ',')",
                    show_part(text, len, show, sizeof(show)),
                    show_part(text + i, 1, (char[16]){ 0 }, 16));
            return inval();
        }
    }
    if (hash != NULL) {
        if (check_registry(text, (size_t)(hash - text), ref, err, errlen) != 0)
            return -1;
        name = hash + 1;
        if (memchr(name, '#', (size_t)(end - name)) != NULL) {
            sh_errf(err, errlen, "more than one '#' in '%s' (REGISTRY#REPO has one)",
                    show_part(text, len, show, sizeof(show)));
            return inval();
        }
    } else {
        const char *slash = memchr(text, '/', len);

        if (slash != NULL) {
            size_t flen = (size_t)(slash - text);

            if (memchr(text, '.', flen) != NULL || memchr(text, ':', flen) != NULL ||
                (flen == 9 && strncmp(text, "localhost", 9) == 0)) {
                if (check_registry(text, flen, ref, err, errlen) != 0)
                    return -1;
                name = slash + 1;
            }
        }
        if (ref->registry[0] == '\0') {
            if (default_registry == NULL || default_registry[0] == '\0') {
                /* "reg:5000" or "reg.example" alone: a registry, no repository */
                bool host_only = slash == NULL && (memchr(text, '.', len) != NULL ||
                                                   memchr(text, ':', len) != NULL);

                sh_errf(err, errlen,
                        "'%s' names no registry and the site sets no "
                        "default_registry (write docker://REGISTRY/REPO[:TAG])%s",
                        show_part(text, len, show, sizeof(show)),
                        host_only ? "; if it is the registry, the repository is missing" : "");
                return inval();
            }
            if (check_registry(default_registry, strlen(default_registry), ref, err,
                               errlen) != 0)
                return -1;
        }
    }
    at = memchr(name, '@', (size_t)(end - name));
    if (at != NULL) {
        const char *tag_colon = memchr(name, ':', (size_t)(at - name));

        if (tag_colon != NULL) {
            sh_errf(err, errlen, "'%s' has both a tag and a digest (give one: "
                    "REPO:TAG or REPO@DIGEST)",
                    show_part(text, len, show, sizeof(show)));
            return inval();
        }
        if (check_repo(name, (size_t)(at - name), ref, err, errlen) != 0)
            return -1;
        return check_digest(at + 1, (size_t)(end - at - 1), ref, err, errlen);
    }
    colon = memchr(name, ':', (size_t)(end - name));
    if (check_repo(name, (size_t)((colon != NULL ? colon : end) - name), ref, err, errlen) != 0)
        return -1;
    if (colon == NULL) {
        memcpy(ref->tag, "latest", sizeof("latest"));
        return 0;
    }
    return check_tag(colon + 1, (size_t)(end - colon - 1), ref, err, errlen);
}

int sh_ref_format(const struct sh_ref *ref, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "%s%s/%s%s%s", SH_REF_SCHEME, ref->registry, ref->repo,
                     ref->digest[0] != '\0' ? "@" : ":",
                     ref->digest[0] != '\0' ? ref->digest : ref->tag);

    if (n < 0 || (size_t)n >= outlen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int sh_ref_parse_canonical(const char *src, struct sh_ref *ref, char *err, size_t errlen)
{
    char again[SH_REF_TEXT_MAX], show[SHOW];
    const char *slash;

    if (!sh_ref_is_image(src)) {
        sh_errf(err, errlen, "'%s' is not a docker:// reference",
                sh_spec_display(src, show, sizeof(show)));
        return inval();
    }
    src += SH_REF_SCHEME_LEN;
    slash = strchr(src, '/');
    /* Canonical: the registry is always given, before the first '/'. */
    if (slash == NULL || strchr(src, '#') != NULL)
        goto not_canonical;
    /* REGISTRY/REST read as REGISTRY#REST: the repository's first component
     * may look like a host ("a.b/c"). */
    if (snprintf(again, sizeof(again), "%.*s#%s", (int)(slash - src), src, slash + 1) >=
        (int)sizeof(again))
        goto not_canonical;
    if (sh_ref_parse(again, strlen(again), NULL, ref, err, errlen) != 0)
        return -1;
    if (sh_ref_format(ref, again, sizeof(again)) != 0 ||
        strcmp(again + SH_REF_SCHEME_LEN, src) != 0)
        goto not_canonical;
    return 0;

not_canonical:
    sh_errf(err, errlen, "image reference '%s%s' is not in canonical form", SH_REF_SCHEME,
            sh_spec_display(src, show, sizeof(show)));
    return inval();
}

int sh_ref_file_name(const struct sh_ref *ref, char *out, size_t outlen)
{
    size_t o = 0;
    const char *last = ref->digest[0] != '\0' ? ref->digest : ref->tag;
    size_t need = strlen(ref->repo) + 1 + strlen(last) + sizeof(".sqsh");

    if (need > NAME_MAX + 1 || need > outlen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (const char *p = ref->repo; *p != '\0'; p++) {
        out[o] = *p;
        if (*p == '/')
            out[o] = '+';
        o++;
    }
    out[o++] = '+';
    for (const char *p = last; *p != '\0'; p++) {
        out[o] = *p;
        if (*p == ':')
            out[o] = '-';
        o++;
    }
    memcpy(out + o, ".sqsh", sizeof(".sqsh"));
    return 0;
}

bool sh_ref_registry_listed(const char *list, const char *registry)
{
    size_t rlen = strlen(registry);

    for (const char *p = list; p != NULL && *p != '\0';) {
        size_t len = strcspn(p, ",");

        if ((len == 1 && p[0] == '*') || (len == rlen && strncasecmp(p, registry, len) == 0))
            return true;
        p += len;
        if (*p == ',')
            p++;
    }
    return false;
}

int sh_ref_registry_check(const char *registry, char *out, size_t outlen, char *err,
                          size_t errlen)
{
    struct sh_ref ref;

    if (check_registry(registry, strlen(registry), &ref, err, errlen) != 0)
        return -1;
    if (strlen(ref.registry) >= outlen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(out, ref.registry, strlen(ref.registry) + 1);
    return 0;
}

/* ---- the importer's and resolver's command lines ---------------------- */

int sh_ref_command_check(const char *cmd, const char *letters, char *err, size_t errlen)
{
    size_t n = 0;

    if (cmd[0] != '/') {
        sh_errf(err, errlen, "the command must start with an absolute path");
        return inval();
    }
    for (const char *p = cmd; *p != '\0'; p++) {
        if (*p == ',') {
            if (p[1] == ',' || p[1] == '\0') {
                sh_errf(err, errlen, "empty argument (a stray ',')");
                return inval();
            }
            n++;
            continue;
        }
        if (*p != '%')
            continue;
        if (p[1] != '%' && (p[1] == '\0' || strchr(letters, p[1]) == NULL)) {
            sh_errf(err, errlen, "unknown placeholder '%%%c' (known: %%%% and %s)",
                    p[1] != '\0' ? p[1] : ' ', letters);
            return inval();
        }
        p++;
    }
    if (n + 1 >= SH_REF_ARGV_MAX) {
        sh_errf(err, errlen, "more than %d arguments", SH_REF_ARGV_MAX - 2);
        return inval();
    }
    return 0;
}

/* The value of placeholder @c for @ref and @out_path. */
static const char *placeholder(char c, const struct sh_ref *ref, const char *pinned,
                               const char *out_path)
{
    switch (c) {
    case 'r':
        return pinned;
    case 'R':
        return ref->registry;
    case 'p':
        return ref->repo;
    case 'd':
        return ref->digest;
    case 't':
        return ref->tag;
    case 'o':
        return out_path != NULL ? out_path : "";
    default:
        return "%";
    }
}

char **sh_ref_command_expand(const char *cmd, const struct sh_ref *ref, const char *out_path)
{
    char pinned[SH_REF_TEXT_MAX];
    char **argv = calloc(SH_REF_ARGV_MAX, sizeof(*argv));
    size_t n = 0;
    const char *p = cmd;

    if (argv == NULL)
        return NULL;
    /* %r: the reference without the scheme, pinned to its digest when
     * known, so that the import reads exactly what was resolved. */
    snprintf(pinned, sizeof(pinned), "%s/%s%s%s", ref->registry, ref->repo,
             ref->digest[0] != '\0' ? "@" : ":",
             ref->digest[0] != '\0' ? ref->digest : ref->tag);
    while (*p != '\0' && n + 1 < SH_REF_ARGV_MAX) {
        size_t len = strcspn(p, ","), cap = 1;
        char *arg, *o;

        for (size_t i = 0; i < len; i++)
            cap += p[i] == '%' && i + 1 < len ? strlen(placeholder(p[i + 1], ref, pinned,
                                                                   out_path)) : 1;
        arg = malloc(cap);
        if (arg == NULL)
            goto fail;
        o = arg;
        for (size_t i = 0; i < len; i++) {
            if (p[i] == '%' && i + 1 < len) {
                const char *v = placeholder(p[++i], ref, pinned, out_path);

                memcpy(o, v, strlen(v));
                o += strlen(v);
            } else {
                *o++ = p[i];
            }
        }
        *o = '\0';
        argv[n++] = arg;
        p += len;
        if (*p == ',')
            p++;
    }
    return argv;
fail:
    sh_ref_command_free(argv);
    errno = ENOMEM;
    return NULL;
}

void sh_ref_command_free(char **argv)
{
    int saved = errno;

    if (argv != NULL) {
        for (size_t i = 0; argv[i] != NULL; i++)
            free(argv[i]);
        free(argv);
    }
    errno = saved;
}
