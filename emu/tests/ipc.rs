//! Memory shared between real processes (docs/runtime-behaviour.md,
//! "Sharing memory between processes"): this binary is the exporter, and it
//! starts itself again as the importer (`peer`), which takes commands on
//! its standard input and answers each with one line.

mod common;
use ascendcl::*;
use common::*;
use std::ffi::{c_char, c_void, CStr};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::ptr::null_mut;

const NO_PERMISSION: i32 = 207_006;
const H2D: u32 = 1;
const D2H: u32 = 2;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("peer") {
        return peer();
    }
    // The runtime exports only page-aligned allocations by key; the random
    // placement of ACLEMU_MALLOC_ALIGN puts every block off its page, where
    // every key export is refused. These cases (and their peers, which
    // inherit this environment) use the default placement.
    std::env::remove_var("ACLEMU_MALLOC_ALIGN");
    // `cargo test` passes its own arguments (filters, --nocapture): this
    // binary runs every case whatever they say.
    let cases: [(&str, fn()); 10] = [
        ("keys: the importer sees the exporter's bytes and the other way round", keys_share_memory),
        ("keys: pid validation admits only listed pids", key_pid_validation),
        ("keys: argument and rule checks", key_checks),
        ("keys: freed memory stays while imported, and goes when the importer closes or dies", key_lifetime),
        ("shareable handles: several handles map as one range in the importer", handles_share_memory),
        ("shareable handles: one to one in a process, validation, no mixing", handle_rules),
        ("an import outlives its exporter", import_outlives_exporter),
        ("IPC events: records and waits reach the other process", events_cross_processes),
        ("IPC events: argument and rule checks, across devices, a peer that never finishes", event_rules),
        ("IPC events: both ways, records told apart, slots kept while work uses them", event_lifetimes),
    ];
    for (name, case) in cases {
        case();
        println!("test ipc: {name} ... ok");
    }
}

/// The importer: a process of its own, device 0 current.
struct Peer {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Peer {
    fn start() -> Peer {
        Self::start_with(&[])
    }

    /// A peer with `env` added to this process's environment.
    fn start_with(env: &[(&str, &str)]) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .envs(env.iter().copied())
            .arg("peer")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the peer process");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Peer { child, input, output }
    }

    /// Sends one command; returns its answer: Ok(words after "ok") or
    /// Err(the ACL code).
    fn ask(&mut self, command: &str) -> Result<Vec<String>, i32> {
        self.send(command);
        self.answer(command)
    }

    /// Sends a command without waiting for its answer.
    fn send(&mut self, command: &str) {
        writeln!(self.input, "{command}").unwrap();
    }

    /// True if the peer has not answered yet (looked at without waiting).
    fn quiet(&mut self) -> bool {
        use std::os::fd::AsRawFd;
        let mut fd = libc::pollfd { fd: self.output.get_ref().as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd; no wait.
        self.output.buffer().is_empty() && unsafe { libc::poll(&mut fd, 1, 0) } == 0
    }

    /// The answer to the command sent last.
    fn answer(&mut self, command: &str) -> Result<Vec<String>, i32> {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let mut words = line.split_whitespace().map(str::to_owned);
        match words.next().as_deref() {
            Some("ok") => Ok(words.collect()),
            Some("err") => Err(words.next().unwrap().parse().unwrap()),
            _ => panic!("peer answered {line:?} to {command:?}"),
        }
    }

    fn text(&mut self, command: &str) -> String {
        let words = self.ask(command).unwrap_or_else(|e| panic!("{command}: {e}"));
        words[0].clone()
    }

    fn value(&mut self, command: &str) -> u64 {
        self.text(command).parse().unwrap()
    }

    fn pid(&mut self) -> i32 {
        self.value("pid") as i32
    }

    fn stop(mut self) {
        assert_eq!(self.ask("exit"), Ok(vec![]));
        assert!(self.child.wait().unwrap().success());
    }
}

fn peer() {
    // SAFETY: a plain call.
    assert_eq!(unsafe { aclrtSetDevice(0) }, 0);
    // The peer's own stream and the IPC events it opened.
    let s = stream();
    let mut events: Vec<*mut c_void> = Vec::new();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| -> u64 { words[i].parse().unwrap() };
        let num = |v: u64| vec![v.to_string()];
        let answer: Result<Vec<String>, i32> = match words[0] {
            "exit" => {
                writeln!(out, "ok").unwrap();
                return;
            }
            "pid" => {
                let mut pid = 0;
                // SAFETY: a live local.
                code(unsafe { aclrtDeviceGetBareTgid(&mut pid) }).map(|()| num(pid as u64))
            }
            "import-key" => {
                let key = std::ffi::CString::new(words[1]).unwrap();
                let mut p = null_mut();
                // SAFETY: live locals.
                code(unsafe { aclrtIpcMemImportByKey(&mut p, key.as_ptr(), n(2)) }).map(|()| num(p as u64))
            }
            "close-key" => {
                let key = std::ffi::CString::new(words[1]).unwrap();
                // SAFETY: a live C string.
                code(unsafe { aclrtIpcMemClose(key.as_ptr()) }).map(|()| vec![])
            }
            "import-handle" => {
                let mut h = null_mut();
                // SAFETY: a live local.
                code(unsafe { aclrtMemImportFromShareableHandle(n(1), 0, &mut h) }).map(|()| num(h as u64))
            }
            "free-handle" => {
                // SAFETY: a handle this process imported.
                code(unsafe { aclrtFreePhysical(n(1) as *mut c_void) }).map(|()| vec![])
            }
            // map <bytes per handle> <handle>...: one range, handles in order.
            "map" => map_handles(n(1) as usize, words[2..].iter().map(|w| w.parse::<u64>().unwrap() as *mut c_void)),
            // unmap <va> <bytes per handle> <count>: unmaps and releases.
            "unmap" => {
                let (va, each, count) = (n(1) as usize, n(2) as usize, n(3) as usize);
                (0..count)
                    // SAFETY: mappings this process made.
                    .try_for_each(|i| code(unsafe { aclrtUnmapMem((va + i * each) as *mut c_void) }))
                    // SAFETY: a reservation this process made.
                    .and_then(|()| code(unsafe { aclrtReleaseMemAddress(va as *mut c_void) }))
                    .map(|()| vec![])
            }
            // fill <addr> <bytes> <byte>: through the device's memset.
            "fill" => {
                // SAFETY: device memory of this process (imported).
                code(unsafe { aclrtMemset(n(1) as *mut c_void, n(2) as usize, n(3) as i32, n(2) as usize) })
                    .map(|()| vec![])
            }
            // sum <addr> <bytes>: copied to the host, summed.
            "sum" => device_sum(n(1) as usize, n(2) as usize).map(num),
            // own-handle <bytes>: a physical handle of this process.
            "own-handle" => {
                let mut h = null_mut();
                let prop = aclrtPhysicalMemProp {
                    memAttr: ACL_HBM_MEM_HUGE,
                    location: aclrtMemLocation { id: 0, type_: 1 },
                    ..Default::default()
                };
                // SAFETY: live locals.
                code(unsafe { aclrtMallocPhysical(&mut h, n(1) as usize, &prop, 0) }).map(|()| num(h as u64))
            }
            // malloc <bytes> <byte>: an allocation of this process, filled.
            "malloc" => {
                let mut p = null_mut();
                // SAFETY: a live local; then the allocation just made.
                code(unsafe { aclrtMalloc(&mut p, n(1) as usize, 0) })
                    .and_then(|()| code(unsafe { aclrtMemset(p, n(1) as usize, n(2) as i32, n(1) as usize) }))
                    .map(|()| num(p as u64))
            }
            // export-key <addr> <bytes>: its key, no pid check.
            "export-key" => export_key(n(1) as *mut c_void, n(2) as usize, 1).map(|k| vec![k]),
            // ev-open <hex handle>: the index of the opened event.
            "ev-open" => {
                let mut e = null_mut();
                // SAFETY: a live local.
                code(unsafe { aclrtIpcOpenEventHandle(parse_event_handle(words[1]), &mut e) }).map(|()| {
                    events.push(e);
                    num(events.len() as u64 - 1)
                })
            }
            "ev-query" => {
                let mut st = 99;
                // SAFETY: an event this process opened; a live local.
                code(unsafe { aclrtQueryEventStatus(events[n(1) as usize], &mut st) }).map(|()| num(st.into()))
            }
            // SAFETY: an event this process opened.
            "ev-sync" => code(unsafe { aclrtSynchronizeEvent(events[n(1) as usize]) }).map(|()| vec![]),
            // SAFETY: an event this process opened, its own stream.
            "ev-record" => code(unsafe { aclrtRecordEvent(events[n(1) as usize], s) }).map(|()| vec![]),
            // ev-create: an IPC event of this process: its index and handle.
            "ev-create" => {
                let e = ipc_event();
                events.push(e);
                Ok(vec![(events.len() - 1).to_string(), event_handle(e)])
            }
            "stream-query" => {
                let mut st = 99;
                // SAFETY: its own stream; a live local.
                code(unsafe { aclrtStreamQuery(s, &mut st) }).map(|()| num(st.into()))
            }
            // SAFETY: an event this process opened.
            "ev-destroy" => code(unsafe { aclrtDestroyEvent(events[n(1) as usize]) }).map(|()| vec![]),
            // ev-wait-fill <event> <addr> <byte>: the stream waits for the
            // event, then sets the byte at addr.
            "ev-wait-fill" => {
                // SAFETY: an event this process opened, its own stream, its
                // own device memory.
                code(unsafe { aclrtStreamWaitEvent(s, events[n(1) as usize]) })
                    .and_then(|()| code(unsafe { aclrtMemsetAsync(n(2) as *mut c_void, 1, n(3) as i32, 1, s) }))
                    .map(|()| vec![])
            }
            // SAFETY: an allocation of this process.
            "free" => code(unsafe { aclrtFree(n(1) as *mut c_void) }).map(|()| vec![]),
            // SAFETY: its own stream.
            "stream-hold" => code(unsafe { aclemu_stream_hold(s) }).map(|()| vec![]),
            // SAFETY: its own stream.
            "stream-release" => code(unsafe { aclemu_stream_release(s) }).map(|()| vec![]),
            // SAFETY: its own stream.
            "stream-sync" => code(unsafe { aclrtSynchronizeStream(s) }).map(|()| vec![]),
            other => panic!("unknown command {other}"),
        };
        match answer {
            Ok(values) => writeln!(out, "ok {}", values.join(" ")).unwrap(),
            Err(e) => writeln!(out, "err {e}").unwrap(),
        }
        out.flush().unwrap();
    }
}

/// A new IPC event of the current device.
fn ipc_event() -> *mut c_void {
    let mut e = null_mut();
    // SAFETY: a live local.
    assert_eq!(unsafe { aclrtCreateEventExWithFlag(&mut e, 0x40) }, 0);
    e
}

/// `event`'s IPC handle, as hex.
fn event_handle(event: *mut c_void) -> String {
    let mut h = IpcEventHandle { reserved: [0; 64] };
    // SAFETY: a live local.
    assert_eq!(unsafe { aclrtIpcGetEventHandle(event, &mut h) }, 0);
    h.reserved.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_event_handle(hex: &str) -> IpcEventHandle {
    let mut h = IpcEventHandle { reserved: [0; 64] };
    for (i, b) in h.reserved.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    h
}

fn code(rc: i32) -> Result<(), i32> {
    if rc == 0 {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Maps `handles` in order into one new reservation; on a refusal, undoes
/// what it did and returns the code.
fn map_handles(each: usize, handles: impl Iterator<Item = *mut c_void>) -> Result<Vec<String>, i32> {
    let handles: Vec<*mut c_void> = handles.collect();
    let mut va = null_mut();
    // SAFETY: a live local.
    code(unsafe { aclrtReserveMemAddress(&mut va, each * handles.len(), 0, null_mut(), 0) })?;
    let at = |i: usize| -> *mut c_void { (va as usize + i * each) as *mut c_void };
    for (i, &h) in handles.iter().enumerate() {
        // SAFETY: inside the reservation made above.
        if let Err(e) = code(unsafe { aclrtMapMem(at(i), each, 0, h, 0) }) {
            // SAFETY: the mappings and the reservation made above.
            unsafe {
                (0..i).for_each(|j| assert_eq!(aclrtUnmapMem(at(j)), 0));
                assert_eq!(aclrtReleaseMemAddress(va), 0);
            }
            return Err(e);
        }
    }
    Ok(vec![(va as u64).to_string()])
}

/// The sum of `bytes` bytes of device memory at `addr`, read through a
/// device-to-host copy.
fn device_sum(addr: usize, bytes: usize) -> Result<u64, i32> {
    let mut host = vec![0u8; bytes];
    // SAFETY: `host` holds `bytes` bytes; `addr` is device memory.
    code(unsafe { aclrtMemcpy(host.as_mut_ptr().cast(), bytes, addr as *const c_void, bytes, D2H) })?;
    Ok(host.iter().map(|&b| u64::from(b)).sum())
}

fn fill(addr: *mut c_void, bytes: usize, byte: u8) {
    let host = vec![byte; bytes];
    // SAFETY: `addr` is device memory of at least `bytes` bytes.
    assert_eq!(unsafe { aclrtMemcpy(addr, bytes, host.as_ptr().cast(), bytes, H2D) }, 0);
}

fn free(p: *mut c_void) {
    // SAFETY: an allocation of this process that nothing uses any more.
    assert_eq!(unsafe { aclrtFree(p) }, 0);
}

fn export_key(p: *mut c_void, size: usize, flags: u64) -> Result<String, i32> {
    let mut key = [0 as c_char; 65];
    // SAFETY: `key` holds 65 bytes.
    code(unsafe { aclrtIpcMemGetExportKey(p, size, key.as_mut_ptr(), key.len(), flags) })?;
    // SAFETY: the call wrote a NUL-terminated key.
    Ok(unsafe { CStr::from_ptr(key.as_ptr()) }.to_str().unwrap().to_owned())
}

fn close_key(key: &str) -> i32 {
    let key = std::ffi::CString::new(key).unwrap();
    // SAFETY: a live C string.
    unsafe { aclrtIpcMemClose(key.as_ptr()) }
}

fn device0() -> Dev {
    let dev = Dev::take();
    if dev.id == 0 {
        return dev;
    }
    drop(dev);
    // The peer uses device 0; so does the exporter, for usage counts.
    loop {
        let dev = Dev::take();
        if dev.id == 0 {
            return dev;
        }
    }
}

fn keys_share_memory() {
    let dev = device0();
    let p = malloc(4 * MIB);
    fill(p, 4 * MIB, 1);
    let key = export_key(p, 4 * MIB, 1).unwrap();
    let mut peer = Peer::start();
    let at = peer.value(&format!("import-key {key} 1"));
    assert_eq!(peer.value(&format!("sum {at} {}", 4 * MIB)), 4 * MIB as u64);
    // The same key imported twice: two addresses, each closed by one close.
    let again = peer.value(&format!("import-key {key} 0"));
    assert_ne!(again, at);
    assert_eq!(peer.ask(&format!("fill {again} {} 3", MIB)), Ok(vec![]));
    assert_eq!(device_sum(p as usize, MIB), Ok(3 * MIB as u64));
    assert_eq!(peer.value(&format!("sum {at} {}", MIB)), 3 * MIB as u64);
    assert_eq!(peer.ask(&format!("close-key {key}")), Ok(vec![]));
    assert_eq!(peer.ask(&format!("close-key {key}")), Ok(vec![]));
    assert_eq!(peer.ask(&format!("close-key {key}")), Err(RT_DRV_INTERNAL));
    assert_eq!(close_key(&key), 0);
    // Closed by the exporter: no new import.
    assert_eq!(peer.ask(&format!("import-key {key} 0")), Err(RT_DRV_INTERNAL));
    peer.stop();
    free(p);
    dev.assert_clean();
}

fn key_pid_validation() {
    let dev = device0();
    let p = malloc(2 * MIB);
    let key = export_key(p, 2 * MIB, 0).unwrap();
    let mut peer = Peer::start();
    assert_eq!(peer.ask(&format!("import-key {key} 0")), Err(NO_PERMISSION));
    let mut pid = peer.pid();
    let ckey = std::ffi::CString::new(key.as_str()).unwrap();
    // SAFETY: live locals.
    assert_eq!(unsafe { aclrtIpcMemSetImportPid(ckey.as_ptr(), &mut pid, 1) }, 0);
    let at = peer.value(&format!("import-key {key} 0"));
    assert_eq!(peer.ask(&format!("close-key {key}")), Ok(vec![]));
    assert_ne!(at, 0);
    // An export without validation admits no list.
    let q = malloc(2 * MIB);
    let open = std::ffi::CString::new(export_key(q, 2 * MIB, 1).unwrap()).unwrap();
    // SAFETY: live locals.
    assert_eq!(unsafe { aclrtIpcMemSetImportPid(open.as_ptr(), &mut pid, 1) }, NO_PERMISSION);
    // SAFETY: live locals.
    unsafe {
        assert_eq!(aclrtIpcMemSetImportPid(ckey.as_ptr(), &mut pid, 0), RT_PARAM_INVALID);
        assert_eq!(aclrtIpcMemSetImportPid(ckey.as_ptr(), null_mut(), 1), INVALID_PARAM);
        assert_eq!(aclrtIpcMemClose(ckey.as_ptr()), 0);
        assert_eq!(aclrtIpcMemClose(open.as_ptr()), 0);
    }
    peer.stop();
    free(p);
    free(q);
    dev.assert_clean();
}

fn key_checks() {
    let dev = device0();
    let p = malloc(8 * MIB);
    let mut key = [0 as c_char; 65];
    // SAFETY: `key` holds 65 bytes; the pointers are live or NULL.
    unsafe {
        assert_eq!(aclrtIpcMemGetExportKey(null_mut(), MIB, key.as_mut_ptr(), 65, 0), INVALID_PARAM);
        assert_eq!(aclrtIpcMemGetExportKey(p, MIB, null_mut(), 65, 0), INVALID_PARAM);
        assert_eq!(aclrtIpcMemGetExportKey(p, 0, key.as_mut_ptr(), 65, 0), RT_PARAM_INVALID);
        assert_eq!(aclrtIpcMemGetExportKey(p, MIB, key.as_mut_ptr(), 64, 0), RT_PARAM_INVALID);
        assert_eq!(aclrtIpcMemGetExportKey(p, MIB, key.as_mut_ptr(), 65, 2), RT_PARAM_INVALID);
        // Not the start of an allocation, or more than it holds.
        let inside = p.cast::<u8>().add(4096).cast();
        assert_eq!(aclrtIpcMemGetExportKey(inside, MIB, key.as_mut_ptr(), 65, 1), RT_PARAM_INVALID);
        assert_eq!(aclrtIpcMemGetExportKey(p, 9 * MIB, key.as_mut_ptr(), 65, 1), RT_PARAM_INVALID);
        let mut q = null_mut();
        assert_eq!(aclrtIpcMemImportByKey(&mut q, null_mut(), 0), INVALID_PARAM);
        assert_eq!(aclrtIpcMemClose(null_mut()), INVALID_PARAM);
        let garbage = c"not a key";
        assert_eq!(aclrtIpcMemImportByKey(&mut q, garbage.as_ptr(), 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtIpcMemClose(garbage.as_ptr()), RT_DRV_INTERNAL);
    }
    // One live key per allocation; none imported in the exporting process.
    let key = export_key(p, 8 * MIB, 1).unwrap();
    assert_eq!(export_key(p, 8 * MIB, 1), Err(RT_DRV_INTERNAL));
    let ckey = std::ffi::CString::new(key.as_str()).unwrap();
    let mut q = null_mut();
    // SAFETY: live locals.
    unsafe {
        assert_eq!(aclrtIpcMemImportByKey(&mut q, ckey.as_ptr(), 2), RT_PARAM_INVALID);
        assert_eq!(aclrtIpcMemImportByKey(&mut q, ckey.as_ptr(), 0), RT_DRV_INTERNAL);
    }
    assert_eq!(close_key(&key), 0);
    assert_eq!(close_key(&key), RT_DRV_INTERNAL);
    free(p);
    dev.assert_clean();
}

fn key_lifetime() {
    let dev = device0();
    let p = malloc(16 * MIB);
    fill(p, 16 * MIB, 2);
    let key = export_key(p, 16 * MIB, 1).unwrap();
    let mut peer = Peer::start();
    let at = peer.value(&format!("import-key {key} 0"));
    // The exporter closes and frees at once; the importer still holds it.
    assert_eq!(close_key(&key), 0);
    free(p);
    let held = dev.usage();
    assert_eq!((held.malloc_count, held.malloc_bytes), (1, 16 * MIB as u64 + 32));
    assert_eq!(peer.value(&format!("sum {at} {}", 16 * MIB)), 32 * MIB as u64);
    assert_eq!(peer.ask(&format!("close-key {key}")), Ok(vec![]));
    dev.assert_clean();
    // An importer that dies without closing lets go too.
    let p = malloc(16 * MIB);
    let key = export_key(p, 16 * MIB, 1).unwrap();
    let mut peer2 = Peer::start();
    peer2.value(&format!("import-key {key} 0"));
    assert_eq!(close_key(&key), 0);
    free(p);
    assert_eq!(dev.usage().malloc_count, 1);
    peer2.child.kill().unwrap();
    peer2.child.wait().unwrap();
    dev.assert_clean();
    // Exported again after a close, imported under both keys: the memory
    // stays until the last of the two importers lets go.
    let p = malloc(4 * MIB);
    fill(p, 4 * MIB, 3);
    let first = export_key(p, 4 * MIB, 1).unwrap();
    let at1 = peer.value(&format!("import-key {first} 0"));
    assert_eq!(close_key(&first), 0);
    let second = export_key(p, 4 * MIB, 1).unwrap();
    let mut peer3 = Peer::start();
    let at2 = peer3.value(&format!("import-key {second} 0"));
    assert_eq!(close_key(&second), 0);
    free(p);
    assert_eq!(peer.value(&format!("sum {at1} {}", 4 * MIB)), 3 * 4 * MIB as u64);
    assert_eq!(peer.ask(&format!("close-key {first}")), Ok(vec![]));
    let q = malloc(4 * MIB);
    fill(q, 4 * MIB, 9);
    assert_eq!(peer3.value(&format!("sum {at2} {}", 4 * MIB)), 3 * 4 * MIB as u64, "still the first block's bytes");
    assert_eq!(dev.usage().malloc_count, 2);
    assert_eq!(peer3.ask(&format!("close-key {second}")), Ok(vec![]));
    assert_eq!(dev.usage().malloc_count, 1);
    free(q);
    dev.assert_clean();
    peer3.stop();
    peer.stop();
}

fn handles_share_memory() {
    let dev = device0();
    let (a, b) = (physical(&dev, 2 * MIB), physical(&dev, 2 * MIB));
    let mut va = null_mut();
    let mut sh = [0u64; 2];
    // SAFETY: live locals and handles of this process.
    unsafe {
        assert_eq!(aclrtReserveMemAddress(&mut va, 4 * MIB, 0, null_mut(), 0), 0);
        assert_eq!(aclrtMapMem(va, 2 * MIB, 0, a, 0), 0);
        assert_eq!(aclrtMapMem(va.cast::<u8>().add(2 * MIB).cast(), 2 * MIB, 0, b, 0), 0);
        assert_eq!(aclrtMemExportToShareableHandle(a, 0, 1, &mut sh[0]), 0);
        assert_eq!(aclrtMemExportToShareableHandle(b, 0, 1, &mut sh[1]), 0);
    }
    fill(va, 2 * MIB, 5);
    // SAFETY: inside the mapping above.
    fill(unsafe { va.cast::<u8>().add(2 * MIB).cast() }, 2 * MIB, 7);
    let mut peer = Peer::start();
    // Imported in the other order: the importer's range holds b, then a.
    let hb = peer.value(&format!("import-handle {}", sh[1]));
    let ha = peer.value(&format!("import-handle {}", sh[0]));
    let at = peer.value(&format!("map {} {hb} {ha}", 2 * MIB));
    assert_eq!(peer.value(&format!("sum {at} {}", 2 * MIB)), 7 * 2 * MIB as u64);
    assert_eq!(peer.value(&format!("sum {} {}", at + 2 * MIB as u64, 2 * MIB)), 5 * 2 * MIB as u64);
    // A write across both handles is seen by the exporter.
    assert_eq!(peer.ask(&format!("fill {} {} 9", at + MIB as u64, 2 * MIB)), Ok(vec![]));
    assert_eq!(device_sum(va as usize, 4 * MIB), Ok((9 * 2 + 5 + 7) * MIB as u64));
    // The exporter lets go of both; the importer's mapping still reads.
    // SAFETY: this process's mappings and handles.
    unsafe {
        assert_eq!(aclrtUnmapMem(va), 0);
        assert_eq!(aclrtUnmapMem(va.cast::<u8>().add(2 * MIB).cast()), 0);
        assert_eq!(aclrtReleaseMemAddress(va), 0);
        assert_eq!(aclrtFreePhysical(a), 0);
        assert_eq!(aclrtFreePhysical(b), 0);
    }
    assert_eq!(dev.usage().physical_count, 2);
    assert_eq!(peer.value(&format!("sum {at} {}", 4 * MIB)), (9 * 2 + 5 + 7) * MIB as u64);
    assert_eq!(peer.ask(&format!("unmap {at} {} 2", 2 * MIB)), Ok(vec![]));
    assert_eq!(peer.ask(&format!("free-handle {ha}")), Ok(vec![]));
    assert_eq!(dev.usage().physical_count, 1);
    assert_eq!(peer.ask(&format!("free-handle {hb}")), Ok(vec![]));
    dev.assert_clean();
    peer.stop();
}

fn handle_rules() {
    let dev = device0();
    let h = physical(&dev, 2 * MIB);
    let mut sh = 0u64;
    // SAFETY: live locals and a handle of this process.
    unsafe {
        assert_eq!(aclrtMemExportToShareableHandle(null_mut(), 0, 0, &mut sh), INVALID_PARAM);
        assert_eq!(aclrtMemExportToShareableHandle(h, 2, 0, &mut sh), INVALID_PARAM);
        assert_eq!(aclrtMemExportToShareableHandle(h, 0, 0, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtMemExportToShareableHandle(h, 0, 2, &mut sh), RT_PARAM_INVALID);
        assert_eq!(aclrtMemExportToShareableHandle(h, 0, 0, &mut sh), 0);
        // A handle is exported once.
        let mut again = 0u64;
        assert_eq!(aclrtMemExportToShareableHandle(h, 0, 0, &mut again), RT_DRV_INTERNAL);
        // Not imported by the process that exported it.
        let mut local = null_mut();
        assert_eq!(aclrtMemImportFromShareableHandle(sh, 0, &mut local), RT_DRV_INTERNAL);
        assert_eq!(aclrtMemImportFromShareableHandle(sh, 0, null_mut()), INVALID_PARAM);
    }
    let mut peer = Peer::start();
    // Validation on: only an admitted pid imports.
    assert_eq!(peer.ask(&format!("import-handle {sh}")), Err(NO_PERMISSION));
    let mut pid = peer.pid();
    // SAFETY: live locals.
    unsafe {
        assert_eq!(aclrtMemSetPidToShareableHandle(sh, null_mut(), 1), INVALID_PARAM);
        assert_eq!(aclrtMemSetPidToShareableHandle(sh, &mut pid, 0), INVALID_PARAM);
        assert_eq!(aclrtMemSetPidToShareableHandle(sh, &mut pid, 1), 0);
    }
    let imported = peer.value(&format!("import-handle {sh}"));
    // One import of a shareable handle per process at a time.
    assert_eq!(peer.ask(&format!("import-handle {sh}")), Err(RT_DRV_INTERNAL));
    assert_eq!(peer.ask(&format!("import-handle {}", sh ^ 0x1234)), Err(RT_DRV_INTERNAL));
    // A range binds imported handles or the process's own, not both.
    let own = peer.value(&format!("own-handle {}", 2 * MIB));
    assert_eq!(peer.ask(&format!("map {} {own} {imported}", 2 * MIB)), Err(RT_DRV_INTERNAL));
    assert_eq!(peer.ask(&format!("map {} {imported} {own}", 2 * MIB)), Err(RT_DRV_INTERNAL));
    let at = peer.value(&format!("map {} {imported}", 2 * MIB));
    assert_eq!(peer.ask(&format!("unmap {at} {} 1", 2 * MIB)), Ok(vec![]));
    assert_eq!(peer.ask(&format!("free-handle {own}")), Ok(vec![]));
    assert_eq!(peer.ask(&format!("free-handle {imported}")), Ok(vec![]));
    let again = peer.value(&format!("import-handle {sh}"));
    assert_eq!(peer.ask(&format!("free-handle {again}")), Ok(vec![]));
    peer.stop();
    // SAFETY: this process's handle.
    assert_eq!(unsafe { aclrtFreePhysical(h) }, 0);
    dev.assert_clean();
}

fn import_outlives_exporter() {
    // Both ends are peers here: the exporter exits, the importer reads on.
    let mut exporter = Peer::start();
    let at = exporter.value(&format!("malloc {} 6", 4 * MIB));
    let key = exporter.text(&format!("export-key {at} {}", 4 * MIB));
    let mut importer = Peer::start();
    let there = importer.value(&format!("import-key {key} 0"));
    exporter.stop();
    assert_eq!(importer.value(&format!("sum {there} {}", 4 * MIB)), 6 * 4 * MIB as u64);
    assert_eq!(importer.ask(&format!("fill {there} {} 1", 4 * MIB)), Ok(vec![]));
    assert_eq!(importer.value(&format!("sum {there} {}", 4 * MIB)), 4 * MIB as u64);
    assert_eq!(importer.ask(&format!("close-key {key}")), Ok(vec![]));
    // A key of an exporter that is gone imports nothing.
    assert_eq!(importer.ask(&format!("import-key {key} 0")), Err(RT_DRV_INTERNAL));
    importer.stop();
}

fn hold(s: *mut c_void, on: bool) {
    let rc = if on {
        // SAFETY: a stream of this process.
        unsafe { aclemu_stream_hold(s) }
    } else {
        // SAFETY: a stream of this process.
        unsafe { aclemu_stream_release(s) }
    };
    assert_eq!(rc, 0);
}

fn record(e: *mut c_void, s: *mut c_void) {
    // SAFETY: an event and a stream of this process.
    assert_eq!(unsafe { aclrtRecordEvent(e, s) }, 0);
}

/// The stream waits for `e`, then sets the first byte at `p` to `byte`.
fn wait_then_set(s: *mut c_void, e: *mut c_void, p: *mut c_void, byte: i32) {
    // SAFETY: a stream, an event and device memory of this process.
    unsafe {
        assert_eq!(aclrtStreamWaitEvent(s, e), 0);
        assert_eq!(aclrtMemsetAsync(p, 1, byte, 1, s), 0);
    }
}

fn destroy_event(e: *mut c_void) {
    // SAFETY: an event of this process.
    assert_eq!(unsafe { aclrtDestroyEvent(e) }, 0);
}

fn destroy_stream(s: *mut c_void) {
    // SAFETY: a stream of this process, idle.
    assert_eq!(unsafe { aclrtDestroyStream(s) }, 0);
}

fn events_cross_processes() {
    let dev = device0();
    let s = stream();
    let e = ipc_event();
    let h = event_handle(e);
    let mut peer = Peer::start();
    let ev = peer.value(&format!("ev-open {h}"));
    // Never recorded: complete in both processes.
    assert_eq!(status(e), COMPLETE);
    assert_eq!(peer.value(&format!("ev-query {ev}")), 1);
    // Recorded on a held stream: pending in both, and the peer's stream
    // waits for it.
    let buf = peer.value("malloc 4096 0");
    hold(s, true);
    record(e, s);
    assert_eq!(status(e), NOT_READY);
    assert_eq!(peer.value(&format!("ev-query {ev}")), 0);
    assert_eq!(peer.ask(&format!("ev-wait-fill {ev} {buf} 7")), Ok(vec![]));
    assert_eq!(peer.value(&format!("sum {buf} 1")), 0);
    hold(s, false);
    assert_eq!(status(e), COMPLETE);
    assert_eq!(peer.value(&format!("ev-query {ev}")), 1);
    assert_eq!(peer.value(&format!("sum {buf} 1")), 7);
    // The peer synchronizes its stream while the record it waits for is
    // pending here: it returns once this process runs its stream.
    hold(s, true);
    record(e, s);
    assert_eq!(peer.ask(&format!("ev-wait-fill {ev} {buf} 9")), Ok(vec![]));
    peer.send("stream-sync");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(peer.quiet(), "the peer's synchronize returned before the record it waits for ran");
    hold(s, false);
    assert_eq!(peer.answer("stream-sync"), Ok(vec![]));
    assert_eq!(peer.value(&format!("sum {buf} 1")), 9);
    // The peer records the event: this process's query and stream wait for
    // the peer's stream (the latest record counts).
    let p = malloc(4096);
    fill(p, 4096, 0);
    assert_eq!(peer.ask("stream-hold"), Ok(vec![]));
    assert_eq!(peer.ask(&format!("ev-record {ev}")), Ok(vec![]));
    assert_eq!(status(e), NOT_READY);
    wait_then_set(s, e, p, 5);
    assert_eq!(device_sum(p as usize, 1), Ok(0));
    assert_eq!(peer.ask("stream-release"), Ok(vec![]));
    assert_eq!(status(e), COMPLETE);
    assert_eq!(device_sum(p as usize, 1), Ok(5));
    // SAFETY: a live event; its latest record finished.
    assert_eq!(unsafe { aclrtSynchronizeEvent(e) }, 0);
    // Destroyed here: the peer's open still works, the handle opens no more.
    destroy_event(e);
    assert_eq!(peer.ask(&format!("ev-open {h}")), Err(RT_DRV_INTERNAL));
    assert_eq!(peer.value(&format!("ev-query {ev}")), 1);
    assert_eq!(peer.ask(&format!("ev-destroy {ev}")), Ok(vec![]));
    // A new event (in the slot the old one left): the old handle still
    // opens nothing, the new one does.
    let e2 = ipc_event();
    let h2 = event_handle(e2);
    assert_ne!(h2, h);
    assert_eq!(peer.ask(&format!("ev-open {h}")), Err(RT_DRV_INTERNAL));
    let ev2 = peer.value(&format!("ev-open {h2}"));
    assert_eq!(peer.ask(&format!("ev-destroy {ev2}")), Ok(vec![]));
    destroy_event(e2);
    assert_eq!(peer.ask(&format!("free {buf}")), Ok(vec![]));
    peer.stop();
    free(p);
    destroy_stream(s);
    dev.assert_clean();
}

fn event_rules() {
    let dev = device0();
    let s = stream();
    let e = ipc_event();
    let mut h = IpcEventHandle { reserved: [0; 64] };
    let mut other = null_mut();
    // SAFETY: live locals and events of this process; NULL where refused.
    unsafe {
        assert_eq!(aclrtIpcGetEventHandle(e, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtIpcGetEventHandle(null_mut(), &mut h), INVALID_PARAM);
        // Only IPC events have a handle (`ApiImplEvent::IpcGetEventHandle`).
        let mut plain = null_mut();
        assert_eq!(aclrtCreateEventExWithFlag(&mut plain, 0x1), 0);
        assert_eq!(aclrtIpcGetEventHandle(plain, &mut h), RT_PARAM_INVALID);
        assert_eq!(aclrtDestroyEvent(plain), 0);
        // A process does not open its own event; garbage opens nothing.
        assert_eq!(aclrtIpcGetEventHandle(e, &mut h), 0);
        assert_eq!(aclrtIpcOpenEventHandle(h, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtIpcOpenEventHandle(h, &mut other), RT_DRV_INTERNAL);
        assert_eq!(aclrtIpcOpenEventHandle(IpcEventHandle { reserved: [0x5a; 64] }, &mut other), RT_DRV_INTERNAL);
        // No IPC event in a capture (`ApiErrorDecorator::EventRecord`,
        // `StreamWaitEvent`); the capture goes on.
        assert_eq!(aclmdlRICaptureBegin(s, 0), 0);
        assert_eq!(aclrtRecordEvent(e, s), RT_FEATURE_NOT_SUPPORT);
        assert_eq!(aclrtStreamWaitEvent(s, e), RT_FEATURE_NOT_SUPPORT);
        let mut model = null_mut();
        assert_eq!(aclmdlRICaptureEnd(s, &mut model), 0);
        assert_eq!(aclmdlRIDestroy(model), 0);
    }
    // One process, two devices (torch_npu's cross-device copy): recorded on
    // device 1's stream, waited for on device 0's.
    let dev1 = Dev::take_besides(&dev);
    let s1 = stream();
    let e1 = ipc_event();
    hold(s1, true);
    record(e1, s1);
    // SAFETY: a plain call.
    assert_eq!(unsafe { aclrtSetDevice(dev.id) }, 0);
    let p = malloc(4096);
    fill(p, 4096, 0);
    wait_then_set(s, e1, p, 4);
    assert_eq!(status(e1), NOT_READY);
    assert_eq!(device_sum(p as usize, 1), Ok(0));
    hold(s1, false);
    assert_eq!(status(e1), COMPLETE);
    assert_eq!(device_sum(p as usize, 1), Ok(4));
    // A peer whose wait never ends: its synchronize gives up after the
    // limit with the runtime's event-timeout code.
    let mut peer = Peer::start_with(&[("ACLEMU_IPC_WAIT_SECS", "1")]);
    let ev = peer.value(&format!("ev-open {}", event_handle(e)));
    hold(s, true);
    record(e, s);
    assert_eq!(peer.ask(&format!("ev-sync {ev}")), Err(507_047));
    hold(s, false);
    assert_eq!(peer.ask(&format!("ev-sync {ev}")), Ok(vec![]));
    assert_eq!(peer.ask(&format!("ev-destroy {ev}")), Ok(vec![]));
    peer.stop();
    destroy_event(e);
    destroy_event(e1);
    free(p);
    destroy_stream(s);
    // SAFETY: a plain call.
    assert_eq!(unsafe { aclrtSetDevice(dev1.id) }, 0);
    destroy_stream(s1);
    dev1.assert_clean();
    // SAFETY: a plain call.
    assert_eq!(unsafe { aclrtSetDevice(dev.id) }, 0);
    dev.assert_clean();
}

/// The slot index an IPC event handle names (bytes 8..12).
fn handle_index(hex: &str) -> String {
    hex[16..24].to_owned()
}

fn event_lifetimes() {
    let dev = device0();
    let (s, s2) = (stream(), stream());
    let e = ipc_event();
    let h = event_handle(e);
    let mut peer = Peer::start();
    let ev = peer.value(&format!("ev-open {h}"));
    // Both ways: the peer, holding our table open, makes an event of its
    // own (after an export, so its descriptors are mixed), and we open it.
    let buf = peer.value("malloc 4096 0");
    let _key = peer.text(&format!("export-key {buf} 4096"));
    let made = peer.ask("ev-create").unwrap();
    let mut theirs = null_mut();
    // SAFETY: a live local.
    assert_eq!(unsafe { aclrtIpcOpenEventHandle(parse_event_handle(&made[1]), &mut theirs) }, 0);
    // Work behind a wait for the peer's record runs once it finished, seen
    // by a plain query of this process.
    assert_eq!(peer.ask("stream-hold"), Ok(vec![]));
    assert_eq!(peer.ask(&format!("ev-record {}", made[0])), Ok(vec![]));
    // SAFETY: an event and a stream of this process.
    assert_eq!(unsafe { aclrtStreamWaitEvent(s, theirs) }, 0);
    let plain = event();
    record(plain, s);
    assert_eq!(status(plain), NOT_READY);
    assert_eq!(peer.ask("stream-release"), Ok(vec![]));
    assert_eq!(status(plain), COMPLETE, "a plain query sees the peer's record finished");
    // Records are told apart: a later record finishing first does not
    // release a wait for an earlier one.
    hold(s, true);
    record(e, s);
    assert_eq!(peer.ask(&format!("ev-wait-fill {ev} {buf} 6")), Ok(vec![]));
    record(e, s2);
    assert_eq!(status(e), COMPLETE, "the latest record finished");
    assert_eq!(peer.value("stream-query"), 1, "the peer's stream still waits for the first record");
    assert_eq!(peer.value(&format!("sum {buf} 1")), 0);
    // The slot stays while queued work uses it: the peer destroys its open
    // with its wait queued, we destroy the event and make another, which
    // takes another slot; the queued wait still ends with our record.
    assert_eq!(peer.ask(&format!("ev-destroy {ev}")), Ok(vec![]));
    destroy_event(e);
    let e3 = ipc_event();
    assert_ne!(handle_index(&event_handle(e3)), handle_index(&h), "a slot in use was reused");
    assert_eq!(peer.value("stream-query"), 1);
    hold(s, false);
    assert_eq!(peer.value("stream-query"), 0);
    assert_eq!(peer.value(&format!("sum {buf} 1")), 6);
    // A record dropped with its stream (a forced destroy) counts as
    // finished: nothing waits for it forever.
    let s3 = stream();
    hold(s3, true);
    record(e3, s3);
    assert_eq!(status(e3), NOT_READY);
    // SAFETY: a stream of this process; its queued work is dropped.
    assert_eq!(unsafe { aclrtDestroyStreamForce(s3) }, 0);
    assert_eq!(status(e3), COMPLETE);
    destroy_event(e3);
    destroy_event(plain);
    destroy_event(theirs);
    assert_eq!(peer.ask(&format!("ev-destroy {}", made[0])), Ok(vec![]));
    assert_eq!(peer.ask(&format!("free {buf}")), Ok(vec![]));
    peer.stop();
    destroy_stream(s);
    destroy_stream(s2);
    dev.assert_clean();
}
