//! A small free list of byte buffers, so block-sized allocations (hundreds
//! of KiB, which the allocator serves from fresh zeroed pages every time)
//! are reused instead of page-faulted in for every block.
//!
//! A buffer is handed out again only for a request of about its size (up
//! to twice the request): a short block never holds a full block's memory.
//! Otherwise every short last block of many small channels in flight (the
//! sync's bundles) kept a full block's capacity, and the pool's free list
//! grew to hundreds of them. The pool is bounded in buffers and in bytes.

/// Reusable byte buffers, at most `max` kept and `max_bytes` of capacity.
#[derive(Debug, Default)]
pub struct BufferPool {
    free: Vec<Vec<u8>>,
    max: usize,
    max_bytes: usize,
    bytes: usize,
}

impl BufferPool {
    /// A pool keeping at most `max` buffers.
    pub fn new(max: usize) -> Self {
        Self::with_byte_limit(max, usize::MAX)
    }

    /// A pool keeping at most `max` buffers of at most `max_bytes` of
    /// capacity together.
    pub fn with_byte_limit(max: usize, max_bytes: usize) -> Self {
        BufferPool {
            free: Vec::new(),
            max,
            max_bytes,
            bytes: 0,
        }
    }

    /// A buffer holding `prefix` followed by zeros up to `len` bytes.
    pub fn take_with(&mut self, prefix: &[u8], len: usize) -> Vec<u8> {
        debug_assert!(prefix.len() <= len);
        let mut v = self.take_fitting(len);
        v.clear();
        v.extend_from_slice(prefix);
        v.resize(len, 0);
        v
    }

    /// A buffer of `len` bytes whose contents are what its last user left
    /// (initialised, not zeroed; only bytes beyond its old length are
    /// zeros): for a caller that writes every byte before it reads it. It
    /// saves zeroing a block-sized buffer per block.
    pub fn take_any(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.take_fitting(len);
        if v.len() >= len {
            v.truncate(len);
        } else {
            v.resize(len, 0);
        }
        v
    }

    /// A free buffer of capacity `len ..= 2 × len` (or a new one).
    fn take_fitting(&mut self, len: usize) -> Vec<u8> {
        self.take_kept(len)
            .unwrap_or_else(|| Vec::with_capacity(len))
    }

    /// A kept buffer of capacity `len ..= 2 × len`, with what its last
    /// user left in it; `None` when none is kept (never allocates).
    pub fn take_kept(&mut self, len: usize) -> Option<Vec<u8>> {
        let fits = |v: &Vec<u8>| v.capacity() >= len && v.capacity() <= 2 * len.max(4096);
        let i = self.free.iter().rposition(fits)?;
        let v = self.free.swap_remove(i);
        self.bytes -= v.capacity();
        Some(v)
    }

    /// Returns a buffer for reuse.
    pub fn put(&mut self, buffer: Vec<u8>) {
        let cap = buffer.capacity();
        if self.free.len() < self.max && cap > 0 && self.bytes + cap <= self.max_bytes {
            self.bytes += cap;
            self.free.push(buffer);
        }
    }

    /// Capacity of the buffers kept for reuse, in bytes.
    pub fn kept_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether it keeps as many buffers as it may.
    pub fn is_full(&self) -> bool {
        self.free.len() >= self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_buffers_are_clean() {
        let mut p = BufferPool::new(2);
        let mut a = p.take_with(b"abc", 6);
        assert_eq!(a, b"abc\0\0\0");
        a.fill(0xFF);
        p.put(a);
        let b = p.take_with(b"x", 4);
        assert_eq!(b, b"x\0\0\0");
    }

    #[test]
    fn take_any_keeps_old_bytes_and_zeroes_only_new_ones() {
        let mut p = BufferPool::new(2);
        let mut a = p.take_any(4);
        assert_eq!(a, [0, 0, 0, 0]);
        a.fill(7);
        a.truncate(2);
        p.put(a);
        // Its two old bytes stay (nothing zeroes them), the two beyond its
        // old length are zeros.
        assert_eq!(p.take_any(4), [7, 7, 0, 0]);
    }

    #[test]
    fn a_short_request_never_gets_a_full_blocks_buffer() {
        let mut p = BufferPool::new(8);
        let big = p.take_with(&[], 363_000);
        let ptr = big.as_ptr();
        p.put(big);
        let small = p.take_with(&[], 20_000);
        assert!(
            small.capacity() < 363_000,
            "a short block holds a full block's memory"
        );
        p.put(small);
        let again = p.take_with(&[], 363_000);
        assert_eq!(again.as_ptr(), ptr, "the full block's buffer is reused");
    }

    #[test]
    fn the_pool_is_bounded_in_bytes() {
        let mut p = BufferPool::with_byte_limit(100, 1 << 20);
        let bufs: Vec<Vec<u8>> = (0..8).map(|_| p.take_with(&[], 300_000)).collect();
        for b in bufs {
            p.put(b);
        }
        assert!(p.kept_bytes() <= 1 << 20, "{}", p.kept_bytes());
        assert_eq!(p.kept_bytes(), 3 * 300_000);
    }
}
