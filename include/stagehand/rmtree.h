/* Removal of a directory tree without following symbolic links. */
#ifndef STAGEHAND_RMTREE_H
#define STAGEHAND_RMTREE_H

/* Remove @name in directory @dirfd and, if it is a directory, everything
 * below it, at most @depth levels deep. Symbolic links are removed, never
 * followed (openat O_NOFOLLOW|O_DIRECTORY; unlinkat), so a user who owns the
 * tree cannot redirect a root caller elsewhere. Returns 0 (also when @name
 * does not exist), or -1 with errno from openat/unlinkat, or ELOOP when the
 * tree is deeper than @depth. */
int sh_rmtree_at(int dirfd, const char *name, unsigned depth);

#endif
