//! Writes a [`Value`] as a Python pickle (protocol 2), the file format of
//! PyTorch's `_dump_snapshot` that `_memory_viz.py` and pytorch.org/memory_viz
//! read.
//!
//! Only the opcodes these values need: no memo (nothing is shared), no
//! classes. Protocol 2 is read by every Python 3.

use crate::core::pytorch_snapshot::Value;

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT1: u8 = b'K';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const BINUNICODE: u8 = b'X';
const EMPTY_LIST: u8 = b']';
const APPENDS: u8 = b'e';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const MARK: u8 = b'(';
const EMPTY_TUPLE: u8 = b')';
const TUPLE: u8 = b't';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;

/// Items per APPENDS / SETITEMS run, as Python's own pickler batches them.
const BATCH: usize = 1000;

/// The pickle of `v`.
pub fn to_pickle(v: &Value) -> Vec<u8> {
    let mut out = vec![PROTO, 2];
    write(&mut out, v);
    out.push(STOP);
    out
}

fn write(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::None => out.push(NONE),
        Value::Bool(b) => out.push(if *b { NEWTRUE } else { NEWFALSE }),
        Value::Int(n) => write_int(out, *n),
        Value::Float(f) => {
            out.push(BINFLOAT);
            out.extend_from_slice(&f.to_be_bytes());
        }
        Value::Str(s) => write_str(out, s),
        Value::List(items) => {
            out.push(EMPTY_LIST);
            for chunk in items.chunks(BATCH) {
                out.push(MARK);
                chunk.iter().for_each(|item| write(out, item));
                out.push(APPENDS);
            }
        }
        Value::Tuple(items) => {
            // Up to three items have their own opcodes; longer tuples are
            // built from a MARK.
            if items.len() > 3 {
                out.push(MARK);
            }
            items.iter().for_each(|item| write(out, item));
            out.push(match items.len() {
                0 => EMPTY_TUPLE,
                1 => TUPLE1,
                2 => TUPLE2,
                3 => TUPLE3,
                _ => TUPLE,
            });
        }
        Value::Dict(pairs) => {
            out.push(EMPTY_DICT);
            for chunk in pairs.chunks(BATCH) {
                out.push(MARK);
                for (k, v) in chunk {
                    write_str(out, k);
                    write(out, v);
                }
                out.push(SETITEMS);
            }
        }
    }
}

fn write_int(out: &mut Vec<u8>, n: i64) {
    if (0..=0xff).contains(&n) {
        out.extend_from_slice(&[BININT1, n as u8]);
    } else if let Ok(small) = i32::try_from(n) {
        out.push(BININT);
        out.extend_from_slice(&small.to_le_bytes());
    } else {
        // Two's complement, little-endian, as few bytes as keep the sign.
        let bytes = n.to_le_bytes();
        let mut len = bytes.len();
        while len > 1 {
            let (last, prev) = (bytes[len - 1], bytes[len - 2]);
            let redundant = (last == 0x00 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0);
            if !redundant {
                break;
            }
            len -= 1;
        }
        out.extend_from_slice(&[LONG1, len as u8]);
        out.extend_from_slice(&bytes[..len]);
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(BINUNICODE);
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_of_small_values() {
        assert_eq!(to_pickle(&Value::None), [0x80, 2, b'N', b'.']);
        assert_eq!(to_pickle(&Value::Int(5)), [0x80, 2, b'K', 5, b'.']);
        assert_eq!(to_pickle(&Value::Int(-1)), [0x80, 2, b'J', 0xff, 0xff, 0xff, 0xff, b'.']);
        // 2**40 needs six bytes; 2**39 too (five would read as negative).
        assert_eq!(to_pickle(&Value::Int(1 << 40)), [0x80, 2, 0x8a, 6, 0, 0, 0, 0, 0, 1, b'.']);
        assert_eq!(to_pickle(&Value::Int(0x80_0000_0000)), [0x80, 2, 0x8a, 6, 0, 0, 0, 0, 0x80, 0, b'.']);
        assert_eq!(to_pickle(&Value::Int(i64::MIN)), [&[0x80, 2, 0x8a, 8][..], &i64::MIN.to_le_bytes(), b"."].concat());
        assert_eq!(to_pickle(&Value::str("ab")), [0x80, 2, b'X', 2, 0, 0, 0, b'a', b'b', b'.']);
        assert_eq!(
            to_pickle(&Value::Tuple(vec![Value::Int(0), Value::Int(0)])),
            [0x80, 2, b'K', 0, b'K', 0, 0x86, b'.']
        );
        let four = Value::Tuple((1..=4).map(Value::Int).collect());
        assert_eq!(to_pickle(&four), [0x80, 2, b'(', b'K', 1, b'K', 2, b'K', 3, b'K', 4, b't', b'.']);
    }

    #[test]
    fn python_reads_it_back() {
        let doc = Value::dict([
            ("segments", Value::List((0..2500).map(|i| Value::Int(i * 1_000_000_007)).collect())),
            ("neg", Value::Int(-(1 << 50))),
            ("f", Value::Float(0.25)),
            ("t", Value::Tuple(vec![Value::Int(0), Value::Int(0)])),
            ("b", Value::List(vec![Value::Bool(true), Value::Bool(false), Value::None])),
            ("s", Value::str("é\"\n")),
            ("e", Value::Dict(vec![])),
        ]);
        let path = std::env::temp_dir().join(format!("npualloc-pickle-{}.pickle", std::process::id()));
        std::fs::write(&path, to_pickle(&doc)).unwrap();
        let script = "import pickle,sys,json\n\
            d = pickle.load(open(sys.argv[1], 'rb'))\n\
            assert d['segments'] == [i * 1000000007 for i in range(2500)]\n\
            assert d['neg'] == -(1 << 50) and d['f'] == 0.25 and d['t'] == (0, 0)\n\
            assert d['b'] == [True, False, None] and d['s'] == 'é\"\\n' and d['e'] == {}\n\
            assert list(d) == ['segments', 'neg', 'f', 't', 'b', 's', 'e']\n\
            print('ok')";
        let run = std::process::Command::new("python3").arg("-c").arg(script).arg(&path).output();
        let _ = std::fs::remove_file(&path);
        let out = run.expect("python3 runs (the Python package's tests need it too)");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "ok",
            "python3 failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
