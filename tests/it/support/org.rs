//! A builder for organization policy files (docs/reference/policy-files.md), rendered to TOML.

/// An organization policy under construction. Starts from `version = 1` and
/// nothing else, so every default of the organization file applies unless a test sets it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Org {
    mode: Option<String>,
    allowed_domains: Vec<String>,
    denied_domains: Vec<String>,
    allowed_ports: Option<Vec<u16>>,
    allowed_cidrs: Vec<String>,
    default_policy: Option<String>,
    shared_hosting_action: Option<String>,
    extra: Vec<String>,
    tunnels: Option<(Option<bool>, Option<bool>)>,
}

impl Org {
    pub(crate) fn new() -> Org {
        Org::default()
    }

    /// The usual test org: `allowed.test` on 80, 443 and `port`, loopback reachable.
    pub(crate) fn standard(port: u16) -> Org {
        Org::new()
            .allow("allowed.test")
            .ports(&[80, 443, port])
            .loopback()
    }

    pub(crate) fn allow(mut self, pattern: &str) -> Org {
        self.allowed_domains.push(quote(pattern));
        self
    }

    /// An `allowed_domains` element as inline TOML, e.g. an entry with rules:
    /// `{ host = "x.test", access = "read-only" }`.
    pub(crate) fn allow_entry(mut self, inline_toml: &str) -> Org {
        self.allowed_domains.push(inline_toml.to_string());
        self
    }

    pub(crate) fn deny(mut self, pattern: &str) -> Org {
        self.denied_domains.push(pattern.to_string());
        self
    }

    pub(crate) fn ports(mut self, ports: &[u16]) -> Org {
        self.allowed_ports = Some(ports.to_vec());
        self
    }

    pub(crate) fn cidr(mut self, cidr: &str) -> Org {
        self.allowed_cidrs.push(cidr.to_string());
        self
    }

    /// Allow `127.0.0.0/8`, where every test origin listens.
    pub(crate) fn loopback(self) -> Org {
        self.cidr("127.0.0.0/8")
    }

    /// `"enforce"` or `"report"`.
    pub(crate) fn mode(mut self, mode: &str) -> Org {
        self.mode = Some(mode.to_string());
        self
    }

    /// `default_network_policy` as an inline TOML table, e.g.
    /// `{ type = "allowlist", allowed_domains = ["allowed.test"] }`.
    pub(crate) fn default_policy(mut self, inline_toml: &str) -> Org {
        self.default_policy = Some(inline_toml.to_string());
        self
    }

    /// `[shared_hosting] action = ...`.
    pub(crate) fn shared_hosting(mut self, action: &str) -> Org {
        self.shared_hosting_action = Some(action.to_string());
        self
    }

    /// `[tunnels] require_tls = ..., require_sni = ...`; `None` leaves a key out (its
    /// default then applies: required on port 443 only).
    pub(crate) fn tunnels(mut self, require_tls: Option<bool>, require_sni: Option<bool>) -> Org {
        self.tunnels = Some((require_tls, require_sni));
        self
    }

    /// A raw top-level line, for tests of bad files.
    pub(crate) fn raw_line(mut self, line: &str) -> Org {
        self.extra.push(line.to_string());
        self
    }

    pub(crate) fn to_toml(&self) -> String {
        let mut out = String::from("version = 1\nname = \"it-org\"\n");
        if let Some(mode) = &self.mode {
            out += &format!("mode = {}\n", quote(mode));
        }
        out += &format!("allowed_domains = [{}]\n", self.allowed_domains.join(", "));
        out += &format!("denied_domains = {}\n", list(&self.denied_domains));
        if let Some(ports) = &self.allowed_ports {
            let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
            out += &format!("allowed_ports = [{}]\n", ports.join(", "));
        }
        out += &format!("allowed_cidrs = {}\n", list(&self.allowed_cidrs));
        if let Some(policy) = &self.default_policy {
            out += &format!("default_network_policy = {policy}\n");
        }
        for line in &self.extra {
            out += line;
            out += "\n";
        }
        if let Some(action) = &self.shared_hosting_action {
            out += &format!("\n[shared_hosting]\naction = {}\n", quote(action));
        }
        if let Some((tls, sni)) = self.tunnels {
            out += "\n[tunnels]\n";
            if let Some(tls) = tls {
                out += &format!("require_tls = {tls}\n");
            }
            if let Some(sni) = sni {
                out += &format!("require_sni = {sni}\n");
            }
        }
        out
    }
}

/// A request policy allowlist as JSON (docs/reference/policy-files.md).
pub(crate) fn allowlist_json(names: &[&str]) -> String {
    serde_json::json!({"type": "allowlist", "allowed_domains": names}).to_string()
}

fn quote(s: &str) -> String {
    // A JSON string is a valid TOML basic string for the ASCII the tests use.
    serde_json::Value::String(s.to_string()).to_string()
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", quoted.join(", "))
}
