"""kctx.checkpoints: PyTorch .pth files read into NumPy without torch and without running code.

The fixtures in tests/fixtures/checkpoints/ were written with real torch / mmengine by
tools/torch_checkpoint_fixtures.py (expected.npz holds the arrays to compare against).
The malicious checkpoints are built here, by hand, with pickle and zipfile.
"""

import builtins
import collections
import os
import pickle
import sys
import traceback
import zipfile

import numpy as np
import pytest

from kctx.checkpoints import (
    DEFAULT_OPAQUE_OBJECTS,
    SAFE_GLOBALS,
    OpaqueObject,
    UnsafeCheckpointError,
    read_torch,
    torch_state_dict,
)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "checkpoints")
MAGIC_NUMBER = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER
HISTORY_BUFFER = "mmengine.logging.history_buffer.HistoryBuffer"


def fixture(name):
    return os.path.join(FIXTURES, name)


@pytest.fixture(scope="module")
def expected():
    with np.load(fixture("expected.npz"), allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def lookup(obj, path):
    """obj['a'][0]['b'] for path 'a/0/b' (list and tuple indices as digits)."""
    for part in path.split("/"):
        obj = obj[int(part)] if isinstance(obj, (list, tuple)) else obj[part]
    return obj


def assert_exact(actual, wanted, where):
    assert isinstance(actual, np.ndarray), f"{where}: {type(actual).__name__}"
    assert actual.dtype == wanted.dtype, f"{where}: {actual.dtype} != {wanted.dtype}"
    assert actual.shape == wanted.shape, f"{where}: {actual.shape} != {wanted.shape}"
    np.testing.assert_array_equal(actual, wanted, err_msg=where)


# --------------------------------------------------------------------------- hand-made files

def op_global(module, name):
    return b"c" + f"{module}\n{name}\n".encode()


def op_str(text):
    data = text.encode()
    return b"X" + len(data).to_bytes(4, "little") + data


def op_int(value):
    return b"J" + value.to_bytes(4, "little", signed=True)


def op_tuple(*items):
    return b"(" + b"".join(items) + b"t"


def op_call(func, *args):
    return func + op_tuple(*args) + b"R"


def program(*body):
    """A protocol-2 pickle of the value the opcodes in ``body`` leave on the stack."""
    return b"\x80\x02" + b"".join(body) + b"."


def op_storage(storage_type, key, numel, module="torch", view=None):
    items = [op_str("storage"), op_global(module, storage_type), op_str(key), op_str("cpu"),
             op_int(numel)]
    if view is not None:
        items.append(view)
    return op_tuple(*items) + b"Q"  # BINPERSID


def op_tensor(storage, offset, size, stride, func="_rebuild_tensor_v2"):
    return op_call(op_global("torch._utils", func), storage, op_int(offset),
                   op_tuple(*map(op_int, size)), op_tuple(*map(op_int, stride)), b"\x89",
                   op_call(op_global("collections", "OrderedDict")))


def write_zip_checkpoint(path, data_pkl, storages=None, folder="archive", byteorder=b"little"):
    """A torch-style zip checkpoint: <folder>/data.pkl, data/<key>, byteorder, version."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{folder}/data.pkl", data_pkl)
        if byteorder is not None:
            archive.writestr(f"{folder}/byteorder", byteorder)
        for key, data in (storages or {}).items():
            archive.writestr(f"{folder}/data/{key}", data)
        archive.writestr(f"{folder}/version", b"3\n")
    return str(path)


def legacy_bytes(main_pickle, storages=()):
    """A torch legacy-format file: magic, protocol, sys_info, object, keys, storages."""
    sys_info = {"protocol_version": 1001, "little_endian": True,
                "type_sizes": {"short": 2, "int": 4, "long": 4}}
    parts = [pickle.dumps(MAGIC_NUMBER, protocol=2), pickle.dumps(1001, protocol=2),
             pickle.dumps(sys_info, protocol=2), main_pickle,
             pickle.dumps([key for key, _, _ in storages], protocol=2)]
    for _, numel, data in storages:
        parts += [numel.to_bytes(8, "little"), data]
    return b"".join(parts)


def write_legacy_checkpoint(path, main_pickle, storages=()):
    with open(path, "wb") as file:
        file.write(legacy_bytes(main_pickle, storages))
    return str(path)


def write_checkpoint(kind, path, main_pickle):
    if kind == "zip":
        return write_zip_checkpoint(path, main_pickle)
    return write_legacy_checkpoint(path, main_pickle)


class Exploit:
    """Pickles as os.system(command): what a malicious checkpoint carries."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def exploit_pickle(marker, protocol=2):
    checkpoint = {"state_dict": collections.OrderedDict(weight=Exploit(f"touch {marker}"))}
    return pickle.dumps(checkpoint, protocol=protocol)


def raised_in_find_class(excinfo):
    return any(frame.name == "find_class" for frame in traceback.extract_tb(excinfo.tb))


# --------------------------------------------------------------------------- tensors

@pytest.mark.parametrize("name, prefix", [("tensors.pth", "tensors"),
                                          ("tensors_legacy.pth", "tensors"),
                                          ("tensors_big_endian.pth", "tensors"),
                                          ("old_zip.pth", "old_zip")])
def test_fixture_tensors_equal_expected(name, prefix, expected):
    checkpoint = read_torch(fixture(name))
    if name == "tensors.pth":
        keys = [k for k in expected if k.startswith("tensors/")]
    elif name == "tensors_legacy.pth":  # torch cannot read uint16 back from the legacy format
        keys = [k for k in expected if k.startswith("tensors/") and k != "tensors/uint16"]
    elif name == "tensors_big_endian.pth":
        keys = [f"tensors/{k}" for k in checkpoint]
    else:
        keys = [k for k in expected if k.startswith(f"{prefix}/")]
    assert len(keys) >= 2
    for key in keys:
        actual = lookup(checkpoint, key.split("/", 1)[1])
        assert_exact(actual, expected[key], f"{name}: {key}")
        assert actual.flags.c_contiguous and actual.dtype.isnative, key


def test_tensor_containers_and_shapes_preserved():
    checkpoint = read_torch(fixture("tensors.pth"))
    assert type(checkpoint) is dict
    nested = checkpoint["nested"]
    assert type(nested) is collections.OrderedDict and list(nested) == ["list", "tuple"]
    assert type(nested["list"]) is list and type(nested["list"][1]) is tuple
    assert nested["list"][1][1:] == (7, "x")
    assert type(nested["tuple"]) is tuple and nested["tuple"][0].dtype == np.float16
    assert checkpoint["scalar"].shape == () and checkpoint["scalar"] == np.float32(3.5)
    assert checkpoint["empty"].shape == (0, 3) and checkpoint["empty"].dtype == np.float32
    assert type(checkpoint["param"]) is np.ndarray and checkpoint["param"].shape == (2, 3)
    assert checkpoint["bf16"].dtype == np.float32  # NumPy has no bfloat16
    assert checkpoint["uint16"].tolist() == [1, 65535, 300]
    assert checkpoint["complex_conj"].tolist() == [1 - 2j, 3 + 4j]  # the conjugate view


@pytest.mark.parametrize("name", ["tensors.pth", "tensors_legacy.pth"])
def test_strides_offsets_and_shared_storage(name):
    checkpoint = read_torch(fixture(name))
    line = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(checkpoint["overlap"], [line[1:4], line[3:6], line[5:8],
                                                          line[7:10]])
    np.testing.assert_array_equal(checkpoint["expand"], np.tile([0.0, 1.0, 2.0], (4, 1)))
    assert checkpoint["transposed"].shape == (5, 3)
    assert checkpoint["channels_last"].shape == (1, 2, 3, 3)
    # Views of one storage at offsets 1 and 6 come back as separate contiguous copies.
    a, b = checkpoint["shared_a"], checkpoint["shared_b"]
    assert a.shape == (4,) and b.shape == (2, 3) and not np.shares_memory(a, b)
    for array in (a, b, checkpoint["transposed"], checkpoint["overlap"]):
        assert array.flags.c_contiguous and array.flags.owndata and array.flags.writeable


def test_big_endian_checkpoint_equals_little_endian():
    little = read_torch(fixture("tensors.pth"))
    big = read_torch(fixture("tensors_big_endian.pth"))
    with zipfile.ZipFile(fixture("tensors_big_endian.pth")) as archive:
        assert archive.read("archive/byteorder") == b"big"
    for key, value in big.items():
        assert value.dtype == little[key].dtype and value.dtype.isnative, key
        np.testing.assert_array_equal(value, little[key], err_msg=key)


def test_zip_without_byteorder_and_other_folder():
    with zipfile.ZipFile(fixture("old_zip.pth")) as archive:
        names = archive.namelist()
    assert "old_checkpoint/data.pkl" in names and not any("byteorder" in n for n in names)
    assert set(read_torch(fixture("old_zip.pth"))) == {"weight", "step"}


def test_handmade_rebuild_functions_and_legacy_views(tmp_path):
    """_rebuild_tensor (old), _rebuild_parameter_with_state, _rebuild_from_type_v2, v3 with
    an UntypedStorage and dtype global, a legacy storage view, a bare storage."""
    floats = np.arange(6, dtype="<f4")
    storage = op_storage("FloatStorage", "0", 6)
    untyped = op_storage("UntypedStorage", "1", 8, module="torch.storage")
    v2_args = (storage, op_int(2), op_tuple(op_int(2)), op_tuple(op_int(3)), b"\x89",
               op_call(op_global("collections", "OrderedDict")))
    body = op_tuple(
        op_call(op_global("torch._utils", "_rebuild_tensor"), storage, op_int(1),
                op_tuple(op_int(2), op_int(2)), op_tuple(op_int(1), op_int(2))),
        op_call(op_global("torch._utils", "_rebuild_parameter_with_state"),
                op_tensor(storage, 4, (2,), (1,)), b"\x88",
                op_call(op_global("collections", "OrderedDict")), b"}"),
        op_call(op_global("torch._tensor", "_rebuild_from_type_v2"),
                op_global("torch._utils", "_rebuild_tensor_v2"), op_global("torch", "Tensor"),
                op_tuple(*v2_args), b"}"),
        op_call(op_global("torch._utils", "_rebuild_tensor_v3"), untyped, op_int(0),
                op_tuple(op_int(2)), op_tuple(op_int(1)), b"\x89",
                op_call(op_global("collections", "OrderedDict")), op_global("torch", "int32")),
        storage,
        op_global("torch", "float16"),
    )
    ints = np.array([7, -3], dtype="<i4").tobytes()
    path = write_zip_checkpoint(tmp_path / "handmade.pth", program(body),
                                {"0": floats.tobytes(), "1": ints})
    old, param, typed, v3, bare, dtype = read_torch(path)
    np.testing.assert_array_equal(old, [[1, 3], [2, 4]])
    np.testing.assert_array_equal(param, [4, 5])
    np.testing.assert_array_equal(typed, [2, 5])  # offset 2, stride 3
    assert v3.dtype == np.int32 and v3.tolist() == [7, -3]
    np.testing.assert_array_equal(bare, floats)
    assert dtype == "torch.float16"

    # Legacy format: a storage view (offset 2, 3 elements) of storage "0".
    view = op_storage("DoubleStorage", "0", 6, view=op_tuple(op_str("v"), op_int(2), op_int(3)))
    main = program(op_tensor(view, 1, (2,), (1,)))
    doubles = np.arange(6, dtype="<f8").tobytes()
    path = write_legacy_checkpoint(tmp_path / "view.pth", main, [("0", 6, doubles)])
    np.testing.assert_array_equal(read_torch(path), [3.0, 4.0])


# --------------------------------------------------------------------------- mmengine metadata

def test_mmseg_style_checkpoint_metadata(expected):
    checkpoint = read_torch(fixture("mmseg_style.pth"))
    assert list(checkpoint) == ["meta", "state_dict", "message_hub", "optimizer",
                                "param_schedulers"]
    meta = checkpoint["meta"]
    assert meta["seed"] == 42 and meta["iter"] == 2 and meta["time"] == "20240101_000000"
    assert meta["dataset_meta"]["classes"] == ("background", "cat", "dog")
    assert meta["dataset_meta"]["palette"][1] == [128, 0, 0]
    assert type(meta["best_score"]) is np.float64 and meta["best_score"] == 0.625
    assert type(meta["num_images"]) is np.int64 and meta["num_images"] == 12
    assert type(meta["converged"]) is np.bool_ and meta["converged"]
    assert_exact(meta["class_weight"], np.array([1.0, 2.0, 0.5], np.float32), "class_weight")
    assert_exact(meta["confusion"], np.arange(9, dtype=np.int64).reshape(3, 3), "confusion")
    assert_exact(meta["names"], np.array(["road", "sky"]), "names")
    assert_exact(meta["big_endian"], np.array([1, 2, 70000], np.int32), "big_endian")
    assert_exact(meta["fortran"], np.arange(6.0).reshape(2, 3), "fortran")
    assert meta["fortran"].flags.f_contiguous  # as numpy's own unpickling gives it
    assert meta["objects"].dtype == object and meta["objects"].tolist() == [1, "x", None]

    hub = checkpoint["message_hub"]
    assert set(hub) == {"log_scalars", "runtime_info", "resumed_keys"}
    assert list(hub["log_scalars"]) == ["train/loss", "train/lr"]
    for key, buffer in hub["log_scalars"].items():
        assert isinstance(buffer, OpaqueObject) and buffer.name == HISTORY_BUFFER
        assert buffer.args == () and buffer.state["max_length"] == 1000000
        for field in ("log_history", "count_history"):
            assert_exact(buffer.state[f"_{field}"],
                         expected[f"mmseg/message_hub/{key}/{field}"], f"{key} {field}")
        methods = buffer.state["statistics_methods"]  # getattr(HistoryBuffer, "min"), ...
        assert sorted(methods) == ["current", "max", "mean", "min"]
        assert methods["min"].name == f"{HISTORY_BUFFER}.min"
        assert issubclass(methods["min"], OpaqueObject)
    info = hub["runtime_info"]
    assert info["iter"] == 2 and info["last_ckpt"] == "work_dirs/fcn_tiny/iter_2.pth"
    assert type(info["best_mIoU"]) is np.float64 and info["best_mIoU"] == 0.625

    state_dict = checkpoint["state_dict"]
    assert type(state_dict) is collections.OrderedDict
    assert state_dict._metadata["backbone.stem.bn"]["version"] == 2  # torch's _metadata
    optimizer_keys = [k for k in expected if k.startswith("mmseg/optimizer/")]
    assert len(optimizer_keys) == 5  # one SGD momentum buffer per parameter
    for key in optimizer_keys:
        assert_exact(_optimizer_lookup(checkpoint, key), expected[key], key)
    assert checkpoint["optimizer"]["param_groups"][0]["momentum"] == 0.9
    assert checkpoint["param_schedulers"][0]["power"] == 0.9


def _optimizer_lookup(checkpoint, key):
    # mmseg/optimizer/state/<param index>/momentum_buffer: the param index is an int key.
    _, _, _, index, name = key.split("/")
    return checkpoint["optimizer"]["state"][int(index)][name]


def test_torch_state_dict_of_mmseg_checkpoints(expected):
    weights = torch_state_dict(fixture("mmseg_style.pth"))
    wanted = {k.split("/", 2)[2]: v for k, v in expected.items()
              if k.startswith("mmseg/state_dict/")}
    assert type(weights) is dict and list(weights) == list(wanted)
    for key, value in wanted.items():
        assert_exact(weights[key], value, key)
    assert weights["backbone.stem.bn.num_batches_tracked"].shape == ()
    # The legacy mmcv-style file holds the same model under DataParallel's "module." prefix.
    legacy = read_torch(fixture("mmcv_legacy.pth"))
    assert all(k.startswith("module.") for k in legacy["state_dict"])
    assert type(legacy["meta"]["best_score"]) is np.float32
    weights = torch_state_dict(fixture("mmcv_legacy.pth"))
    assert list(weights) == list(wanted)
    for key, value in wanted.items():
        assert_exact(weights[key], value, key)


def test_torch_state_dict_lookup_rules():
    w = np.zeros(2, np.float32)
    assert torch_state_dict({"a": w}) == {"a": w}
    assert list(torch_state_dict({"model": {"state_dict": {"x": w}}, "epoch": 1})) == ["x"]
    assert list(torch_state_dict({"model": {"module.x": w, "y": w}})) == ["module.x", "y"]
    assert list(torch_state_dict({"model": {"module.x": w, "module.y": w}})) == ["x", "y"]
    with pytest.raises(ValueError, match=r"Top-level keys: \['meta', 'weights_ema'\]"):
        torch_state_dict({"meta": {}, "weights_ema": {"a": w}})
    # A candidate holding a non-array is rejected, not filtered.
    with pytest.raises(ValueError, match=r"\['state_dict'\] is a mapping whose 'step'"):
        torch_state_dict({"state_dict": {"a": w, "step": 3}})
    with pytest.raises(ValueError, match="holds a list, not a mapping"):
        torch_state_dict([w])


def test_reading_imports_nothing(monkeypatch):
    """find_class never imports what the pickle names (torch, mmengine, os...)."""
    imported = []
    real_import = builtins.__import__

    def recording_import(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", recording_import)
    for name in ("mmseg_style.pth", "mmcv_legacy.pth", "tensors.pth", "tensors_legacy.pth"):
        read_torch(fixture(name))
    assert not [n for n in imported if n.split(".")[0] in ("torch", "mmengine", "mmcv")]
    assert "torch" not in sys.modules and "mmengine" not in sys.modules


# --------------------------------------------------------------------------- malicious files

def test_exploit_payload_is_live(tmp_path):
    """The test payload really runs its command when unpickled the usual way."""
    marker = tmp_path / "pwned"
    pickle.loads(exploit_pickle(marker))
    assert marker.exists()


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("kind", ["zip", "legacy"])
def test_os_system_checkpoint_is_refused(kind, protocol, tmp_path):
    marker = tmp_path / "pwned"
    path = write_checkpoint(kind, tmp_path / "evil.pth", exploit_pickle(marker, protocol))
    with pytest.raises(UnsafeCheckpointError) as excinfo:
        read_torch(path)
    message = str(excinfo.value)
    assert "posix.system" in message or "os.system" in message
    assert f"Received: path={path!r}" in message
    assert excinfo.value.global_name in ("posix.system", "os.system", "nt.system")
    assert isinstance(excinfo.value, pickle.UnpicklingError)
    assert isinstance(excinfo.value, ValueError)
    assert raised_in_find_class(excinfo)
    assert not marker.exists()
    with pytest.raises(UnsafeCheckpointError):
        torch_state_dict(path)
    assert not marker.exists()


def test_legacy_exploit_before_the_main_pickle_is_refused(tmp_path):
    """A payload in the legacy header pickles (magic number / sys_info) is refused too."""
    marker = tmp_path / "pwned"
    evil = pickle.dumps(Exploit(f"touch {marker}"), protocol=2)
    path = tmp_path / "evil.pth"
    path.write_bytes(evil + legacy_bytes(pickle.dumps({}, protocol=2)))
    with pytest.raises(UnsafeCheckpointError, match="system"):
        read_torch(path)
    sys_info_evil = (pickle.dumps(MAGIC_NUMBER, protocol=2) + pickle.dumps(1001, protocol=2)
                     + evil + pickle.dumps({}, protocol=2) + pickle.dumps([], protocol=2))
    path.write_bytes(sys_info_evil)
    with pytest.raises(UnsafeCheckpointError, match="system"):
        read_torch(path)
    assert not marker.exists()


DANGEROUS_GLOBALS = [
    ("builtins", "eval", "builtins.eval"),
    ("builtins", "exec", "builtins.exec"),
    ("__builtin__", "eval", "builtins.eval"),  # py2 spelling
    ("builtins", "__import__", "builtins.__import__"),
    ("builtins", "open", "builtins.open"),
    ("subprocess", "Popen", "subprocess.Popen"),
    ("subprocess", "check_output", "subprocess.check_output"),
    ("os", "system", "os.system"),
    ("posix", "system", "posix.system"),
    ("importlib", "import_module", "importlib.import_module"),
    ("operator", "attrgetter", "operator.attrgetter"),
    ("copyreg", "_reconstructor", "copyreg._reconstructor"),
    ("pickle", "loads", "pickle.loads"),
    ("torch", "load", "torch.load"),
    ("torch.serialization", "load", "torch.serialization.load"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy",
     "torch._utils._rebuild_device_tensor_from_numpy"),
    ("numpy", "load", "numpy.load"),
    ("numpy.core.multiarray", "frombuffer", "numpy.core.multiarray.frombuffer"),
    ("mmengine.logging.message_hub", "MessageHub", "mmengine.logging.message_hub.MessageHub"),
]


@pytest.mark.parametrize("kind", ["zip", "legacy"])
@pytest.mark.parametrize("module, name, reported", DANGEROUS_GLOBALS,
                         ids=[r for _, _, r in DANGEROUS_GLOBALS])
def test_dangerous_globals_are_refused(module, name, reported, kind, tmp_path):
    marker = tmp_path / "pwned"
    main = program(op_call(op_global(module, name), op_str(f"touch {marker}")))
    path = write_checkpoint(kind, tmp_path / "evil.pth", main)
    with pytest.raises(UnsafeCheckpointError, match=f"'{reported}'") as excinfo:
        read_torch(path)
    assert excinfo.value.global_name == reported and raised_in_find_class(excinfo)
    assert not marker.exists()


MISUSES = [
    # getattr only names methods of opaque (allow-listed) classes.
    (op_call(op_global("builtins", "getattr"), op_global("collections", "OrderedDict"),
             op_str("fromkeys")), "builtins.getattr"),
    (op_call(op_global("builtins", "getattr"), op_str("x"), op_str("join")), "getattr"),
    # numpy's _reconstruct only for numpy.ndarray.
    (op_call(op_global("numpy.core.multiarray", "_reconstruct"),
             op_global("collections", "OrderedDict"), op_tuple(op_int(0)), op_str("b")),
     "_reconstruct"),
    # _codecs.encode only to latin-1 / utf-8 / ascii.
    (op_call(op_global("_codecs", "encode"), op_str("x"), op_str("rot13")), "_codecs.encode"),
    # _rebuild_from_type_v2 only with a torch rebuild function.
    (op_call(op_global("torch._tensor", "_rebuild_from_type_v2"), op_global("builtins", "set"),
             op_global("torch", "Tensor"), op_tuple(), b"}"), "_rebuild_from_type_v2"),
    # BUILD (setting state / attributes) on kctx's own functions.
    (op_global("_codecs", "encode") + b"}" + b"b", "set the state"),
    (op_global("_codecs", "encode") + op_tuple(b"N", b"}" + op_str("_func") + b"N" + b"s")
     + b"b", "set the state"),
]


@pytest.mark.parametrize("body, message", MISUSES, ids=[
    "getattr-OrderedDict", "getattr-str", "reconstruct-OrderedDict", "encode-rot13",
    "rebuild_from_type-set", "build-state", "build-slotstate"])
def test_allowed_globals_cannot_be_misused(body, message, tmp_path):
    path = write_zip_checkpoint(tmp_path / "evil.pth", program(body))
    with pytest.raises(UnsafeCheckpointError, match=message) as excinfo:
        read_torch(path)
    assert f"path={path!r}" in str(excinfo.value)


def test_tensor_reading_past_its_storage_is_refused(tmp_path):
    main = program(op_tensor(op_storage("FloatStorage", "0", 2), 0, (1000,), (1,)))
    path = write_zip_checkpoint(tmp_path / "big.pth", main, {"0": bytes(8)})
    with pytest.raises(ValueError, match="reads past its storage"):
        read_torch(path)
    main = program(op_tensor(op_storage("FloatStorage", "0", 4), 0, (4,), (1,)))
    path = write_zip_checkpoint(tmp_path / "short.pth", main, {"0": bytes(8)})
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_torch(path)


def test_allowed_objects_become_inert_placeholders(tmp_path):
    module = "kctx_test_not_a_module.sub"
    # NEWOBJ with args, then BUILD with a state dict holding a tensor.
    body = (op_global(module, "Thing") + op_tuple(op_int(5)) + b"\x81" + b"}"
            + op_str("w") + op_tensor(op_storage("FloatStorage", "0", 2), 0, (2,), (1,))
            + b"s" + b"b")
    path = write_zip_checkpoint(tmp_path / "thing.pth", program(body),
                                {"0": np.array([1, 2], "<f4").tobytes()})
    with pytest.raises(UnsafeCheckpointError, match=f"'{module}.Thing'"):
        read_torch(path)
    thing = read_torch(path, allowed_objects=[f"{module}.Thing"])
    assert isinstance(thing, OpaqueObject) and thing.name == f"{module}.Thing"
    assert thing.args == (5,) and list(thing.state) == ["w"]
    np.testing.assert_array_equal(thing.state["w"], [1.0, 2.0])
    assert "kctx_test_not_a_module" not in sys.modules
    # Even a dangerous name is only ever a placeholder: nothing is imported or called.
    marker = tmp_path / "pwned"
    path = write_zip_checkpoint(tmp_path / "evil.pth", exploit_pickle(marker))
    system = f"{os.system.__module__}.system"  # posix.system (nt.system on Windows)
    weight = read_torch(path, allowed_objects=[system])["state_dict"]["weight"]
    assert isinstance(weight, OpaqueObject) and weight.args == (f"touch {marker}",)
    assert not marker.exists()


def test_methods_of_opaque_classes_stay_opaque(tmp_path):
    """HistoryBuffer.min as protocol 2 writes it (getattr) and as protocol 4 does."""
    def short_str(text):
        return b"\x8c" + bytes([len(text)]) + text.encode()

    module, cls = HISTORY_BUFFER.rsplit(".", 1)
    by_getattr = program(op_call(op_global("builtins", "getattr"), op_global(module, cls),
                                 op_str("min")))
    by_name = b"\x80\x04" + short_str(module) + short_str(f"{cls}.min") + b"\x93."
    for i, data in enumerate((by_getattr, by_name)):
        method = read_torch(write_zip_checkpoint(tmp_path / f"m{i}.pth", data))
        assert issubclass(method, OpaqueObject) and method.name == f"{HISTORY_BUFFER}.min"
    other = b"\x80\x04" + short_str("collections") + short_str("OrderedDict.fromkeys") + b"\x93."
    with pytest.raises(UnsafeCheckpointError, match="collections.OrderedDict.fromkeys"):
        read_torch(write_zip_checkpoint(tmp_path / "other.pth", other))


def test_allow_list_contents():
    assert HISTORY_BUFFER in DEFAULT_OPAQUE_OBJECTS
    for name in ("torch._utils._rebuild_tensor_v2", "torch.FloatStorage",
                 "torch.storage.UntypedStorage", "torch.bfloat16", "collections.OrderedDict",
                 "numpy._core.multiarray._reconstruct", "numpy.core.multiarray.scalar",
                 "numpy.dtype", "_codecs.encode", "builtins.getattr"):
        assert name in SAFE_GLOBALS, name
    for name in ("builtins.eval", "builtins.exec", "os.system", "posix.system", "torch.load",
                 "builtins.__import__", "subprocess.Popen"):
        assert name not in SAFE_GLOBALS, name


@pytest.mark.parametrize("allowed", ["pkg.Thing", ["not a name"], [3]])
def test_allowed_objects_is_checked(allowed):
    with pytest.raises(ValueError, match="allowed_objects"):
        read_torch(fixture("tensors.pth"), allowed_objects=allowed)


# --------------------------------------------------------------------------- bad files

def test_missing_file_and_directory(tmp_path):
    missing = str(tmp_path / "nope.pth")
    with pytest.raises(FileNotFoundError, match=f"Received: path={missing!r}"):
        read_torch(missing)
    with pytest.raises(IsADirectoryError, match="Received: path="):
        read_torch(tmp_path)
    with pytest.raises(TypeError, match="Received: path=3"):
        read_torch(3)


def _truncated(name, keep):
    with open(fixture(name), "rb") as file:
        data = file.read()
    return data[:keep(len(data))]


@pytest.mark.parametrize("content, message", [
    (b"", "the file is empty"),
    (bytes(range(256)) * 8, "Not a PyTorch checkpoint"),
    (b"hello, this is a text file\n", "Not a PyTorch checkpoint"),
    (pickle.dumps({"a": 1}, protocol=2), "no torch magic number"),
    (b"\x00" * 257 + b"ustar" + b"\x00" * 250, "tar checkpoint"),
    (lambda: _truncated("tensors.pth", lambda n: n // 2), "Corrupt or truncated"),
    (lambda: _truncated("tensors.pth", lambda n: n - 30), "Corrupt or truncated"),
    (lambda: _truncated("tensors_legacy.pth", lambda n: n - 10), "Truncated checkpoint"),
    (lambda: _truncated("tensors_legacy.pth", lambda n: n // 3), "Corrupt or truncated"),
])
def test_garbage_and_truncated_files_give_clear_errors(content, message, tmp_path):
    path = tmp_path / "bad.pth"
    path.write_bytes(content() if callable(content) else content)
    with pytest.raises(ValueError, match=message) as excinfo:
        read_torch(path)
    assert f"Received: path={str(path)!r}" in str(excinfo.value)


def test_zip_archives_that_are_not_checkpoints(tmp_path):
    npz = tmp_path / "arrays.npz"
    np.savez(npz, a=np.zeros(2))
    with pytest.raises(ValueError, match=r"Not a PyTorch checkpoint.*\.npz"):
        read_torch(npz)
    script = tmp_path / "script.pt"
    with zipfile.ZipFile(script, "w") as archive:
        archive.writestr("model/data.pkl", program(b"N"))
        archive.writestr("model/constants.pkl", program(b")"))
    with pytest.raises(ValueError, match="TorchScript"):
        read_torch(script)
    main = program(op_tensor(op_storage("FloatStorage", "7", 1), 0, (1,), (1,)))
    path = write_zip_checkpoint(tmp_path / "missing.pth", main)
    with pytest.raises(ValueError, match="no record 'archive/data/7'"):
        read_torch(path)
    path = write_zip_checkpoint(tmp_path / "order.pth", program(b"N"), byteorder=b"middle")
    with pytest.raises(ValueError, match="Unknown byteorder"):
        read_torch(path)


def test_dtypes_numpy_lacks_are_refused_clearly(tmp_path):
    main = program(op_call(op_global("torch._utils", "_rebuild_tensor_v3"),
                           op_storage("UntypedStorage", "0", 2, module="torch.storage"),
                           op_int(0), op_tuple(op_int(2)), op_tuple(op_int(1)), b"\x89",
                           op_call(op_global("collections", "OrderedDict")),
                           op_global("torch", "float8_e4m3fn")))
    path = write_zip_checkpoint(tmp_path / "f8.pth", main, {"0": bytes(2)})
    with pytest.raises(ValueError, match="torch.float8_e4m3fn tensors are not supported"):
        read_torch(path)
    main = program(op_tensor(op_storage("QInt8Storage", "0", 2), 0, (2,), (1,)))
    path = write_zip_checkpoint(tmp_path / "q.pth", main, {"0": bytes(2)})
    with pytest.raises(ValueError, match="torch.qint8 tensors are not supported"):
        read_torch(path)


def test_bytes_and_sets_in_metadata(tmp_path):
    """Protocol-2 bytes (_codecs.encode, bytes()), sets, complex and bytearray come back."""
    meta = {"raw": b"\x00\xffabc", "none": b"", "tags": {"a", "b"}, "frozen": frozenset([1]),
            "z": complex(1, -2), "buf": bytearray(b"xy"), "s": slice(1, 5, 2)}
    for protocol in (2, 4):
        path = write_zip_checkpoint(tmp_path / f"meta{protocol}.pth",
                                    pickle.dumps(meta, protocol=protocol))
        assert read_torch(path) == meta


@pytest.mark.parametrize("protocol, numpy_module", [
    (2, "numpy._core"), (4, "numpy._core"), (2, "numpy.core")])  # NumPy 2 / NumPy 1 names
def test_numpy_values_match_numpy_unpickling(protocol, numpy_module, tmp_path):
    values = {
        "f2": np.arange(3, dtype=np.float16), "be": np.array([1.5, -2.0], ">f8"),
        "c": np.array([1 + 2j], ">c16"), "b": np.array([True, False]),
        "S": np.array([b"ab", b"c"]), "U": np.array(["x", "yz"], ">U2"),
        "zero_d": np.array(5, np.int16), "empty": np.zeros((0, 4), np.float32),
        "F": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "obj": np.array([{"a": 1}, [1, 2]], dtype=object),
        "u64": np.array([2**64 - 1], np.uint64), "dtype": np.dtype(">i8"),
        "scalars": [np.float32(1.5), np.int8(-3), np.uint64(2**63), np.bool_(False),
                    np.complex64(1j), np.float16(0.5)],
    }
    data = pickle.dumps(values, protocol=protocol)
    if numpy_module == "numpy.core":  # what NumPy 1.x writes (GLOBAL text: no lengths)
        data = data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
        assert b"numpy._core" not in data
    path = write_zip_checkpoint(tmp_path / "np.pth", data)
    got, wanted = read_torch(path), pickle.loads(pickle.dumps(values, protocol=protocol))
    for key, value in wanted.items():
        if isinstance(value, np.ndarray):
            assert type(got[key]) is np.ndarray and got[key].dtype == value.dtype, key
            assert got[key].shape == value.shape and got[key].tolist() == value.tolist(), key
            assert got[key].flags.f_contiguous == value.flags.f_contiguous, key
        elif key == "scalars":
            assert [type(v) for v in got[key]] == [type(v) for v in value]
            assert got[key] == value
        else:
            assert got[key] == value, key
    # Structured arrays and datetimes are kept inert rather than rebuilt.
    data = pickle.dumps({"rec": np.zeros(2, [("a", "<f4")]), "t": np.datetime64("2024-01-01")},
                        protocol=protocol)
    path = write_zip_checkpoint(tmp_path / "exotic.pth", data)
    exotic = read_torch(path)
    assert isinstance(exotic["rec"], OpaqueObject) and exotic["rec"].name == "numpy.ndarray"
    assert isinstance(exotic["t"], OpaqueObject) and exotic["t"].name.endswith(".scalar")
