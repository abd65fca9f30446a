/* Control-plane ports: stagehand/ctlport.h. */
#include "config.h"
#include "stagehand/ctlport.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

uint16_t sh_ctl_derive_port(uint64_t jobid, uint64_t stepid, uint16_t base,
                            uint16_t range)
{
    /* splitmix64 finaliser: neighbouring job ids land far apart. */
    uint64_t x = jobid * 0x9e3779b97f4a7c15ULL ^ (stepid + 0x632be59bd9b4e019ULL);

    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    if (range == 0)
        return base;
    return (uint16_t)(base + (uint16_t)(x % range));
}

uint32_t sh_ctl_default_probe(uint16_t range)
{
    return range < SH_CTL_PROBE_MAX ? range : SH_CTL_PROBE_MAX;
}

uint16_t sh_ctl_probe_port(uint64_t jobid, uint64_t stepid, uint16_t base,
                           uint16_t range, uint32_t step)
{
    uint16_t first = sh_ctl_derive_port(jobid, stepid, base, range);
    uint32_t off = ((uint32_t)(first - base) + step) % range;

    return (uint16_t)(base + off);
}

int sh_ctl_bind(const char *bind_addr, uint64_t jobid, uint64_t stepid, uint16_t base,
                uint16_t range, uint32_t probe, int backlog, uint16_t *port)
{
    int err = EADDRINUSE;

    for (uint32_t step = 0; step < probe; step++) {
        uint16_t p = sh_ctl_probe_port(jobid, stepid, base, range, step);
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
        struct addrinfo *ai = NULL;
        char service[8];
        int in_use = 0;

        snprintf(service, sizeof(service), "%u", p);
        if (getaddrinfo(bind_addr, service, &hints, &ai) != 0) {
            errno = EINVAL;
            return -1;
        }
        for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
            int one = 1;
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            a->ai_protocol);

            if (fd < 0) {
                err = errno;
                continue;
            }
            (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
                freeaddrinfo(ai);
                *port = p;
                return fd;
            }
            err = errno;
            if (err == EADDRINUSE)
                in_use = 1;
            close(fd);
        }
        freeaddrinfo(ai);
        if (!in_use)
            break;
    }
    errno = err;
    return -1;
}

int sh_ctl_unprivileged_port_start(void)
{
    char buf[32];
    ssize_t n;
    long v;
    char *end;
    int fd = open("/proc/sys/net/ipv4/ip_unprivileged_port_start", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        errno = EIO;
        return -1;
    }
    buf[n] = '\0';
    errno = 0;
    v = strtol(buf, &end, 10);
    if (errno != 0 || end == buf || v < 0 || v > 65536) {
        errno = EINVAL;
        return -1;
    }
    return (int)v;
}

int sh_ctl_range_unprivileged(uint16_t base, uint16_t range, int *start)
{
    int s = sh_ctl_unprivileged_port_start();

    if (s < 0)
        s = 1024;
    *start = s;
    return range > 0 && (uint32_t)base + range - 1 >= (uint32_t)s;
}
