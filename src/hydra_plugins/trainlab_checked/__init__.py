"""The basic sweeper with every job checked first (checked_sweeper.py)."""
