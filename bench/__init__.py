"""Benchmarks (reports, not tests): `python bench/bench_store.py`, `python bench/bench_startup.py`."""
