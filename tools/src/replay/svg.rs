//! A hand-written SVG of replays: per trace, requested and reserved bytes
//! over the trace's steps, and the first configuration's segments at its
//! peak.

use super::prepared::Prepared;
use super::snapshot::{BlockKind, SegmentMap};
use super::Report;
use std::fmt::Write;

const MIB: f64 = (1u64 << 20) as f64;
const WIDTH: f64 = 1000.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 30.0;
const PLOT_H: f64 = 280.0;
/// Segment rows drawn at most; the rest are summarised in one line.
const MAX_ROWS: usize = 40;

/// Colours of the reserved lines, in configuration order.
const PALETTE: [&str; 6] = ["#1f6fb4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
/// Dash patterns, so identical lines stay distinguishable.
const DASHES: [&str; 4] = ["", "7 4", "2 3", "10 3 2 3"];
const REQUESTED: &str = "#444444";

/// One trace's replays.
pub struct Figure<'a> {
    pub trace: &'a Prepared,
    pub reports: &'a [Report],
}

/// The whole document.
pub fn render(figures: &[Figure<'_>]) -> String {
    let mut body = String::new();
    let mut y = 0.0;
    for f in figures {
        y = chart(&mut body, f, y);
        if let Some((label, map)) = f.reports.first().and_then(|r| {
            let m = r.result.as_ref().ok()?.segment_map.as_ref()?;
            Some((r.target.label(), m))
        }) {
            y = segment_map(&mut body, label, map, f.trace.steps.len(), y);
        }
        y += 20.0;
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h}\" viewBox=\"0 0 {WIDTH} {h}\" \
         font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">",
        h = y.ceil()
    );
    let _ = writeln!(out, "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{}\" fill=\"white\"/>", y.ceil());
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// Draws the line chart from `top`; returns the y below it.
fn chart(out: &mut String, f: &Figure<'_>, top: f64) -> f64 {
    let n = f.trace.requested.len().max(1);
    let series: Vec<(usize, &Report, &[u64])> = f
        .reports
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.result.as_ref().ok().filter(|m| !m.reserved_series.is_empty()).map(|m| (i, r, &m.reserved_series[..]))
        })
        .collect();
    let max_bytes = series
        .iter()
        .flat_map(|(_, _, s)| s.iter())
        .chain(f.trace.requested.iter())
        .copied()
        .max()
        .unwrap_or(0)
        .max(1 << 20);
    let y_step = nice_step(max_bytes as f64 / MIB * 1.05, 6);
    let y_max = (max_bytes as f64 / MIB * 1.05 / y_step).ceil() * y_step;
    let x_step = nice_step(n as f64, 8);
    let plot_w = WIDTH - LEFT - RIGHT;
    let (x0, y0) = (LEFT, top + 50.0);
    let px = |i: f64| x0 + i / n as f64 * plot_w;
    let py = |mib: f64| y0 + PLOT_H - mib / y_max * PLOT_H;

    let _ = writeln!(out, "<g class=\"chart\" data-trace=\"{}\">", esc(&f.trace.name));
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"16\" font-weight=\"bold\">{}: requested vs reserved device memory</text>",
        LEFT,
        top + 25.0,
        esc(&f.trace.name)
    );
    // Grid and ticks.
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let y = py(v);
        let _ = writeln!(
            out,
            "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 + plot_w,
            x0 - 6.0,
            y + 4.0,
            fmt_tick(v)
        );
        v += y_step;
    }
    let mut i = 0.0;
    while i <= n as f64 + 1e-9 {
        let x = px(i);
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y0 + PLOT_H,
            y0 + PLOT_H + 5.0,
            y0 + PLOT_H + 18.0,
            fmt_count(i)
        );
        i += x_step;
    }
    let _ = writeln!(
        out,
        "<rect x=\"{x0}\" y=\"{y0}\" width=\"{plot_w}\" height=\"{PLOT_H}\" fill=\"none\" stroke=\"#888\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">trace step (op index)</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.1} {:.1})\">MiB</text>",
        x0 + plot_w / 2.0,
        y0 + PLOT_H + 36.0,
        LEFT - 55.0,
        y0 + PLOT_H / 2.0,
        LEFT - 55.0,
        y0 + PLOT_H / 2.0
    );
    // Requested: a shaded area under a line.
    let req = envelope(&f.trace.requested, plot_w as usize);
    let pts = points(&req, &px, &py);
    let _ = writeln!(
        out,
        "<polygon class=\"area\" fill=\"#d9d9d9\" fill-opacity=\"0.6\" points=\"{x0:.1},{:.1} {pts} {:.1},{:.1}\"/>",
        py(0.0),
        px(n as f64),
        py(0.0)
    );
    for (i, r, s) in &series {
        let env = envelope(s, plot_w as usize);
        let _ = writeln!(
            out,
            "<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>",
            esc(r.target.label()),
            PALETTE[i % PALETTE.len()],
            dash(*i),
            points(&env, &px, &py)
        );
    }
    // Requested last and thin, so it stays visible where lines coincide.
    let _ = writeln!(
        out,
        "<polyline class=\"series\" data-series=\"requested\" fill=\"none\" stroke=\"{REQUESTED}\" stroke-width=\"1\" points=\"{pts}\"/>"
    );
    // Legend: one row under the axis title.
    let ly = y0 + PLOT_H + 58.0;
    let mut lx = LEFT;
    let mut entries: Vec<(String, String, String, bool)> =
        vec![("requested (live bytes in the trace)".into(), REQUESTED.into(), String::new(), true)];
    for (i, r) in f.reports.iter().enumerate() {
        let text = match &r.result {
            Ok(m) => format!("{} reserved (peak {:.0} MiB)", r.target.label(), m.peak_reserved as f64 / MIB),
            Err(e) => format!("{}: not run ({})", r.target.label(), shorten(e, 60)),
        };
        entries.push((text, PALETTE[i % PALETTE.len()].into(), dash(i), r.result.is_ok()));
    }
    let _ = writeln!(out, "<g class=\"legend\">");
    let mut rows = 1.0;
    for (text, color, dash, drawn) in entries {
        let w = 34.0 + text.chars().count() as f64 * 6.6;
        if lx + w > WIDTH - RIGHT {
            lx = LEFT;
            rows += 1.0;
        }
        let y = ly + (rows - 1.0) * 18.0;
        if drawn {
            let _ = write!(
                out,
                "<line x1=\"{lx:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>",
                y - 4.0,
                lx + 24.0,
                y - 4.0
            );
        }
        let _ = writeln!(out, "<text x=\"{:.1}\" y=\"{y:.1}\">{}</text>", lx + 30.0, esc(&text));
        lx += w + 16.0;
    }
    let _ = writeln!(out, "</g>\n</g>");
    ly + (rows - 1.0) * 18.0 + 20.0
}

/// Draws one bar per segment (largest first) with its blocks.
fn segment_map(out: &mut String, label: &str, map: &SegmentMap, steps: usize, top: f64) -> f64 {
    const ROW: f64 = 14.0;
    const GAP: f64 = 4.0;
    const LABEL_W: f64 = 190.0;
    let mut segs: Vec<_> = map.segments.iter().filter(|s| s.extent > 0).collect();
    segs.sort_by_key(|s| std::cmp::Reverse(s.extent));
    let largest = segs.first().map_or(1, |s| s.extent).max(1) as f64;
    let any_expandable = segs.iter().any(|s| s.expandable);
    let bar_max = WIDTH - LEFT - RIGHT - LABEL_W + 60.0;
    let x0 = LEFT - 60.0 + LABEL_W;
    let _ = writeln!(out, "<g class=\"segment-map\" data-config=\"{}\">", esc(label));
    let notes = [
        format!(
            "{:.1} MiB in {} segments, after step {} of {}. One bar per segment, largest first, to scale (longest {:.1} MiB).",
            map.reserved as f64 / MIB,
            map.segments.len(),
            map.step + 1,
            steps,
            largest / MIB
        ),
        if any_expandable {
            "Expandable segments: the bar is the mapped part of the address range (plus any block in use past it).".to_string()
        } else {
            String::new()
        },
    ];
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{:.1}\" font-size=\"14\" font-weight=\"bold\">Segment map at peak reserved: {}</text>",
        LEFT - 60.0,
        top + 20.0,
        esc(label)
    );
    let mut top = top + 20.0;
    for note in notes.iter().filter(|n| !n.is_empty()) {
        top += 17.0;
        let _ = writeln!(out, "<text x=\"{}\" y=\"{top:.1}\" fill=\"#555\">{}</text>", LEFT - 60.0, esc(note));
    }
    let top = top - 38.0 + 4.0;
    // Legend.
    let mut lx = LEFT - 60.0;
    let ly = top + 56.0;
    let _ = writeln!(out, "<g class=\"legend\">");
    for kind in [BlockKind::Active, BlockKind::Cached, BlockKind::PendingFree] {
        let _ = writeln!(
            out,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"14\" height=\"10\" fill=\"{}\" stroke=\"#333\" stroke-width=\"0.5\"/>\
             <text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            ly - 9.0,
            block_color(kind),
            lx + 19.0,
            kind.name()
        );
        lx += 40.0 + kind.name().len() as f64 * 7.0;
    }
    let _ = writeln!(out, "</g>");
    let mut y = top + 70.0;
    for seg in segs.iter().take(MAX_ROWS) {
        let w = (seg.extent as f64 / largest * bar_max).max(2.0);
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{} {}</text>",
            x0 - 6.0,
            y + ROW - 3.0,
            fmt_size(if seg.expandable { seg.mapped } else { seg.size }),
            esc(&if seg.expandable { format!("mapped, {} (exp.)", seg.pool) } else { seg.pool.clone() })
        );
        let _ = write!(out, "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{ROW}\" fill=\"white\"/>");
        let scale = w / seg.extent as f64;
        for b in seg.blocks.iter().filter(|b| b.offset < seg.extent) {
            let bx = x0 + b.offset as f64 * scale;
            let bw = (b.size.min(seg.extent - b.offset) as f64 * scale).max(0.4);
            let _ = write!(
                out,
                "<rect class=\"block {}\" x=\"{bx:.2}\" y=\"{y:.1}\" width=\"{bw:.2}\" height=\"{ROW}\" fill=\"{}\"/>",
                b.kind.name(),
                block_color(b.kind)
            );
        }
        let _ = writeln!(
            out,
            "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{ROW}\" fill=\"none\" stroke=\"#333\" stroke-width=\"0.6\"/>"
        );
        y += ROW + GAP;
    }
    if segs.len() > MAX_ROWS {
        let rest: u64 = segs[MAX_ROWS..].iter().map(|s| s.extent).sum();
        let _ = writeln!(
            out,
            "<text x=\"{x0:.1}\" y=\"{:.1}\" fill=\"#555\">... and {} smaller segments ({:.1} MiB) not drawn</text>",
            y + 10.0,
            segs.len() - MAX_ROWS,
            rest as f64 / MIB
        );
        y += 18.0;
    }
    let _ = writeln!(out, "</g>");
    y + 10.0
}

fn block_color(kind: BlockKind) -> &'static str {
    match kind {
        BlockKind::Active => "#3b6fb6",
        BlockKind::Cached => "#a6d99a",
        BlockKind::PendingFree => "#f39c3c",
    }
}

fn dash(i: usize) -> String {
    match DASHES[i % DASHES.len()] {
        "" => String::new(),
        d => format!(" stroke-dasharray=\"{d}\""),
    }
}

/// At most about two points per pixel column: the min and max of the values
/// that fall in it, in the order that keeps the line continuous.
fn envelope(s: &[u64], columns: usize) -> Vec<(f64, f64)> {
    let columns = columns.max(1);
    if s.len() <= 2 * columns {
        return s.iter().enumerate().map(|(i, &v)| ((i + 1) as f64, v as f64 / MIB)).collect();
    }
    let mut out = Vec::with_capacity(2 * columns);
    let mut last = 0.0;
    for c in 0..columns {
        let (a, b) = (c * s.len() / columns, ((c + 1) * s.len() / columns).max(c * s.len() / columns + 1));
        let chunk = &s[a..b.min(s.len())];
        let lo = *chunk.iter().min().unwrap() as f64 / MIB;
        let hi = *chunk.iter().max().unwrap() as f64 / MIB;
        let x = b as f64;
        if (last - lo).abs() <= (last - hi).abs() {
            out.extend([(x, lo), (x, hi)]);
            last = hi;
        } else {
            out.extend([(x, hi), (x, lo)]);
            last = lo;
        }
    }
    out
}

fn points(p: &[(f64, f64)], px: &dyn Fn(f64) -> f64, py: &dyn Fn(f64) -> f64) -> String {
    let mut s = String::with_capacity(p.len() * 14);
    for &(x, y) in p {
        let _ = write!(s, "{:.1},{:.1} ", px(x), py(y));
    }
    s.pop();
    s
}

/// 1, 2 or 5 times a power of ten, giving about `target` intervals.
fn nice_step(range: f64, target: usize) -> f64 {
    let raw = (range / target as f64).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    (nice * mag).max(1.0)
}

fn fmt_tick(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn fmt_count(v: f64) -> String {
    if v >= 1000.0 && v % 1000.0 == 0.0 {
        format!("{}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

fn fmt_size(bytes: u64) -> String {
    let m = bytes as f64 / MIB;
    if m >= 10.0 {
        format!("{m:.0} MiB")
    } else {
        format!("{m:.1} MiB")
    }
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

/// Escapes text for XML content and attributes. Control characters other
/// than tab and newline cannot appear in XML 1.0 at all, not even escaped:
/// they become U+FFFD.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(1000.0, 5), 200.0);
        assert_eq!(nice_step(434.0, 6), 100.0);
        assert_eq!(nice_step(3.0, 6), 1.0);
    }

    #[test]
    fn envelope_keeps_extremes() {
        let s: Vec<u64> = (0..10_000u64).map(|i| if i == 5_000 { 100 << 20 } else { 1 << 20 }).collect();
        let e = envelope(&s, 100);
        assert!(e.len() <= 200);
        assert!(e.iter().any(|&(_, y)| y == 100.0));
    }
}
