"""Run `etj` with its wall clock skewed, as on a machine whose clock is off (tests of
clock skew between operator replicas).

    python -m elastic_devtools.localcluster.skewed_clock SECONDS -- <etj arguments>

Before anything else is imported, `time.time`, `time.time_ns` and `datetime.datetime`'s
`now`, `utcnow` and `today` are made to report the real time plus SECONDS (negative:
behind). Every timestamp the process writes (a Lease's renewTime, a condition's
lastTransitionTime) is off by that much. Monotonic clocks are left alone: a skewed clock
still runs at the right rate. TLS certificate checks (OpenSSL) keep the real time.
"""
from __future__ import annotations

import datetime as _dt
import sys
import time as _time
from typing import Any


def install(seconds: float) -> None:
    real_time, real_time_ns = _time.time, _time.time_ns
    offset = _dt.timedelta(seconds=seconds)
    offset_ns = int(seconds * 1e9)

    class SkewedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz: _dt.tzinfo | None = None) -> Any:
            return super().now(tz) + offset

        @classmethod
        def utcnow(cls) -> Any:
            return super().utcnow() + offset

        @classmethod
        def today(cls) -> Any:
            return super().today() + offset

    _time.time = lambda: real_time() + seconds
    _time.time_ns = lambda: real_time_ns() + offset_ns
    _dt.datetime = SkewedDatetime  # type: ignore[misc]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        print("usage: python -m elastic_devtools.localcluster.skewed_clock SECONDS -- "
              "<etj arguments>", file=sys.stderr)
        return 2
    install(float(argv[0]))
    from elastic_api.etj_cli import main as etj_main

    return etj_main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
