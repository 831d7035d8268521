//! One self-contained HTML page: inline CSS and inline SVG charts (the timeline and the
//! top denied hosts), no scripts and no external assets, so it can be attached to a
//! ticket or opened offline.

use std::fmt::Write;

use super::Summary;

/// Escape text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = "body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1000px;color:#1d2433;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #dde;padding-bottom:.2em}
.meta{color:#667}.cards{display:flex;gap:1em;flex-wrap:wrap;margin:1em 0}
.card{border:1px solid #dde;border-radius:8px;padding:.6em 1em;min-width:9em}.card b{display:block;font-size:1.6em}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #eef;vertical-align:top}td{overflow-wrap:anywhere}
th{background:#f5f6fa;white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
.warn{color:#a40}.sus{background:#fff4f0}svg text{font:11px system-ui,sans-serif;fill:#445}
.legend span{display:inline-block;width:.8em;height:.8em;margin:0 .3em 0 1em;vertical-align:middle}";

pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>egress-proxy audit summary</title><style>{CSS}</style></head><body>\n"
    );
    let _ = writeln!(o, "<h1>Egress audit summary</h1>");
    let _ = writeln!(o, "<p class=\"meta\">{}", esc(&s.files.join(", ")));
    if let (Some(a), Some(b)) = (&s.first, &s.last) {
        let _ = write!(o, " &middot; {} to {}", esc(a), esc(b));
    }
    if let Some(t) = &s.since {
        let _ = write!(o, " &middot; since {}", esc(t));
    }
    let _ = writeln!(o, "</p>");
    for w in &s.warnings {
        let _ = writeln!(o, "<p class=\"warn\">{}</p>", esc(w));
    }
    let _ = writeln!(o, "<div class=\"cards\">");
    let cards = [
        ("records", s.records),
        ("denials", s.denials),
        ("denied hosts", s.top_denied_hosts.len() as u64),
        (
            "suspected exfiltration",
            s.suspected_exfiltration.len() as u64,
        ),
        ("malformed lines", s.malformed),
    ];
    for (label, n) in cards {
        let _ = writeln!(o, "<div class=\"card\"><b>{n}</b>{label}</div>");
    }
    let _ = writeln!(o, "</div>");
    let _ = writeln!(o, "<h2>Timeline (per {})</h2>", s.timeline.unit);
    o += &timeline_svg(s);
    let _ = writeln!(o, "<h2>Top denied hosts</h2>");
    o += &hosts_svg(s);
    tables(s, &mut o);
    let _ = writeln!(o, "</body></html>");
    o
}

fn timeline_svg(s: &Summary) -> String {
    let buckets = &s.timeline.buckets;
    if buckets.is_empty() {
        return "<p>No records.</p>\n".into();
    }
    let (w, h, left, bottom) = (960.0, 220.0, 40.0, 30.0);
    let max = buckets
        .iter()
        .map(|b| b.denied + b.allowed)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let bw = (w - left) / buckets.len() as f64;
    let scale = (h - bottom - 10.0) / max;
    let mut o = format!(
        "<p class=\"legend\"><span style=\"background:#d9534f\"></span>denied\
         <span style=\"background:#9fb3c8\"></span>allowed</p>\n\
         <svg role=\"img\" aria-label=\"timeline\" viewBox=\"0 0 {w} {h}\" width=\"100%\">\n"
    );
    let base = h - bottom;
    let _ = writeln!(
        o,
        "<line x1=\"{left}\" y1=\"{base}\" x2=\"{w}\" y2=\"{base}\" stroke=\"#889\"/>"
    );
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"14\" text-anchor=\"end\">{max}</text>",
        left - 4.0
    );
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{base}\" text-anchor=\"end\">0</text>",
        left - 4.0
    );
    for (i, b) in buckets.iter().enumerate() {
        let x = left + i as f64 * bw;
        let dh = b.denied as f64 * scale;
        let ah = b.allowed as f64 * scale;
        let bar = (bw - 1.0).max(1.0);
        let _ = writeln!(
            o,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{dh:.1}\" fill=\"#d9534f\"><title>{} denied {}</title></rect>",
            base - dh,
            esc(&b.start),
            b.denied
        );
        let _ = writeln!(
            o,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{ah:.1}\" fill=\"#9fb3c8\"><title>{} allowed {}</title></rect>",
            base - dh - ah,
            esc(&b.start),
            b.allowed
        );
    }
    let step = (buckets.len() / 6).max(1);
    for (i, b) in buckets.iter().enumerate().step_by(step) {
        let x = left + i as f64 * bw;
        let label = b.start.get(11..16).unwrap_or(&b.start);
        let label = if s.timeline.unit == "day" {
            b.start.get(..10).unwrap_or(label)
        } else {
            label
        };
        let _ = writeln!(
            o,
            "<text x=\"{x:.1}\" y=\"{}\">{}</text>",
            h - 10.0,
            esc(label)
        );
    }
    o + "</svg>\n"
}

fn hosts_svg(s: &Summary) -> String {
    let hosts = &s.top_denied_hosts;
    if hosts.is_empty() {
        return "<p>No denials.</p>\n".into();
    }
    let (w, row, left) = (960.0, 26.0, 330.0);
    let h = row * hosts.len() as f64 + 10.0;
    let max = hosts.iter().map(|x| x.denials).max().unwrap_or(1).max(1) as f64;
    let mut o = format!("<svg role=\"img\" aria-label=\"top denied hosts\" viewBox=\"0 0 {w} {h}\" width=\"100%\">\n");
    for (i, x) in hosts.iter().enumerate() {
        let y = i as f64 * row + 5.0;
        let bw = (w - left - 60.0) * x.denials as f64 / max;
        let mut name = x.host.clone();
        if name.chars().count() > 48 {
            name = name.chars().take(45).collect::<String>() + "...";
        }
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 8.0,
            y + 15.0,
            esc(&name)
        );
        let _ = writeln!(
            o,
            "<rect x=\"{left}\" y=\"{y:.1}\" width=\"{bw:.1}\" height=\"{:.1}\" fill=\"#d9534f\"><title>{}: {}</title></rect>",
            row - 8.0,
            esc(&x.host),
            x.denials
        );
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            left + bw + 6.0,
            y + 15.0,
            x.denials
        );
    }
    o + "</svg>\n"
}

fn tables(s: &Summary, o: &mut String) {
    let _ = writeln!(
        o,
        "<h2>Denials by reason</h2><table><tr><th>reason</th><th>count</th></tr>"
    );
    for c in &s.denials_by_reason {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td></tr>",
            esc(&c.name),
            c.count
        );
    }
    let _ = writeln!(o, "</table>");
    let _ = writeln!(o, "<h2>Denied hosts: sessions and clients</h2><table><tr><th>host</th><th>denials</th><th>reasons</th><th>sessions</th><th>clients</th></tr>");
    let list = |v: &[super::Count]| {
        v.iter()
            .map(|c| format!("{} ({})", esc(&c.name), c.count))
            .collect::<Vec<_>>()
            .join("<br>")
    };
    for h in &s.top_denied_hosts {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&h.host),
            h.denials,
            list(&h.reasons),
            list(&h.sessions),
            list(&h.clients)
        );
    }
    let _ = writeln!(o, "</table>");
    let _ = writeln!(o, "<h2>Suspected exfiltration</h2>");
    if s.suspected_exfiltration.is_empty() {
        let _ = writeln!(o, "<p>None found.</p>");
    } else {
        let _ = writeln!(o, "<table><tr><th>host</th><th>sign</th><th>count</th><th>sessions</th><th>clients</th></tr>");
        for x in &s.suspected_exfiltration {
            let _ = writeln!(
                o,
                "<tr class=\"sus\"><td>{}</td><td>{}: {}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
                esc(&x.host),
                x.kind,
                esc(&x.detail),
                x.count,
                esc(&x.sessions.join(", ")),
                esc(&x.clients.join(", "))
            );
        }
        let _ = writeln!(o, "</table>");
    }
    let _ = writeln!(o, "<h2>Shared-hosting traffic</h2>");
    if s.shared_hosting.is_empty() {
        let _ = writeln!(o, "<p>None.</p>");
        return;
    }
    let _ = writeln!(o, "<table><tr><th>host</th><th>allowed</th><th>denied</th><th>bytes up</th><th>bytes down</th></tr>");
    for h in &s.shared_hosting {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&h.host), h.allowed, h.denied, h.bytes_up, h.bytes_down
        );
    }
    let _ = writeln!(o, "</table>");
}
