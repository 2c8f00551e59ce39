"""`make check-lanes`: each server lane executes what the main lane executes of the Redis layer.

A server lane (`make test-valkey`, `make test-redis8`) runs only the tests marked `server`; this
check keeps that selection from drifting. After lanes ran with COVERAGE=1 (CI does), it reads
each lane's coverage data (``.coverage-lanes/<lane>/data*``: every Python process of the lane)
and the Lua scripts its servers loaded (``.coverage-lanes/<lane>/scripts``), and fails when

- a module of ``spark_eventbus/redisio/`` is covered by a server lane more than ``--module-gap``
  points and more than ``--module-lines`` lines below the main lane, or ``redisio/`` as a whole
  more than ``--total-gap`` points below;
- a Lua script of ``spark_eventbus/redisio/lua/`` was not run by some lane (the main lane
  included).

Usage: scripts/check_lanes.py DIR MAIN_LANE LANE [LANE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parent.parent
REDISIO = ROOT / "spark_eventbus" / "redisio"
LUA = ROOT / "spark_eventbus" / "redisio" / "lua"


def lane_coverage(lane: Path) -> dict[str, tuple[int, int]]:
    """Per module of redisio/: (statements, executed) in ``lane``'s combined data."""
    data_files = sorted(str(p) for p in lane.glob("data.*"))
    if not data_files:
        raise SystemExit(f"check-lanes: no coverage data in {lane}: run the lane with COVERAGE=1")
    cov = coverage.Coverage(data_file=str(lane / "data"), config_file=str(ROOT / ".coveragerc"))
    cov.combine(data_files, keep=True)
    cov.load()
    out: dict[str, tuple[int, int]] = {}
    for module in sorted(REDISIO.glob("*.py")):  # a module never imported: all lines missing
        _, statements, _, missing, _ = cov.analysis2(str(module))
        out[module.name] = (len(statements), len(statements) - len(missing))
    return out


def scripts_run(lane: Path) -> set[str]:
    log = lane / "scripts"
    return set(log.read_text().split()) if log.exists() else set()


def pct(statements: int, executed: int) -> float:
    return 100.0 * executed / statements if statements else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("main")
    ap.add_argument("lanes", nargs="+")
    ap.add_argument("--module-gap", type=float, default=10.0)
    # a few lines a server words differently (an error text parsed) are not a selection gap
    ap.add_argument("--module-lines", type=int, default=10)
    ap.add_argument("--total-gap", type=float, default=5.0)
    args = ap.parse_args()
    names = [args.main, *args.lanes]
    covs = {n: lane_coverage(args.dir / n) for n in names}
    failures: list[str] = []
    print(f"{'redisio/ module':<18}" + "".join(f"{n:>9}" for n in names))
    for module in sorted(covs[args.main]):
        row = {n: pct(*covs[n][module]) for n in names}
        print(f"{module:<18}" + "".join(f"{row[n]:>8.1f}%" for n in names))
        for n in args.lanes:
            lines_below = covs[args.main][module][1] - covs[n][module][1]
            if row[n] < row[args.main] - args.module_gap and lines_below > args.module_lines:
                failures.append(f"{n}: redisio/{module} {row[n]:.1f}% of lines, the main lane "
                                f"{row[args.main]:.1f}% ({lines_below} lines, more than "
                                f"{args.module_gap:g} points below): mark the tests that reach "
                                "it `server`")
    totals = {n: pct(sum(s for s, _ in covs[n].values()), sum(e for _, e in covs[n].values()))
              for n in names}
    print(f"{'redisio/ total':<18}" + "".join(f"{totals[n]:>8.1f}%" for n in names))
    for n in args.lanes:
        if totals[n] < totals[args.main] - args.total_gap:
            failures.append(f"{n}: redisio/ {totals[n]:.1f}% of lines, the main lane "
                            f"{totals[args.main]:.1f}% (more than {args.total_gap:g} points below)")
    scripts = sorted(p.stem for p in LUA.glob("*.lua") if not p.stem.startswith("_"))
    print(f"{'Lua scripts run':<18}" + "".join(
        f"{len(scripts_run(args.dir / n) & set(scripts)):>6}/{len(scripts)}" for n in names))
    for n in names:
        missing = sorted(set(scripts) - scripts_run(args.dir / n))
        if missing:
            failures.append(f"{n}: never ran {', '.join(s + '.lua' for s in missing)}")
    for f in failures:
        print(f"check-lanes: {f}", file=sys.stderr)
    print("check-lanes: " + ("FAILED" if failures else "every lane runs every redisio/ module and "
                             "Lua script"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
