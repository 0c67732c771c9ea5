//! A tiny reader over the fuzzer's bytes: every target decodes its input
//! with it, so the checks need no `arbitrary` and the stable replay test no
//! new dependency. Reading past the end gives zeros (a short input is a
//! valid input: the decoders simply stop when `is_empty`).

#[derive(Clone)]
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.data[self.pos.min(self.data.len())..]
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// A value in `0..n` (0 when `n` is 0), from as few bytes as fit.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let v = if n <= 1 << 8 {
            u64::from(self.u8())
        } else if n <= 1 << 16 {
            u64::from(self.u16())
        } else if n <= 1 << 32 {
            u64::from(self.u32())
        } else {
            self.u64()
        };
        v % n
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = start + n;
        &self.data[start..end]
    }

    /// A u64 biased towards edge values: small numbers, powers of two and
    /// their neighbours, and the extremes.
    pub fn edgy_u64(&mut self) -> u64 {
        match self.u8() % 8 {
            0 => u64::from(self.u8()),
            1 => 1u64 << (self.u8() % 64),
            2 => (1u64 << (self.u8() % 64)).wrapping_sub(1),
            3 => (1u64 << (self.u8() % 64)).wrapping_add(1),
            4 => u64::MAX - u64::from(self.u8()),
            5 => u64::from(self.u16()),
            _ => self.u64(),
        }
    }
}
