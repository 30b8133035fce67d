"""The package's layout: `import teraio` works without PyTorch (the PyTorch layer in teraio.torch
is loaded only by teraio.Offloader), and the integrations (teraio/integrations/) answer to their
short names teraio.hf and teraio.titan."""
import subprocess
import sys
import textwrap

import pytest

_WITHOUT_TORCH = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # `import torch` raises ImportError from here on
    import teraio
    opts = teraio.OffloadOptions(min_tensor_bytes="1MiB", cpu_mmap_threshold="auto")
    assert opts.min_tensor_bytes == "1MiB", opts
    try:
        teraio.OffloadOptions(io_chunk="1000B")
    except ValueError as e:
        print("options checked:", e)
    assert teraio.parse_bytes("1KiB") == 1024
    try:
        teraio.Offloader
    except ImportError as e:
        print("offloader needs torch:", e)
    else:
        raise SystemExit("teraio.Offloader imported with torch blocked")
""")


def test_import_teraio_without_torch(tmp_path):
    r = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "options checked: OffloadOptions.io_chunk" in r.stdout, r.stdout
    assert "offloader needs torch:" in r.stdout, r.stdout


def test_offloader_and_torch_layer_names():
    import teraio
    import teraio.torch
    import teraio.torch.offload

    assert teraio.Offloader is teraio.torch.offload.Offloader is teraio.torch.Offloader
    from teraio.torch import _mode

    assert teraio.torch.StepDriver is _mode.StepDriver
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        teraio.torch.Nothing  # noqa: B018


def test_hf_short_name_is_the_integration_module():
    pytest.importorskip("transformers", reason="transformers is not installed here "
                        "(scripts/setup.sh with TIO_SETUP_TORCH=1 installs it)")
    import teraio.hf
    import teraio.integrations.hf
    from teraio.hf import OffloadCallback

    assert teraio.hf is teraio.integrations.hf
    assert sys.modules["teraio.hf"] is teraio.integrations.hf
    assert OffloadCallback is teraio.integrations.hf.OffloadCallback
