"""Shared by the Python tests: the example models' folder on sys.path (the tests build the
example Llama from examples/llama_tiny.py and train it with examples/train_llama_tiny.py) and the
fixtures several files use. The helpers that run code in child processes are in _between.py
(between steps) and _dist.py (ranks of a gloo process group)."""
import os
import shutil
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)


@pytest.fixture
def fast_dir(tmp_path):
    """The SSD tier's directory: in /dev/shm where there is one (the engine path is the same; the
    tiny models' tensors would otherwise measure the disk's per-request latency)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(prefix="tio-test-", dir="/dev/shm")
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield str(tmp_path)
