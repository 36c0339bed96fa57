"""Domain errors; cli.py turns each into one red line and its exit code."""


class KplayError(Exception):
    """Base class: a message for the user and the exit code it maps to."""

    exit_code = 2


class UsageError(KplayError):
    """Bad input: an unknown kernel, a size of 0, a dtype the kernel has no variant for."""

    exit_code = 2


class BuildError(KplayError):
    """The compiler or the loader refused the snippet."""

    exit_code = 3

    def __init__(self, message: str, details: list[str] | None = None):
        super().__init__(message)
        self.details = details or []


class KernelCrash(KplayError):
    """The kernel killed its process, faulted on the device, or ran past its timeout."""

    exit_code = 4


# Exit codes of a finished run, documented in the README (errors carry theirs as exit_code).
PASSED, CHECK_FAILED = 0, 1
