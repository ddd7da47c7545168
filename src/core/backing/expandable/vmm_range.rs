//! One expandable segment's page table: which physical handle (a piece) is mapped over each page, what sleep took
//! off the device, and what a failed wake left mapped.

use super::sleep;
use crate::runtime::PhysicalHandle;
use crate::sys;

/// One physical handle mapped over `units` consecutive pages from `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub handle: PhysicalHandle,
    pub head: u32,
    pub units: u32,
}

impl Piece {
    pub(super) fn end(&self) -> usize {
        (self.head + self.units) as usize
    }
}

/// Virtual-memory bookkeeping of one expandable segment.
#[derive(Debug, Clone)]
pub struct VmmRange {
    /// The range's first address (its segment's base).
    pub base: usize,
    /// The mapping unit: every handle is a whole number of these.
    pub page_size: usize,
    pub attr: sys::aclrtMemAttr,
    /// Made for a request the ladder may try again: given back, if still empty, when a try fails for good; cleared
    /// when a request succeeds in it.
    pub for_request: bool,
    /// The piece mapped over each page; pages past the end were never mapped (grows with the highest mapping).
    pub pages: Vec<Option<Piece>>,
    /// Pages mapped.
    pub mapped: usize,
    /// The address `aclrtReserveMemAddress` returned; the range may start above it, aligned (`reserve_aligned`).
    pub reserved_at: usize,
    /// Bytes reserved there (alignment padding included), charged to the process-wide budget.
    pub reserved_len: usize,
    /// Runs of pages unmapped by `sleep`, to map again at `wake`.
    pub slept: Vec<sleep::SleptRun>,
    /// Pieces a wake mapped under a sleeping run and failed to unmap when undoing itself: still mapped and counted
    /// reserved; unmapped and freed before a later wake of their run, or at teardown (`sleep`).
    pub stuck: Vec<Piece>,
    /// Old addresses of handles moved without a synchronization (Note [moves of wholly free handles] in `moves`):
    /// each still maps its handle, which is also mapped (and counted) at its new pages.
    pub retired: RetiredSpans,
}

/// A range's retired spans, boxed so a range with none (the usual case) keeps the hit path's page tables small.
#[derive(Debug, Clone, Default)]
// One word when empty (a `Vec` is three): the box is the point.
#[allow(clippy::box_collection)]
pub struct RetiredSpans(Option<Box<Vec<Retired>>>);

impl RetiredSpans {
    pub fn push(&mut self, r: Retired) {
        self.0.get_or_insert_with(Default::default).push(r);
    }

    /// Takes the `k`th span out (the box goes with the last one).
    pub fn remove(&mut self, k: usize) -> Retired {
        let spans = self.0.as_mut().expect("a retired span to remove");
        let r = spans.remove(k);
        if spans.is_empty() {
            self.0 = None;
        }
        r
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Retired> {
        self.0.as_deref_mut().map_or(&mut [][..], |v| v.as_mut_slice()).iter_mut()
    }
}

impl std::ops::Deref for RetiredSpans {
    type Target = [Retired];

    fn deref(&self) -> &[Retired] {
        self.0.as_deref().map_or(&[], |v| v.as_slice())
    }
}

/// A moved handle's old pages: `units` pages from `head`, still mapped, covered by a `Reclaiming` `block` (so
/// nobody is handed them) until a reclaim has synchronized and unmaps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    pub head: u32,
    pub units: u32,
    pub block: crate::core::cache::block::BlockId,
    /// Given back by a reclaim now under way (`Backing::unused`).
    pub flushing: bool,
}

impl VmmRange {
    /// Records `piece` mapped over its pages.
    pub fn set(&mut self, piece: Piece) {
        let (head, end) = (piece.head as usize, piece.end());
        if self.pages.len() < end {
            self.pages.resize(end, None);
        }
        self.pages[head..end].fill(Some(piece));
        self.mapped += piece.units as usize;
    }

    /// Records the `units` pages from `head` unmapped.
    pub fn clear(&mut self, head: usize, units: usize) {
        self.pages[head..head + units].fill(None);
        self.mapped -= units;
    }

    /// The piece mapped over page `i`, if any.
    #[inline]
    pub fn page(&self, i: usize) -> Option<Piece> {
        self.pages.get(i).copied().flatten()
    }

    /// Every piece mapped over the pages, in page order.
    pub fn pieces(&self) -> impl Iterator<Item = Piece> + '_ {
        self.pages.iter().enumerate().filter_map(|(i, p)| p.filter(|p| p.head as usize == i))
    }

    /// No page at or above this index has ever been mapped.
    #[inline]
    pub fn top(&self) -> usize {
        self.pages.len()
    }

    /// Whether page `i` lies on a run `sleep` took off the device: unmapped, but owned by the run's blocks until
    /// wake (Note [sleep]).
    #[inline]
    pub fn slept_at(&self, i: usize) -> bool {
        !self.slept.is_empty() && self.slept.iter().any(|run| run.covers(i))
    }

    /// Whether a placement may map page `i`: unmapped and not asleep.
    #[inline]
    pub fn mappable(&self, i: usize) -> bool {
        self.page(i).is_none() && !self.slept_at(i)
    }

    /// The first page from `from` a placement may not map, at most `to` (`from` itself when `to` is below it).
    #[inline]
    pub fn mappable_end(&self, from: usize, to: usize) -> usize {
        (from..to).find(|&j| !self.mappable(j)).unwrap_or(to.max(from))
    }

    /// Pages mapped at moved handles' old addresses (mapped, yet counted at the handles' new pages).
    #[inline]
    pub fn retired_units(&self) -> usize {
        self.retired.iter().map(|r| r.units as usize).sum()
    }

    /// Whether page `i` lies on a retired span.
    #[inline]
    pub fn retired_at(&self, i: usize) -> bool {
        !self.retired.is_empty()
            && self.retired.iter().any(|r| (r.head as usize..(r.head + r.units) as usize).contains(&i))
    }

    /// Whether `handle` is also mapped at a retired span (its live mapping must not be unmapped into the cache).
    #[inline]
    pub fn is_moved(&self, handle: PhysicalHandle) -> bool {
        !self.retired.is_empty()
            && self.retired.iter().any(|r| self.page(r.head as usize).is_some_and(|p| p.handle == handle))
    }

    /// The runs [from, to) of bytes from `base` within [lo, hi) that device memory backs, in address order: pages
    /// mapped and not on a retired span (counted at its new pages; a free block never holds one), clipped to [lo, hi).
    pub fn mapped_spans(&self, lo: usize, hi: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let page = self.page_size;
        let (first, end) = (lo / page, hi.div_ceil(page).min(self.top()));
        // Only a span crossing [first, end) is skipped page by page; mapped densely below the top and crossed by
        // none, it is one run and no page is looked at.
        let crossed = self.retired.iter().any(|r| (r.head as usize) < end && first < (r.head + r.units) as usize);
        let dense = self.mapped == self.top() && !crossed;
        let backs = move |i: usize| dense || (self.page(i).is_some() && !(crossed && self.retired_at(i)));
        let mut i = first;
        std::iter::from_fn(move || {
            while i < end && !backs(i) {
                i += 1;
            }
            let from = i;
            while i < end && backs(i) {
                i += 1;
            }
            (from < i).then(|| ((from * page).max(lo), (i * page).min(hi)))
        })
    }

    /// Whether any page of [first, end) is asleep.
    pub fn slept_within(&self, first: usize, end: usize) -> bool {
        self.slept.iter().any(|run| (run.head as usize) < end && first < run.head as usize + run.units())
    }
}
