//! The pure policy core of egress-proxy: no tokio, no hyper, no I/O.
//!
//! Text goes in (organization TOML, request policy JSON, a request's host and port), and
//! compiled policies and [`Decision`]s come out. It is a crate of its own so that the
//! compiler keeps it pure: its `Cargo.toml` lists no runtime, socket, TLS or HTTP crate
//! (docs/development.md, "The policy core is pure"), and it has no unsafe code.
//!
//! # Public API
//!
//! What the proxy, `check`, `lint`, `diff`, the audit commands and the fuzz targets use:
//! the types and functions re-exported at the root, and the modules below for the
//! families of helpers they reach (the covering law, shared hosting, rules, the file
//! formats' key lists). Everything else is the crate's own (`unreachable_pub` says when
//! a `pub` is not reachable from here), and every public item is documented.
//!
//! # Modules
//!
//! Each imports only modules before it in this order, so there is no import circle:
//! `file`, `path`, `address`, `verdict`, `dlp`; `rules`, `host`; `compiled` (the types);
//! `interception`, `budget`, `steps`, `shared_hosting`, `request_rules`; `cover` (the
//! covering law); `compile` (the compiler, which needs the law: a
//! `default_network_policy` that widens is a problem of the file); `decide`; `names`,
//! `first_bytes`.
//!
//! - [`file`](mod@file): the shapes of the files: keys, value names, defaults.
//! - [`compiled`]: the compiled policies, [`OrgPolicy`] and [`RequestPolicy`], with the
//!   domain index ([`DomainSet`]): the types everything else reads.
//! - [`compile`]: text -> validated [`OrgPolicy`] / [`RequestPolicy`], leniently (with
//!   each entry's position and every problem) or strictly.
//! - [`host`]: [`HostName`] (normalised once), [`DomainPattern`], [`DomainEntry`].
//! - [`cover`]: the narrowing relation: [`check_narrowing`], and [`widened`], the
//!   entries of a file that widen, where they are written (for `lint`).
//! - [`decide`](mod@decide): [`decide()`] and [`check_address`], returning a [`Decision`];
//!   [`explain()`] is the same decision with its [`Step`]s, for `check --explain`.
//! - [`dlp`]: the secret detectors: built-in ([`Builtin`]) and patterns, each a bounded
//!   regex ([`Detector`]), and what a match does ([`DlpAction`]).
//! - [`verdict`]: the [`Decision`], its [`Verdict`] (carrying the [`Reason`]) and
//!   [`Level`].
//! - [`steps`]: the steps a decision records when asked to.
//! - [`names`]: [`decide_any_port`], a bare name judged for some port (the DNS
//!   listener's question).
//! - [`path`]: request paths normalised for the rules ([`NormalPath`]).
//! - [`rules`]: the `methods` / `paths` / `access` / `inspect` of an entry ([`Rules`]).
//! - `request_rules`: the entry of a level that allows a request's method and path
//!   ([`Http`]), and whether a `CONNECT` must be intercepted.
//! - [`shared_hosting`]: is this name or pattern on shared hosting.
//! - [`first_bytes`]: the judgement of a tunnel's first bytes (TLS server name,
//!   `[tunnels]`): [`judge_first_bytes`] of a [`FirstBytes`].
//! - [`address`]: the refused address classes.
//! - [`budget`]: upload budgets: the narrowest in force, and a budget that widens.
//! - `interception`: which entries make the proxy intercept
//!   ([`OrgPolicy::inspected_entries`]).

pub mod address;
pub mod budget;
pub mod compile;
pub mod compiled;
pub mod cover;
pub mod decide;
pub mod dlp;
pub mod file;
pub mod first_bytes;
pub mod host;
mod interception;
pub mod names;
pub mod path;
mod request_rules;
pub mod rules;
pub mod shared_hosting;
pub mod steps;
pub mod verdict;

pub use budget::{upload_budget, Budget};
pub use compile::{line_col, Compiled, PolicyError, Problem, ProblemKind};
pub use compiled::{
    Canaries, CredentialRule, DomainSet, Mode, OnTrip, OrgPolicy, OrgSpans, RequestPolicy,
    RequestSpans, SharedHostingAction, Tunnels, Written,
};
pub use cover::{check_narrowing, widened, Widened, Widening};
pub use decide::{
    check_address, decide, decide_request, explain, explain_request, Effective, Http, Target,
};
pub use dlp::{Builtin, Detector, Dlp, DlpAction, PatternError, MAX_MATCH};
pub use first_bytes::{judge_first_bytes, FirstBytes};
pub use host::{DomainEntry, DomainPattern, EntryError, Host, HostError, HostName};
pub use names::decide_any_port;
pub use path::{normalize as normalize_path, NormalPath, PathError};
pub use rules::{PathRule, Rules};
pub use steps::{Match, Step};
pub use verdict::{Decision, Level, Reason, Verdict, VerdictKind};
