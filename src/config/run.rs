//! `run`'s, `rules`' and `__jail-init`'s arguments as their configurations. `run`'s
//! [`ServeConfig`] is built here directly: the groups it shares with `serve`, and
//! `serve`'s defaults for every flag `run` does not have.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::{flag, ConfigError, ServeConfig};
use crate::cli::{self, JailInitArgs, RulesArgs, RunArgs};
use crate::dlp::Kind;

/// The jail's transparent and DNS ports: `rules`' defaults, declared with its flags.
pub use crate::cli::{DNS_PORT, TRANSPARENT_PORT};

/// The explicit proxy's port in the jail (127.0.0.1), named by CMD's proxy variables.
pub const PROXY_PORT: u16 = 3128;

/// The SOCKS5 listener's port in the jail (127.0.0.1), named by CMD's `ALL_PROXY`
/// (docs/reference/socks5.md, "In `run`").
pub const SOCKS_PORT: u16 = 1080;

/// Where the jail's redirected traffic goes: the transparent listener's port (every
/// redirected TCP connection) and the DNS listener's (every query to port 53), both on
/// 127.0.0.1. `rules --transparent-port` and `--dns-port` set them for a sidecar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    pub transparent: u16,
    pub dns: u16,
}

impl Default for Ports {
    fn default() -> Ports {
        Ports {
            transparent: cli::TRANSPARENT_PORT,
            dns: cli::DNS_PORT,
        }
    }
}

/// Everything `run` runs with, validated as far as it can be without the jail.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The proxy serving CMD: the explicit proxy on `127.0.0.1:3128` and SOCKS5 on
    /// `127.0.0.1:1080`, no admin API. Its `ca` is `None` here: `run` reads or makes its
    /// CA once the policies are loaded.
    pub serve: ServeConfig,
    /// `--ca`: the interception CA's directory, if given.
    pub ca: Option<PathBuf>,
    /// `--user`, looked up by `run` (names need the user database).
    pub user: Option<String>,
    pub env_only: bool,
    /// `--seccomp-log`: the system call filter logs rather than refuses.
    pub seccomp_log: bool,
    /// `--writable`, as given; `run` makes them canonical.
    pub writable: Vec<PathBuf>,
    /// `--allow-unix`, as given; `run` checks each.
    pub allow_unix: Vec<PathBuf>,
    /// `--canary`: the variables to plant a canary in, and each one's kind.
    pub canaries: Vec<(String, Kind)>,
    /// `--writable-exact`, `--hide` and `--show`, as given.
    pub writable_exact: Vec<PathBuf>,
    pub hide: Vec<PathBuf>,
    pub show: Vec<PathBuf>,
    /// CMD and its arguments.
    pub command: Vec<OsString>,
}

impl RunConfig {
    pub fn from_args(args: RunArgs) -> Result<RunConfig, ConfigError> {
        let RunArgs {
            policy,
            audit,
            dns,
            user,
            env_only,
            seccomp_log,
            tls,
            parent,
            writable,
            allow_unix,
            canary,
            writable_exact,
            hide,
            show,
            command,
        } = args;
        let canaries = canary_vars(&canary)?;
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, PROXY_PORT));
        let mut serve = ServeConfig::shared(listen, policy, audit, dns, &cli::Limits::default())?;
        serve.upstream_ca = tls.upstream_ca;
        serve.parent = super::serve::parent_config(parent)?;
        // What CMD's `ALL_PROXY` names: bound by `serve` with `--env-only`, in the jail's
        // namespace otherwise (as the explicit proxy's is).
        serve.socks_listen = Some(SocketAddr::from((Ipv4Addr::LOCALHOST, SOCKS_PORT)));
        Ok(RunConfig {
            serve,
            ca: tls.ca,
            user,
            env_only,
            seccomp_log,
            writable,
            allow_unix,
            canaries,
            writable_exact,
            hide,
            show,
            command,
        })
    }
}

/// `--canary VAR=KIND`: a variable name (letters, digits, `_`, not a digit first), each
/// once, and a kind the proxy mints.
fn canary_vars(values: &[String]) -> Result<Vec<(String, Kind)>, ConfigError> {
    let mut vars: Vec<(String, Kind)> = Vec::with_capacity(values.len());
    for value in values {
        let bad = |why: String| flag("--canary", format!("{value}: {why}"));
        let (var, kind) = value
            .split_once('=')
            .ok_or_else(|| bad("write VAR=KIND".into()))?;
        let name_ok = var.bytes().next().is_some_and(|b| !b.is_ascii_digit())
            && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !name_ok {
            return Err(bad(format!("`{var}` is not an environment variable name")));
        }
        if vars.iter().any(|(v, _)| v == var) {
            return Err(bad(format!("{var} is given twice")));
        }
        vars.push((var.to_string(), Kind::parse(kind).map_err(bad)?));
    }
    Ok(vars)
}

/// `egress-proxy rules`: the proxy's uid and where its listeners are.
#[derive(Debug, Clone, Copy)]
pub struct RulesConfig {
    pub proxy_uid: u32,
    pub ports: Ports,
    /// `--apply`: apply the ruleset to this network namespace rather than print it.
    pub apply: bool,
}

impl From<RulesArgs> for RulesConfig {
    fn from(args: RulesArgs) -> RulesConfig {
        RulesConfig {
            proxy_uid: args.proxy_uid,
            ports: Ports {
                transparent: args.transparent_port,
                dns: args.dns_port,
            },
            apply: args.apply,
        }
    }
}

/// `__jail-init`'s arguments (written by `run`, so parsing them is all the checking).
#[derive(Debug, Clone)]
pub struct InitConfig {
    /// CMD's uid.
    pub uid: u32,
    /// CMD's gid (and only group).
    pub gid: u32,
    /// `run --env-only`: switch to CMD's user and supervise it, nothing else.
    pub env_only: bool,
    /// `run --seccomp-log`: the system call filter logs rather than refuses.
    pub seccomp_log: bool,
    /// Covered in CMD's view by an empty read-only file or directory (absolute).
    pub cover: Vec<PathBuf>,
    /// Bound read-only on itself in CMD's view (absolute).
    pub read_only: Vec<PathBuf>,
    /// The temporary places that are the jail's own (fresh tmpfs).
    pub fresh: Vec<PathBuf>,
    /// The places CMD may write (absolute, canonical); `/` for everywhere.
    pub writable: Vec<PathBuf>,
    /// Descriptor 3 is `run`'s connect supervisor (docs/reference/confinement.md, "Unix
    /// sockets").
    pub supervised: bool,
    /// CMD and its arguments.
    pub command: Vec<OsString>,
}

impl From<JailInitArgs> for InitConfig {
    fn from(args: JailInitArgs) -> InitConfig {
        InitConfig {
            uid: args.uid,
            gid: args.gid,
            env_only: args.env_only,
            seccomp_log: args.seccomp_log,
            cover: args.cover,
            read_only: args.read_only,
            fresh: args.fresh,
            writable: args.writable,
            supervised: args.supervised,
            command: args.command,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(argv: &[&str]) -> Command {
        Cli::try_parse_from(argv).expect("parses").command
    }

    #[test]
    fn run_serves_with_serves_defaults_but_its_own_listeners() {
        let Command::Serve(serve) = parse(&["egress-proxy", "serve"]) else {
            unreachable!()
        };
        let serve = ServeConfig::from_args(*serve).unwrap();
        let Command::Run(run) = parse(&["egress-proxy", "run", "--", "true"]) else {
            unreachable!()
        };
        let run = RunConfig::from_args(*run).unwrap();
        let mut expected = serve;
        expected.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, PROXY_PORT));
        expected.socks_listen = Some(SocketAddr::from((Ipv4Addr::LOCALHOST, SOCKS_PORT)));
        assert_eq!(format!("{:?}", run.serve), format!("{expected:?}"));
    }

    #[test]
    fn runs_shared_flags_reach_its_serve_config() {
        let Command::Run(run) = parse(&[
            "egress-proxy",
            "run",
            "--org",
            "o.toml",
            "--policy",
            "p.json",
            "--audit-log",
            "a.jsonl",
            "--audit-allowed",
            "--resolve",
            "a.test=127.0.0.1",
            "--dns-server",
            "127.0.0.1:53",
            "--ca",
            "ca",
            "--upstream-ca",
            "roots.pem",
            "--",
            "true",
        ]) else {
            unreachable!()
        };
        let run = RunConfig::from_args(*run).unwrap();
        let s = &run.serve;
        assert_eq!(s.org, PathBuf::from("o.toml"));
        assert_eq!(s.policy, Some(PathBuf::from("p.json")));
        assert_eq!((s.audit_log.as_str(), s.audit_allowed), ("a.jsonl", true));
        assert_eq!(
            s.pins["a.test"],
            vec![std::net::IpAddr::from([127, 0, 0, 1])]
        );
        assert_eq!(s.dns_server, Some(SocketAddr::from(([127, 0, 0, 1], 53))));
        assert_eq!(s.upstream_ca, Some(PathBuf::from("roots.pem")));
        assert!(s.ca.is_none() && s.admin.is_none());
        assert_eq!(run.ca, Some(PathBuf::from("ca")));
    }

    #[test]
    fn rules_defaults_are_the_jails_ports() {
        let Command::Rules(rules) = parse(&["egress-proxy", "rules", "--proxy-uid", "7"]) else {
            unreachable!()
        };
        let rules = RulesConfig::from(rules);
        assert_eq!(rules.ports, Ports::default());
        assert!(!rules.apply, "printing is the default");
        let Command::Rules(apply) =
            parse(&["egress-proxy", "rules", "--proxy-uid", "7", "--apply"])
        else {
            unreachable!()
        };
        assert!(RulesConfig::from(apply).apply);
    }
}
