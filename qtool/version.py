"""The package version, written once (the build reads it as the distribution's version)."""

__version__ = "0.1.0"
