//! Each command's arguments validated into its configuration before any file is read
//! or socket bound: a value out of range is an error that names the flag, never clamped.
//! This is the one place that reads the `cli` types; every module below takes the
//! configuration built here (docs/reference/command-line.md is the interface).

use std::time::Duration;

use crate::load::LoadError;

mod check;
mod run;
mod serve;

pub use check::CheckConfig;
pub use run::{InitConfig, RulesConfig, RunConfig};
pub use serve::{AdminConfig, CaSource, ServeConfig, SessionStoreConfig};

/// Why the flags do not make a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{flag} {message}")]
    Flag { flag: &'static str, message: String },
    #[error("{0}")]
    Pin(#[from] LoadError),
}

fn flag(flag: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Flag {
        flag,
        message: message.into(),
    }
}

/// A positive, finite number of seconds.
fn seconds(name: &'static str, secs: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| flag(name, "must be a positive number of seconds"))
}

/// A count of at least `min`.
fn at_least(name: &'static str, value: usize, min: usize) -> Result<usize, ConfigError> {
    if value < min {
        return Err(flag(name, format!("must be at least {min} (got {value})")));
    }
    Ok(value)
}
