"""teraio's PyTorch layer: the dispatch mode that profiles steps and drives the C executor.

Users need only teraio.Offloader (python/teraio/offload.py); this package holds the machinery.
"""
from teraio.torch._mode import StepDriver, StepMode, StepProgram, collect_globals

__all__ = ["StepDriver", "StepMode", "StepProgram", "collect_globals"]
