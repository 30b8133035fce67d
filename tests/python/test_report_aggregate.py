"""Per-rank reports of a distributed run, aggregated into one summary (teraio.report.aggregate,
`teraio report rank0.json rank1.json`): the reports come from a real 2-stage 1F1B pipeline over
gloo in which each rank plays one node of a two-node torchrun (LOCAL_RANK=0 on both), with
per-node SSD directories through the "{rank}"/"{local_rank}" placeholders."""
import json
import os
import subprocess
import time

import pytest
from _dist import spawn_ranks, torch

import teraio  # noqa: E402
from teraio import report

STEPS = 5
MICRO = 4
DIM, HID, CLASSES, BATCH = 128, 512, 16, 64


def _stage(rank):
    nn = torch.nn
    torch.manual_seed(200 + rank)
    layers = [nn.Linear(DIM, HID), nn.GELU(), nn.Linear(HID, DIM)]
    if rank == 1:
        layers += [nn.LayerNorm(DIM), nn.Linear(DIM, CLASSES)]
    return nn.Sequential(*layers)


def _body(rank, world, init, out_dir):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    os.environ["LOCAL_RANK"] = "0"  # each rank alone on its node, as torchrun --nnodes 2 sets it
    node = os.path.join(out_dir, f"node{rank}")
    os.makedirs(os.path.join(node, "nvme0"), exist_ok=True)
    mod = _stage(rank)
    stage = PipelineStage(mod, rank, world, torch.device("cpu"))
    sched = Schedule1F1B(stage, n_microbatches=MICRO, loss_fn=torch.nn.functional.cross_entropy)
    opt = torch.optim.AdamW(mod.parameters(), lr=1e-3, foreach=True)
    off = teraio.Offloader(mod, opt, memory_budget=0.5,
                           ssd_dirs=[os.path.join(out_dir, "node{rank}", "nvme{local_rank}")],
                           options=teraio.OffloadOptions(min_tensor_bytes="8KiB"))
    g = torch.Generator().manual_seed(7)
    step_s = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, DIM, generator=g)
        y = torch.randint(0, CLASSES, (BATCH,), generator=g)
        t0 = time.perf_counter()
        with off.step():
            if rank == 0:
                sched.step(x)
            else:
                sched.step(target=y)
            opt.step()
            opt.zero_grad(set_to_none=True)
        step_s.append(time.perf_counter() - t0)
    off.restore()
    path = report.write_rank_report(off, os.path.join(out_dir, "r{rank}-l{local_rank}.json"),
                                    step_s=step_s)
    dirs = off.ssd_dirs
    off.close()
    return dict(path=path, ssd_dirs=dirs, step_s=step_s)


@pytest.fixture(scope="module")
def rank_reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    res = spawn_ranks(_body, d)
    return d, res


def test_reports_of_a_two_node_pipeline(rank_reports):
    d, res = rank_reports
    for r, x in enumerate(res):
        # "{rank}" and "{local_rank}" (0 on both "nodes") resolved per rank
        assert x["ssd_dirs"] == [os.path.join(str(d), f"node{r}", "nvme0")]
        assert x["path"] == os.path.join(str(d), f"r{r}-l0.json")
    raw = [json.load(open(x["path"])) for x in res]
    for r, rep in enumerate(raw):
        assert rep["format"] == "teraio-rank-report"
        assert (rep["rank"], rep["local_rank"], rep["world_size"]) == (r, 0, 2)
        assert rep["step_s"] == res[r]["step_s"]
        assert rep["bytes_offloaded"] > 0 and rep["steps_offloaded"] == STEPS - 2, rep
    # the files in reverse order: the summary sorts by rank
    agg = report.aggregate([res[1]["path"], res[0]["path"]])
    print(report.format_aggregate(agg))
    assert [row["rank"] for row in agg["ranks"]] == [0, 1]
    for row, rep in zip(agg["ranks"], raw):
        assert row["bytes_offloaded"] == rep["bytes_offloaded"]
        assert row["peak_managed_bytes"] == rep["peak_managed_bytes"]
        assert row["memory_budget"] == rep["memory_budget"]
        assert row["ssd_bytes_written"] == rep["engine"]["bytes_written"] > 0
        assert row["budget_held"] is True
        assert row["step_s_max"] == max(rep["step_s"])
        assert row["step_s_median"] == sorted(rep["step_s"])[STEPS // 2]
    t = agg["total"]
    assert t["ranks"] == 2 and t["hosts"] == 1
    assert t["bytes_offloaded"] == raw[0]["bytes_offloaded"] + raw[1]["bytes_offloaded"]
    assert t["bytes_prefetched"] == raw[0]["bytes_prefetched"] + raw[1]["bytes_prefetched"]
    assert t["stall_s"] == raw[0]["stall_s"] + raw[1]["stall_s"]
    assert t["peak_managed_bytes"] == max(raw[0]["peak_managed_bytes"],
                                          raw[1]["peak_managed_bytes"])
    assert t["budget_held"] is True
    # the two stages differ (the last one has the head): so do their budgets
    assert raw[0]["memory_budget"] != raw[1]["memory_budget"]


def test_cli_aggregates_the_same(rank_reports, tmp_path):
    d, res = rank_reports
    paths = [x["path"] for x in res]
    cli = report.cli_path()
    p = subprocess.run([cli, "report", *paths, "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == report.aggregate(paths)
    p = subprocess.run([cli, "report", *paths, "-o", str(tmp_path / "sum")], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["rank", "host", "steps"]
    assert lines[2].startswith("0 (0)") and lines[3].startswith("1 (0)")
    total = [ln for ln in lines if ln.startswith("total")]
    assert len(total) == 1 and " all " in total[0]
    assert (tmp_path / "sum" / "ranks.txt").read_text() == p.stdout
    assert json.loads((tmp_path / "sum" / "ranks.json").read_text()) == report.aggregate(paths)


def _fake(rank, peak, budget=1000, **kw):
    rep = {"bytes_offloaded": 10, "bytes_prefetched": 10, "peak_managed_bytes": peak,
           "unplanned_peak_bytes": 0, "memory_budget": budget, "stall_s": 0.5, "rank": rank}
    rep.update(kw)
    return rep


def test_budget_not_held_and_raw_reports():
    # a plain Offloader.report() (no rank, no step times) is accepted; over budget is flagged
    agg = report.aggregate([_fake(0, 900), _fake(None, 1200), _fake(1, 10, step_s=[3, 1, 2])])
    assert [r["rank"] for r in agg["ranks"]] == [0, 1, None]
    assert [r["budget_held"] for r in agg["ranks"]] == [True, True, False]
    assert agg["ranks"][1]["step_s_median"] == 2 and agg["ranks"][0]["step_s_median"] is None
    assert agg["total"]["budget_held"] is False
    assert agg["total"]["peak_fraction"] == 1.2
    assert agg["total"]["step_s_median_max"] == 2
    text = report.format_aggregate(agg)
    assert text.splitlines()[-2].startswith("total") and " NO " in text.splitlines()[-2]


def test_bad_rank_reports(tmp_path):
    cli = report.cli_path()

    def run(*args):
        return subprocess.run([cli, "report", *map(str, args)], capture_output=True, text=True)

    good = tmp_path / "r0.json"
    good.write_text(json.dumps(_fake(0, 1)))
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps(_fake(0, 2)))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"tensors": []}))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps(_fake(1, -5)))
    cases = [((good, dup), "rank 0 appears twice"),
             ((good, other), "other.json: not an Offloader rank report"),
             ((good, broken), "broken.json: not JSON"),
             ((good, neg), "peak_managed_bytes is -5"),
             ((good, tmp_path / "missing.json"), "missing.json: cannot read")]
    for args, msg in cases:
        p = run(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert msg in p.stderr, (msg, p.stderr)
        assert "Traceback" not in p.stderr
    with pytest.raises(report.ReportError, match="no rank reports"):
        report.aggregate([])
    with pytest.raises(report.ReportError, match="report 0: not an Offloader report"):
        report.aggregate([{"x": 1}])
