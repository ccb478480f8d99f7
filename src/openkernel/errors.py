"""User-facing errors: one clear message, no traceback.

Anything raised as an ``OpenKernelError`` is bad input (a wrong path, a malformed task, an
unknown config key). The CLI and the TUI print ``str(err)`` and exit 2; every other exception
is a bug and keeps its traceback.
"""


class OpenKernelError(Exception):
    """Bad input the user can fix; the message names what is wrong."""


class TaskError(OpenKernelError):
    """A task file or folder is missing something or cannot be loaded."""


class ConfigError(OpenKernelError):
    """A config file or a ``--set`` override is invalid."""
