//! `rules --apply`: send a ruleset's netlink batch (`netlink`) to the kernel's nf_tables
//! over a netlink socket of this process, so the pod's init container needs nothing but
//! this binary (no `nft`, no libnftnl; docs/guides/confinement.md, "Sidecars").
//!
//! The batch is one transaction: the kernel applies all of it or none of it. It fails
//! closed: any refusal is an error naming what was refused, and nothing was changed.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    bind, recv, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr,
    SockFlag, SockProtocol, SockType,
};
use nix::sys::time::TimeVal;

use super::netlink;
use super::Ruleset;

/// How long the kernel may take to answer the batch.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// `NLMSG_ERROR`: an acknowledgement (error 0) or a refusal.
const NLMSG_ERROR: u16 = 2;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "changing nftables needs root or CAP_NET_ADMIN in this network namespace \
         (the init container's `capabilities: add: [NET_ADMIN]`); nothing was applied"
    )]
    NotPermitted,
    #[error(
        "this kernel has no nf_tables (netfilter's nftables: CONFIG_NF_TABLES, \
         CONFIG_NFT_NAT, CONFIG_NFT_REDIR, CONFIG_NFT_CT); nothing was applied ({0})"
    )]
    NoNfTables(Errno),
    #[error("the kernel refused to {step}: {errno}; nothing was applied")]
    Refused { step: String, errno: Errno },
    #[error("the kernel did not answer within {} s; nothing is known to be applied", ANSWER_TIMEOUT.as_secs())]
    NoAnswer,
    #[error("netlink: {0}")]
    Netlink(#[from] io::Error),
}

/// Apply `ruleset` in this thread's network namespace.
pub fn apply(ruleset: &Ruleset) -> Result<(), ApplyError> {
    let io = |e: Errno| ApplyError::Netlink(e.into());
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )
    .map_err(|e| match e {
        Errno::EPROTONOSUPPORT | Errno::EAFNOSUPPORT => ApplyError::NoNfTables(e),
        e => io(e),
    })?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(io)?;
    let timeout = TimeVal::new(ANSWER_TIMEOUT.as_secs() as _, 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &timeout).map_err(io)?;
    // Sequence numbers from the clock, as nft does: answers to an earlier process's
    // batch on a reused port id are not taken for this one's.
    let seq = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs() as u32);
    let batch = netlink::batch(ruleset, seq);
    sendto(
        fd.as_raw_fd(),
        &batch.bytes,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(io)?;
    let mut waiting: Vec<u32> = batch.steps.iter().map(|s| s.0).collect();
    let mut buf = vec![0u8; 64 * 1024];
    while !waiting.is_empty() {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(|e| match e {
            Errno::EAGAIN => ApplyError::NoAnswer,
            e => io(e),
        })?;
        for (seq, errno) in answers(&buf[..n]) {
            if errno == 0 {
                waiting.retain(|s| *s != seq);
                continue;
            }
            let errno = Errno::from_raw(errno);
            return Err(refusal(&batch.steps, seq, errno));
        }
    }
    Ok(())
}

/// What a refusal means: no privilege, no nf_tables (the batch's begin refused, which
/// names no step), or one message refused.
fn refusal(steps: &[(u32, String)], seq: u32, errno: Errno) -> ApplyError {
    match errno {
        Errno::EPERM => ApplyError::NotPermitted,
        Errno::EOPNOTSUPP | Errno::EPROTONOSUPPORT | Errno::EAFNOSUPPORT => {
            ApplyError::NoNfTables(errno)
        }
        errno => match steps.iter().find(|s| s.0 == seq) {
            Some((_, step)) => ApplyError::Refused {
                step: step.clone(),
                errno,
            },
            // ENOENT for the batch's begin: nf_tables is not there to take it.
            None if errno == Errno::ENOENT => ApplyError::NoNfTables(errno),
            None => ApplyError::Refused {
                step: "start the transaction".into(),
                errno,
            },
        },
    }
}

/// The `NLMSG_ERROR` answers in one datagram: (sequence number, positive errno or 0).
fn answers(bytes: &[u8]) -> Vec<(u32, i32)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 20 <= bytes.len() {
        let word =
            |i: usize| u32::from_ne_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let len = word(at) as usize;
        let kind = u16::from_ne_bytes([bytes[at + 4], bytes[at + 5]]);
        if len < 16 || at + len > bytes.len() {
            break;
        }
        if kind == NLMSG_ERROR && len >= 36 {
            // The error, negated, then the header of the message it answers.
            let error = word(at + 16) as i32;
            let seq = word(at + 16 + 4 + 8);
            out.push((seq, -error));
        }
        at += (len + 3) & !3;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_step_or_the_missing_privilege() {
        let steps = vec![(7, "add chain nat_output".to_string())];
        assert!(matches!(
            refusal(&steps, 7, Errno::EPERM),
            ApplyError::NotPermitted
        ));
        assert!(matches!(
            refusal(&steps, 6, Errno::EOPNOTSUPP),
            ApplyError::NoNfTables(_)
        ));
        let text = refusal(&steps, 7, Errno::EINVAL).to_string();
        assert!(text.contains("add chain nat_output") && text.contains("nothing was applied"));
    }

    #[test]
    fn answers_are_read_by_the_sequence_they_answer() {
        let mut bytes = Vec::new();
        for (seq, error) in [(5u32, 0i32), (6, -22)] {
            bytes.extend_from_slice(&36u32.to_ne_bytes());
            bytes.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            bytes.extend_from_slice(&[0; 2]);
            bytes.extend_from_slice(&seq.to_ne_bytes());
            bytes.extend_from_slice(&[0; 4]);
            bytes.extend_from_slice(&error.to_ne_bytes());
            bytes.extend_from_slice(&[0; 8]);
            bytes.extend_from_slice(&seq.to_ne_bytes());
            bytes.extend_from_slice(&[0; 4]);
        }
        assert_eq!(answers(&bytes), vec![(5, 0), (6, 22)]);
    }
}
