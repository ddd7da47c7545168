//! Stream slots: each stream an allocator has served gets a small index, so
//! per-stream pools are a vector look-up instead of a hash.

use crate::runtime::Stream;

#[derive(Debug, Default)]
pub struct StreamSlots {
    streams: Vec<Stream>,
    last: usize,
}

impl StreamSlots {
    /// The slot of `stream` if it has one; remembered for the next call.
    #[inline]
    pub fn known(&mut self, stream: Stream) -> Option<u16> {
        if self.streams.get(self.last) == Some(&stream) {
            return Some(self.last as u16);
        }
        let i = self.streams.iter().position(|&s| s == stream)?;
        self.last = i;
        Some(i as u16)
    }

    /// Gives `stream` (not known yet) the next slot.
    pub fn add(&mut self, stream: Stream) -> u16 {
        debug_assert!(!self.streams.contains(&stream));
        self.streams.push(stream);
        self.last = self.streams.len() - 1;
        self.last as u16
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
