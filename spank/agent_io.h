/* A staging's agent (agent_io.c): its start, its inputs and outputs over two
 * pipes (stagehand/agentio.h), its deadline and its reaping, for the
 * staging's steps (staging.c); the agent's inputs and command line also for
 * the sentinel that becomes an agent (sentinel.c). Root, in the processes
 * that run a staging (staging.h). Nothing here is exported from the .so
 * (stagehand.map). */
#ifndef STAGEHAND_SPANK_AGENT_IO_H
#define STAGEHAND_SPANK_AGENT_IO_H

#include <stdbool.h>

#include "staging.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"

/* A staging's outcome so far (struct sh_staging's res): filled from the
 * agent's output lines (stagehand/agentio.h), or by the staging's steps
 * where no agent runs. Lives in staging.c's static storage (~0.6 MiB). */
struct sh_agent_result {
    bool user_phase;     /* the agent said it runs as the job user now */
    bool have_result;
    bool ok;
    bool node_fault;
    char message[SH_STATUS_LINE_MAX];
    struct sh_status status;
    /* "cache=<img> <digest> <identity>": image <img>'s new copy for the
     * node image cache (cache_job.c), NULL when none; malloc'ed, freed by
     * the staging's end (staging.c) */
    char *cache_report[SH_SPEC_MAX_IMAGES];
};

/* The agents decide together: run this node's agent for @s (its plugstack
 * arguments @ac, @av passed on as arg= inputs), its outcome in @s->res. The
 * job's values must fit the agent's input lines (else the user's error,
 * nothing started). The agent runs in a session of its own; it gets
 * @s->cfg's timeout= plus SH_STAGING_GRACE_S, then its process group is
 * killed; a step's staging on the step's node 0 also stops it when the job
 * ends meanwhile (issue 35 item 4). Never fails itself: a pipe or spawn
 * failure (errno in the message) is a node fault in @s->res. */
void sh_agent_run(struct sh_staging *s, int ac, char **av);

/* Write the agent's inputs (stagehand/agentio.h) to @fd, which is closed;
 * @detached: the prolog ends without the agent (local=current); @listener
 * >= 0: the agent's descriptor of the control-plane listener a sentinel
 * bound (listener=). Returns 0 or -1 (errno from fdopen(3) or the writes:
 * EPIPE when the agent has gone). */
int sh_agent_write_inputs(int fd, const struct sh_stage_job *job, bool detached,
                          int listener, int ac, char **av);

/* The agent's command line and whole environment (F19: nothing of the
 * job's), for posix_spawn(3) and a woken sentinel's execve(2). */
extern char *const sh_agent_argv[];
extern char *const sh_agent_envp[];

/* Move @fd to a descriptor number >= 3 (close-on-exec), closing the old one:
 * slurmd may run the prolog with fd 0-2 closed, so a pipe end can be 0, 1
 * or 2 and would be clobbered by the dup2 onto stdin/stdout. Returns the new
 * descriptor, or -1 with errno from fcntl(2) (@fd is closed either way). */
int sh_above_stdio(int fd);

#endif
