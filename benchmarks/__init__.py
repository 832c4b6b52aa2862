"""Benchmarks behind `make bench` (``python -m benchmarks`` writes benchmarks/README.md): each
module compares two implementations side by side in one run and returns medians over
repeats. Each also runs alone, from the repository root: ``python -m benchmarks.<name>``.
Not part of the installed package: a fork's training code never imports them."""
