/* Logging (stagehand/log.h). Library code: every program. */
#include "config.h"
#include "stagehand/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static char log_component[64] = "stagehand";
static char log_jobid[64];
static char log_node[64];
static int log_rank = -1;
static enum sh_log_level log_level = SH_LOG_INFO;
static sh_log_sink_fn log_sink;

static void copy_field(char *dst, size_t len, const char *src)
{
    if (src == NULL) {
        dst[0] = '\0';
        return;
    }
    snprintf(dst, len, "%s", src);
}

void sh_log_set_identity(const char *component, const char *jobid,
                         const char *node, int rank)
{
    if (component != NULL)
        copy_field(log_component, sizeof(log_component), component);
    copy_field(log_jobid, sizeof(log_jobid), jobid);
    copy_field(log_node, sizeof(log_node), node);
    log_rank = rank;
}

void sh_log_set_level(enum sh_log_level level) { log_level = level; }
enum sh_log_level sh_log_get_level(void) { return log_level; }
void sh_log_set_sink(sh_log_sink_fn sink) { log_sink = sink; }

static const char *level_name(enum sh_log_level level)
{
    switch (level) {
    case SH_LOG_ERROR: return "error";
    case SH_LOG_WARN: return "warning";
    case SH_LOG_INFO: return "info";
    case SH_LOG_DEBUG: return "debug";
    }
    return "?";
}

void sh_vlog(enum sh_log_level level, const char *phase, const char *fmt,
             va_list ap)
{
    int saved = errno;
    char msg[1024];
    char line[1400];
    char ident[200];
    size_t n = 0;

    if (level > log_level) {
        errno = saved;
        return;
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    ident[0] = '\0';
    if (log_jobid[0] != '\0')
        n += (size_t)snprintf(ident + n, sizeof(ident) - n, " job=%s", log_jobid);
    if (log_node[0] != '\0' && n < sizeof(ident))
        n += (size_t)snprintf(ident + n, sizeof(ident) - n, " node=%s", log_node);
    if (log_rank >= 0 && n < sizeof(ident))
        snprintf(ident + n, sizeof(ident) - n, " rank=%d", log_rank);
    snprintf(line, sizeof(line), "stagehand-%s%s [%s] %s%s%s", log_component,
             ident, phase != NULL ? phase : "-",
             level <= SH_LOG_WARN ? level_name(level) : "",
             level <= SH_LOG_WARN ? ": " : "", msg);
    if (log_sink != NULL) {
        log_sink(level, line);
    } else {
        fprintf(stderr, "%s\n", line);
    }
    errno = saved;
}

void sh_log(enum sh_log_level level, const char *phase, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    sh_vlog(level, phase, fmt, ap);
    va_end(ap);
}

void sh_errf(char *err, size_t errlen, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    errno = saved;
}
