/* The engine's --json report, read with json-c (engine_report.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "engine_report.h"
#include "stagehand/bcast.h"

/* The member @key of @obj if it has type @type, else NULL with @err saying
 * which key of @what is missing or of another type. */
static struct json_object *member(struct json_object *obj, const char *key,
                                  enum json_type type, const char *what, const char *path,
                                  char *err, size_t errlen)
{
    struct json_object *v = NULL;

    if (json_object_object_get_ex(obj, key, &v) && json_object_is_type(v, type))
        return v;
    /* an integer is also a number */
    if (v != NULL && type == json_type_double && json_object_is_type(v, json_type_int))
        return v;
    snprintf(err, errlen, "engine report %.400s: %s\"%s\" %s", path, what, key,
             v == NULL ? "is missing" : "has the wrong type");
    return NULL;
}

/* Read at most @max bytes of @path into a NUL-terminated buffer (*@out,
 * malloc'ed; its length in *@n). */
static int read_bounded(const char *path, size_t max, char **out, size_t *n, char *err,
                        size_t errlen)
{
    struct stat st;
    char *buf;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int e;

    if (fd < 0 || fstat(fd, &st) != 0) {
        e = errno;
        snprintf(err, errlen, "engine report %.400s: %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        snprintf(err, errlen, "engine report %.400s: %s (%lld bytes, at most %zu for this "
                 "staging)", path, S_ISREG(st.st_mode) ? "too big" : "not a regular file",
                 (long long)st.st_size, max);
        close(fd);
        errno = S_ISREG(st.st_mode) ? EFBIG : EBADMSG;
        return -1;
    }
    buf = malloc((size_t)st.st_size + 2);
    if (buf == NULL) {
        close(fd);
        snprintf(err, errlen, "engine report %.400s: out of memory", path);
        errno = ENOMEM;
        return -1;
    }
    /* one byte more than fstat said, to see a file that grew since */
    while (got < (size_t)st.st_size + 1) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size + 1 - got);

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            e = errno;
            if (r == 0)
                break;
            snprintf(err, errlen, "engine report %.400s: %s", path, strerror(e));
            free(buf);
            close(fd);
            errno = e;
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    if (got > (size_t)st.st_size) {
        snprintf(err, errlen, "engine report %.400s: still being written", path);
        free(buf);
        errno = EBADMSG;
        return -1;
    }
    buf[got] = '\0';
    *out = buf;
    *n = got;
    return 0;
}

/* Parse @text (@n bytes) as one JSON object with nothing but white space
 * after it. */
static struct json_object *parse_object(const char *text, size_t n, const char *path,
                                        char *err, size_t errlen)
{
    struct json_tokener *tok = json_tokener_new();
    struct json_object *root;
    enum json_tokener_error je;
    size_t end;

    if (tok == NULL) {
        snprintf(err, errlen, "engine report %.400s: out of memory", path);
        errno = ENOMEM;
        return NULL;
    }
    root = n > 0 && n < INT_MAX ? json_tokener_parse_ex(tok, text, (int)n) : NULL;
    je = json_tokener_get_error(tok);
    end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (root != NULL && je == json_tokener_success) {
        while (end < n && strchr(" \t\r\n", text[end]) != NULL)
            end++;
        if (end == n && json_object_is_type(root, json_type_object))
            return root;
    }
    if (n == 0) {
        snprintf(err, errlen, "engine report %.400s: empty", path);
        errno = ENODATA;
        return NULL;
    }
    snprintf(err, errlen, "engine report %.400s: not one JSON object (%s)", path,
             root == NULL || je != json_tokener_success
             ? json_tokener_error_desc(je == json_tokener_success ? json_tokener_continue : je)
             : end < n ? "text after the object" : "not an object");
    json_object_put(root);
    errno = EBADMSG;
    return NULL;
}

/* The "node_results" entries of @arr into @r->nodes. */
static int read_nodes(struct json_object *arr, struct sh_engine_report *r, const char *path,
                      char *err, size_t errlen)
{
    size_t n = json_object_array_length(arr);

    r->nodes = calloc(n > 0 ? n : 1, sizeof(*r->nodes));
    if (r->nodes == NULL) {
        snprintf(err, errlen, "engine report %.400s: out of memory", path);
        errno = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(arr, i);
        struct sh_engine_node *nd = &r->nodes[i];
        struct json_object *node, *phase, *error, *rank, *eno, *cls;
        const char *what = "a node result's ";

        if (e == NULL || !json_object_is_type(e, json_type_object)) {
            snprintf(err, errlen, "engine report %.400s: node result %zu is not an object",
                     path, i);
            errno = EPROTO;
            return -1;
        }
        if ((node = member(e, SH_BCAST_KEY_NODE, json_type_string, what, path, err,
                           errlen)) == NULL ||
            (rank = member(e, SH_BCAST_KEY_RANK, json_type_int, what, path, err,
                           errlen)) == NULL ||
            (eno = member(e, SH_BCAST_KEY_ERRNO, json_type_int, what, path, err,
                          errlen)) == NULL ||
            (cls = member(e, SH_BCAST_KEY_EXIT_CLASS, json_type_int, what, path, err,
                          errlen)) == NULL ||
            (phase = member(e, SH_BCAST_KEY_PHASE, json_type_string, what, path, err,
                            errlen)) == NULL ||
            (error = member(e, SH_BCAST_KEY_ERROR, json_type_string, what, path, err,
                            errlen)) == NULL) {
            errno = EPROTO;
            return -1;
        }
        nd->node = json_object_get_string(node);
        nd->phase = json_object_get_string(phase);
        nd->error = json_object_get_string(error);
        nd->rank = (long)json_object_get_int64(rank);
        nd->err = json_object_get_int(eno);
        nd->exit_class = json_object_get_int(cls);
        r->nnodes = i + 1;
    }
    return 0;
}

/* The top-level keys of @root into @r. */
static int read_top(struct json_object *root, struct sh_engine_report *r, const char *path,
                    char *err, size_t errlen)
{
    struct json_object *fmt, *code, *copied, *bytes, *wait, *owner, *digest, *serr, *secs, *res;

    if ((fmt = member(root, SH_BCAST_KEY_FORMAT, json_type_int, "", path, err,
                      errlen)) == NULL)
        return -1;
    if (json_object_get_int(fmt) != SH_BCAST_REPORT_FORMAT) {
        snprintf(err, errlen, "engine report %.400s: format %d, this agent reads %d: install "
                 "the same stagehand version on every node", path, json_object_get_int(fmt),
                 SH_BCAST_REPORT_FORMAT);
        return -1;
    }
    if ((code = member(root, SH_BCAST_KEY_EXIT_CODE, json_type_int, "", path, err,
                       errlen)) == NULL ||
        (copied = member(root, SH_BCAST_KEY_NODES_COPIED, json_type_int, "", path, err,
                         errlen)) == NULL ||
        (bytes = member(root, SH_BCAST_KEY_BYTES_TRANSFERRED, json_type_int, "", path,
                        err, errlen)) == NULL ||
        (wait = member(root, SH_BCAST_KEY_LOCK_WAIT, json_type_double, "", path, err,
                       errlen)) == NULL ||
        (owner = member(root, SH_BCAST_KEY_LOCK_OWNER, json_type_string, "", path, err,
                        errlen)) == NULL ||
        (digest = member(root, SH_BCAST_KEY_DIGEST, json_type_string, "", path, err,
                         errlen)) == NULL ||
        (serr = member(root, SH_BCAST_KEY_SOURCE_ERROR, json_type_string, "", path, err,
                       errlen)) == NULL ||
        (secs = member(root, SH_BCAST_KEY_SECONDS, json_type_object, "", path, err,
                       errlen)) == NULL ||
        (res = member(root, SH_BCAST_KEY_NODE_RESULTS, json_type_array, "", path, err,
                      errlen)) == NULL)
        return -1;
    r->exit_code = json_object_get_int(code);
    r->nodes_copied = (long)json_object_get_int64(copied);
    r->bytes_transferred = json_object_get_uint64(bytes);
    r->lock_wait_s = json_object_get_double(wait);
    r->lock_owner = json_object_get_string(owner);
    r->digest = json_object_get_string(digest);
    r->source_error = json_object_get_string(serr);
    for (int p = 0; p <= SH_PH_COUNT; p++) {
        const char *name = p < SH_PH_COUNT ? sh_phase_name((enum sh_phase)p)
                                           : SH_BCAST_KEY_TOTAL;
        struct json_object *v = member(secs, name, json_type_double, "seconds' ", path, err,
                                       errlen);

        if (v == NULL)
            return -1;
        r->seconds[p] = json_object_get_double(v);
    }
    return read_nodes(res, r, path, err, errlen);
}

int sh_engine_report_read(const char *path, size_t max_bytes, struct sh_engine_report *r,
                          char *err, size_t errlen)
{
    char *text = NULL;
    size_t n = 0;
    int e;

    memset(r, 0, sizeof(*r));
    if (read_bounded(path, max_bytes, &text, &n, err, errlen) != 0)
        return -1;
    r->root = parse_object(text, n, path, err, errlen);
    e = errno;
    free(text);
    if (r->root == NULL) {
        errno = e;
        return -1;
    }
    errno = 0;
    if (read_top(r->root, r, path, err, errlen) != 0) {
        e = errno == ENOMEM ? ENOMEM : EPROTO;
        sh_engine_report_free(r);
        errno = e;
        return -1;
    }
    return 0;
}

void sh_engine_report_free(struct sh_engine_report *r)
{
    free(r->nodes);
    json_object_put(r->root);
    memset(r, 0, sizeof(*r));
}
