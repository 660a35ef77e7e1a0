"""Write tests/module-seconds.json from a run's JUnit report: how long each test module
took, set-up and tear-down included, which `make test` uses to hand the longest modules
out first (tests/support/schedule.py).

    python -m hack.module_seconds .test-results.xml     # `make test-timings` runs it

The report must count each test's whole time (`-o junit_duration_report=total`, as
`make test` writes it): a module-scoped fixture's start-up is in its first test's set-up.
"""
from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECONDS_FILE = ROOT / "tests" / "module-seconds.json"


def module_path(classname: str, root: Path = ROOT) -> str | None:
    """tests.unit.test_x.TestY -> tests/unit/test_x.py (the longest prefix that is a file)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (root / candidate).is_file():
            return candidate.as_posix()
    return None


def module_seconds(report: Path, root: Path = ROOT) -> dict[str, float]:
    totals: dict[str, float] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = module_path(case.get("classname", ""), root)
        if module is not None:
            totals[module] = totals.get(module, 0.0) + float(case.get("time") or 0)
    return {m: round(s, 1) for m, s in sorted(totals.items(), key=lambda kv: -kv[1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="JUnit XML of a whole `make test` run")
    parser.add_argument("--out", type=Path, default=SECONDS_FILE)
    args = parser.parse_args(argv)
    seconds = module_seconds(args.report)
    args.out.write_text(json.dumps(
        {"about": "seconds per test module, from hack/module_seconds.py; orders make test",
         "modules": seconds}, indent=1) + "\n")
    print(f"wrote {args.out}: {len(seconds)} modules, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
