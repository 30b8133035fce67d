"""The example model lives in the package (teraio.examples.llama_tiny) so that the demo can use it
from an installed teraio; this module keeps `from llama_tiny import ...` working for the scripts
in examples/ and the tests."""
from teraio.examples.llama_tiny import *  # noqa: F401,F403
from teraio.examples.llama_tiny import (  # noqa: F401
    LlamaConfig, LlamaTiny, make_batch, rope_tables, apply_rope, train_steps)
