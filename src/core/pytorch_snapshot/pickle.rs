//! A [`Value`] as a Python pickle (protocol 2, which every Python 3 reads),
//! the file format of PyTorch's `torch.cuda.memory._dump_snapshot` that
//! `_memory_viz.py` and pytorch.org/memory_viz open. Tuples stay tuples, as
//! `_memory_viz.py` expects of `segment_pool_id`. No memo: the tree has no
//! shared parts.

use super::Value;

/// The pickle of `v`.
pub fn to_pickle(v: &Value) -> Vec<u8> {
    let mut out = vec![0x80, 2]; // PROTO 2
    write(v, &mut out);
    out.push(b'.'); // STOP
    out
}

fn write(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::None => out.push(b'N'),
        Value::Bool(true) => out.push(0x88),
        Value::Bool(false) => out.push(0x89),
        Value::Int(n) => match i32::try_from(*n) {
            Ok(small) => {
                out.push(b'J'); // BININT: 4 bytes, little-endian
                out.extend_from_slice(&small.to_le_bytes());
            }
            Err(_) => {
                out.extend_from_slice(&[0x8a, 8]); // LONG1: 8 bytes, two's complement
                out.extend_from_slice(&n.to_le_bytes());
            }
        },
        Value::Float(f) => {
            out.push(b'G'); // BINFLOAT: big-endian double
            out.extend_from_slice(&f.to_be_bytes());
        }
        Value::Str(s) => {
            out.push(b'X'); // BINUNICODE: u32 length, UTF-8
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Value::List(items) => {
            out.extend_from_slice(b"]("); // EMPTY_LIST, MARK
            items.iter().for_each(|i| write(i, out));
            out.push(b'e'); // APPENDS
        }
        Value::Tuple(items) => {
            out.push(b'('); // MARK
            items.iter().for_each(|i| write(i, out));
            out.push(b't'); // TUPLE
        }
        Value::Dict(pairs) => {
            out.extend_from_slice(b"}("); // EMPTY_DICT, MARK
            for (k, v) in pairs {
                write(&Value::Str(k.clone()), out);
                write(v, out);
            }
            out.push(b'u'); // SETITEMS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_reads_it_back() {
        let doc = Value::dict([
            ("segments", Value::List((0..2500).map(|i| Value::Int(i * 1_000_000_007)).collect())),
            ("neg", Value::Int(-(1 << 50))),
            ("small", Value::Int(-5)),
            ("f", Value::Float(0.25)),
            ("t", Value::Tuple(vec![Value::Int(0), Value::Int(3)])),
            ("b", Value::List(vec![Value::Bool(true), Value::Bool(false), Value::None])),
            ("s", Value::str("é\"\n")),
            ("e", Value::Dict(vec![])),
            ("t0", Value::Tuple(vec![])),
            ("big", Value::Int(i64::MIN)),
        ]);
        let path = std::env::temp_dir().join(format!("npualloc-core-pickle-{}.pickle", std::process::id()));
        std::fs::write(&path, to_pickle(&doc)).unwrap();
        let script = "import pickle,sys\n\
            d = pickle.load(open(sys.argv[1], 'rb'))\n\
            assert d['segments'] == [i * 1000000007 for i in range(2500)]\n\
            assert d['neg'] == -(1 << 50) and d['small'] == -5 and d['f'] == 0.25 and d['t'] == (0, 3)\n\
            assert d['b'] == [True, False, None] and d['s'] == 'é\"\\n' and d['e'] == {}\n\
            assert d['t0'] == () and d['big'] == -(1 << 63)\n\
            assert list(d) == ['segments', 'neg', 'small', 'f', 't', 'b', 's', 'e', 't0', 'big']\n\
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
