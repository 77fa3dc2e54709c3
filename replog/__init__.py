"""replog: a replicated commit-log service."""

__version__ = "0.1.0"
