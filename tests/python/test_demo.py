"""The demo's training part: bitwise-equal losses and parameters under a 50% budget, and the
numbers it prints are the Offloader's own."""
import json


def test_demo_training_matches_plain_run(tmp_path):
    from teraio import demo_training
    r = demo_training.run(tmp_path, steps=4, budget=0.5)
    assert r["losses_equal"] and r["params_equal"]
    assert r["steps_offloaded"] >= 1
    assert r["peak_managed_bytes"] <= r["memory_budget"]
    assert r["memory_budget"] <= 0.5 * r["unconstrained_peak_bytes"] + 1
    assert r["bytes_offloaded"] > 0 and r["bytes_prefetched"] > 0
    saved = json.loads((tmp_path / "training.json").read_text())
    assert saved["losses"] == r["losses"]
