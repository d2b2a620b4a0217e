"""The parts of bench/ingest.py (see its docstring); not a benchmark itself."""
