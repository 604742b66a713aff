"""The wire fuzzer, long form: --examples frames (default 5,000) drawn from the committed JSON
Schema and mutations of them (`tests/wire_fuzz.py` has the strategies and the oracle), sent
to one daemon subprocess over a real websocket, plus one frame over the size limit. Prints
what was sent by kind, what came back (results, error codes, no answer, closes) and every
finding: a frame the daemon answered against the rules, or did not answer, or that killed it;
and any traceback in the daemon's log afterwards.

Random unless --seed is given (hypothesis prints the seed of a failing run to reproduce it).
The short form is `tests/unit/test_fuzz_wire.py`.

Usage: python bench/fuzz_wire.py [--examples N] [--seed N]
"""

import argparse
import sys
import time

from hypothesis import HealthCheck, given, seed, settings

from _harness import (
    bench_home,
    handle_sigterm,
    load_line,
    machine_line,
    model_server,
    running_daemon,
)
from tests.support import create_session
from tests.wire_fuzz import (
    SESSION_IDS,
    Finding,
    Frame,
    Fuzzer,
    frames,
    load_schema,
    oversize_frame,
    pid_alive,
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    handle_sigterm()
    load = load_line()
    schema = load_schema()
    findings: list[str] = []
    seconds: dict[str, float] = {}
    begin = time.perf_counter()
    with (
        model_server({"loop": True, "steps": [{"text": "ok"}]}) as server,
        bench_home(server.base_url) as home,
        running_daemon(home) as daemon,
    ):
        setup = daemon.client("fuzz-setup")
        SESSION_IDS[:] = [create_session(setup)]
        setup.close()
        pid = daemon.pid
        fuzzer = Fuzzer(daemon.port, daemon.token, pid, lambda: pid_alive(pid))

        def check(frame: Frame) -> None:
            started = time.perf_counter()
            try:
                fuzzer.check(frame)
            except Finding as finding:
                findings.append(str(finding))
            seconds[frame.kind] = seconds.get(frame.kind, 0.0) + time.perf_counter() - started

        @settings(
            max_examples=args.examples,
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(frames(schema))
        def send(frame: Frame) -> None:
            check(frame)

        if args.seed is not None:
            send = seed(args.seed)(send)
        try:
            send()
            check(oversize_frame())
        finally:
            fuzzer.close()
        alive = pid_alive(pid)
        log = home.log_path(home.workspace).read_text()
    duration = time.perf_counter() - begin
    tally = fuzzer.tally
    print(f"fuzz_wire: {sum(tally.kinds.values()):,} frames in {duration:.1f} s")
    print(f"  ({machine_line()}; at start: {load})")
    print("  sent, by kind (seconds spent):")
    for kind, count in sorted(tally.kinds.items(), key=lambda kv: -kv[1]):
        print(f"    {kind:<32} {count:>6}   {seconds.get(kind, 0.0):6.1f} s")
    print("  outcomes:")
    for outcome, count in sorted(tally.outcomes.items()):
        print(f"    {outcome:<32} {count:>6}")
    print("  error codes:")
    for code, count in sorted(tally.codes.items()):
        print(f"    {code:<32} {count:>6}")
    print(f"  daemon alive at the end: {'yes' if alive else 'NO'}")
    tracebacks = log.count("Traceback")
    print(f"  tracebacks in the daemon's log: {tracebacks}")
    if tracebacks:
        at = log.index("Traceback")
        print(log[max(0, at - 300) : at + 3000])
    print(f"  findings: {len(findings)}")
    for finding in findings[:50]:
        print(f"    - {finding[:600]}")
    return 0 if alive and not findings and not tracebacks else 1


if __name__ == "__main__":
    sys.exit(main())
