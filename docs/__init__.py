"""The documentation's generated pages (`python -m docs.generate`); see generate.py."""
