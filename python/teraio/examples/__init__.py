"""Example models shipped with teraio (no downloads): llama_tiny, a small Llama-style decoder."""
