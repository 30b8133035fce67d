"""`teraio report` on hostile input: every input error is exit 2 with a message naming it, never
a traceback (RecursionError, UnicodeDecodeError, FileExistsError, a JSON value of the wrong
kind); outputs never follow a symlink that the kernel's protected-symlink rule would refuse."""
import json
import os
from pathlib import Path

import pytest

from teraio import report

DATA = Path(__file__).resolve().parents[1] / "data"
RANK = {"format": "teraio-rank-report", "rank": 0, "bytes_offloaded": 1,
        "peak_managed_bytes": 10, "memory_budget": 20}


def run(capsys, *args):
    code = report.main([str(a) for a in args])
    err = capsys.readouterr().err
    return code, err


def rank_file(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


def test_deeply_nested_json_is_bad_input(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200000 + "]" * 200000)
    code, err = run(capsys, deep)
    assert code == 2
    assert "deep.json" in err and "nested too deeply" in err


def test_a_file_that_is_not_utf8_is_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"format": "\xff\xfe"}')
    code, err = run(capsys, bad)
    assert code == 2
    assert "bad.json" in err and "UTF-8" in err


def test_output_folder_that_is_a_file_is_bad_input(tmp_path, capsys):
    f = tmp_path / "taken"
    f.write_text("mine\n")
    code, err = run(capsys, DATA / "example.tio", "-o", f)
    assert code == 2
    assert "taken" in err and "not a folder" in err
    assert f.read_text() == "mine\n"
    code, err = run(capsys, DATA / "example.tio", "-o", f / "sub")
    assert code == 2 and "sub" in err


@pytest.mark.parametrize("bad", [{"engine": [1]}, {"host": {}}, {"engine": {"bytes_written": "x"}},
                                 {"step_s": [1, "x"]}, {"memory_budget": -1}])
def test_rank_report_values_of_the_wrong_kind_are_bad_input(tmp_path, capsys, bad):
    p = rank_file(tmp_path, "r0.json", {**RANK, **bad})
    q = rank_file(tmp_path, "r1.json", {**RANK, "rank": 1})
    code, err = run(capsys, p, q)
    assert code == 2
    assert err.startswith("teraio report: ")


def test_a_valid_pair_still_aggregates(tmp_path, capsys):
    p = rank_file(tmp_path, "r0.json", RANK)
    q = rank_file(tmp_path, "r1.json", {**RANK, "rank": 1})
    code = report.main([str(p), str(q), "--json", "-o", str(tmp_path / "sum")])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out)["total"]["ranks"] == 2
    assert json.loads((tmp_path / "sum" / "ranks.json").read_text())["total"]["ranks"] == 2
    assert (tmp_path / "sum" / "ranks.txt").read_text().strip()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chowning a link needs root")


def shared_dir(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


@needs_root
def test_outputs_refuse_links_planted_by_another_user(tmp_path, capsys):
    p = rank_file(tmp_path, "r0.json", RANK)
    q = rank_file(tmp_path, "r1.json", {**RANK, "rank": 1})
    d = shared_dir(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("secret\n")
    os.chmod(secret, 0o600)
    # a file inside -o DIR
    os.mkdir(d / "out")
    os.symlink(secret, d / "out" / "ranks.json")
    os.chmod(d / "out", 0o1777)
    os.lchown(d / "out" / "ranks.json", 65534, 65534)
    code, err = run(capsys, p, q, "-o", d / "out")
    assert code == 2 and "protected-symlink" in err
    assert secret.read_text() == "secret\n"
    # -o DIR itself, dangling: nothing is created where it points
    os.symlink(tmp_path / "made", d / "dir-link")
    os.lchown(d / "dir-link", 65534, 65534)
    code, err = run(capsys, p, q, "-o", d / "dir-link")
    assert code == 2 and "protected-symlink" in err
    assert not (tmp_path / "made").exists()
    # the trace report's folder the same way
    code, err = run(capsys, DATA / "example.tio", "-o", d / "dir-link")
    assert code == 2 and "protected-symlink" in err
    assert not (tmp_path / "made").exists()


@needs_root
def test_links_the_rule_allows_are_followed(tmp_path, capsys):
    p = rank_file(tmp_path, "r0.json", RANK)
    q = rank_file(tmp_path, "r1.json", {**RANK, "rank": 1})
    d = shared_dir(tmp_path)
    os.symlink(tmp_path / "mine", d / "mine")  # the caller's own link
    code, _ = run(capsys, p, q, "-o", d / "mine")
    assert code == 0
    assert (tmp_path / "mine" / "ranks.json").is_file()
    assert os.path.islink(d / "mine")


@pytest.mark.parametrize("args", [["--policies", "ideal,,teraio"], ["--policies", ","],
                                  ["--policies", "ideal, teraio"], ["--hw", ""], ["-o", ""],
                                  ["--plan", ""]])
def test_empty_values_and_list_elements_are_usage_errors(capsys, args):
    with pytest.raises(SystemExit) as e:
        report.main([str(DATA / "example.tio"), *args])
    assert e.value.code == 1
    assert args[0] in capsys.readouterr().err


def test_an_empty_argument_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        report.main([""])
    assert e.value.code == 1
    assert "empty" in capsys.readouterr().err
