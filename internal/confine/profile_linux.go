package confine

import "golang.org/x/sys/unix"

// workload is the seccomp profile of every workload command. It follows the
// shape of Docker's default profile for an unprivileged container: a list of
// allowed system calls, EPERM for everything else, and argument checks on a
// few calls that are only dangerous with some arguments. Names that do not
// exist on an architecture (open, fork, arch_prctl on arm64) are skipped
// there; each architecture's table lists them in absent.
var workload = profile{
	allow: []string{
		// Reading and writing open files.
		"read", "write", "readv", "writev", "pread64", "pwrite64",
		"preadv", "pwritev", "preadv2", "pwritev2", "lseek",
		"sendfile", "splice", "tee", "vmsplice", "copy_file_range",
		"readahead", "fadvise64", "fallocate", "ftruncate", "truncate",
		"fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
		"flock", "cachestat",

		// Opening, closing and duplicating file descriptors.
		"open", "openat", "openat2", "creat", "close", "close_range",
		"dup", "dup2", "dup3", "fcntl", "pipe", "pipe2", "memfd_create",

		// File names and metadata.
		"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
		"access", "faccessat", "faccessat2", "readlink", "readlinkat",
		"getdents", "getdents64", "getcwd", "chdir", "fchdir",
		"mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2",
		"link", "linkat", "symlink", "symlinkat", "unlink", "unlinkat",
		"chmod", "fchmod", "fchmodat", "fchmodat2",
		"chown", "fchown", "fchownat", "lchown", "umask",
		"utime", "utimes", "utimensat", "futimesat",
		// Without CAP_MKNOD only FIFOs and sockets can be made.
		"mknod", "mknodat",

		// Extended attributes.
		"getxattr", "lgetxattr", "fgetxattr", "getxattrat",
		"setxattr", "lsetxattr", "fsetxattr", "setxattrat",
		"listxattr", "llistxattr", "flistxattr", "listxattrat",
		"removexattr", "lremovexattr", "fremovexattr", "removexattrat",

		// Waiting for events.
		"poll", "ppoll", "select", "pselect6",
		"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
		"epoll_pwait", "epoll_pwait2",
		"eventfd", "eventfd2", "signalfd", "signalfd4",
		"timerfd_create", "timerfd_settime", "timerfd_gettime",
		"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",

		// Memory.
		"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore",
		"msync", "mlock", "mlock2", "munlock", "mlockall", "munlockall",
		"remap_file_pages", "membarrier", "mseal", "map_shadow_stack",
		"pkey_alloc", "pkey_free", "pkey_mprotect",

		// Processes and threads (clone and clone3 have rules below).
		"fork", "vfork", "execve", "execveat", "exit", "exit_group",
		"wait4", "waitid", "kill", "tkill", "tgkill",
		"pidfd_open", "pidfd_send_signal", "process_mrelease",
		"getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp",
		"getsid", "setsid", "set_tid_address", "set_robust_list",
		"get_robust_list", "rseq", "restart_syscall",
		"arch_prctl", "get_thread_area", "set_thread_area",
		"prctl", "prlimit64", "getrlimit", "setrlimit", "getrusage",
		"getpriority", "setpriority", "ioprio_get", "ioprio_set",
		"times", "sysinfo", "uname", "getcpu", "getrandom",
		// A process may confine itself further.
		"capget", "capset", "seccomp",
		"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",

		// Scheduling.
		"sched_yield", "sched_getaffinity", "sched_setaffinity",
		"sched_getparam", "sched_setparam", "sched_getscheduler",
		"sched_setscheduler", "sched_get_priority_max",
		"sched_get_priority_min", "sched_rr_get_interval",
		"sched_getattr", "sched_setattr",

		// Credentials (changing them still needs capabilities).
		"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
		"getgroups", "setuid", "setgid", "setreuid", "setregid",
		"setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",

		// Signals and timers.
		"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
		"rt_sigsuspend", "rt_sigtimedwait", "rt_sigqueueinfo",
		"rt_tgsigqueueinfo", "sigaltstack", "pause", "alarm",
		"getitimer", "setitimer", "timer_create", "timer_settime",
		"timer_gettime", "timer_getoverrun", "timer_delete",

		// Clocks (setting them is denied below).
		"clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep",
		"gettimeofday", "time",

		// Futexes.
		"futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",

		// System V and POSIX IPC (namespaced by the sandbox's IPC namespace).
		"msgget", "msgsnd", "msgrcv", "msgctl",
		"semget", "semop", "semtimedop", "semctl",
		"shmget", "shmat", "shmdt", "shmctl",
		"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
		"mq_notify", "mq_getsetattr",

		// Sockets (socket itself has a rule below).
		"socketpair", "bind", "listen", "accept", "accept4", "connect",
		"getsockname", "getpeername", "getsockopt", "setsockopt",
		"sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
		"shutdown",
	},

	// deny lists calls programs do try but a workload must not make. They
	// would get EPERM anyway as unknown calls; naming them documents the
	// intent and makes the generator refuse a profile that also allows them.
	// vm86 and vm86old exist only on i386, whose calls the arch check kills.
	deny: []string{
		// Debugging and reading other processes.
		"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
		"pidfd_getfd", "process_madvise",
		// Mounts and the root directory.
		"mount", "umount2", "pivot_root", "chroot", "mount_setattr",
		"fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
		"open_tree", "open_tree_attr",
		// Namespaces (clone with namespace flags has a rule below).
		"setns", "unshare",
		// Kernel attack surface.
		"bpf", "perf_event_open", "userfaultfd", "lookup_dcookie",
		"io_uring_setup", "io_uring_enter", "io_uring_register",
		"keyctl", "add_key", "request_key",
		"open_by_handle_at", "name_to_handle_at", "fanotify_init",
		// Kernel and machine administration.
		"kexec_load", "kexec_file_load", "init_module", "finit_module",
		"delete_module", "reboot", "acct", "swapon", "swapoff", "syslog",
		"quotactl", "quotactl_fd", "sethostname", "setdomainname", "vhangup",
		"iopl", "ioperm",
		// Setting clocks.
		"settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
		// NUMA placement.
		"mbind", "move_pages", "migrate_pages", "set_mempolicy",
		"get_mempolicy", "set_mempolicy_home_node",
	},

	errno: map[string]unix.Errno{
		// clone3 passes its flags in memory, where a filter cannot read
		// them. ENOSYS makes glibc fall back to clone, whose flags it can.
		"clone3": unix.ENOSYS,
		// Linux AIO (libaio): the events of every context on the host
		// come out of one pool, fs.aio-max-nr (65,536 by default), so one
		// sandbox could take it all and the host's next io_setup would
		// fail with EAGAIN. ENOSYS is what a kernel without CONFIG_AIO
		// answers: libaio users fall back to threads (glibc's POSIX aio
		// uses threads anyway). The rest of the family needs a context.
		"io_setup": unix.ENOSYS, "io_destroy": unix.ENOSYS, "io_submit": unix.ENOSYS,
		"io_cancel": unix.ENOSYS, "io_getevents": unix.ENOSYS, "io_pgetevents": unix.ENOSYS,
		// Secret memory is unmapped from the kernel's direct map, a pool
		// the host shares; nothing a sandbox runs needs it. ENOSYS is what
		// a kernel without it (or booted without secretmem.enable) says.
		"memfd_secret": unix.ENOSYS,
	},

	args: map[string]argRule{
		// clone: new threads and processes yes, new namespaces no. The
		// kernel reads only the low 32 bits of the flags (arg 0 on both
		// amd64 and arm64).
		"clone": {
			cases: []argCase{{
				when:   []argCond{{arg: 0, op: opAnyBits, values: []uint32{cloneNamespaceFlags}}},
				action: actEPERM,
			}},
			def: actAllow,
		},
		// ioctl: no faking terminal input (TIOCSTI) or console tricks
		// (TIOCLINUX). The request is an unsigned int: low 32 bits.
		"ioctl": {
			cases: []argCase{{
				when:   []argCond{{arg: 1, op: opEqual, values: []uint32{unix.TIOCSTI, unix.TIOCLINUX}}},
				action: actEPERM,
			}},
			def: actAllow,
		},
		// socket: no packet sockets, no raw IP sockets, no vsock (it is
		// not network-namespaced and reaches the host), no audit netlink.
		// SOCK_NONBLOCK and SOCK_CLOEXEC ride in the type's high bits; the
		// mask keeps only the type. AF_INET with SOCK_PACKET is the old
		// spelling of a packet socket.
		"socket": {
			cases: []argCase{
				{
					when:   []argCond{{arg: 0, op: opEqual, values: []uint32{unix.AF_PACKET, unix.AF_VSOCK}}},
					action: actEPERM,
				},
				{
					when: []argCond{
						{arg: 0, op: opEqual, values: []uint32{unix.AF_INET, unix.AF_INET6}},
						{arg: 1, mask: sockTypeMask, op: opEqual, values: []uint32{unix.SOCK_RAW, unix.SOCK_PACKET}},
					},
					action: actEPERM,
				},
				{
					when: []argCond{
						{arg: 0, op: opEqual, values: []uint32{unix.AF_NETLINK}},
						{arg: 2, op: opEqual, values: []uint32{unix.NETLINK_AUDIT}},
					},
					action: actEPERM,
				},
			},
			def: actAllow,
		},
		// personality: only the harmless values Docker allows: PER_LINUX,
		// PER_LINUX32, UNAME26, both, and 0xffffffff (a query).
		"personality": {
			cases: []argCase{{
				when:   []argCond{{arg: 0, op: opEqual, values: []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}}},
				action: actAllow,
			}},
			def: actEPERM,
		},
	},
}

// cloneNamespaceFlags are the clone flags that make a new namespace.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWTIME

// sockTypeMask keeps a socket type without SOCK_NONBLOCK and SOCK_CLOEXEC
// (the kernel's SOCK_TYPE_MASK).
const sockTypeMask = 0xf
