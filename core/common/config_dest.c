/* Checks against a parsed plugstack configuration: where a destination may
 * be (allowed roots, the node image cache, the default destination's
 * template) and which registries a docker:// reference may name. The
 * parser itself is config.c; see include/stagehand/config.h. */
#include "stagehand/config.h"
#include "stagehand/cache.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "stagehand/log.h"
#include "stagehand/ref.h"
#include "stagehand/spec.h"

#define SHOW_MAX 320

int sh_config_default_dir(const struct sh_config *cfg, const char *user,
                          char *out, size_t outlen)
{
    char buf[PATH_MAX];
    size_t o = 0;

    if (user == NULL || user[0] == '\0' || strcmp(user, ".") == 0 ||
        strcmp(user, "..") == 0) {
        errno = EINVAL;
        return -1;
    }
    for (const unsigned char *u = (const unsigned char *)user; *u; u++) {
        if (*u == '/' || *u < 0x20 || *u == 0x7f) {
            errno = EINVAL;
            return -1;
        }
    }
    for (const char *p = cfg->default_dest; *p != '\0'; p++) {
        const char *piece = p;
        size_t len = 1;

        if (p[0] == '%' && p[1] == 'u') {
            piece = user;
            len = strlen(user);
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            p++;
        }
        if (o + len >= sizeof(buf)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(buf + o, piece, len);
        o += len;
    }
    buf[o] = '\0';
    return sh_spec_path_normalize(buf, out, outlen, NULL, 0);
}

int sh_config_default_fixed(const struct sh_config *cfg, char *out, size_t outlen)
{
    char buf[PATH_MAX];
    size_t o = 0, last_slash = 0;

    /* The template up to its first %u, %% unescaped; without %u, all of
     * it (the directory above it is then the fixed part). */
    for (const char *p = cfg->default_dest; *p != '\0'; p++) {
        if (p[0] == '%' && p[1] == 'u')
            break;
        if (p[0] == '%' && p[1] == '%')
            p++;
        if (o + 1 >= sizeof(buf)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        if (*p == '/')
            last_slash = o;
        buf[o++] = *p;
    }
    buf[o] = '\0';
    if (o == 0 || buf[0] != '/') {
        errno = EINVAL;
        return -1;
    }
    buf[last_slash == 0 ? 1 : last_slash] = '\0';
    return sh_spec_path_normalize(buf, out, outlen, NULL, 0);
}

const char *sh_config_allowed_root(const struct sh_config *cfg,
                                   const char *dst)
{
    if (cfg->cache[0] != '\0' && sh_cache_dst_kind(cfg->cache, dst, NULL) != SH_CACHE_DST_NONE)
        return cfg->cache;
    for (size_t i = 0; i < cfg->n_allowed_dest; i++)
        if (sh_spec_path_is_under(dst, cfg->allowed_dest[i]))
            return cfg->allowed_dest[i];
    return NULL;
}

int sh_config_check_dest(const struct sh_config *cfg, const char *dst,
                         char *err, size_t errlen)
{
    char roots[SH_CONFIG_MAX_ROOTS * (SH_CONFIG_ROOT_MAX + 2)];
    char show[SHOW_MAX];
    size_t o = 0;
    const char *why = "";
    const char *base = strrchr(dst, '/');
    size_t blen;

    /* Names stagehand itself uses next to a DST: a DST with one of them
     * would be swept, locked or overwritten by another staging. */
    base = base != NULL ? base + 1 : dst;
    blen = strlen(base);
    if (base[0] == '.' &&
        ((blen > 5 && strstr(base, ".stage.") != NULL &&
          strcmp(base + blen - 4, ".tmp") == 0) ||
         (blen > 10 && strcmp(base + blen - 10, ".stagehand") == 0) ||
         (blen > 5 && strcmp(base + blen - 5, ".lock") == 0) ||
         strncmp(base, ".stagehand-marker.", 18) == 0)) {
        sh_errf(err, errlen,
                "destination '%s': names of the form .NAME.stage.*.tmp, "
                ".NAME.lock, .NAME.stagehand and .stagehand-marker.* are "
                "stagehand's own temporary, lock and metadata files; choose "
                "another name", sh_spec_display(dst, show, sizeof(show)));
        errno = EINVAL;
        return -1;
    }
    if (cfg->cache[0] != '\0' && sh_spec_path_is_under(dst, cfg->cache) &&
        sh_cache_dst_kind(cfg->cache, dst, NULL) == SH_CACHE_DST_NONE) {
        sh_errf(err, errlen, "destination '%s' is inside the node image cache %s, which "
                "is stagehand's own: give the image without a destination to use the "
                "cache", sh_spec_display(dst, show, sizeof(show)), cfg->cache);
        errno = EACCES;
        return -1;
    }
    if (sh_config_allowed_root(cfg, dst) != NULL)
        return 0;
    /* "/nvme" itself: the root is a directory, DST must be a file in it */
    for (size_t i = 0; i < cfg->n_allowed_dest; i++) {
        if (strcmp(dst, cfg->allowed_dest[i]) == 0) {
            sh_errf(err, errlen, "destination '%s' is the allowed directory "
                    "itself: give a file name inside it, e.g. %s/image.sqsh",
                    sh_spec_display(dst, show, sizeof(show)), cfg->allowed_dest[i]);
            errno = EACCES;
            return -1;
        }
    }
    roots[0] = '\0';
    for (size_t i = 0; i < cfg->n_allowed_dest && o < sizeof(roots); i++)
        o += (size_t)snprintf(roots + o, sizeof(roots) - o, "%s%s",
                              i > 0 ? ", " : "", cfg->allowed_dest[i]);
    /* case F23: job_container/tmpfs and private-tmp plugins give each job
     * its own /tmp and /dev/shm; the prolog writes in the host's. */
    if (strcmp(dst, "/tmp") == 0 || sh_spec_path_is_under(dst, "/tmp") ||
        strcmp(dst, "/dev/shm") == 0 || sh_spec_path_is_under(dst, "/dev/shm"))
        why = "; /tmp and /dev/shm can be private to each job, so a file "
              "staged there before the job starts would not be visible to it";
    sh_errf(err, errlen,
           "destination '%s' is not under a directory this cluster allows "
           "for staging (%s)%s", sh_spec_display(dst, show, sizeof(show)),
           roots, why);
    errno = EACCES;
    return -1;
}

int sh_config_check_registry(const struct sh_config *cfg, const char *registry,
                             char *err, size_t errlen)
{
    char show[SHOW_MAX];

    if (sh_ref_registry_listed(cfg->allowed_registries, registry))
        return 0;
    if (cfg->allowed_registries[0] == '\0')
        sh_errf(err, errlen, "registry '%s' is not allowed: this cluster allows no "
                "registry images (the site's allowed_registries= is not set)",
                sh_spec_display(registry, show, sizeof(show)));
    else
        sh_errf(err, errlen, "registry '%s' is not allowed on this cluster (allowed: %s)",
                sh_spec_display(registry, show, sizeof(show)), cfg->allowed_registries);
    errno = EACCES;
    return -1;
}
