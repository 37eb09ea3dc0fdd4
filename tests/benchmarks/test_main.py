"""The command line: which cases ``--tier`` and ``--case`` select."""
from __future__ import annotations

import pytest

from benchmarks.__main__ import parse
from benchmarks.cases import CASES


def test_default_runs_both_tiers():
    assert parse([]).case == [c.id for c in CASES] == list(range(1, 34))


def test_tier_selects_its_cases():
    assert parse(["--tier", "1"]).case == list(range(1, 15))
    assert parse(["--tier", "2", "--quick"]).case == list(range(15, 34))
    assert parse(["--tier", "2", "--tier", "1"]).case == list(range(1, 34))


def test_case_overrides_tier():
    assert parse(["--tier", "1", "--case", "20", "--case", "3"]).case == [3, 20]


def test_unknown_tier_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse(["--tier", "3"])
    assert "invalid choice" in capsys.readouterr().err
