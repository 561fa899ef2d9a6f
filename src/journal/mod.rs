//! Layer 3: the write-ahead journal for fork mounts. Not built yet (issue 5).
