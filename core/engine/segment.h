/* Segment schedule of a broadcast and the per-segment status header.
 *
 * Every rank derives the identical schedule from the (size, segment) pair that
 * the reader broadcasts (case F10): segment k covers bytes
 * [k*segment, min((k+1)*segment, size)). Sizes and offsets are 64-bit; the
 * MPI count of one message is an int derived from the clamped segment size
 * (case F09). */
#ifndef STAGEHAND_SCHED_H
#define STAGEHAND_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "stagehand/modes.h"   /* SH_SEGMENT_MAX */

#define SH_SEG_HDR_LEN 16                   /* bytes of status header per message */

struct sh_sched {
    uint64_t size;      /* file size, bytes */
    uint64_t segment;   /* segment size, bytes, 1..SH_SEGMENT_MAX */
    uint64_t nseg;      /* number of segments; 0 for an empty file */
};

/* Fill @s. Returns 0, or -1 with errno = EINVAL when @segment is 0 or larger
 * than SH_SEGMENT_MAX. */
int sh_sched_init(struct sh_sched *s, uint64_t size, uint64_t segment);
/* Byte offset of segment @k (k < nseg). */
uint64_t sh_sched_offset(const struct sh_sched *s, uint64_t k);
/* Length in bytes of segment @k; 0 when k >= nseg. Never above segment. */
size_t sh_sched_len(const struct sh_sched *s, uint64_t k);
/* MPI count (bytes) of the message carrying segment @k: its length plus the
 * status header. Always in [SH_SEG_HDR_LEN, SH_SEGMENT_MAX + SH_SEG_HDR_LEN]. */
int sh_sched_count(const struct sh_sched *s, uint64_t k);

/* Status header sent after the data of every segment (case F29): a source read
 * error travels as an error, never as end of file. */
struct sh_seg_hdr {
    uint32_t status;    /* 0 = data valid, else SH_SEG_* below */
    uint32_t err;       /* errno of the reader when status != 0 */
    uint64_t index;     /* segment index, checked by receivers */
};
#define SH_SEG_OK 0u
#define SH_SEG_READ_ERROR 1u    /* reader failed to read SRC (err = errno) */
#define SH_SEG_SHORT_SOURCE 2u  /* SRC shrank while being read */
#define SH_SRC_CHANGED 100u     /* SRC's size/mtime/ctime moved during the copy
                                   (the reader's fstat after the last segment) */

/* Fixed little-endian wire form, SH_SEG_HDR_LEN bytes. */
void sh_seg_hdr_encode(const struct sh_seg_hdr *h, unsigned char *out);
void sh_seg_hdr_decode(const unsigned char *in, struct sh_seg_hdr *h);

#endif
