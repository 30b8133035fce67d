"""teraio under training frameworks, one module each, imported only by their users:
hf.py (Hugging Face Trainer: teraio.hf.OffloadCallback) and titan.py (TorchTitan:
`--module teraio.titan`). teraio.hf and teraio.titan are these modules under their short names.
"""
