#!/usr/bin/env python3
"""Compare two xfstests runs (ext4 and a storefs fork), for tests/conformance/xfstests.sh.

    xfstests-results.py EXT4_RESULT_XML FORK_RESULT_XML TESTS_FILE CI_LIST_OR_EMPTY

Reads xfstests' `-R xunit-quiet` reports (result.xml), one test name a line
in TESTS_FILE (the tests asked for; when it names none, as with `-g quick`,
the union of both sides' reports). Each side may be several reports joined by ":" (the
runs of one list in chunks: A/result.xml:B/result.xml); a test in more than
one report of a side takes the last one's result.
A test asked for that a report does not hold is "missing" (the run stopped or
was killed before it). Prints a line per test (ext4 result, fork result, the
seconds xfstests timed on each, and the fork's not-run reason or failure
message), the counts, the tests that pass
on ext4 and fail on the fork, and those that pass on ext4 and do not run on the
fork, with xfstests' reason, then those reasons with how many tests each. The last line is
`N passed, N failed, N not run on the fork (ext4: N passed, N failed, N not run)`.

Exit status 1 when a test of the CI list (CI_LIST_OR_EMPTY, a file) does not
pass on the fork, or when any test passes on ext4 and does not pass on the
fork; else 0.
"""
import html
import re
import sys

CASE = re.compile(r'<testcase\b([^>]*?)(/>|>(.*?)</testcase>)', re.S)
NAME = re.compile(r'\bname="([^"]+)"')
TIME = re.compile(r'\btime="([0-9.]+)"')
SKIP = re.compile(r'<skipped(?:\s+message="([^"]*)")?\s*/>', re.S)
FAIL = re.compile(r'<failure(?:\s+message="([^"]*)")?[^>]*/?>', re.S)


def read_reports(paths):
    """read_report of each of PATHS (joined by ":"), merged; the last one wins."""
    out = {}
    for path in paths.split(":"):
        if path:
            out.update(read_report(path))
    return out


def read_report(path):
    """{test: (result, message, seconds)}; result is pass, fail or notrun."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return {}
    out = {}
    for m in CASE.finditer(text):
        n, t = NAME.search(m.group(1)), TIME.search(m.group(1))
        if not n:
            continue
        name, body = n.group(1), m.group(3) or ""
        secs = t.group(1) if t else "?"
        f = FAIL.search(body)
        s = SKIP.search(body)
        if f:
            out[name] = ("fail", html.unescape(f.group(1) or ""), secs)
        elif s:
            out[name] = ("notrun", html.unescape(s.group(1) or ""), secs)
        else:
            out[name] = ("pass", "", secs)
    return out


def read_list(path):
    names = []
    if not path:
        return names
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def main():
    ext4_xml, fork_xml, tests_file, ci_file = sys.argv[1:5]
    ext4 = read_reports(ext4_xml)
    fork = read_reports(fork_xml)
    tests = read_list(tests_file)
    if not tests:
        tests = sorted(set(ext4) | set(fork))
    ci = set(read_list(ci_file))

    def res(d, t):
        return d.get(t, ("missing", "not in the report: the run stopped before it", "-"))

    width = max([len(t) for t in tests] + [4])
    print(f"{'test':<{width}}  {'ext4':<7}  {'fork':<7}  {'s ext4':>6}  {'s fork':>6}  fork's message")
    counts = {"ext4": {}, "fork": {}}
    pass_fail, pass_notrun, bad_ci, ext4_bad_ci = [], [], [], []
    for t in tests:
        (e, em, es), (f, fm, fs) = res(ext4, t), res(fork, t)
        counts["ext4"][e] = counts["ext4"].get(e, 0) + 1
        counts["fork"][f] = counts["fork"].get(f, 0) + 1
        print(f"{t:<{width}}  {e:<7}  {f:<7}  {es:>6}  {fs:>6}  {fm}".rstrip())
        if e == "pass" and f in ("fail", "missing"):
            pass_fail.append((t, fm))
        elif e == "pass" and f == "notrun":
            pass_notrun.append((t, fm))
        if t in ci and f != "pass":
            bad_ci.append(t)
        if t in ci and e != "pass":
            ext4_bad_ci.append((t, e, em))

    def summary(c):
        s = f"{c.get('pass', 0)} passed, {c.get('fail', 0)} failed, {c.get('notrun', 0)} not run"
        if c.get("missing"):
            s += f", {c['missing']} missing"
        return s

    print(f"ext4: {summary(counts['ext4'])}")
    print(f"fork: {summary(counts['fork'])}")
    print(f"ext4 pass → fork fail: {len(pass_fail)}")
    for t, m in pass_fail:
        print(f"  {t}: {m}")
    print(f"ext4 pass → fork not run: {len(pass_notrun)}")
    for t, m in pass_notrun:
        print(f"  {t}: {m}")
    reasons = {}
    for t, m in pass_notrun:
        reasons.setdefault(m, []).append(t.split("/")[-1])
    print(f"ext4 pass → fork not run, by reason: {len(reasons)}")
    for m, ts in sorted(reasons.items(), key=lambda r: (-len(r[1]), r[0])):
        print(f"  {len(ts)}  {m}: {' '.join(ts)}")
    if ci:
        print(f"CI list tests not passing on the fork: {len(bad_ci)}"
              + (f" ({' '.join(bad_ci)})" if bad_ci else ""))
        for t, e, m in ext4_bad_ci:
            print(f"  warning: CI list test {t} is '{e}' on ext4 here ({m}); the baseline changed")
    bad = bool(bad_ci or pass_fail or pass_notrun)
    print(f"{summary(counts['fork'])} on the fork (ext4: {summary(counts['ext4'])})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
