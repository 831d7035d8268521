//! `run`'s supervisor of CMD's `connect` calls: a thread that takes each notification and
//! answers it from a thread of its own (a blocking `connect` may take long), at most
//! [`IN_FLIGHT`] at once; past that, CMD's calls wait in the kernel.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};

use super::allow::AllowUnix;
use super::diag::Diag;
use super::notify::{self, Request};
use super::{filter, resolve};

/// Notifications answered at once.
const IN_FLIGHT: usize = 64;

/// `sockaddr_storage`'s size: a longer address is `EINVAL`, as the kernel says.
const MAX_ADDRESS: usize = 128;

/// What the supervisor needs besides the notifications.
pub(crate) struct Supervisor {
    /// `run`'s end of the socket over which CMD's first step sends the listener.
    pub from_jail: OwnedFd,
    /// The jail's `sock_diag` socket.
    pub diag: Diag,
    pub allow: AllowUnix,
}

struct Shared {
    listener: OwnedFd,
    diag: Diag,
    allow: AllowUnix,
    busy: Mutex<usize>,
    freed: Condvar,
}

impl Supervisor {
    /// Start supervising on a thread of its own: it waits for the listener, then answers
    /// every `connect` of CMD until no process of the jail is left to call.
    pub(crate) fn start(self) -> io::Result<()> {
        std::thread::Builder::new()
            .name("egress-unix".into())
            .spawn(move || {
                let listener = match filter::receive_fd(self.from_jail.as_raw_fd()) {
                    Ok(listener) => listener,
                    // The command never started: nothing to supervise.
                    Err(e) => return tracing::debug!(error = %e, "no connect filter"),
                };
                let shared = Arc::new(Shared {
                    listener,
                    diag: self.diag,
                    allow: self.allow,
                    busy: Mutex::new(0),
                    freed: Condvar::new(),
                });
                serve(&shared);
            })
            .map(drop)
    }
}

fn serve(shared: &Arc<Shared>) {
    while wait_readable(&shared.listener) {
        let request = match notify::receive(&shared.listener) {
            Ok(request) => request,
            // The caller went away between poll and receive.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINTR)) => continue,
            Err(e) => return tracing::warn!(error = %e, "the connect supervisor stopped"),
        };
        {
            let mut busy = shared.busy.lock().unwrap_or_else(|e| e.into_inner());
            while *busy >= IN_FLIGHT {
                busy = shared.freed.wait(busy).unwrap_or_else(|e| e.into_inner());
            }
            *busy += 1;
        }
        let (worker, id) = (Arc::clone(shared), request.id);
        let spawned = std::thread::Builder::new()
            .name("egress-connect".into())
            .spawn(move || {
                answer(&worker, &request);
                *worker.busy.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
                worker.freed.notify_one();
            });
        if spawned.is_err() {
            // No thread for it: refused, never let through unchecked.
            notify::answer(&shared.listener, id, Err(libc::EAGAIN));
            *shared.busy.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        }
    }
}

/// Whether a notification waits; false once every process of the filter has gone.
fn wait_readable(listener: &OwnedFd) -> bool {
    loop {
        let mut fds = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, for the call's length.
        #[allow(unsafe_code)]
        let n = unsafe { libc::poll(&mut fds, 1, -1) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return n > 0 && fds.revents & libc::POLLIN != 0;
    }
}

fn answer(shared: &Shared, request: &Request) {
    let result = connect(shared, request);
    if let Err(None) = result {
        return; // the caller has gone: no one to answer
    }
    notify::answer(
        &shared.listener,
        request.id,
        result.map_err(|e| e.unwrap_or(0)),
    );
}

/// CMD's `connect`, made here on CMD's socket with this copy of its address. `Err(None)`
/// when the notification is no longer valid.
fn connect(shared: &Shared, request: &Request) -> Result<i64, Option<i32>> {
    let errno = |e: io::Error| Some(notify::errno(&e));
    let [fd, addr, len, ..] = request.args;
    let pidfd = notify::pidfd(request.tid).map_err(errno)?;
    if !notify::still_valid(&shared.listener, request.id) {
        return Err(None);
    }
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > MAX_ADDRESS {
        return Err(Some(libc::EINVAL));
    }
    let address = notify::read_memory(request.tid, addr, len).map_err(errno)?;
    let socket = notify::take_fd(&pidfd, fd).map_err(errno)?;
    // What was read was the caller's, not a process that took its pid since.
    if !notify::still_valid(&shared.listener, request.id) {
        return Err(None);
    }
    let family = notify::family(&socket).map_err(errno)?;
    match unix_path(family, &address) {
        Some(path) => {
            let (tid, diag, allow) = (request.tid, &shared.diag, &shared.allow);
            resolve::connect(tid, &socket, path, diag, allow).map_err(Some)
        }
        None => notify::connect(&socket, &address).map_err(Some),
    }
}

/// The path of an `AF_UNIX` address bound to a file (not abstract, not unnamed), up to
/// its first NUL.
fn unix_path(family: i32, address: &[u8]) -> Option<&[u8]> {
    if family != libc::AF_UNIX || address.len() <= 2 {
        return None;
    }
    let sun_family = u16::from_ne_bytes([address[0], address[1]]);
    let path = &address[2..];
    if sun_family != libc::AF_UNIX as u16 || path[0] == 0 {
        return None;
    }
    let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
    Some(&path[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(family: u16, path: &[u8]) -> Vec<u8> {
        let mut a = family.to_ne_bytes().to_vec();
        a.extend_from_slice(path);
        a
    }

    #[test]
    fn only_a_unix_address_with_a_path_is_resolved() {
        let unix = libc::AF_UNIX as u16;
        let path = address(unix, b"/tmp/s\0junk");
        assert_eq!(unix_path(libc::AF_UNIX, &path), Some(&b"/tmp/s"[..]));
        assert_eq!(
            unix_path(libc::AF_UNIX, &address(unix, b"rel")),
            Some(&b"rel"[..])
        );
        // Abstract, unnamed, another family in the address or of the socket.
        assert_eq!(
            unix_path(libc::AF_UNIX, &address(unix, b"\0abstract")),
            None
        );
        assert_eq!(unix_path(libc::AF_UNIX, &address(unix, b"")), None);
        assert_eq!(unix_path(libc::AF_UNIX, &address(0, b"/tmp/s")), None);
        assert_eq!(unix_path(libc::AF_INET, &path), None);
    }

    #[test]
    fn allow_unix_takes_sockets_and_directories_and_names_anything_else() {
        let dir = std::env::temp_dir().join(format!("allow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s");
        let _l = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let allow = AllowUnix::new(&[socket.clone(), dir.clone()]).unwrap();
        let stat = nix::sys::stat::stat(&socket).unwrap();
        assert!(allow.socket(&stat) && !allow.directory(&stat));
        assert!(allow.directory(&nix::sys::stat::stat(&dir).unwrap()));
        let file = dir.join("f");
        std::fs::write(&file, "").unwrap();
        let e = AllowUnix::new(&[file]).unwrap_err();
        assert!(e.contains("neither a socket nor a directory"), "{e}");
        assert!(AllowUnix::new(&[dir.join("missing")]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
