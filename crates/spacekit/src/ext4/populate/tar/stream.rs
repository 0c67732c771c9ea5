//! The reader under the tar walk: a multi-frame zstd stream.

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
