#!/usr/bin/env python
"""Coverage-guided fuzzing of kctx's ``.pth`` reader (``kctx.checkpoints``) with atheris.

tests/test_hostile_checkpoints.py holds the reader to its contract on crafted files and on
180 seeded mutants of two fixtures; this tool searches further, guided by the reader's own
branch coverage (libFuzzer through atheris), for a file that breaks the same contract:

* every error is a ``ValueError`` (``CheckpointError`` and its kin), with no ``MemoryError``
  in its cause / context chain, a message of at most ``MESSAGE_LIMIT`` characters and no
  control characters;
* a returned value holds no kctx-internal placeholder (``find_leaks``);
* no crash (a signal: libFuzzer reports it), no read over ``-timeout`` seconds, no peak RSS
  over ``-rss_limit_mb`` (libFuzzer's own flags, set below).

An input is one byte that picks the form, then the bytes of that form:

====  ===========================================================================
0     a byte that picks one of the zip fixtures of tests/fixtures/checkpoints, then
      the ``data.pkl`` pickle of a checkpoint with that fixture's other members
      (storages, ``byteorder``, ``version``)
1     a whole legacy (``_use_new_zipfile_serialization=False``) file
2     a whole file, as it is (zip archives: their directory, headers, members)
====  ===========================================================================

and the byte's bit 2 picks ``torch_state_dict`` instead of ``read_torch``. The corpus starts
from the fixtures of tests/fixtures/checkpoints in those forms, and ``-dict`` gets a dictionary of
the allow-listed globals as pickle ``GLOBAL`` opcodes (``fuzz_checkpoints.dict``, written
next to the corpus).

Run (a Python with atheris and NumPy; kctx.checkpoints needs nothing else):

    python -m venv /tmp/fz && /tmp/fz/bin/pip install atheris numpy
    /tmp/fz/bin/python tools/fuzz_checkpoints.py --corpus /tmp/fz-corpus -- \\
        -max_total_time=2700 -timeout=5 -rss_limit_mb=1024 -max_len=65536

A finding is written as ``crash-*`` / ``timeout-*`` / ``oom-*`` in the working folder;
replay one with ``python tools/fuzz_checkpoints.py --replay FILE`` (prints what the
reader did and which rule broke) and add it to the battery.
"""

import argparse
import os
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests")]

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "checkpoints")  # small: fast executions
MESSAGE_LIMIT = 2000  # characters, as tests/test_hostile_checkpoints.py
MAX_BYTES = 256 << 20  # the reader's default floor, explicit: every input is small
ZIP, LEGACY, RAW = 0, 1, 2
STATE_DICT_BIT = 4


class ContractBroken(AssertionError):
    """The reader broke its contract on this input (libFuzzer reports it as a crash)."""


def fixture_paths():
    return [os.path.join(FIXTURES, name) for name in sorted(os.listdir(FIXTURES))
            if name.endswith(".pth")]


def hosts():
    """Each zip fixture's members and its ``data.pkl`` name."""
    out = []
    for path in fixture_paths():
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                members = [(info.filename, archive.read(info)) for info in archive.infolist()]
            out.append((members, next(n for n, _ in members if n.endswith("/data.pkl"))))
    return out


def write_input(data, path, zip_hosts):
    """Write the checkpoint file that input ``data`` stands for; which reader to call."""
    head = data[0] if data else RAW
    form = (head & 3) % 3
    if form == ZIP:
        members, pkl_name = zip_hosts[data[1] % len(zip_hosts) if len(data) > 1 else 0]
        with zipfile.ZipFile(path, "w") as archive:  # stored: every byte reaches the reader
            for name, content in members:
                archive.writestr(name, data[2:] if name == pkl_name else content)
    else:
        with open(path, "wb") as file:
            file.write(data[1:])
    return "torch_state_dict" if head & STATE_DICT_BIT else "read_torch"


def seeds(zip_hosts):
    """The starting corpus: every fixture, in each form (zip fixtures in forms 0 and 2)."""
    out = []
    for index, (members, pkl_name) in enumerate(zip_hosts):
        pickle_bytes = dict(members)[pkl_name]
        out += [bytes([ZIP, index]) + pickle_bytes,
                bytes([ZIP | STATE_DICT_BIT, index]) + pickle_bytes]
    for path in fixture_paths():
        with open(path, "rb") as file:
            content = file.read()
        form = RAW if zipfile.is_zipfile(path) else LEGACY
        out += [bytes([form]) + content, bytes([form | STATE_DICT_BIT]) + content]
    return out


def dictionary_lines():
    """libFuzzer dictionary entries: the allow-listed globals and a few refused ones, as
    protocol-0..3 ``GLOBAL`` opcodes, and protocol-4 ``SHORT_BINUNICODE`` names."""
    from kctx.checkpoints import SAFE_GLOBALS

    names = sorted(SAFE_GLOBALS) + ["posix.system", "builtins.eval", "builtins.getattr"]
    lines = []
    for dotted in names:
        module, name = dotted.rsplit(".", 1)
        glob = b"c" + module.encode() + b"\n" + name.encode() + b"\n"
        lines.append(glob)
        for text in (module.encode(), name.encode()):
            if len(text) < 256:
                lines.append(b"\x8c" + bytes([len(text)]) + text)
    escaped = []
    for line in dict.fromkeys(lines):
        escaped.append('"' + "".join(f"\\x{b:02x}" for b in line) + '"')
    return escaped


def check(call):
    """Run ``call``; raise ContractBroken where the reader breaks its contract."""
    # imported here, not at the top: the probe imports kctx.checkpoints, which main() must
    # import first, inside atheris' instrumentation (an import of a loaded module is cheap)
    from hostile_checkpoint_probe import bad_chars, exception_chain, find_leaks

    try:
        value = call()
    except ValueError as error:
        chain = exception_chain(error)
        if any(isinstance(e, MemoryError) for e in chain):
            raise ContractBroken(f"a MemoryError inside a {type(error).__name__}") from error
        message = str(error)
        if len(message) > MESSAGE_LIMIT:
            raise ContractBroken(f"unbounded message: {len(message)} characters") from error
        if bad_chars(message):
            raise ContractBroken(f"control characters {bad_chars(message)} in the "
                                 f"message: {message[:300]!r}") from error
        return f"{type(error).__name__}: {message[:300]}"
    except MemoryError as error:
        raise ContractBroken("MemoryError on a small file (max_bytes did not hold)") from error
    # any other exception propagates: a contract break too (libFuzzer reports it)
    leaks = find_leaks(value)
    if leaks:
        raise ContractBroken(f"placeholder leak: {', '.join(leaks)} in the result")
    return f"returned a {type(value).__name__}"


def make_target(checkpoints, folder):
    zip_hosts = hosts()
    path = os.path.join(folder, "input.pth")

    def target(data):
        function = write_input(data, path, zip_hosts)
        reader = getattr(checkpoints, function)
        return check(lambda: reader(path, max_bytes=MAX_BYTES))

    return target


def main(argv=None):
    argv = sys.argv if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="corpus folder (filled with the seeds when empty)")
    parser.add_argument("--replay", nargs="+", help="inputs to run once each, then exit")
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[1:split])
    libfuzzer_args = argv[split + 1:]

    if args.replay:  # no atheris needed
        from hostile_checkpoint_probe import import_checkpoints

        checkpoints = import_checkpoints()
    else:
        import atheris

        with atheris.instrument_imports(include=["kctx", "pickletools"]):  # + the pre-scan's
            from hostile_checkpoint_probe import import_checkpoints

            checkpoints = import_checkpoints()
    folder = tempfile.mkdtemp(prefix="kctx-fuzz-", dir="/dev/shm" if os.path.isdir(
        "/dev/shm") else None)
    target = make_target(checkpoints, folder)
    if args.replay:
        for name in args.replay:
            with open(name, "rb") as file:
                data = file.read()
            try:
                print(f"{name}: {target(data)}")
            except BaseException as error:  # noqa: BLE001 (reported, then the next one)
                print(f"{name}: CONTRACT BROKEN: {type(error).__name__}: {str(error)[:2000]}")
        return
    if not args.corpus:
        parser.error("--corpus is required (or --replay)")
    os.makedirs(args.corpus, exist_ok=True)
    if not os.listdir(args.corpus):
        for number, seed in enumerate(seeds(hosts())):
            with open(os.path.join(args.corpus, f"seed{number:03d}"), "wb") as file:
                file.write(seed)
    dictionary = os.path.join(os.path.dirname(os.path.abspath(args.corpus)),
                              "fuzz_checkpoints.dict")
    with open(dictionary, "w") as file:
        file.write("\n".join(dictionary_lines()) + "\n")
    atheris.Setup([argv[0], f"-dict={dictionary}", *libfuzzer_args, args.corpus],
                  lambda data: target(data))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
