//! What a new inode takes from the directory it is made in, as the
//! kernel's `inode_init_owner` gives it.

use crate::ext4::error::Ext4Error;
use crate::ext4::image::Image;
use crate::ext4::inode::off;

impl Image {
    /// What a new inode `ino` takes from a set-group-ID directory `parent`,
    /// as the kernel's `inode_init_owner` gives it: the directory's group,
    /// and for a directory the set-group-ID bit too.
    pub(crate) fn inherit_setgid(&mut self, parent: u32, ino: u32) -> Result<(), Ext4Error> {
        let p = self.inode(parent)?;
        if p.mode & 0o2000 == 0 {
            return Ok(());
        }
        let me = self.inode(ino)?;
        let mode = if me.is_dir() {
            me.mode | 0o2000
        } else {
            me.mode
        };
        let (lo, hi) = (
            (p.gid as u16).to_le_bytes(),
            ((p.gid >> 16) as u16).to_le_bytes(),
        );
        let m = mode.to_le_bytes();
        self.write_inode_fields(
            ino,
            &[(off::GID, &lo), (off::GID_HIGH, &hi), (off::MODE, &m)],
        )
    }
}
