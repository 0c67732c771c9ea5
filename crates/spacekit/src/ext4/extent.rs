//! ext4 extent trees: headers, leaves and indexes, and their tail checksums (work in progress).
