"""A model on a CUDA device gets a device-capable engine backend by default: "auto" would pick
uring, which cannot move device memory."""
import teraio._core as core
from teraio.torch._offload_args import _device_backend


class _P:
    def __init__(self, cuda):
        self.is_cuda = cuda


class _Model:
    def __init__(self, cuda):
        self.cuda = cuda

    def parameters(self):
        return iter([_P(False), _P(self.cuda)])


def test_cpu_model_keeps_auto():
    assert _device_backend(_Model(False)) is None


def test_cuda_model_gets_a_device_backend():
    avail = {b["name"] for b in core.probe() if b["available"]}
    want = "cufile" if "cufile" in avail else "cuda"
    assert _device_backend(_Model(True)) == want
    # On this machine (no driver) cufile cannot run, so the bounce-buffer backend is chosen.
    assert want in ("cufile", "cuda")
