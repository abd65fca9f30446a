/* Parsing of sizes and durations given by users and admins. */
#ifndef STAGEHAND_SIZE_H
#define STAGEHAND_SIZE_H

#include <stdint.h>

/* Parse a byte size: a decimal integer with an optional binary unit suffix
 * K, M, G, T (also KiB/MiB/GiB/TiB, case-insensitive; "B" alone allowed).
 * Stores bytes in *out. Returns 0, or -1 with errno = EINVAL (syntax, empty,
 * negative, unknown unit) or ERANGE (overflow of uint64_t). */
int sh_parse_size(const char *text, uint64_t *out);

/* Parse a segment size (plugstack segment_size=, the engine's
 * --segment-size): a size as sh_parse_size() reads it, from 1 byte to
 * SH_SEGMENT_MAX (stagehand/modes.h; case F09: refused, never clamped).
 * Returns 0, or -1 with errno = EINVAL (not a size) or ERANGE (0, above
 * SH_SEGMENT_MAX, or overflow). */
int sh_parse_segment_size(const char *text, uint64_t *out);

/* Parse a plain decimal integer (digits only, the whole string: no sign,
 * space or suffix) into *out. Returns 0, or -1 with errno = EINVAL (empty or
 * not digits) or ERANGE (overflow of uint64_t). */
int sh_parse_u64(const char *text, uint64_t *out);

/* Parse permission bits written in octal ("0700", "755", "077"): 1 to 4
 * octal digits, at most 0777 (no setuid, setgid or sticky bit). Returns 0,
 * or -1 with errno = EINVAL (not octal digits) or ERANGE (above 0777). */
int sh_parse_mode(const char *text, unsigned *out);

/* Parse a duration: integer with optional suffix ms, s, m, h (default s).
 * Stores nanoseconds in *out_ns. Returns 0, or -1 with errno = EINVAL/ERANGE. */
int sh_parse_duration(const char *text, uint64_t *out_ns);

/* Format @bytes as a human string ("1.50 GiB") into buf of @len bytes.
 * Returns buf. */
char *sh_format_size(uint64_t bytes, char *buf, unsigned len);

#endif
