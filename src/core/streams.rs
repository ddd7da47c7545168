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

    /// Gives `stream` (the caller found it unknown) the next slot; None once every slot
    /// is taken (slots are never given back: pools keep their blocks).
    pub fn add(&mut self, stream: Stream) -> Option<u16> {
        let slot = u16::try_from(self.streams.len()).ok()?;
        self.streams.push(stream);
        self.last = slot as usize;
        Some(slot)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_run_out_instead_of_wrapping() {
        let mut slots = StreamSlots::default();
        let stream = |i: usize| Stream::from_raw((0x1000 + i * 16) as crate::sys::aclrtStream);
        for i in 0..=u16::MAX as usize {
            assert_eq!(slots.add(stream(i)), Some(i as u16));
        }
        assert_eq!(slots.add(stream(1 << 20)), None);
        assert_eq!(slots.known(stream(0)), Some(0));
        assert_eq!(slots.find(stream(u16::MAX as usize)), Some(u16::MAX));
    }
}
