"""The one base of every error the harness reports to a person."""


class HarnessError(Exception):
    """Input the harness cannot use (a problem file, a run directory, a config, a
    template, an endpoint); the message is one paragraph for a person, and the
    command line prints it and exits 2 instead of showing a traceback."""
