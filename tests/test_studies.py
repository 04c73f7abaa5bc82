"""Studies: statistics against SciPy, study definitions against the workflows' CLIs,
reports of fabricated runs, and the smoke study run for real (resume, bit-identical repeats)."""

import dataclasses
import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as scipy_stats

from studies import STUDIES, Arm, Evaluation, Metric, Study, describe, paired
from studies.report import fields_added_since, report
from studies.run import CellError, cell_state, run_study
from studies.study import Curve, Pretraining, config_flags, parse_seeds, reported_cells

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_describe_matches_scipy(n):
    x = np.random.default_rng(n).normal(0.6, 0.05, n)
    result = describe(list(x))
    low, high = scipy_stats.t.interval(0.95, n - 1, loc=x.mean(), scale=scipy_stats.sem(x))
    assert result["n"] == n
    np.testing.assert_allclose(result["mean"], x.mean(), rtol=1e-12)
    np.testing.assert_allclose(result["sd"], x.std(ddof=1), rtol=1e-12)
    np.testing.assert_allclose([result["ci_low"], result["ci_high"]], [low, high], rtol=1e-10)


def test_describe_drops_missing_values_and_has_no_interval_for_one():
    assert describe([0.5, None, 0.7])["n"] == 2
    one = describe([0.5, None])
    assert one["mean"] == 0.5 and one["sd"] is None and one["ci_low"] is None
    assert describe([])["mean"] is None


@pytest.mark.parametrize("n", [2, 3, 5])
def test_paired_matches_scipy_ttest_rel(n):
    rng = np.random.default_rng(10 + n)
    base = rng.normal(0.5, 0.05, n)
    arm = base + rng.normal(0.02, 0.01, n)
    result = paired(dict(enumerate(arm)), dict(enumerate(base)))
    reference = scipy_stats.ttest_rel(arm, base)
    interval = reference.confidence_interval(0.95)
    np.testing.assert_allclose(result["mean_diff"], (arm - base).mean(), rtol=1e-12)
    np.testing.assert_allclose(result["t"], reference.statistic, rtol=1e-10)
    np.testing.assert_allclose(result["p"], reference.pvalue, rtol=1e-10)
    np.testing.assert_allclose([result["ci_low"], result["ci_high"]],
                               [interval.low, interval.high], rtol=1e-10)
    assert result["significant"] == (reference.pvalue < 0.05)


def test_paired_uses_only_seeds_both_arms_have():
    arm = {0: 0.7, 1: 0.8, 2: 0.75, 3: None}
    base = {0: 0.6, 1: 0.7, 3: 0.6, 4: 0.5}
    result = paired(arm, base)
    assert result["seeds"] == [0, 1] and result["n"] == 2
    np.testing.assert_allclose(result["mean_diff"], 0.1)
    assert result["sd_diff"] == pytest.approx(0.0, abs=1e-15)
    # 0.7 - 0.6 and 0.8 - 0.7 differ in the last bit: the same difference, so the sign test.
    assert result["test"] == "sign" and result["p"] == 0.5 and not result["significant"]
    assert result["ci_low"] is None and result["ci_high"] is None


@pytest.mark.parametrize("n", [2, 5, 6, 8])
def test_equal_differences_on_every_seed_use_the_sign_test(n):
    """Counting metrics can differ by exactly the same amount on each seed; a zero-width
    t interval would call two seeds significant. The exact sign test decides instead."""
    arm = {seed: (300 + seed) / 359 for seed in range(n)}
    base = {seed: (298 + seed) / 359 for seed in range(n)}
    result = paired(arm, base)
    reference = scipy_stats.binomtest(n, n, 0.5)  # every difference positive
    assert result["test"] == "sign" and result["p"] == pytest.approx(reference.pvalue)
    assert result["significant"] == (reference.pvalue < 0.05) == (n >= 6)
    assert result["ci_low"] is None and result["mean_diff"] == pytest.approx(2 / 359)
    none = paired({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0})
    assert none["p"] == 1.0 and not none["significant"]
    assert paired({0: 1.0}, {0: 0.5})["p"] is None


def test_parse_seeds():
    assert parse_seeds("0-4") == (0, 1, 2, 3, 4)
    assert parse_seeds("3") == (3,)
    assert parse_seeds("5,0-1,1") == (0, 1, 5)
    for text in ("a", "4-2", "-1", "1-"):
        with pytest.raises(ValueError, match="seeds"):
            parse_seeds(text)


def test_config_flags():
    assert config_flags({"eval_flip": True, "cache": False, "ema_decay": None,
                         "scale_range": (0.5, 2.0), "context_options": {"rank": 8},
                         "steps": 10}) == [
        "--eval-flip", "--no-cache", "--ema-decay", "none", "--scale-range", "0.5,2.0",
        "--context-options", '{"rank": 8}', "--steps", "10"]


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_every_cell_is_a_valid_command_of_its_workflow(name):
    """Each arm's flags parse with the workflow's own CLI into the config they mean, and
    every evaluation's flags parse with its evaluate CLI."""
    from kctx.training.cli import evaluate_parser, train_parser
    from kctx.training.config import config_overrides

    study = STUDIES[name]
    workflow = importlib.import_module(f"{study.workflow}.workflow").WORKFLOW
    for arm in study.arms:
        command = study.train_command(arm, 3, "/tmp/x")
        assert command[:2] == ["-m", f"{study.workflow}.train"]
        args = train_parser(workflow).parse_args(command[2:])
        assert args.seed == 3 and args.deterministic and args.model_dir == "/tmp/x"
        config = workflow.config(args.config, **config_overrides(args, workflow.config_class))
        for field, value in {**study.overrides, **arm.overrides}.items():
            assert getattr(config, field) == (tuple(value) if isinstance(value, list)
                                              else value), (arm.name, field)
    for pretraining in study.pretraining:
        pretrained = importlib.import_module(f"{pretraining.workflow}.workflow").WORKFLOW
        command = pretraining.train_command("/tmp/p")
        args = train_parser(pretrained).parse_args(command[2:])
        assert args.deterministic and args.model_dir == "/tmp/p"
        pretrained.config(args.config, **config_overrides(args, pretrained.config_class))
        for arm in study.arms:
            if arm.pretrained == pretraining.name:
                command = study.train_command(arm, 0, "/runs/study/arm/seed0")
                flag = "--" + pretraining.flag.replace("_", "-")
                assert command[command.index(flag) + 1] == \
                    f"/runs/{study.name}/pretraining/{pretraining.name}/{pretraining.file}"
    for evaluation in study.evaluations:
        command = study.evaluate_command(evaluation, "/tmp/x")
        args = evaluate_parser(workflow).parse_args(command[2:])
        assert config_overrides(args, workflow.config_class) == evaluation.overrides
    for metric in study.metrics:
        if metric.file.startswith("evaluation-"):
            assert metric.file[len("evaluation-"):-len(".json")] in {
                e.name for e in study.evaluations}, metric.name


def test_a_pretraining_run_is_made_once_and_reported(tmp_path):
    """A study's pretraining run: its workflow's command in its own folder, made once
    (``study-pretraining.json`` records it), named in the pretrained arms' commands and in
    the report."""
    from studies.report import _pretraining_lines, pretraining_records
    from studies.run import run_pretraining

    pretraining = Pretraining("warm", "sequence", "adding", {"steps": 3}, seed=2)
    study = Study("fake", "sequence", "adding",
                  (Arm("base"), Arm("warm_start", pretrained="warm")), baseline="base",
                  pretraining=(pretraining,))
    assert "--backbone-weights" not in study.train_command(study.arm("base"), 0, "/r/f/base/s0")
    # A stand-in interpreter: records its arguments and writes the run's results.json.
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n'
                      'while [ "$1" != "--model-dir" ]; do shift; done\n'
                      'echo \'{"accuracy": 0.75, "steps": 3}\' > "$2/results.json"\n')
    python.chmod(0o755)
    runs = tmp_path / "runs"
    record = run_pretraining(study, pretraining, runs, python=str(python))
    assert record["results"] == {"accuracy": 0.75, "steps": 3} and record["seed"] == 2
    assert record["command"][1:] == pretraining.train_command(runs / "fake" / "pretraining" /
                                                              "warm")
    assert run_pretraining(study, pretraining, runs, python=str(python)) == record
    assert len((tmp_path / "calls").read_text().splitlines()) == 1  # made once
    records = pretraining_records(study, runs)
    assert records == {"warm": record}
    text = "\n".join(_pretraining_lines(study, records))
    assert "Pretraining `warm` (the start of warm_start; one run, seed 2, for every seed)" \
        in text and "steps 3" in text
    python.write_text("#!/bin/sh\nexit 3\n")
    with pytest.raises(CellError, match="pretraining cold: `train` exited with status 3"):
        run_pretraining(study, dataclasses.replace(pretraining, name="cold"), runs,
                        python=str(python))


def test_study_definitions_are_checked():
    with pytest.raises(ValueError, match="'cold', which is not a pretraining run"):
        Study("bad", "sequence", "adding", (Arm("a", pretrained="cold"),), baseline="a")
    with pytest.raises(ValueError, match="may not be named 'pretraining'"):
        Study("bad", "sequence", "adding", (Arm("pretraining"),), baseline="pretraining")
    with pytest.raises(ValueError, match="not an arm"):
        Study("bad", "sequence", "adding", (Arm("a"),), baseline="b")
    with pytest.raises(ValueError, match="repeat"):
        Study("bad", "sequence", "adding", (Arm("a"), Arm("a")), baseline="a")
    with pytest.raises(ValueError, match=r"evaluation 'e' names arms .* Received: \['b'\]"):
        Study("bad", "sequence", "adding", (Arm("a"),), baseline="a",
              evaluations=(Evaluation("e", arms=("a", "b")),))


def _fake_cell(directory, seed, metrics, config, command=("python", "-m", "x")):
    directory.mkdir(parents=True)
    (directory / "run.json").write_text(json.dumps({
        "config": config, "versions": {"kctx": "0.1.0"}, "git": {"commit": "abc"}}))
    (directory / "results.json").write_text(json.dumps({"params": 100, **metrics}))
    (directory / "timing.json").write_text(json.dumps({"seconds_per_step": 0.1,
                                                       "train_seconds": 10.0}))
    (directory / "study-cell.json").write_text(json.dumps({
        "total_wall_seconds": 12.0, "commands": {"train": list(command)},
        "machine": {"processor": "test CPU"}, "seed": seed}))


def test_report_of_fabricated_runs(tmp_path):
    """Verdicts follow each metric's direction; a missing cell is listed, the arm
    with one seed gets a mean only, and each arm's setting names its flags (and its
    ``--arm`` name where a label is shown)."""
    study = Study("fake", "sequence", "adding",
                  (Arm("base"), Arm("good", {"model": "psf"}), Arm("same"),
                   Arm("one", {"model": "psf"}, config="temporal_order", label="One")),
                  baseline="base", seeds=(0, 1, 2),
                  metrics=(Metric("accuracy", "acc", "results.json", "accuracy", "higher"),
                           Metric("loss", "loss", "results.json", "loss", "lower"),
                           Metric("params", "params", "results.json", "params", digits=0),
                           Metric("steps_to_90", "steps to 90%", "val_accuracy",
                                  "first_step_reaching", reached=0.9, digits=0)))
    rng = np.random.default_rng(0)
    base = rng.normal(0.8, 0.02, 3)
    values = {"base": base, "good": base + [0.1, 0.11, 0.12], "same": base + [0.01, -0.01, 0.0],
              "one": base[:1]}
    for arm, accuracies in values.items():
        for seed, accuracy in enumerate(accuracies):
            directory = tmp_path / "runs" / "fake" / arm / f"seed{seed}"
            _fake_cell(directory, seed, {"accuracy": accuracy, "loss": 1.0 - accuracy},
                       {"model": arm})
            # "good" reaches 90% at step 1,000 on seeds 0 and 1, the other arms never.
            reached = 0.95 if arm == "good" and seed < 2 else 0.5
            (directory / "history.csv").write_text(
                f"step,val_accuracy\n500,0.4\n1000,{reached}\n")
    result = report(study, tmp_path / "runs", tmp_path / "out")
    assert len(result["runs"]) == 10
    assert result["missing"] == [["one", 1], ["one", 2]]
    good = result["arms"]["good"]["vs_baseline"]
    assert good["accuracy"]["significant"] and good["accuracy"]["mean_diff"] > 0
    assert good["loss"]["significant"] and good["loss"]["mean_diff"] < 0
    assert not result["arms"]["same"]["vs_baseline"]["accuracy"]["significant"]
    assert "params" not in good  # descriptive metrics are not compared
    assert result["arms"]["one"]["metrics"]["accuracy"]["ci_low"] is None
    assert json.loads((tmp_path / "out" / "fake.json").read_text()) == json.loads(
        json.dumps(result, default=str))
    text = (tmp_path / "out" / "fake.md").read_text()
    assert "| good | base | acc | 0.1100 [" in text and "| better |" in text
    assert "| good | base | loss | -0.1100 [" in text
    assert "| same | base | acc |" in text and "no significant difference" in text
    assert "Partial study" in text and "one seed 1, one seed 2" in text
    assert "| good | 3 | 0.9" in text and "**+0.1100 [" in text  # the summary row
    assert text.count("| 1,000 (2 of 3 seeds) |") == 2  # summary and per-arm rows of good
    assert "| – (0 of 3 seeds) |" in text
    assert "| good | `--model psf` | 3 |" in text and "| same | – | 3 |" in text
    assert "| One | `--arm one`: `--config temporal_order --model psf` | 1 |" in text
    assert "config `adding` (an arm's own config is in its setting)" in text
    assert (tmp_path / "out" / "fake.png").stat().st_size > 0


def test_report_follows_curves_along_training(tmp_path):
    """A curve is a history column at each checkpoint step: each arm's mean over its seeds
    and its mean paired difference from its baseline over the seeds both have there (a
    step one run lacks, an empty value and a run without a history are left out); the
    runs keep their points, and an earlier report's runs carry them."""
    study = Study("fake", "sequence", "adding", (Arm("base"), Arm("psf", {"model": "psf"})),
                  baseline="base", seeds=(0, 1),
                  metrics=(Metric("accuracy", "acc", "results.json", "accuracy", "higher"),),
                  curves=(Curve("loss", "Training loss", digits=2),))
    histories = {("base", 0): "step,loss\n10,2.0\n20,1.0\n",
                 ("base", 1): "step,loss\n10,3.0\n20,\n",  # no value at step 20
                 ("psf", 0): "step,loss\n10,1.5\n20,0.25\n30,0.125\n",
                 ("psf", 1): None}  # no history.csv
    runs = tmp_path / "runs"
    for (name, seed), history in histories.items():
        arm = study.arm(name)
        directory = study.cell_dir(runs, arm, seed)
        _fake_cell(directory, seed, {"accuracy": 0.5}, {"model": name},
                   ["python", *study.train_command(arm, seed, directory)])
        if history is not None:
            (directory / "history.csv").write_text(history)
    result = report(study, runs, tmp_path / "out")
    assert result["runs"][2]["curves"] == {"loss": [[10, 1.5], [20, 0.25], [30, 0.125]]}
    assert result["runs"][3]["curves"] == {"loss": []}
    assert result["arms"]["base"]["curves"]["loss"] == [
        {"step": 10, "n": 2, "mean": 2.5}, {"step": 20, "n": 1, "mean": 1.0},
        {"step": 30, "n": 0, "mean": None}]
    psf = result["arms"]["psf"]["curves"]["loss"]
    assert [(p["step"], p["n"], p["mean"]) for p in psf] == [(10, 1, 1.5), (20, 1, 0.25),
                                                             (30, 1, 0.125)]
    assert [(p["vs_baseline"]["n"], p["vs_baseline"]["mean_diff"]) for p in psf] == [
        (1, -0.5), (1, -0.75), (0, None)]
    text = (tmp_path / "out" / "fake.md").read_text()
    assert "## Training loss along training" in text and "| arm | n | 10 | 20 | 30 |" in text
    assert "| base | 2 | 2.50 | 1.00 | – |" in text
    assert "| psf | 2 | 1.50 (Δ -0.50) | 0.25 (Δ -0.75) | 0.12 |" in text
    shutil.rmtree(runs / "fake" / "psf")
    again = report(study, runs, tmp_path / "out", png=False)
    assert again["arms"]["psf"]["curves"] == result["arms"]["psf"]["curves"]
    with pytest.raises(ValueError, match="a history column is given two curves"):
        dataclasses.replace(study, curves=(Curve("loss", "a"), Curve("loss", "b")))


def test_report_keeps_earlier_runs_whose_cells_are_unchanged(tmp_path):
    """Runs of the report already written fill the cells with no folder here (the
    committed runs of other machines), unless the study now defines the cell
    differently; ``keep_previous=False`` reports the folders alone."""
    metric = Metric("accuracy", "acc", "results.json", "accuracy", "higher")
    study = Study("fake", "sequence", "adding", (Arm("base"), Arm("psf", {"model": "psf"})),
                  baseline="base", seeds=(0, 1, 2), metrics=(metric,))
    runs, out = tmp_path / "runs", tmp_path / "out"
    for arm in study.arms:
        for seed in (0, 1):
            directory = study.cell_dir(runs, arm, seed)
            _fake_cell(directory, seed, {"accuracy": 0.5 + seed / 10 + (arm.name == "psf") / 5},
                       {"model": arm.name},
                       ["python", *study.train_command(arm, seed, directory)])
    first = report(study, runs, out, png=False)
    assert first["missing"] == [["base", 2], ["psf", 2]] and first["dropped"] == []
    shutil.rmtree(runs / "fake" / "psf")  # this machine has only the base arm's folders
    # Its run from a later version, whose config has a field the earlier runs lack (at the
    # value that computes what they computed): the same settings, the same config hash.
    base, directory = study.arm("base"), study.cell_dir(runs, study.arm("base"), 2)
    _fake_cell(directory, 2, {"accuracy": 0.7}, {"model": "base", "short_conv": None},
               ["python", *study.train_command(base, 2, directory)])
    second = report(study, runs, out, png=False)
    assert [(r["arm"], r["seed"]) for r in second["runs"]] == [
        ("base", 0), ("base", 1), ("base", 2), ("psf", 0), ("psf", 1)]
    assert second["runs"][3:] == first["runs"][2:]
    assert len({r["config_hash"] for r in second["runs"][:3]}) == 1
    assert second["runs"][0]["config_hash"] != second["runs"][3]["config_hash"]
    # A field with two values among the runs tells them apart.
    assert fields_added_since([{"config": {"a": 1}}, {"config": {"a": 1, "k": None}},
                               {"config": {"a": 1, "k": 4}}]) == set()
    assert second["missing"] == [["psf", 2]]
    assert second["arms"]["psf"]["vs_baseline"]["accuracy"]["mean_diff"] == pytest.approx(0.2)
    assert report(study, runs, tmp_path / "alone", png=False,
                  keep_previous=False)["missing"] == [["psf", 0], ["psf", 1], ["psf", 2]]

    # The runner leaves the reported cells alone (here every cell of seeds 0 and 1: no
    # folder is made), and runs them again with results_dir=None.
    shutil.rmtree(runs / "fake")
    logged = []
    assert run_study(study, runs, seeds=(0, 1), results_dir=out,
                     log=lambda *args, **kwargs: logged.append(args[0])) == []
    assert logged == [f"fake: 4 of 4 cells finished (4 in {out / 'fake'}.json), 0 to run "
                      f"(1 at a time) in {runs / 'fake'}"]
    assert not (runs / "fake").exists()
    assert reported_cells(study, out) == {("base", 0), ("base", 1), ("base", 2), ("psf", 0),
                                          ("psf", 1)}

    changed = Study("fake", "sequence", "adding", (Arm("base"), Arm("psf", {"model": "lstm"})),
                    baseline="base", seeds=(0, 1, 2), metrics=(metric,))
    third = report(changed, runs, out, png=False)
    assert third["dropped"] == [["psf", 0], ["psf", 1]]
    assert reported_cells(changed, out) == {("base", 0), ("base", 1), ("base", 2)}
    assert third["missing"] == [["psf", 0], ["psf", 1], ["psf", 2]]
    assert "2 run(s) of an earlier report left out" in (out / "fake.md").read_text()


def _studies(module, *args, capsys):
    """``python -m MODULE ARGS`` in this process (its cells still run in processes of their
    own); returns what it printed."""
    import importlib

    capsys.readouterr()
    assert importlib.import_module(module).main(list(args)) == 0, capsys.readouterr()
    return capsys.readouterr().out


def _cell_outputs(directory):
    results = json.loads((directory / "results.json").read_text())
    history = (directory / "history.csv").read_text().splitlines()
    columns = history[0].split(",")
    # (Not the times, nor the peak memory of the process, which differ from run to run.)
    kept = [i for i, c in enumerate(columns) if "seconds" not in c and c != "peak_memory_mb"]
    weights = {path.name: path.read_bytes()
               for path in sorted((directory / "checkpoints").glob("ckpt-*.data-*"))}
    return results, [[row.split(",")[i] for i in kept] for row in history], weights


@pytest.mark.slow
def test_smoke_study_resumes_and_repeats_bit_for_bit(tmp_path, monkeypatch, capsys):
    from kctx.training import DETERMINISTIC_ENVIRONMENT

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    smoke = STUDIES["smoke"]
    runs = tmp_path / "runs"
    _studies("studies.run", "smoke", "--seeds", "0", "--jobs", "2", "--runs-dir", str(runs),
             capsys=capsys)
    first = {arm.name: (runs / "smoke" / arm.name / "seed0" / "study-cell.json").stat().st_mtime
             for arm in smoke.arms}
    # An interrupted cell: ham_nmf at seed 1 stopped at its first checkpoint.
    ham = smoke.arm("ham_nmf")
    cell = smoke.cell_dir(runs, ham, 1)
    subprocess.run([sys.executable, *smoke.train_command(ham, 1, cell), "--stop-after-step",
                    "3"], cwd=tmp_path, check=True, capture_output=True,
                   env={**os.environ, **DETERMINISTIC_ENVIRONMENT, "PYTHONPATH": str(ROOT)})
    assert not (cell / "results.json").exists()
    listing = _studies("studies.run", "smoke", "--list", "--runs-dir", str(runs), capsys=capsys)
    assert "partial  ham_nmf seed 1" in listing and "missing  none seed 1" in listing
    output = _studies("studies.run", "smoke", "--jobs", "2", "--runs-dir", str(runs),
                      capsys=capsys)
    assert "2 of 4 cells finished, 2 to run" in output
    for arm in smoke.arms:  # finished cells are not run again
        assert (runs / "smoke" / arm.name / "seed0" / "study-cell.json").stat().st_mtime == \
            first[arm.name]
    assert json.loads((cell / "study-cell.json").read_text())["resumed"] is True
    # The same cell's training uninterrupted, in another folder (its command as the runner
    # runs it): the same numbers and weights, bit for bit (the evaluations of equal weights
    # are equal).
    again = tmp_path / "again"
    subprocess.run([sys.executable, *smoke.train_command(ham, 1, again)], cwd=tmp_path,
                   check=True, capture_output=True,
                   env={**os.environ, **DETERMINISTIC_ENVIRONMENT, "PYTHONPATH": str(ROOT)})
    assert _cell_outputs(cell) == _cell_outputs(again)

    _studies("studies.report", "smoke", "--runs-dir", str(runs), "--output-dir", "out",
             capsys=capsys)
    result = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert [(r["arm"], r["seed"]) for r in result["runs"]] == [
        ("ham_nmf", 0), ("ham_nmf", 1), ("none", 0), ("none", 1)]
    assert result["missing"] == []
    for run in result["runs"]:
        assert run["versions"]["tensorflow"] and len(run["config_hash"]) == 12
        assert run["wall_seconds"] > 0 and run["machine"]["cpus"] >= 1
    miou = [r["metrics"]["miou"] for r in result["runs"] if r["arm"] == "ham_nmf"]
    np.testing.assert_allclose(result["arms"]["ham_nmf"]["metrics"]["miou"]["mean"],
                               np.mean(miou), rtol=1e-12)
    assert [r["metrics"]["miou_flip"] > 0 if r["arm"] == "ham_nmf" else
            r["metrics"]["miou_flip"] is None for r in result["runs"]] == [True] * 4
    assert result["arms"]["ham_nmf"]["vs_baseline"]["miou"]["n"] == 2
    assert (tmp_path / "out" / "smoke.md").exists() and (tmp_path / "out" / "smoke.png").exists()

    # An evaluation added to the study later, for one arm: the runner scores that arm's
    # finished cells with it and trains nothing again; the other arm has none.
    extended = dataclasses.replace(
        smoke, evaluations=smoke.evaluations + (
            Evaluation("K1", {"eval_ham_steps": 1}, arms=("ham_nmf",)),),
        metrics=smoke.metrics + (Metric("miou_K1", "mIoU K=1", "evaluation-K1.json", "miou",
                                        better="higher", summary=False),))
    none = smoke.arm("none")
    assert cell_state(extended, runs, ham, 0) == "partial"
    assert cell_state(extended, runs, none, 0) == "finished"
    trained = {arm.name: (smoke.cell_dir(runs, arm, 0) / "timing.json").stat().st_mtime
               for arm in smoke.arms}
    assert run_study(extended, runs, seeds=(0,), log=lambda *args, **kwargs: None) == []
    for arm in smoke.arms:
        assert (smoke.cell_dir(runs, arm, 0) / "timing.json").stat().st_mtime == trained[arm.name]
    scored = json.loads((smoke.cell_dir(runs, ham, 0) / "evaluation-K1.json").read_text())
    assert scored["ham_eval_steps"] == 1
    assert not (smoke.cell_dir(runs, none, 0) / "evaluation-K1.json").exists()
    record = json.loads((smoke.cell_dir(runs, ham, 0) / "study-cell.json").read_text())
    assert [added["names"] for added in record["added_evaluations"]] == [["evaluation-K1"]]
    assert {"train", "evaluation-flip", "evaluation-K1"} <= set(record["wall_seconds"])
    assert cell_state(extended, runs, ham, 0) == "finished"
    result = report(extended, runs, tmp_path / "out2", png=False)
    k1 = {(r["arm"], r["seed"]): r["metrics"]["miou_K1"] for r in result["runs"]}
    assert k1[("ham_nmf", 0)] == scored["miou"]
    assert k1[("ham_nmf", 1)] is None and k1[("none", 0)] is None
    summary = (tmp_path / "out2" / "smoke.md").read_text().split("## Per arm")[0]
    assert "mIoU K=1" not in summary


@pytest.mark.parametrize("name", ["segmentation-digits", "segmentation-large",
                                  "hamburger-ablations"])
def test_every_segmentation_arm_builds_and_runs(name):
    """The arms' context options are valid arguments of their blocks."""
    from segmentation.workflow import WORKFLOW, build_model

    study = STUDIES[name]
    images = np.random.default_rng(0).random((1, 32, 32, 3)).astype("float32")
    for arm in study.arms:
        config = WORKFLOW.config(arm.config or study.config, **{**study.overrides,
                                                                **arm.overrides})
        model = build_model(config)
        assert model(images, training=True).shape == (1, 32, 32, config.num_classes), arm.name


def test_compare_pairs_any_arms_and_adjusts_with_holm(capsys, tmp_path):
    from studies import compare

    report = {"runs": [{"arm": arm, "seed": seed, "metrics": {"miou": value}}
                       for arm, values in {"a": [0.5, 0.6, 0.7], "b": [0.4, 0.45, 0.62],
                                           "c": [0.5, 0.6, 0.7]}.items()
                       for seed, value in enumerate(values)]}
    (row,) = compare.compare(report, [("a", "b")], "miou")
    expected = paired({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.4, 1: 0.45, 2: 0.62})
    assert row["mean_diff"] == pytest.approx(expected["mean_diff"]) and row["n"] == 3
    assert compare.compare(report, [("a", "c")], "miou")[0]["p"] == 1.0  # identical: sign test
    np.testing.assert_allclose(compare.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    with pytest.raises(ValueError, match="Received: arm='d'"):
        compare.compare(report, [("d", "a")], "miou")
    # One arm scored two ways: ARM@METRIC pairs its runs' metrics seed by seed.
    for run in report["runs"]:
        run["metrics"]["miou_eval_K6"] = run["metrics"]["miou"] - 0.01 * (run["seed"] + 1)
    (row,) = compare.compare(report, [("a@miou_eval_K6", "a")], "miou")
    assert row["mean_diff"] == pytest.approx(-0.02) and row["n"] == 3
    with pytest.raises(ValueError, match="Received: metric='top1'"):
        compare.compare(report, [("a@top1", "a")], "miou")
    # The command line: pairs before or after the options.
    (tmp_path / "toy.json").write_text(json.dumps(report))
    for argv in (["toy", "a:b", "--output-dir", str(tmp_path), "--holm"],
                 ["toy", "--output-dir", str(tmp_path), "--holm", "a:b", "a:c"]):
        compare.main(argv)
        assert "a − b: " in capsys.readouterr().out
    # Without --metric: the report's first metric (here the K = 6 scores), not mIoU.
    report["metrics"] = {"miou_eval_K6": {"label": "mIoU (K = 6)", "better": "higher"},
                         "miou": {"label": "mIoU", "better": "higher"}}
    (tmp_path / "toy.json").write_text(json.dumps(report))
    compare.main(["toy", "a@miou:a", "--output-dir", str(tmp_path)])
    assert capsys.readouterr().out.startswith("toy, miou_eval_K6: arm − baseline")
    assert compare.default_metric(report) == "miou_eval_K6"
    # STUDY/ARM: an arm of another study of the workflow, paired seed by seed, with the config
    # fields the two arms' runs differ in.
    report.update(study="toy", workflow="segmentation")
    for run in report["runs"]:
        run["config"] = {"context": run["arm"], "steps": 10}
    other = {"study": "toy2", "workflow": "segmentation", "metrics": report["metrics"],
             "runs": [{"arm": "x", "seed": seed, "config": {"context": "a", "steps": 20},
                       "metrics": {"miou": 0.5 + 0.1 * seed - 0.03}} for seed in range(3)]}
    (row,) = compare.compare(report, [("a", "toy2/x")], "miou", others={"toy2": other})
    assert row["mean_diff"] == pytest.approx(0.03)
    assert row["settings_differ"] == {"steps": [10, 20]}
    assert compare.other_studies([("a", "toy2/x@miou"), ("toy3/y", "b")]) == ["toy2", "toy3"]
    with pytest.raises(ValueError, match="Received: side='toy3/y'"):
        compare.compare(report, [("toy3/y", "a")], "miou", others={"toy2": other})
    (tmp_path / "toy.json").write_text(json.dumps(report))
    (tmp_path / "toy2.json").write_text(json.dumps(other))
    compare.main(["toy", "a:toy2/x", "--metric", "miou", "--output-dir", str(tmp_path)])
    assert "a − toy2/x: +0.0300 (the same difference on every seed: sign test), p = " \
        "0.25, n = 3 (settings differ: steps 10 vs 20)" in capsys.readouterr().out
    # A field only one run records (added to the workflow after the other ran).
    other["runs"][0]["config"]["short_conv"] = 4
    (row,) = compare.compare(report, [("a", "toy2/x")], "miou", others={"toy2": other})
    assert row["settings_differ"] == {"short_conv": ["(not recorded)", 4], "steps": [10, 20]}
    (tmp_path / "toy2.json").write_text(json.dumps({**other, "workflow": "gan"}))
    with pytest.raises(SystemExit):
        compare.main(["toy", "a:toy2/x", "--output-dir", str(tmp_path)])
    assert "their seeds do not see the same data" in capsys.readouterr().err


def test_power_analysis_of_a_paired_comparison(tmp_path):
    """Differences of sd 2 on seeds 0–3 and an effect of 0.1 × the baseline's mean 10 = 1
    (d = 0.5): 34 seeds for 80 % power, as for any paired t-test at d = 0.5."""
    from studies.power import main, seeds_needed
    from studies.stats import paired_power, seeds_for_power

    assert seeds_for_power(1.0, 1.0) == 10 and seeds_for_power(2.0, 1.0) == 34
    assert paired_power(34, 2.0, 1.0) >= 0.8 > paired_power(33, 2.0, 1.0)
    differences = [1.0, 3.0, -1.0, 1.0]  # mean 1, sd 1.633
    runs = [{"arm": "b", "seed": seed, "metrics": {"fid": 10.0}} for seed in range(4)]
    runs += [{"arm": "a", "seed": seed, "metrics": {"fid": 10.0 + d}}
             for seed, d in enumerate(differences)]
    report = {"study": "toy", "runs": runs}
    result = seeds_needed(report, "a", "b", "fid", 0.1)
    assert result["seeds"] == [0, 1, 2, 3] and result["mean_diff"] == pytest.approx(1.0)
    assert result["effect"] == pytest.approx(1.0)
    assert result["seeds_for_power"]["0.8"] == seeds_for_power(result["sd_diff"], 1.0)
    with pytest.raises(ValueError, match="No run of arm 'c'"):
        seeds_needed(report, "c", "b", "fid", 0.1)
    (tmp_path / "toy.json").write_text(json.dumps(report))
    assert main(["toy", "--arm", "a", "--against", "b", "--metric", "fid",
                 "--relative-effect", "0.1", "--results-dir", str(tmp_path),
                 "--json", str(tmp_path / "power.json")]) == 0
    assert json.loads((tmp_path / "power.json").read_text())["effect"] == pytest.approx(1.0)
