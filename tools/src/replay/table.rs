//! Reports as an aligned text table or one JSON document.

use super::Report;
use serde::Serialize;
use std::fmt::Write;

const MIB: f64 = (1u64 << 20) as f64;

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / MIB)
}

/// The text table's column headers, in order (`npualloc-replay --help`
/// explains each).
pub const HEADERS: [&str; 14] = [
    "trace",
    "config",
    "ops",
    "peak req MiB",
    "peak rsv MiB",
    "ratio",
    "min cap MiB",
    "min cap x",
    "ns/op",
    "malloc/free",
    "map/unmap",
    "phys m/f",
    "syncs",
    "OOMs",
];

/// One line per report, columns aligned; errors replace the numbers.
pub fn text_table(reports: &[Report]) -> String {
    let rows: Vec<Vec<String>> = reports.iter().map(row).collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.len()).collect();
    for r in &rows {
        if r.len() == HEADERS.len() {
            for (w, cell) in widths.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        } else {
            // Error rows only share the first two columns.
            for (w, cell) in widths.iter_mut().zip(r.iter().take(2)) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let mut parts = Vec::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == cells.len() - 1 && cells.len() < HEADERS.len() {
                parts.push(cell.clone());
            } else if i < 2 {
                parts.push(format!("{cell:<w$}", w = widths[i]));
            } else {
                parts.push(format!("{cell:>w$}", w = widths[i]));
            }
        }
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(&mut out, &HEADERS.map(String::from));
    for r in &rows {
        line(&mut out, r);
    }
    out
}

fn row(r: &Report) -> Vec<String> {
    let mut cells = vec![r.trace.clone(), r.target.label().to_string()];
    let m = match &r.result {
        Ok(m) => m,
        Err(e) => {
            cells.push(format!("error: {e}"));
            return cells;
        }
    };
    let (cap, cap_x) = match &m.min_capacity {
        None => ("-".to_string(), "-".to_string()),
        Some(Ok(c)) => (mib(*c), format!("{:.3}", *c as f64 / r.peak_requested.max(1) as f64)),
        Some(Err(e)) => (format!("({e})"), "-".to_string()),
    };
    cells.extend([
        r.ops.to_string(),
        mib(r.peak_requested),
        mib(m.peak_reserved),
        r.ratio().map_or("-".into(), |x| format!("{x:.3}")),
        cap,
        cap_x,
        format!("{:.1}", m.ns_per_op),
        format!("{}/{}", m.device_mallocs, m.device_frees),
        format!("{}/{}", m.maps, m.unmaps),
        format!("{}/{}", m.physical_mallocs, m.physical_frees),
        m.syncs.to_string(),
        m.ooms.to_string(),
    ]);
    cells
}

/// One report in the JSON document: the same numbers as the table, sizes in
/// bytes. Fields in this order; a row that failed has only the first five
/// and `error`.
#[derive(Serialize)]
struct JsonRow<'a> {
    trace: &'a str,
    label: &'a str,
    config: &'a str,
    ops: usize,
    peak_requested: u64,
    #[serde(flatten)]
    measured: Option<JsonMeasured<'a>>,
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonMeasured<'a> {
    peak_reserved: u64,
    ratio: Option<f64>,
    ns_per_op: f64,
    device_mallocs: u64,
    device_frees: u64,
    maps: u64,
    unmaps: u64,
    physical_mallocs: u64,
    physical_frees: u64,
    syncs: u64,
    event_records: u64,
    event_queries: u64,
    /// Calls per ACL function the emulator's cost model may charge.
    acl_calls: std::collections::BTreeMap<&'a str, u64>,
    ooms: u64,
    /// `null` when not measured or when no capacity fits.
    min_capacity: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_capacity_x: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_capacity_error: Option<&'a str>,
}

/// `x` to `places` decimals, as the table shows it.
fn round(x: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (x * scale).round() / scale
}

fn json_row(r: &Report) -> JsonRow<'_> {
    let measured = r.result.as_ref().ok().map(|m| {
        let (min_capacity, min_capacity_x, min_capacity_error) = match &m.min_capacity {
            None => (None, None, None),
            Some(Ok(c)) => (Some(*c), Some(round(*c as f64 / r.peak_requested.max(1) as f64, 4)), None),
            Some(Err(e)) => (None, None, Some(e.as_str())),
        };
        JsonMeasured {
            peak_reserved: m.peak_reserved,
            ratio: r.ratio().map(|x| round(x, 4)),
            ns_per_op: round(m.ns_per_op, 2),
            device_mallocs: m.device_mallocs,
            device_frees: m.device_frees,
            maps: m.maps,
            unmaps: m.unmaps,
            physical_mallocs: m.physical_mallocs,
            physical_frees: m.physical_frees,
            syncs: m.syncs,
            event_records: m.event_records,
            event_queries: m.event_queries,
            acl_calls: m.acl_calls.iter().copied().collect(),
            ooms: m.ooms,
            min_capacity,
            min_capacity_x,
            min_capacity_error,
        }
    });
    JsonRow {
        trace: &r.trace,
        label: r.target.label(),
        config: r.target.config_text(),
        ops: r.ops,
        peak_requested: r.peak_requested,
        measured,
        error: r.result.as_ref().err().map(String::as_str),
    }
}

/// All reports as `{"reports": [...]}`, indented by two spaces.
pub fn json_document(reports: &[Report]) -> String {
    #[derive(Serialize)]
    struct Document<'a> {
        reports: Vec<JsonRow<'a>>,
    }
    let doc = Document { reports: reports.iter().map(json_row).collect() };
    let mut out = serde_json::to_string_pretty(&doc).expect("a report serializes");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{Measured, Target};

    fn report(trace: &str, result: Result<Measured, String>) -> Report {
        Report { trace: trace.into(), target: Target::npualloc(""), ops: 4, peak_requested: 3000, result }
    }

    #[test]
    fn json_rows_keep_their_fields_order_and_rounding() {
        let measured = |min_capacity| Measured {
            peak_reserved: 4000,
            ns_per_op: 12.345_678,
            device_mallocs: 2,
            min_capacity,
            ..Measured::default()
        };
        let reports = [
            report("a\"b.trace", Ok(measured(Some(Ok(7000))))),
            report("c.trace", Ok(measured(Some(Err("does not fit".into()))))),
            report("d.trace", Err("boom".into())),
        ];
        let text = json_document(&reports);
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let rows = doc["reports"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0]["trace"], "a\"b.trace");
        assert_eq!(rows[0]["ns_per_op"].as_f64(), Some(12.35));
        assert_eq!(rows[0]["ratio"].as_f64(), Some(1.3333));
        assert_eq!(rows[0]["min_capacity"].as_u64(), Some(7000));
        assert_eq!(rows[0]["min_capacity_x"].as_f64(), Some(2.3333));
        assert!(rows[0]["error"].is_null() && rows[0].get("min_capacity_error").is_none());
        assert!(rows[1]["min_capacity"].is_null() && rows[1].get("min_capacity_x").is_none());
        assert_eq!(rows[1]["min_capacity_error"], "does not fit");
        // A failed row: the trace's numbers and the error, nothing measured.
        let failed: Vec<&str> = rows[2].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(failed.len(), 6, "{failed:?}");
        assert_eq!(rows[2]["error"], "boom");
        // Fields in the documented order (serde_json's map sorts keys, so
        // the order is read off the text).
        let first = text.split("\n    },").next().unwrap();
        let keys = ["\"trace\"", "\"label\"", "\"peak_requested\"", "\"peak_reserved\"", "\"ooms\"", "\"error\""];
        let at: Vec<usize> = keys.iter().map(|k| first.find(k).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{first}");
        assert!(text.ends_with("]\n}\n"), "{text}");
    }
}
