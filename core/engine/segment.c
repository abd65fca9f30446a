/* stagehand-bcast: the segment schedule (segment.h). */
#include "config.h"
#include "segment.h"

#include <errno.h>

int sh_sched_init(struct sh_sched *s, uint64_t size, uint64_t segment)
{
    if (segment == 0 || segment > SH_SEGMENT_MAX) {
        errno = EINVAL;
        return -1;
    }
    s->size = size;
    s->segment = segment;
    /* ceil(size / segment) without overflowing size + segment - 1 */
    s->nseg = size / segment + (size % segment != 0 ? 1 : 0);
    return 0;
}

uint64_t sh_sched_offset(const struct sh_sched *s, uint64_t k)
{
    return k * s->segment;
}

size_t sh_sched_len(const struct sh_sched *s, uint64_t k)
{
    uint64_t off;

    if (k >= s->nseg)
        return 0;
    off = k * s->segment;
    return (size_t)(s->size - off < s->segment ? s->size - off : s->segment);
}

int sh_sched_count(const struct sh_sched *s, uint64_t k)
{
    /* len <= SH_SEGMENT_MAX (1 GiB), so len + header fits an int. */
    return (int)(sh_sched_len(s, k) + SH_SEG_HDR_LEN);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;

    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void sh_seg_hdr_encode(const struct sh_seg_hdr *h, unsigned char *out)
{
    put32(out, h->status);
    put32(out + 4, h->err);
    put64(out + 8, h->index);
}

void sh_seg_hdr_decode(const unsigned char *in, struct sh_seg_hdr *h)
{
    h->status = get32(in);
    h->err = get32(in + 4);
    h->index = get64(in + 8);
}
