//! `check`'s arguments as a [`CheckConfig`]: the pins parsed and the method checked
//! before any policy is read.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use super::{flag, ConfigError};
use crate::cli::{CheckArgs, CheckFormat};
use crate::load;
use crate::policy::rules::valid_method;

/// How `check` prints its results (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Everything `check` decides with, validated.
#[derive(Debug, Clone)]
pub struct CheckConfig {
    pub org: PathBuf,
    pub policy: Option<PathBuf>,
    pub format: Format,
    pub explain: bool,
    /// `--method`: an upper-case method name.
    pub method: Option<String>,
    /// `--resolve`: the only addresses `check` knows of names.
    pub pins: HashMap<String, Vec<IpAddr>>,
    pub targets: Vec<String>,
}

impl CheckConfig {
    pub fn from_args(args: CheckArgs) -> Result<CheckConfig, ConfigError> {
        if let Some(m) = args.method.as_deref().filter(|m| !valid_method(m)) {
            return Err(flag(
                "--method",
                format!("{m:?}: a method is an upper-case name such as GET or POST"),
            ));
        }
        Ok(CheckConfig {
            org: args.policy.org.path,
            policy: args.policy.policy,
            format: match args.format {
                CheckFormat::Text => Format::Text,
                CheckFormat::Json => Format::Json,
            },
            explain: args.explain,
            method: args.method,
            pins: load::pins(&args.pins.resolve)?,
            targets: args.targets,
        })
    }
}
