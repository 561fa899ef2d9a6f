//! Reads of a large file on a read-only mount (issue 17, part 5): read
//! sequentially (with read-ahead) and at random offsets (each decoding only
//! the frames it touches), the bytes are the source's. A damaged frame fails
//! the reads that need it with EIO, and only those: a random read elsewhere
//! in the same chunk does not decompress it.

mod common;

use std::fs::{self, File};
use std::os::unix::fs::FileExt;

use common::{Env, pseudo_random};
use storefs::store::{Content, Store, framed};

const LEN: usize = 12 << 20;

/// A store holding a snapshot (ref `big`) of a directory with one 12 MiB
/// file of pseudo-random bytes; the env and the bytes.
fn setup() -> (Env, Vec<u8>) {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir(&src).unwrap();
    let data = pseudo_random(LEN, 17);
    fs::write(src.join("big.bin"), &data).unwrap();
    env.ok(["snapshot", src.to_str().unwrap(), "--ref", "big"]);
    (env, data)
}

/// Read `len` bytes at `offset` with the kernel's read-ahead off for the
/// file (so a read asks the daemon for those pages only).
fn pread_random(f: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, offset)?;
    buf.truncate(n);
    Ok(buf)
}

/// `n` reads of `f`, each at the offset and of the length `shape(i, x)`
/// gives for read `i` and a pseudo-random `x` (a sequence seeded by
/// `seed`), each checked against `data`.
fn check_random_reads(
    f: &File,
    data: &[u8],
    seed: u64,
    n: usize,
    shape: impl Fn(usize, u64) -> (usize, usize),
) {
    let mut x = seed;
    for i in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (at, len) = shape(i, x);
        let end = (at + len).min(data.len());
        let got = pread_random(f, at as u64, len).unwrap();
        assert!(got == data[at..end], "{len} bytes at {at}");
    }
}

fn open_random(path: &std::path::Path) -> File {
    let f = File::open(path).unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random).unwrap();
    f
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_large_file_reads_back_exactly_sequentially_and_at_random() {
    let (env, data) = setup();
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    {
        // Random first (cold), then sequential, then random again (cached).
        let m = env.mount("big", Some(&mp));
        let path = m.path().join("big.bin");
        let f = open_random(&path);
        check_random_reads(&f, &data, 12345, 300, |i, x| {
            let len = match i % 3 {
                0 => 4096,
                1 => 1 + (x >> 40) as usize % 70_000,
                _ => 1,
            };
            (((x >> 20) % LEN as u64) as usize, len)
        });
        // Frame boundaries: 64 KiB multiples from a chunk's start are not
        // file offsets a test can name without the chunk list, so read
        // across every 4 KiB boundary of a 1 MiB window, in 12 KiB reads.
        for at in (5 << 20..6 << 20).step_by(4096) {
            let got = pread_random(&f, at as u64 - 6000, 12_288).unwrap();
            assert!(got == data[at - 6000..at - 6000 + 12_288], "at {at}");
        }
        drop(f);
        assert!(fs::read(&path).unwrap() == data, "sequential read");
        m.unmount();
    }
    {
        // Cold again: sequential first.
        let m = env.mount("big", Some(&mp));
        assert!(fs::read(m.path().join("big.bin")).unwrap() == data);
        m.unmount();
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_large_base_file_reads_back_exactly_through_a_fork() {
    let (env, mut data) = setup();
    env.ok(["fork", "big", "--name", "f"]);
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let m = env.mount("f", Some(&mp));
    let path = m.path().join("big.bin");
    // An edit in the middle: reads around it mix the journal and the base.
    let at = (6 << 20) - 3;
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(b"an edit", at as u64)
        .unwrap();
    data[at..at + 7].copy_from_slice(b"an edit");
    // Cold random reads first (each decodes only its frames), then the
    // whole file in order (read ahead), then random again.
    let f = open_random(&path);
    check_random_reads(&f, &data, 777, 200, |i, x| {
        let len = if i % 2 == 0 {
            4096
        } else {
            1 + (x >> 40) as usize % 40_000
        };
        let off = if i % 50 == 0 {
            at - 100
        } else {
            ((x >> 20) % LEN as u64) as usize
        };
        (off, len)
    });
    drop(f);
    assert!(fs::read(&path).unwrap() == data, "sequential read");
    let f = open_random(&path);
    let got = pread_random(&f, 1234, 5000).unwrap();
    assert!(got == data[1234..6234]);
    drop(f);
    m.unmount();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_damaged_frame_fails_only_the_reads_that_need_it() {
    let (env, data) = setup();
    // The largest chunk of the file, where it starts, and its frame table.
    let store = Store::open(&env.store).unwrap();
    let ck = store
        .read_checkpoint(&store.resolve("big").unwrap())
        .unwrap();
    let entry = store.lookup_path(&ck, b"big.bin").unwrap().unwrap();
    let Content::Extents(extents) = entry.content else {
        panic!("not a file")
    };
    let mut start = 0u64;
    let mut best = (0u64, 0u64, extents[0].id.unwrap());
    for e in &extents {
        if e.len > best.1 {
            best = (start, e.len, e.id.unwrap());
        }
        start += e.len;
    }
    let (chunk_start, _, id) = best;
    let (_, offset, stored_len) = store.backend().locate(&id).unwrap().unwrap();
    assert!(offset > 0, "packed");
    let mut raw = store.backend().read(&id).unwrap().unwrap();
    let table_len = framed::table_len_from_footer(&raw)
        .unwrap()
        .expect("framed");
    let table = framed::parse_table(&raw[raw.len() - table_len..], stored_len).unwrap();
    assert!(table.frames.len() >= 4, "a chunk of 4 frames");
    // Damage the middle of frame 1.
    let f1 = table.frames[1];
    raw[(f1.stored + u64::from(f1.stored_len) / 2) as usize] ^= 0x55;
    store.replace_stored_object(&id, &raw).unwrap();
    drop(store);

    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let m = env.mount("big", Some(&mp));
    let file = m.path().join("big.bin");
    let f = open_random(&file);
    // Frame 3 of the chunk: read alone, right.
    let at = chunk_start + table.frames[3].start + 100;
    let got = pread_random(&f, at, 4096).unwrap();
    assert!(got == data[at as usize..at as usize + 4096]);
    // Frame 1: EIO, never other bytes.
    let at = chunk_start + f1.start + 100;
    let err = pread_random(&f, at, 4096).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    // A whole read of the file crosses it: EIO too.
    drop(f);
    let err = fs::read(&file).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    m.unmount();
}
