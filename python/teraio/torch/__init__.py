"""teraio's PyTorch layer: teraio.Offloader (offload.py) and what it is made of, the dispatch mode
that profiles steps and drives the C executor (_mode.py), FSDP2 and torch.compile support.

Users need only teraio.Offloader; this package holds the machinery. Its names are loaded on
first use, so that `import teraio` (which reads the option parsers of _offload_args) works
without PyTorch.
"""
_MODE_NAMES = ("StepDriver", "StepMode", "StepProgram", "collect_globals")

__all__ = list(_MODE_NAMES) + ["Offloader"]


def __getattr__(name):
    if name in _MODE_NAMES:
        from teraio.torch import _mode

        return getattr(_mode, name)
    if name == "Offloader":
        from teraio.torch.offload import Offloader

        return Offloader
    raise AttributeError(f"module 'teraio.torch' has no attribute {name!r}")
