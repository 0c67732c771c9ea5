//! [`FaultyDevice`]: an ext4 [`Device`] over another one that fails where a
//! test tells it to. The test keeps the [`Faults`] handle and changes it
//! while the [`Image`](spacekit::ext4::Image) owns the device.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use spacekit::ext4::{Device, FileDevice, Image, OpenMode};

#[derive(Debug, Default)]
struct State {
    /// Write steps left before the one that fails.
    write_in: Option<usize>,
    /// Reads covering this byte fail.
    read_at: Option<u64>,
    /// Write steps done so far.
    steps: usize,
}

/// The control of a [`FaultyDevice`], shared with the test.
#[derive(Clone, Debug, Default)]
pub struct Faults(Arc<Mutex<State>>);

impl Faults {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `n`th write step from now (counting from 0) fails with an I/O
    /// error, once. Write steps are the device's mutating calls, in a
    /// flush's order: the log's contents, the log's trailer, the log's sync
    /// (file and directory), one write per changed run of sectors, the
    /// image's sync, the log's removal. A failing write first writes half
    /// of its bytes (whole sectors), a torn write.
    pub fn fail_write_after(&self, n: usize) {
        self.state().write_in = Some(n);
    }

    /// From now on, a read that covers byte `offset` of the image fails;
    /// `None` ends it. (For block `b` of size `bs`: `Some(b * bs)`.)
    pub fn fail_read_at(&self, offset: Option<u64>) {
        self.state().read_at = offset;
    }

    /// Write steps the device has done (failed ones included).
    pub fn steps(&self) -> usize {
        self.state().steps
    }

    /// Whether this write step fails (and counts it).
    fn write_step(&self) -> bool {
        let mut s = self.state();
        s.steps += 1;
        match s.write_in {
            Some(0) => {
                s.write_in = None;
                true
            }
            Some(n) => {
                s.write_in = Some(n - 1);
                false
            }
            None => false,
        }
    }
}

fn injected() -> io::Error {
    io::Error::other("injected fault")
}

/// A [`Device`] that passes every call to `inner` except the ones its
/// [`Faults`] fail.
#[derive(Debug)]
pub struct FaultyDevice {
    inner: Box<dyn Device>,
    faults: Faults,
}

impl FaultyDevice {
    /// `inner`, failing as `faults` says.
    pub fn new(inner: Box<dyn Device>, faults: Faults) -> FaultyDevice {
        FaultyDevice { inner, faults }
    }

    /// Opens the image file at `path` on a faulty device; returns the image
    /// and the device's control.
    ///
    /// # Panics
    /// If the file cannot be opened or is not an image spacekit opens.
    pub fn open_image(path: &Path, mode: OpenMode) -> (Image, Faults) {
        let faults = Faults::default();
        let file = FileDevice::open(path, mode == OpenMode::ReadWrite)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let dev = FaultyDevice::new(Box::new(file), faults.clone());
        let img = Image::open_on(Box::new(dev), mode)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        (img, faults)
    }

    /// A write of `data` by `write`, or its first half (rounded down to
    /// whole 512-byte sectors: a disk writes a sector whole or not at all)
    /// then an error when this step fails.
    fn write(
        &mut self,
        data: &[u8],
        write: impl FnOnce(&mut dyn Device, &[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.faults.write_step() {
            write(&mut *self.inner, &data[..data.len() / 2 / 512 * 512])?;
            return Err(injected());
        }
        write(&mut *self.inner, data)
    }

    fn step(&mut self, f: impl FnOnce(&mut dyn Device) -> io::Result<()>) -> io::Result<()> {
        if self.faults.write_step() {
            return Err(injected());
        }
        f(&mut *self.inner)
    }
}

impl Device for FaultyDevice {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn writable(&self) -> bool {
        self.inner.writable()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if let Some(bad) = self.faults.state().read_at {
            if (offset..offset + buf.len() as u64).contains(&bad) {
                return Err(io::Error::other("injected read fault"));
            }
        }
        self.inner.read_at(offset, buf)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write(data, |d, b| d.write_at(offset, b))
    }

    fn sync(&mut self) -> io::Result<()> {
        self.step(|d| d.sync())
    }

    fn read_log(&self) -> io::Result<Option<Vec<u8>>> {
        self.inner.read_log()
    }

    fn write_log(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write(data, |d, b| d.write_log(offset, b))
    }

    fn sync_log(&mut self) -> io::Result<()> {
        self.step(|d| d.sync_log())
    }

    fn remove_log(&mut self) -> io::Result<()> {
        self.step(|d| d.remove_log())
    }

    fn log_name(&self) -> PathBuf {
        self.inner.log_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spacekit::ext4::MemDevice;

    #[test]
    fn the_nth_write_step_fails_once_and_tears() {
        let faults = Faults::default();
        let mut d = FaultyDevice::new(Box::new(MemDevice::new(vec![0; 8192])), faults.clone());
        faults.fail_write_after(2);
        d.write_at(0, &[1; 8]).unwrap();
        d.sync().unwrap();
        // Torn at whole sectors: 3 sectors tear after the first.
        assert!(d.write_at(512, &[2; 1536]).is_err());
        let mut b = vec![0u8; 2048];
        d.read_at(0, &mut b).unwrap();
        assert_eq!(&b[..8], &[1; 8]);
        assert!(b[512..1024].iter().all(|&x| x == 2), "the first sector");
        assert!(b[1024..].iter().all(|&x| x == 0), "nothing past it");
        // Less than two sectors: nothing written.
        faults.fail_write_after(0);
        assert!(d.write_at(4096, &[3; 600]).is_err());
        d.read_at(4096, &mut b[..600]).unwrap();
        assert!(b[..600].iter().all(|&x| x == 0), "a torn short write");
        d.write_at(512, &[2; 1536]).unwrap();
        assert_eq!(faults.steps(), 5);
        faults.fail_read_at(Some(20));
        assert!(d.read_at(17, &mut [0; 4]).is_err());
        assert!(d.read_at(20, &mut [0; 1]).is_err());
        d.read_at(16, &mut [0; 4]).unwrap();
        d.read_at(21, &mut [0; 4]).unwrap();
        faults.fail_read_at(None);
        d.read_at(16, &mut [0; 8]).unwrap();
    }
}
