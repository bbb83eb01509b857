"""User-facing errors.

Anything a user can cause (a wrong path, a bad suite key, a vocabulary mismatch) raises
`SpecmoeError` with one line that names the problem and the fix. The CLI prints that line and exits
non-zero without a traceback; anything else is a bug and keeps its traceback.
"""


class SpecmoeError(Exception):
    """A problem with the user's input or environment, described in one actionable line."""


class RunFailed(SpecmoeError):
    """One run cannot be measured, for a reason that says nothing of the others (a server's response
    contradicts its request, or never ends). The suite records a failed attempt with this line,
    stores no number for the run, and goes on with the next block."""
