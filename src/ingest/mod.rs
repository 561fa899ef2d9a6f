//! Layer 2: snapshot of a directory, restore, diff.
