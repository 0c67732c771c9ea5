//! [`OpenMode`]: how to open an image.

/// How to open an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only: every change is refused with [`Ext4Error::ReadOnly`].
    ///
    /// [`Ext4Error::ReadOnly`]: super::error::Ext4Error::ReadOnly
    ReadOnly,
    /// Read and write: changes are kept in memory until [`Image::flush`].
    ///
    /// [`Image::flush`]: super::image::Image::flush
    ReadWrite,
}
