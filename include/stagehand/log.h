/* stagehand logging: one family for every component.
 *
 * Every line carries the component, phase, job id, node and rank when known, so
 * that on a 1000-node job you can tell which node said what. Messages go to
 * stderr (the engine, the agent) or to a caller-supplied sink (the SPANK plugin
 * routes them to slurm_error/slurm_info). */
#ifndef STAGEHAND_LOG_H
#define STAGEHAND_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum sh_log_level { SH_LOG_ERROR = 0, SH_LOG_WARN, SH_LOG_INFO, SH_LOG_DEBUG };

/* Sink for formatted lines (without trailing newline). */
typedef void (*sh_log_sink_fn)(enum sh_log_level level, const char *line);

/* Set the component name ("bcast", "agent", ...) and identity stamped on each
 * line. Any pointer may be NULL / rank -1 to leave that field out. Strings are
 * copied (truncated to 63 bytes). */
void sh_log_set_identity(const char *component, const char *jobid,
                         const char *node, int rank);
/* Lines above this level are dropped. Default SH_LOG_INFO. */
void sh_log_set_level(enum sh_log_level level);
enum sh_log_level sh_log_get_level(void);
/* Redirect output to @sink (NULL restores stderr). */
void sh_log_set_sink(sh_log_sink_fn sink);

/* printf-style log with a phase tag ("publish", "transfer", ...). errno is
 * preserved across the call. */
void sh_log(enum sh_log_level level, const char *phase, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sh_vlog(enum sh_log_level level, const char *phase, const char *fmt,
             va_list ap) __attribute__((format(printf, 3, 0)));

/* Format a message into a caller's error buffer @err of @errlen bytes
 * (truncated, always NUL-terminated); a NULL or empty buffer is ignored.
 * errno is preserved. */
void sh_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sh_error(phase, ...) sh_log(SH_LOG_ERROR, phase, __VA_ARGS__)
#define sh_warn(phase, ...)  sh_log(SH_LOG_WARN, phase, __VA_ARGS__)
#define sh_info(phase, ...)  sh_log(SH_LOG_INFO, phase, __VA_ARGS__)
#define sh_debug(phase, ...) sh_log(SH_LOG_DEBUG, phase, __VA_ARGS__)

#endif
