//! A small free list of byte buffers, so block-sized allocations (hundreds
//! of KiB, which the allocator serves from fresh zeroed pages every time)
//! are reused instead of page-faulted in for every block.

/// Reusable byte buffers, at most `max` kept.
#[derive(Debug, Default)]
pub struct BufferPool {
    free: Vec<Vec<u8>>,
    max: usize,
}

impl BufferPool {
    /// A pool keeping at most `max` buffers.
    pub fn new(max: usize) -> Self {
        BufferPool {
            free: Vec::new(),
            max,
        }
    }

    /// A buffer holding `prefix` followed by zeros up to `len` bytes.
    pub fn take_with(&mut self, prefix: &[u8], len: usize) -> Vec<u8> {
        debug_assert!(prefix.len() <= len);
        let mut v = self.free.pop().unwrap_or_default();
        v.clear();
        v.reserve(len);
        v.extend_from_slice(prefix);
        v.resize(len, 0);
        v
    }

    /// Returns a buffer for reuse.
    pub fn put(&mut self, buffer: Vec<u8>) {
        if self.free.len() < self.max && buffer.capacity() > 0 {
            self.free.push(buffer);
        }
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
}
