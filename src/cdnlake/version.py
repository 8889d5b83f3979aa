"""The version cdnlake states: in its user agent, its Delta commits and --version."""

__version__ = "0.1.0"
