//! `npualloc_ipc_export` / `npualloc_ipc_import` / `npualloc_ipc_close`
//! between real processes on the ACL emulator (built by `cargo build
//! --workspace`), in fixed and expandable mode (mapping ahead and not): this binary exports, and
//! starts itself again as a peer that imports (or exports: `peer`), taking
//! commands on its standard input and answering each with one line.

mod common;

use common::sleep_pools::{reads, write};
use common::*;
use npualloc::ffi::ipc::*;
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::runtime::Stream;
use std::ffi::c_void;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

const DEVICE: i32 = 0;
const MIB: usize = 1 << 20;
const MODES: [&str; 3] = ["expandable_segments:false", "expandable_segments:true,map_ahead:false", ""];

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("peer") => return peer(),
        Some("unaligned") => return unaligned(),
        _ => {}
    }
    // Under ACLEMU_MALLOC_ALIGN's random placement every aclrtMalloc block
    // starts off its page, and the runtime exports only page-aligned
    // allocations by key: that case runs in a process of its own, the rest
    // (and their peers, which inherit this environment) with the default
    // placement.
    if std::env::var_os("ACLEMU_MALLOC_ALIGN").is_some() {
        let done = Command::new(std::env::current_exe().unwrap()).arg("unaligned").status().unwrap();
        assert!(done.success(), "the unaligned case failed");
        println!("test ipc: a fixed segment off its page is refused, an expandable block is not ... ok");
        std::env::remove_var("ACLEMU_MALLOC_ALIGN");
    }
    type Case = (&'static str, fn(&str));
    let cases: [Case; 8] = [
        ("the importer and the exporter see each other's writes", shares_memory),
        ("a freed block stays while imported and comes back when the importer closes or dies", lifetime),
        ("handles that are not exports, or no longer, are refused", bad_handles),
        ("an import outlives its exporter", outlives_exporter),
        ("a block in a private pool and a view at an offset", pools_and_offsets),
        ("pool_destroy, forget_stream and the out-of-memory ladder with an import", other_paths),
        ("a block freed on a capturing stream is no longer exported", captured),
        // Last: destroy leaves memory an importer held on the device for the process's life.
        ("statistics, the snapshot, sleep and destroy with an import", reports_and_refusals),
    ];
    for (name, case) in cases {
        for mode in MODES {
            case(mode);
            println!("test ipc: {name} ({}) ... ok", if mode.is_empty() { "default config" } else { mode });
        }
    }
}

// ---- the peer process

/// A peer: the same binary started with `peer`.
struct Peer {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Peer {
    fn start() -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg("peer")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the peer process");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Peer { child, input, output }
    }

    /// One command; Ok(the words after "ok") or Err((status, message)).
    fn ask(&mut self, command: &str) -> Result<Vec<String>, (i32, String)> {
        writeln!(self.input, "{command}").unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let mut words = line.trim_end().splitn(3, ' ').map(str::to_owned);
        match words.next().as_deref() {
            Some("ok") => Ok(words.flat_map(|w| w.split(' ').map(str::to_owned).collect::<Vec<_>>()).collect()),
            Some("err") => Err((words.next().unwrap().parse().unwrap(), words.next().unwrap_or_default())),
            _ => panic!("peer answered {line:?} to {command:?}"),
        }
    }

    fn values(&mut self, command: &str) -> Vec<usize> {
        let words = self.ask(command).unwrap_or_else(|e| panic!("{command}: {e:?}"));
        words.iter().map(|w| w.parse().unwrap()).collect()
    }

    fn import(&mut self, h: &npualloc_ipc_handle) -> (usize, usize) {
        let v = self.values(&format!("import {}", hex(&h.bytes)));
        (v[0], v[1])
    }

    fn stop(mut self) {
        assert_eq!(self.ask("exit"), Ok(vec![]));
        assert!(self.child.wait().unwrap().success());
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> npualloc_ipc_handle {
    let mut h = npualloc_ipc_handle { bytes: [0; NPUALLOC_IPC_HANDLE_SIZE] };
    for (i, b) in h.bytes.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    h
}

fn peer() {
    let e = emu();
    let mut out = std::io::stdout();
    let mut own: Option<Handle> = None;
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| -> usize { w[i].parse().unwrap() };
        let answer: Result<Vec<String>, npualloc_status> = match w[0] {
            "exit" => {
                writeln!(out, "ok").unwrap();
                return;
            }
            "import" => {
                let (mut p, mut size) = (std::ptr::null_mut(), 0usize);
                // SAFETY: live locals.
                let st = unsafe { npualloc_ipc_import(&unhex(w[1]), DEVICE, &mut p, &mut size) };
                ok(st).map(|()| vec![(p as usize).to_string(), size.to_string()])
            }
            // SAFETY: the test passes pointers this peer imported (or not: refused).
            "close" => ok(unsafe { npualloc_ipc_close(n(1) as *mut c_void) }).map(|()| vec![]),
            "check" => Ok(vec![(reads(n(1), n(2), n(3) as u8) as u8).to_string()]),
            "write" => {
                write(n(1), n(2), n(3) as u8);
                Ok(vec![])
            }
            // export <config, - for none> <bytes> <byte>: this peer's own
            // block, filled.
            "export" => {
                let config = if w[1] == "-" { "" } else { w[1] };
                let a = *own.get_or_insert_with(|| create(config, DEVICE).unwrap());
                let p = malloc(a, n(2), Stream::DEFAULT).unwrap();
                write(p, n(2), n(3) as u8);
                let mut h = npualloc_ipc_handle { bytes: [0; NPUALLOC_IPC_HANDLE_SIZE] };
                // SAFETY: a live handle and block, a live out value.
                ok(unsafe { npualloc_ipc_export(a, p as *mut c_void, &mut h) }).map(|()| vec![hex(&h.bytes)])
            }
            // stress <handle> <threads> <rounds> <byte>: threads importing,
            // checking and closing the same handle at once; answers the
            // imports that read `byte`.
            "stress" => {
                let h = unhex(w[1]);
                let (threads, rounds, byte) = (n(2), n(3), n(4) as u8);
                let good = std::sync::atomic::AtomicUsize::new(0);
                std::thread::scope(|scope| {
                    for _ in 0..threads {
                        scope.spawn(|| {
                            for _ in 0..rounds {
                                let (mut p, mut size) = (std::ptr::null_mut(), 0usize);
                                // SAFETY: live locals.
                                let st = unsafe { npualloc_ipc_import(&h, DEVICE, &mut p, &mut size) };
                                assert_eq!(st, NPUALLOC_OK, "{}", last_error_message());
                                if reads(p as usize, 4096, byte) {
                                    good.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                // SAFETY: an import of this thread.
                                assert_eq!(unsafe { npualloc_ipc_close(p) }, NPUALLOC_OK);
                            }
                        });
                    }
                });
                Ok(vec![good.into_inner().to_string()])
            }
            // What this process holds on the device: mapped bytes, ranges,
            // physical handles, allocations.
            "usage" => {
                let u = e.usage(DEVICE);
                Ok([u.mapped_bytes, u.reserved_ranges, u.physical_count, u.malloc_count].map(|x| x.to_string()).into())
            }
            other => panic!("unknown command {other}"),
        };
        match answer {
            Ok(words) => writeln!(out, "ok {}", words.join(" ")).unwrap(),
            Err(st) => writeln!(out, "err {} {}", st as i32, last_error_message()).unwrap(),
        }
        out.flush().unwrap();
    }
}

fn ok(st: npualloc_status) -> Result<(), npualloc_status> {
    if st == NPUALLOC_OK {
        Ok(())
    } else {
        Err(st)
    }
}

// ---- the exporter's side

fn export(a: Handle, p: usize) -> npualloc_ipc_handle {
    let mut h = npualloc_ipc_handle { bytes: [0; NPUALLOC_IPC_HANDLE_SIZE] };
    // SAFETY: a live handle, a live out value.
    let st = unsafe { npualloc_ipc_export(a, p as *mut c_void, &mut h) };
    assert_eq!(st, NPUALLOC_OK, "export: {}", last_error_message());
    h
}

/// How many pieces of mapped memory overlap [p, p + len), as
/// `npualloc_for_each_segment` lists them.
fn pieces_under(a: Handle, p: usize, len: usize) -> usize {
    mapped_pieces(a).iter().filter(|&&(at, n, _)| at < p + len && p < at + n).count()
}

fn clean_peer(peer: &mut Peer) {
    assert_eq!(peer.values("usage"), [0, 0, 0, 0], "the importer holds nothing on its device");
}

fn shares_memory(mode: &str) {
    let e = emu();
    let a = create(mode, DEVICE).unwrap();
    // The second block shares its first page with the first, and lies on
    // two physical handles in expandable mode (no mapping ahead).
    let first = malloc(a, 3 * MIB, Stream::DEFAULT).unwrap();
    let p = malloc(a, 7 * MIB, Stream::DEFAULT).unwrap();
    write(p, 7 * MIB, 0x11);
    if mode.contains("map_ahead:false") {
        assert!(pieces_under(a, p, 7 * MIB) >= 2, "the block lies on several physical handles");
    }
    let h = export(a, p);
    assert_eq!(export(a, p).bytes, h.bytes, "exporting again gives the same handle");
    let mut peer = Peer::start();
    let (q, size) = peer.import(&h);
    assert!(size >= 7 * MIB);
    assert_eq!(peer.values(&format!("check {q} {} 17", 7 * MIB)), [1]);
    assert_eq!(peer.ask(&format!("write {} {} 34", q + MIB, 5 * MIB)), Ok(vec![]));
    assert!(reads(p + MIB, 5 * MIB, 0x22) && reads(p, MIB, 0x11), "the exporter sees the importer's writes");
    // A second import of the same handle needs its own close.
    let (q2, _) = peer.import(&h);
    assert_eq!(peer.values(&format!("check {q2} {MIB} 17")), [1]);
    assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    assert_eq!(peer.values(&format!("check {q2} {MIB} 17")), [1], "one close ends one import");
    assert_eq!(peer.ask(&format!("close {q2}")), Ok(vec![]));
    assert_eq!(peer.ask(&format!("close {q2}")).unwrap_err().0, NPUALLOC_ERR_UNKNOWN_POINTER as i32);
    clean_peer(&mut peer);
    // Threads of the importer importing and closing it at once.
    assert_eq!(peer.values(&format!("stress {} 4 25 17", hex(&h.bytes))), [100]);
    clean_peer(&mut peer);
    peer.stop();
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(free(a, first), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
    assert!(e.usage(DEVICE).is_clean(), "{mode}: {:?}", e.usage(DEVICE));
}

fn lifetime(mode: &str) {
    let e = emu();
    let a = create(mode, DEVICE).unwrap();
    let p = malloc(a, 12 * MIB, Stream::DEFAULT).unwrap();
    write(p, 12 * MIB, 0x5a);
    let h = export(a, p);
    let mut peer = Peer::start();
    let (q, _) = peer.import(&h);
    // The free succeeds at once; the memory is neither reused nor given back.
    assert_eq!(free(a, p), NPUALLOC_OK);
    let other = malloc(a, 12 * MIB, Stream::DEFAULT).unwrap();
    assert_ne!(other, p, "{mode}: memory an importer holds is not handed out again");
    write(other, 12 * MIB, 0x33);
    assert_eq!(free(a, other), NPUALLOC_OK);
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    assert!(stats(a).reserved_bytes >= 12 * MIB as u64, "{mode}: empty_cache keeps what an importer holds");
    assert_eq!(peer.values(&format!("check {q} {} 90", 12 * MIB)), [1], "{mode}: the import reads on");
    // The last close lets it go: the next empty_cache gives it back.
    assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    assert_eq!(stats(a).reserved_bytes, 0, "{mode}: {:?}", stats(a));
    clean_peer(&mut peer);
    // An importer that dies without closing lets go too.
    let p = malloc(a, 12 * MIB, Stream::DEFAULT).unwrap();
    let h = export(a, p);
    peer.import(&h);
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    assert!(stats(a).reserved_bytes >= 12 * MIB as u64);
    peer.child.kill().unwrap();
    peer.child.wait().unwrap();
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    assert_eq!(stats(a).reserved_bytes, 0, "{mode}: a dead importer's hold is gone");
    // Freed before any import: no longer exported.
    let p = malloc(a, 2 * MIB, Stream::DEFAULT).unwrap();
    let h = export(a, p);
    assert_eq!(free(a, p), NPUALLOC_OK);
    let mut peer = Peer::start();
    let (st, msg) = peer.ask(&format!("import {}", hex(&h.bytes))).unwrap_err();
    assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT as i32);
    assert!(msg.contains("no longer exported"), "{msg}");
    clean_peer(&mut peer);
    peer.stop();
    assert_eq!(destroy(a), NPUALLOC_OK);
    assert!(e.usage(DEVICE).is_clean(), "{mode}: {:?}", e.usage(DEVICE));
}

fn bad_handles(mode: &str) {
    let a = create(mode, DEVICE).unwrap();
    let p = malloc(a, 4 * MIB, Stream::DEFAULT).unwrap();
    let mut h = npualloc_ipc_handle { bytes: [0; NPUALLOC_IPC_HANDLE_SIZE] };
    // SAFETY: live or NULL arguments; each is refused before use.
    unsafe {
        assert_eq!(npualloc_ipc_export(a, std::ptr::null_mut(), &mut h), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(npualloc_ipc_export(a, p as *mut c_void, std::ptr::null_mut()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(npualloc_ipc_export(std::ptr::null_mut(), p as *mut c_void, &mut h), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(npualloc_ipc_export(a, (p + 512) as *mut c_void, &mut h), NPUALLOC_ERR_UNKNOWN_POINTER);
        assert!(last_error_message().contains("ipc_export"), "{}", last_error_message());
    }
    let good = export(a, p);
    let (mut q, mut size) = (std::ptr::null_mut(), 0usize);
    // SAFETY: live locals.
    unsafe {
        assert_eq!(npualloc_ipc_import(&good, DEVICE, &mut q, &mut size), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert!(last_error_message().contains("use the block's pointer itself"), "{}", last_error_message());
        assert_eq!(npualloc_ipc_import(std::ptr::null(), DEVICE, &mut q, &mut size), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(npualloc_ipc_close(p as *mut c_void), NPUALLOC_ERR_UNKNOWN_POINTER);
    }
    let mut peer = Peer::start();
    // Random bytes, a handle with one byte changed, another generation.
    let mut forged = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = [0u8; NPUALLOC_IPC_HANDLE_SIZE];
    for b in random.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    forged.push(random);
    // Magic, pid, fd, slot, generation, device, size, the table's number,
    // the unused tail.
    for at in [0, 13, 16, 20, 24, 28, 33, 41, 100] {
        let mut b = good.bytes;
        b[at] ^= 0x40;
        forged.push(b);
    }
    for b in forged {
        let (st, msg) = peer.ask(&format!("import {}", hex(&b))).unwrap_err();
        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT as i32, "{msg}");
        assert!(!msg.is_empty());
    }
    assert_eq!(peer.ask("close 4096").unwrap_err().0, NPUALLOC_ERR_UNKNOWN_POINTER as i32);
    clean_peer(&mut peer);
    // The real handle still works after all that.
    let (q, _) = peer.import(&good);
    assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    peer.stop();
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}

fn outlives_exporter(mode: &str) {
    let mut exporter = Peer::start();
    let config = if mode.is_empty() { "-" } else { mode };
    let words = exporter.ask(&format!("export {config} {} 7", 6 * MIB)).unwrap();
    let h = unhex(&words[0]);
    let mut importer = Peer::start();
    let (q, _) = importer.import(&h);
    // The exporter exits without freeing or destroying anything.
    exporter.stop();
    assert_eq!(importer.values(&format!("check {q} {} 7", 6 * MIB)), [1]);
    assert_eq!(importer.ask(&format!("write {q} {} 9", 6 * MIB)), Ok(vec![]));
    assert_eq!(importer.values(&format!("check {q} {} 9", 6 * MIB)), [1]);
    assert_eq!(importer.ask(&format!("close {q}")), Ok(vec![]));
    // Gone with its exporter: nothing left to import.
    let (st, msg) = importer.ask(&format!("import {}", hex(&h.bytes))).unwrap_err();
    assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT as i32, "{msg}");
    clean_peer(&mut importer);
    importer.stop();
}

fn pools_and_offsets(mode: &str) {
    use npualloc::ffi::pools::*;
    let e = emu();
    let a = create(mode, DEVICE).unwrap();
    let mut pool = 0u64;
    // SAFETY: a live handle and out value; a NULL config.
    assert_eq!(unsafe { npualloc_pool_create(a, std::ptr::null(), &mut pool) }, NPUALLOC_OK);
    let s = e.create_stream(DEVICE);
    // SAFETY: a live handle, pool and stream.
    assert_eq!(unsafe { npualloc_pool_begin(a, pool, s.raw()) }, NPUALLOC_OK);
    let p = malloc(a, 5 * MIB, s).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { npualloc_pool_end(a, pool, s.raw()) }, NPUALLOC_OK);
    write(p, 5 * MIB, 0x44);
    write(p + 3 * MIB + 64, 100, 0x45);
    let h = export(a, p);
    let mut peer = Peer::start();
    let (q, _) = peer.import(&h);
    // A view at an offset: the same bytes at the same offset.
    assert_eq!(peer.values(&format!("check {} 100 69", q + 3 * MIB + 64)), [1]);
    assert_eq!(peer.values(&format!("check {q} {} 68", 3 * MIB)), [1]);
    assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    clean_peer(&mut peer);
    peer.stop();
    assert_eq!(free(a, p), NPUALLOC_OK);
    // SAFETY: a live handle and pool.
    assert_eq!(unsafe { npualloc_pool_destroy(a, pool) }, NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
    e.destroy_stream(DEVICE, s);
    assert!(e.usage(DEVICE).is_clean(), "{mode}: {:?}", e.usage(DEVICE));
}

fn snapshot_json(a: Handle) -> serde_json::Value {
    use npualloc::ffi::stats::{npualloc_snapshot_json, npualloc_string_free};
    let mut json = std::ptr::null_mut();
    // SAFETY: a live handle and out value; the string is freed below.
    unsafe {
        assert_eq!(npualloc_snapshot_json(a, &mut json), NPUALLOC_OK);
        let text = std::ffi::CStr::from_ptr(json).to_str().unwrap().to_owned();
        npualloc_string_free(json);
        serde_json::from_str(&text).unwrap()
    }
}

/// The snapshot's blocks marked exported: (address, state).
fn exported_blocks(a: Handle) -> Vec<(usize, String)> {
    let snap = snapshot_json(a);
    let mut out = Vec::new();
    for seg in snap["segments"].as_array().unwrap() {
        for b in seg["blocks"].as_array().unwrap() {
            if b.get("exported").and_then(|v| v.as_bool()) == Some(true) {
                out.push((b["address"].as_u64().unwrap() as usize, b["state"].as_str().unwrap().to_owned()));
            }
        }
    }
    out
}

fn reports_and_refusals(mode: &str) {
    use common::sleep_pools::{sleep_with, wake};
    let e = emu();
    let a = create(mode, DEVICE).unwrap();
    let p = malloc(a, 8 * MIB, Stream::DEFAULT).unwrap();
    let kept = malloc(a, 2 * MIB, Stream::DEFAULT).unwrap();
    write(p, 8 * MIB, 0x3c);
    let h = export(a, p);
    assert_eq!((stats(a).exported_blocks, stats(a).held_for_importers_bytes), (1, 0));
    assert_eq!(exported_blocks(a).iter().map(|b| b.0).min(), Some(p));
    assert!(exported_blocks(a).iter().all(|b| b.1 == "active"));
    let mut peer = Peer::start();
    let (q, _) = peer.import(&h);
    // Sleep that would take the imported block off the device: refused,
    // naming it, nothing changed.
    let before = stats(a);
    assert_eq!(sleep_with(a, &[0], &[]), NPUALLOC_ERR_INVALID_ARGUMENT);
    let msg = last_error_message();
    assert!(msg.contains(&format!("{p:#x}")) && msg.contains("nothing was changed"), "{msg}");
    assert_eq!(stats(a).reserved_bytes, before.reserved_bytes);
    assert_eq!(free(a, p), NPUALLOC_OK);
    let s = stats(a);
    assert_eq!((s.exported_blocks, s.held_for_importers_bytes), (0, 8 * MIB as u64), "{mode}: {s:?}");
    assert!(s.pending_free_bytes >= 8 * MIB as u64);
    assert!(exported_blocks(a).iter().all(|b| b.1 == "pending-free"), "{:?}", exported_blocks(a));
    assert_eq!(sleep_with(a, &[0], &[]), NPUALLOC_ERR_INVALID_ARGUMENT, "a freed block still imported");
    // Destroy leaves the held memory where it is and says so.
    assert_eq!(free(a, kept), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
    let msg = last_error_message();
    assert!(msg.contains("other processes hold imported"), "{msg}");
    assert_eq!(peer.values(&format!("check {q} {} 60", 8 * MIB)), [1], "{mode}: the import reads on after destroy");
    let held = e.usage(DEVICE);
    assert!(held.mapped_bytes + held.malloc_bytes >= 8 * MIB as u64, "{mode}: {held:?}");
    assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    clean_peer(&mut peer);
    peer.stop();
    // Destroy with a live block another process holds: it stays, the
    // import reads on, and the export ends.
    let a = create(mode, DEVICE).unwrap();
    let p = malloc(a, 6 * MIB, Stream::DEFAULT).unwrap();
    write(p, 6 * MIB, 0x61);
    let h = export(a, p);
    let mut peer = Peer::start();
    let (q, _) = peer.import(&h);
    assert_eq!(destroy(a), NPUALLOC_OK);
    let msg = last_error_message();
    assert!(msg.contains("1 live block") && msg.contains("other processes hold imported"), "{msg}");
    assert_eq!(peer.values(&format!("check {q} {} 97", 6 * MIB)), [1], "{mode}: a live block destroy kept");
    let (st, msg) = peer.ask(&format!("import {}", hex(&h.bytes))).unwrap_err();
    assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT as i32, "{msg}");
    assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    clean_peer(&mut peer);
    // Without imports, sleep goes ahead and ends the pool's exports: an
    // export made after it names the memory as it is after wake.
    let a = create(mode, DEVICE).unwrap();
    let p = malloc(a, 8 * MIB, Stream::DEFAULT).unwrap();
    write(p, 8 * MIB, 0x2b);
    let before = export(a, p);
    if !mode.contains("expandable_segments:false") {
        assert_eq!(sleep_with(a, &[0], &[]), NPUALLOC_OK, "{}", last_error_message());
        assert_eq!(wake(a), NPUALLOC_OK);
        let (st, _) = peer.ask(&format!("import {}", hex(&before.bytes))).unwrap_err();
        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT as i32, "{mode}: an export from before sleep is gone");
        let after = export(a, p);
        assert_ne!(after.bytes, before.bytes);
        let (q, _) = peer.import(&after);
        assert_eq!(peer.values(&format!("check {q} {} 43", 8 * MIB)), [1], "{mode}: the woken block's bytes");
        assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    }
    clean_peer(&mut peer);
    peer.stop();
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}

fn other_paths(mode: &str) {
    use npualloc::ffi::forget::npualloc_forget_stream;
    use npualloc::ffi::pools::*;
    let e = emu();
    let a = create(mode, DEVICE).unwrap();
    // A pool's block, freed while imported, then the pool destroyed and its
    // stream forgotten: the memory stays for the importer.
    let mut pool = 0u64;
    let s = e.create_stream(DEVICE);
    // SAFETY: a live handle, out value, pool and stream.
    unsafe {
        assert_eq!(npualloc_pool_create(a, std::ptr::null(), &mut pool), NPUALLOC_OK);
        assert_eq!(npualloc_pool_begin(a, pool, s.raw()), NPUALLOC_OK);
    }
    let p = malloc(a, 10 * MIB, s).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { npualloc_pool_end(a, pool, s.raw()) }, NPUALLOC_OK);
    write(p, 10 * MIB, 0x4d);
    let mut peer = Peer::start();
    let (q, _) = peer.import(&export(a, p));
    assert_eq!(free(a, p), NPUALLOC_OK);
    // SAFETY: a live handle, pool and stream.
    unsafe {
        assert_eq!(npualloc_pool_destroy(a, pool), NPUALLOC_OK);
        assert_eq!(npualloc_forget_stream(a, s.raw()), NPUALLOC_OK);
    }
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    assert_eq!(stats(a).held_for_importers_bytes, 10 * MIB as u64, "{mode}");
    assert_eq!(peer.values(&format!("check {q} {} 77", 10 * MIB)), [1], "{mode}: the import reads on");
    assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    assert_eq!(stats(a).reserved_bytes, 0, "{mode}: {:?}", stats(a));
    // The out-of-memory ladder: a request that fits only in memory an
    // importer held is served once the importer has let go.
    e.set_capacity(DEVICE, 64 * MIB as u64);
    let p = malloc(a, 48 * MIB, Stream::DEFAULT).unwrap();
    let (q, _) = peer.import(&export(a, p));
    assert_eq!(free(a, p), NPUALLOC_OK);
    let (st, _) = malloc(a, 40 * MIB, Stream::DEFAULT).unwrap_err();
    assert_eq!(st, NPUALLOC_ERR_OUT_OF_MEMORY, "{mode}: held memory is not handed out");
    assert_eq!(peer.ask(&format!("close {q}")), Ok(vec![]));
    let r = malloc(a, 40 * MIB, Stream::DEFAULT).unwrap_or_else(|e| panic!("{mode}: {e:?}"));
    assert_eq!(free(a, r), NPUALLOC_OK);
    clean_peer(&mut peer);
    peer.stop();
    assert_eq!(destroy(a), NPUALLOC_OK);
    e.set_capacity(DEVICE, 8 << 30);
    e.destroy_stream(DEVICE, s);
    assert!(e.usage(DEVICE).is_clean(), "{mode}: {:?}", e.usage(DEVICE));
}

/// Under ACLEMU_MALLOC_ALIGN=random: a fixed segment's export fails with the
/// runtime's refusal, said in words, and changes nothing; an expandable
/// block (physical handles) exports as ever.
fn unaligned() {
    let a = create("expandable_segments:false", DEVICE).unwrap();
    let p = malloc(a, 4 * MIB, Stream::DEFAULT).unwrap();
    let mut h = npualloc_ipc_handle { bytes: [0; NPUALLOC_IPC_HANDLE_SIZE] };
    // SAFETY: a live handle and block, a live out value.
    let st = unsafe { npualloc_ipc_export(a, p as *mut c_void, &mut h) };
    assert_eq!(st, NPUALLOC_ERR_RUNTIME, "{}", last_error_message());
    assert!(last_error_message().contains("aclrtIpcMemGetExportKey"), "{}", last_error_message());
    assert_eq!(stats(a).exported_blocks, 0);
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let p = malloc(a, 4 * MIB, Stream::DEFAULT).unwrap();
    export(a, p);
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}

/// The emulator's stream capture calls, from the loaded library.
fn capture_calls() -> (
    unsafe extern "C" fn(*mut c_void, u32) -> i32,
    unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> i32,
    unsafe extern "C" fn(*mut c_void) -> i32,
) {
    emu();
    let path = std::ffi::CString::new(emulator_path().to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; the library is loaded already and never closed.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!handle.is_null());
    let sym = |name: &std::ffi::CStr| {
        // SAFETY: a live handle and a valid C string.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        assert!(!p.is_null(), "the emulator lacks {name:?}");
        p
    };
    // SAFETY: the signatures of ACL's aclmdlRICaptureBegin, aclmdlRICaptureEnd and aclmdlRIDestroy.
    unsafe {
        (
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, u32) -> i32>(sym(
                c"aclmdlRICaptureBegin",
            )),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> i32>(sym(
                c"aclmdlRICaptureEnd",
            )),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void) -> i32>(sym(c"aclmdlRIDestroy")),
        )
    }
}

fn captured(mode: &str) {
    let e = emu();
    let (begin, end, destroy_model) = capture_calls();
    let a = create(mode, DEVICE).unwrap();
    let s = e.create_stream(DEVICE);
    // SAFETY: a live stream; mode 0 is ACL_MODEL_RI_CAPTURE_MODE_GLOBAL.
    assert_eq!(unsafe { begin(s.raw(), 0) }, 0);
    let p = malloc(a, 4 * MIB, s).unwrap();
    let h = export(a, p);
    assert_eq!(stats(a).exported_blocks, 1);
    // Freed on a capturing stream: kept out of use for good (a graph may
    // replay on it), and no longer exported.
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(stats(a).exported_blocks, 0, "{mode}");
    let mut peer = Peer::start();
    let (st, msg) = peer.ask(&format!("import {}", hex(&h.bytes))).unwrap_err();
    assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT as i32, "{mode}: {msg}");
    clean_peer(&mut peer);
    peer.stop();
    let mut model = std::ptr::null_mut();
    // SAFETY: the stream began capturing above; the model is destroyed below.
    unsafe {
        assert_eq!(end(s.raw(), &mut model), 0);
        assert_eq!(destroy_model(model), 0);
    }
    assert_eq!(destroy(a), NPUALLOC_OK);
    e.destroy_stream(DEVICE, s);
}
