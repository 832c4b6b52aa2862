"""Benchmarks behind `make bench` (scripts/bench.py writes BENCHMARKS.md): each module
compares two implementations side by side in one run and returns medians over repeats.
Each also runs alone: ``python -m trainlab.bench.<name>``."""
