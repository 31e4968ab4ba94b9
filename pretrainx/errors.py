"""One exception type for mistakes a user can fix.

The CLI prints a UserError as a single line and exits non-zero; anything else is
a bug in pretrainx and keeps its traceback.
"""


class UserError(Exception):
    """Bad input: a config key, a file, a value. The message names the culprit."""


class WriterFailedError(UserError):
    """A checkpoint or metrics write that failed for a reason outside the run (the disk
    filled, the folder was removed). Orbax's writer threads may still be failing when it
    is raised, so the CLI exits without the interpreter's shutdown, whose clean-up of
    those threads can crash and turn exit code 2 into 1."""


class DiskFullError(WriterFailedError):
    """No space left for a checkpoint or the metrics file."""
