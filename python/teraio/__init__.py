"""teraio: lifetime-aware tensor offloading to host memory and NVMe SSDs for LLM training.

The core is the C library libteraio; this package binds it (``teraio._core``) and adds what
only Python can do: hooking PyTorch operators and resizing PyTorch storages.
"""
from teraio import _core, _log
from teraio._core import Error, format_bytes, parse_bytes, parse_rate
from teraio.options import OffloadOptions

__version__ = _core.version()
_log.install()  # the C library's messages on the "teraio" logger (teraio/_log.py)

__all__ = ["Error", "OffloadOptions", "format_bytes", "parse_bytes", "parse_rate",
           "__version__"]

# Optional pieces are added by their modules when present (trace, analysis, plan, ...).
for _name in ("Trace", "Analysis"):
    if hasattr(_core, _name):
        globals()[_name] = getattr(_core, _name)
        __all__.append(_name)


def __getattr__(name):
    # Lazy, so that `import teraio` works without torch: teraio.Offloader imports the torch layer.
    if name == "Offloader":
        from teraio.torch.offload import Offloader

        return Offloader
    if name == "function_region":  # a compiled function run as a region of a step
        from teraio.torch._compile import function_region

        return function_region
    raise AttributeError(f"module 'teraio' has no attribute {name!r}")
