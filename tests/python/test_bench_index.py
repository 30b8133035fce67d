"""docs/benchmarks.md is an index of docs/bench/*.md (bench/check_bench_index.py), and the
benchmark pages show current results without labels of the work periods that produced them."""
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check():
    spec = importlib.util.spec_from_file_location("check_bench_index",
                                                  ROOT / "bench" / "check_bench_index.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(tmp_path, index, pages):
    (tmp_path / "docs" / "bench").mkdir(parents=True)
    (tmp_path / "docs" / "benchmarks.md").write_text(index)
    for p in pages:
        (tmp_path / "docs" / "bench" / p).write_text("# page\n")
    return tmp_path


def test_the_index_lists_every_page():
    assert _check().problems() == []


def test_a_page_missing_from_the_index_is_named(tmp_path):
    root = _tree(tmp_path, "- [bench/a.md](bench/a.md): a\n", ["a.md", "b.md"])
    assert _check().problems(root) == ["docs/benchmarks.md: no link to docs/bench/b.md"]


def test_a_link_to_no_page_is_named(tmp_path):
    root = _tree(tmp_path, "[a](bench/a.md) [gone](bench/gone.md#x)\n", ["a.md"])
    assert _check().problems(root) == [
        "docs/benchmarks.md: links to docs/bench/gone.md, which does not exist"]


def test_a_missing_index_is_named(tmp_path):
    (tmp_path / "docs" / "bench").mkdir(parents=True)
    assert _check().problems(tmp_path) == ["docs/benchmarks.md: missing"]


def test_the_command_line_check_fails_on_an_incomplete_index(tmp_path, monkeypatch, capsys):
    mod = _check()
    monkeypatch.setattr(mod, "ROOT", _tree(tmp_path, "none\n", ["a.md"]))
    assert mod.main() == 1
    assert "no link to docs/bench/a.md" in capsys.readouterr().err


LABELS = re.compile(r"\bsessions?\b|\bround \d+ of the project|\bstop \d+\b|earlier today|"
                    r"this morning|yesterday", re.I)


def test_benchmark_pages_carry_no_work_period_labels():
    pages = [ROOT / "docs" / "benchmarks.md", *sorted((ROOT / "docs" / "bench").glob("*.md"))]
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in pages for i, line in enumerate(p.read_text().splitlines(), 1)
             if LABELS.search(line)]
    assert found == []
