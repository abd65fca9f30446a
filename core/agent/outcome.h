/* stagehand-agent --prolog: the engine's outcome (outcome.c). */
#ifndef STAGEHAND_AGENT_OUTCOME_H
#define STAGEHAND_AGENT_OUTCOME_H

#include <stddef.h>
#include <stdint.h>

#include "engine_report.h"

struct agent;

/* Leader: read image @img's engine report (@npart participants) into @r.
 * Returns 0, or -1 when there is none (logged when it is unreadable, too big
 * or malformed: the caller goes on without it, with the engines' exit
 * statuses). */
int engine_report_load(const struct agent *a, size_t img, uint32_t npart,
                       struct sh_engine_report *r);
void engine_summary(const struct sh_engine_report *r, const char *dst, uint32_t nnodes,
                    double secs, char *buf, size_t len);
void engine_phases_debug(const struct sh_engine_report *r);
void engine_failures(const struct sh_engine_report *rep, char *buf, size_t len);
void engine_node_faults(const struct sh_engine_report *rep, const uint32_t *part,
                        uint32_t npart, char *const *names, char *buf, size_t len);

#endif
