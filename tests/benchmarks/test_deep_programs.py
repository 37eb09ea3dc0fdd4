"""The long-programs benchmark: it builds, checks against numpy and prints its table."""
from __future__ import annotations

from benchmarks import deep_programs


def test_a_small_run_prints_a_row_per_program(capsys):
    deep_programs.main(["--deep", "30", "60", "--chain", "10"])
    out = capsys.readouterr().out.splitlines()
    table = out[out.index("") + 1:]
    assert table[0].startswith("program") and [r.split()[:2] for r in table[1:]] == [
        ["deep", "30"], ["deep", "60"], ["chain", "10"]]
    m = deep_programs.measure("deep", 40)
    assert m["source_bytes"] < 40 * 2000 and m["largest_function"] > 0
