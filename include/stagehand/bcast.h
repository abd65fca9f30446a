/* What the agent and the engine (stagehand-bcast) agree on beyond the
 * engine's documented options (stagehand-bcast(1)). */
#ifndef STAGEHAND_BCAST_H
#define STAGEHAND_BCAST_H

/* The engine takes SRC and DST from these variables when --source and
 * --dest are not given. The agent passes them so: a process's environment
 * is readable by its owner and root only, its command line by every user of
 * the node (proc(5)), and the paths may be private (issue 30). */
#define SH_BCAST_SOURCE_ENV "STAGEHAND_BCAST_SOURCE"
#define SH_BCAST_DEST_ENV   "STAGEHAND_BCAST_DEST"

#endif
