//! The process restricting itself once it holds what it needs: the only
//! place that changes the process's user, capabilities, `no_new_privs`,
//! Landlock domain and seccomp filter. It owns *how* (the order, the system
//! calls, the kernel's ABI levels); *what* to allow is the caller's
//! decision ([`Restrictions`]: paths, TCP ports, groups of system calls),
//! made in `diodon-apps` from the run's settings.
//!
//! ```text
//!  privileged setup done (sockets bound and sized, outputs and listeners open),
//!  the process still has one thread ─► apply(&Restrictions):
//!    1. user:          setgroups([gid]), setgid, setuid  (root → NAME, keeps nothing)
//!    2. capabilities:  ambient set cleared, capset(0)    (what systemd gave is gone too)
//!    3. no_new_privs:  prctl(PR_SET_NO_NEW_PRIVS)        (no setuid binary gives any back)
//!    4. Landlock:      read / write beneath given paths, TCP connect to given ports,
//!                      no signals or abstract sockets outside (best effort by ABI)
//!    5. seccomp:       allow-list of the groups asked for; anything else EPERM;
//!                      exec, fork and ptrace kill the process
//!  ─► Applied (one line for the log) ─► threads spawned from here on inherit all of it
//! ```
//!
//! Landlock restricts the calling thread and the threads it starts later
//! (the kernels here have no way to restrict siblings), so [`apply`] refuses
//! to run while the process has more than one thread. Rules follow inodes,
//! and procfs makes a new inode when a forgotten dentry is looked up again:
//! every rule's file stays open (`O_PATH`) for the life of the process.
#![expect(
    unsafe_code,
    reason = "setuid(2), capset(2), prctl(2) and getpwnam_r(3) have no safe std API"
)]

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The Landlock ABI whose rights are asked for (newer kernels add rights
/// this code has not been tested with; older ones get what they know).
const LANDLOCK_ABI: ABI = ABI::V6;

/// Why the process could not restrict itself.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No such user in the password database.
    #[error("no user named {0:?}")]
    NoUser(String),
    /// Changing user needs root.
    #[error("changing to user {0:?} needs the process to start as root")]
    NotRoot(String),
    /// A step failed.
    #[error("{step}: {source}")]
    Os {
        /// What was being done.
        step: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Other threads exist; they would escape the Landlock domain.
    #[error("the process has {0} threads; it must restrict itself while it has one")]
    Threads(usize),
    /// Landlock refused the ruleset.
    #[error("Landlock: {0}")]
    Landlock(String),
    /// The seccomp filter could not be built or loaded.
    #[error("seccomp: {0}")]
    Seccomp(String),
}

impl SandboxError {
    fn os(step: &'static str) -> impl FnOnce(io::Error) -> SandboxError {
        move |source| SandboxError::Os { step, source }
    }
}

/// A user to run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

impl User {
    /// Looks `name` up in the password database (before any restriction:
    /// NSS may read files and load libraries).
    pub fn lookup(name: &str) -> Result<User, SandboxError> {
        let c = CString::new(name).map_err(|_| SandboxError::NoUser(name.to_owned()))?;
        let mut buf = vec![0u8; 16 * 1024];
        // SAFETY: an all-zero passwd is a valid out-parameter.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `buf` outlives it and
        // only `pw`'s id fields are read afterwards.
        let rc = unsafe {
            libc::getpwnam_r(
                c.as_ptr(),
                &raw mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &raw mut found,
            )
        };
        if rc != 0 {
            return Err(SandboxError::Os {
                step: "looking up the user",
                source: io::Error::from_raw_os_error(rc),
            });
        }
        if found.is_null() {
            return Err(SandboxError::NoUser(name.to_owned()));
        }
        Ok(User {
            name: name.to_owned(),
            uid: pw.pw_uid,
            gid: pw.pw_gid,
        })
    }
}

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// What Landlock should allow; everything else on the filesystem is denied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Landlock {
    /// Read (files, and listing directories) beneath these paths.
    pub read: Vec<PathBuf>,
    /// Read and write beneath these directories: create, write, truncate,
    /// rename within, remove files and directories (no devices, sockets,
    /// pipes or symlinks are created, nothing is executed).
    pub write: Vec<PathBuf>,
    /// Open these device files for reading, writing and ioctl.
    pub devices: Vec<PathBuf>,
    /// TCP connections to these ports (no other port; no TCP bind).
    pub tcp_connect: Vec<u16>,
}

/// A group of system calls the caller's work needs. [`Syscalls::Base`] is
/// always in: memory, threads, time, signals, reading and writing open
/// descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Syscalls {
    /// What any of our threads does: memory, futexes, thread start (threads
    /// only, not processes), time, signals, IO on open descriptors.
    Base,
    /// Open files read-only, list directories, stat.
    ReadFiles,
    /// Create, write, fsync, rename, remove files and directories; set
    /// modes and times; filesystem free space.
    WriteFiles,
    /// Receive on an open UDP socket (`recvmmsg`, GRO); also what an open
    /// `AF_PACKET` capture ring needs once mapped (`getsockopt` for its
    /// statistics and errors; `poll` is in [`Syscalls::Base`]).
    UdpReceive,
    /// Send on an open UDP socket (`sendmsg` + GSO, `sendmmsg`, the error
    /// queue); also `sendmmsg` on an open raw packet socket and `send` on a
    /// connected Unix socket.
    UdpSend,
    /// Open, bind and use new UDP sockets (IPv4, IPv6).
    UdpSockets,
    /// Open TCP connections (IPv4, IPv6) and use them.
    TcpConnect,
    /// Accept TCP connections on an open listener and use them.
    TcpAccept,
    /// Create and configure network devices (TUN/TAP ioctls, interface flags).
    NetDevices,
    /// Watch directories for changes (inotify, and the epoll and eventfd
    /// its reader thread waits on).
    Watch,
}

/// What [`apply`] does, in its order.
#[derive(Debug, Clone, Default)]
pub struct Restrictions {
    /// Change to this user (needs root).
    pub user: Option<User>,
    /// Drop every capability, keep none (the receiver of tap packets keeps
    /// them: it creates TAP interfaces as agents appear).
    pub drop_capabilities: bool,
    /// Set `no_new_privs`, restrict the filesystem with Landlock, filter
    /// system calls with seccomp.
    pub confine: Option<Confinement>,
}

/// The sandbox proper.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// Landlock rules.
    pub landlock: Landlock,
    /// seccomp allow-list.
    pub syscalls: Vec<Syscalls>,
}

/// How far Landlock went on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockLevel {
    /// Every right asked for is enforced, at this kernel ABI.
    Full(u8),
    /// Enforced with the rights this kernel ABI knows (older kernel).
    Partial(u8),
    /// Not enforced: no Landlock here (not built, not enabled at boot, or
    /// its system calls refused by a filter the process runs under), or
    /// only ABI 1, which cannot allow renames between folders.
    Unsupported,
}

impl fmt::Display for LandlockLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LandlockLevel::Full(abi) => write!(f, "Landlock ABI {abi} fully enforced"),
            LandlockLevel::Partial(abi) => write!(f, "Landlock ABI {abi} partially enforced"),
            LandlockLevel::Unsupported => {
                write!(
                    f,
                    "Landlock not enforced (kernel without it or before ABI 2, or its calls filtered)"
                )
            }
        }
    }
}

/// What [`apply`] did: the one line the log shows.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The user changed to.
    pub user: Option<User>,
    /// Capabilities were dropped.
    pub capabilities_dropped: bool,
    /// `no_new_privs` is set.
    pub no_new_privs: bool,
    /// Landlock's outcome.
    pub landlock: Option<LandlockLevel>,
    /// Rule paths that did not exist (skipped).
    pub missing: Vec<PathBuf>,
    /// seccomp: the number of system calls allowed (`None`: no filter).
    pub seccomp: Option<usize>,
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.user {
            Some(u) => write!(f, "user {} (uid {}, gid {})", u.name, u.uid, u.gid)?,
            // SAFETY: getuid(2) cannot fail.
            None => write!(f, "user unchanged (uid {})", unsafe { libc::getuid() })?,
        }
        if self.capabilities_dropped {
            f.write_str(", capabilities dropped")?;
        }
        if self.no_new_privs {
            f.write_str(", no_new_privs")?;
        }
        match self.landlock {
            Some(l) => write!(f, ", {l}")?,
            None => f.write_str(", Landlock off")?,
        }
        match self.seccomp {
            Some(n) => write!(
                f,
                ", seccomp on ({n} system calls allowed, others EPERM, exec/fork kill)"
            ),
            None => f.write_str(", seccomp off"),
        }
    }
}

/// Rule files kept open for the life of the process (see the module doc).
static PINNED: Mutex<Vec<PathFd>> = Mutex::new(Vec::new());

/// Restricts the whole process, in the order of the module diagram. Must be
/// called while the process has exactly one thread.
pub fn apply(r: &Restrictions) -> Result<Applied, SandboxError> {
    if r.user.is_none() && !r.drop_capabilities && r.confine.is_none() {
        // Nothing asked for (`--no-sandbox` without `--user`): extra threads
        // (a profiler's, a preloaded library's) are no one's concern.
        return Ok(Applied::default());
    }
    let threads = thread_count().map_err(SandboxError::os("counting threads"))?;
    if threads != 1 {
        return Err(SandboxError::Threads(threads));
    }
    let mut applied = Applied::default();
    if let Some(user) = &r.user {
        change_user(user)?;
        applied.user = Some(user.clone());
    }
    if r.drop_capabilities || r.user.is_some() {
        drop_capabilities()?;
        applied.capabilities_dropped = true;
    }
    if let Some(c) = &r.confine {
        set_no_new_privs()?;
        applied.no_new_privs = true;
        let (level, missing) = landlock(&c.landlock)?;
        applied.landlock = Some(level);
        applied.missing = missing;
        applied.seccomp = seccomp(&c.syscalls)?;
    }
    Ok(applied)
}

/// Threads of this process (`/proc/self/task`).
pub fn thread_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

fn change_user(user: &User) -> Result<(), SandboxError> {
    if !is_root() {
        return Err(SandboxError::NotRoot(user.name.clone()));
    }
    let gid = user.gid;
    // SAFETY: a pointer to one gid, length 1.
    if unsafe { libc::setgroups(1, &raw const gid) } != 0 {
        return Err(SandboxError::os("setgroups")(io::Error::last_os_error()));
    }
    // SAFETY: plain id arguments. glibc applies both to every thread.
    if unsafe { libc::setgid(user.gid) } != 0 {
        return Err(SandboxError::os("setgid")(io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::setuid(user.uid) } != 0 {
        return Err(SandboxError::os("setuid")(io::Error::last_os_error()));
    }
    // There is no way back: check it.
    // SAFETY: as above.
    if user.uid != 0 && unsafe { libc::setuid(0) } == 0 {
        return Err(SandboxError::os("dropping root")(io::Error::other(
            "setuid(0) still succeeds",
        )));
    }
    Ok(())
}

/// `struct __user_cap_header_struct` of capset(2).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` of capset(2).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn drop_capabilities() -> Result<(), SandboxError> {
    // SAFETY: prctl(2) with integer arguments.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    // EINVAL: a kernel without ambient capabilities has none to clear.
    if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return Err(SandboxError::os("clearing ambient capabilities")(
            io::Error::last_os_error(),
        ));
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: a version-3 header and the two data words it describes.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    if rc != 0 {
        return Err(SandboxError::os("capset")(io::Error::last_os_error()));
    }
    Ok(())
}

fn set_no_new_privs() -> Result<(), SandboxError> {
    // SAFETY: prctl(2) with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(SandboxError::os("PR_SET_NO_NEW_PRIVS")(
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn landlock(rules: &Landlock) -> Result<(LandlockLevel, Vec<PathBuf>), SandboxError> {
    let err = |e: &dyn fmt::Display| SandboxError::Landlock(e.to_string());
    let abi = LANDLOCK_ABI;
    let read_dir = AccessFs::ReadFile | AccessFs::ReadDir;
    let write_dir = read_dir
        | AccessFs::WriteFile
        | AccessFs::MakeReg
        | AccessFs::MakeDir
        | AccessFs::RemoveFile
        | AccessFs::RemoveDir
        | AccessFs::Truncate
        | AccessFs::Refer;
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    let mut missing = Vec::new();
    let mut pinned = Vec::new();
    let mut open = |path: &Path| {
        let fd = PathFd::new(path).ok();
        if fd.is_none() {
            missing.push(path.to_owned());
        }
        fd.map(|fd| (fd, path.is_dir()))
    };
    let mut fs_rules = Vec::new();
    for (paths, dir_access) in [
        (&rules.read, read_dir),
        (&rules.write, write_dir),
        (&rules.devices, device),
    ] {
        for p in paths {
            if let Some((fd, is_dir)) = open(p) {
                // A file takes only the rights that apply to files.
                let access = if is_dir {
                    dir_access
                } else {
                    dir_access & AccessFs::from_file(abi)
                };
                fs_rules.push((pinned.len(), access));
                pinned.push(fd);
            }
        }
    }
    // ABI 1 denies every rename between folders (staging → final place):
    // without the right that allows it (ABI 2), no Landlock at all rather
    // than a receiver that cannot deliver.
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::SoftRequirement)
        .handle_access(AccessFs::Refer)
        .map_err(|e| err(&e))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| err(&e))?
        .handle_access(AccessNet::from_all(abi))
        .map_err(|e| err(&e))?
        .scope(Scope::from_all(abi))
        .map_err(|e| err(&e))?
        .create()
        .map_err(|e| err(&e))?;
    for (i, access) in fs_rules {
        ruleset = ruleset
            .add_rule(
                PathBeneath::new(&pinned[i], access).set_compatibility(CompatLevel::BestEffort),
            )
            .map_err(|e| err(&e))?;
    }
    for port in &rules.tcp_connect {
        ruleset = ruleset
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(|e| err(&e))?;
    }
    let status = ruleset.restrict_self().map_err(|e| err(&e))?;
    if let Ok(mut keep) = PINNED.lock() {
        keep.extend(pinned);
    }
    let kernel_abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => kernel_abi.unwrap_or(effective_abi as i32) as u8,
        _ => 0,
    };
    let level = match status.ruleset {
        RulesetStatus::FullyEnforced => LandlockLevel::Full(kernel_abi),
        RulesetStatus::PartiallyEnforced => LandlockLevel::Partial(kernel_abi),
        RulesetStatus::NotEnforced => LandlockLevel::Unsupported,
    };
    Ok((level, missing))
}

/// A condition on the low 32 bits of argument `arg` of a system call
/// (every argument checked here is an `int` or a flag word below 2^32).
fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).expect("argument index below 6")
}

fn rule(conds: Vec<SeccompCondition>) -> SeccompRule {
    SeccompRule::new(conds).expect("a rule has conditions")
}

/// One system call's entry: `None` allows it whatever its arguments.
type Entry = Option<Vec<SeccompRule>>;

/// The allow-list: system call → rules (adding a rule to a call allowed
/// without condition changes nothing; allowing one without condition drops
/// its rules).
#[derive(Default)]
struct AllowList(BTreeMap<i64, Entry>);

impl AllowList {
    fn any(&mut self, calls: &[libc::c_long]) {
        for &c in calls {
            self.0.insert(c, None);
        }
    }

    fn when(&mut self, call: libc::c_long, rules: Vec<SeccompRule>) {
        if let Some(v) = self.0.entry(call).or_insert_with(|| Some(Vec::new())) {
            v.extend(rules);
        }
    }

    fn filter(self, arch: TargetArch) -> Result<SeccompFilter, seccompiler::BackendError> {
        let rules = self
            .0
            .into_iter()
            .map(|(k, v)| (k, v.unwrap_or_default()))
            .collect();
        SeccompFilter::new(
            rules,
            SeccompAction::Errno(libc::EPERM as u32),
            SeccompAction::Allow,
            arch,
        )
    }
}

/// `socket(domain, type)` for IPv4 and IPv6 sockets of `kind` (any flags).
fn ip_socket(kind: libc::c_int) -> Vec<SeccompRule> {
    [libc::AF_INET, libc::AF_INET6]
        .into_iter()
        .map(|af| {
            rule(vec![
                cond(0, SeccompCmpOp::Eq, af as u64),
                cond(1, SeccompCmpOp::MaskedEq(0xf), kind as u64),
            ])
        })
        .collect()
}

/// Opening read-only: no write access, no creating, no truncating.
fn read_only_open(flags_arg: u8) -> Vec<SeccompRule> {
    let mask = (libc::O_ACCMODE | libc::O_CREAT | libc::O_TRUNC) as u64;
    vec![rule(vec![cond(
        flags_arg,
        SeccompCmpOp::MaskedEq(mask),
        libc::O_RDONLY as u64,
    )])]
}

/// Mappings never executable (the code is mapped before the filter).
fn no_exec(prot_arg: u8) -> Vec<SeccompRule> {
    vec![rule(vec![cond(
        prot_arg,
        SeccompCmpOp::MaskedEq(libc::PROT_EXEC as u64),
        0,
    )])]
}

fn values(arg: u8, vals: &[u64]) -> Vec<SeccompRule> {
    vals.iter()
        .map(|v| rule(vec![cond(arg, SeccompCmpOp::Eq, *v)]))
        .collect()
}

/// Calls each group allows whatever their arguments (the conditional ones
/// are in [`allow_list`]). A table, kept one group a line for reading.
#[rustfmt::skip]
mod table {
    use libc::{
        c_long, SYS_accept, SYS_accept4, SYS_bind, SYS_brk, SYS_clock_getres, SYS_clock_gettime,
        SYS_clock_nanosleep, SYS_clone3, SYS_close, SYS_connect, SYS_execve, SYS_execveat,
        SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_pwait, SYS_eventfd2, SYS_inotify_add_watch,
        SYS_inotify_init1, SYS_inotify_rm_watch,
        SYS_exit, SYS_exit_group, SYS_faccessat, SYS_fadvise64, SYS_fallocate, SYS_fchmod,
        SYS_fgetxattr, SYS_fsetxattr,
        SYS_fchmodat, SYS_fcntl, SYS_fdatasync, SYS_flock, SYS_fstat, SYS_fstatfs, SYS_fsync,
        SYS_ftruncate, SYS_futex, SYS_getdents64, SYS_getegid, SYS_geteuid, SYS_getgid,
        SYS_getcwd, SYS_getpeername, SYS_getpid, SYS_getrandom, SYS_getrusage, SYS_getsockname,
        SYS_getsockopt, SYS_gettid, SYS_gettimeofday, SYS_getuid, SYS_ioctl, SYS_lseek,
        SYS_madvise, SYS_mkdirat, SYS_mremap, SYS_munmap, SYS_nanosleep, SYS_newfstatat,
        SYS_openat, SYS_pipe2, SYS_ppoll, SYS_pread64, SYS_ptrace, SYS_pwrite64, SYS_read,
        SYS_readlinkat, SYS_readv, SYS_recvfrom, SYS_recvmmsg, SYS_recvmsg, SYS_renameat,
        SYS_renameat2, SYS_restart_syscall, SYS_rseq, SYS_rt_sigaction, SYS_rt_sigprocmask,
        SYS_rt_sigreturn, SYS_sched_getaffinity, SYS_sched_yield, SYS_sendmmsg, SYS_sendmsg,
        SYS_sendto, SYS_set_robust_list, SYS_setsockopt, SYS_shutdown, SYS_sigaltstack,
        SYS_statfs, SYS_statx, SYS_tgkill, SYS_unlinkat, SYS_utimensat, SYS_write, SYS_writev,
    };
    #[cfg(target_arch = "x86_64")]
    use libc::{
        SYS_access, SYS_epoll_wait, SYS_fork, SYS_lstat, SYS_mkdir, SYS_open, SYS_poll, SYS_readlink,
        SYS_rename, SYS_rmdir, SYS_stat, SYS_unlink, SYS_vfork,
    };
    pub const BASE: &[c_long] = &[
        SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_pread64, SYS_pwrite64, SYS_lseek,
        SYS_close, SYS_fstat, SYS_newfstatat, SYS_statx, SYS_fcntl, SYS_munmap, SYS_mremap,
        SYS_madvise, SYS_brk, SYS_futex, SYS_sched_yield, SYS_sched_getaffinity,
        SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_sigaltstack,
        SYS_set_robust_list, SYS_rseq, SYS_gettid, SYS_getpid, SYS_getuid, SYS_geteuid,
        SYS_getgid, SYS_getegid, SYS_exit, SYS_exit_group, SYS_clock_gettime, SYS_clock_getres,
        SYS_clock_nanosleep, SYS_nanosleep, SYS_gettimeofday, SYS_getrandom, SYS_ppoll,
        SYS_pipe2, SYS_tgkill, SYS_getrusage, SYS_restart_syscall,
        // Made ENOSYS by its own filter (see `seccomp`).
        SYS_clone3,
        #[cfg(target_arch = "x86_64")] SYS_poll,
    ];
    pub const READ_FILES: &[c_long] = &[
        SYS_getdents64, SYS_readlinkat, SYS_fadvise64, SYS_faccessat,
        // SQLite makes a relative database name absolute.
        SYS_getcwd,
        #[cfg(target_arch = "x86_64")] SYS_readlink,
        #[cfg(target_arch = "x86_64")] SYS_access,
        #[cfg(target_arch = "x86_64")] SYS_stat,
        #[cfg(target_arch = "x86_64")] SYS_lstat,
    ];
    pub const WRITE_FILES: &[c_long] = &[
        SYS_openat, SYS_getdents64, SYS_mkdirat, SYS_renameat, SYS_renameat2, SYS_unlinkat,
        SYS_fsync, SYS_fdatasync, SYS_fchmod, SYS_fchmodat, SYS_utimensat, SYS_ftruncate,
        SYS_fallocate, SYS_fstatfs, SYS_statfs, SYS_readlinkat, SYS_faccessat,
        // A sync mirror keeps each verified file's digest as an attribute.
        SYS_fgetxattr, SYS_fsetxattr,
        // A receiver locks its staging files (another receiver sharing the
        // folder leaves them alone).
        SYS_flock,
        #[cfg(target_arch = "x86_64")] SYS_open,
        #[cfg(target_arch = "x86_64")] SYS_mkdir,
        #[cfg(target_arch = "x86_64")] SYS_rename,
        #[cfg(target_arch = "x86_64")] SYS_unlink,
        #[cfg(target_arch = "x86_64")] SYS_rmdir,
        #[cfg(target_arch = "x86_64")] SYS_stat,
        #[cfg(target_arch = "x86_64")] SYS_lstat,
        #[cfg(target_arch = "x86_64")] SYS_readlink,
        #[cfg(target_arch = "x86_64")] SYS_access,
    ];
    pub const UDP_RECEIVE: &[c_long] = &[SYS_recvmmsg, SYS_recvmsg, SYS_recvfrom, SYS_getsockopt];
    pub const UDP_SEND: &[c_long] = &[
        SYS_sendmsg, SYS_sendmmsg, SYS_sendto, SYS_recvmsg, SYS_getsockopt, SYS_getsockname,
    ];
    pub const UDP_SOCKETS: &[c_long] = &[
        SYS_bind, SYS_connect, SYS_setsockopt, SYS_getsockopt, SYS_getsockname, SYS_sendto,
        SYS_sendmsg, SYS_sendmmsg, SYS_recvfrom, SYS_recvmsg, SYS_recvmmsg,
    ];
    pub const TCP_CONNECT: &[c_long] = &[
        SYS_connect, SYS_setsockopt, SYS_getsockopt, SYS_getsockname, SYS_getpeername,
        SYS_shutdown, SYS_sendto, SYS_recvfrom,
    ];
    pub const TCP_ACCEPT: &[c_long] = &[
        SYS_accept, SYS_accept4, SYS_setsockopt, SYS_getsockopt, SYS_getsockname,
        SYS_getpeername, SYS_shutdown, SYS_sendto, SYS_recvfrom,
    ];
    /// /dev/net/tun and its ioctls, interface flags through a socket.
    pub const NET_DEVICES: &[c_long] = &[SYS_openat, SYS_ioctl];
    pub const WATCH: &[c_long] = &[
        SYS_inotify_init1, SYS_inotify_add_watch, SYS_inotify_rm_watch, SYS_epoll_create1,
        SYS_epoll_ctl, SYS_epoll_pwait, SYS_eventfd2,
        #[cfg(target_arch = "x86_64")] SYS_epoll_wait,
    ];
    /// Never made by our paths once filtered, always by an attacker.
    pub const KILL: &[c_long] = &[
        SYS_execve, SYS_execveat, SYS_ptrace,
        #[cfg(target_arch = "x86_64")] SYS_fork,
        #[cfg(target_arch = "x86_64")] SYS_vfork,
    ];
}

fn allow_list(groups: &[Syscalls]) -> AllowList {
    let mut a = AllowList::default();
    let mut groups = groups.to_vec();
    groups.push(Syscalls::Base);
    groups.sort_unstable();
    groups.dedup();
    for g in groups {
        match g {
            Syscalls::Base => {
                a.any(table::BASE);
                a.when(libc::SYS_mmap, no_exec(2));
                a.when(libc::SYS_mprotect, no_exec(2));
                // Threads of this process, never a new process.
                let thread = libc::CLONE_THREAD as u64;
                a.when(
                    libc::SYS_clone,
                    vec![rule(vec![cond(0, SeccompCmpOp::MaskedEq(thread), thread)])],
                );
                // Thread names; a further filter (none is loaded after ours).
                let prctl = [
                    libc::PR_SET_NAME,
                    libc::PR_GET_NAME,
                    libc::PR_SET_NO_NEW_PRIVS,
                ];
                a.when(libc::SYS_prctl, values(0, &prctl.map(|v| v as u64)));
                // isatty, the terminal's size, non-blocking and close-on-exec;
                // an interface's flags, read (a sender watching its links).
                let ioctl = [
                    libc::TCGETS,
                    libc::TIOCGWINSZ,
                    libc::FIONBIO,
                    libc::FIOCLEX,
                    libc::SIOCGIFFLAGS,
                ];
                a.when(libc::SYS_ioctl, values(1, &ioctl.map(u64::from)));
            }
            Syscalls::ReadFiles => {
                a.any(table::READ_FILES);
                a.when(libc::SYS_openat, read_only_open(2));
                #[cfg(target_arch = "x86_64")]
                a.when(libc::SYS_open, read_only_open(1));
            }
            Syscalls::WriteFiles => a.any(table::WRITE_FILES),
            Syscalls::UdpReceive => a.any(table::UDP_RECEIVE),
            Syscalls::UdpSend => a.any(table::UDP_SEND),
            Syscalls::UdpSockets => {
                a.any(table::UDP_SOCKETS);
                a.when(libc::SYS_socket, ip_socket(libc::SOCK_DGRAM));
            }
            Syscalls::TcpConnect => {
                a.any(table::TCP_CONNECT);
                a.when(libc::SYS_socket, ip_socket(libc::SOCK_STREAM));
            }
            Syscalls::TcpAccept => a.any(table::TCP_ACCEPT),
            Syscalls::NetDevices => {
                a.any(table::NET_DEVICES);
                a.when(libc::SYS_socket, ip_socket(libc::SOCK_DGRAM));
            }
            Syscalls::Watch => a.any(table::WATCH),
        }
    }
    a
}

/// Calls that no path of ours makes after the filter, and that an attacker
/// would: they end the process at once instead of failing.
fn kill_list() -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut m: BTreeMap<i64, Vec<SeccompRule>> =
        table::KILL.iter().map(|&c| (c, Vec::new())).collect();
    // A clone that is not a thread is a new process.
    let thread = libc::CLONE_THREAD as u64;
    m.insert(
        libc::SYS_clone,
        vec![rule(vec![cond(0, SeccompCmpOp::MaskedEq(thread), 0)])],
    );
    m
}

/// Loads the filters; `None` on an architecture the filter compiler does
/// not know (nothing loaded, said in the log).
fn seccomp(groups: &[Syscalls]) -> Result<Option<usize>, SandboxError> {
    let err = |e: &dyn fmt::Display| SandboxError::Seccomp(e.to_string());
    let Ok(arch) = TargetArch::try_from(std::env::consts::ARCH) else {
        return Ok(None);
    };
    let allow = allow_list(groups);
    let allowed = allow.0.len();
    let allow = allow.filter(arch).map_err(|e| err(&e))?;
    let kill = SeccompFilter::new(
        kill_list(),
        SeccompAction::Allow,
        SeccompAction::KillProcess,
        arch,
    )
    .map_err(|e| err(&e))?;
    // clone3 passes its flags in memory a filter cannot read: ENOSYS makes
    // the C library fall back to clone, whose flags the filters check (the
    // allow-list lets clone3 through; an errno beats an allow whatever the
    // order).
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| err(&e))?;
    // The allow-list goes last: loading a filter takes prctl and seccomp,
    // which it does not allow.
    for f in [kill, clone3, allow] {
        let prog: seccompiler::BpfProgram = f.try_into().map_err(|e| err(&e))?;
        seccompiler::apply_filter_all_threads(&prog).map_err(|e| err(&e))?;
    }
    Ok(Some(allowed))
}

/// What `/proc/PID/status` says about a process's restrictions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcStatus {
    /// Real uid.
    pub uid: u32,
    /// `NoNewPrivs`.
    pub no_new_privs: bool,
    /// `Seccomp` mode (0 none, 1 strict, 2 filter).
    pub seccomp: u8,
    /// `CapEff` (hex bitmask).
    pub cap_eff: u64,
}

impl ProcStatus {
    /// Reads `/proc/PID/status`.
    pub fn read(pid: u32) -> io::Result<ProcStatus> {
        Ok(Self::parse(&std::fs::read_to_string(format!(
            "/proc/{pid}/status"
        ))?))
    }

    /// Parses the text of a status file.
    pub fn parse(text: &str) -> ProcStatus {
        let mut s = ProcStatus::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            let first = v.split_whitespace().next().unwrap_or("");
            match k {
                "Uid" => s.uid = first.parse().unwrap_or(0),
                "NoNewPrivs" => s.no_new_privs = v == "1",
                "Seccomp" => s.seccomp = v.parse().unwrap_or(0),
                "CapEff" => s.cap_eff = u64::from_str_radix(v, 16).unwrap_or(0),
                _ => {}
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read() {
        let s = ProcStatus::parse(
            "Name:\tdiodon\nUid:\t65534\t65534\t65534\t65534\nCapEff:\t0000000000000000\n\
             NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n",
        );
        assert_eq!(
            s,
            ProcStatus {
                uid: 65534,
                no_new_privs: true,
                seccomp: 2,
                cap_eff: 0
            }
        );
    }

    #[test]
    fn every_group_compiles_to_a_filter() {
        let all = [
            Syscalls::ReadFiles,
            Syscalls::WriteFiles,
            Syscalls::UdpReceive,
            Syscalls::UdpSend,
            Syscalls::UdpSockets,
            Syscalls::TcpConnect,
            Syscalls::TcpAccept,
            Syscalls::NetDevices,
        ];
        let arch = TargetArch::try_from(std::env::consts::ARCH).expect("a known architecture");
        let f = allow_list(&all).filter(arch).expect("filter");
        let prog: seccompiler::BpfProgram = f.try_into().expect("BPF");
        assert!(!prog.is_empty());
        // Writing opens are allowed without condition once files are written.
        let a = allow_list(&[Syscalls::ReadFiles, Syscalls::WriteFiles]);
        assert_eq!(a.0.get(&libc::SYS_openat), Some(&None));
        let r = allow_list(&[Syscalls::ReadFiles]);
        assert!(matches!(r.0.get(&libc::SYS_openat), Some(Some(v)) if v.len() == 1));
    }

    #[test]
    fn nothing_to_restrict_is_fine_with_many_threads_and_something_is_not() {
        let keep = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(2)));
        assert!(thread_count().expect("threads") > 1);
        let none = Restrictions {
            user: None,
            drop_capabilities: false,
            confine: None,
        };
        assert!(apply(&none).is_ok(), "--no-sandbox restricts nothing");
        let some = Restrictions {
            drop_capabilities: true,
            ..none
        };
        assert!(matches!(apply(&some), Err(SandboxError::Threads(n)) if n > 1));
        keep.join().expect("the helper thread");
    }

    #[test]
    fn the_user_database_knows_root() {
        let u = User::lookup("root").expect("root");
        assert_eq!((u.uid, u.gid), (0, 0));
        assert!(matches!(
            User::lookup("no-such-user-diodon"),
            Err(SandboxError::NoUser(_))
        ));
    }
}
