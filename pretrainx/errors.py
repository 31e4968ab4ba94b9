"""One exception type for mistakes a user can fix.

The CLI prints a UserError as a single line and exits non-zero; anything else is
a bug in pretrainx and keeps its traceback.
"""


class UserError(Exception):
    """Bad input: a config key, a file, a value. The message names the culprit."""
