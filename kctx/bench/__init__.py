"""Benchmarks that reproduce the papers' cost tables: ``python -m kctx.bench --help``."""
