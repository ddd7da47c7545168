//! Blocks shared with other processes of the host (docs/sharing.md): an export publishes the memory under a
//! block in this process's `table`, and another process maps it (`import`). While any process holds an
//! import, the memory is neither reused nor given back: the free succeeds at once and waits beside the
//! stream-ordered frees (`StreamOrder`) until no process holds the record.

pub(crate) mod import;
pub(crate) mod table;

use super::backing::Memory;
use super::cache::block::BlockState;
use crate::core::alloc::device::Device;
use crate::core::alloc::pool::Pool;
use crate::error::Result;
use table::{Record, HANDLE_SIZE};

impl<B: Memory> Pool<B> {
    /// Exports the live block at `addr` (its start); exporting it again names the same record.
    pub fn ipc_export(&mut self, addr: usize) -> Result<[u8; HANDLE_SIZE]> {
        let id = match self.cache.registry.get(&addr) {
            Some(&id) if self.cache.blocks.get(id).state == BlockState::Allocated => id,
            _ => return Err(self.unknown_pointer(addr, "ipc_export")),
        };
        if let Some(name) = self.cache.order.export_of(id) {
            return Ok(name.to_bytes());
        }
        let b = self.cache.blocks.get(id);
        let (seg, size) = (b.segment, b.size);
        let memory = B::share(self.parts(), seg, addr, size)?;
        let name = table::publish(&Record { device: self.sh.device, size, memory })?;
        self.cache.order.set_export(id, name);
        // Its free takes the slow path, which ends the export.
        self.cache.blocks.get_mut(id).has_other_streams = true;
        Ok(name.to_bytes())
    }
}

impl<B: Memory> Device<B> {
    /// Exports the live block at `addr` to other processes. The runtime refuses a handle a communication
    /// library registered (docs/sharing.md "Export and registration of one handle").
    pub fn ipc_export(&self, addr: usize) -> Result<[u8; HANDLE_SIZE]> {
        self.check_usable()?;
        self.owner(addr, "ipc_export")?.lock()?.ipc_export(addr)
    }
}
