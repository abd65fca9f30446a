/* The per-node staging outcome of a job (stagehand/status.h). Library code: the plugin (root)
 * and the agent. */
#include "config.h"
#include "stagehand/status.h"
#include "stagehand/kv.h"
#include "stagehand/size.h"
#include "stagehand/spec.h"

_Static_assert(SH_STATUS_MAX_IMAGES >= SH_SPEC_MAX_IMAGES,
               "the status file must hold every image of a spec");

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int sh_status_path(const char *runtime_dir, unsigned long jobid, long stepid,
                   char *out, size_t outlen)
{
    int n;

    if (stepid < 0)
        n = snprintf(out, outlen, "%s/%lu.status", runtime_dir, jobid);
    else
        n = snprintf(out, outlen, "%s/%lu.%ld.status", runtime_dir, jobid, stepid);
    if (n < 0 || (size_t)n >= outlen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int sh_status_write(const char *path, const struct sh_status *st)
{
    char tmp[4096];
    FILE *f = NULL;
    int fd, rc = -1, saved;

    if (snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >=
        (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    f = fdopen(fd, "w");
    if (f == NULL) {
        saved = errno;
        close(fd);
        goto fail;
    }
    if (fprintf(f, "version=%d\nresult=%s\n", SH_STATUS_VERSION,
                st->ok ? "ok" : "fail") < 0 ||
        sh_kv_put(f, "node", st->node) != 0 ||
        sh_kv_put(f, "message", st->message) != 0)
        goto fail_errno;
    for (size_t i = 0; i < st->n_images; i++)
        if (sh_kv_put(f, "image", st->image[i]) != 0)
            goto fail_errno;
    for (size_t i = 0; i < st->n_summaries; i++)
        if (sh_kv_put(f, "summary", st->summary[i]) != 0)
            goto fail_errno;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        goto fail_errno;
    rc = fclose(f);
    f = NULL;
    if (rc != 0)
        goto fail_errno;
    if (rename(tmp, path) != 0)
        goto fail_errno;
    return 0;

fail_errno:
    saved = errno;
fail:
    if (f != NULL)
        fclose(f);
    unlink(tmp);
    errno = saved;
    return -1;
}

void sh_status_clear(struct sh_status *st)
{
    st->ok = false;
    st->node[0] = '\0';
    st->message[0] = '\0';
    st->n_images = 0;
    st->n_summaries = 0;
}

int sh_status_read(const char *path, struct sh_status *st)
{
    char line[SH_KV_LINE_MAX];
    struct stat sb;
    FILE *f;
    int fd, version = -1, have_result = 0;

    sh_status_clear(st);
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    if (fstat(fd, &sb) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_uid != 0 || (sb.st_mode & 022) != 0) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    f = fdopen(fd, "r");
    if (f == NULL) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *key, *value;

        if (sh_kv_split(line, &key, &value) != 0)
            goto proto;
        if (strcmp(key, "version") == 0) {
            uint64_t v;

            if (sh_parse_u64(value, &v) != 0 || v > INT32_MAX)
                goto proto;
            version = (int)v;
        } else if (strcmp(key, "result") == 0) {
            if (strcmp(value, "ok") == 0)
                st->ok = true;
            else if (strcmp(value, "fail") != 0)
                goto proto;
            have_result = 1;
        } else if (strcmp(key, "node") == 0) {
            snprintf(st->node, sizeof(st->node), "%s", value);
        } else if (strcmp(key, "message") == 0) {
            snprintf(st->message, sizeof(st->message), "%s", value);
        } else if (strcmp(key, "image") == 0) {
            sh_status_add_image(st, value);
        } else if (strcmp(key, "summary") == 0) {
            sh_status_add_summary(st, value);
        }
        /* Unknown keys are ignored: a newer writer may add fields. */
    }
    fclose(f);
    if (version != SH_STATUS_VERSION || !have_result) {
        errno = EPROTO;
        return -1;
    }
    return 0;

proto:
    fclose(f);
    errno = EPROTO;
    return -1;
}

void sh_status_add_image(struct sh_status *st, const char *dst)
{
    if (st->n_images < SH_STATUS_MAX_IMAGES)
        snprintf(st->image[st->n_images++], PATH_MAX, "%s", dst);
}

void sh_status_add_summary(struct sh_status *st, const char *line)
{
    if (st->n_summaries < SH_STATUS_MAX_IMAGES)
        snprintf(st->summary[st->n_summaries++], SH_STATUS_LINE_MAX, "%s", line);
}
