"""Run tables: which of many runs was best, read from the run dirs' own files.

- ``python -m trainlab.runs``: a table of every run dir under a folder (``table.py``);
- at the end of a multirun, a table and a plot of its jobs (``sweep_summary.py``, a Hydra
  callback that ``configs/runs/default.yaml`` adds).

A part (docs/parts/run_tables.md): nothing else imports it.
"""
