//! statloop PATH N fstat|stat: N fstat() calls on one open descriptor, or N
//! stat() calls by path; prints the nanoseconds the loop took.
use std::os::fd::AsRawFd;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 4 {
        eprintln!("usage: statloop PATH N fstat|stat");
        std::process::exit(2);
    }
    let n: u64 = a[2].parse().expect("N is a number");
    let f = std::fs::File::open(&a[1]).unwrap_or_else(|e| {
        eprintln!("statloop: {}: {e}", a[1]);
        std::process::exit(1)
    });
    let path = std::ffi::CString::new(a[1].as_str()).expect("no NUL in PATH");
    let by_fd = a[3] == "fstat";
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        let rc = unsafe {
            if by_fd {
                libc::fstat(f.as_raw_fd(), &mut st)
            } else {
                libc::stat(path.as_ptr(), &mut st)
            }
        };
        if rc != 0 {
            eprintln!("statloop: {}", std::io::Error::last_os_error());
            std::process::exit(1);
        }
    }
    println!("{}", t0.elapsed().as_nanos());
}
