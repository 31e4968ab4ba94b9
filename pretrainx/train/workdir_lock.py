"""One run per workdir at a time.

Two runs writing one workdir (a relaunch while the first still runs, a sweep that
reuses a name, a second terminal) would interleave checkpoints, data positions and
metrics. The first run holds an exclusive lock on WORKDIR/.lock; a second one is
refused in one line before it writes anything, and may run once the first has
ended. The lock is flock(2): the kernel drops it when its process dies, so a killed
or preempted run leaves no stale lock behind. Only process 0 of a multi-process run
takes it (the others write nothing of their own). Object stores (gs://) have no
such lock; a launcher runs one job per workdir there (docs/reliability.md).
"""

import errno
import fcntl
import os

from pretrainx.errors import UserError

LOCK_NAME = ".lock"


class WorkdirLock:
    def __init__(self, workdir: str):
        self.workdir = workdir
        self.path = os.path.join(workdir, LOCK_NAME)
        self._file, self._created = None, False

    def acquire(self) -> "WorkdirLock":
        """Holds the lock, or raises UserError naming the workdir. The file is empty
        and stays: its content never changes, so a refused run leaves the workdir as
        it was."""
        if "://" in self.workdir:
            return self
        self._created = not os.path.exists(self.path)
        try:
            f = open(self.path, "a", encoding="utf-8")
        except OSError as e:  # a directory of that name, no write permission, ...
            if self._created and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise UserError(f"workdir {self.workdir} is not writable ({e.strerror}); give "
                                "a --workdir pretrainx may write, or make it writable"
                                ) from None
            raise UserError(f"cannot hold the workdir lock {self.path}: {e.strerror}; "
                            f"{LOCK_NAME} must be a file pretrainx may write (remove what "
                            "is there, or give another --workdir)") from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise UserError(f"workdir {self.workdir} is in use by another run (it holds "
                            f"{self.path}); wait for it to end, then run again to resume, or "
                            "give another --workdir") from None
        self._file = f
        return self

    def release(self, refused: bool = False) -> None:
        """Lets the next run in; a run refused after taking the lock removes the lock
        file it created, so that a refused run adds nothing to the workdir."""
        if self._file is None:
            return
        if refused and self._created:
            os.remove(self.path)
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
        self._file = None
