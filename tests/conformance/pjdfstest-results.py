#!/usr/bin/env python3
"""Select pjdfstest cases and count a run against the exclude list.

pjdfstest has no exclude option and no way to list its cases, so run.sh runs
it once on a scratch directory of the native file system to learn every case
name, runs the selected cases on the mount with `-e NAME...`, and counts:

  pjdfstest-results.py select ENUM_LOG EXCLUDES   # the case names to run
  pjdfstest-results.py count LOG EXCLUDES ENUM_LOG RUNS

LOG may hold several runs (run.sh runs the EROFS cases on their own: another
case leaks a descriptor open for writing, which makes every later
`remount,ro` fail with EBUSY, on any file system); each must end in
pjdfstest's summary line, RUNS of them.

EXCLUDES has one `name  # reason` a line. pjdfstest prints one line per
case, `<name> <padding> ok|FAILED|skipped`, then indented detail lines.
`count` prints each failure with its detail, then
`RESULT passed=N failed=N skipped=N` (skipped includes the excluded cases,
which do not run). It exits 1 if a case failed, a selected case did not run,
or the run did not reach pjdfstest's summary line.
"""

import re
import sys

CASE = re.compile(r"^(\S+::\S+)\s+(ok|FAILED|skipped|failed as expected|PASSED UNEXPECTEDLY)\s*$")


def read_excludes(path):
    excludes = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, reason = line.partition("#")
            if not sep or not reason.strip():
                sys.exit(f"{path}:{n}: an exclude needs a reason: `name  # reason`")
            excludes[name.strip()] = reason.strip()
    return excludes


def cases(log_path):
    """(name, status, detail lines) for each case line of a pjdfstest log."""
    with open(log_path, errors="replace") as f:
        lines = f.read().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = CASE.match(line)
        if not m:
            continue
        detail = []
        for more in lines[i + 1 :]:
            if not more.startswith(("\t", " ")) or CASE.match(more):
                break
            detail.append(more.strip())
        out.append((m.group(1), m.group(2), detail))
    finished = sum(1 for l in lines if l.startswith("Summary:"))
    return out, finished


def select(enum_log, excludes_path):
    excludes = read_excludes(excludes_path)
    found, finished = cases(enum_log)
    if not finished or not found:
        sys.exit("pjdfstest-results.py: the enumeration run did not finish")
    names = [name for name, _, _ in found]
    for name in sorted(set(excludes) - set(names)):
        print(f"pjdfstest: note: excluded {name} is not a pjdfstest case", file=sys.stderr)
    for name in names:
        if name not in excludes:
            # -e compares the full path of the test function.
            print(f"pjdfstest::tests::{name}")
    return 0


def count(log, excludes_path, enum_log, runs):
    excludes = read_excludes(excludes_path)
    all_names = {name for name, _, _ in cases(enum_log)[0]}
    found, finished = cases(log)
    passed = failed = skipped = 0
    for name, status, detail in found:
        if status in ("ok", "PASSED UNEXPECTEDLY"):
            passed += 1
        elif status == "skipped":
            skipped += 1
        else:
            failed += 1
            print(f"pjdfstest: FAILED {name}")
            for d in [d for d in detail if d][:4]:
                print(f"    {d}")
    excluded = len(all_names & set(excludes))
    missing = all_names - set(excludes) - {name for name, _, _ in found}
    if missing:
        print(f"pjdfstest: {len(missing)} selected cases did not run, e.g. {sorted(missing)[0]}")
        failed += 1
    if finished != runs:
        print(f"pjdfstest: {runs - finished} of {runs} runs did not finish (no summary line)")
        failed += 1
    print(
        f"pjdfstest (fork mount): {passed} passed, {failed} failed, "
        f"{skipped + excluded} skipped ({skipped} by pjdfstest, {excluded} excluded)"
    )
    print(f"RESULT passed={passed} failed={failed} skipped={skipped + excluded}")
    return 1 if failed else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "select":
        return select(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 6 and sys.argv[1] == "count":
        return count(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
