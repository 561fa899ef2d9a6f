#!/usr/bin/env python3
"""EROFS on a read-only checkpoint mount, one check per mutating syscall class.

pjdfstest cannot run on a checkpoint mount (it must create its own files
first), so this covers the read-only subset: every call that would change the
tree must fail with EROFS, and reads must keep working.

Usage: erofs.py MOUNTPOINT
The checkpoint must hold: file (bytes b"file\n", xattr user.k = b"v"),
dir/ (with dir/inner), empty/ (an empty directory), link -> file, fifo.
Prints one line per failed check, then `RESULT passed=N failed=M`.
"""

import errno
import os
import sys


def main() -> int:
    root = sys.argv[1]
    p = lambda name: os.path.join(root, name)  # noqa: E731
    passed = failed = 0

    def expect_erofs(what, fn):
        nonlocal passed, failed
        try:
            fn()
        except OSError as e:
            if e.errno == errno.EROFS:
                passed += 1
                return
            print(f"erofs: {what}: got {errno.errorcode.get(e.errno, e.errno)}, want EROFS")
            failed += 1
            return
        print(f"erofs: {what}: succeeded on a read-only mount")
        failed += 1

    def expect_ok(what, fn, want=None):
        nonlocal passed, failed
        try:
            got = fn()
        except OSError as e:
            print(f"erofs: {what}: {e}")
            failed += 1
            return
        if want is not None and got != want:
            print(f"erofs: {what}: got {got!r}, want {want!r}")
            failed += 1
            return
        passed += 1

    def open_close(path, flags):
        os.close(os.open(path, flags, 0o644))

    # open(2) for writing, creating, truncating.
    expect_erofs("open O_WRONLY", lambda: open_close(p("file"), os.O_WRONLY))
    expect_erofs("open O_RDWR", lambda: open_close(p("file"), os.O_RDWR))
    expect_erofs("open O_WRONLY|O_APPEND", lambda: open_close(p("file"), os.O_WRONLY | os.O_APPEND))
    expect_erofs("open O_RDONLY|O_TRUNC", lambda: open_close(p("file"), os.O_RDONLY | os.O_TRUNC))
    expect_erofs("open O_CREAT (new)", lambda: open_close(p("new"), os.O_CREAT | os.O_WRONLY))
    expect_erofs("open O_CREAT|O_EXCL (new)", lambda: open_close(p("new"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    expect_erofs("open O_TMPFILE", lambda: open_close(p("dir"), os.O_TMPFILE | os.O_WRONLY))
    # Names.
    expect_erofs("mkdir", lambda: os.mkdir(p("newdir")))
    expect_erofs("rmdir", lambda: os.rmdir(p("empty")))
    expect_erofs("unlink", lambda: os.unlink(p("file")))
    expect_erofs("unlink symlink", lambda: os.unlink(p("link")))
    expect_erofs("rename", lambda: os.rename(p("file"), p("renamed")))
    expect_erofs("rename over", lambda: os.rename(p("file"), p("dir/inner")))
    expect_erofs("rename dir", lambda: os.rename(p("dir"), p("dir2")))
    expect_erofs("link", lambda: os.link(p("file"), p("hardlink")))
    expect_erofs("symlink", lambda: os.symlink("file", p("newlink")))
    expect_erofs("mkfifo", lambda: os.mkfifo(p("newfifo")))
    expect_erofs("mknod S_IFREG", lambda: os.mknod(p("newnode"), 0o644 | 0o100000))
    # Attributes.
    expect_erofs("chmod", lambda: os.chmod(p("file"), 0o600))
    expect_erofs("chmod dir", lambda: os.chmod(p("dir"), 0o700))
    expect_erofs("chown", lambda: os.chown(p("file"), 1, 1))
    expect_erofs("chown fifo", lambda: os.chown(p("fifo"), 1, 1))
    expect_erofs("chmod fifo", lambda: os.chmod(p("fifo"), 0o600))
    expect_erofs("lchown symlink", lambda: os.lchown(p("link"), 1, 1))
    expect_erofs("utimes now", lambda: os.utime(p("file")))
    expect_erofs("utimes given", lambda: os.utime(p("file"), ns=(1, 1)))
    expect_erofs("truncate", lambda: os.truncate(p("file"), 0))
    expect_erofs("setxattr", lambda: os.setxattr(p("file"), "user.k", b"w"))
    expect_erofs("setxattr new", lambda: os.setxattr(p("file"), "user.new", b"w"))
    expect_erofs("removexattr", lambda: os.removexattr(p("file"), "user.k"))
    expect_erofs("setxattr dir", lambda: os.setxattr(p("dir"), "user.k", b"w"))
    # Reads keep working.
    def read_file():
        with open(p("file"), "rb") as f:
            return f.read()

    expect_ok("read", read_file, b"file\n")
    expect_ok("listdir", lambda: sorted(os.listdir(p("dir"))), ["inner"])
    expect_ok("readlink", lambda: os.readlink(p("link")), "file")
    expect_ok("getxattr", lambda: os.getxattr(p("file"), "user.k"), b"v")
    expect_ok("access R_OK", lambda: os.access(p("file"), os.R_OK), True)
    expect_ok("access W_OK is false", lambda: os.access(p("file"), os.W_OK), False)
    expect_ok("statvfs ST_RDONLY", lambda: bool(os.statvfs(root).f_flag & os.ST_RDONLY), True)

    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
