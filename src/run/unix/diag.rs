//! Which socket files the jail's own sockets are bound to: the kernel's `sock_diag`
//! (`NETLINK_SOCK_DIAG`, `UNIX_DIAG` with `UDIAG_SHOW_VFS`), asked through a netlink
//! socket made inside the jail's network namespace, which lists the Unix sockets of that
//! namespace only. A host daemon's socket is never among them.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const UDIAG_SHOW_VFS: u32 = 0x2;
const UNIX_DIAG_VFS: u16 = 1;
/// `nlmsghdr` and `unix_diag_msg` sizes.
const NLMSG_HDR: usize = 16;
const DIAG_MSG: usize = 16;

/// A socket file: the kernel's device number (`MAJOR << 20 | MINOR`) as `stat` gives it,
/// and the low 32 bits of its inode number (all `sock_diag` reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino32: u32,
}

impl FileId {
    /// The id of a file from its `stat`.
    pub(crate) fn of(stat: &libc::stat) -> FileId {
        FileId {
            dev: stat.st_dev,
            ino32: stat.st_ino as u32,
        }
    }
}

/// A `sock_diag` socket of the jail's network namespace; one query at a time.
pub(crate) struct Diag {
    socket: Mutex<OwnedFd>,
}

impl Diag {
    /// Make the socket; call on a thread in the jail's network namespace.
    pub(crate) fn open() -> io::Result<Diag> {
        // SAFETY: socket takes plain integers.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor, owned from here.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Diag {
            socket: Mutex::new(socket),
        })
    }

    /// The files that the jail's Unix sockets are bound to, now.
    pub(crate) fn bound_files(&self) -> io::Result<HashSet<FileId>> {
        let socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        let fd = socket.as_raw_fd();
        let mut request = [0u8; NLMSG_HDR + 24];
        let len = request.len() as u32;
        request[0..4].copy_from_slice(&len.to_ne_bytes());
        request[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        request[6..8].copy_from_slice(&flags.to_ne_bytes());
        // unix_diag_req: family, protocol, pad, states (all), ino, show, cookie.
        request[16] = libc::AF_UNIX as u8;
        request[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
        request[28..32].copy_from_slice(&UDIAG_SHOW_VFS.to_ne_bytes());
        // SAFETY: `request` is readable for its length.
        if unsafe { libc::send(fd, request.as_ptr().cast(), request.len(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut found = HashSet::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if parse(&buf[..n as usize], &mut found)? {
                return Ok(found);
            }
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Add the bound files of one datagram of answers to `found`; true at the dump's end.
fn parse(mut b: &[u8], found: &mut HashSet<FileId>) -> io::Result<bool> {
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0) as usize;
        let kind = u16_at(b, 4);
        if len < NLMSG_HDR || len > b.len() {
            return Err(io::Error::other("a malformed sock_diag answer"));
        }
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = if len >= NLMSG_HDR + 4 {
                    -(u32_at(b, NLMSG_HDR) as i32)
                } else {
                    libc::EIO
                };
                return Err(io::Error::from_raw_os_error(errno));
            }
            SOCK_DIAG_BY_FAMILY => attributes(&b[NLMSG_HDR..len], found),
            _ => {}
        }
        b = &b[(len + 3) & !3..];
    }
    Ok(false)
}

/// The `UNIX_DIAG_VFS` attribute of one `unix_diag_msg`, if the socket is bound to a file.
fn attributes(msg: &[u8], found: &mut HashSet<FileId>) {
    let mut at = DIAG_MSG;
    while at + 4 <= msg.len() {
        let len = u16_at(msg, at) as usize;
        let kind = u16_at(msg, at + 2);
        if len < 4 || at + len > msg.len() {
            return;
        }
        if kind == UNIX_DIAG_VFS && len >= 12 {
            let ino32 = u32_at(msg, at + 4);
            let kdev = u32_at(msg, at + 8);
            let (major, minor) = (kdev >> 20, kdev & 0xf_ffff);
            found.insert(FileId {
                dev: libc::makedev(major, minor),
                ino32,
            });
        }
        at += (len + 3) & !3;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_socket_of_this_namespace_is_listed_by_its_file() {
        let dir = std::env::temp_dir().join(format!("diag-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let stat = nix::sys::stat::stat(&path).unwrap();
        let found = Diag::open().unwrap().bound_files().unwrap();
        assert!(found.contains(&FileId::of(&stat)), "{found:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_error_answer_is_an_error_and_done_ends_the_dump() {
        let mut found = HashSet::new();
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        assert!(parse(&done, &mut found).unwrap());
        let mut error = done.clone();
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        error[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        let e = parse(&error, &mut found).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        assert!(parse(&[1, 2, 3], &mut found).is_ok_and(|done| !done));
    }
}
