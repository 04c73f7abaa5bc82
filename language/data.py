"""The embedded corpus: the Python standard library's own source files, read as bytes.

Every machine with Python has them, offline. The file list is pinned (:data:`CORPUS_FILES`,
modules present from Python 3.10 to 3.13), the split is by file (every tenth file in sorted
order is held out), and the SHA-256 of the bytes read is recorded with every run: the
files' contents change between Python releases, so two runs' bits per character compare only
when their hashes agree. Tokens are bytes (a vocabulary of 256; the files are almost all
ASCII, so a byte is a character).
"""

import hashlib
import math
import pathlib
import sysconfig

import numpy as np

VOCABULARY_SIZE = 256
HELD_OUT_EVERY = 10
CORPUS_FILES = tuple(f"{name}.py" for name in """
argparse ast base64 bdb bisect calendar cmd code codecs codeop colorsys compileall
configparser contextlib copy copyreg csv dataclasses datetime difflib dis doctest enum
filecmp fileinput fnmatch fractions ftplib functools genericpath getopt getpass gettext glob
graphlib gzip hashlib heapq hmac imaplib inspect ipaddress keyword linecache locale lzma
mailbox mimetypes modulefinder netrc ntpath numbers opcode operator optparse os pdb pickle
pickletools pkgutil platform plistlib poplib posixpath pprint profile pstats pty py_compile
pyclbr pydoc queue quopri random reprlib rlcompleter runpy sched secrets selectors shelve
shlex shutil signal site smtplib socket socketserver ssl stat statistics string stringprep
struct subprocess symtable sysconfig tabnanny tarfile tempfile textwrap threading timeit
token tokenize trace traceback tracemalloc tty types typing uuid warnings wave weakref
webbrowser zipapp zipimport""".split())


def stdlib_directory():
    """Where this interpreter's standard library sources are."""
    return pathlib.Path(sysconfig.get_paths()["stdlib"])


def read_corpus(directory=None, files=CORPUS_FILES):
    """The pinned files' bytes: ``{name: bytes}`` in sorted order, and the SHA-256 of their
    names and contents. A missing file is an error naming it and the directory."""
    directory = pathlib.Path(directory) if directory else stdlib_directory()
    missing = [name for name in files if not (directory / name).is_file()]
    if missing:
        raise FileNotFoundError(f"The corpus files {missing[:5]} ({len(missing)} missing) are "
                                f"not in {directory}: the pinned list needs the standard "
                                "library sources of Python 3.10 to 3.13.")
    texts, digest = {}, hashlib.sha256()
    for name in sorted(files):
        texts[name] = (directory / name).read_bytes()
        digest.update(name.encode() + b"\0" + texts[name] + b"\0")
    return texts, digest.hexdigest()


def split_corpus(texts):
    """``(train, held_out)`` byte arrays (uint8): every :data:`HELD_OUT_EVERY`-th file of
    the sorted names held out, the rest for training, each file followed by a newline."""
    names = sorted(texts)
    parts = {"train": [], "held_out": []}
    for index, name in enumerate(names):
        parts["held_out" if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "train"].append(
            texts[name] + b"\n")
    return tuple(np.frombuffer(b"".join(parts[key]), np.uint8) for key in ("train", "held_out"))


def training_stream(text, length, batch_size, seed=0, start_step=0):
    """Endless batches of (inputs, targets) int32 (batch, length): batch k holds windows of
    ``text`` at offsets drawn from (seed, k), targets the inputs shifted by one."""
    import tensorflow as tf

    corpus = tf.constant(text)
    span = tf.range(length + 1, dtype=tf.int64)
    limit = len(text) - length - 1

    def batch_at(step):
        offsets = tf.random.stateless_uniform((batch_size,), tf.stack([tf.cast(seed, tf.int64),
                                                                       step]),
                                              minval=0, maxval=limit, dtype=tf.int64)
        windows = tf.cast(tf.gather(corpus, offsets[:, None] + span[None]), tf.int32)
        return windows[:, :-1], windows[:, 1:]

    return tf.data.Dataset.range(start_step, 2**62).map(
        batch_at, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(2)


def held_out_windows(text, length, max_characters=0):
    """Consecutive windows of the held-out text, ``(inputs, targets)`` (count, length): every
    character after the first predicted once, in context of at most ``length`` before it.
    ``max_characters`` > 0 keeps the first windows that hold that many targets."""
    count = (len(text) - 1) // length
    if max_characters:
        count = min(count, math.ceil(max_characters / length))
    windows = np.stack([text[i * length:i * length + length + 1] for i in range(count)])
    windows = windows.astype(np.int32)
    return windows[:, :-1], windows[:, 1:]
