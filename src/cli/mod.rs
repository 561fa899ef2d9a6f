//! Layer 5: the command line.
pub fn main() -> i32 {
    0
}
