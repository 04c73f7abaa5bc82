"""Benchmarks that reproduce the papers' cost tables: ``python -m kctx.bench --help``."""

import json


def report(rows, table, json_path=None):
    """Print a benchmark's ``table`` and, with ``json_path``, write its ``rows`` as JSON."""
    print()
    print(table)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=2)
        print(f"\nwrote {json_path}")
    return rows


