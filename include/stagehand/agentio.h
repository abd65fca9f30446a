/* The pipe protocol between the plugin's prolog side (root, in slurmd) and
 * stagehand-agent. Both directions are stagehand/kv.h lines.
 *
 * Plugin -> agent (the agent's stdin), in any order, then "end":
 *   version=<SH_AGENT_PROTO_VERSION>
 *   jobid=<n>  [stepid=<n>: a job step's staging]  uid=<n>  gid=<n>  user=<name>
 *   nodelist=<Slurm hostlist>  nodename=<this node>  cluster=<name>
 *   spec=<canonical spec set, stagehand/spec.h>
 *   [nnodes=<n>  nodeid=<i>: Slurm's node count of the job or step and this
 *    node's index in it; the agent refuses a node list that disagrees]
 *   arg=<plugstack argument>          (repeated, in order)
 *   [refuse=<message>: the plugin's pre-check of the node image cache
 *    (cache=) found that this node's cache images cannot fit even with
 *    every unused entry evicted; the agent votes this error for each cache
 *    image that still needs a copy, so every node fails the job at once,
 *    naming this node and the message (a user's failure)]
 *   [local=current: the plugin found every image current on this node as
 *    the job user sees SRC, recorded that outcome and ended the prolog; the
 *    agent runs detached (stdout is /dev/null, its log goes to syslog) and
 *    only serves the other nodes: it votes, relays and, as node 0, reads]
 *   end
 * Inputs never travel in argv or the environment (F19: the prolog's
 * environment has no PATH/HOME/USER, and argv is visible to every user).
 *
 * Agent -> plugin (the agent's stdout):
 *   log=<line for the slurmd log>     (any number, any time)
 *   phase=user                        (it has dropped root: see below)
 *   summary=<one line per image>      (after the outcome is known)
 *   result=ok|fail
 *   fault=none|user|node              (who is to blame for a failure)
 *   message=<one line for the user: node, image, phase, reason>
 *   cache=<img> <digest> <identity>  (image <img>'s new copy on this node is
 *                                     for the node image cache: the reader's
 *                                     digest, SRC's identity as sh_src_encode)
 */
#ifndef STAGEHAND_AGENTIO_H
#define STAGEHAND_AGENTIO_H

#include <stdint.h>

#define SH_AGENT_PROTO_VERSION 2

/* Step id of a job-level (prolog) staging in the key and port derivations
 * (stagehand/ctlport.h); job steps use their own id. */
#define SH_AGENT_STEP_JOB UINT64_C(0xfffffffe)

#define SH_AGENT_IN_VERSION  "version"
#define SH_AGENT_IN_JOBID    "jobid"
#define SH_AGENT_IN_STEPID   "stepid"
#define SH_AGENT_IN_UID      "uid"
#define SH_AGENT_IN_GID      "gid"
#define SH_AGENT_IN_USER     "user"
#define SH_AGENT_IN_NODELIST "nodelist"
#define SH_AGENT_IN_NODENAME "nodename"
#define SH_AGENT_IN_CLUSTER  "cluster"
#define SH_AGENT_IN_SPEC     "spec"
#define SH_AGENT_IN_ARG      "arg"
#define SH_AGENT_IN_NNODES   "nnodes" /* Slurm's node count of the job or step (optional) */
#define SH_AGENT_IN_NODEID   "nodeid" /* this node's index in it (optional) */
#define SH_AGENT_IN_LOCAL    "local"
#define SH_AGENT_IN_REFUSE   "refuse"   /* the plugin's cache pre-check refused */
#define SH_AGENT_IN_LISTENER "listener" /* fd of the control-plane listener a sentinel bound */
#define SH_AGENT_IN_UMASK    "umask"    /* the job's umask, octal; missing: SH_UMASK_DEFAULT */
#define SH_AGENT_IN_END      "end"

#define SH_AGENT_OUT_LOG     "log"
#define SH_AGENT_OUT_DEBUG   "debug"   /* a detail line: slurmd logs it at debug level */
#define SH_AGENT_OUT_SUMMARY "summary"
#define SH_AGENT_OUT_RESULT  "result"
#define SH_AGENT_OUT_FAULT   "fault"
#define SH_AGENT_OUT_MESSAGE "message"
#define SH_AGENT_OUT_CACHE   "cache"
/* "phase=user": the agent has become the job user; a death without a result
 * after it may be the user's doing (a signal), not the node's. */
#define SH_AGENT_OUT_PHASE   "phase"

/* The most nodes a staging's node list may name: the agent refuses a list
 * whose expansion is larger (or larger than the nnodes input). */
#define SH_AGENT_MAX_NODES   65536

#endif
