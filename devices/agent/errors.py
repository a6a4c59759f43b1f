"""The agent's one error: a failure reported as ``{"error": ...}`` with an exit status."""


class AgentError(Exception):
    """A failure reported as JSON with an exit status (2 bad request, 3 runtime failed)."""

    def __init__(self, message, status=3):
        super().__init__(message)
        self.status = status


def one_line(exc):
    """The first non-empty line of an exception's text (at most 300 characters)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]
