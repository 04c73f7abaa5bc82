"""The workflow runner: one CLI shape, deterministic runs, exact resume after kill -9,
run-folder protection, re-scoring, and two worker processes training as one."""

import dataclasses
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from kctx.training import DETERMINISTIC_ENVIRONMENT as DETERMINISTIC
from kctx.training.determinism import TORCH_DETERMINISTIC_ENVIRONMENT as TORCH_DETERMINISTIC
from kctx.training.determinism import XLA_DETERMINISTIC_FLAGS as XLA_FLAGS
from kctx.training import RunDirectoryError, SHARED_HELP, read_history
from kctx.training.config import add_config_arguments, field_help
from workflow_runs import CHECKPOINT_STEP, KILL_SCRIPT, ROOT, TINY, WEIGHTS_FILE, \
    assert_same_update, assert_saved_in_mixed_bfloat16, environment, finish, free_ports, \
    jax_environment, kill_when, load_weights, saved_arrays, start, tf_config

WORKFLOWS = ("gan", "classification", "segmentation", "sequence", "language")
BACKENDS = ("tensorflow", "jax", "torch")


def _workflow(name):
    import importlib

    return importlib.import_module(f"{name}.workflow").WORKFLOW


@pytest.mark.parametrize("name", WORKFLOWS)
def test_every_config_field_is_a_documented_flag(name, capsys):
    import importlib

    workflow = _workflow(name)
    fields = [f.name for f in dataclasses.fields(workflow.config_class) if f.name != "name"]
    helps = field_help(workflow.config_class)
    assert not [f for f in fields if not helps.get(f)], "fields without help text"
    with pytest.raises(SystemExit):
        importlib.import_module(f"{name}.train").main(["--help"])
    text = capsys.readouterr().out
    for flag in ["--config", "--model-dir", "--seed", "--deterministic", "--tpu", "--verbose",
                 "--stop-after-step", "--data-dir"] + [
            "--" + f.replace("_", "-") for f in fields]:
        assert flag in text, flag
    for config in workflow.configs:
        assert config in text
    with pytest.raises(SystemExit):
        importlib.import_module(f"{name}.evaluate").main(["--help"])
    assert "--model-dir" in capsys.readouterr().out


def test_shared_fields_have_one_help_text_in_every_workflow():
    texts = {}
    for name in WORKFLOWS:
        helps = field_help(_workflow(name).config_class)
        for field, text in helps.items():
            if field in SHARED_HELP:
                texts.setdefault(field, set()).add(text)
    assert texts["steps"] == {SHARED_HELP["steps"]} and texts["batch_size"] == {
        SHARED_HELP["batch_size"]}
    assert all(len(values) == 1 for values in texts.values()), texts


def test_flags_parse_types_none_and_tuples():
    import argparse

    from gan.configs import GANConfig
    from segmentation.configs import SegmentationConfig

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, GANConfig)
    args = parser.parse_args(["--ema-decay", "none", "--steps", "7", "--generator-channels",
                              "64,32,16", "--discriminator-blocks", "(8, True), (8, False)"])
    assert args.ema_decay is None and args.steps == 7
    assert args.generator_channels == (64, 32, 16)
    assert args.discriminator_blocks == ((8, True), (8, False))
    with pytest.raises(SystemExit):
        parser.parse_args(["--steps", "seven"])
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, SegmentationConfig)
    assert parser.parse_args(["--no-eval-flip"]).eval_flip is False
    assert parser.parse_args(["--eval-flip"]).eval_flip is True
    assert vars(parser.parse_args([])) == {}  # only what is given overrides


@pytest.mark.parametrize("name,flags,message", [
    ("gan", ["--steps", "0"], "`steps` must be a positive integer. Received: steps=0"),
    ("gan", ["--batch-size", "-4"], "Received: batch_size=-4"),
    ("classification", ["--learning-rate", "nan"], "Received: learning_rate=nan"),
    ("classification", ["--epochs", "0"], "Received: epochs=0"),
    ("segmentation", ["--crop-size", "0"], "Received: crop_size=0"),
    ("segmentation", ["--context", "ham_svd"], "Received: context='ham_svd'"),
    ("sequence", ["--batch-size", "0"], "Received: batch_size=0"),
    ("sequence", ["--eval-every", "0"], "Received: eval_every=0"),
    # The rest of finding 2 of the reliability issue: negative budgets, zero batches and
    # sizes that used to train, divide by zero or mean "own size" silently.
    ("gan", ["--steps", "-5"], "Received: steps=-5"),
    ("gan", ["--batch-size", "0"], "Received: batch_size=0"),
    ("classification", ["--epochs", "-1"], "Received: epochs=-1"),
    ("classification", ["--batch-size", "0"], "Received: batch_size=0"),
    ("segmentation", ["--eval-size", "0"], "Received: eval_size=0"),
    ("segmentation", ["--eval-images", "0"], "Received: eval_images=0"),
    ("segmentation", ["--eval-ham-steps", "0"], "Received: eval_ham_steps=0"),
    ("sequence", ["--steps", "-5"], "Received: steps=-5"),
    ("gan", ["--dtype-policy", "mixed_float16"], "Received: dtype_policy='mixed_float16'"),
])
def test_bad_settings_stop_before_anything_runs(name, flags, message, tmp_path, capsys):
    import importlib

    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(f"{name}.train").main(flags + ["--model-dir", str(tmp_path)])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# Several processes killed and resumed: the two-worker test below (TensorFlow) and the
# two-process test in tests/test_jax_workflows.py, both on the sequence workflow (the
# smallest run; the machinery is the runner's, the same for every workflow). On JAX, the GAN
# (its own stateless two-optimizer step and NumPy step checkpoints of two optimizers);
# segmentation, sequence and classification train through Keras' own JAX fit step and the
# same NumPy checkpoints, whose resume the two-process test checks. Classification resumes
# through the same runner; its stream's exact resume from any step is
# tests/test_classification.py's. On PyTorch (one device, NumPy step checkpoints): the GAN
# (its autograd step of two optimizers) and segmentation (Keras's own PyTorch fit step, and
# a dropout layer made without a seed, whose PyTorch masks come from torch's global
# generator, which the runner seeds at every step; the sequence run has no dropout and
# resumed exactly without that). On TensorFlow the GAN (its own step and TensorFlow's step
# checkpoints of two optimizers); Keras's fit step with TensorFlow's step checkpoints is the
# sequence workflow's two killed and resumed workers' below (segmentation's stop and resume
# on TensorFlow is tests/test_segmentation.py's).
KILLED_RUNS = [("gan", "tensorflow"), ("gan", "jax"), ("gan", "torch"),
               ("segmentation", "torch")]


def _environments(backend):
    """The plain and the deterministic environments of a run on ``backend``: on JAX over 2
    virtual CPU devices (DataParallel), with XLA's flags after the session's; on PyTorch
    one thread and cuBLAS's workspace (what ``--deterministic`` adds to
    :data:`DETERMINISTIC`)."""
    if backend == "jax":
        return jax_environment(2), jax_environment(2, deterministic=True)
    torch = dict(TORCH_DETERMINISTIC) if backend == "torch" else {}
    return (environment(KERAS_BACKEND=backend),
            environment(KERAS_BACKEND=backend, **DETERMINISTIC, **torch))


@pytest.mark.parametrize("name,backend", KILLED_RUNS)
def test_kill_9_and_rerun_reproduce_the_uninterrupted_run(name, backend, tmp_path, request):
    """Deterministic mode, on each Keras backend (JAX over two devices): a straight run, and
    a run killed with SIGKILL one step after its first checkpoint then started again with
    the same command, side by side on the 2 cores, end with byte-identical results.json and
    weights; evaluate re-scores (off TensorFlow); the JAX GAN's run exports on TensorFlow
    from its NumPy checkpoint. The GAN's runs are ``--dtype-policy mixed_bfloat16`` ones
    (the policy's run on each backend: its record, its saved generator, its evaluation;
    segmentation's is tests/mixed_precision_check.py's on TensorFlow)."""
    if name == "gan":
        request.getfixturevalue("fcd_classifier")  # their FCD's classifier, trained here if absent
    mixed = ["--dtype-policy", "mixed_bfloat16"] if name == "gan" else []
    flags = TINY[name] + mixed + ["--deterministic", "--verbose", "0"]
    plain, deterministic = _environments(backend)
    devices = 2 if backend == "jax" else 1
    killed = start(["-c", KILL_SCRIPT, name, str(CHECKPOINT_STEP[name] + 1), *flags,
                    "--model-dir", str(tmp_path / "resumed")], env=deterministic)
    if backend == "jax":
        # XLA compiles the run's programs once: the killed run writes them to the session's
        # persistent compilation cache, and the straight and resumed runs, started after
        # it, load them (side by side, each compiled them: 23 CPU s a process).
        killed = finish(killed)
    # The PyTorch GAN's straight run restarts itself in the deterministic environment
    # (--deterministic; the restart is the same code on every backend); the other runs are
    # started in it (a restart imports TensorFlow, Keras and the backend a second time: 11 CPU
    # s of the JAX GAN's check).
    restarts = (name, backend) == ("gan", "torch")
    straight = start(["-m", f"{name}.train", *flags, "--model-dir", str(tmp_path / "straight")],
                     env=plain if restarts else deterministic)
    status, output = killed if backend == "jax" else finish(killed)
    assert status == -signal.SIGKILL, output[-3000:]
    assert not (tmp_path / "resumed" / "results.json").exists()
    resumed = start(["-m", f"{name}.train", *flags, "--model-dir", str(tmp_path / "resumed")],
                    env=deterministic)
    for process in (straight, resumed):
        status, output = finish(process)
        assert status == 0, output[-3000:]
        if process is resumed:
            assert f"ckpt-{CHECKPOINT_STEP[name]}" in output
            assert f"at step {CHECKPOINT_STEP[name]}" in output
            if name == "gan":
                assert "FCD (digits_classifier, 150 generated vs 1797 real)" in output
        if backend == "jax":
            assert "distribution: DataParallel with 2 replica(s)" in output
    texts = [(tmp_path / kind / "results.json").read_text() for kind in ("straight", "resumed")]
    results = json.loads(texts[0])
    assert texts[0] == texts[1]
    assert results["workflow"] == name and results["steps"] == 2 * CHECKPOINT_STEP[name]
    weights = WEIGHTS_FILE.get(name, "model.keras")
    straight, resumed = (saved_arrays(tmp_path / kind / weights)
                         for kind in ("straight", "resumed"))
    assert straight and straight.keys() == resumed.keys()
    for key, array in straight.items():
        np.testing.assert_array_equal(array, resumed[key], err_msg=key)
    if mixed:
        import keras

        _workflow(name)  # registers the workflow's serializable objects for loading
        assert_saved_in_mixed_bfloat16(keras.saving.load_model(tmp_path / "resumed" / weights),
                                       backend)
    # One history row per checkpoint interval, each step once (the killed run's extra
    # step is not logged twice); timing.json sums them.
    rows = read_history(tmp_path / "resumed" / "history.csv")
    assert [row["step"] for row in rows] == [CHECKPOINT_STEP[name], 2 * CHECKPOINT_STEP[name]]
    timing = json.loads((tmp_path / "resumed" / "timing.json").read_text())
    # timing.json rounds its sums to 0.01 s.
    assert timing["train_seconds"] == pytest.approx(sum(row["seconds"] for row in rows),
                                                    abs=0.006)
    assert timing["eval_seconds"] == pytest.approx(
        sum(row.get("eval_seconds", 0.0) for row in rows), abs=0.006)
    assert timing["seconds_per_step"] > 0
    # The peak resident memory of the killed and of the resumed process, the larger.
    assert timing["peak_memory_mb"] == max(row["peak_memory_mb"] for row in rows) > 100
    run = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert run["deterministic"] and run["config"]["name"] == results["config"]
    assert run["config"]["dtype_policy"] == ("mixed_bfloat16" if mixed else "float32")
    assert run["backend"] == backend and run["replicas"] == devices
    assert len(run["devices"]) == devices and run["processes"] == 1
    assert {"tensorflow", "keras", "numpy", "python"} <= set(run["versions"])
    if backend == "jax":
        assert set(XLA_FLAGS) <= set(run["environment"]["XLA_FLAGS"].split())
        assert run["strategy"] == "DataParallel"
    if backend == "torch":
        assert "torch" in run["versions"] and run["strategy"] == "PyTorch single device"
        assert TORCH_DETERMINISTIC.items() <= run["environment"].items()
    if backend == "tensorflow":
        return  # (evaluate on TensorFlow: tests/test_gan.py, test_segmentation.py, test_studies.py)
    # evaluate re-scores the saved model with the run's config (single-threaded: the same
    # kernels as the run, so the same numbers).
    status, output = finish(start(["-m", f"{name}.evaluate", "--model-dir",
                                   str(tmp_path / "resumed")], env=deterministic))
    assert status == 0, output[-3000:]
    evaluation = json.loads((tmp_path / "resumed" / "evaluation.json").read_text())
    for key, value in results.items():
        if key in ("steps", "params") or not isinstance(value, float):
            continue
        assert evaluation[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    if (name, backend) == ("gan", "jax"):
        _export_on_tensorflow(tmp_path / "resumed", deterministic)


def _export_on_tensorflow(run, env):
    """``gan.export`` on JAX restarts on TensorFlow, which loads the JAX run's NumPy
    checkpoint, and the ONNX artifact matches Keras."""
    results = json.loads((run / "results.json").read_text())
    assert results["metric"] == "fcd" and np.isfinite(results["value"]) and results["value"] > 0
    assert (run / "samples_final.png").exists()
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == \
        ["ckpt-2.npz", "ckpt-4.npz"]
    status, output = finish(start(["-m", "gan.export", "--model-dir", str(run), "--format",
                                   "onnx", "--checkpoint", "latest"], env=env))
    assert status == 0, output[-4000:]
    assert "exporting on the TensorFlow backend" in output
    assert "ckpt-4.npz (step 4)" in output
    report = json.loads((run / "generator.onnx.json").read_text())
    assert report["source"].endswith("ckpt-4.npz (step 4)")
    assert (run / "generator.onnx").exists()
    # The run's mixed_bfloat16 generator exports its float32 evaluation: exact to that, and
    # to bfloat16's rounding against the run's own outputs (1.6e-2 measured).
    assert report["float32_max_relative_difference"] < 1e-4, report
    assert report["max_relative_difference"] < 0.1, report


# Grappler's memory optimizer rewrites an AddN of more than two inputs when the graph's
# estimated peak exceeds 80% of the device's memory, which for TensorFlow's CPU device is a
# fixed 256 MB (the same on every machine): here four 64 MB tensors summed by a chain of adds
# (which the arithmetic optimizer makes one AddN, as MSCA's four branches in SegNeXt-T's
# training step). In a fresh process, so that Grappler dumps the graphs it optimizes
# (TF_DUMP_GRAPH_PREFIX, at meta_optimizer's VLOG 1).
ADDN_SCHEDULING_SCRIPT = """
import os, sys
import tensorflow as tf
from kctx.training.determinism import _disable_addn_scheduling

tf.config.experimental.enable_op_determinism()
x = tf.fill((64, 64, 64, 64), 0.5)

def accumulators():
    @tf.function
    def step(x):
        total = tf.sin(x) + tf.cos(x) + tf.exp(-x) + tf.sqrt(x)
        return tf.reduce_sum(total * x)

    before = set(os.listdir(sys.argv[1]))
    step(x)
    (graph,) = set(os.listdir(sys.argv[1])) - before
    return open(os.path.join(sys.argv[1], graph)).read().count('op: "TemporaryVariable"')

print(accumulators())
_disable_addn_scheduling()
print(accumulators())
"""


def test_deterministic_mode_keeps_grappler_from_summing_in_finishing_order(tmp_path):
    """What op determinism misses: Grappler's memory optimizer turns an AddN at the memory
    peak into AssignAdds on a temporary variable, summed in whatever order its inputs
    finish (SegNeXt-T's training differed between two runs of one command);
    deterministic mode switches that pass off."""
    result = subprocess.run(
        [sys.executable, "-c", ADDN_SCHEDULING_SCRIPT, str(tmp_path)], capture_output=True,
        text=True, env=environment(**DETERMINISTIC, TF_CPP_VMODULE="meta_optimizer=1",
                                   TF_DUMP_GRAPH_PREFIX=str(tmp_path)), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    plain, deterministic = (int(line) for line in result.stdout.split())
    assert plain > 0  # op determinism alone: accumulators (TensorFlow 2.21)
    assert deterministic == 0


def test_deterministic_runs_get_the_caching_allocator_unless_told_otherwise():
    """--deterministic's restart and the studies' cells start TensorFlow with its caching
    CPU allocator (speed only); a value the user set is kept."""
    from kctx.training import deterministic_variables
    from studies.run import _environment

    key = "TF_CPU_ALLOCATOR_USE_BFC"
    assert deterministic_variables({})[key] == "true"
    assert deterministic_variables({key: "false"})[key] == "false"
    assert _environment()[key] == os.environ.get(key, "true")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_deterministic_restart_lands_in_the_environment_it_checks(backend, monkeypatch):
    """``--deterministic`` restarts a command unless :func:`deterministic_environment`
    holds: the environment the restart gets passes that check on each backend's branch
    (XLA's flags added to the user's on JAX, PyTorch's variables), so a restart happens
    once. (A real restart: the PyTorch GAN's straight run in the kill test above.)"""
    from kctx.training import determinism

    monkeypatch.setattr(determinism.keras.backend, "backend", lambda: backend)
    user = {"PATH": os.environ.get("PATH", ""), "XLA_FLAGS": "--xla_dump_to=/tmp/xla"}
    monkeypatch.setattr(os, "environ", dict(user))
    assert not determinism.deterministic_environment()
    restarted = determinism.deterministic_variables()
    monkeypatch.setattr(os, "environ", dict(restarted))
    assert determinism.deterministic_environment()
    flags = restarted["XLA_FLAGS"].split()
    assert flags[0] == "--xla_dump_to=/tmp/xla"
    assert (set(XLA_FLAGS) <= set(flags)) == (backend == "jax")
    assert (TORCH_DETERMINISTIC.items() <= restarted.items()) == (backend == "torch")


# The smallest run of a workflow, for the runner's own rules (the same for every workflow).
SEQUENCE_RUN = dict(length=16, batch_size=4, eval_examples=100, embed_dim=4, hidden_units=4,
                    target_accuracy=0)


def test_run_folder_holds_one_run(tmp_path):
    """The runner's run-folder rules (the same for every workflow), on the smallest run."""
    from sequence.train import train

    quiet = dict(verbose=0, log=lambda *_: None)
    tiny = dict(SEQUENCE_RUN, steps=2, eval_every=1)
    first = train(model_dir=tmp_path / "run", **tiny, **quiet)
    with pytest.raises(RunDirectoryError, match=r"batch_size \(4 → 8\)"):
        train(model_dir=tmp_path / "run", **dict(tiny, batch_size=8), **quiet)
    with pytest.raises(RunDirectoryError, match=r"seed \(0 → 1\)"):
        train(model_dir=tmp_path / "run", seed=1, **tiny, **quiet)
    with pytest.raises(RunDirectoryError, match="holds a sequence run, not a gan run"):
        from gan.train import train as gan_train

        gan_train(model_dir=tmp_path / "run", **quiet)
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirectoryError, match="is a file"):
        train(model_dir=tmp_path / "file", **tiny, **quiet)
    # Unwritable folders are refused before anything is built: below a file (any user), and
    # read-only (a user other than root: root writes to a read-only folder).
    with pytest.raises(RunDirectoryError, match=r"file/run cannot be written \(Not a directory"):
        train(model_dir=tmp_path / "file" / "run", **tiny, **quiet)
    if os.geteuid() != 0:
        (tmp_path / "read-only").mkdir(mode=0o555)
        with pytest.raises(RunDirectoryError, match=r"read-only cannot be written \(Permission"):
            train(model_dir=tmp_path / "read-only", **tiny, **quiet)
        assert not any((tmp_path / "read-only").iterdir())
    # A rerun with other evaluation settings re-scores the same run (the same held-out
    # examples in batches of 7: the same accuracy); a run.json written before a config field
    # existed (here dtype_policy) resumes with the field's default.
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    del record["config"]["dtype_policy"]
    (tmp_path / "run" / "run.json").write_text(json.dumps(record))
    again = train(model_dir=tmp_path / "run", **dict(tiny, eval_batch_size=7), **quiet)
    assert again["steps"] == 2 and again["accuracy"] == pytest.approx(first["accuracy"])
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"][
        "eval_batch_size"] == 7


def test_truncated_newest_checkpoint_falls_back_to_the_one_before(tmp_path):
    """The runner's fallback (the same for every workflow on TensorFlow's step checkpoints:
    the GAN's two optimizers' resume is the kill tests'), on the smallest run."""
    from sequence.train import train

    quiet = dict(verbose=0, log=lambda *_: None)
    tiny = dict(SEQUENCE_RUN, steps=3, eval_every=1)
    train(model_dir=tmp_path, stop_after_step=2, **tiny, **quiet)
    newest = sorted((tmp_path / "checkpoints").glob("ckpt-2.data-*"))[0]
    newest.write_bytes(newest.read_bytes()[:100])
    messages = []
    results = train(model_dir=tmp_path, **tiny, verbose=0, log=messages.append)
    assert any("ckpt-2 cannot be read" in m for m in messages), messages
    assert any("ckpt-1 at step 1" in m for m in messages), messages
    assert results["steps"] == 3
    for path in (tmp_path / "checkpoints").glob("ckpt-*.data-*"):
        path.write_bytes(b"")
    from kctx.training import CheckpointError

    with pytest.raises(CheckpointError, match="No checkpoint .* can be read"):
        train(model_dir=tmp_path, **tiny, **quiet)


def test_stop_after_step_then_resume(tmp_path):
    from sequence.train import train

    quiet = dict(verbose=0, log=lambda *_: None)
    tiny = dict(SEQUENCE_RUN, steps=4, eval_every=2)
    stopped = train(model_dir=tmp_path, stop_after_step=2, **tiny, **quiet)
    assert stopped["stopped_at"] == 2 and not (tmp_path / "results.json").exists()
    done = train(model_dir=tmp_path, **tiny, **quiet)
    assert done["steps"] == 4 and [row["step"] for row in done["history"]] == [2, 4]


def test_steps_need_not_be_a_multiple_of_the_checkpoint_interval(tmp_path):
    from sequence.train import train

    quiet = dict(verbose=0, log=lambda *_: None)
    tiny = dict(SEQUENCE_RUN, steps=5, eval_every=2)
    straight = train(model_dir=tmp_path / "straight", **tiny, **quiet)
    assert [row["step"] for row in straight["history"]] == [2, 4, 5]
    assert ["val_accuracy" in row for row in straight["history"]] == [True, True, False]
    assert sorted(p.name for p in (tmp_path / "straight" / "checkpoints").glob("*.index")) == [
        "ckpt-4.index", "ckpt-5.index"]
    stopped = train(model_dir=tmp_path / "resumed", stop_after_step=3, **tiny, **quiet)
    assert stopped["stopped_at"] == 3
    resumed = train(model_dir=tmp_path / "resumed", **tiny, **quiet)
    assert [row["step"] for row in resumed["history"]] == [2, 3, 4, 5]
    assert resumed["steps"] == 5
    assert resumed["accuracy"] == pytest.approx(straight["accuracy"], abs=0.02)
    assert resumed["loss"] == pytest.approx(straight["loss"], rel=1e-3)


def test_two_workers_train_like_one_process_and_resume_after_kill(tmp_path):
    """Two worker processes (MultiWorkerMirroredStrategy from TF_CONFIG, one replica each)
    train the sequence workflow's adding problem on per-worker input pipelines; both are
    killed with SIGKILL after their first checkpoint, and a restart resumes from the shared
    checkpoint. Their first checkpoint and their finished run equal one process training
    two replicas on the same global batches.

    What is the workers' own runs on any workflow's pipeline (``kctx.data``'s per-pipeline
    slices of the global batches, which tests/test_gan_data.py checks are exactly the
    one-pipeline stream, and the held-out shards of ``sharded_examples``): the sequence
    task's is the smallest, a few seconds a process where classification's took half a
    minute. The finished run is compared at 1e-2 of the update (rounding grows with each
    step); a resume from the wrong step or data would change the update by its own size.
    """
    from kctx.testing import mirrored_strategy
    from sequence.configs import get_config
    from sequence.evaluate import evaluate
    from sequence.train import train
    from sequence.workflow import build_model

    strategy = mirrored_strategy(2)
    if strategy is None:
        pytest.skip("needs 2 logical CPUs")
    flags = TINY["sequence"] + ["--verbose", "0", "--deterministic"]
    tiny = dict(length=32, steps=4, batch_size=8, eval_every=2, eval_examples=200,
                embed_dim=8, hidden_units=8, target_accuracy=0)

    def launch():
        # TMPDIR: the temporary folder of a worker killed below (its scratch checkpoints) is
        # the test's, not left in the system's.
        ports = free_ports(2)
        return [start(["-m", "sequence.train", *flags, "--model-dir", str(tmp_path / "workers")],
                      env=environment(TF_CONFIG=tf_config(ports, index), TMPDIR=str(tmp_path),
                                      **DETERMINISTIC))
                for index in range(2)]

    state = tmp_path / "workers" / "checkpoints" / "checkpoint"  # lists finished checkpoints
    outputs = kill_when(launch(), lambda: state.exists() and "ckpt-2" in state.read_text())
    assert "ckpt-2" in state.read_text(), outputs[0][-3000:]
    assert not (tmp_path / "workers" / "results.json").exists()
    for worker in launch():
        status, output = finish(worker)
        assert status == 0, output[-3000:]
        assert "CollectiveAllReduceStrategy with 2 replica(s) on 2 workers" in output
        assert "ckpt-2 at step 2" in output, output[-2000:]
    run = json.loads((tmp_path / "workers" / "run.json").read_text())
    assert run["replicas"] == 2 and run["strategy"] == "CollectiveAllReduceStrategy"

    reference = train(model_dir=tmp_path / "one", strategy=strategy, verbose=0,
                      log=lambda *_: None, **tiny)
    workers = json.loads((tmp_path / "workers" / "results.json").read_text())
    assert workers["steps"] == reference["steps"] == 4
    for key in ("accuracy", "loss"):
        assert workers[key] == pytest.approx(reference[key], rel=1e-3, abs=1 / 200), key
    import keras

    keras.utils.set_random_seed(0)  # the runner's initial weights (seed 0)
    initial = [np.asarray(w) for w in build_model(get_config("adding", **tiny)).weights]
    first_checkpoints = [[np.asarray(w) for w in evaluate(
        tmp_path / name, output=False, log=lambda *_: None,
        checkpoint=str(tmp_path / name / "checkpoints" / "ckpt-2"))["model"].weights]
        for name in ("one", "workers")]
    assert_same_update(initial, *first_checkpoints,
                       label="first checkpoint: 2 workers vs 1 process")
    assert_same_update(initial, [np.asarray(w) for w in reference["model"].weights],
                       load_weights(tmp_path / "workers" / "model.keras"), rtol=1e-2,
                       variable_rtol=1e-1, label="resumed 2 workers vs 1 process")


SUM_SCRIPT = """
import numpy as np
from kctx.distribute import get_strategy, is_chief, sum_over_workers, worker_index

strategy = get_strategy()
index, count = worker_index(strategy)
total = sum_over_workers(strategy, np.array([index + 1.0, 10.0 * index]))
print("RESULT", index, count, is_chief(strategy), total.tolist())
"""


def test_sum_over_workers_adds_what_each_worker_holds():
    """What a workflow's sharded evaluation relies on (segmentation's confusion matrix)."""
    ports = free_ports(2)
    workers = [start(["-c", SUM_SCRIPT], env=environment(TF_CONFIG=tf_config(ports, index)))
               for index in range(2)]
    lines = []
    for worker in workers:
        status, output = finish(worker, timeout=300)
        assert status == 0, output[-3000:]
        lines += [line for line in output.splitlines() if line.startswith("RESULT")]
    assert sorted(lines) == ["RESULT 0 2 True [3.0, 10.0]", "RESULT 1 2 False [3.0, 10.0]"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_bfloat16_trains_saves_and_rescores(backend, tmp_path):
    """``--dtype-policy mixed_bfloat16`` on each backend (tests/mixed_precision_check.py):
    on TensorFlow segmentation trains, records the policy, saves layers that compute in
    bfloat16 on float32 weights, re-scores alike and refuses a float32 rerun in its folder;
    on each backend a segmenter's first update under the policy follows the float32 one. The
    GAN's mixed_bfloat16 runs on the three backends are the killed and resumed ones above."""
    # PyTorch on one intra-op thread: its default, one per core, spins on the shared cores
    # (measured here: 4× the CPU time).
    threads = {"OMP_NUM_THREADS": "1"} if backend == "torch" else {}
    completed = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "mixed_precision_check.py"), str(tmp_path)],
        env=environment(KERAS_BACKEND=backend, PYTHONPATH=os.pathsep.join(
            [str(ROOT), str(ROOT / "tests")]), **threads),
        capture_output=True, text=True, timeout=1200)
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
    assert "MIXED_PRECISION_OK" in completed.stdout
