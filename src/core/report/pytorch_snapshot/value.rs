//! A small tree of plain Python values, so one snapshot can be written as JSON and as a pickle.

use serde::ser::{Serialize, SerializeTuple, Serializer};

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

    /// Compact JSON; a float that is not finite becomes `null`.
    pub fn to_json(&self) -> String {
        // Cannot fail: every map key is a string and no impl here errs.
        serde_json::to_string(self).expect("a Value always serializes")
    }
}

/// Readers, for the tests.
#[cfg(test)]
impl Value {
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
}

/// Python's types through serde's. serde_json writes a tuple as a list and a non-finite float as `null`;
/// serde-pickle keeps the tuple.
impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::None => s.serialize_none(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(n) => s.serialize_i64(*n),
            Value::Float(f) => s.serialize_f64(*f),
            Value::Str(text) => s.serialize_str(text),
            Value::List(items) => s.collect_seq(items),
            Value::Tuple(items) => {
                let mut t = s.serialize_tuple(items.len())?;
                items.iter().try_for_each(|item| t.serialize_element(item))?;
                t.end()
            }
            Value::Dict(pairs) => s.collect_map(pairs.iter().map(|(k, v)| (k, v))),
        }
    }
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
