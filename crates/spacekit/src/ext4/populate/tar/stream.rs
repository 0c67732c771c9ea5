//! The readers under the tar walk: a multi-frame zstd stream, and a
//! gzip stream of one or more members.

use std::io::{self, BufRead, Read};

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// A zstd stream of one or more frames (skippable frames skipped), each
/// checked against its content checksum when it has one.
pub(super) struct Zstd<R: BufRead> {
    pub(super) src: R,
    pub(super) dec: FrameDecoder,
    /// Whether a frame is being decoded.
    pub(super) live: bool,
}

impl<R: BufRead> Read for Zstd<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.live {
                while self.dec.can_collect() == 0 && !self.dec.is_finished() {
                    self.dec
                        .decode_blocks(&mut self.src, BlockDecodingStrategy::UptoBlocks(1))
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                let n = self.dec.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                if let (Some(a), Some(b)) = (
                    self.dec.get_checksum_from_data(),
                    self.dec.get_calculated_checksum(),
                ) {
                    if a != b {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "zstd: the content checksum does not match",
                        ));
                    }
                }
                self.live = false;
            }
            if self.src.fill_buf()?.is_empty() {
                return Ok(0);
            }
            match self.dec.reset(&mut self.src) {
                Ok(()) => self.live = true,
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let len = u64::from(length);
                    if io::copy(&mut (&mut self.src).take(len), &mut io::sink())? != len {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
    }
}

/// A gzip stream of one or more members, each checked against its CRC
/// and length when it ends. Zero bytes after the last member (a stream
/// padded to a block size, as tape-blocked output is) are taken as its
/// end, as `gzip -d` takes them; anything else after it is an error.
pub(super) struct Gz<R: BufRead> {
    /// The member being decoded, or none between members.
    pub(super) dec: Option<flate2::bufread::GzDecoder<R>>,
    /// The stream between members.
    pub(super) src: Option<R>,
    /// Zeros after a member were met: only more zeros may follow.
    padding: bool,
}

impl<R: BufRead> Gz<R> {
    pub(super) fn new(src: R) -> Self {
        Gz {
            dec: Some(flate2::bufread::GzDecoder::new(src)),
            src: None,
            padding: false,
        }
    }
}

impl<R: BufRead> Read for Gz<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(d) = &mut self.dec {
                let n = d.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                self.src = self.dec.take().map(|d| d.into_inner());
            }
            let Some(src) = self.src.as_mut() else {
                return Ok(0);
            };
            let b = src.fill_buf()?;
            match b.first() {
                None => return Ok(0),
                Some(0) => {
                    let zeros = b.iter().take_while(|&&x| x == 0).count();
                    if zeros < b.len() {
                        return Err(trailing());
                    }
                    src.consume(zeros);
                    self.padding = true;
                }
                Some(0x1f) if !self.padding => {
                    self.dec = self.src.take().map(flate2::bufread::GzDecoder::new);
                }
                Some(_) => return Err(trailing()),
            }
        }
    }
}

fn trailing() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "bytes after the gzip stream that are neither a gzip member nor zeros",
    )
}
