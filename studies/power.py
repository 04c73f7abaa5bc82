"""How many seeds a paired comparison needs: ``python -m studies.power STUDY --arm A --against B
--metric M --relative-effect R``.

Reads a study's report (``studies/results/STUDY.json``, written by ``studies.report``), takes
the per-seed differences of metric M between arms A and B on their common seeds, and asks how
many seeds the two-sided paired t-test (the one ``studies.report`` runs) needs to find, with
80 % and 90 % power, a true difference of R times B's mean (e.g. the HamGAN paper's FID
14.77 against SAGAN's 18.65 on ImageNet 128: R = 1 − 14.77 / 18.65 = 0.208), when the
differences spread as they did (their sd over the seeds run). Prints that and, with
``--json PATH``, writes it.
"""

import argparse
import json
import pathlib

from kctx.arguments import output_path
from studies import stats
from studies.study import RESULTS_DIR as DEFAULT_OUTPUT_DIR

POWERS = (0.8, 0.9)


def seeds_needed(report, arm, against, metric, relative_effect, confidence=0.95):
    """The power analysis of ``arm`` − ``against`` on ``metric`` from a study report (the
    dict ``studies.report`` writes); see the module's docstring."""
    values = {name: {run["seed"]: run["metrics"].get(metric) for run in report["runs"]
                     if run["arm"] == name} for name in (arm, against)}
    for name in (arm, against):
        if not values[name]:
            raise ValueError(f"No run of arm {name!r} in study {report['study']!r}. Received: "
                             f"arm={arm!r}, against={against!r}")
    comparison = stats.paired(values[arm], values[against], confidence)
    if comparison["n"] < 2 or not comparison["sd_diff"]:
        raise ValueError(f"{metric!r} needs at least two seeds with a spread in both arms. "
                         f"Received: {comparison['n']} common seed(s)")
    baseline = stats.describe(values[against].values())["mean"]
    effect = relative_effect * abs(baseline)
    return {"study": report["study"], "metric": metric, "arm": arm, "against": against,
            "seeds": comparison["seeds"], "mean_diff": comparison["mean_diff"],
            "sd_diff": comparison["sd_diff"], "ci_low": comparison["ci_low"],
            "ci_high": comparison["ci_high"], "p": comparison["p"],
            "baseline_mean": baseline, "relative_effect": relative_effect, "effect": effect,
            "confidence": confidence,
            "power_now": stats.paired_power(comparison["n"], comparison["sd_diff"], effect,
                                            confidence),
            "seeds_for_power": {str(power): stats.seeds_for_power(
                comparison["sd_diff"], effect, power, confidence) for power in POWERS}}


def format_result(result):
    lines = [
        f"{result['study']}: {result['metric']} of {result['arm']} − {result['against']} on "
        f"seeds {result['seeds']}: mean {result['mean_diff']:+.3f} "
        f"[{result['ci_low']:+.3f}, {result['ci_high']:+.3f}], sd {result['sd_diff']:.3f}, "
        f"p = {result['p']:.3f}",
        f"effect sought: {result['relative_effect']:.3f} × {result['against']}'s mean "
        f"{result['baseline_mean']:.3f} = {result['effect']:.3f} "
        f"(d = {result['effect'] / result['sd_diff']:.3f} of the differences' sd)",
        f"power with {len(result['seeds'])} seeds: {result['power_now']:.3f}",
    ]
    for power, seeds in result["seeds_for_power"].items():
        lines.append(f"seeds for {float(power):.0%} power (two-sided paired t, "
                     f"{result['confidence']:.0%}): {seeds if seeds else 'more than 100,000'}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m studies.power", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", help="a study with a report in --results-dir")
    parser.add_argument("--arm", required=True)
    parser.add_argument("--against", required=True, help="the arm compared with")
    parser.add_argument("--metric", required=True, help="a metric of the study's report")
    parser.add_argument("--relative-effect", type=float, required=True,
                        help="the difference sought, as a fraction of --against's mean")
    parser.add_argument("--results-dir", default=DEFAULT_OUTPUT_DIR)
    parser.add_argument("--json", type=output_path, help="write the result here")
    args = parser.parse_args(argv)
    path = pathlib.Path(args.results_dir) / f"{args.study}.json"
    if not path.is_file():
        parser.error(f"no report at {path}: run python -m studies.report {args.study}")
    try:
        result = seeds_needed(json.loads(path.read_text()), args.arm, args.against,
                              args.metric, args.relative_effect)
    except ValueError as error:
        parser.error(str(error))
    print(format_result(result))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
