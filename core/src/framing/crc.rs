//! The two checksums of a frame, computed with constant tables built at compile time (no
//! dependency, 512 + 4096 bytes of read-only data).
//!
//! * [`crc16`]: CRC-16/CCITT-FALSE (polynomial `0x1021`, initial value `0xFFFF`, not
//!   reflected, no final XOR; check value `0x29B1` for `"123456789"`). It guards the
//!   header, so that a damaged length is caught before the decoder waits for it.
//! * [`crc32`] / [`Crc32`]: CRC-32/ISO-HDLC, the Ethernet and zlib CRC (polynomial
//!   `0x04C11DB7` reflected, initial value and final XOR `0xFFFF_FFFF`; check value
//!   `0xCBF4_3926`). It guards the whole frame after the sync marker.

/// Bytes the CRC-32 takes per step: the slicing-by-4 method, four tables of 256 entries
/// (4 KiB of read-only data), about three times the speed of one table.
const SLICES: usize = 4;

/// The CRC-32 tables: `CRC32_TABLES[0]` is the classic byte table (reflected polynomial
/// `0xEDB8_8320`); `CRC32_TABLES[k][b]` is the CRC of byte `b` followed by `k` zero bytes.
const CRC32_TABLES: [[u32; 256]; SLICES] = {
    let mut tables = [[0u32; 256]; SLICES];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            bit += 1;
        }
        tables[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < SLICES {
        let mut i = 0;
        while i < 256 {
            let prev = tables[k - 1][i];
            tables[k][i] = (prev >> 8) ^ tables[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
};

/// The CRC-16/CCITT-FALSE table, one entry per byte value (polynomial `0x1021`).
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            bit += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-16/CCITT-FALSE of `bytes` (the header check of a frame).
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc = 0xFFFFu16;
    for &b in bytes {
        let index = usize::from(((crc >> 8) as u8) ^ b);
        crc = (crc << 8) ^ CRC16_TABLE[index];
    }
    crc
}

/// A CRC-32/ISO-HDLC computed over several slices in turn.
///
/// ```
/// use starling_core::framing::{Crc32, crc32};
///
/// let mut crc = Crc32::new();
/// crc.update(b"1234");
/// crc.update(b"56789");
/// assert_eq!(crc.finish(), 0xCBF4_3926);
/// assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crc32(u32);

impl Crc32 {
    /// The CRC of nothing yet.
    pub const fn new() -> Self {
        Self(0xFFFF_FFFF)
    }

    /// Adds `bytes` to the checksum.
    pub fn update(&mut self, bytes: &[u8]) {
        let [t0, t1, t2, t3] = &CRC32_TABLES;
        let mut crc = self.0;
        let mut words = bytes.chunks_exact(SLICES);
        for w in &mut words {
            let [a, b, c, d] = (crc ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]])).to_le_bytes();
            crc = t3[usize::from(a)] ^ t2[usize::from(b)] ^ t1[usize::from(c)] ^ t0[usize::from(d)];
        }
        for &b in words.remainder() {
            crc = t0[usize::from((crc as u8) ^ b)] ^ (crc >> 8);
        }
        self.0 = crc;
    }

    /// The checksum of every byte added so far.
    pub const fn finish(&self) -> u32 {
        !self.0
    }
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

/// CRC-32/ISO-HDLC of `bytes` (the frame check of a frame).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = Crc32::new();
    crc.update(bytes);
    crc.finish()
}
