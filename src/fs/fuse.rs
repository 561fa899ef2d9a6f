//! What is left of fuser in serving a mount: the adapter whose `init`
//! answers the kernel's INIT during `fuser::Session::new` (which also
//! mounts) with the capabilities the view asks for, `max_write`, and FUSE
//! over io_uring when wanted; and whose `destroy` releases the mount when
//! the session is dropped ([`MountRelease`]). fuser's session loop is never
//! run: every other request is read and answered by storefs's own codec,
//! [`super::wire`], on `/dev/fuse` ([`super::devfuse`]) and on the rings
//! ([`super::uring`]), so none of the other `Filesystem` methods is ever
//! called (their defaults stay). An operation is spelled in [`super::abi`]
//! and [`super::wire`], not here.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fuser::{Filesystem, InitFlags, KernelConfig, Request};

use super::MountRelease;
use super::view::{Capability, View};

/// fuser's `Filesystem` for a mount: INIT and the release at the end.
pub struct FuseAdapter {
    view: Arc<dyn View>,
    release: MountRelease,
    /// Set when this mount wants FUSE over io_uring: INIT asks the kernel
    /// for it and stores here whether it agreed (see [`super::uring`]).
    uring: Option<Arc<AtomicBool>>,
    /// The mount admits every user (`allow_other`): the only access under
    /// which INIT asks for [`Capability::AllowIdmap`] (see there).
    admits_all: bool,
}

impl FuseAdapter {
    /// The adapter for `view`; `uring` as [`FuseAdapter::uring`].
    pub fn new(
        view: Arc<dyn View>,
        release: MountRelease,
        uring: Option<Arc<AtomicBool>>,
    ) -> FuseAdapter {
        FuseAdapter {
            view,
            release,
            uring,
            admits_all: false,
        }
    }

    /// Whether the session admits every user (fuser's `SessionACL::All`,
    /// `-o allow_other`); false unless said.
    pub fn admitting_all(self, admits_all: bool) -> FuseAdapter {
        FuseAdapter { admits_all, ..self }
    }
}

fn init_flags(c: Capability) -> InitFlags {
    match c {
        Capability::ReaddirPlus => InitFlags::FUSE_DO_READDIRPLUS,
        Capability::CacheSymlinks => InitFlags::FUSE_CACHE_SYMLINKS,
        Capability::KillPrivV2 => InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        Capability::PosixAcl => InitFlags::FUSE_POSIX_ACL,
        Capability::PosixAclViewUmask => InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK,
        Capability::WritebackCache => InitFlags::FUSE_WRITEBACK_CACHE,
        Capability::ExportSupport => InitFlags::FUSE_EXPORT_SUPPORT,
        Capability::AllowIdmap => InitFlags::FUSE_ALLOW_IDMAP,
    }
}

impl Filesystem for FuseAdapter {
    fn destroy(&mut self) {
        self.release.release();
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        for &c in self.view.capabilities() {
            if c == Capability::AllowIdmap && !self.admits_all {
                // Requests would come without ids, and the uid filter of an
                // owner-only (or allow_root) session would refuse them.
                tracing::info!(
                    "idmapped mounts need -o allow_other; not asking the kernel for them"
                );
                continue;
            }
            if let Err(missing) = config.add_capabilities(init_flags(c)) {
                tracing::info!(
                    ?missing,
                    "kernel lacks a FUSE capability; continuing without it"
                );
            }
        }
        if config.set_max_write(super::devfuse::MAX_WRITE).is_err() {
            tracing::warn!("fuser refused storefs's max_write; keeping its own");
        }
        if let Some(agreed) = &self.uring {
            // Every request and reply must fit one ring entry's payload.
            let max_write = super::uring::PAYLOAD as u32;
            match config.add_capabilities(InitFlags::FUSE_OVER_IO_URING) {
                Ok(()) if config.set_max_write(max_write).is_ok() => {
                    agreed.store(true, Ordering::Release);
                }
                Ok(()) => tracing::warn!("cannot set max_write for io_uring; using /dev/fuse"),
                Err(_) => tracing::info!(
                    "the kernel does not offer FUSE over io_uring (enable_uring=N, or older than 6.14); using /dev/fuse"
                ),
            }
        }
        Ok(())
    }
}
