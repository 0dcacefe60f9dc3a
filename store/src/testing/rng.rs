//! A small deterministic generator (xorshift64*) for seeded randomized tests: a failing case is
//! replayed from its seed, without a property-testing dependency.

#[derive(Clone, Debug)]
pub struct SeededRng(u64);

impl SeededRng {
    /// `seed` must not be 0 (xorshift would stay at 0); 0 is replaced by a fixed constant.
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    /// `len` random lowercase letters: text no store compresses much (PostgreSQL's TOAST and
    /// other LZ compressors shrink a repeated letter to nearly nothing, and with it what a test
    /// of bytes written or retained measures).
    pub fn letters(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from(b'a' + self.below(26) as u8))
            .collect()
    }

    /// An index into a slice of `len` elements (`len` > 0).
    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).expect("below a usize")
    }
}
