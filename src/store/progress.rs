//! Progress reporting for long operations (snapshot, archive import, push,
//! pull): the library calls a [`Progress`] it is given and knows nothing
//! about how it is shown. The CLI implements it with a terminal progress bar.

use std::fmt::Debug;
use std::sync::Arc;

/// Told how far a long operation has got. Called from many threads at once.
/// Every method does nothing unless overridden.
pub trait Progress: Debug + Send + Sync {
    /// How many units (bytes or objects, as the operation documents) there
    /// are in all, once that is known.
    fn set_total(&self, _total: u64) {}
    /// `n` more units are done.
    fn advance(&self, _n: u64) {}
    /// What the operation is doing now, for people ("12 entries").
    fn set_message(&self, _message: String) {}
    /// `n` entries are done: says so every 1,000.
    fn entries(&self, n: u64) {
        if n.is_multiple_of(1000) {
            self.set_message(format!("{n} entries"));
        }
    }
    /// The operation ended (whether it succeeded or not).
    fn finish(&self) {}
}

/// Reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// A shared progress sink, as operation options hold it.
pub type SharedProgress = Arc<dyn Progress>;

/// A [`SharedProgress`] that reports nothing.
pub fn no_progress() -> SharedProgress {
    Arc::new(NoProgress)
}
