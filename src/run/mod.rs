//! `egress-proxy run`: CMD in a network whose only way out is the proxy, and `rules`, the
//! same confinement for a pod. docs/guides/confinement.md is the guide.
//!
//! `run` validates its flags, picks CMD's user, blocks the signals it passes on, then
//! makes the jail (`jail`: a network namespace holding only loopback, the ruleset, the
//! proxy's listening sockets bound in it). The proxy serves those sockets from the host's
//! namespace (it dials upstream from there). Once it serves, the jail's first process
//! (`init`) starts in a PID namespace inside, confines itself further and runs CMD, in a
//! session of its own with 0, 1 and 2 only (`session`); when `run`'s standard input is a
//! terminal, CMD gets a pseudo-terminal of its own that `run` relays (`pty`).
//! When CMD exits, serving stops, the audit log is flushed, and `run` exits with CMD's
//! status.

pub mod rules;

#[cfg(target_os = "linux")]
mod binds;
#[cfg(target_os = "linux")]
mod covers;
#[cfg(target_os = "linux")]
mod devices;
#[cfg(target_os = "linux")]
mod env;
#[cfg(target_os = "linux")]
mod home;
#[cfg(target_os = "linux")]
mod init;
#[cfg(target_os = "linux")]
mod jail;
#[cfg(target_os = "linux")]
mod later;
#[cfg(target_os = "linux")]
mod launch;
#[cfg(target_os = "linux")]
mod mount_attr;
#[cfg(target_os = "linux")]
mod mounts;
#[cfg(target_os = "linux")]
mod places;
#[cfg(target_os = "linux")]
mod pty;
#[cfg(target_os = "linux")]
mod seccomp;
#[cfg(target_os = "linux")]
mod session;
#[cfg(target_os = "linux")]
mod signals;
mod trust;
#[cfg(target_os = "linux")]
mod unix;
mod view;

use crate::config::{InitConfig, RulesConfig, RunConfig};

/// `egress-proxy rules`: the sidecar ruleset for these flags.
pub fn rules(config: &RulesConfig) -> String {
    rules::sidecar(config.proxy_uid, config.ports)
}

/// `egress-proxy rules --apply`: the same ruleset, applied to this network namespace in
/// one transaction; the error says what is missing, and nothing was changed.
pub fn apply_rules(config: &RulesConfig) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        rules::apply(&rules::sidecar_ruleset(config.proxy_uid, config.ports))
            .map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = config;
        Err("rules --apply needs Linux (nftables)".into())
    }
}

/// `egress-proxy run`: CMD's status (128+N for a signal N), 125 for `run`'s own errors
/// (the message is printed), 126 when CMD cannot be executed, 127 when it is not found.
pub fn main(args: RunConfig) -> u8 {
    #[cfg(target_os = "linux")]
    {
        launch::main(args)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = args;
        eprintln!("egress-proxy: run: error: run needs Linux (network namespaces)");
        125
    }
}

/// `__jail-init`, the jail's first process (started by `run` only).
pub fn init_main(args: InitConfig) -> u8 {
    #[cfg(target_os = "linux")]
    {
        init::main(args)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = args;
        125
    }
}
