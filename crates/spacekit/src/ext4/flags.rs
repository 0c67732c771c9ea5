//! Feature bits, inode flags and superblock offsets the file operations
//! test (the on-disk values; see the ext4 disk layout).

/// `S_IFMT` and the types.
pub(crate) const S_IFMT: u16 = 0xF000;
pub(crate) const S_IFREG: u16 = 0x8000;
/// incompat `filetype`: directory entries carry the file type.
pub(crate) const INCOMPAT_FILETYPE: u32 = 0x2;
/// incompat `dirdata`: directory entries may carry data after the name.
pub(crate) const INCOMPAT_DIRDATA: u32 = 0x1000;
/// `EXT4_ENCRYPT_FL`: the directory's names are encrypted.
pub(crate) const ENCRYPT_FL: u32 = 0x800;
/// `EXT4_INLINE_DATA_FL`: the contents live in the inode.
pub(crate) const INLINE_DATA_FL: u32 = 0x1000_0000;
/// `EXT4_VERITY_FL`: an fs-verity file (read-only to the kernel).
pub(crate) const VERITY_FL: u32 = 0x10_0000;
/// incompat `ea_inode`: xattr values may live in inodes of their own.
pub(crate) const INCOMPAT_EA_INODE: u32 = 0x400;
/// ro_compat `huge_file`.
pub(crate) const RO_COMPAT_HUGE_FILE: u32 = 0x8;
/// `i_flags`: `i_blocks` counts file-system blocks.
pub(crate) const HUGE_FILE_FL: u32 = 0x4_0000;
/// ro_compat `large_file`.
pub(crate) const RO_COMPAT_LARGE_FILE: u32 = 0x2;
/// Superblock `s_hash_seed`, `s_def_hash_version` and `s_flags`.
pub(crate) const SB_HASH_SEED: usize = 0xEC;
pub(crate) const SB_DEF_HASH_VERSION: usize = 0xFC;
pub(crate) const SB_FLAGS: usize = 0x160;
/// Superblock `s_log_groups_per_flex`.
pub(crate) const SB_LOG_GROUPS_PER_FLEX: usize = 0x174;
