//! `probe` (docs/guides/probe.md, docs/reference/command-line.md "probe"): run inside a
//! sandbox, it tries every way out that code there could try, each with the least
//! traffic that shows the channel open, and reports each `open`, `closed` or `unknown`
//! with its evidence. It sends no data of the sandbox's: TCP handshakes with a
//! ClientHello or a `GET /` naming a random host under `invalid.`, DNS queries for such
//! names, one QUIC Initial, one ICMP echo, Unix-socket connects.
//!
//! - [`checks`]: the table of checks and their order;
//! - `tcp`: TCP handshakes and what comes back, this proxy's refusals told apart;
//! - `dns`: the queries to the system resolver and to the target;
//! - `datagram`: QUIC and ICMP;
//! - `web`: HTTP through the proxy variables, and TLS handshakes (DoH);
//! - `proxy_env`: the proxy variables, with a session's credentials;
//! - `unix`: daemon sockets;
//! - [`format`](mod@format): table, JSON and SARIF.

pub mod checks;
mod datagram;
mod dns;
pub mod format;
mod proxy_env;
mod reply;
mod tcp;
mod unix;
mod web;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::probe::Format;
use crate::config::ProbeConfig;

/// What a check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Closed,
    Unknown,
    Open,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Closed => "closed",
            Verdict::Unknown => "unknown",
            Verdict::Open => "open",
        }
    }
}

/// One attempt of a check (a port, an address, a route), with its evidence.
#[derive(Debug, Clone)]
pub struct Part {
    pub verdict: Verdict,
    pub evidence: String,
}

impl Part {
    pub fn new(verdict: Verdict, evidence: impl Into<String>) -> Part {
        Part {
            verdict,
            evidence: evidence.into(),
        }
    }
    pub fn closed(evidence: impl Into<String>) -> Part {
        Part::new(Verdict::Closed, evidence)
    }
    pub fn open(evidence: impl Into<String>) -> Part {
        Part::new(Verdict::Open, evidence)
    }
    pub fn unknown(evidence: impl Into<String>) -> Part {
        Part::new(Verdict::Unknown, evidence)
    }
}

/// A check's result: open when any of its parts is, else unknown when any part could
/// not tell, else closed.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub id: &'static str,
    pub result: Verdict,
    pub evidence: String,
    pub ms: u64,
}

impl Outcome {
    pub fn of(id: &'static str, parts: Vec<Part>, ms: u64) -> Outcome {
        let result = parts
            .iter()
            .map(|p| p.verdict)
            .max()
            .unwrap_or(Verdict::Unknown);
        let evidence = match parts.is_empty() {
            true => "nothing was tried".to_string(),
            false => parts
                .iter()
                .map(|p| p.evidence.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        };
        Outcome {
            id,
            result,
            evidence,
            ms,
        }
    }

    /// Whether this result counts against the sandbox: an open channel, or (for
    /// `proxy-allows`, where `open` is what the operator wants) a URL not reached.
    pub fn fails(&self) -> bool {
        match self.id {
            checks::PROXY_ALLOWS => self.result == Verdict::Closed,
            _ => self.result == Verdict::Open,
        }
    }
}

/// The probe's whole finding.
#[derive(Debug, Clone)]
pub struct Report {
    pub checks: Vec<Outcome>,
    /// `--expect`: ids whose failure does not count.
    pub expected: BTreeSet<String>,
    pub ms: u64,
}

impl Report {
    /// The checks that count against the sandbox, `--expect` aside.
    pub fn failing(&self) -> Vec<&Outcome> {
        self.checks
            .iter()
            .filter(|c| c.fails() && !self.expected.contains(c.id))
            .collect()
    }
}

/// Why the probe itself could not run (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("--expect {path}: {message}")]
    Expect { path: String, message: String },
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

/// The ids of an `--expect` file: one a line, `#` starting a comment; an id that names
/// no check is an error (a typo would silently expect nothing).
pub fn read_expect(path: &std::path::Path) -> Result<BTreeSet<String>, ProbeError> {
    let fail = |message: String| ProbeError::Expect {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let mut ids = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let id = line.split('#').next().unwrap_or("").trim();
        if id.is_empty() {
            continue;
        }
        if !checks::IDS.contains(&id) {
            return Err(fail(format!("line {}: {id:?} is not a check id", n + 1)));
        }
        ids.insert(id.to_string());
    }
    Ok(ids)
}

/// Run every check and render the report in the configured format: the text and
/// whether anything counts against the sandbox (exit 1).
pub fn run(config: &ProbeConfig) -> Result<(String, bool), ProbeError> {
    let expected = match &config.expect {
        Some(path) => read_expect(path)?,
        None => BTreeSet::new(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ProbeError::Runtime)?;
    let started = Instant::now();
    let checks = runtime.block_on(checks::all(config, whole_limit(config.timeout)));
    let report = Report {
        checks,
        expected,
        ms: millis(started.elapsed()),
    };
    let text = match config.format {
        Format::Table => format::table(&report),
        Format::Json => format::json(&report),
        Format::Sarif => format::sarif(&report),
    };
    Ok((text, !report.failing().is_empty()))
}

/// The whole probe's bound: 10 s, or longer when one check may take longer.
fn whole_limit(timeout: Duration) -> Duration {
    Duration::from_secs(10).max(timeout + Duration::from_secs(2))
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A random name of 16 letters under `invalid.`, which no resolver may answer and no
/// server owns (RFC 6761).
pub(crate) fn random_name() -> String {
    let mut bytes = [0u8; 16];
    // Without randomness the name is still under `invalid.`: only its uniqueness is lost.
    let _ = getrandom::fill(&mut bytes);
    let letters: String = bytes.iter().map(|b| char::from(b'a' + b % 26)).collect();
    format!("{letters}.invalid")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(id: &'static str, result: Verdict) -> Outcome {
        Outcome::of(id, vec![Part::new(result, "e")], 1)
    }

    #[test]
    fn a_check_is_open_when_any_part_is_and_unknown_before_closed() {
        let parts = |vs: &[Verdict]| vs.iter().map(|v| Part::new(*v, "e")).collect();
        let of = |vs: &[Verdict]| Outcome::of(checks::DOT, parts(vs), 0).result;
        assert_eq!(of(&[Verdict::Closed, Verdict::Open]), Verdict::Open);
        assert_eq!(of(&[Verdict::Closed, Verdict::Unknown]), Verdict::Unknown);
        assert_eq!(of(&[Verdict::Closed, Verdict::Closed]), Verdict::Closed);
        assert_eq!(of(&[]), Verdict::Unknown);
    }

    #[test]
    fn reach_fails_when_closed_and_every_other_check_when_open() {
        let report = |checks, expected: &[&str]| Report {
            checks,
            expected: expected.iter().map(|s| s.to_string()).collect(),
            ms: 0,
        };
        let r = report(
            vec![
                outcome(checks::PROXY_ALLOWS, Verdict::Open),
                outcome(checks::QUIC, Verdict::Unknown),
                outcome(checks::DOT, Verdict::Closed),
            ],
            &[],
        );
        assert!(r.failing().is_empty());
        let r = report(
            vec![
                outcome(checks::PROXY_ALLOWS, Verdict::Closed),
                outcome(checks::QUIC, Verdict::Open),
            ],
            &[checks::QUIC],
        );
        let failing: Vec<&str> = r.failing().iter().map(|c| c.id).collect();
        assert_eq!(failing, vec![checks::PROXY_ALLOWS]);
    }

    #[test]
    fn expect_files_take_ids_and_comments_and_refuse_typos() {
        let dir = std::env::temp_dir().join(format!("probe-expect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("expect");
        std::fs::write(&path, "# open on purpose\nquic   # the mirror\n\n  icmp\n").unwrap();
        let ids: Vec<String> = read_expect(&path).unwrap().into_iter().collect();
        assert_eq!(ids, vec!["icmp".to_string(), "quic".to_string()]);
        std::fs::write(&path, "quick\n").unwrap();
        let e = read_expect(&path).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("quick"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_random_name_is_letters_under_invalid() {
        let name = random_name();
        let (label, tld) = name.split_once('.').unwrap();
        assert_eq!(tld, "invalid");
        assert_eq!(label.len(), 16);
        assert!(label.bytes().all(|b| b.is_ascii_lowercase()));
        assert_ne!(random_name(), name);
    }
}
