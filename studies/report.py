"""Report a study: ``python -m studies.report NAME`` → ``studies/results/NAME.{json,md,png}``.

Reads every finished cell of the study (``python -m studies.run``) and writes

* ``NAME.json``: ``runs`` (one object per run: arm, seed, metrics, wall time,
  config hash, package versions, git commit, machine) and ``arms`` (per arm
  and metric: n, mean, sd, 95% t interval; per quality metric the paired
  difference against the arm's baseline with its interval and paired t-test);
* ``NAME.md``: the same as tables (mean ± sd [95% CI]; Δ vs the baseline
  [95% CI], p), with the commands that reproduce it;
* ``NAME.png``: per quality metric, each seed's value and each arm's mean
  with its interval.

Arms with fewer than two finished seeds get means only. A report of a
partial study says which cells are missing.

Run folders need not all be on this machine: the runs of the report already in
``NAME.json`` (committed, say, from other machines or sessions) are kept for
the cells with no finished folder here, as long as the study still defines
that cell with the same command (a changed arm or step count drops them, and
the report says how many). ``--ignore-previous`` reports the folders alone.
"""

import argparse
import json
import os
import pathlib
import sys

from kctx.training.records import write_json, write_text
from studies import stats
from studies.definitions import STUDIES, get_study
from studies.run import DEFAULT_RUNS_DIR, cells
from studies.study import (CELL_FILE, PRETRAINING_FILE, RESULTS_DIR, config_flags, config_hash,
                           reported)

DEFAULT_OUTPUT_DIR = RESULTS_DIR
CONFIDENCE = 0.95


def collect(study, runs_dir=DEFAULT_RUNS_DIR, previous=()):
    """The finished cells of ``study``, in arm then seed order: every one found in
    ``runs_dir`` (any seed), then those of ``previous`` (runs of an earlier report) with
    no folder here whose command is still the one the study gives that cell.

    Returns:
        ``(runs, dropped)``: the runs, and the earlier runs left out because the
        study's definition of their cell changed.
    """
    runs = []
    for arm in study.arms:
        arm_dir = pathlib.Path(runs_dir) / study.name / arm.name
        seeds = sorted(int(p.name[4:]) for p in arm_dir.glob("seed*")
                       if p.name[4:].isdigit() and (p / CELL_FILE).exists())
        for seed in seeds:
            directory = study.cell_dir(runs_dir, arm, seed)
            record = json.loads((directory / "run.json").read_text())
            cell = json.loads((directory / CELL_FILE).read_text())
            timing = json.loads((directory / "timing.json").read_text())
            runs.append({
                "arm": arm.name, "seed": seed,
                "run_dir": str(directory),
                "metrics": {metric.name: metric.read(directory) for metric in study.metrics},
                "curves": {curve.column: curve.read(directory) for curve in study.curves},
                "wall_seconds": cell["total_wall_seconds"],
                "train_seconds": timing.get("train_seconds"),
                "resumed": cell.get("resumed", False),
                "config_hash": None,  # set below, over the fields that tell runs apart
                "config": record["config"],
                "versions": record.get("versions", {}),
                "git": record.get("git", {}),
                "machine": cell.get("machine", {}),
                "command": cell["commands"]["train"],
            })
    found = {(run["arm"], run["seed"]) for run in runs}
    dropped = []
    for run in previous:
        if (run["arm"], run["seed"]) in found:
            continue
        if not study.still_defines(run):
            dropped.append(run)
            continue
        runs.append(run)
        found.add((run["arm"], run["seed"]))
    order = {arm.name: position for position, arm in enumerate(study.arms)}
    runs.sort(key=lambda run: (order[run["arm"]], run["seed"]))
    added = fields_added_since(runs)
    for run in runs:
        run["config_hash"] = config_hash(
            {key: value for key, value in run["config"].items() if key not in added})
    return runs, dropped


def fields_added_since(runs):
    """The config fields that some runs record and others do not, with one value wherever
    they are recorded: fields a later version of the workflow added (at the value that
    computes what the earlier runs computed), left out of the runs' config hashes so that
    runs of the same settings across versions hash alike. A field with two values among
    the runs tells them apart and stays in."""
    keys = [set(run["config"]) for run in runs]
    if not keys:
        return set()
    partial = set.union(*keys) - set.intersection(*keys)
    return {key for key in partial if len({json.dumps(run["config"][key]) for run in runs
                                           if key in run["config"]}) == 1}


def previous_runs(study, output_dir=DEFAULT_OUTPUT_DIR):
    """The ``runs`` of the report already in ``output_dir`` (``[]`` when there is none)."""
    return (reported(study, output_dir) or {}).get("runs", [])


def summarize(study, runs, confidence=CONFIDENCE):
    """Per arm: each metric's :func:`stats.describe` and, for quality metrics, the
    :func:`stats.paired` comparison with the arm's baseline; with the study's curves,
    ``curves`` (:func:`summarize_curves`)."""
    values = {arm.name: {m.name: {} for m in study.metrics} for arm in study.arms}
    for run in runs:
        for name, value in run["metrics"].items():
            values[run["arm"]][name][run["seed"]] = value
    arms = {}
    for arm in study.arms:
        baseline = study.baseline_of(arm)
        seeds = sorted({r["seed"] for r in runs if r["arm"] == arm.name})
        entry = {"label": arm.label or arm.name, "seeds": seeds, "n": len(seeds),
                 "overrides": {**study.overrides, **arm.overrides},
                 "baseline": baseline.name if baseline else None,
                 "metrics": {m.name: stats.describe(
                     [values[arm.name][m.name][s] for s in seeds], confidence)
                     for m in study.metrics},
                 "vs_baseline": {}}
        if baseline:
            for metric in study.metrics:
                if metric.better:
                    entry["vs_baseline"][metric.name] = stats.paired(
                        values[arm.name][metric.name], values[baseline.name][metric.name],
                        confidence)
        arms[arm.name] = entry
    if study.curves:
        for name, curves in summarize_curves(study, runs, confidence).items():
            arms[name]["curves"] = curves
    return arms


def summarize_curves(study, runs, confidence=CONFIDENCE):
    """Per arm and :class:`~studies.study.Curve`: at each step any run of the study
    reached, ``n`` (the arm's runs with a value there), ``mean`` over them and, for an arm
    with a baseline, ``vs_baseline``: :func:`stats.paired` over the seeds both arms have
    there."""
    values = {}  # (arm, column) -> {step: {seed: value}}
    for run in runs:
        for column, points in run.get("curves", {}).items():
            for step, value in points:
                values.setdefault((run["arm"], column), {}).setdefault(step, {})[
                    run["seed"]] = value
    steps = {curve.column: sorted({step for (_, column), by_step in values.items()
                                   if column == curve.column for step in by_step})
             for curve in study.curves}
    result = {}
    for arm in study.arms:
        baseline = study.baseline_of(arm)
        result[arm.name] = {}
        for curve in study.curves:
            own = values.get((arm.name, curve.column), {})
            other = values.get((baseline.name, curve.column), {}) if baseline else {}
            entries = []
            for step in steps[curve.column]:
                seeds = own.get(step, {})
                entry = {"step": step, "n": len(seeds),
                         "mean": stats.describe(list(seeds.values()), confidence)["mean"]}
                if baseline:
                    entry["vs_baseline"] = stats.paired(seeds, other.get(step, {}), confidence)
                entries.append(entry)
            result[arm.name][curve.column] = entries
    return result


def _fmt(value, digits):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}" if abs(value) >= 1000 and digits == 0 else f"{value:.{digits}f}"


def _cell(summary, digits, interval=True):
    if summary["mean"] is None:
        return "–"
    text = _fmt(summary["mean"], digits)
    if summary["sd"] is not None and not interval:
        return text + (f" ± {_fmt(summary['sd'], digits)}" if summary["sd"] > 0 else "")
    if summary["sd"] is not None:
        text += (f" ± {_fmt(summary['sd'], digits)} "
                 f"[{_fmt(summary['ci_low'], digits)}, {_fmt(summary['ci_high'], digits)}]")
    return text


def _reached(metric, entry):
    """`` (2 of 3 seeds)`` for a steps-to-target metric: its mean is over the seeds that
    reached the target, which may be fewer than the arm's runs."""
    if metric.reached is None or not entry["n"]:
        return ""
    return f" ({entry['metrics'][metric.name]['n']} of {entry['n']} seeds)"


def _verdict(metric, comparison):
    if comparison["significant"] is None:
        return "too few pairs"
    if not comparison["significant"]:
        return "no significant difference"
    higher = comparison["mean_diff"] > 0
    return "better" if higher == (metric.better == "higher") else "worse"


def _common(runs, key):
    found = {json.dumps(run[key], sort_keys=True) for run in runs}
    return json.loads(found.pop()) if len(found) == 1 else None


def pretraining_records(study, runs_dir=DEFAULT_RUNS_DIR, previous=None):
    """``{name: record}`` of the study's finished pretraining runs (``study-pretraining.json``:
    command, wall time, machine, results), those of ``previous`` (an earlier report's) where
    the folder is not here."""
    records = dict((previous or {}).get("pretraining", {}))
    for pretraining in study.pretraining:
        path = pretraining.run_dir(runs_dir, study) / PRETRAINING_FILE
        if path.exists():
            records[pretraining.name] = json.loads(path.read_text())
    return records


def _pretraining_lines(study, records):
    lines = []
    for pretraining in study.pretraining:
        arms = ", ".join(arm.label or arm.name for arm in study.arms
                         if arm.pretrained == pretraining.name)
        record = records.get(pretraining.name)
        made = ("not made yet" if record is None else
                "; ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                          for key, value in record["results"].items()
                          if key in ("top1", "top5", "loss", "steps", "params"))
                + f"; {record['wall_seconds']:.0f} s on {record['machine']['processor']}")
        lines += [f"Pretraining `{pretraining.name}` (the start of {arms}; one run, seed "
                  f"{pretraining.seed}, for every seed): `python "
                  f"{' '.join(pretraining.train_command('RUN'))}`: {made}.", ""]
    return lines


def markdown(study, runs, arms, runs_dir, missing, confidence=CONFIDENCE, dropped=(),
             pretraining=None):
    level = f"{confidence:.0%}"
    lines = [f"# Study `{study.name}`", "", study.description.strip(), "",
             f"Workflow `{study.workflow}`, config `{study.config}`"
             + (" (an arm's own config is in its setting)"
                if any(arm.config for arm in study.arms) else "")
             + (f" with {_flags(study.overrides)}" if study.overrides else "")
             + f"; deterministic mode; {len(runs)} runs. Quality metrics: mean ± sd [{level} "
             "t-interval] over seeds (costs: mean ± sd); Δ = arm − baseline over the same seeds (same data order), with its "
             f"{level} interval and the paired t-test's p.", ""]
    versions = _common(runs, "versions")
    if versions:
        lines += ["Packages: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".", ""]
    else:
        lines += ["**The runs were made with different package versions** (see the JSON).", ""]
    processors = sorted({run["machine"].get("processor", "?") for run in runs})
    lines += [f"CPU: {'; '.join(processors)}.", ""]
    lines += _pretraining_lines(study, pretraining or {})
    if missing:
        lines += [f"**Partial study**: {len(missing)} cell(s) not finished: "
                  + _missing_text(study, missing) + ".", ""]
    if dropped:
        lines += [f"{len(dropped)} run(s) of an earlier report left out: the study now defines "
                  "their cells differently (" + ", ".join(f"{run['arm']} seed {run['seed']}"
                                                          for run in dropped) + ").", ""]
    lines += ["Reproduce (runs resume; one cell: `--arm ARM --seeds K`; bit for bit with the "
              "package versions above on a machine with the run's CPU model, see the runs "
              "table: TensorFlow's CPU kernels round differently on other CPUs):", "", "```",
              f"python -m studies.run {study.name} --seeds {_seeds(study.seeds)} --jobs 2",
              f"python -m studies.report {study.name}", "```", ""]
    lines += _summary(study, arms, level)
    lines += ["## Per arm", "", "| arm | setting | n | "
              + " | ".join(m.label for m in study.metrics) + " |",
              "|---|---|---|" + "---|" * len(study.metrics)]
    for arm in study.arms:
        entry = arms[arm.name]
        lines.append(f"| {entry['label']} | {_setting(arm)} | {entry['n']} | "
                     + " | ".join(_cell(entry["metrics"][m.name], m.digits, bool(m.better))
                                  + _reached(m, entry) for m in study.metrics) + " |")
    quality = [m for m in study.metrics if m.better]
    if quality:
        lines += ["", "## Paired differences against the baseline", "",
                  f"| arm | baseline | metric | Δ mean [{level} CI] | p | n | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for arm in study.arms:
            entry = arms[arm.name]
            for metric in quality:
                comparison = entry["vs_baseline"].get(metric.name)
                if not comparison:
                    continue
                interval = (f" [{_fmt(comparison['ci_low'], metric.digits)}, "
                            f"{_fmt(comparison['ci_high'], metric.digits)}]"
                            if comparison["ci_low"] is not None else
                            " (equal on every seed: sign test)" if comparison.get("test") == "sign"
                            else "")
                p = "–" if comparison["p"] is None else f"{comparison['p']:.3g}"
                lines.append(
                    f"| {entry['label']} | {arms[entry['baseline']]['label']} | {metric.label} "
                    f"| {_fmt(comparison['mean_diff'], metric.digits)}{interval} | {p} | "
                    f"{comparison['n']} | {_verdict(metric, comparison)} |")
    lines += _curve_lines(study, arms)
    lines += ["", "## Runs", "", "| arm | seed | " + " | ".join(m.label for m in study.metrics)
              + " | wall s | CPU | config hash |", "|---|---|" + "---|" * (len(study.metrics) + 3)]
    metric_digits = {m.name: m.digits for m in study.metrics}
    for run in runs:
        lines.append(f"| {arms[run['arm']]['label']} | {run['seed']} | "
                     + " | ".join(_fmt(run["metrics"][name], metric_digits[name])
                                  for name in run["metrics"])
                     + f" | {run['wall_seconds']:.0f} | {run['machine'].get('processor', '?')} "
                     f"| `{run['config_hash']}` |")
    lines += ["", f"Run folders: `{runs_dir}/{study.name}/ARM/seedK`.", ""]
    return "\n".join(lines)


def _summary(study, arms, level):
    """One row per arm: each quality metric's mean [CI] and its paired Δ from the baseline
    [CI], then the costs' means (the table the README copies)."""
    quality = [m for m in study.metrics if m.better and m.summary]
    costs = [m for m in study.metrics if not m.better and m.summary]
    header = ["arm", "n"]
    for metric in quality:
        header += [metric.label, f"Δ {metric.label}"]
    header += [metric.label for metric in costs]
    lines = ["## Summary", "", f"Mean [{level} CI] over seeds; Δ: paired difference from the "
             "arm's baseline [its CI], **bold** where the interval excludes 0 (where every seed "
             "gives the same difference there is no interval, and the sign test decides).", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm in study.arms:
        entry = arms[arm.name]
        row = [entry["label"], str(entry["n"])]
        for metric in quality:
            summary = entry["metrics"][metric.name]
            row.append(_fmt(summary["mean"], metric.digits) + (
                f" [{_fmt(summary['ci_low'], metric.digits)}, "
                f"{_fmt(summary['ci_high'], metric.digits)}]"
                if summary["ci_low"] is not None else ""))
            comparison = entry["vs_baseline"].get(metric.name)
            if comparison is None:
                row.append("baseline" if entry["baseline"] is None else "–")
            elif comparison["mean_diff"] is None:
                row.append("–")
            elif comparison["ci_low"] is None:
                text = f"{comparison['mean_diff']:+.{metric.digits}f}" + (
                    " (every seed)" if comparison.get("test") == "sign" else "")
                row.append(f"**{text}**" if comparison["significant"] else text)
            else:
                text = (f"{comparison['mean_diff']:+.{metric.digits}f} "
                        f"[{comparison['ci_low']:+.{metric.digits}f}, "
                        f"{comparison['ci_high']:+.{metric.digits}f}]")
                row.append(f"**{text}**" if comparison["significant"] else text)
        row += [_fmt(entry["metrics"][m.name]["mean"], m.digits) + _reached(m, entry)
                for m in costs]
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def _curve_lines(study, arms):
    """Per curve, a table: a row per arm, a column per checkpoint step, each cell the
    arm's mean over its seeds and its mean paired difference from its baseline."""
    lines = []
    for curve in study.curves:
        steps = [entry["step"] for entry in arms[study.arms[0].name]["curves"][curve.column]]
        if not steps:
            continue
        lines += ["", f"## {curve.label} along training", "",
                  f"`history.csv`'s `{curve.column}` at each checkpoint step: the arm's mean "
                  "over its seeds (Δ: its mean paired difference from the arm's baseline over "
                  "the seeds both have there).", "",
                  "| arm | n | " + " | ".join(f"{step:,}" for step in steps) + " |",
                  "|---|---|" + "---|" * len(steps)]
        for arm in study.arms:
            entry = arms[arm.name]
            cells = []
            for point in entry["curves"][curve.column]:
                text = _fmt(point["mean"], curve.digits)
                difference = point.get("vs_baseline", {}).get("mean_diff")
                if difference is not None:
                    text += f" (Δ {difference:+.{curve.digits}f})"
                cells.append(text)
            lines.append(f"| {entry['label']} | {entry['n']} | " + " | ".join(cells) + " |")
    return lines


def _missing_text(study, missing):
    """``seeds 3, 4 (every arm), aspp seed 2``."""
    by_seed = {}
    for arm, seed in missing:
        by_seed.setdefault(seed, []).append(arm)
    whole = [seed for seed, arms in by_seed.items() if len(arms) == len(study.arms)]
    parts = [f"seed{'s' if len(whole) > 1 else ''} {', '.join(map(str, whole))} (every arm)"
             ] if whole else []
    parts += [f"{arm} seed {seed}" for arm, seed in missing if seed not in whole]
    return ", ".join(parts)


def _flags(overrides):
    flags = config_flags(overrides)
    return f"`{' '.join(flags)}`" if flags else ""


def _setting(arm):
    """The per-arm table's setting: the arm's own config and flags, led by its
    ``--arm`` name where the table shows a label instead."""
    flags = _flags({"config": arm.config, **arm.overrides} if arm.config else arm.overrides)
    if arm.label and arm.label != arm.name:
        return f"`--arm {arm.name}`: {flags or 'the study config'}"
    return flags or "–"


def _seeds(seeds):
    seeds = list(seeds)
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def plot(study, runs, arms, path):
    """Per quality metric: each seed's value (dots) and each arm's mean with its interval;
    per curve, each arm's mean paired difference from its baseline along the steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quality = [m for m in study.metrics if m.better]
    curves = [c for c in study.curves
              if any(arms[a.name]["curves"][c.column] for a in study.arms)]
    panels = len(quality) + len(curves)
    if not panels:
        return None
    columns = min(2, panels)
    rows = -(-panels // columns)
    width = max(4.5, 0.6 * len(study.arms) + 1.5)
    figure, axes = plt.subplots(rows, columns, figsize=(width * columns, 3.8 * rows),
                                squeeze=False)
    for axis in axes.flat[panels:]:
        axis.set_visible(False)
    for axis, curve in zip(axes.flat[len(quality):], curves):
        axis.axhline(0.0, color="0.2", linewidth=1)
        for position, arm in enumerate(study.arms):
            points = [(p["step"], p["vs_baseline"]["mean_diff"])
                      for p in arms[arm.name]["curves"][curve.column]
                      if p.get("vs_baseline", {}).get("mean_diff") is not None]
            if points:
                axis.plot(*zip(*points), marker="o", markersize=3,
                          color=f"C{position % 10}", label=arms[arm.name]["label"])
        axis.set_xlabel("step")
        axis.set_title(f"{curve.label}: Δ from the arm's baseline along training",
                       fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for axis, metric in zip(axes.flat, quality):
        for position, arm in enumerate(study.arms):
            points = [(r["seed"], r["metrics"][metric.name]) for r in runs
                      if r["arm"] == arm.name and r["metrics"][metric.name] is not None]
            if points:
                offsets = [position - 0.15 + 0.3 * k / max(1, len(points) - 1)
                           for k in range(len(points))]
                axis.scatter(offsets, [v for _, v in points], s=12, color="0.55", zorder=2)
            summary = arms[arm.name]["metrics"][metric.name]
            if summary["mean"] is not None:
                error = None
                if summary["ci_low"] is not None:
                    error = [[summary["mean"] - summary["ci_low"]],
                             [summary["ci_high"] - summary["mean"]]]
                axis.errorbar([position + 0.3], [summary["mean"]], yerr=error, fmt="o",
                              color="C0" if study.baseline_of(arm) else "C3", capsize=4,
                              zorder=3)
        axis.set_xticks(range(len(study.arms)))
        axis.set_xticklabels([arms[a.name]["label"] for a in study.arms], rotation=30,
                             ha="right")
        axis.set_title(f"{metric.label} ({metric.better} is better)")
        axis.grid(axis="y", alpha=0.3)
    figure.suptitle(f"{study.name}: seeds (grey), mean and {CONFIDENCE:.0%} CI "
                    "(baseline in red)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def report(study, runs_dir=DEFAULT_RUNS_DIR, output_dir=DEFAULT_OUTPUT_DIR, png=True,
           keep_previous=True):
    """Write ``NAME.json``, ``NAME.md`` (and ``NAME.png``) to ``output_dir``; returns the
    report dict (also the JSON's content). With ``keep_previous``, the runs of the
    report already there fill the cells that have no finished folder in ``runs_dir``."""
    previous = previous_runs(study, output_dir) if keep_previous else []
    runs, dropped = collect(study, runs_dir, previous)
    earlier = reported(study, output_dir) if keep_previous else None
    pretraining = pretraining_records(study, runs_dir, earlier)
    if not runs:
        raise FileNotFoundError(f"no finished cell of {study.name!r} in "
                                f"{pathlib.Path(runs_dir) / study.name}: run "
                                f"`python -m studies.run {study.name}` first")
    arms = summarize(study, runs)
    done = {(run["arm"], run["seed"]) for run in runs}
    missing = [(arm.name, seed) for arm, seed in cells(study) if (arm.name, seed) not in done]
    output_dir = pathlib.Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "study": study.name, "workflow": study.workflow, "config": study.config,
        "description": study.description.strip(), "baseline": study.baseline,
        "seeds": list(study.seeds), "overrides": study.overrides,
        "evaluations": {e.name: e.overrides for e in study.evaluations},
        "metrics": {m.name: {"label": m.label, "better": m.better} for m in study.metrics},
        "confidence": CONFIDENCE, "missing": [list(cell) for cell in missing],
        "dropped": [[run["arm"], run["seed"]] for run in dropped],
        "arms": arms, "runs": runs,
    }
    if study.pretraining:
        result["pretraining"] = pretraining
    write_json(output_dir / f"{study.name}.json", result)
    write_text(output_dir / f"{study.name}.md",
               markdown(study, runs, arms, runs_dir, missing, dropped=dropped,
                        pretraining=pretraining))
    if png:
        plot(study, runs, arms, output_dir / f"{study.name}.png")
    return result


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog="python -m studies.report",
                                     description=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=sorted(STUDIES), metavar="NAME",
                        help="the study: " + ", ".join(sorted(STUDIES)))
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR,
                        help=f"where the run folders are (default {DEFAULT_RUNS_DIR})")
    parser.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR,
                        help=f"where the report goes (default {DEFAULT_OUTPUT_DIR})")
    parser.add_argument("--ignore-previous", action="store_true",
                        help="report only the run folders, not the runs of the report already "
                             "in the output folder")
    args = parser.parse_args(argv)
    study = get_study(args.name)
    try:
        result = report(study, args.runs_dir, args.output_dir,
                        keep_previous=not args.ignore_previous)
    except FileNotFoundError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    output = pathlib.Path(args.output_dir) / study.name
    print((output.with_suffix(".md")).read_text())
    print(f"wrote {output}.json, .md, .png ({len(result['runs'])} runs, "
          f"{len(result['missing'])} missing"
          + (f", {len(result['dropped'])} earlier runs dropped: their cells changed"
             if result["dropped"] else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
