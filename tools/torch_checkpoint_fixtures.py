"""Write the PyTorch checkpoint fixtures of tests/test_checkpoints.py (kctx.checkpoints).

Run from the repository root with a Python that has torch, mmengine and mmcv (mmcv-lite
is enough); kctx itself is not needed:

    /work/tvenv/bin/python tools/torch_checkpoint_fixtures.py [--out tests/fixtures/checkpoints]

It writes, with real ``torch.save`` (and mmengine's ``save_checkpoint``), small files
(about 40 KB in all) into ``tests/fixtures/checkpoints/``:

* ``tensors.pth``: zip format. float32 / float16 / bfloat16 / float64 / int64 / int32 /
  int16 / int8 / uint8 / bool / complex64 (a conjugate view) / uint16 (``_rebuild_tensor_v3``
  + ``UntypedStorage``) tensors; a 0-d and an empty tensor; non-contiguous ones (a
  transpose, an overlapping ``as_strided`` view, a stride-0 ``expand``, channels-last);
  two views at different offsets of one storage; an ``nn.Parameter``; an OrderedDict
  holding a list and a tuple of tensors.
* ``tensors_legacy.pth``: the same object (without uint16, which torch cannot read back in
  this format) with ``_use_new_zipfile_serialization=False``. Torch names legacy storages
  by memory address and orders them by that name; the script renames them ``"0"``,
  ``"1"``... in order of first use, so the file is byte-for-byte reproducible.
* ``tensors_big_endian.pth``: a zip checkpoint as a big-endian machine writes it
  (``byteorder`` = ``big``, every storage byte-swapped), made from a little-endian one.
* ``old_zip.pth``: a zip checkpoint without a ``byteorder`` record (torch < 2.1) whose top
  folder is ``old_checkpoint/`` instead of ``archive/`` (older torch used the file name).
* ``mmseg_style.pth``: what mmengine's ``Runner.save_checkpoint`` (the ``CheckpointHook``)
  writes for a tiny segmentor (mmcv ``ConvModule`` backbone + ``decode_head.conv_seg``)
  after two SGD steps: ``meta`` (runner fields, ``dataset_meta``, NumPy scalars and arrays:
  float64 / int64 / bool scalars, float32 / int64 / unicode / big-endian / Fortran-order /
  object arrays), ``state_dict`` (``weights_to_cpu``), ``message_hub`` (a real MessageHub's
  ``state_dict()``: ``HistoryBuffer`` scalars, runtime info with a NumPy scalar),
  ``optimizer`` (OptimWrapper, momentum buffers) and ``param_schedulers`` (PolyLR), saved
  with mmengine's ``save_checkpoint``.
* ``mmcv_legacy.pth``: an older mmcv-style checkpoint in the legacy format: ``meta`` and a
  ``DataParallel`` state dict (``module.`` prefix).
* ``expected.npz``: the arrays the tests compare against, written with NumPy from the
  torch tensors (``.contiguous()``; bfloat16 as float32; conjugation resolved).

Every file is checked by loading it back with ``torch.load`` before the script ends.
Seeds are fixed and torch's zip writer uses a fixed timestamp, so a second run
writes the same bytes (the script prints the SHA-256 of each file).
"""

import argparse
import collections
import hashlib
import io
import os
import pickle
import zipfile

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "tests", "fixtures", "checkpoints")


def tensors(with_uint16=True):
    """The tensor zoo (fresh, from a fixed seed)."""
    torch.manual_seed(0)
    base = torch.randn(3, 5)
    line = torch.arange(10, dtype=torch.float32)
    shared = torch.randn(12)
    obj = {
        "f32": torch.randn(3, 4),
        "f16": torch.randn(5).half(),
        "bf16": torch.randn(2, 3).bfloat16(),
        "f64": torch.randn(2, 2, 2, dtype=torch.float64),
        "i64": torch.randint(-1000, 1000, (7,)),
        "i32": torch.randint(-100000, 100000, (2, 2), dtype=torch.int32),
        "i16": torch.randint(-3000, 3000, (3,), dtype=torch.int16),
        "i8": torch.randint(-128, 128, (4,), dtype=torch.int8),
        "u8": torch.randint(0, 256, (2, 5), dtype=torch.uint8),
        "bool": torch.rand(4) > 0.5,
        "complex_conj": torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).conj(),
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 3),
        "transposed": base.t(),
        "overlap": line.as_strided((4, 3), (2, 1), 1),  # rows 1-3, 3-5, ... overlap
        "expand": torch.arange(3, dtype=torch.float32).expand(4, 3),  # stride (0, 1)
        "channels_last": torch.randn(1, 2, 3, 3).to(memory_format=torch.channels_last),
        "shared_a": shared[1:5],  # one storage of 12, offsets 1 and 6
        "shared_b": shared[6:12].view(2, 3),
        "param": torch.nn.Parameter(torch.randn(2, 3)),
        "nested": collections.OrderedDict([
            ("list", [torch.randn(2), (torch.arange(4, dtype=torch.int64), 7, "x")]),
            ("tuple", (torch.ones(2, 2, dtype=torch.float16),)),
        ]),
    }
    if with_uint16:
        obj["uint16"] = torch.tensor([1, 65535, 300], dtype=torch.int32).to(torch.uint16)
    return obj


def to_numpy(tensor):
    tensor = tensor.detach().resolve_conj().resolve_neg().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy()
    return tensor.numpy().copy()


def flatten(obj, prefix, out):
    """``{prefix/key/...: ndarray}`` for every tensor in nested dicts / lists / tuples."""
    if isinstance(obj, torch.Tensor):
        out[prefix] = to_numpy(obj)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            flatten(value, f"{prefix}/{key}", out)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            flatten(value, f"{prefix}/{i}", out)
    return out


def assert_same(loaded, original, where):
    """torch.load's result equals what was saved (values, dtype, shape, containers)."""
    if isinstance(original, torch.Tensor):
        assert isinstance(loaded, torch.Tensor), where
        assert loaded.dtype == original.dtype and loaded.shape == original.shape, where
        assert torch.equal(loaded.resolve_conj(), original.resolve_conj()), where
    elif isinstance(original, dict):
        assert type(loaded) is type(original) and list(loaded) == list(original), where
        for key in original:
            assert_same(loaded[key], original[key], f"{where}/{key}")
    elif isinstance(original, (list, tuple)):
        assert type(loaded) is type(original) and len(loaded) == len(original), where
        for i, (a, b) in enumerate(zip(loaded, original)):
            assert_same(a, b, f"{where}/{i}")
    elif isinstance(original, np.ndarray):
        assert loaded.dtype == original.dtype.newbyteorder("="), where
        assert loaded.tolist() == original.tolist(), where
    else:
        assert type(loaded) is type(original) and loaded == original, where


def save_bytes(obj, **kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer, **kwargs)
    return buffer.getvalue()


def write_zip(path, records):
    """A zip of stored (uncompressed) records with a fixed timestamp, like torch's."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in records:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, data)


def deterministic_legacy(data):
    """A legacy file with its storages named ``"0"``, ``"1"``... in order of first use.

    Torch names legacy storages by memory address and writes them sorted by that name,
    so both the names and the storage order change from run to run. The main pickle
    is kept (only its key strings change), the key list is re-pickled the way torch
    does (protocol 2), and the storages follow in the new order.
    """
    stream = io.BytesIO(data)
    first_use, storage_types = [], {}

    class Inert:  # this file was just written by torch.save; only its keys are wanted
        def __init__(self, *args, **kwargs):
            pass

        def __setstate__(self, state):
            pass

        def __setitem__(self, key, value):
            pass

        def append(self, item):
            pass

        extend = append

    class KeyReader(pickle.Unpickler):
        def find_class(self, module, name):
            return name if name.endswith("Storage") else Inert

        def persistent_load(self, pid):
            if pid[2] not in storage_types:
                first_use.append(pid[2])
                storage_types[pid[2]] = pid[1]

    for _ in range(4):  # magic number, protocol version, sys_info, the object
        KeyReader(stream).load()
    head = data[:stream.tell()]
    keys = KeyReader(stream).load()
    assert sorted(keys) == sorted(first_use)
    storages = {}
    for key in keys:  # int64 element count, then the elements
        count = stream.read(8)
        dtype = getattr(torch, storage_types[key]).dtype
        size = int.from_bytes(count, "little") * torch.empty(0, dtype=dtype).element_size()
        storages[key] = count + stream.read(size)
    assert stream.read() == b""
    renamed = {old: str(i) for i, old in enumerate(first_use)}
    for old, new in renamed.items():  # BINUNICODE strings (protocol 2 has no frames)
        old_op = b"X" + len(old).to_bytes(4, "little") + old.encode()
        assert head.count(old_op) >= 1, old  # once per tensor using the storage
        head = head.replace(old_op, b"X" + len(new).to_bytes(4, "little") + new.encode())
    key_list = pickle.dumps([renamed[k] for k in first_use], protocol=2)
    return head + key_list + b"".join(storages[k] for k in first_use)


def big_endian(obj):
    """A zip checkpoint of ``obj`` as a big-endian machine would write it."""
    data = save_bytes(obj)
    # Storage keys are numbered in pickling order (torch's id_map): map them to dtypes.
    dtypes, seen = {}, {}
    for value in obj.values():
        pointer = value.untyped_storage().data_ptr()
        if pointer not in seen:
            seen[pointer] = str(len(seen))
            dtypes[seen[pointer]] = value.dtype
    records = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            content = archive.read(name)
            if name == "archive/byteorder":
                content = b"big"
            elif name.startswith("archive/data/"):
                dtype = dtypes[name.rsplit("/", 1)[1]]
                code = {torch.bfloat16: "u2", torch.complex64: "f4"}.get(dtype)
                code = code or torch.empty(0, dtype=dtype).numpy().dtype.str[1:]
                content = np.frombuffer(content, "<" + code).astype(">" + code).tobytes()
            records.append((name, content))
    return records


def tiny_segmentor():
    from mmcv.cnn import ConvModule

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_seg = torch.nn.Conv2d(4, 3, 1)

    class Segmentor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = torch.nn.Module()
            self.backbone.stem = ConvModule(3, 4, 3, padding=1, norm_cfg=dict(type="BN"))
            self.decode_head = Head()

        def forward(self, x):
            return self.decode_head.conv_seg(self.backbone.stem(x))

    return Segmentor()


def mmseg_checkpoint():
    """What mmengine's Runner.save_checkpoint builds (see mmengine/runner/runner.py)."""
    import mmengine
    from mmengine.logging import MessageHub
    from mmengine.optim import OptimWrapper, PolyLR
    from mmengine.runner.checkpoint import weights_to_cpu
    from mmengine.utils import apply_to

    torch.manual_seed(1)
    model = tiny_segmentor()
    optim_wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                                                 weight_decay=5e-4))
    scheduler = PolyLR(optim_wrapper, eta_min=1e-4, power=0.9, begin=0, end=10, by_epoch=False)
    hub = MessageHub.get_instance("kctx_fixture")
    for step in range(2):
        loss = model(torch.randn(2, 3, 4, 4)).square().mean()
        optim_wrapper.update_params(loss)
        scheduler.step()
        hub.update_scalar("train/loss", round(loss.item(), 4))
        hub.update_scalar("train/lr", 0.01)
        hub.update_info("iter", step + 1)
    hub.update_info("best_mIoU", np.float64(0.625))
    hub.update_info("last_ckpt", "work_dirs/fcn_tiny/iter_2.pth")
    meta = dict(
        epoch=0, iter=2, cfg="model = dict(type='EncoderDecoder')\n", seed=42,
        experiment_name="fcn_tiny_20240101_000000", time="20240101_000000",
        mmengine_version=mmengine.__version__,
        dataset_meta=dict(classes=("background", "cat", "dog"),
                          palette=[[0, 0, 0], [128, 0, 0], [0, 128, 0]]),
        best_score=np.float64(0.625), num_images=np.int64(12), converged=np.bool_(True),
        class_weight=np.array([1.0, 2.0, 0.5], dtype=np.float32),
        confusion=np.arange(9, dtype=np.int64).reshape(3, 3),
        names=np.array(["road", "sky"]),
        big_endian=np.array([1, 2, 70000], dtype=">i4"),  # numpy unpickles it as "<i4"
        fortran=np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
        objects=np.array([1, "x", None], dtype=object),
    )
    checkpoint = {
        "meta": meta,
        "state_dict": weights_to_cpu(model.state_dict()),
        "message_hub": apply_to(hub.state_dict(), lambda x: hasattr(x, "cpu"),
                                lambda x: x.cpu()),
        "optimizer": apply_to(optim_wrapper.state_dict(), lambda x: hasattr(x, "cpu"),
                              lambda x: x.cpu()),
        "param_schedulers": [scheduler.state_dict()],
    }
    return checkpoint, model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=OUT)
    out = parser.parse_args().out
    os.makedirs(out, exist_ok=True)
    expected = {}
    written = []

    def write(name, data):
        path = os.path.join(out, name)
        with open(path, "wb") as file:
            file.write(data)
        written.append(path)
        return path

    # Tensors, zip and legacy.
    zoo = tensors()
    path = write("tensors.pth", save_bytes(zoo))
    assert_same(torch.load(path, weights_only=True), zoo, "tensors.pth")
    flatten(zoo, "tensors", expected)
    zoo_legacy = tensors(with_uint16=False)
    path = write("tensors_legacy.pth",
                 deterministic_legacy(save_bytes(zoo_legacy,
                                                 _use_new_zipfile_serialization=False)))
    assert_same(torch.load(path, weights_only=False), zoo_legacy, "tensors_legacy.pth")

    # Big-endian and old-style zip archives.
    zoo = tensors(with_uint16=False)
    subset = {k: zoo[k] for k in ("f32", "f16", "bf16", "f64", "i64", "i32", "i16", "u8",
                                  "bool", "complex_conj", "transposed", "shared_a",
                                  "shared_b")}
    path = os.path.join(out, "tensors_big_endian.pth")
    write_zip(path, big_endian(subset))
    written.append(path)
    assert_same(torch.load(path, weights_only=True), subset, "tensors_big_endian.pth")
    torch.manual_seed(2)
    old = {"weight": torch.randn(2, 3), "step": torch.arange(3)}
    # (torch 2.x's zip writer adds a byteorder record even with _disable_byteorder_record.)
    with zipfile.ZipFile(io.BytesIO(save_bytes(old))) as z:
        records = [(n.replace("archive/", "old_checkpoint/", 1), z.read(n))
                   for n in z.namelist() if n != "archive/byteorder"]
    path = os.path.join(out, "old_zip.pth")
    write_zip(path, records)
    written.append(path)
    assert_same(torch.load(path, weights_only=True), old, "old_zip.pth")
    flatten(old, "old_zip", expected)

    # mmengine / mmseg-style checkpoint, saved with mmengine's own save_checkpoint.
    from mmengine.runner.checkpoint import save_checkpoint

    checkpoint, model = mmseg_checkpoint()
    path = os.path.join(out, "mmseg_style.pth")
    save_checkpoint(checkpoint, path)
    written.append(path)
    loaded = torch.load(path, weights_only=False)
    assert_same(loaded["state_dict"], checkpoint["state_dict"], "mmseg_style.pth")
    assert_same(loaded["meta"], checkpoint["meta"], "mmseg_style.pth meta")
    flatten(checkpoint["state_dict"], "mmseg/state_dict", expected)
    flatten(checkpoint["optimizer"], "mmseg/optimizer", expected)
    for key, buffer in checkpoint["message_hub"]["log_scalars"].items():
        expected[f"mmseg/message_hub/{key}/log_history"] = buffer._log_history
        expected[f"mmseg/message_hub/{key}/count_history"] = buffer._count_history

    # Older mmcv-style checkpoint in the legacy format, DataParallel prefix.
    parallel = torch.nn.DataParallel(model)
    legacy = {"meta": {"mmcv_version": "1.7.0", "epoch": 3, "CLASSES": ("background", "cat"),
                       "best_score": np.float32(0.5)},
              "state_dict": parallel.state_dict()}
    path = write("mmcv_legacy.pth",
                 deterministic_legacy(save_bytes(legacy, _use_new_zipfile_serialization=False)))
    loaded = torch.load(path, weights_only=False)
    assert_same(loaded["state_dict"], legacy["state_dict"], "mmcv_legacy.pth")

    path = os.path.join(out, "expected.npz")
    np.savez_compressed(path, **expected)
    written.append(path)

    total = 0
    for path in written:
        with open(path, "rb") as file:
            data = file.read()
        total += len(data)
        print(f"{hashlib.sha256(data).hexdigest()[:16]}  {len(data):7d}  "
              f"{os.path.relpath(path)}")
    print(f"{total} bytes in {len(written)} files")


if __name__ == "__main__":
    main()
