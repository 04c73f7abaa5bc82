"""tools/fuzz_checkpoints.py's harness, without atheris: its inputs stand for the files they
should, and its contract check flags what tests/test_hostile_checkpoints.py's does."""

import os
import sys
import zipfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import fuzz_checkpoints as fuzz  # noqa: E402
from kctx import checkpoints  # noqa: E402
from kctx.checkpoints.placeholders import _StorageRef  # noqa: E402


def test_every_seed_is_a_checkpoint_in_its_form(tmp_path):
    target = fuzz.make_target(checkpoints, str(tmp_path))
    seeds = fuzz.seeds(fuzz.hosts())
    forms = {seed[0] % 4 for seed in seeds} | {seed[0] & fuzz.STATE_DICT_BIT for seed in seeds}
    assert forms >= {fuzz.ZIP, fuzz.LEGACY, fuzz.RAW, fuzz.STATE_DICT_BIT}
    for seed in seeds:  # torch_state_dict may refuse a fixture without a state dict
        outcome = target(seed)
        if not seed[0] & fuzz.STATE_DICT_BIT or not outcome.startswith("CheckpointError: No "
                                                                        "state dict"):
            assert outcome.startswith("returned a "), (seed[:40], outcome)


def test_an_input_picks_its_form_and_reader(tmp_path):
    hosts = fuzz.hosts()
    path = str(tmp_path / "input.pth")
    assert len(hosts) >= 2
    for index, (members, pkl_name) in enumerate(hosts):
        # the second byte picks the host (modulo their count); the rest is its data.pkl
        data = bytes([fuzz.ZIP, index + len(hosts)]) + b"pickle"
        assert fuzz.write_input(data, path, hosts) == "read_torch"
        with zipfile.ZipFile(path) as archive:
            assert archive.namelist() == [name for name, _ in members]
            assert archive.read(pkl_name) == b"pickle"
    assert fuzz.write_input(bytes([fuzz.LEGACY | fuzz.STATE_DICT_BIT]) + b"abc", path,
                            hosts) == "torch_state_dict"
    assert open(path, "rb").read() == b"abc"
    assert fuzz.write_input(b"", path, hosts) == "read_torch"
    assert open(path, "rb").read() == b""


def raise_(error):
    def call():
        raise error
    return call


def test_the_check_flags_what_the_contract_forbids():
    from test_hostile_checkpoints import MESSAGE_LIMIT  # one contract: the battery's limit

    assert fuzz.MESSAGE_LIMIT == MESSAGE_LIMIT
    assert fuzz.check(lambda: {"w": np.zeros(2)}) == "returned a dict"
    assert fuzz.check(raise_(checkpoints.CheckpointError("bad file"))).startswith(
        "CheckpointError: bad file")
    wrapped = ValueError("corrupt")
    wrapped.__cause__ = MemoryError()
    broken = [
        raise_(ValueError("escape \x1b[31m")),
        raise_(ValueError("x" * (fuzz.MESSAGE_LIMIT + 1))),
        raise_(MemoryError()),
        raise_(wrapped),
        lambda: {"w": [object.__new__(_StorageRef)]},  # a placeholder reached the result
    ]
    for call in broken:
        with pytest.raises(fuzz.ContractBroken):
            fuzz.check(call)
    with pytest.raises(TypeError):  # not a ValueError: propagates, libFuzzer reports it
        fuzz.check(raise_(TypeError("no")))
