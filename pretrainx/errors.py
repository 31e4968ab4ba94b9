"""One exception type for mistakes a user can fix.

The CLI prints a UserError as a single line and exits non-zero; anything else is
a bug in pretrainx and keeps its traceback.
"""

import json
import sys


class UserError(Exception):
    """Bad input: a config key, a file, a value. The message names the culprit."""


class WriterFailedError(UserError):
    """A checkpoint or metrics write that failed for a reason outside the run (the disk
    filled, the folder was removed). Orbax's writer threads may still be failing when it
    is raised, so the CLI exits without the interpreter's shutdown, whose clean-up of
    those threads can crash and turn exit code 2 into 1."""


class DiskFullError(WriterFailedError):
    """No space left for a checkpoint or the metrics file."""


def json_command(compute) -> int:
    """The body of a command that answers in JSON (merge, evaluate, similarity):
    `compute()`'s dict as one line on stdout and exit status 0, or a UserError as one
    `error:` line on stderr and status 2."""
    try:
        result = compute()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0
