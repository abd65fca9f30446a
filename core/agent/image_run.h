/* stagehand-agent --prolog: one image's run of the per-image protocol
 * (protocol.c), and the leader's part of a registry image in it
 * (import_plan.c). Private to the agent. */
#ifndef STAGEHAND_AGENT_IMAGE_RUN_H
#define STAGEHAND_AGENT_IMAGE_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>

#include "engine_report.h"
#include "staging.h"
#include "stagehand/hash.h"
#include "stagehand/meta.h"
#include "stagehand/ref.h"

/* One image's run of the protocol on this node. */
struct image_run {
    size_t img;
    const char *src, *dst;
    struct sh_src_id id;
    char mdir[PATH_MAX];        /* DST's nearest existing directory */
    bool made;                  /* this node's marker is there */
    char claim[2 * PATH_MAX + 128]; /* sh_claim_text: DST, SRC, SRC's identity */
    int clen;
    uint32_t *part;             /* participants' node indices (node 0 first) */
    uint32_t npart, mypos;      /* this node is part[mypos]; UINT32_MAX: none */
    int64_t t0;
    bool leader_cause;          /* leader: the engine's report says why */
    bool source_fault;          /* leader: only the source failed */
    bool copied;                /* this node ran the engine and it succeeded */
    char ref_digest[SH_HASH_HEX_LEN]; /* the reader's digest, over the control plane */
    char faulty[256];           /* leader: node indices at fault ("i,j") */
    struct sh_engine_report rep;    /* leader: the engine's report */
    bool have_rep;
    char buf[SH_STATUS_LINE_MAX];   /* this node's message of the step */
    int len;
    bool image;                 /* a registry image (docker://, import.c) */
    struct sh_ref ref;          /* ... pinned to its digest after step 1 */
    char workdir[PATH_MAX];     /* leader: the private import directory */
    char imgfile[PATH_MAX];     /* leader: the imported image in it */
    bool imported;              /* leader: @workdir holds an import */
};

/* A registry image's identity from the leader's source record @e (its
 * pinned reference after the record's newline) into @r->id.path and
 * @r->ref. Returns 0, or -1 with the reason in @err (@errlen bytes). */
int image_pinned_from(const struct sh_ctl_entry *e, struct image_run *r, char *err,
                      size_t errlen);

/* Free bytes, for an unprivileged user, of the filesystem of @dir
 * (statvfs(2)); 0 when it fails. */
uint64_t image_dir_free_bytes(const char *dir);

/* Leader: import the registry image @r once and check that it fits every
 * node that needs it (their votes @votes); on failure the plan "fail ..."
 * is in @r->buf and nothing of the import is left. Returns 0 or -1. */
int image_plan_import(struct agent *a, struct image_run *r, const struct sh_ctl_result *votes);

#endif
