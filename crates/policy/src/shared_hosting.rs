//! Shared hosting (docs/reference/policy-files.md): names where anyone can publish or receive data, so an
//! allow entry for them is an exfiltration channel. A name is shared hosting when it is at
//! or below a private-section Public Suffix List entry, at or below a built-in request
//! sink, or matched by the organization's `extra_domains`.

use super::compiled::{DomainSet, NameProbe};
use super::host::{DomainEntry, DomainPattern, HostName};

/// Webhook and request-capture services, tunnels and paste sites.
const SINKS: &[&str] = &[
    "webhook.site",
    "requestbin.com",
    "requestbin.net",
    "pipedream.net",
    "pipedream.com",
    "m.pipedream.net",
    "hookbin.com",
    "beeceptor.com",
    "requestcatcher.com",
    "mockbin.org",
    "postb.in",
    "ptsv2.com",
    "ptsv3.com",
    "hookdeck.com",
    "webhook.cool",
    "interactsh.com",
    "oast.fun",
    "oast.pro",
    "oast.live",
    "oast.site",
    "oast.online",
    "oast.me",
    "burpcollaborator.net",
    "oastify.com",
    "dnslog.cn",
    "ceye.io",
    "canarytokens.com",
    "ngrok.io",
    "ngrok-free.app",
    "ngrok.app",
    "trycloudflare.com",
    "loca.lt",
    "localtunnel.me",
    "serveo.net",
    "localhost.run",
    "lhr.life",
    "pastebin.com",
    "paste.ee",
    "hastebin.com",
    "ghostbin.com",
    "transfer.sh",
    "file.io",
    "0x0.st",
    "termbin.com",
    "ix.io",
    "sprunge.us",
    "requestrepo.com",
    "webhookrelay.com",
    "pastebin.pl",
    "dpaste.org",
    "temp.sh",
];

/// Why `host` is shared hosting (the suffix, sink or extra entry), or `None`.
pub fn classify(host: &HostName, extra: &DomainSet) -> Option<String> {
    classify_probe(&NameProbe::new(host), extra).map(str::to_owned)
}

/// [`classify`] for a host already cut into a [`NameProbe`]: the decision's hot path, so
/// it borrows its answer rather than allocate one.
pub(crate) fn classify_probe<'a>(host: &NameProbe<'a>, extra: &'a DomainSet) -> Option<&'a str> {
    let name = host.suffix(host.labels());
    if let Some(suffix) = psl::suffix(name.as_bytes()) {
        if suffix.typ() == Some(psl::Type::Private) {
            // The suffix is the tail of `name`: slice it rather than copy it.
            return Some(&name[name.len() - suffix.as_bytes().len()..]);
        }
    }
    // The name's last three, two and one labels, each one probe in a set: sinks have
    // at most three labels, and the cost grows with the name's labels, not the list.
    let sinks = SINK_SET.get_or_init(|| {
        DomainSet::from_entries(
            SINKS
                .iter()
                .map(|s| DomainEntry::parse(s).unwrap())
                .collect(),
        )
    });
    let near = (1..=host.labels().min(SINK_MAX_LABELS)).rev();
    if let Some(sink) = near.flat_map(|d| sinks.exact_at(host, d)).next() {
        return Some(&sink.text);
    }
    extra.matching_probe(host).next().map(|e| &*e.text)
}

/// The most labels of any name in [`SINKS`] (checked by a test).
const SINK_MAX_LABELS: usize = 3;

static SINK_SET: std::sync::OnceLock<DomainSet> = std::sync::OnceLock::new();

/// Whether `host` is on shared hosting: under a built-in sink or an `extra_domains` entry.
pub fn is_shared_hosting(host: &HostName, extra: &DomainSet) -> bool {
    classify(host, extra).is_some()
}

/// For lint: the pattern's base name is shared hosting (this covers `*.github.io`, whose
/// base is itself a private-section suffix), or a subtree pattern lies under an `extra`
/// subtree entry.
pub fn pattern_is_shared_hosting(p: &DomainPattern, extra: &DomainSet) -> bool {
    is_shared_hosting(p.base(), extra)
        || matches!(p, DomainPattern::Subtree(b) if extra.subtrees_at_or_above(b).next().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::DomainEntry;

    fn extra(list: &[&str]) -> DomainSet {
        DomainSet::from_entries(
            list.iter()
                .map(|s| DomainEntry::parse(s).unwrap())
                .collect(),
        )
    }

    #[test]
    fn shared_hosting_names() {
        let extra = extra(&["paste.example.com", "*.bins.example.net"]);
        #[rustfmt::skip]
        let cases: &[(&str, &str, bool)] = &[
            ("private_suffix_below",     "me.github.io",           true),
            ("private_suffix_itself",    "github.io",              true),
            ("private_suffix_deep",      "a.b.blogspot.com",       true),
            ("sink_apex",                "webhook.site",           true),
            ("sink_below",               "abc.ngrok-free.app",     true),
            ("sink_label_boundary",      "notwebhook.site",        false),
            ("extra_exact",              "paste.example.com",      true),
            ("extra_subtree",            "x.bins.example.net",     true),
            ("extra_subtree_not_apex",   "bins.example.net",       false),
            ("ordinary_name",            "api.example.com",        false),
            ("icann_suffix_only",        "example.co.uk",          false),
        ];
        for (rule, host, want) in cases {
            let host = HostName::parse(host).unwrap();
            assert_eq!(is_shared_hosting(&host, &extra), *want, "{rule}");
        }
    }

    #[test]
    fn sink_max_labels_covers_the_list() {
        let most = SINKS.iter().map(|s| s.split('.').count()).max().unwrap();
        assert!(most <= SINK_MAX_LABELS, "raise SINK_MAX_LABELS to {most}");
    }

    #[test]
    fn shared_hosting_patterns() {
        let extra = extra(&["*.bins.example.net"]);
        #[rustfmt::skip]
        let cases: &[(&str, &str, bool)] = &[
            ("wildcard_over_private_suffix", "*.github.io",         true),
            ("exact_under_private_suffix",   "me.github.io",        true),
            ("wildcard_over_sink",           "*.ngrok.io",          true),
            ("wildcard_under_extra",         "*.a.bins.example.net", true),
            ("wildcard_equal_extra",         "*.bins.example.net",  true),
            ("ordinary_wildcard",            "*.example.com",       false),
        ];
        for (rule, pattern, want) in cases {
            let e = DomainEntry::parse(pattern).unwrap();
            assert_eq!(
                pattern_is_shared_hosting(&e.pattern, &extra),
                *want,
                "{rule}"
            );
        }
    }
}
