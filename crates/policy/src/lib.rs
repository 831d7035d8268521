//! The pure policy core: no tokio, no hyper, no I/O.
//!
//! Text goes in (organization TOML, request policy JSON, a request's host and port), and
//! compiled policies and [`decide::Decision`]s come out.
//!
//! - [`file`](mod@file): the shapes of the files: keys, value names, defaults.
//! - [`compile`]: text -> validated [`OrgPolicy`] / [`RequestPolicy`], leniently (with
//!   each entry's position and every problem) or strictly.
//! - [`host`]: [`HostName`] (normalised once), [`DomainPattern`], [`DomainEntry`].
//! - [`cover`]: the narrowing relation, [`check_narrowing`].
//! - [`decide`](mod@decide): [`decide()`] and [`check_address`], returning a [`Decision`];
//!   [`explain()`] is the same decision with its [`Step`]s, for `check --explain`.
//! - [`verdict`]: the [`Decision`], its [`Verdict`] (carrying the [`Reason`]) and
//!   [`Level`].
//! - [`steps`]: the steps a decision records when asked to.
//! - [`names`]: [`decide_any_port`], a bare name judged for some port (the DNS
//!   listener's question).
//! - [`path`]: request paths normalised for the rules ([`NormalPath`]).
//! - [`rules`]: the `methods` / `paths` / `access` / `inspect` of an entry ([`Rules`]).
//! - [`shared_hosting`]: is this name or pattern on shared hosting.
//! - [`tls`]: the judgement of a tunnel's first bytes (TLS server name, `[tunnels]`).
//! - [`address`]: the refused address classes.
//! - [`budget`]: upload budgets: the narrowest in force, and a budget that widens.

pub mod address;
pub mod budget;
pub mod compile;
pub mod cover;
pub mod decide;
pub mod file;
pub mod host;
mod inspection;
pub mod names;
pub mod path;
mod request_rules;
pub mod rules;
pub mod shared_hosting;
pub mod steps;
pub mod tls;
pub mod verdict;

pub use budget::{upload_budget, Budget};
pub use compile::{
    Compiled, DomainSet, Mode, OrgPolicy, OrgSpans, PolicyError, Problem, ProblemKind,
    RequestPolicy, RequestSpans, SharedHostingAction, Tunnels, Widened, Written,
};
pub use cover::{check_narrowing, Widening};
pub use decide::{
    check_address, decide, decide_request, explain, explain_request, Effective, Http, Target,
};
pub use host::{DomainEntry, DomainPattern, EntryError, Host, HostError, HostName};
pub use names::decide_any_port;
pub use path::{normalize as normalize_path, NormalPath, PathError};
pub use rules::{PathRule, Rules};
pub use steps::{Match, Step};
pub use verdict::{Decision, Level, Reason, Verdict, VerdictKind};
