"""The benchmark table from a pytest-benchmark JSON: `python -m bench.summary [path.json]`.

Default path: .benchmarks/decide-<DECIDE_BENCH_MODEL>.json, written by `pytest bench --benchmark-only`.
A "~" marks a time scaled from a sampled oracle run (bench/harness.py); "FAILED" a run whose check failed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .config import default_json

PATH_ORDER = ("reference", "prompt_once", "trie", "trie_warm", "trie_bf16")


def load(path: Path) -> dict[tuple[str, str], dict]:
    """(case, path) -> {"median", "rounds", **extra_info}; the median is scaled to the whole request."""
    rows = {}
    for b in json.loads(path.read_text())["benchmarks"]:
        info = b["extra_info"]
        if "case" not in info:
            continue
        median = b["stats"]["median"] * info.get("scale", 1.0)
        rows[(info["case"], info["path"])] = {"median": median, "rounds": b["stats"]["rounds"], **info}
    return rows


def fmt_time(row: dict) -> str:
    return ("~" if row.get("sampled") else "") + f"{row['median']:.3f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def scoring_table(rows: dict, ceilings: dict[str, float | None]) -> list[str]:
    head = (
        f"{'case':<10} {'path':<12} {'median s':>10} {'rounds':>6} {'tokens':>7} {'cached':>6} {'t/ref':>7} "
        f"{'tok/ref':>8} {'t/p-o':>7} {'GFLOP':>8} {'GFLOP/s':>8} {'%ceil':>6} {'max dp':>8} {'check':>6}"
    )
    lines = [head, "-" * len(head)]
    for case in dict.fromkeys(c for c, _ in rows):
        if case == "matmul" or case.startswith(("forest", "gather")):
            continue
        ref, po = rows.get((case, "reference")), rows.get((case, "prompt_once"))
        for path in PATH_ORDER:
            r = rows.get((case, path))
            if r is None:
                continue
            gflops = r["flops"] / r["median"] / 1e9
            ceiling = ceilings["bf16" if path == "trie_bf16" else "f32"]
            lines.append(
                f"{case:<10} {path:<12} {fmt_time(r):>10} {r['rounds']:>6} {r['tokens']:>7} {r['cached_tokens']:>6} "
                f"{fmt_ratio(ref and ref['median'], r['median']):>7} {fmt_ratio(ref and ref['tokens'], r['tokens']):>8} "
                f"{fmt_ratio(po and po['median'], r['median']):>7} {r['flops'] / 1e9:>8.1f} {gflops:>8.1f} "
                f"{(f'{100 * gflops / ceiling:.0f}%' if ceiling else '-'):>6} {r['prob_err']:>8.1e} "
                f"{('ok' if r.get('checked') else 'FAILED'):>6}"
            )
            f32 = rows.get((case, "trie"))
            if path == "trie_bf16" and f32:
                lines.append(f"{'':<10} {'':<12} bfloat16 / float32 trie: {f32['median'] / r['median']:.2f}x faster")
    return lines


def forest_table(rows: dict) -> list[str]:
    lines = []
    for (case, path), r in rows.items():
        if case.startswith(("forest", "gather")):
            size = f"{r['nodes']} nodes" if "nodes" in r else f"{r['lse_rows']} lse rows"
            lines.append(f"{case:<24} {path:<12} {r['median'] * 1e3:>9.2f} ms   {size}, {r['rows']} logits rows")
    return lines


def targets(rows: dict, ceilings: dict[str, float | None]) -> list[str]:
    """The issue's targets and where this run stands."""

    def get(case: str, path: str, key: str = "median"):
        return rows.get((case, path), {}).get(key)

    def line(name: str, value, goal: str, ok) -> str:
        mark = "-" if ok is None else ("met" if ok else "NOT met")
        return f"  {name:<46} {value:<22} target {goal:<10} {mark}"

    out = []
    for case in ("standard", "choice40", "choice255", "state20"):
        tok, least = get(case, "trie", "tokens"), get(case, "trie", "trie_minimum")
        if tok is not None:
            out.append(line(f"{case}: trie tokens / trie minimum", f"{tok} / {least}", "equal", tok == least))
    std, ceiling = rows.get(("standard", "trie")), ceilings["f32"]
    if std and ceiling:
        share = std["flops"] / std["median"] / 1e9 / ceiling
        out.append(line("standard: trie GFLOP/s / matmul ceiling", f"{100 * share:.0f}%", ">= 70%", share >= 0.7))
    speed = _ratio(get("standard", "reference"), get("standard", "trie"))
    out.append(line("standard: speed-up over the reference", _x(speed), ">= 6x", speed and speed >= 6))
    t = get("standard", "trie")
    out.append(line("standard: trie median", _s(t), "< 0.65 s", t and t < 0.65))
    t = get("choice255", "trie")
    out.append(line("choice255: trie median (cold)", _s(t), "< 5 s", t and t < 5))
    for case in ("standard", "choice40"):
        speed = _ratio(get(case, "trie"), get(case, "trie_bf16"))
        out.append(line(f"{case}: bf16 trie speed-up over float32", _x(speed), ">= 2.5x", speed and speed >= 2.5))
    bound = _ratio(ceilings["bf16"], ceilings["f32"])
    if bound:  # what the matmuls allow: a speed-up above it needs the bf16 path more efficient than float32's
        out.append(f"  {'(bf16 / float32 matmul ceiling on this CPU)':<46} {_x(bound)}")
    t = get("choice255", "trie_bf16")
    out.append(line("choice255: bf16 trie median (cold)", _s(t), "< 5 s", t and t < 5))
    for case in ("choice255", "state20"):
        r, bf = rows.get((case, "trie_bf16")), ceilings["bf16"]
        if r and bf:
            share = r["flops"] / r["median"] / 1e9 / bf
            out.append(line(f"{case}: bf16 GFLOP/s / bf16 ceiling", f"{100 * share:.0f}%", ">= 60%", share >= 0.6))
    speed = _ratio(get("state20", "prompt_once"), get("state20", "trie"))
    out.append(line("state20: cold trie speed-up over prompt-once", _x(speed), ">= 5x", speed and speed >= 5))
    speed = _ratio(get("state20", "trie"), get("state20", "trie_warm"))
    out.append(line("state20: warm speed-up over cold", _x(speed), ">= 10x", speed and speed >= 10))
    return out


CEILINGS = {"f32": "ceiling", "bf16": "ceiling_bf16", "int8": "ceiling_int8"}  # name: bench/test_matmul.py's path


def _gflops(row: dict | None) -> float | None:
    return row and row["flops"] / row["median"] / 1e9


def _ratio(a, b):
    return a / b if a and b else None


def _x(v) -> str:
    return f"{v:.1f}x" if v else "-"


def _s(v) -> str:
    return f"{v:.3f} s" if v else "-"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else default_json()
    if not path.exists():
        print(f"no benchmark results at {path}; run `make bench` (or pytest bench --benchmark-only) first")
        return 1
    data = json.loads(path.read_text())
    rows = load(path)
    mm = rows.get(("matmul", "ceiling"))
    ceilings = {name: _gflops(rows.get(("matmul", path))) for name, path in CEILINGS.items()}
    model = next((r["model"] for r in rows.values() if "model" in r), "?")
    cpu = (mm or {}).get("cpu_model") or data["machine_info"].get("cpu", {}).get("brand_raw", "?")
    print(f"decide benchmarks: {model}, {cpu}, {data['datetime']}")
    if mm:
        print(f"CPU flags: {' '.join(mm.get('cpu_flags', [])) or '-'}")
        m, k, n = mm["shape"]
        print(f"float32 matmul ceiling ({m}x{k} @ {k}x{n}, MLX + the same BLAS): {ceilings['f32']:.1f} GFLOP/s")
    for name, label in (("bf16", "bfloat16"), ("int8", "int8")):
        if ceilings[name]:
            ratio = f", {ceilings[name] / ceilings['f32']:.2f}x float32's" if ceilings["f32"] else ""
            print(f"{label} matmul ceiling (the same shape, oneDNN): {ceilings[name]:.1f} GFLOP/s{ratio}")
    print()
    print("\n".join(scoring_table(rows, ceilings)))
    print("  t/ref, tok/ref, t/p-o: how many times faster / fewer tokens than the reference and prompt-once;")
    print("  ~: scaled from a sampled oracle run; max dp: largest probability difference from the oracles.")
    forest = forest_table(rows)
    if forest:
        print("\nforest build and gather (no model):")
        print("\n".join(forest))
    print("\ntargets (issue 'Trie engine'):")
    print("\n".join(targets(rows, ceilings)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
