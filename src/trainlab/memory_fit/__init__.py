"""The memory fit part (docs/parts/memory_fit.md): the estimated peak memory of a step
(``estimate.py``) and the decision, before the run dir, whether the run fits its device
(``fit.py``)."""
