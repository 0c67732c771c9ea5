//! ext4 directory blocks: entries, the checksum tail, and htree hashes (work in progress).
