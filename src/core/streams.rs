//! Stream slots: each stream an allocator has served gets a small index, so
//! per-stream pools are a vector look-up instead of a hash.

use crate::runtime::Stream;

#[derive(Debug, Default)]
pub struct StreamSlots {
    streams: Vec<Stream>,
    last: usize,
}

impl StreamSlots {
    /// The slot of `stream`, adding it if new. Returns (slot, was_added).
    #[inline]
    pub fn slot(&mut self, stream: Stream) -> (u16, bool) {
        if self.streams.get(self.last) == Some(&stream) {
            return (self.last as u16, false);
        }
        if let Some(i) = self.streams.iter().position(|&s| s == stream) {
            self.last = i;
            return (i as u16, false);
        }
        self.streams.push(stream);
        self.last = self.streams.len() - 1;
        (self.last as u16, true)
    }

    /// The slot of `stream` if it has one.
    pub fn find(&self, stream: Stream) -> Option<u16> {
        self.streams.iter().position(|&s| s == stream).map(|i| i as u16)
    }

    #[inline]
    pub fn stream(&self, slot: u16) -> Stream {
        self.streams[slot as usize]
    }

    pub fn all(&self) -> &[Stream] {
        &self.streams
    }
}
