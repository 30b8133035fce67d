"""teraio.hf: the short name of teraio.integrations.hf (the same module object: what is set or
patched through either name is seen through the other)."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("teraio.integrations.hf")
