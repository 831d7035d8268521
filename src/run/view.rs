//! CMD's view of the filesystem as `run` asks for it (docs/reference/confinement.md,
//! "Files"): from its flags, the policy and the user CMD runs as, the arguments that
//! tell the jail's init what to build ([`super::places`], [`super::covers`],
//! [`super::home`], [`super::later`]), and what `run` checks once CMD has exited.

use std::ffi::OsString;
use std::path::PathBuf;

use super::covers::{self, Inputs};
use super::places::{self, Writable};
use super::{home, later};
use crate::config::RunConfig;
use crate::policy::OrgPolicy;

/// The view `run` asks the jail's init for.
pub(super) struct JailView {
    /// `__jail-init`'s arguments for it.
    pub init_args: Vec<OsString>,
    pub writable: Writable,
    /// The files that run later, as they were before CMD started.
    pub later: Later,
}

/// The files that run later in the writable places, before CMD ran.
pub(super) struct Later {
    places: Vec<PathBuf>,
    exact: Vec<PathBuf>,
    before: Vec<(PathBuf, &'static str)>,
}

impl Later {
    /// One line for each that CMD created, for `run`'s standard error.
    pub(super) fn created(&self) -> Vec<String> {
        later::report(&self.before, &later::existing(&self.places, &self.exact))
    }
}

/// The view for `args`, CMD running as `uid`; an error says which flag or file stops it.
pub(super) fn jail_view(args: &RunConfig, org: &OrgPolicy, uid: u32) -> Result<JailView, String> {
    let start = std::env::current_dir().map_err(|e| format!("the starting directory: {e}"))?;
    let writable = places::writable(&start, &args.writable)?;
    let start = places::canonical(&start).map_err(|e| format!("the starting directory: {e}"))?;
    let exe = std::fs::canonicalize("/proc/self/exe")
        .map_err(|e| format!("the proxy's own executable (/proc/self/exe): {e}"))?;
    let homes = home::homes(uid);
    let hidden = home::hidden(&homes, &args.hide, &args.show)?;
    let exact: Vec<PathBuf> = args
        .writable_exact
        .iter()
        .map(|p| places::absolute(p))
        .collect();
    // The starting directory (unless it is `/`) and each `--writable` place.
    let later_places = writable.places.clone();
    let before = later::existing(&later_places, &exact);
    let later_paths: Vec<PathBuf> = before.iter().map(|(p, _)| p.clone()).collect();
    let proxy_files = places::proxy_files(args, org);
    let plan = covers::plan(&Inputs {
        start: &start,
        writable: &writable,
        homes: &homes,
        hidden: &hidden,
        proxy_files: &proxy_files,
        exe: &exe,
        later: &later_paths,
    })?;
    let mut init_args = Vec::new();
    for place in &writable.places {
        init_args.extend(["--writable".into(), place.into()]);
    }
    for place in &writable.own {
        init_args.extend(["--fresh".into(), place.into()]);
    }
    init_args.extend(plan.init_args());
    Ok(JailView {
        init_args,
        writable,
        later: Later {
            places: later_places,
            exact,
            before,
        },
    })
}
