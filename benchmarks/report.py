"""Presenting results: the terminal table, the JSON file, the PNG chart.

>>> _num(None), _num(0.01234), _num(1234.5), _num(3e-7, err=True), _pair(0.000537, None)
('-', '0.0123', '1234', '3.0e-07', '0.00054/-')
"""
from __future__ import annotations

import json
import math
import os
from typing import Dict, List, Optional, Tuple

from benchmarks import growth
from benchmarks.systems import ORDER

COLUMNS = [("system", 7), ("build_s f/v", 15), ("cached f/v", 15), ("fwd_ms", 9),
           ("vjp_ms", 9), ("vjp/fwd", 7), ("err", 8), ("fwd G/s (%pk)", 14),
           ("vjp G/s (%pk)", 14), ("te/x fwd", 8), ("te/x vjp", 8), ("status", 0)]


def _num(x: Optional[float], err: bool = False) -> str:
    if x is None:
        return "-"
    if err:
        return "inf" if x == float("inf") else f"{x:.1e}"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 1:
        return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"
    return f"{x:.3g}"


def _seconds(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2g}"


def _pair(a: Optional[float], b: Optional[float]) -> str:
    return "-" if a is None and b is None else f"{_seconds(a)}/{_seconds(b)}"


def status_text(row: dict) -> str:
    """A system's status, with the forward's when that differs and is not ok."""
    if row["fwd_status"] == row["status"] or row["fwd_status"] == "ok":
        return row["status"]
    return f"{row['status']}; forward {row['fwd_status']}"


def tiers(cases: List[dict]) -> List[int]:
    """The tiers present among result ``cases``, in order (a case without one is tier 1).

    >>> tiers([{"tier": 2}, {}, {"tier": 2}])
    [1, 2]
    """
    return sorted({c.get("tier", 1) for c in cases})


def _fastest_peer_ratio(case: dict, part: str) -> Optional[Tuple[str, float]]:
    """``(peer, te/peer)`` for the peer with the lowest median on ``part`` among those
    whose result is ok, when tensorexpr's is ok too; the ratio is the paired one
    (median of per-round ratios) of the table."""
    status = "fwd_status" if part == "fwd" else "status"
    rows = case["systems"]
    if rows.get("te", {}).get(status) != "ok":
        return None
    peers = [(row[f"{part}_ms"], name) for name, row in rows.items()
             if name != "te" and row.get(status) == "ok" and row.get(f"{part}_ms")]
    if not peers:
        return None
    _, peer = min(peers)
    ratio = case["ratios"].get(f"te/{peer}", {}).get(part)
    return None if ratio is None else (peer, ratio)


def tier_summary(cases: List[dict]) -> Dict[str, dict]:
    """Per tier: the geometric mean over its cases of tensorexpr / fastest peer, forward and
    VJP, and how many cases it covers (a case counts where tensorexpr and a peer are ok).

    >>> row = lambda ms: {"fwd_status": "ok", "status": "ok", "fwd_ms": ms, "vjp_ms": ms}
    >>> case = lambda r: {"tier": 2, "systems": {"te": row(1.0), "torch": row(2.0),
    ...                   "jax": row(9.0)}, "ratios": {"te/torch": {"fwd": r, "vjp": r},
    ...                   "te/jax": {"fwd": 0.1, "vjp": 0.1}}}
    >>> s = tier_summary([case(0.5), case(2.0)])["2"]
    >>> s["fwd_geomean"], s["vjp_geomean"], s["fwd_cases"], s["cases"]
    (1.0, 1.0, 2, 2)
    """
    out = {}
    for tier in tiers(cases):
        mine = [c for c in cases if c.get("tier", 1) == tier]
        entry = {"cases": len(mine)}
        for part in ("fwd", "vjp"):
            got = [r for r in (_fastest_peer_ratio(c, part) for c in mine) if r]
            entry[f"{part}_cases"] = len(got)
            entry[f"{part}_geomean"] = (math.exp(sum(math.log(x) for _, x in got) / len(got))
                                        if got else None)
        out[str(tier)] = entry
    return out


def summary_line(tier: str, s: dict) -> str:
    """One tier's geometric means as a line of the table.

    >>> summary_line("2", {"cases": 19, "fwd_geomean": 1.234, "fwd_cases": 18,
    ...                    "vjp_geomean": None, "vjp_cases": 0})
    'tier 2: geometric mean of tensorexpr / fastest peer: forward 1.23 (18 of 19 cases), VJP - (0 of 19 cases)'
    """
    parts = [f"{label} {_num(s[f'{part}_geomean'])} ({s[f'{part}_cases']} of {s['cases']} cases)"
             for part, label in (("fwd", "forward"), ("vjp", "VJP"))]
    return f"tier {tier}: geometric mean of tensorexpr / fastest peer: {', '.join(parts)}"


def table(results: dict) -> str:
    """The results as a fixed-width text table per tier, each followed by its geometric
    means of tensorexpr / fastest peer, then the notes that define the figures."""
    meta = results["meta"]
    head = "".join(f"{name:<{w}} " if w else name for name, w in COLUMNS)
    summary = results.get("tiers") or tier_summary(results["cases"])
    lines = []
    for tier in tiers(results["cases"]):
        lines += [f"tier {tier}", head, "-" * len(head)]
        lines += _case_lines([c for c in results["cases"] if c.get("tier", 1) == tier])
        lines += [summary_line(str(tier), summary[str(tier)]), ""]
    lines += codegen_summary(results) + notes(meta)
    lines.append("geometric mean: over a tier's cases where tensorexpr and some peer are ok, "
                 "of te/x for the peer x with the lowest median (per part); ratios as te/x")
    return "\n".join(lines)


def _case_lines(cases: List[dict]) -> List[str]:
    lines = []
    for case in cases:
        unit = "GFLOP/s" if case["work"]["unit"] == "flop" else "GB/s"
        sizes = " ".join(f"{k}={v}" for k, v in case["params"].items())
        lines.append(f"{case['id']}. {case['title']}  ({sizes}; G/s = {unit})")
        for name in [n for n in ORDER if n in case["systems"]]:
            row = case["systems"][name]
            ratio = case["ratios"].get(f"te/{name}", {})
            cells = [name, _pair(row.get("fwd_build_s"), row.get("build_s")),
                     _pair(row.get("fwd_build_cached_s"), row.get("build_cached_s")),
                     _ms(row, "fwd"), _ms(row, "vjp"), _num(row.get("vjp_fwd")),
                     _num(row.get("err"), err=True), _rate(row, "fwd"), _rate(row, "vjp"),
                     _num(ratio.get("fwd")),
                     _num(ratio.get("vjp")), status_text(row)]
            lines.append("".join(f"{c:<{w}} " if w else c for c, (_, w) in zip(cells, COLUMNS)))
    return lines


#: the aim for tensorexpr's build without the C compiler (differentiate + lowering)
CODEGEN_AIM_S = 0.5


def codegen_summary(results: dict) -> List[str]:
    """The slowest tensorexpr build without the C compiler, forward and VJP, against the
    aim (the seconds are in the JSON: ``fwd_codegen_s``, ``codegen_s``).

    >>> row = {"fwd_codegen_s": 0.02, "codegen_s": 0.31}
    >>> line, = codegen_summary({"cases": [{"id": 3, "systems": {"te": row}}]})
    >>> line.split(": ")[1].split(";")[0]
    'forward 0.020 s (case 3), VJP 0.310 s (case 3)'
    """
    worst = {}
    for case in results["cases"]:
        row = case["systems"].get("te", {})
        for key in ("fwd_codegen_s", "codegen_s"):
            v = row.get(key)
            if v is not None and v > worst.get(key, (-1.0, 0))[0]:
                worst[key] = (v, case["id"])
    if not worst:
        return []
    parts = [f"{label} {worst[k][0]:.3f} s (case {worst[k][1]})"
             for k, label in (("fwd_codegen_s", "forward"), ("codegen_s", "VJP")) if k in worst]
    over = any(v > CODEGEN_AIM_S for v, _ in worst.values())
    return [f"tensorexpr build without the C compiler (differentiate + lowering), slowest: "
            f"{', '.join(parts)}; {'OVER' if over else 'under'} the {CODEGEN_AIM_S:g} s aim "
            f"(per case: fwd_codegen_s, codegen_s in the JSON)"]


#: A median this many times the fastest call is flagged: the machine was noisy then.
NOISY = 2.0


def _ms(row: dict, part: str) -> str:
    ms, fastest = row.get(f"{part}_ms"), row.get(f"{part}_min_ms")
    return _num(ms) + ("*" if ms and fastest and ms > NOISY * fastest else "")


def _rate(row: dict, part: str) -> str:
    rate, pct = row.get(f"{part}_rate"), row.get(f"{part}_peak_pct")
    if rate is None:
        return "-"
    return f"{_num(rate)} ({pct:.1f}%)" if pct < 10 else f"{_num(rate)} ({pct:.0f}%)"


def notes(meta: dict) -> List[str]:
    """What the figures mean, for the reader of the table."""
    peak = meta["peak"]
    idle = ", ".join(f"{k}={v}" for k, v in meta["idle_threads"].items())
    out = [
        f"threads: {meta['threads']} for every system, idle OpenMP and OpenBLAS threads soon sleep ({idle}); "
        f"{'quick (reduced) sizes' if meta['quick'] else 'full sizes'}; "
        f"tensorexpr backend: {meta['te_backend']} ({meta['te_cache']})",
        f"fwd_ms: {meta['fwd_includes']}",
        "vjp_ms: the gradient of sum(H * Y) w.r.t. the inputs, given the inputs and H:",
    ]
    out += [f"  {name}: {text}" for name, text in meta["vjp_includes"].items()]
    out += [
        f"build_s f/v: forward/VJP programs; {meta['build']}",
        f"timing: {meta['timing']}; te/x = tensorexpr time / that system's time (<1: te faster); "
        f"* = median over {NOISY:g}x the fastest call (a noisy measurement)",
        f"{meta['err']}",
        f"G/s (%pk): {meta['work']}. Peak {peak['gflops']:.1f} GFLOP/s, DRAM "
        f"{peak['gbps']:.1f} GB/s ({peak['how']})",
    ]
    out += [f"skipped {name}: {why}" for name, why in meta["skipped"].items()]
    if "cached_rebuild_error" in meta:
        out.append(f"cached rebuild: {meta['cached_rebuild_error']}")
    return out


GROWTH_COLUMNS = [("case", 20), ("grown", 10), ("work x", 6), ("fwd min ms", 19),
                  ("vjp min ms", 19), ("vjp/fwd", 16), ("exp f/v", 11), ("status", 0)]


def growth_table(results: dict) -> str:
    """The growth check as a second table (empty if no case has one).

    >>> from benchmarks.growth import judge
    >>> g = {"grow": {"n": 4}, "fwd_min_ms": (1.0, 4.0), "vjp_min_ms": (1.0, 16.0),
    ...      **judge((1.0, 4.0), (1.0, 16.0), 4.0)}
    >>> text = growth_table({"meta": {}, "cases": [{"id": 14, "title": "blur", "growth": g}]})
    >>> row = text.splitlines()[3]
    >>> row.split()[:7], row.endswith("1.00/2.00   grows faster (VJP exponent 2.00 vs forward 1.00)")
    (['14.', 'blur', 'nx4', '4', '1', '->', '4'], True)
    >>> text.splitlines()[-1]
    'flagged: case 14'
    """
    cases = [c for c in results["cases"] if c.get("growth")]
    if not cases:
        return ""
    head = "".join(f"{name:<{w}} " if w else name for name, w in GROWTH_COLUMNS)
    lines = ["growth check (tensorexpr): forward and VJP at the case's size -> grown", head,
             "-" * len(head)]
    for case in cases:
        g = case["growth"]
        exps = ("-" if g.get("fwd_exp") is None or g.get("vjp_exp") is None
                else f"{g['fwd_exp']:.2f}/{g['vjp_exp']:.2f}")
        status = g["status"] + (f" (noisy run: a median over {NOISY:g}x the fastest call)"
                                if g.get("noisy") else "")
        cells = [f"{case['id']}. {case['title']}"[:20],
                 " ".join(f"{k}x{v}" for k, v in g["grow"].items()),
                 _num(g.get("size_ratio")), growth.pair(g.get("fwd_min_ms"), _num),
                 growth.pair(g.get("vjp_min_ms"), _num), growth.pair(g.get("vjp_fwd"), _num),
                 exps, status]
        lines.append("".join(f"{c:<{w}} " if w else c
                             for c, (_, w) in zip(cells, GROWTH_COLUMNS)))
    flagged = [str(c["id"]) for c in cases if growth.flagged(c["growth"])]
    lines += ["", f"{results['meta'].get('growth') or growth.RULE}",
              f"flagged: case {', '.join(flagged)}" if flagged
              else "flagged: none (by this rule, no gradient grows faster than its forward)"]
    return "\n".join(lines)


def _strict(x):
    """``x`` with non-finite floats as the strings "inf"/"nan" (strict JSON has neither)."""
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def write_json(results: dict, path: str) -> None:
    """Write the results document (strict JSON) to ``path``, creating its directory."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(_strict(results), fh, indent=1, allow_nan=False)
        fh.write("\n")


def chart_paths(results: dict, path: str) -> Dict[int, str]:
    """Where each tier's chart goes: ``path`` for a run of one tier; with several, the
    first tier at ``path`` and tier N at ``<stem>-tierN<ext>`` beside it.

    >>> chart_paths({"cases": [{"tier": 2}]}, "r/latest.png")
    {2: 'r/latest.png'}
    >>> chart_paths({"cases": [{"tier": 1}, {"tier": 2}]}, "r/latest.png")
    {1: 'r/latest.png', 2: 'r/latest-tier2.png'}
    """
    found = tiers(results["cases"])
    stem, ext = os.path.splitext(path)
    return {t: path if k == 0 else f"{stem}-tier{t}{ext}" for k, t in enumerate(found)}


def write_png(results: dict, path: str, tier: Optional[int] = None) -> Optional[str]:
    """Grouped bars of forward and VJP medians (log scale) of the cases of ``tier``
    (default: all); returns a note if skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed: no chart (pip install -e '.[bench]')"
    cases = [c for c in results["cases"] if tier is None or c.get("tier", 1) == tier]
    systems = [n for n in ORDER if any(n in c["systems"] for c in cases)]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.1 * len(cases) + 3), 8), sharex=True)
    width = 0.8 / max(len(systems), 1)
    for ax, part in zip(axes, ("fwd", "vjp")):
        for k, name in enumerate(systems):
            xs, ys = [], []
            for j, c in enumerate(cases):
                ms = c["systems"].get(name, {}).get(f"{part}_ms")
                if ms:
                    xs.append(j + (k - (len(systems) - 1) / 2) * width)
                    ys.append(ms)
            ax.bar(xs, ys, width=width, label=name)
        ax.set_yscale("log")
        ax.set_ylabel(f"{part} ms (median, log)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(ncol=len(systems), loc="lower right", bbox_to_anchor=(1, 1), frameon=False)
    axes[1].set_xticks(range(len(cases)))
    axes[1].set_xticklabels([f"{c['id']}. {c['title']}" for c in cases], rotation=30, ha="right")
    meta = results["meta"]
    which = "" if tier is None else f" tier {tier}"
    fig.suptitle(f"tensorexpr benchmark suite{which} ({'quick' if meta['quick'] else 'full'} sizes, "
                 f"{meta['threads']} threads, {meta['date']})")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
