//! A small tree of plain values (what a Python `dict` of lists, strings and
//! numbers holds), so one snapshot can be written as JSON here and as a
//! pickle by the replay tool.

use std::fmt::Write;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    /// A Python tuple (a list in JSON).
    Tuple(Vec<Value>),
    /// Keys in insertion order.
    Dict(Vec<(String, Value)>),
}

impl Value {
    /// A dict from `(key, value)` pairs.
    pub fn dict<const N: usize>(pairs: [(&str, Value); N]) -> Value {
        Value::Dict(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    pub fn str(s: &str) -> Value {
        Value::Str(s.to_string())
    }

    /// An address or byte count (both fit i64 on every supported host).
    pub fn int(n: impl TryInto<i64>) -> Value {
        Value::Int(n.try_into().unwrap_or(i64::MAX))
    }

    /// The value under `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a list or tuple.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }

    /// Compact JSON. A float that is not finite becomes `null` (JSON has no
    /// such numbers).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    fn write_json(&self, out: &mut String) {
        match self {
            Value::None => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Float(f) if f.is_finite() => {
                // `{:?}` keeps a decimal point, so it reads back as a float.
                let _ = write!(out, "{f:?}");
            }
            Value::Float(_) => out.push_str("null"),
            Value::Str(s) => write_json_str(out, s),
            Value::List(items) | Value::Tuple(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_json(out);
                }
                out.push(']');
            }
            Value::Dict(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_json_str(out, k);
                    out.push(':');
                    v.write_json(out);
                }
                out.push('}');
            }
        }
    }
}

fn write_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_of_every_kind() {
        let v = Value::dict([
            ("n", Value::None),
            ("b", Value::Bool(true)),
            ("i", Value::int(-3i64)),
            ("f", Value::Float(1.0)),
            ("nan", Value::Float(f64::NAN)),
            ("s", Value::str("a\"b\\c\n\u{1}é")),
            ("l", Value::List(vec![Value::int(1u8), Value::Tuple(vec![Value::int(0u8), Value::int(0u8)])])),
            ("d", Value::Dict(vec![])),
        ]);
        assert_eq!(
            v.to_json(),
            r#"{"n":null,"b":true,"i":-3,"f":1.0,"nan":null,"s":"a\"b\\c\n\u0001é","l":[1,[0,0]],"d":{}}"#
        );
        assert_eq!(v.get("i").and_then(Value::as_int), Some(-3));
        assert_eq!(v.get("l").and_then(Value::as_list).map(<[Value]>::len), Some(2));
        assert_eq!(v.get("missing"), None);
    }
}
