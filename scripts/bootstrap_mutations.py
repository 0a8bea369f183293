#!/usr/bin/env python3
"""Break each bootstrap behaviour once and check that the test named for it fails (a mutation run).

    .venv/bin/python scripts/bootstrap_mutations.py          # every mutation
    .venv/bin/python scripts/bootstrap_mutations.py 3 17     # only these

Copies the tracked files to a temporary directory, applies one change at a time there (never in the
checkout) and runs the named tests against the copy. Prints CAUGHT or MISSED per mutation; exits 1 if any
was missed. Known equivalent mutant: the log labeller's "$1" and "$HPCC_STEP" are the same value.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from bootstrap_mutation_cases import EQUIVALENT, MUTATIONS  # beside this script: its directory is on sys.path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")


def main(selected: list[str]) -> int:
    missed = 0
    with tempfile.TemporaryDirectory(prefix="hpcc-mut-") as tmp:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
        for name in filter(None, files.stdout.split("\0")):
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / name).is_file():
                (Path(tmp) / name).write_bytes((ROOT / name).read_bytes())
        for i, (f, old, new, tests) in enumerate(MUTATIONS):
            if selected and str(i) not in selected:
                continue
            path = Path(tmp) / f
            orig = path.read_text()
            if old not in orig:
                print(f"[{i}] STALE: {f} no longer has {old!r}")
                missed += 1
                continue
            path.write_text(orig.replace(old, new, 1))
            try:
                run = subprocess.run(
                    f"PYTHONPATH={tmp} timeout 300 {PY} -m pytest -q -x -p no:cacheprovider {tests}",
                    shell=True,
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                )
            finally:
                path.write_text(orig)
            caught = run.returncode != 0
            missed += not caught and new not in EQUIVALENT
            print(f"[{i}] {'CAUGHT' if caught else 'MISSED'}: {f}: {old[:60]!r} -> {new[:40]!r} ({tests})", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
