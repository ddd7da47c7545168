//! A [`Value`] as a Python pickle, the file format of PyTorch's `torch.cuda.memory._dump_snapshot`
//! (protocol 2, which every Python 3 reads). Tuples stay tuples, as `_memory_viz.py` expects of
//! `segment_pool_id`.

use super::Value;

/// The pickle of `v`.
pub fn to_pickle(v: &Value) -> Vec<u8> {
    // Cannot fail: no I/O, and serde-pickle refuses nothing `Value` serializes.
    serde_pickle::to_vec(v, serde_pickle::SerOptions::new().proto_v2()).expect("a Value always pickles")
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
            ("t1", Value::Tuple(vec![Value::Int(7)])),
            ("t4", Value::Tuple((1..=4).map(Value::Int).collect())),
            ("big", Value::Int(i64::MIN)),
            ("max", Value::Int(i64::MAX)),
        ]);
        let path = std::env::temp_dir().join(format!("npualloc-core-pickle-{}.pickle", std::process::id()));
        std::fs::write(&path, to_pickle(&doc)).unwrap();
        let script = "import pickle,sys\n\
            d = pickle.load(open(sys.argv[1], 'rb'))\n\
            assert d['segments'] == [i * 1000000007 for i in range(2500)]\n\
            assert d['neg'] == -(1 << 50) and d['small'] == -5 and d['f'] == 0.25 and d['t'] == (0, 3)\n\
            assert d['b'] == [True, False, None] and d['s'] == 'é\"\\n' and d['e'] == {}\n\
            assert d['t0'] == () and d['t1'] == (7,) and d['t4'] == (1, 2, 3, 4)\n\
            assert d['big'] == -(1 << 63) and d['max'] == (1 << 63) - 1\n\
            assert list(d) == ['segments', 'neg', 'small', 'f', 't', 'b', 's', 'e', 't0', 't1', 't4', 'big', 'max']\n\
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

    /// The protocol Python is told: PROTO 2 first, STOP last.
    #[test]
    fn protocol_2() {
        let bytes = to_pickle(&Value::None);
        assert_eq!(&bytes[..2], &[0x80, 2]);
        assert_eq!(bytes.last(), Some(&b'.'));
    }
}
