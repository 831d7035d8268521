//! Signs of data being smuggled out in denied requests: long or high-entropy labels
//! below the registrable domain (DNS- or name-encoded data), labels that are long
//! together (the same data split to fit DNS's 63-byte labels), and long query strings.
//! A query to the DNS listener is a denied request like any other (its record's `host`
//! is the name asked, its `method` `DNS`), so DNS-label exfiltration from a jail shows
//! here too.

/// A label longer than this is suspicious whatever its letters.
pub const LONG_LABEL: usize = 40;
/// Labels at least this long are tested for entropy.
pub const ENTROPY_MIN_LEN: usize = 16;
/// Shannon entropy (bits per character) at or above which a label looks random.
pub const HIGH_ENTROPY: f64 = 3.5;
/// Labels below the registrable domain longer than this together (dots not counted) are
/// suspicious, even when none is by itself.
pub const LONG_SUBDOMAIN: usize = 60;
/// A query string longer than this (bytes) to a denied host is suspicious.
pub const LONG_QUERY: usize = 100;

/// Shannon entropy of the characters of `s`, in bits per character.
pub fn entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut n = 0.0;
    for c in s.chars() {
        *counts.entry(c).or_insert(0.0) += 1.0;
        n += 1.0;
    }
    counts
        .values()
        .map(|&k: &f64| {
            let p = k / n;
            -p * p.log2()
        })
        .sum()
}

/// The labels of `host` below its registrable domain (all but the last two labels when
/// the Public Suffix List does not know it).
fn sub_labels(host: &str) -> Vec<&str> {
    let keep = match psl::domain(host.as_bytes()) {
        Some(d) => host.len().saturating_sub(d.as_bytes().len()),
        None => {
            let labels: Vec<&str> = host.split('.').collect();
            let n = labels.len().saturating_sub(2);
            labels[..n].iter().map(|l| l.len() + 1).sum()
        }
    };
    host[..keep].split('.').filter(|l| !l.is_empty()).collect()
}

/// What is suspicious about a denied request's host and URL: `(kind, detail)`.
pub fn suspicions(host: &str, url: Option<&str>, truncated: bool) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let is_ip = host
        .trim_matches(['[', ']'])
        .parse::<std::net::IpAddr>()
        .is_ok();
    let labels = if is_ip { Vec::new() } else { sub_labels(host) };
    for &label in &labels {
        if label.len() > LONG_LABEL {
            out.push(("long_label", format!("a {}-character label", label.len())));
        } else if label.len() >= ENTROPY_MIN_LEN && entropy(label) >= HIGH_ENTROPY {
            out.push((
                "high_entropy_label",
                format!("label `{label}` ({:.1} bits/char)", entropy(label)),
            ));
        }
    }
    let together: usize = labels.iter().map(|l| l.len()).sum();
    if out.is_empty() && together > LONG_SUBDOMAIN {
        out.push((
            "long_subdomain",
            format!("{} labels of {together} characters in all", labels.len()),
        ));
    }
    let query = url.and_then(|u| u.split_once('?')).map(|(_, q)| q);
    if let Some(q) = query {
        if q.len() > LONG_QUERY || truncated {
            let more = if truncated { "+ (truncated)" } else { "" };
            out.push((
                "long_query",
                format!("a {}{more}-byte query string", q.len()),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspicious_hosts_and_urls() {
        #[rustfmt::skip]
        let cases: &[(&str, &str, Option<&str>, bool)] = &[
            ("plain_name",           "api.example.com",                                   None, false),
            ("long_label",           "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.evil.test", None, true),
            ("dns_base64_label",     "agvsbg8gd29ybgqgdghpcybpcybszxhmawx0cmf0aw9u.evil.test", None, true),
            ("split_over_labels",    "dghpcybp.cybszxhm.axx0cmf0.aw9uigrh.dgegc3bs.axqgd2l0.aca2ndfj.agfyywn0.zxjzig.evil.test", None, true),
            ("split_short_total",    "a1b2.c3d4.evil.test",                               None, false),
            ("many_word_labels",     "www.static.cdn.assets.images.thumbnails.example.com", None, false),
            ("random_label",         "x7k2q9zpl4m8w3rt.evil.test",                         None, true),
            ("word_label",           "documentation.example.com",                         None, false),
            ("registrable_only",     "k7x2q9zpl4m8w3rtz.com",                             None, false),
            ("long_query",           "evil.test", Some(&*format!("http://evil.test/?d={}", "a".repeat(120))), true),
            ("short_query",          "evil.test", Some("http://evil.test/?q=1"),          false),
        ];
        for (rule, host, url, want) in cases {
            assert_eq!(!suspicions(host, *url, false).is_empty(), *want, "{rule}");
        }
    }

    #[test]
    fn split_labels_are_one_suspicion_not_many() {
        let host = "dghpcybp.cybszxhm.axx0cmf0.aw9uigrh.dgegc3bs.axqgd2l0.aca2ndfj.agfyywn0.zxjzig.evil.test";
        let found = suspicions(host, None, false);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "long_subdomain");
        assert_eq!(found[0].1, "9 labels of 70 characters in all");
    }
}
