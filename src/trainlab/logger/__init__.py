"""Loggers beyond Lightning's own, as configs/logger chooses them."""
