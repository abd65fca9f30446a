/* The spec set's layout and the helpers its files share (spec.c: the set
 * and the --stage-image grammar; spec_path.c: displaying and normalising
 * paths; spec_wire.c: the wire form). Private to them. */
#ifndef STAGEHAND_COMMON_SPEC_INTERNAL_H
#define STAGEHAND_COMMON_SPEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "stagehand/spec.h"

struct sh_spec_image {
    char *src;
    char *dst;
    char *origin; /* option value, or NULL */
};

struct sh_spec_set {
    struct sh_spec_image *img;
    size_t n;
    size_t cap;
    char default_registry[256]; /* for references that name none, or "" */
};

/* Room for one path in a message (longer ones end in "..."). */
#define SHOW_MAX 320

/* Check @src -> @dst against @set and the images already in @pending and
 * append it to @pending (spec.c). 0, or -1 with errno and a message. */
int spec_add_pair(const struct sh_spec_set *set, struct sh_spec_set *pending,
                  const char *src, const char *dst, const char *origin,
                  char *err, size_t errlen);

/* Move @pending's images into @set (spec.c). 0, or -1 with errno. */
int spec_set_merge(struct sh_spec_set *set, struct sh_spec_set *pending,
                   char *err, size_t errlen);

/* Whether a control character starts at @p (spec_path.c); with @what,
 * describes it there. */
bool spec_control_at(const unsigned char *p, char *what, size_t whatlen);

#endif
