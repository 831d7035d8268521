//! The pure policy core: no tokio, no hyper, no I/O.
//!
//! Text goes in (organization TOML, request policy JSON, a request's host and port), and
//! compiled policies and [`decide::Decision`]s come out.

pub mod address;
