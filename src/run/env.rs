//! What CMD gets from `run`: its environment, and the user it runs as.

use std::ffi::{OsStr, OsString};

use crate::dlp::{Canary, Kind};

/// The explicit proxy's address as CMD's HTTP proxy variables name it.
pub(super) const PROXY_URL: &str = "http://127.0.0.1:3128";

/// The SOCKS5 listener's address as `ALL_PROXY` names it: `socks5h`, so that the client
/// sends the name and the proxy judges it (docs/reference/socks5.md, "In `run`").
pub(super) const SOCKS_URL: &str = "socks5h://127.0.0.1:1080";

/// The variables set to [`PROXY_URL`].
const HTTP_VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];

/// The variables set to [`SOCKS_URL`]: what tools that know no HTTP proxy read.
const ALL_VARS: [&str; 2] = ["ALL_PROXY", "all_proxy"];

/// CMD's environment: `run`'s own, with the HTTP proxy variables pointing at the explicit
/// proxy and `ALL_PROXY`/`all_proxy` at SOCKS5, `NO_PROXY`/`no_proxy` removed (nothing
/// bypasses either), and `NODE_USE_ENV_PROXY=1` (Node.js reads the proxy variables only
/// with it).
pub(super) fn command_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let replaced = |name: &OsStr| {
        HTTP_VARS.iter().chain(&ALL_VARS).any(|v| name == *v)
            || name == "NO_PROXY"
            || name == "no_proxy"
            || name == "NODE_USE_ENV_PROXY"
    };
    let mut env: Vec<(OsString, OsString)> = inherited
        .into_iter()
        .filter(|(name, _)| !replaced(name))
        .collect();
    for name in HTTP_VARS {
        env.push((name.into(), PROXY_URL.into()));
    }
    for name in ALL_VARS {
        env.push((name.into(), SOCKS_URL.into()));
    }
    env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    env
}

/// Environment variables, as CMD gets them.
pub(super) type Vars = Vec<(OsString, OsString)>;

/// `run --canary VAR=KIND` (docs/reference/dlp.md): a fresh value of each kind, as the
/// variable CMD gets (replacing one it would have inherited) and as the canary the proxy
/// looks for, with the id `run:VAR`.
pub(super) fn canaries(asked: &[(String, Kind)]) -> Result<(Vars, Vec<Canary>), String> {
    let mut vars = Vec::with_capacity(asked.len());
    let mut canaries = Vec::with_capacity(asked.len());
    for (var, kind) in asked {
        let value = kind
            .mint()
            .map_err(|e| format!("--canary {var}: cannot draw random bytes: {e}"))?;
        canaries.push(Canary::new(
            &format!("run:{var}"),
            kind.as_str(),
            value.clone().into_bytes(),
        ));
        vars.push((OsString::from(var), OsString::from(value)));
    }
    Ok((vars, canaries))
}

/// A uid and primary gid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// Why `--user` or `SUDO_UID`/`SUDO_GID` do not name a user.
#[derive(Debug, thiserror::Error)]
pub(super) enum UserError {
    #[error("--user {0}: no such user")]
    NoUser(String),
    #[error("--user {0}: no such group")]
    NoGroup(String),
    #[error("cannot read the user database: {0}")]
    Lookup(nix::Error),
    #[error("{name}={value} is not a number")]
    Sudo { name: &'static str, value: String },
}

/// Who CMD runs as: `--user NAME[:GROUP]` (that user's uid and primary gid, or GROUP;
/// numbers accepted), else `SUDO_UID`/`SUDO_GID` when `run` was started through sudo,
/// else the caller.
pub(super) fn command_ids(
    user: Option<&str>,
    sudo: (Option<String>, Option<String>),
) -> Result<Ids, UserError> {
    use nix::unistd::{getgid, getuid, Group, User};
    if let Some(spec) = user {
        let (name, group) = match spec.split_once(':') {
            Some((name, group)) => (name, Some(group)),
            None => (spec, None),
        };
        let found = User::from_name(name).map_err(UserError::Lookup)?;
        let (uid, primary) = match (found, name.parse::<u32>()) {
            (Some(u), _) => (u.uid.as_raw(), u.gid.as_raw()),
            (None, Ok(uid)) => {
                let u = User::from_uid(uid.into()).map_err(UserError::Lookup)?;
                (uid, u.map_or(uid, |u| u.gid.as_raw()))
            }
            (None, Err(_)) => return Err(UserError::NoUser(spec.to_string())),
        };
        let gid = match group {
            None => primary,
            Some(group) => match Group::from_name(group).map_err(UserError::Lookup)? {
                Some(g) => g.gid.as_raw(),
                None => group
                    .parse()
                    .map_err(|_| UserError::NoGroup(spec.to_string()))?,
            },
        };
        return Ok(Ids { uid, gid });
    }
    let number = |name: &'static str, value: String| {
        value
            .parse::<u32>()
            .map_err(|_| UserError::Sudo { name, value })
    };
    match sudo {
        (Some(uid), gid) => {
            let uid = number("SUDO_UID", uid)?;
            let gid = match gid {
                Some(gid) => number("SUDO_GID", gid)?,
                None => uid,
            };
            Ok(Ids { uid, gid })
        }
        (None, _) => Ok(Ids {
            uid: getuid().as_raw(),
            gid: getgid().as_raw(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn the_proxy_variables_name_the_explicit_proxy_and_socks5_and_nothing_bypasses_them() {
        let out = command_env(env(&[
            ("PATH", "/bin"),
            ("NO_PROXY", "*"),
            ("no_proxy", "example.com"),
            ("https_proxy", "http://elsewhere:1"),
            ("ALL_PROXY", "socks5://elsewhere:1"),
            ("NODE_USE_ENV_PROXY", "0"),
        ]));
        let get = |name: &str| {
            let all: Vec<_> = out.iter().filter(|(k, _)| k == name).collect();
            assert!(all.len() <= 1, "{name} set twice: {out:?}");
            all.first().map(|(_, v)| v.to_str().unwrap().to_string())
        };
        for name in HTTP_VARS {
            assert_eq!(get(name).as_deref(), Some(PROXY_URL), "{name}");
        }
        for name in ALL_VARS {
            assert_eq!(get(name).as_deref(), Some(SOCKS_URL), "{name}");
        }
        // The URLs name the ports the jail binds.
        use crate::config::{PROXY_PORT, SOCKS_PORT};
        assert_eq!(PROXY_URL, format!("http://127.0.0.1:{PROXY_PORT}"));
        assert_eq!(SOCKS_URL, format!("socks5h://127.0.0.1:{SOCKS_PORT}"));
        assert_eq!(get("NO_PROXY"), None);
        assert_eq!(get("no_proxy"), None);
        assert_eq!(get("NODE_USE_ENV_PROXY").as_deref(), Some("1"));
        assert_eq!(get("PATH").as_deref(), Some("/bin"));
    }

    #[test]
    fn the_user_is_user_flag_then_sudo_then_the_caller() {
        let root = command_ids(Some("root"), (None, None)).unwrap();
        assert_eq!(root, Ids { uid: 0, gid: 0 });
        let numeric = command_ids(Some("4321:4322"), (None, None)).unwrap();
        assert_eq!(
            numeric,
            Ids {
                uid: 4321,
                gid: 4322
            }
        );
        let flag_wins = command_ids(Some("0"), (Some("1000".into()), None)).unwrap();
        assert_eq!(flag_wins.uid, 0);
        let sudo = command_ids(None, (Some("1000".into()), Some("1001".into()))).unwrap();
        assert_eq!(
            sudo,
            Ids {
                uid: 1000,
                gid: 1001
            }
        );
        let caller = command_ids(None, (None, None)).unwrap();
        assert_eq!(caller.uid, nix::unistd::getuid().as_raw());
        assert!(command_ids(Some("no-such-user-here"), (None, None)).is_err());
        assert!(command_ids(Some("root:no-such-group-here"), (None, None)).is_err());
        assert!(command_ids(None, (Some("x".into()), None)).is_err());
    }
}
