//! Each command's arguments validated into its configuration before any file is read
//! or socket bound: a value out of range is an error that names the flag, never clamped.
//! This is the one place that reads the `cli` types; every module below takes the
//! configuration built here (docs/reference/command-line.md is the interface).

use std::time::Duration;

use crate::load::LoadError;

pub mod check;
pub mod probe;
mod run;
mod serve;
mod watch;

pub use check::CheckConfig;
pub use probe::ProbeConfig;
pub use run::{
    InitConfig, Ports, RulesConfig, RunConfig, DNS_PORT, PROXY_PORT, SOCKS_PORT, TRANSPARENT_PORT,
};
pub use serve::{AdminConfig, CaSource, ServeConfig, SessionStoreConfig};
pub use watch::{AdminTarget, ApproveConfig, TokenSource, WatchConfig, TOKEN_ENV};

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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`.
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The command line is a leaf and only `main` and `config` read it
    /// (docs/ARCHITECTURE.md, the layers): a `use crate::` in `cli/`, or a `cli::` type
    /// taken by any other module, fails here.
    #[test]
    fn cli_imports_nothing_and_only_config_and_main_read_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        assert!(files.len() > 50, "found the sources: {files:?}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            let rel = file.strip_prefix(&src).expect("under src");
            if rel.starts_with("cli") {
                assert!(
                    !text.contains("crate::"),
                    "{} imports the crate",
                    rel.display()
                );
            } else if !rel.starts_with("config") && rel != Path::new("main.rs") {
                assert!(
                    !text.contains("cli::"),
                    "{} reads a command-line type",
                    rel.display()
                );
            }
        }
    }
}
