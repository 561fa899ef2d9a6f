//! Layer 4: the FUSE layer.
