//! Reports as an aligned text table or one JSON document.

use super::json::quote;
use super::Report;
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

/// All reports as `{"reports":[...]}`.
pub fn json_document(reports: &[Report]) -> String {
    let mut out = String::from("{\"reports\":[");
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "\n{{\"trace\":{},\"label\":{},\"config\":{},\"ops\":{},\"peak_requested\":{}",
            quote(&r.trace),
            quote(r.target.label()),
            quote(r.target.config_text()),
            r.ops,
            r.peak_requested
        );
        match &r.result {
            Err(e) => {
                let _ = write!(out, ",\"error\":{}}}", quote(e));
            }
            Ok(m) => {
                let _ = write!(
                    out,
                    ",\"peak_reserved\":{},\"ratio\":{},\"ns_per_op\":{:.2},\"device_mallocs\":{},\"device_frees\":{},\
                     \"maps\":{},\"unmaps\":{},\"physical_mallocs\":{},\"physical_frees\":{},\"syncs\":{},\"ooms\":{}",
                    m.peak_reserved,
                    r.ratio().map_or("null".into(), |x| format!("{x:.4}")),
                    m.ns_per_op,
                    m.device_mallocs,
                    m.device_frees,
                    m.maps,
                    m.unmaps,
                    m.physical_mallocs,
                    m.physical_frees,
                    m.syncs,
                    m.ooms
                );
                match &m.min_capacity {
                    None => out.push_str(",\"min_capacity\":null"),
                    Some(Ok(c)) => {
                        let _ = write!(
                            out,
                            ",\"min_capacity\":{c},\"min_capacity_x\":{:.4}",
                            *c as f64 / r.peak_requested.max(1) as f64
                        );
                    }
                    Some(Err(e)) => {
                        let _ = write!(out, ",\"min_capacity\":null,\"min_capacity_error\":{}", quote(e));
                    }
                }
                out.push_str(",\"error\":null}");
            }
        }
    }
    out.push_str("\n]}\n");
    out
}
