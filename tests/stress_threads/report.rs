//! What the threads report: problems seen, and counts of what they did.

/// What went wrong, collected from every thread (the first few of each kind
/// are kept in full).
#[derive(Default)]
pub(crate) struct Problems {
    pub(crate) corruptions: u64,
    pub(crate) bad_statuses: u64,
    pub(crate) notes: Vec<String>,
}

impl Problems {
    pub(crate) fn note(&mut self, what: String) {
        if self.notes.len() < 20 {
            self.notes.push(what);
        }
    }
}

#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) mallocs: u64,
    pub(crate) ooms: u64,
    pub(crate) frees: u64,
    pub(crate) frees_of_received: u64,
    pub(crate) sent: u64,
    pub(crate) received_kept: u64,
    pub(crate) records: u64,
    pub(crate) empties: u64,
    pub(crate) copy_rounds: u64,
    pub(crate) copy_rounds_skipped: u64,
    pub(crate) bytes_checked: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, c: &Counts) {
        self.mallocs += c.mallocs;
        self.ooms += c.ooms;
        self.frees += c.frees;
        self.frees_of_received += c.frees_of_received;
        self.sent += c.sent;
        self.received_kept += c.received_kept;
        self.records += c.records;
        self.empties += c.empties;
        self.copy_rounds += c.copy_rounds;
        self.copy_rounds_skipped += c.copy_rounds_skipped;
        self.bytes_checked += c.bytes_checked;
    }
}
