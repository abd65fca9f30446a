/* stagehand-agent's prolog mode (stage.c). */
#ifndef STAGEHAND_AGENT_STAGE_H
#define STAGEHAND_AGENT_STAGE_H

/* Run one job-level staging: inputs on stdin, outcome on stdout, both in the
 * format of stagehand/agentio.h. Must start as root (it drops to the job
 * user after the root-only set-up). Returns the process exit status: 0 when
 * the staging succeeded, 1 otherwise (the outcome says why). */
int sh_agent_prolog_main(void);

#endif
