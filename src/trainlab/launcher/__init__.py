"""launcher=slurm and launcher=submitit_local: each job of a multirun as submitit tasks (a
part: docs/parts/submitit.md)."""
