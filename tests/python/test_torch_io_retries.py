"""Transient I/O failures are never silent: the engine's retries (a write that fails once, a
corrupted read caught by verify) are counted in report() and logged on the "teraio" logger."""
import logging

import pytest

import torch

import teraio  # noqa: E402
from teraio.examples.llama_tiny import LlamaConfig, LlamaTiny, make_batch  # noqa: E402

CFG = LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344)


def _train(tmp_path, **options):
    m = LlamaTiny(CFG, seed=0)
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    off = teraio.Offloader(m, o, memory_budget=0.3, ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(min_tensor_bytes="16KiB",
                                                         backend="fault", **options))
    losses = []
    for i in range(4):
        with off.step():
            loss = m.loss(make_batch(CFG, 2, 32, i))
            loss.backward()
            o.step()
            o.zero_grad()
        losses.append(loss.item())
    rep = off.report()
    off.close()
    return losses, rep


@pytest.mark.parametrize("fault,key", [("write_fail=30,write_fail_count=1", "io_retries"),
                                       ("corrupt=3,corrupt_count=1", "io_crc_errors")])
def test_retries_counted_and_logged(tmp_path, caplog, fault, key):
    caplog.set_level(logging.WARNING, logger="teraio")
    losses, rep = _train(tmp_path, backend_options=fault, verify=True)
    assert rep[key] >= 1, rep
    msgs = [r.getMessage() for r in caplog.records if r.name == "teraio"]
    assert any("retried" in m for m in msgs), msgs
    clean_losses, clean = _train(tmp_path, verify=True)
    assert clean["io_retries"] == 0 and clean["io_crc_errors"] == 0, clean
    assert losses == clean_losses  # the retried transfers delivered the right bytes


def test_corruption_caught_with_default_options(tmp_path, caplog):
    """Corruption is never silent by default: OffloadOptions() checks every SSD read. A read
    corrupted once is retried (counted, logged by the engine and by the step); one that stays
    corrupt fails the step with teraio.Error instead of training on wrong bytes."""
    caplog.set_level(logging.WARNING, logger="teraio")
    _, rep = _train(tmp_path, backend_options="corrupt=3,corrupt_count=1")
    assert rep["io_crc_errors"] >= 1, rep
    msgs = [r.getMessage() for r in caplog.records if r.name == "teraio"]
    assert any("CRC32C mismatch" in m for m in msgs), msgs
    with pytest.raises(teraio.Error, match="CRC32C mismatch"):
        _train(tmp_path, backend_options="corrupt=3,corrupt_count=1000000")


def test_retries_of_a_failed_step_not_logged_as_succeeded(tmp_path, caplog):
    """A step that fails after the engine retried transfers (a read that stays corrupt) logs
    the retries as part of a failed step, not as retries that succeeded."""
    caplog.set_level(logging.WARNING, logger="teraio")
    with pytest.raises(teraio.Error, match="CRC32C mismatch"):
        _train(tmp_path, backend_options="corrupt=3,corrupt_count=1000000")
    msgs = [r.getMessage() for r in caplog.records
            if r.name == "teraio" and "the engine retried" in r.getMessage()]
    assert msgs, [r.getMessage() for r in caplog.records]
    assert not any("succeeded" in m for m in msgs), msgs
    assert "failed" in msgs[-1], msgs
