/* stagehand.so: the job epilog on this node, as root: in slurmd's job epilog
 * (job-script context, slurm_spank_job_epilog), and under
 * PrologFlags=RunInJob, where Slurm calls no SPANK job epilog, in the job's
 * extern step (slurmstepd, remote context, slurm_spank_exit), in a child
 * that is root in every respect. It stops what a staging of the job left
 * running here (the staging process, a detached agent or sentinel), waits
 * for the job's lock and removes the job's entries of /run/stagehand. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "internal.h"
#include "joblock.h"
#include "staging.h"
#include "stagehand/local.h"
#include "rmtree.h"
#include "stagehand/cache.h"
#include "stagehand/status.h"

/* Epilog: stop the detached agent recorded in @name under @rfd, if that very
 * process still runs, with its process group. */
static void stop_detached(int rfd, uint32_t jobid, const char *name)
{
    char comm[32];
    pid_t pid = sh_job_recorded_process(rfd, name, comm, sizeof(comm));

    if (pid == 0)
        return;
    if (strcmp(comm, SH_SENTINEL_NAME "\n") == 0)
        slurm_debug("stagehand: epilog: job %u: stopping sentinel %d: no other node "
                    "needed this one", jobid, (int)pid);
    else
        slurm_info("stagehand: epilog: job %u: stopping agent %d, still serving other "
                   "nodes", jobid, (int)pid);
    kill(-pid, SIGKILL);
}

/* Epilog: the job has ended on this node while its staging here still runs
 * (a job cancelled while its images were copied, or one whose other nodes
 * ended it): nothing of this job will use the copy. SIGTERM its process
 * group: the engine removes its temp file, the agent dies and the staging
 * process records why (stage_process.c). Waiting for it instead would hold
 * the node in the epilog up to the staging deadline, and a node whose parent
 * in the control tree has already gone waits join_timeout for nothing. */
static void stop_running_staging(uint32_t jobid)
{
    char path[64], comm[32];
    pid_t pid;
    int rfd, fd;

    sh_job_lock_path(jobid, path, sizeof(path));
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
        close(fd); /* no staging holds it */
        return;
    }
    close(fd);
    rfd = open(SH_RUNTIME_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return;
    snprintf(path, sizeof(path), "%u.agent", jobid);
    pid = sh_job_recorded_process(rfd, path, comm, sizeof(comm));
    close(rfd);
    if (pid == 0 || strcmp(comm, SH_STAGING_NAME "\n") != 0)
        return; /* the prolog stages itself (on_node_fault=drain): it ends first */
    slurm_info("stagehand: epilog: job %u: stopping its staging on this node (process "
               "%d): the job has ended here", jobid, (int)pid);
    kill(-pid, SIGTERM);
}

/* Epilog: remove @name (a staging's runtime directory or state) under the
 * runtime directory @rfd, first unmounting its tmpfs (sh_rundir_limit). */
static void remove_runtime_entry(int rfd, uint32_t jobid, const char *name)
{
    if (sh_rundir_unlimit(rfd, name) != 0)
        slurm_error("stagehand: epilog: job %u: cannot unmount %s/%s: %s", jobid,
                    SH_RUNTIME_DIR, name, strerror(errno));
    if (sh_rmtree_at(rfd, name) != 0)
        slurm_error("stagehand: epilog: job %u: cannot remove %s/%s: %s", jobid,
                    SH_RUNTIME_DIR, name, strerror(errno));
}

/* Remove what staging left for @jobid besides its runtime directory:
 * "<jobid>.<step>" runtime directories, "<jobid>.<step>.status" files, and
 * "<jobid>.agent", the record of a detached agent, which is stopped first. */
static void remove_step_state(int rfd, uint32_t jobid)
{
    char prefix[32];
    struct dirent *de;
    DIR *d;
    int fd = dup(rfd);
    size_t plen;

    if (fd < 0)
        return;
    d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return;
    }
    snprintf(prefix, sizeof(prefix), "%u.", jobid);
    plen = strlen(prefix);
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);

        if (strncmp(de->d_name, prefix, plen) != 0)
            continue;
        if (len > 6 && strcmp(de->d_name + len - 6, ".agent") == 0)
            stop_detached(rfd, jobid, de->d_name);
        remove_runtime_entry(rfd, jobid, de->d_name);
    }
    closedir(d);
}

/* Epilog (issue 35 item 6): a staging process that was killed (or died)
 * before it wrote this node's outcome leaves its record, "<jobid>.agent",
 * naming a process that no longer runs, and no status. Nothing else saw it
 * end: say so in the slurmd log, naming the node; the job's tasks here
 * said it in the job's output (task.c). */
static void report_lost_staging(uint32_t jobid, const char *status_path)
{
    char name[32], comm[32], host[256];
    int rfd;

    if (access(status_path, F_OK) == 0 || errno != ENOENT)
        return;
    rfd = open(SH_RUNTIME_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return;
    snprintf(name, sizeof(name), "%u.agent", jobid);
    if (faccessat(rfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
        sh_job_recorded_process(rfd, name, comm, sizeof(comm)) == 0) {
        snprintf(host, sizeof(host), "%s", sh_job_env("SLURMD_NODENAME", NULL));
        if (host[0] == '\0' && gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "this node");
        slurm_error("stagehand: job %u: staging failed on %s: its staging process "
                    "(%s) ended without an outcome: killed, or it died; this node's "
                    "tasks of the job did not start", jobid, host, SH_STAGING_NAME);
    }
    close(rfd);
}

int sh_epilog_run(spank_t sp, int ac, char **av)
{
    char path[512], name[32];
    uint32_t jobid = 0;
    int rfd;

    if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
        return 0;
    /* A staging of this job still running here is stopped, then waited
     * for (bounded by its deadline): it writes its outcome last. */
    stop_running_staging(jobid);
    (void)sh_wait_job_staging(jobid, LOCK_EX, NULL);
    if (sh_status_path(SH_RUNTIME_DIR, jobid, -1, path, sizeof(path)) == 0) {
        report_lost_staging(jobid, path);
        unlink(path);
    }
    /* The job's runtime directory belongs to the job user: remove it without
     * following anything the user may have planted in it. */
    rfd = open(SH_RUNTIME_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return 0;
    /* First the "<jobid>.*" entries: a detached agent is stopped before the
     * directory it works in goes. */
    remove_step_state(rfd, jobid);
    snprintf(name, sizeof(name), "%u", jobid);
    remove_runtime_entry(rfd, jobid, name);
    close(rfd);
    /* The job's links into the node image cache: its references go. */
    {
        const struct sh_config *cfg = sh_plugin_load_config(ac, av);
        int stale;

        if (cfg == NULL || cfg->cache[0] == '\0')
            return 0;
        if (sh_cache_job_remove(cfg->cache, jobid) != 0)
            slurm_error("stagehand: job %u: cannot remove its cache directory: %s", jobid,
                        strerror(errno));
        /* The fill locks of stagings killed before their release (this
         * job's, whose staging is over by now, or an earlier one's): a lock
         * some staging holds stays. */
        stale = sh_cache_fill_sweep(cfg->cache);
        if (stale > 0)
            slurm_info("stagehand: job %u: removed %d fill lock%s of the node image cache "
                       "whose staging ended without letting go (killed)", jobid, stale,
                       stale == 1 ? "" : "s");
        else if (stale < 0)
            slurm_error("stagehand: job %u: cannot sweep the node image cache's fill locks: "
                        "%s", jobid, strerror(errno));
    }
    return 0;
}

int sh_extern_exit_run(spank_t sp, int ac, char **av)
{
    uint32_t stepid = 0;
    pid_t pid;
    int wstatus;

    if (!sh_slurm_prolog_in_job() || spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS ||
        stepid != SH_EXTERN_STEP)
        return 0;
    /* In a child, root in every respect: as Slurm 24.11's extern step
     * calls this, another of its threads runs its X11 shutdown (with or
     * without X11), which drops the whole process to the job user for a
     * moment (drop_privileges: seteuid(2), which glibc applies to every
     * thread); measured here, 1 job's clean-up in 3 failed with EACCES and
     * EPERM. A child's credentials are its own, and with the real and saved
     * user ids still root it can take root back (uid first: a non-zero
     * effective uid has no capability to set the groups). Slurm's log is
     * safe in a child (its pthread_atfork handlers). */
    pid = fork();
    if (pid == 0) {
        if (setresuid(0, 0, 0) != 0 || setresgid(0, 0, 0) != 0 || setgroups(0, NULL) != 0) {
            slurm_error("stagehand: extern step: cannot become root again for the job's "
                        "clean-up: %s", strerror(errno));
            _exit(1);
        }
        (void)sh_epilog_run(sp, ac, av);
        _exit(0);
    }
    if (pid < 0) {
        int e = errno;
        uint32_t jobid = 0;

        (void)spank_get_item(sp, S_JOB_ID, &jobid);
        slurm_error("stagehand: job %u: extern step: fork: %s (this node's %s entries of "
                    "the job stay)", jobid, strerror(e), SH_RUNTIME_DIR);
        return 0;
    }
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    return 0;
}
