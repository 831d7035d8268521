//! The fingerprints of short windows of a set of forms (docs/reference/dlp.md, "How it
//! is looked for"): a bit filter that rejects almost every probe with one or two reads,
//! and behind it a sorted list that names the canaries a window may belong to. Letters
//! are folded before hashing (`| 0x20` on every byte: coarser than ASCII case, so a form
//! that matches in either case is never missed); the comparison that follows a hit is
//! exact, so folding and collisions only cost a look, never a wrong answer.

/// The bytes of a window: one unaligned 64-bit read.
pub(super) const WINDOW: usize = 8;

/// `| 0x20` on each byte: `A`-`Z` become `a`-`z` (and a few other bytes move too).
const FOLD: u64 = 0x2020_2020_2020_2020;

/// A window's hash for the filter: its top bits depend on every byte of the window.
#[inline(always)]
fn hash(window: u64) -> u64 {
    (window | FOLD).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The 24 bits the sorted list keeps of a window: mixed again, so they too depend on
/// every byte (computed only where the filter lets a probe through).
#[inline(always)]
fn fingerprint(x: u64) -> u32 {
    let y = (x ^ (x >> 29)).wrapping_mul(0xd6e8_feb8_6659_fd93);
    (y >> 40) as u32
}

/// The 8 bytes at `at` as one number (little-endian, as the hash reads them).
#[inline(always)]
fn window(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + WINDOW].try_into().expect("8 bytes"))
}

#[derive(Default)]
pub(super) struct Index {
    /// A probe every `stride` bytes; 0 when there is nothing to look for.
    stride: usize,
    /// A bit a hash; `bits` is its size's log2.
    filter: Vec<u64>,
    bits: u32,
    /// Where a hash's bits are: its top `bits` bits, and a second `bits` bits below them
    /// (the same bit again in the filter of one bit a window, so a probe is one test).
    first: u32,
    second: u32,
    /// Sorted: a window's fingerprint, then the low byte of its canary's number.
    entries: Vec<u32>,
}

impl Index {
    /// The index of `windows` (each [`WINDOW`] bytes, with the number of its canary),
    /// probed every `stride` bytes. `large`: one bit a window in a filter of 64 bits a
    /// window and 16 KiB at least; else two bits a window in 8 bits a window.
    pub(super) fn build<'a>(
        windows: impl Iterator<Item = (&'a [u8], usize)>,
        stride: usize,
        large: bool,
    ) -> Index {
        let hashes: Vec<(u64, usize)> = windows
            .map(|(w, canary)| (hash(window(w, 0)), canary))
            .collect();
        if hashes.is_empty() {
            return Index::default();
        }
        let mut entries: Vec<u32> = hashes
            .iter()
            .map(|&(x, canary)| fingerprint(x) << 8 | (canary & 0xff) as u32)
            .collect();
        entries.sort_unstable();
        entries.dedup();
        entries.shrink_to_fit();
        let (per, least) = match large {
            true => (64, 1 << 17),
            false => (8, 64),
        };
        let size = (entries.len() * per).next_power_of_two().max(least);
        let bits = size.trailing_zeros();
        let first = 64 - bits;
        let mut index = Index {
            stride,
            filter: vec![0; size / 64],
            bits,
            first,
            second: match large {
                true => first,
                false => 64u32.saturating_sub(2 * bits),
            },
            entries,
        };
        for (x, _) in hashes {
            for bit in index.bits_of(x) {
                index.filter[bit / 64] |= 1 << (bit % 64);
            }
        }
        index
    }

    /// The filter's bits of a window's hash `x` (twice the same one in the filter of
    /// one bit a window).
    #[inline(always)]
    fn bits_of(&self, x: u64) -> [usize; 2] {
        let mask = (1usize << self.bits) - 1;
        [
            (x >> self.first) as usize,
            (x >> self.second) as usize & mask,
        ]
    }

    /// Whether the filter lets a window's hash `x` through.
    #[inline(always)]
    fn through(&self, x: u64) -> bool {
        let has = |bit: usize| self.filter[bit >> 6] >> (bit & 63) & 1 != 0;
        let [first, second] = self.bits_of(x);
        has(first) & has(second)
    }

    /// The next probe position from `at` whose window the filter lets through. Four
    /// probes a turn while they fit: four independent reads and multiplications, and
    /// one branch for the four (almost every probe is rejected), then one at a time.
    #[inline]
    fn next(&self, bytes: &[u8], mut at: usize) -> Option<(usize, u64)> {
        let stride = self.stride;
        let span = 3 * stride + WINDOW;
        while at + span <= bytes.len() {
            let block = &bytes[at..at + span];
            let x = |k: usize| hash(window(block, k * stride));
            let x = [x(0), x(1), x(2), x(3)];
            let t = |k: usize| self.through(x[k]);
            let through = [t(0), t(1), t(2), t(3)];
            if through[0] | through[1] | through[2] | through[3] {
                let k = (0..4).find(|&k| through[k]).expect("one went through");
                return Some((at + k * stride, x[k]));
            }
            at += 4 * stride;
        }
        while at + WINDOW <= bytes.len() {
            let x = hash(window(bytes, at));
            if self.through(x) {
                return Some((at, x));
            }
            at += stride;
        }
        None
    }

    pub(super) fn stride(&self) -> usize {
        self.stride
    }

    /// The first answer `verify` gives, called at each probe position `at` whose window
    /// may belong to a form, with a test of whether it may be canary `i`'s.
    #[inline]
    pub(super) fn probe<R>(
        &self,
        bytes: &[u8],
        mut verify: impl FnMut(usize, &dyn Fn(usize) -> bool) -> Option<R>,
    ) -> Option<R> {
        if self.entries.is_empty() || bytes.len() < WINDOW {
            return None;
        }
        let mut from = 0;
        while let Some((at, x)) = self.next(bytes, from) {
            let fp = fingerprint(x);
            let group = &self.entries[self.entries.partition_point(|e| e >> 8 < fp)..];
            let n = group.iter().take_while(|e| *e >> 8 == fp).count();
            if n > 0 {
                let group = &group[..n];
                let of = |i: usize| group.iter().any(|e| e & 0xff == (i & 0xff) as u32);
                if let Some(found) = verify(at, &of) {
                    return Some(found);
                }
            }
            from = at + self.stride;
        }
        None
    }

    /// The bytes it takes.
    #[cfg(test)]
    pub(super) fn memory_usage(&self) -> usize {
        self.filter.capacity() * 8 + self.entries.capacity() * 4
    }
}
