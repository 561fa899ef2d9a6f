#!/usr/bin/env python3
"""List pjdfstest's cases, and count a run on the mount against native.

pjdfstest cannot list its cases, so run.sh runs it once in a scratch
directory of the native file system (ENUM_LOG). That run gives every case
name and the native baseline: how many cases pass natively with the same
configuration. run.sh then runs every case on the mount by exact name
(`-e NAME...`) and counts:

  pjdfstest-results.py select ENUM_LOG             # the case names to run
  pjdfstest-results.py count LOG ENUM_LOG RUNS

LOG may hold several runs (run.sh runs the EROFS cases on their own: another
case leaks a descriptor open for writing, which makes every later
`remount,ro` fail with EBUSY, on any file system); each must end in
pjdfstest's summary line, RUNS of them.

pjdfstest prints one line per case, `<name> <padding> ok|FAILED|skipped`,
then indented detail lines. `count` prints each failure with its detail, the
native and mount totals, then `RESULT passed=N failed=N skipped=N`. It exits
1 if a case failed, a case did not run, a run did not reach pjdfstest's
summary line, or fewer cases passed on the mount than natively (each case
that passed natively and not on the mount is named). Nothing is excluded.
"""

import re
import sys

CASE = re.compile(r"^(\S+::\S+)\s+(ok|FAILED|skipped|failed as expected|PASSED UNEXPECTEDLY)\s*$")
PASSED = ("ok", "PASSED UNEXPECTEDLY")


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


def select(enum_log):
    found, finished = cases(enum_log)
    if not finished or not found:
        sys.exit("pjdfstest-results.py: the enumeration run did not finish")
    for name, _, _ in found:
        # -e compares the full path of the test function.
        print(f"pjdfstest::tests::{name}")
    return 0


def count(log, enum_log, runs):
    native, _ = cases(enum_log)
    native_ok = {name for name, status, _ in native if status in PASSED}
    all_names = {name for name, _, _ in native}
    found, finished = cases(log)
    passed = failed = skipped = 0
    mount_ok = set()
    for name, status, detail in found:
        if status in PASSED:
            passed += 1
            mount_ok.add(name)
        elif status == "skipped":
            skipped += 1
        else:
            failed += 1
            print(f"pjdfstest: FAILED {name}")
            for d in [d for d in detail if d][:4]:
                print(f"    {d}")
    missing = all_names - {name for name, _, _ in found}
    if missing:
        print(f"pjdfstest: {len(missing)} cases did not run, e.g. {sorted(missing)[0]}")
        failed += 1
    if finished != runs:
        print(f"pjdfstest: {runs - finished} of {runs} runs did not finish (no summary line)")
        failed += 1
    print(
        f"pjdfstest (native scratch dir): {len(native_ok)} passed, "
        f"{len(native) - len(native_ok)} not passed"
    )
    print(f"pjdfstest (fork mount): {passed} passed, {failed} failed, {skipped} skipped")
    if passed < len(native_ok):
        print(f"pjdfstest: the fork mount passed fewer cases than native ({passed} < {len(native_ok)})")
        for name in sorted(native_ok - mount_ok):
            print(f"    passed natively, not on the mount: {name}")
        failed += 1
    print(f"RESULT passed={passed} failed={failed} skipped={skipped}")
    return 1 if failed else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "select":
        return select(sys.argv[2])
    if len(sys.argv) == 5 and sys.argv[1] == "count":
        return count(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
