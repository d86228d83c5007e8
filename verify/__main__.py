"""``python -m verify [--profile short|long] [--minutes M] [--out DIR]`` runs the checker;
``python -m verify reader-case [--profile ...]`` runs only the reader case;
``python -m verify check RUN_DIR`` checks a kept run again from its history files."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

from verify.faults import FaultKind
from verify.profiles import PROFILES
from verify.run import run, verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify", description=__doc__)
    parser.add_argument(
        "command", nargs="?", choices=["run", "reader-case", "check"], default="run"
    )
    parser.add_argument("run_dir", nargs="?", type=Path, help="check: the kept run's directory")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument(
        "--minutes", type=float, help="load under faults (the profile's by default)"
    )
    parser.add_argument("--out", type=Path, default=Path("verify-runs"), help="where runs are kept")
    parser.add_argument("--no-reader-case", action="store_true", help="skip the reader case")
    parser.add_argument("--seed", type=int, help="the faults' random seed")
    parser.add_argument(
        "--faults",
        help="comma-separated fault kinds to inject (default: all): "
        + ", ".join(k.value for k in FaultKind),
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("pulsar").setLevel(logging.WARNING)
    if args.command == "check":
        if args.run_dir is None:
            parser.error("check needs the run's directory")
        outcome = verdict(args.run_dir)
    else:
        profile = PROFILES[args.profile]
        if args.minutes is not None:
            profile = profile.with_minutes(args.minutes)
        if args.seed is not None:
            profile = dataclasses.replace(profile, seed=args.seed)
        if args.faults:
            kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
            unknown = set(kinds) - {k.value for k in FaultKind}
            if unknown:
                parser.error(f"unknown fault kinds: {sorted(unknown)}")
            profile = dataclasses.replace(profile, faults=kinds)
        stamp = time.strftime(f"%Y%m%d-%H%M%S-{args.command}-{profile.name}")
        run_dir = (args.out / stamp).resolve()
        only_reader_case = args.command == "reader-case"
        outcome = run(
            profile,
            run_dir,
            cluster=not only_reader_case,
            reader_case=only_reader_case or not args.no_reader_case,
        )
    print("\n".join(outcome.lines))
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
