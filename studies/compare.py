"""Paired comparisons between any arms of a reported study, from its committed JSON.

    python -m studies.compare NAME ARM:BASELINE [ARM:BASELINE ...] [--metric METRIC] [--holm]
    python -m studies.compare NAME --all-vs BASELINE [--metric METRIC] [--holm]
    python -m studies.compare NAME nmf-K1@miou_eval_K6:nmf-K1@miou

The report (``studies.report``) compares every arm with its study's baseline; the docs quote
other pairs too (a Ham form against ASPP, SegNeXt against SegNeXt without its Hamburger).
This prints, for each pair, the paired difference ARM − BASELINE of ``--metric`` (by default
the study's first metric, its quality measure: ``miou``, ``fid``, ``bits_per_character``) over the
seeds both have (seed k of every arm sees the same batches), its 95% t-interval and the
paired t-test's p (:func:`studies.stats.paired`), read from ``studies/results/NAME.json``.
``--holm`` adds Holm's step-down adjustment of the p-values over the pairs printed, for the
family-wise error rate at 5%. A side written ``ARM@METRIC`` reads that metric instead of
``--metric``: one arm's runs scored two ways (e.g. trained with K = 1, evaluated with K = 6
against K = 1) are paired seed by seed like two arms.
"""

import argparse
import json
import pathlib

from studies import stats
from studies.study import RESULTS_DIR as DEFAULT_OUTPUT_DIR


def seed_values(report, arm, metric):
    """``{seed: value}`` of one arm's runs in a report."""
    return {run["seed"]: run["metrics"].get(metric) for run in report["runs"]
            if run["arm"] == arm}


def default_metric(report):
    """The study's first metric (its quality measure), or ``miou`` in a report without the
    list."""
    return next(iter(report.get("metrics") or {"miou": None}))


def holm(p_values):
    """Holm's step-down adjusted p-values, in the order given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [None] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def split_side(side, metric):
    """``"ARM@METRIC"`` → ``(ARM, METRIC)``; a plain ``"ARM"`` takes ``metric``."""
    arm, _, own = side.partition("@")
    return arm, own or metric


def compare(report, pairs, metric, confidence=0.95):
    """One :func:`studies.stats.paired` result per ``(arm, baseline)`` pair, with the names.

    Either side may be ``"ARM@METRIC"`` to read another metric of that arm's runs.
    """
    arms = {run["arm"] for run in report["runs"]}
    rows = []
    for arm, baseline in pairs:
        values = []
        for side in (arm, baseline):
            name, side_metric = split_side(side, metric)
            if name not in arms:
                raise ValueError(f"No runs of arm {name!r} in the report. Received: "
                                 f"arm={name!r}; arms: {sorted(arms)}")
            side_values = seed_values(report, name, side_metric)
            if all(value is None for value in side_values.values()):
                raise ValueError(f"Arm {name!r} has no metric {side_metric!r}. Received: "
                                 f"metric={side_metric!r}")
            values.append(side_values)
        result = stats.paired(*values, confidence)
        rows.append({"arm": arm, "baseline": baseline, "metric": metric, **result})
    return rows


def format_row(row, adjusted=None):
    if row["n"] < 2:
        return f"{row['arm']} − {row['baseline']}: {row['n']} pair(s), no comparison"
    interval = (f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]" if row["test"] == "t"
                else "(the same difference on every seed: sign test)")
    text = (f"{row['arm']} − {row['baseline']}: {row['mean_diff']:+.4f} {interval}, "
            f"p = {row['p']:.3g}, n = {row['n']}")
    if adjusted is not None:
        text += f", Holm p = {adjusted:.3g}"
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m studies.compare",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the study (its report studies/results/NAME.json)")
    parser.add_argument("pairs", nargs="*", metavar="ARM:BASELINE",
                        help="a side may be ARM@METRIC (that arm's METRIC, not --metric)")
    parser.add_argument("--all-vs", metavar="BASELINE", help="every other arm against BASELINE")
    parser.add_argument("--metric", help="default: the study's first metric")
    parser.add_argument("--holm", action="store_true", help="Holm-adjusted p-values too")
    parser.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR)
    args = parser.parse_intermixed_args(argv)
    path = pathlib.Path(args.output_dir) / f"{args.name}.json"
    if not path.exists():
        parser.error(f"no report {path}: run `python -m studies.report {args.name}` first")
    report = json.loads(path.read_text())
    metric = args.metric or default_metric(report)
    pairs = []
    for pair in args.pairs:
        if pair.count(":") != 1:
            parser.error(f"a pair is ARM:BASELINE. Received: {pair!r}")
        pairs.append(tuple(pair.split(":")))
    if args.all_vs:
        arms = sorted({run["arm"] for run in report["runs"]} - {args.all_vs})
        pairs += [(arm, args.all_vs) for arm in arms]
    if not pairs:
        parser.error("give ARM:BASELINE pairs or --all-vs BASELINE")
    try:
        rows = compare(report, pairs, metric)
    except ValueError as error:
        parser.error(str(error))
    tested = [row["p"] for row in rows if row["p"] is not None]
    adjusted = iter(holm(tested)) if args.holm else None
    print(f"{args.name}, {metric}: arm − baseline, paired over seeds [95% CI]")
    for row in rows:
        print(format_row(row, next(adjusted) if adjusted and row["p"] is not None else None))


if __name__ == "__main__":
    main()
