//! [`Rng`]: xorshift64, a reproducible generator with no dependency, for
//! tests that want the same inputs every run.

/// xorshift64 (13, 7, 17) from a non-zero seed.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Fills `buf` with the low bytes of successive values.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }

    /// `n` bytes from [`Rng::fill`].
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_sequence_is_xorshift64() {
        let mut r = Rng(1);
        // 1 ^ 1<<13 = 0x2001; ^ >>7 = 0x2001 ^ 0x40 = 0x2041; ^ <<17.
        assert_eq!(r.next(), 0x2041 ^ (0x2041 << 17));
        assert!(Rng(7).below(10) < 10);
        assert_eq!(Rng(7).below(0), 0);
        assert_eq!(Rng(9).bytes(3), {
            let mut r = Rng(9);
            vec![r.next() as u8, r.next() as u8, r.next() as u8]
        });
    }
}
