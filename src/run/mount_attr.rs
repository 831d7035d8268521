//! `mount_setattr(2)`, which nix does not wrap: one call makes a whole tree of mounts
//! read-only. A read-only remount changes one mount only, and the copy of the host's
//! tree the jail's view starts from holds many (docs/reference/confinement.md, "Files").
//! It needs Linux 5.12 or later; on an older kernel the call fails, and so does `run`.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `struct mount_attr` of `<linux/mount.h>`, its first version.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `MOUNT_ATTR_RDONLY`.
const RDONLY: u64 = 0x1;

/// Make the mount at `path` read-only, and with `recursive` every mount below it too.
pub(super) fn read_only(path: &Path, recursive: bool) -> Result<(), String> {
    let name = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a NUL byte", path.display()))?;
    let attr = MountAttr {
        attr_set: RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags: libc::c_uint = if recursive {
        libc::AT_RECURSIVE as libc::c_uint
    } else {
        0
    };
    // SAFETY: `name` is a NUL-terminated string and `attr` a `struct mount_attr` of the
    // size passed; both live across the call, and the kernel only reads them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            name.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        return Ok(());
    }
    Err(format!(
        "make {} read-only: {} (mount_setattr needs Linux 5.12 or later)",
        path.display(),
        std::io::Error::last_os_error()
    ))
}
