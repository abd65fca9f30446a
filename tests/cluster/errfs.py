#!/usr/bin/python3
"""A read-only FUSE filesystem with one file that fails half-way (issue 6,
case F29; tests/cluster/test_fault_source_eio.sh).

    errfs.py BACKING MOUNTPOINT ERROR_AT

MOUNTPOINT shows BACKING's basename, with BACKING's size, mode and owner;
reads return its bytes below ERROR_AT and fail with EIO from ERROR_AT on, as
a disk or a network filesystem would. Needs Debian's python3-fusepy. Runs in
the foreground (allow_other, so the job user can read it) until unmounted."""
import errno
import os
import stat
import sys

import fusepy


class ErrFS(fusepy.Operations):
    def __init__(self, backing, error_at):
        self.backing = backing
        self.name = "/" + os.path.basename(backing)
        self.error_at = error_at

    def getattr(self, path, fh=None):
        if path == "/":
            st = os.lstat(os.path.dirname(self.backing))
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2,
                    "st_uid": 0, "st_gid": 0, "st_mtime": st.st_mtime,
                    "st_ctime": st.st_ctime, "st_atime": st.st_atime}
        if path != self.name:
            raise fusepy.FuseOSError(errno.ENOENT)
        st = os.lstat(self.backing)
        return {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid",
                                            "st_size", "st_mtime", "st_ctime", "st_atime")}

    def readdir(self, path, fh):
        return [".", "..", self.name[1:]]

    def open(self, path, flags):
        if path != self.name:
            raise fusepy.FuseOSError(errno.ENOENT)
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise fusepy.FuseOSError(errno.EROFS)
        return os.open(self.backing, os.O_RDONLY)

    def read(self, path, size, offset, fh):
        if offset + size > self.error_at:
            raise fusepy.FuseOSError(errno.EIO)
        return os.pread(fh, size, offset)

    def release(self, path, fh):
        os.close(fh)
        return 0


def main():
    backing, mnt, error_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fusepy.FUSE(ErrFS(os.path.abspath(backing), error_at), mnt, foreground=True,
                allow_other=True, ro=True, direct_io=True)


if __name__ == "__main__":
    main()
