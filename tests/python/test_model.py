"""teraio._core.model: the workload model from Python (docs/model.md)."""
import pytest

import teraio
from teraio import _core


def test_presets_are_listed():
    p = _core.model_presets()
    assert "llama3-70b" in p["models"]
    assert "h100-nvl" in p["gpus"]


def test_model_returns_a_trace_and_info():
    trace, info = _core.model("small", rank=1)
    assert isinstance(trace, teraio.Trace)
    assert trace.meta["source"] == "teraio model"
    assert trace.meta["capacity_bytes"] == str(info["capacity_bytes"])
    assert trace.n_kernels == info["kernels"]
    data, info2 = _core.model("small", rank=1, as_bytes=True)
    assert isinstance(data, bytes) and data[:8] == b"TIOTRACE"
    assert info2 == info
    assert teraio.Trace.from_bytes(data).hash() == trace.hash()
    assert info["params"] == 3672320
    assert info["stage"] == 1
    assert info["kernels"] > 100
    assert info["tokens_per_iteration"] == 8 * 128
    assert info["memory_ratio"] == pytest.approx(info["peak_bytes"] / info["capacity_bytes"])
    assert info["ideal_tokens_per_s"] > 0


def test_options_apply():
    _, info = _core.model("llama3-8b", batch=8, precision="bf16", gpu="h200",
                          checkpointing=True)
    assert info["params"] == 8030261248
    assert info["precision"] == "bf16"
    assert info["gpu"] == "h200"
    assert info["capacity_bytes"] == 141 * 1024**3
    _, info = _core.model("tiny", gpu_memory="1GiB")
    assert info["capacity_bytes"] == 1024**3


def test_bad_input_raises_with_the_fix():
    with pytest.raises(teraio.Error) as ei:
        _core.model("small", batch=9)
    status, message = ei.value.args
    assert status == -1000
    assert "use a multiple of 2" in message
    with pytest.raises(teraio.Error) as ei:
        _core.model("llama4")
    assert "use one of" in ei.value.args[1]
    with pytest.raises(TypeError):
        _core.model("small", bogus=1)
    with pytest.raises(ValueError):
        _core.model("small", seq=-1)
