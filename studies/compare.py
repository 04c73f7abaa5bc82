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
against K = 1) are paired seed by seed like two arms. A side written ``STUDY/ARM`` is an arm
of another reported study of the same workflow (``studies/results/STUDY.json``), e.g. an arm
with a short convolution against the same arm without it::

    python -m studies.compare language-stdlib-short-conv \
        causal_hamburger-short_conv:language-stdlib/causal_hamburger-512

Pairing across studies is sound where seed k of both arms trains on the same batches: the
same config's data fields (dataset, batch size, context length, steps) with only the
model's options changed, as between those two studies.
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


# A config field one run records and the other does not (a field added to the workflow after
# the older run).
NOT_RECORDED = "(not recorded)"


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
    """``"[STUDY/]ARM[@METRIC]"`` → ``(STUDY or None, ARM, METRIC)``; without ``@METRIC`` the
    side takes ``metric``."""
    side, _, own = side.partition("@")
    study, _, arm = side.rpartition("/")
    return study or None, arm, own or metric


def other_studies(pairs):
    """The studies other than the compared one that the pairs' ``STUDY/ARM`` sides name."""
    return sorted({study for pair in pairs for side in pair
                   if (study := split_side(side, None)[0]) is not None})


def compare(report, pairs, metric, confidence=0.95, others=None):
    """One :func:`studies.stats.paired` result per ``(arm, baseline)`` pair, with the names.

    Either side may be ``"ARM@METRIC"`` to read another metric of that arm's runs, and
    ``"STUDY/ARM"`` to read an arm of the report ``others[STUDY]``.
    """
    reports = {**(others or {}), report.get("study"): report}
    rows = []
    for arm, baseline in pairs:
        values, configs, studies = [], [], set()
        for side in (arm, baseline):
            study, name, side_metric = split_side(side, metric)
            if study is None:
                study = report.get("study")
            if study not in reports:
                raise ValueError(f"No report of study {study!r} to compare with. Received: "
                                 f"side={side!r}")
            side_report = reports[study]
            arms = {run["arm"] for run in side_report["runs"]}
            if name not in arms:
                raise ValueError(f"No runs of arm {name!r} in the report. Received: "
                                 f"arm={name!r}; arms: {sorted(arms)}")
            side_values = seed_values(side_report, name, side_metric)
            if all(value is None for value in side_values.values()):
                raise ValueError(f"Arm {name!r} has no metric {side_metric!r}. Received: "
                                 f"metric={side_metric!r}")
            values.append(side_values)
            configs.append(next(run.get("config") for run in side_report["runs"]
                                if run["arm"] == name))
            studies.add(study)
        result = stats.paired(*values, confidence)
        row = {"arm": arm, "baseline": baseline, "metric": metric, **result}
        if len(studies) > 1 and all(configs):
            row["settings_differ"] = {
                key: [config.get(key, NOT_RECORDED) for config in configs]
                for key in sorted(configs[0].keys() | configs[1].keys())
                if configs[0].get(key, NOT_RECORDED) != configs[1].get(key, NOT_RECORDED)}
        rows.append(row)
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
    if "settings_differ" in row:  # two studies' arms: what their runs' configs differ in
        differ = [f"{key} {a!r} vs {b!r}" for key, (a, b) in row["settings_differ"].items()]
        text += f" (settings differ: {'; '.join(differ) or 'none'})"
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m studies.compare",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the study (its report studies/results/NAME.json)")
    parser.add_argument("pairs", nargs="*", metavar="ARM:BASELINE",
                        help="a side may be ARM@METRIC (that arm's METRIC, not --metric) "
                             "or STUDY/ARM (an arm of another study of the workflow)")
    parser.add_argument("--all-vs", metavar="BASELINE", help="every other arm against BASELINE")
    parser.add_argument("--metric", help="default: the study's first metric")
    parser.add_argument("--holm", action="store_true", help="Holm-adjusted p-values too")
    parser.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR)
    args = parser.parse_intermixed_args(argv)
    def load(name):
        path = pathlib.Path(args.output_dir) / f"{name}.json"
        if not path.exists():
            parser.error(f"no report {path}: run `python -m studies.report {name}` first")
        return json.loads(path.read_text())

    report = load(args.name)
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
    others = {}
    for study in other_studies(pairs):
        others[study] = load(study)
        if others[study].get("workflow") != report.get("workflow"):
            parser.error(f"{study} is a study of workflow {others[study].get('workflow')!r}, "
                         f"{args.name} of {report.get('workflow')!r}: their seeds do not see "
                         f"the same data")
    try:
        rows = compare(report, pairs, metric, others=others)
    except ValueError as error:
        parser.error(str(error))
    tested = [row["p"] for row in rows if row["p"] is not None]
    adjusted = iter(holm(tested)) if args.holm else None
    print(f"{args.name}, {metric}: arm − baseline, paired over seeds [95% CI]")
    for row in rows:
        print(format_row(row, next(adjusted) if adjusted and row["p"] is not None else None))


if __name__ == "__main__":
    main()
