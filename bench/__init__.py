"""Benchmarks (`make bench`): timings as ratios against a baseline measured in the same run."""
