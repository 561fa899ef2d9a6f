//! `storefs gc --remote NAME`: delete what no remote ref reaches.

/// How a remote gc behaves.
#[derive(Clone, Debug)]
pub struct RemoteGcOptions {
    pub dry_run: bool,
    pub grace: std::time::Duration,
}

/// What a remote gc did.
#[derive(Clone, Debug, Default)]
pub struct RemoteGcReport {}
