"""Tests of the documentation: README.md and docs/."""
