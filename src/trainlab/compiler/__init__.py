"""The compile part (docs/parts/compile.md): ``compile=true`` compiles each network's repeated
layer once (``regional.py``)."""
