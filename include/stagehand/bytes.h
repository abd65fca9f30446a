/* Byte-level helpers: big-endian (network order) encoding of fixed-width
 * integers for the control plane's wire formats (frames, handshake, key
 * derivation, tree messages; @p must point at enough bytes), and hex digits
 * for the text formats. */
#ifndef STAGEHAND_BYTES_H
#define STAGEHAND_BYTES_H

#include <stdint.h>

static inline void sh_put_be16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static inline void sh_put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void sh_put_be64(unsigned char *p, uint64_t v)
{
    sh_put_be32(p, (uint32_t)(v >> 32));
    sh_put_be32(p + 4, (uint32_t)v);
}

static inline uint16_t sh_get_be16(const unsigned char *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t sh_get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t sh_get_be64(const unsigned char *p)
{
    return (uint64_t)sh_get_be32(p) << 32 | sh_get_be32(p + 4);
}

/* Value of the hexadecimal digit @c (either case), or -1. */
static inline int sh_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
