//! Measurement prototype for issue 18: what FUSE over io_uring saves per
//! round trip, seen from Rust. NOT part of storefs (its own workspace; CI
//! does not build it) and not a transport for it: a trivial read-only file
//! system (a root directory with one file, `f`) served either over the
//! classic `/dev/fuse` read/write loop (N threads on one fd, as fuser does
//! for storefs) or over FUSE-over-io_uring (one ring per CPU, pinned, as the
//! kernel's per-CPU queues expect; a `/dev/fuse` thread stays for what the
//! kernel never sends through the rings: FORGET and INTERRUPT).
//!
//!     uring-proto MOUNTPOINT classic [THREADS]   (default 2)
//!     uring-proto MOUNTPOINT uring [DEPTH]       (default 8 entries per queue)
//!
//! `URING_PROTO_DEFER=1` sets the rings up with SINGLE_ISSUER and
//! DEFER_TASKRUN.
//!
//! Runs in the foreground until the mount is unmounted (`umount MOUNTPOINT`).
//! Needs root (it mounts with mount(2)) and, for `uring`,
//! /sys/module/fuse/parameters/enable_uring = Y; without it the kernel does
//! not offer FUSE_OVER_IO_URING and the prototype says so and exits.
//! Kernel reference: Documentation/filesystems/fuse/fuse-io-uring.rst
//! (https://docs.kernel.org/filesystems/fuse-io-uring.html).
//!
//! Only what a stat loop, `cat` and `ls` need is answered: INIT, LOOKUP,
//! GETATTR, OPEN, OPENDIR, READ, READDIR (empty), RELEASE(DIR), FLUSH,
//! STATFS, ACCESS, FORGET, BATCH_FORGET, DESTROY; the rest gets ENOSYS.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use io_uring::{IoUring, cqueue, opcode, squeue, types};

// ------------------------------------------------------------- FUSE ABI bits

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_OPEN: u32 = 14;
const FUSE_READ: u32 = 15;
const FUSE_STATFS: u32 = 17;
const FUSE_RELEASE: u32 = 18;
const FUSE_FLUSH: u32 = 25;
const FUSE_INIT: u32 = 26;
const FUSE_OPENDIR: u32 = 27;
const FUSE_READDIR: u32 = 28;
const FUSE_RELEASEDIR: u32 = 29;
const FUSE_ACCESS: u32 = 34;
const FUSE_DESTROY: u32 = 38;
const FUSE_BATCH_FORGET: u32 = 42;

const FUSE_ASYNC_READ: u32 = 1 << 0;
const FUSE_BIG_WRITES: u32 = 1 << 5;
const FUSE_INIT_EXT: u32 = 1 << 30;
/// FUSE_OVER_IO_URING is bit 41 of the 64-bit flags: bit 9 of `flags2`.
const FUSE_OVER_IO_URING_FLAGS2: u32 = 1 << (41 - 32);

const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// The per-entry header the kernel fills: `in_out` (128), `op_in` (128),
/// `fuse_uring_ent_in_out` (32).
const RING_HEADER: usize = 128 + 128 + 32;
const MAX_WRITE: u32 = 128 * 1024;
/// At least the kernel's max(max_write, max_pages * PAGE_SIZE).
const PAYLOAD: usize = 256 * 1024;
const BUF: usize = PAYLOAD + 4096;

const ROOT: u64 = 1;
const FILE: u64 = 2;
const FILE_DATA: &[u8] = b"hello from uring-proto\n";

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

struct InHeader {
    opcode: u32,
    unique: u64,
    nodeid: u64,
}

fn in_header(b: &[u8]) -> InHeader {
    InHeader {
        opcode: u32_at(b, 4),
        unique: u64_at(b, 8),
        nodeid: u64_at(b, 16),
    }
}

/// The size of the op-specific struct that precedes the payload in a
/// classic request (the ring delivers it apart, in `op_in`).
fn op_in_len(opcode: u32) -> usize {
    match opcode {
        FUSE_GETATTR => 16,
        FUSE_READ | FUSE_READDIR => 40,
        FUSE_OPEN | FUSE_OPENDIR | FUSE_ACCESS | FUSE_FORGET | FUSE_BATCH_FORGET => 8,
        FUSE_RELEASE | FUSE_RELEASEDIR | FUSE_FLUSH => 24,
        _ => 0,
    }
}

/// fuse_attr (88 bytes).
fn attr(v: &mut Vec<u8>, ino: u64) {
    let (mode, size, nlink) = if ino == ROOT {
        (libc::S_IFDIR | 0o755, 0, 2)
    } else {
        (libc::S_IFREG | 0o644, FILE_DATA.len() as u64, 1)
    };
    put64(v, ino);
    put64(v, size);
    put64(v, size.div_ceil(512));
    for _ in 0..3 {
        put64(v, 1_700_000_000); // atime, mtime, ctime
    }
    for _ in 0..3 {
        put32(v, 0);
    }
    put32(v, mode);
    put32(v, nlink);
    put32(v, 0); // uid
    put32(v, 0); // gid
    put32(v, 0); // rdev
    put32(v, 4096); // blksize
    put32(v, 0); // flags
}

/// What the file system answers: Ok(reply bytes after the out header),
/// Err(errno), or None for requests that take no reply (FORGET).
fn handle(h: &InHeader, op_in: &[u8], payload: &[u8]) -> Option<Result<Vec<u8>, i32>> {
    let mut v = Vec::with_capacity(128);
    let r = match h.opcode {
        FUSE_FORGET | FUSE_BATCH_FORGET => return None,
        FUSE_LOOKUP => {
            let name = payload.split(|&c| c == 0).next().unwrap_or(&[]);
            if h.nodeid == ROOT && name == b"f" {
                put64(&mut v, FILE); // nodeid
                put64(&mut v, 0); // generation
                put64(&mut v, 0); // entry_valid: 0 s, caches off
                put64(&mut v, 0); // attr_valid
                put32(&mut v, 0);
                put32(&mut v, 0);
                attr(&mut v, FILE);
                Ok(v)
            } else {
                Err(libc::ENOENT)
            }
        }
        FUSE_GETATTR => {
            if h.nodeid != ROOT && h.nodeid != FILE {
                Err(libc::ENOENT)
            } else {
                put64(&mut v, 0); // attr_valid: 0 s, caches off
                put32(&mut v, 0);
                put32(&mut v, 0);
                attr(&mut v, h.nodeid);
                Ok(v)
            }
        }
        FUSE_OPEN | FUSE_OPENDIR => {
            put64(&mut v, 0); // fh
            put32(&mut v, 0); // open_flags
            put32(&mut v, 0); // backing_id
            Ok(v)
        }
        FUSE_READ => {
            let off = (u64_at(op_in, 8) as usize).min(FILE_DATA.len());
            let size = u32_at(op_in, 16) as usize;
            let end = (off + size).min(FILE_DATA.len());
            Ok(FILE_DATA[off..end].to_vec())
        }
        FUSE_READDIR => Ok(v), // empty listing
        FUSE_RELEASE | FUSE_RELEASEDIR | FUSE_FLUSH | FUSE_ACCESS | FUSE_DESTROY => Ok(v),
        FUSE_STATFS => {
            for _ in 0..5 {
                put64(&mut v, 0);
            }
            put32(&mut v, 4096); // bsize
            put32(&mut v, 255); // namelen
            put32(&mut v, 4096); // frsize
            put32(&mut v, 0);
            for _ in 0..6 {
                put32(&mut v, 0);
            }
            Ok(v)
        }
        _ => Err(libc::ENOSYS),
    };
    Some(r)
}

// ------------------------------------------------------------- /dev/fuse

fn write_reply(dev: &File, unique: u64, r: Result<Vec<u8>, i32>) {
    let (err, body) = match r {
        Ok(b) => (0i32, b),
        Err(e) => (-e, Vec::new()),
    };
    let mut msg = Vec::with_capacity(OUT_HEADER + body.len());
    put32(&mut msg, (OUT_HEADER + body.len()) as u32);
    msg.extend_from_slice(&err.to_le_bytes());
    put64(&mut msg, unique);
    msg.extend_from_slice(&body);
    // ENOENT: the request was interrupted; nothing to do.
    let _ = (&*dev).write(&msg);
}

/// Serve /dev/fuse until the mount goes away (read gives ENODEV).
fn classic_loop(dev: Arc<File>) {
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match (&*dev).read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return,
            Err(e) => {
                eprintln!("uring-proto: reading /dev/fuse: {e}");
                return;
            }
        };
        let msg = &buf[..n];
        let h = in_header(msg);
        let body = &msg[IN_HEADER..];
        let k = op_in_len(h.opcode).min(body.len());
        if let Some(r) = handle(&h, &body[..k], &body[k..]) {
            write_reply(&dev, h.unique, r);
        }
    }
}

/// Read INIT, answer it (asking for io_uring if `uring`); returns whether
/// the kernel offered io_uring.
fn init(dev: &File, uring: bool) -> Result<bool, String> {
    let mut buf = vec![0u8; BUF];
    let n = (&*dev)
        .read(&mut buf)
        .map_err(|e| format!("reading INIT: {e}"))?;
    let h = in_header(&buf[..n]);
    if h.opcode != FUSE_INIT {
        return Err(format!("expected INIT, got opcode {}", h.opcode));
    }
    let b = &buf[IN_HEADER..n];
    let (major, minor, max_readahead, flags) =
        (u32_at(b, 0), u32_at(b, 4), u32_at(b, 8), u32_at(b, 12));
    let flags2 = if flags & FUSE_INIT_EXT != 0 {
        u32_at(b, 16)
    } else {
        0
    };
    let offered = flags2 & FUSE_OVER_IO_URING_FLAGS2 != 0;
    if major != 7 || minor < 36 {
        return Err(format!("kernel FUSE {major}.{minor}: too old"));
    }
    let mut v = Vec::new();
    put32(&mut v, 7);
    put32(&mut v, minor.min(45));
    put32(&mut v, max_readahead);
    put32(
        &mut v,
        (FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_INIT_EXT) & flags,
    );
    v.extend_from_slice(&16u16.to_le_bytes()); // max_background
    v.extend_from_slice(&12u16.to_le_bytes()); // congestion_threshold
    put32(&mut v, MAX_WRITE);
    put32(&mut v, 1); // time_gran
    v.extend_from_slice(&32u16.to_le_bytes()); // max_pages
    v.extend_from_slice(&0u16.to_le_bytes()); // map_alignment
    put32(
        &mut v,
        if uring && offered {
            FUSE_OVER_IO_URING_FLAGS2
        } else {
            0
        },
    );
    put32(&mut v, 0); // max_stack_depth
    v.resize(64, 0);
    write_reply(dev, h.unique, Ok(v));
    Ok(offered)
}

// ------------------------------------------------------------- io_uring

/// One ring entry: the 288-byte header, the payload buffer, and the two
/// iovecs the kernel reads at REGISTER.
struct Ent {
    header: Vec<u8>,
    payload: Vec<u8>,
    iov: [libc::iovec; 2],
}

fn cmd_req(qid: u16, commit_id: u64) -> [u8; 80] {
    // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 pad[6]; }
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_le_bytes());
    c[16..18].copy_from_slice(&qid.to_le_bytes());
    c
}

fn sqe(
    fd: i32,
    op: u32,
    qid: u16,
    commit_id: u64,
    iov: Option<*const libc::iovec>,
    idx: usize,
) -> squeue::Entry128 {
    let mut b = opcode::UringCmd80::new(types::Fd(fd), op).cmd(cmd_req(qid, commit_id));
    if let Some(p) = iov {
        b = b.addr(Some(p as u64));
    }
    let e = b.build().user_data(idx as u64);
    if iov.is_none() {
        return e;
    }
    // io-uring 0.7's UringCmd80 has no `len`; REGISTER needs sqe->len = 2
    // (the number of iovecs). Entry128 is repr(C): the 64-byte SQE, then 64
    // bytes; `len` is the u32 at offset 24 of the SQE.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&2u32.to_le_bytes());
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

fn pin_to(cpu: usize) {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// One queue: pinned to `qid`'s CPU, registers `depth` entries, then
/// answers each completed fetch with COMMIT_AND_FETCH of its reply.
fn ring_loop(fd: i32, qid: u16, depth: usize) {
    pin_to(qid as usize);
    let mut builder = IoUring::<squeue::Entry128, cqueue::Entry>::builder();
    if std::env::var_os("URING_PROTO_DEFER").is_some() {
        // The kernel's "here is a request" runs as task work only when this
        // thread waits in io_uring_enter: no IPI to kick it.
        builder.setup_single_issuer().setup_defer_taskrun();
    }
    let mut ring = match builder.build(depth as u32 * 2) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("uring-proto: queue {qid}: io_uring_setup: {e}");
            return;
        }
    };
    let mut ents: Vec<Box<Ent>> = (0..depth)
        .map(|_| {
            let mut e = Box::new(Ent {
                header: vec![0u8; RING_HEADER],
                payload: vec![0u8; PAYLOAD],
                iov: [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; 2],
            });
            e.iov[0] = libc::iovec {
                iov_base: e.header.as_mut_ptr().cast(),
                iov_len: RING_HEADER,
            };
            e.iov[1] = libc::iovec {
                iov_base: e.payload.as_mut_ptr().cast(),
                iov_len: PAYLOAD,
            };
            e
        })
        .collect();
    for (i, e) in ents.iter().enumerate() {
        let s = sqe(
            fd,
            FUSE_IO_URING_CMD_REGISTER,
            qid,
            0,
            Some(e.iov.as_ptr()),
            i,
        );
        unsafe {
            ring.submission()
                .push(&s)
                .expect("submission queue has room")
        };
    }
    let mut pending: Vec<squeue::Entry128> = Vec::with_capacity(depth);
    loop {
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            eprintln!("uring-proto: queue {qid}: io_uring_enter: {e}");
            return;
        }
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (idx, res) in done {
            let i = idx as usize;
            if res < 0 {
                // ENOTCONN / ENODEV at unmount: the queue is done.
                if res != -libc::ENOTCONN && res != -libc::ENODEV {
                    eprintln!(
                        "uring-proto: queue {qid}: entry {i}: {}",
                        std::io::Error::from_raw_os_error(-res)
                    );
                }
                return;
            }
            let e = &mut ents[i];
            let h = in_header(&e.header[..IN_HEADER]);
            let commit_id = u64_at(&e.header, 256 + 8);
            let payload_sz = u32_at(&e.header, 256 + 16) as usize;
            let r = handle(
                &h,
                &e.header[128..256],
                &e.payload[..payload_sz.min(PAYLOAD)],
            )
            .unwrap_or(Err(libc::EIO));
            let (err, len) = match r {
                Ok(body) => {
                    e.payload[..body.len()].copy_from_slice(&body);
                    (0i32, body.len())
                }
                Err(errno) => (-errno, 0),
            };
            // fuse_out_header in in_out; the reply's bytes in the payload.
            e.header[0..4].copy_from_slice(&(len as u32).to_le_bytes());
            e.header[4..8].copy_from_slice(&err.to_le_bytes());
            e.header[8..16].copy_from_slice(&h.unique.to_le_bytes());
            e.header[256 + 16..256 + 20].copy_from_slice(&(len as u32).to_le_bytes());
            pending.push(sqe(
                fd,
                FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
                qid,
                commit_id,
                None,
                i,
            ));
        }
        for s in pending.drain(..) {
            unsafe {
                ring.submission()
                    .push(&s)
                    .expect("submission queue has room")
            };
        }
    }
}

fn possible_cpus() -> usize {
    // "0-1" or "0": the kernel makes one queue per possible CPU.
    let s =
        std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_else(|_| "0".into());
    s.trim()
        .rsplit(['-', ','])
        .next()
        .and_then(|x| x.parse::<usize>().ok())
        .map_or(1, |n| n + 1)
}

// ------------------------------------------------------------- main

fn mount(mnt: &str) -> Result<File, String> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse: {e}"))?;
    let opts = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,default_permissions",
        dev.as_raw_fd()
    );
    let (src, target, fstype, data) = (
        CString::new("uring-proto").unwrap(),
        CString::new(mnt).map_err(|_| "mount point has a NUL".to_string())?,
        CString::new("fuse.uring-proto").unwrap(),
        CString::new(opts).unwrap(),
    );
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount {mnt}: {} (run as root)",
            std::io::Error::last_os_error()
        ));
    }
    Ok(dev)
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 || args.iter().any(|a| a == "--help" || a == "-h") {
        return Err("usage: uring-proto MOUNTPOINT classic [THREADS] | uring [DEPTH]".into());
    }
    let mnt = &args[1];
    let uring = match args[2].as_str() {
        "classic" => false,
        "uring" => true,
        other => return Err(format!("transport {other:?}: say classic or uring")),
    };
    let n: usize = match args.get(3) {
        Some(s) => s.parse().map_err(|_| format!("{s:?} is not a number"))?,
        None if uring => 8,
        None => 2,
    };
    let dev = Arc::new(mount(mnt)?);
    let offered = init(&dev, uring)?;
    if uring && !offered {
        let _ = std::process::Command::new("umount").arg(mnt).status();
        return Err("the kernel did not offer FUSE_OVER_IO_URING: echo Y > /sys/module/fuse/parameters/enable_uring".into());
    }
    let mut threads = Vec::new();
    if uring {
        let fd = dev.as_raw_fd();
        for q in 0..possible_cpus() {
            let t = std::thread::Builder::new().name(format!("ring-{q}"));
            threads.push(
                t.spawn(move || ring_loop(fd, q as u16, n))
                    .map_err(|e| format!("thread: {e}"))?,
            );
        }
        eprintln!(
            "uring-proto: serving {mnt} over io_uring, {} queues of {n}",
            possible_cpus()
        );
        classic_loop(dev.clone()); // FORGET, INTERRUPT, and anything before the rings are ready
    } else {
        for _ in 1..n.max(1) {
            let d = dev.clone();
            let t = std::thread::Builder::new().name("dev-fuse".into());
            threads.push(
                t.spawn(move || classic_loop(d))
                    .map_err(|e| format!("thread: {e}"))?,
            );
        }
        eprintln!("uring-proto: serving {mnt} over /dev/fuse, {n} threads");
        classic_loop(dev.clone());
    }
    // The rings end with ENOTCONN when the connection goes; the process
    // exits without joining them (a queue the kernel never completed would
    // hold it).
    drop(threads);
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("uring-proto: {e}");
        std::process::exit(1);
    }
}
