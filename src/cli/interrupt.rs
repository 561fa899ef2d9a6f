//! Ctrl-C (SIGINT) or SIGTERM during a long `snapshot` or `import`: remove the
//! temp files this process was writing, say in one line that nothing was
//! published, and exit 128 + the signal. A signal that arrives once the
//! checkpoint is published is too late to undo anything: the command finishes.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::Result;

use crate::store;
use crate::sys;

/// While it lives, the stop signals go to a thread of ours. Make it before
/// any other thread starts (they inherit the blocked signals); dropping it
/// gives the signals back to the caller.
pub struct Interruptible {
    thread: Option<JoinHandle<()>>,
    done: Arc<AtomicBool>,
}

impl Interruptible {
    /// `what` names the command in the message (`import`, `snapshot`).
    pub fn new(store_root: &Path, what: &'static str) -> Result<Interruptible> {
        sys::block_stop_signals()?;
        let done = Arc::new(AtomicBool::new(false));
        let root: PathBuf = store_root.to_path_buf();
        let flag = done.clone();
        let thread = sys::spawn_unsignalled("interrupt", move || {
            loop {
                let Ok(sig) = sys::wait_for_stop_signal() else {
                    return;
                };
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                // Waits for a checkpoint being published; kept until exit,
                // so none is published after this.
                let published = store::publish_gate();
                if *published {
                    // Too late: the checkpoint is there; let the command finish.
                    drop(published);
                    continue;
                }
                let (n, bytes) = store::remove_own_temps(&root);
                // Over the progress bar's line, if one is drawn.
                let clear = if std::io::stderr().is_terminal() {
                    "\r\x1b[2K"
                } else {
                    ""
                };
                eprintln!(
                    "{clear}storefs: {what} interrupted ({sig}): nothing was published; removed {n} temp file(s), {}",
                    super::maint::human(bytes)
                );
                std::process::exit(128 + sig as i32);
            }
        })?;
        Ok(Interruptible {
            thread: Some(thread),
            done,
        })
    }
}

impl Drop for Interruptible {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take()
            && sys::send_stop_signal(&t).is_ok()
        {
            let _ = t.join();
        }
        let _ = sys::unblock_stop_signals();
    }
}
