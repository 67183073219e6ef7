"""The one user-facing error family and the exit codes the CLI maps it to."""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1  # a check or gate failed: the thing under test is slower or wrong
EXIT_USAGE = 2  # bad flags, a broken profile file, a missing baseline directory
EXIT_INFRA = 3  # the harness could not measure: a server failed to boot, a port never opened
#: `specwatch ab` only: head shown slower than base, but not beyond the tolerance (a finding, not noise);
#: 6, clear of pytest's own 0-5 and of git bisect's 125
EXIT_SLOWER = 6


class SpecwatchError(Exception):
    """Base of every error specwatch shows to a user (no traceback, one clear message)."""

    exit_code = EXIT_REGRESSION


class UsageError(SpecwatchError):
    """Bad input from the user: a flag, an option value or a profile field. Names the field."""

    exit_code = EXIT_USAGE


class InfraError(SpecwatchError):
    """The harness could not do its job (not a verdict on the server's speed)."""

    exit_code = EXIT_INFRA


class ServerBootError(InfraError):
    """A server did not become ready; carries the tail of its log."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        text = message if not log_tail else f"{message}\n--- last lines of the server log ---\n{log_tail}"
        super().__init__(text)


class RequestRejected(InfraError):
    """The server answered a request with a 4xx status: it does not accept what was asked."""

    def __init__(self, message: str, status: int) -> None:
        self.status = status
        super().__init__(message)


class RegressionError(SpecwatchError):
    """A performance or correctness gate failed."""

    exit_code = EXIT_REGRESSION


class ServerUnavailable(SpecwatchError):
    """A test needs a server this run cannot provide (e.g. a second server under ``--server-url``).

    The plugin reports such a test as skipped with this message, not as failed.
    """

    exit_code = EXIT_USAGE
