"""Kernel printers (cpp.py today, triton.py next) and the Python wrapper that calls them (wrapper.py)."""
