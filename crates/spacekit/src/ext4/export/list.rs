//! What `ls -l` shows of a directory ([`Image::list`], [`ListEntry`]),
//! an inode's times with nanoseconds ([`Inode::times`]) and a time as
//! text (the [`Display`](fmt::Display) of [`Timestamp`]).

use std::fmt;
use std::string::String;
use std::vec::Vec;

use super::super::error::Ext4Error;
use super::super::image::Image;
use super::super::inode::Inode;
use super::super::namespace::{FileTimes, Timestamp};
use super::super::raw::{inode as off, le32};

pub(super) const S_IFMT: u16 = 0xF000;
pub(super) const S_IFREG: u16 = 0x8000;
pub(super) const S_IFDIR: u16 = 0x4000;
pub(super) const S_IFLNK: u16 = 0xA000;
pub(super) const S_IFCHR: u16 = 0x2000;
pub(super) const S_IFBLK: u16 = 0x6000;
pub(super) const S_IFIFO: u16 = 0x1000;
pub(super) const S_IFSOCK: u16 = 0xC000;

/// One row of [`Image::list`]: what `ls -l` shows of a directory entry.
/// Its [`Display`](fmt::Display) is the row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    /// The entry's name.
    pub name: Vec<u8>,
    /// Its inode.
    pub ino: u32,
    /// `i_mode`: type and permission bits.
    pub mode: u16,
    /// `i_links_count`.
    pub links: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// `i_size` (the target's length for a symlink).
    pub size: u64,
    /// `(major, minor)` of a character or block device.
    pub device: Option<(u32, u32)>,
    /// Last modification.
    pub mtime: Timestamp,
    /// A symlink's target.
    pub target: Option<Vec<u8>>,
}

impl ListEntry {
    /// The type and permissions as `ls -l` writes them: `drwxr-xr-x`,
    /// `crw-rw----`, `lrwxrwxrwx`, `prw-r--r--`, `srwx------`, with `s`/`S`
    /// for setuid and setgid and `t`/`T` for sticky (`?` for an unknown
    /// type).
    pub fn mode_string(&self) -> String {
        let m = self.mode;
        let kind = match m & S_IFMT {
            S_IFREG => '-',
            S_IFDIR => 'd',
            S_IFLNK => 'l',
            S_IFCHR => 'c',
            S_IFBLK => 'b',
            S_IFIFO => 'p',
            S_IFSOCK => 's',
            _ => '?',
        };
        let mut s = String::from(kind);
        // (shift of the rwx triple, its special bit, the letter for it)
        for (shift, special, letter) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
            let bits = (m >> shift) & 7;
            s.push(if bits & 4 != 0 { 'r' } else { '-' });
            s.push(if bits & 2 != 0 { 'w' } else { '-' });
            s.push(match (bits & 1 != 0, m & special != 0) {
                (true, true) => letter,
                (false, true) => letter.to_ascii_uppercase(),
                (true, false) => 'x',
                (false, false) => '-',
            });
        }
        s
    }
}

/// `drwxr-xr-x   2     0     0       1024 2023-11-14 22:13:20.000000000 name`,
/// `major, minor` in the size column for a device, ` -> target` after a
/// symlink's name (names and targets that are not UTF-8 shown lossily).
impl fmt::Display for ListEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = match self.device {
            Some((major, minor)) => std::format!("{major:>4}, {minor:>4}"),
            None => std::format!("{}", self.size),
        };
        write!(
            f,
            "{} {:>3} {:>5} {:>5} {size:>10} {} {}",
            self.mode_string(),
            self.links,
            self.uid,
            self.gid,
            self.mtime,
            String::from_utf8_lossy(&self.name)
        )?;
        match &self.target {
            Some(t) => write!(f, " -> {}", String::from_utf8_lossy(t)),
            None => Ok(()),
        }
    }
}

/// The time in UTC as `2023-11-14 22:13:20.123456789`.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (days, secs) = (self.secs.div_euclid(86_400), self.secs.rem_euclid(86_400));
        let (y, m, d) = civil_date(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:09}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            self.nanos
        )
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01: shift the epoch
/// to 0000-03-01 so that leap days end each 400-year era and each year,
/// then count eras, years of the era and days of the year.
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Inode {
    /// The inode's times, decoded as the kernel decodes them: the low 32
    /// bits of the seconds signed, and with a large inode whose
    /// `i_extra_isize` covers the `*_extra` field, the two epoch bits above
    /// them and the nanoseconds (nanoseconds 0 without). `crtime` is `None`
    /// when the inode has no room for it. A stored nanosecond count past
    /// 999,999,999 (damage) reads as 999,999,999.
    ///
    /// The result given to [`Image::set_times`] sets the same times.
    pub fn times(&self) -> FileTimes {
        let raw = self.raw();
        let end = if raw.len() > 128 {
            128 + usize::from(self.extra_isize)
        } else {
            128
        };
        let at = |lo: usize, hi: usize| {
            let mut t = Timestamp {
                secs: i64::from(le32(raw, lo) as i32),
                nanos: 0,
            };
            if hi + 4 <= end {
                let extra = le32(raw, hi);
                t.secs += i64::from(extra & 3) << 32;
                t.nanos = (extra >> 2).min(999_999_999);
            }
            t
        };
        FileTimes {
            atime: Some(at(off::ATIME, off::ATIME_EXTRA)),
            mtime: Some(at(off::MTIME, off::MTIME_EXTRA)),
            ctime: Some(at(off::CTIME, off::CTIME_EXTRA)),
            crtime: (off::CRTIME_EXTRA + 4 <= end).then(|| at(off::CRTIME, off::CRTIME_EXTRA)),
        }
    }
}

impl Image {
    /// Every entry of directory `dir` (`.` and `..` included, in
    /// [`Image::read_dir`]'s order) with what `ls -l` shows of it: type
    /// and mode, links, owner, size or device number, mtime, symlink
    /// target.
    ///
    /// # Errors
    /// As [`Image::read_dir`], [`Image::inode`] and [`Image::read_link`].
    pub fn list(&mut self, dir: u32) -> Result<Vec<ListEntry>, Ext4Error> {
        let mut out = Vec::new();
        for e in self.read_dir(dir)? {
            if e.inode == 0 {
                continue;
            }
            let i = self.inode(e.inode)?;
            let kind = i.mode & S_IFMT;
            out.push(ListEntry {
                device: matches!(kind, S_IFCHR | S_IFBLK)
                    .then(|| self.device_number(e.inode))
                    .transpose()?,
                target: (kind == S_IFLNK)
                    .then(|| self.read_link(e.inode))
                    .transpose()?,
                mtime: i.times().mtime.unwrap_or(Timestamp { secs: 0, nanos: 0 }),
                name: e.name,
                ino: e.inode,
                mode: i.mode,
                links: i.links_count,
                uid: i.uid,
                gid: i.gid,
                size: i.size,
            });
        }
        Ok(out)
    }
}
