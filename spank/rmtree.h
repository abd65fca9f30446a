/* Removal of a directory tree without following symbolic links. */
#ifndef STAGEHAND_RMTREE_H
#define STAGEHAND_RMTREE_H

/* Remove @name in directory @dirfd and, if it is a directory, everything
 * below it, at any depth. Symbolic links are removed, never followed
 * (openat O_NOFOLLOW|O_DIRECTORY; unlinkat), so a user who owns the tree
 * cannot redirect a root caller elsewhere. Iterative: no recursion, one
 * directory descriptor open at a time, and 16 bytes of memory per level (the
 * identity of each directory on the way down); it comes back up through
 * ".." and checks that ".." is the directory it came from, so a tree that is
 * moved while it is removed (a user renaming a directory out from under the
 * walk) stops it instead of sending it elsewhere. It never descends into
 * another filesystem (a mount point below @name). Returns 0 (also when
 * @name does not exist), or -1 with errno from openat/unlinkat/fstat,
 * ESTALE when the tree was moved during the walk, EXDEV when a directory in
 * it is on another filesystem, ENOMEM. */
int sh_rmtree_at(int dirfd, const char *name);

#endif
