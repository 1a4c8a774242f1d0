"""The package version, sent in the user agent."""

__version__ = "0.1.0"
