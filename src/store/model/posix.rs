//! The POSIX outcomes of file system operations, and their one errno table.

/// What a file system operation answers when it does not succeed the way
/// the caller hoped: an outcome POSIX names, the same whichever mount gives
/// it (a checkpoint, the browse mount, a fork). `journal::Error` and
/// `fs::FsError` each carry one as their `Posix` variant, beside the
/// failures of their own; [`Posix::errno`] is the errno each one is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Posix {
    /// ENOENT: no such name or inode.
    #[error("no such file or directory")]
    NotFound,
    /// EEXIST.
    #[error("file exists")]
    Exists,
    /// ENOTEMPTY.
    #[error("directory not empty")]
    NotEmpty,
    /// ENOTDIR.
    #[error("not a directory")]
    NotDir,
    /// EISDIR.
    #[error("is a directory")]
    IsDir,
    /// EINVAL, with what was wrong (flags or arguments not accepted).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// EPERM (e.g. a hard link to a directory).
    #[error("operation not permitted")]
    Perm,
    /// ENAMETOOLONG: a name longer than [`NAME_MAX`](super::NAME_MAX) bytes.
    #[error("file name too long")]
    NameTooLong,
    /// ENODATA: no such extended attribute (or XATTR_REPLACE of a missing one).
    #[error("no such extended attribute")]
    NoXattr,
    /// EEXIST for XATTR_CREATE of an existing attribute.
    #[error("extended attribute exists")]
    XattrExists,
    /// E2BIG: an xattr value over [`XATTR_SIZE_MAX`](super::XATTR_SIZE_MAX).
    #[error("extended attribute value too large")]
    TooBig,
    /// EFBIG: past [`MAX_FILE_SIZE`](super::MAX_FILE_SIZE).
    #[error("file too large")]
    FileTooLarge,
    /// EMLINK.
    #[error("too many links")]
    TooManyLinks,
    /// EINVAL for `readlink` of something that is not a symlink.
    #[error("not a symbolic link")]
    NotSymlink,
    /// EROFS: a write to a read-only mount.
    #[error("read-only file system: checkpoints never change")]
    ReadOnly,
    /// ERANGE: the caller's buffer (`getxattr`, `listxattr`) is too small.
    #[error("buffer of {given} bytes is too small for {needed}")]
    BufferTooSmall { given: u32, needed: usize },
    /// ENXIO: `lseek` `SEEK_DATA` with no data after the offset, or either
    /// at or past the end of file (as ext4).
    #[error("no data or hole at or after this offset")]
    NoSeekTarget,
    /// ENOTTY: an `ioctl` (none is implemented; each `isatty()` asks `TCGETS`).
    #[error("inappropriate ioctl for a storefs file")]
    NoIoctl,
    /// EPERM: a change to an inode flagged immutable (`chattr +i`).
    #[error("operation not permitted: the file is immutable (`chattr -i` it first, as root)")]
    Immutable,
    /// EPERM: a change other than an append to an inode flagged append-only
    /// (`chattr +a`), or a removal of a name from such a directory.
    #[error("operation not permitted: the file is append-only (`chattr -a` it first, as root)")]
    AppendOnly,
    /// EOPNOTSUPP: a mode of an operation that is not implemented.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
}

impl Posix {
    /// The errno this outcome is (positive, as `libc`'s constants): the one
    /// table from outcomes to errno, which `fs/` replies with.
    pub fn errno(&self) -> i32 {
        match self {
            Posix::NotFound => libc::ENOENT,
            Posix::Exists | Posix::XattrExists => libc::EEXIST,
            Posix::NotEmpty => libc::ENOTEMPTY,
            Posix::NotDir => libc::ENOTDIR,
            Posix::IsDir => libc::EISDIR,
            Posix::Invalid(_) | Posix::NotSymlink => libc::EINVAL,
            Posix::Perm | Posix::Immutable | Posix::AppendOnly => libc::EPERM,
            Posix::NameTooLong => libc::ENAMETOOLONG,
            Posix::NoXattr => libc::ENODATA,
            Posix::TooBig => libc::E2BIG,
            Posix::FileTooLarge => libc::EFBIG,
            Posix::TooManyLinks => libc::EMLINK,
            Posix::ReadOnly => libc::EROFS,
            Posix::BufferTooSmall { .. } => libc::ERANGE,
            Posix::NoSeekTarget => libc::ENXIO,
            Posix::NoIoctl => libc::ENOTTY,
            Posix::Unsupported(_) => libc::EOPNOTSUPP,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Posix;

    /// Each outcome's errno, as the kernel sees it (what `fs/` answered
    /// before the outcomes of the journal and of the views became one type).
    #[test]
    fn each_outcome_is_one_errno() {
        let table = [
            (Posix::NotFound, libc::ENOENT),
            (Posix::Exists, libc::EEXIST),
            (Posix::NotEmpty, libc::ENOTEMPTY),
            (Posix::NotDir, libc::ENOTDIR),
            (Posix::IsDir, libc::EISDIR),
            (Posix::Invalid("x"), libc::EINVAL),
            (Posix::Perm, libc::EPERM),
            (Posix::Immutable, libc::EPERM),
            (Posix::AppendOnly, libc::EPERM),
            (Posix::NameTooLong, libc::ENAMETOOLONG),
            (Posix::NoXattr, libc::ENODATA),
            (Posix::XattrExists, libc::EEXIST),
            (Posix::TooBig, libc::E2BIG),
            (Posix::FileTooLarge, libc::EFBIG),
            (Posix::TooManyLinks, libc::EMLINK),
            (Posix::NotSymlink, libc::EINVAL),
            (Posix::ReadOnly, libc::EROFS),
            (
                Posix::BufferTooSmall {
                    given: 1,
                    needed: 2,
                },
                libc::ERANGE,
            ),
            (Posix::NoSeekTarget, libc::ENXIO),
            (Posix::NoIoctl, libc::ENOTTY),
            (Posix::Unsupported("x"), libc::EOPNOTSUPP),
        ];
        for (outcome, errno) in table {
            assert_eq!(outcome.errno(), errno, "{outcome:?}");
        }
    }
}
