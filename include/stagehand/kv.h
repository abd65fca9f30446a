/* One-line "key=value" records: the format of the status file and of the
 * pipe between the plugin's prolog side and the agent. Values are kept on one
 * line: control bytes and '\' are written as "\xHH". */
#ifndef STAGEHAND_KV_H
#define STAGEHAND_KV_H

#include <stddef.h>
#include <stdio.h>

/* Longest encoded line the readers accept, bytes (including the newline). */
#define SH_KV_LINE_MAX 8192

/* Write "key=value\n" to @f with @value escaped. Returns 0, or -1 with errno
 * from stdio (or E2BIG when the encoded line exceeds SH_KV_LINE_MAX). */
int sh_kv_put(FILE *f, const char *key, const char *value);

/* printf-style value. Same returns as sh_kv_put(). */
int sh_kv_putf(FILE *f, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Split one line (trailing newline allowed) in place into *key and *value
 * and unescape the value. Returns 0, or -1 with errno = EPROTO (no '=',
 * empty key, bad escape). The pointers point into @line. */
int sh_kv_split(char *line, char **key, char **value);

#endif
