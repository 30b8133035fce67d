"""The enums of the C library are used by name in the Python layer: teraio._core exports them
with the values of the public headers, teraio.torch._mode takes them from _core (no hand copies),
and the C dispatch path (OpFast) records with the header's values."""
import ast
import os
import re

import pytest

import teraio

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _header_enums(rel):
    """{TIO_NAME: value} of the enumerators in a public header, read from its text."""
    out = {}
    for body in re.findall(r"\benum\b[^{;]*\{([^}]*)\}", _read(rel)):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        for item in body.split(","):
            m = re.fullmatch(r"\s*(TIO_\w+)\s*=\s*(\d+)u?(?:\s*<<\s*(\d+))?\s*(?:-\s*(\d+))?\s*",
                             item)
            if not m:
                continue
            v = int(m.group(2))
            if m.group(3):
                v <<= int(m.group(3))
            if m.group(4):
                v -= int(m.group(4))
            out[m.group(1)] = v
    return out


TRACE_H = _header_enums("include/teraio/trace.h")

# _core name -> header name
CORE = {
    "TENSOR_WEIGHT": "TIO_TENSOR_WEIGHT",
    "TENSOR_GRAD": "TIO_TENSOR_GRAD",
    "TENSOR_OPTIM_STATE": "TIO_TENSOR_OPTIM_STATE",
    "TENSOR_ACTIVATION": "TIO_TENSOR_ACTIVATION",
    "TENSOR_TEMP": "TIO_TENSOR_TEMP",
    "TENSOR_INPUT": "TIO_TENSOR_INPUT",
    "TENSOR_OTHER": "TIO_TENSOR_OTHER",
    "TENSOR_GLOBAL": "TIO_TENSOR_GLOBAL",
    "TENSOR_PINNED": "TIO_TENSOR_PINNED",
    "KERNEL_COMM": "TIO_KERNEL_COMM",
    "KERNEL_OPTIM": "TIO_KERNEL_OPTIM",
    "KERNEL_BACKWARD": "TIO_KERNEL_BACKWARD",
    "USE_READ": "TIO_USE_READ",
    "USE_WRITE": "TIO_USE_WRITE",
    "USE_READ_WRITE": "TIO_USE_READ_WRITE",
}

# teraio.torch._mode name -> _core name
MODE = {
    "KIND_WEIGHT": "TENSOR_WEIGHT",
    "KIND_GRAD": "TENSOR_GRAD",
    "KIND_OPTIM": "TENSOR_OPTIM_STATE",
    "KIND_ACT": "TENSOR_ACTIVATION",
    "KIND_TEMP": "TENSOR_TEMP",
    "KIND_INPUT": "TENSOR_INPUT",
    "KIND_OTHER": "TENSOR_OTHER",
    "F_GLOBAL": "TENSOR_GLOBAL",
    "F_PINNED": "TENSOR_PINNED",
    "K_COMM": "KERNEL_COMM",
    "K_OPTIM": "KERNEL_OPTIM",
    "K_BACKWARD": "KERNEL_BACKWARD",
    "USE_R": "USE_READ",
    "USE_W": "USE_WRITE",
    "USE_RW": "USE_READ_WRITE",
    "FREE_KERNEL": "RUNTIME_FREE_KERNEL",
}


def test_header_parse_sees_every_enumerator():
    assert set(CORE.values()) <= set(TRACE_H)


@pytest.mark.parametrize("name", sorted(CORE))
def test_core_exports_the_header_values(name):
    assert getattr(teraio._core, name) == TRACE_H[CORE[name]]


def test_core_exports_the_free_marker_name():
    m = re.search(r'#define\s+TIO_RUNTIME_FREE_KERNEL\s+"([^"]*)"',
                  _read("include/teraio/runtime.h"))
    assert m, "runtime.h no longer defines TIO_RUNTIME_FREE_KERNEL"
    assert teraio._core.RUNTIME_FREE_KERNEL == m.group(1)


def test_mode_takes_its_constants_from_core():
    from teraio.torch import _mode

    for name, core_name in MODE.items():
        assert getattr(_mode, name) == getattr(teraio._core, core_name), name


def test_mode_has_no_hand_copied_values():
    """The module-level constants of _mode.py are expressions over _core, not literals."""
    tree = ast.parse(_read("python/teraio/torch/_mode.py"))
    seen = set()
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        names = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if not names & set(MODE):
            continue
        seen |= names & set(MODE)
        literals = [n for n in ast.walk(node.value)
                    if isinstance(n, (ast.Constant, ast.Call))]
        assert not literals, f"{sorted(names)}: hand-copied values at line {node.lineno}"
    assert seen == set(MODE)


def test_dispatch_c_defines_only_its_own_enums():
    """OpFast's sources (dispatch_impl.h, dispatch_py.c, dispatch_ids.c) use TIO_* of
    <teraio/trace.h>; their own enums are OPFAST_* and SP_*."""
    assert "#include <teraio/trace.h>" in _read("python/teraio/_core/dispatch_impl.h")
    for f in ("dispatch_impl.h", "dispatch_py.c", "dispatch_ids.c"):
        src = _read("python/teraio/_core/" + f)
        for body in re.findall(r"\benum\s*\{([^}]*)\}", src):
            for item in body.split(","):
                name = item.split("=")[0].strip()
                assert name.startswith(("OPFAST_", "SP_")), f"{f}: enum {name}"


def test_opfast_kernel_flags_are_distinct_bits_of_a_byte():
    if not hasattr(teraio._core, "OpFast"):
        pytest.fail("teraio built without the C dispatch path")
    a, b = teraio._core.OPFAST_CHECK_OFFLOAD, teraio._core.OPFAST_RELEASE
    for v in (a, b):
        assert 0 < v < 256 and v & (v - 1) == 0
    assert a != b


def test_opfast_records_with_the_header_values():
    """A step recorded by the C path: the batch is an input (pinned), a result an activation,
    uses are read and write, by the values in trace.h."""
    import torch
    from teraio.torch._mode import FastStepDriver, StepDriver, StepMode

    x = torch.ones(64)
    d = StepDriver([], record=True, fast=True)
    assert type(d) is FastStepDriver
    with StepMode(d):
        y = x * 2
        z = y + x
    d.end()
    assert torch.equal(z, torch.full((64,), 3.0))
    tensors, kernels = d.prog.tensors, d.prog.kernels
    assert len(tensors) == 3 and len(kernels) == 2
    (_, k_in, f_in, _), (_, k_y, f_y, _), (_, k_z, f_z, _) = tensors
    assert (k_in, f_in) == (TRACE_H["TIO_TENSOR_INPUT"], TRACE_H["TIO_TENSOR_PINNED"])
    assert (k_y, f_y) == (TRACE_H["TIO_TENSOR_ACTIVATION"], 0)
    assert (k_z, f_z) == (TRACE_H["TIO_TENSOR_ACTIVATION"], 0)
    r, w = TRACE_H["TIO_USE_READ"], TRACE_H["TIO_USE_WRITE"]
    assert kernels[0][3] == (0, r, 1, w)
    assert sorted(zip(kernels[1][3][::2], kernels[1][3][1::2])) == [(0, r), (1, r), (2, w)]
