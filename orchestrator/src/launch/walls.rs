//! The walls of each thread's process tree ([`walls::Walls`]), built once per spec from the
//! thread's folders, its profile's `sandbox` table and `[sandbox]`, and raised at spawn by
//! [`walls::Sandbox::wall`] (SECURITY.md, "What isolates threads").
//!
//! A thread's tree reads and writes its folder (or workspace, with a worktree's git dir), its
//! own CLI config dir, HOME and temp dir; it reads the system (`/etc` without its secrets), the
//! CLI's install and what `sandbox.read_only` and the profile's plugin folders add; nothing else.
//! It connects to the model gateway (or, with the gateway off, the upstream's port) and to what
//! its profile's `network` and `ports` allow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ::walls::{Connect, Limits, Walls};
use plugin_contract::ThreadId;

use super::{thread_workdir, Launcher, ProcessSpec};

use crate::config::{Config, Network, ProfileSandbox};

/// System folders every tree reads (those that exist).
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sys",
];

/// Devices every tree reads and writes.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// What of `/etc` no tree reads: password hashes, host keys, privileges, private keys, the
/// operator's own configuration.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "ssh",
    "sudoers",
    "sudoers.d",
    "ssl/private",
    "security/opasswd",
    "credstore",
    "credstore.encrypted",
    "harness",
    "NetworkManager/system-connections",
    "wireguard",
    "letsencrypt",
];

/// Everything the daemon needs to wall any thread's tree.
#[derive(Clone, Debug)]
pub struct WallPlan {
    /// Read by every tree.
    read_only: BTreeSet<PathBuf>,
    /// Read and written by every tree (devices, `sandbox.read_write`).
    read_write: BTreeSet<PathBuf>,
    /// Each profile's walls, every field set.
    profiles: BTreeMap<String, ProfileSandbox>,
    /// The walls of profiles made after the start (a Managed Agents session's), by name: their
    /// own `sandbox` over `[sandbox]`, as a configured profile's (their network is their
    /// environment's).
    made: Arc<Mutex<BTreeMap<String, ProfileSandbox>>>,
    /// The port children reach the model at: the gateway's, or the upstream's without it.
    model_port: Option<u16>,
    /// The daemon's own ports, closed even under `network = "open"`; the API's is added once
    /// it is bound.
    own_ports: Arc<Mutex<BTreeSet<u16>>>,
}

impl WallPlan {
    /// The plan of `config`'s daemon, whose CLI is `bin` (its install is read-only).
    pub fn new(config: &Config) -> WallPlan {
        let mut read_only: BTreeSet<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
        read_only.extend(etc_readable(Path::new("/etc")));
        read_only.insert(install_of(&config.claude.bin));
        read_only.extend(config.sandbox.read_only.iter().cloned());
        let mut read_write: BTreeSet<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
        read_write.extend(config.sandbox.read_write.iter().cloned());
        let mut profiles = BTreeMap::new();
        for name in config.profile_names() {
            let own = config
                .profiles
                .get(&name)
                .map(|p| p.sandbox.clone())
                .unwrap_or_default();
            let mut walls = config.sandbox.of(&own);
            if let Some(table) = config.profiles.get(&name) {
                read_only.extend(table.plugin_dirs.iter().cloned());
                for server in table.mcp_servers.values() {
                    // A stdio server's program (with its prefix: a venv, say) and the files
                    // its arguments name are read; an HTTP server's port is reached.
                    read_only.extend(program_dirs(&server.command, &server.args));
                    walls.ports.extend(server.url.as_deref().and_then(url_port));
                }
            }
            profiles.insert(name.clone(), walls);
        }
        let mut own_ports = BTreeSet::new();
        if config.bind.port() != 0 {
            own_ports.insert(config.bind.port());
        }
        if let Some(port) = config.db.as_deref().and_then(postgres_port) {
            own_ports.insert(port);
        }
        WallPlan {
            read_only,
            read_write,
            profiles,
            made: Arc::default(),
            model_port: None,
            own_ports: Arc::new(Mutex::new(own_ports)),
        }
    }

    /// Children reach the model at `port`.
    pub fn with_model_port(self, port: Option<u16>) -> WallPlan {
        WallPlan {
            model_port: port,
            ..self
        }
    }

    /// The walls of the profile `name`, made after the start: `walls`, every field set.
    pub fn add_made(&self, name: &str, walls: ProfileSandbox) {
        crate::sync::lock(&self.made).insert(name.to_owned(), walls);
    }

    /// Closes `port` (the API's, once bound) to every tree, whatever its network.
    pub fn close_port(&self, port: u16) {
        crate::sync::lock(&self.own_ports).insert(port);
    }

    /// The walls of a tree of `profile` whose own folders are `own` (read and written) and
    /// `read` (read only), and which reaches the model at `upstream_port` when the plan has no
    /// port of its own (the upstream a profile's environment names, with the gateway off).
    pub fn walls(
        &self,
        profile: &str,
        own: impl IntoIterator<Item = PathBuf>,
        read: impl IntoIterator<Item = PathBuf>,
        upstream_port: Option<u16>,
    ) -> Walls {
        let settings = (self.profiles.get(profile).cloned())
            .or_else(|| crate::sync::lock(&self.made).get(profile).cloned())
            .unwrap_or_default();
        let mut ports: BTreeSet<u16> = settings.ports.iter().copied().collect();
        ports.extend(self.model_port.or(upstream_port));
        let connect = match settings.network.unwrap_or(Network::None) {
            Network::None => Connect::Only(ports),
            Network::Web => {
                ports.extend([80, 443]);
                Connect::Only(ports)
            }
            Network::Open => {
                let mut closed = crate::sync::lock(&self.own_ports).clone();
                closed.retain(|port| !ports.contains(port));
                Connect::AllBut(closed)
            }
        };
        let mut read_write = self.read_write.clone();
        read_write.extend(own);
        let mut read_only = self.read_only.clone();
        read_only.extend(read);
        Walls {
            read_write,
            read_only,
            connect,
            limits: Limits {
                memory_mb: settings.memory_max_mb,
                processes: settings.max_processes,
                cpu_weight: settings.cpu_weight,
            },
        }
    }
}

/// A process's walls, raised: what confines its command, and its tree.
pub(super) type Raised = (Arc<dyn claude_cli::Confine>, Arc<::walls::Tree>);

/// Gives a [`::walls::Confinement`] to the CLI crate's command.
#[derive(Debug)]
struct Walled(Arc<::walls::Confinement>);

impl claude_cli::Confine for Walled {
    fn confine(&self, cmd: &mut std::process::Command) {
        self.0.clone().apply(cmd);
    }
}

impl Launcher {
    /// `spec` with its walls (none with `sandbox.enabled = false`): its folder (and a worktree's
    /// git dir), its config dir, HOME and temp dir read and written.
    pub(super) fn walled(&self, spec: ProcessSpec) -> ProcessSpec {
        if self.sandbox.is_none() {
            return spec;
        }
        let (home, tmp) = self.home_of(&spec.thread);
        let mut own = vec![spec.workdir.clone(), spec.config_dir.clone(), home, tmp];
        let mut read = Vec::new();
        if let Some(git) = worktree_git_dirs(&spec.workdir) {
            read.push(git.common);
            own.extend(git.written);
        }
        let upstream = self.profile(Some(&spec.profile)).ok().and_then(|profile| {
            let url = profile
                .env()
                .iter()
                .rev()
                .find(|(k, _)| k == "ANTHROPIC_BASE_URL")
                .map(|(_, v)| v.as_str())
                .unwrap_or("https://api.anthropic.com");
            url_port(url)
        });
        let walls = self.plan.walls(&spec.profile, own, read, upstream);
        ProcessSpec {
            walls: Some(walls),
            ..spec
        }
    }

    /// `thread`'s HOME and temp dir (not created).
    fn home_of(&self, thread: &ThreadId) -> (PathBuf, PathBuf) {
        let base = thread_workdir(&self.homes_dir, thread);
        (base.join("home"), base.join("tmp"))
    }

    /// Raises `spec`'s walls for a process about to start with `env`: its HOME and temp dir made
    /// and named in `env`, `PATH` kept to what it can read, its tree's cgroups made. Nothing
    /// without walls.
    pub(super) fn wall_in(
        &self,
        spec: &ProcessSpec,
        env: &mut Vec<(String, String)>,
    ) -> std::io::Result<Option<Raised>> {
        let (Some(sandbox), Some(walls)) = (&self.sandbox, &spec.walls) else {
            return Ok(None);
        };
        // Its own HOME and temp dir, made before the walls name them.
        let (home, tmp) = self.home_of(&spec.thread);
        crate::private_fs::create_dir(&home)?;
        crate::private_fs::create_dir(&tmp)?;
        let path = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| walled_path(v, walls));
        env.retain(|(k, _)| !matches!(k.as_str(), "HOME" | "TMPDIR" | "PATH"));
        env.push(("HOME".into(), home.display().to_string()));
        env.push(("TMPDIR".into(), tmp.display().to_string()));
        env.extend(path.map(|path| ("PATH".to_owned(), path)));
        let (confinement, tree) = sandbox.wall(&tree_name(&spec.thread), walls)?;
        let confine: Arc<dyn claude_cli::Confine> = Arc::new(Walled(Arc::new(confinement)));
        Ok(Some((confine, Arc::new(tree))))
    }
}

/// What git in a worktree reads and writes of its repository's git dir.
struct WorktreeGit {
    /// The repository's `.git`: read (its config and hooks are the operator's).
    common: PathBuf,
    /// Its objects, refs and logs, and the worktree's own git dir: written (a commit).
    written: Vec<PathBuf>,
}

/// The git dirs of the worktree at `workdir`, from its `.git` file; `None` for any other folder.
fn worktree_git_dirs(workdir: &Path) -> Option<WorktreeGit> {
    let text = std::fs::read_to_string(workdir.join(".git")).ok()?;
    let gitdir = workdir
        .join(text.strip_prefix("gitdir:")?.trim())
        .canonicalize()
        .ok()?;
    let common = std::fs::read_to_string(gitdir.join("commondir"))
        .ok()
        .and_then(|c| gitdir.join(c.trim()).canonicalize().ok())?;
    let mut written: Vec<PathBuf> = ["objects", "refs", "logs"]
        .iter()
        .map(|dir| common.join(dir))
        .collect();
    written.push(gitdir);
    Some(WorktreeGit { common, written })
}

/// A walled tree's name among the live ones: the thread's, and a count.
fn tree_name(thread: &ThreadId) -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = thread_workdir(Path::new(""), thread);
    format!("{}-{n}", name.display())
}

/// What of `etc` every tree may read: each entry but [`ETC_SECRETS`], looking inside those that
/// hold a secret deeper down.
fn etc_readable(etc: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, relative: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let inside = relative.join(entry.file_name());
            let name = inside.to_string_lossy();
            if ETC_SECRETS.contains(&name.as_ref()) {
                continue;
            }
            let holds_secret = ETC_SECRETS
                .iter()
                .any(|secret| Path::new(secret).starts_with(&inside));
            if holds_secret && entry.path().is_dir() {
                walk(&entry.path(), &inside, out);
            } else {
                out.push(entry.path());
            }
        }
    }
    let mut out = Vec::new();
    walk(etc, Path::new(""), &mut out);
    out
}

/// What a stdio MCP server needs to read: the folder of its program (an absolute path, and the
/// one it links to), that folder's parent when it is a `bin` (a venv or a prefix, whose
/// libraries it loads), and each absolute path among its arguments that is there (a script).
fn program_dirs(command: &Path, args: &[String]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let real = command.canonicalize().ok();
    for program in std::iter::once(command).chain(real.as_deref()) {
        if let Some(folder) = program.parent().filter(|_| program.is_absolute()) {
            dirs.push(folder.to_path_buf());
            if folder.file_name().is_some_and(|name| name == "bin") {
                dirs.extend(folder.parent().map(Path::to_path_buf));
            }
        }
    }
    dirs.extend(
        args.iter()
            .map(PathBuf::from)
            .filter(|arg| arg.is_absolute() && arg.exists()),
    );
    dirs
}

/// The CLI's install: the folder holding the `node_modules` its binary resolves into, else the
/// binary's own folder.
fn install_of(bin: &Path) -> PathBuf {
    let real = bin
        .canonicalize()
        .or_else(|_| which(bin))
        .unwrap_or_else(|_| bin.to_path_buf());
    real.ancestors()
        .find(|dir| dir.file_name().is_some_and(|name| name == "node_modules"))
        .and_then(Path::parent)
        .or_else(|| real.parent())
        .map(Path::to_path_buf)
        .unwrap_or(real)
}

/// `bin` found on the daemon's `PATH`, resolved.
fn which(bin: &Path) -> std::io::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(bin))
        .find(|candidate| candidate.is_file())
        .map(|found| found.canonicalize().unwrap_or(found))
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
}

/// The port of a `postgres://` URL (5432 when it names none).
fn postgres_port(url: &str) -> Option<u16> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))?;
    let host = rest.rsplit('@').next()?.split(['/', '?']).next()?;
    Some(
        host.rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or(5432),
    )
}

/// The port of an `http(s)://` URL (80 or 443 when it names none).
pub fn url_port(url: &str) -> Option<u16> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let port = match authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]:81`.
        Some(v6) => v6.split_once(']')?.1.strip_prefix(':'),
        None => authority.rsplit_once(':').map(|(_, port)| port),
    };
    match port {
        Some(port) => port.parse().ok(),
        None => match scheme {
            "https" => Some(443),
            "http" => Some(80),
            _ => None,
        },
    }
}

/// `PATH` with the folders a tree cannot read left out (a shim under the operator's home would
/// be found first and then refused).
pub fn walled_path(path: &str, walls: &Walls) -> String {
    let readable = |dir: &Path| {
        walls
            .read_only
            .iter()
            .chain(&walls.read_write)
            .any(|root| dir.starts_with(root))
    };
    std::env::split_paths(path)
        .filter(|dir| readable(dir))
        .map(|dir| dir.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etc_is_readable_but_for_its_secrets() {
        let etc = tempfile::tempdir().expect("tmp");
        for dir in ["ssl/certs", "ssl/private", "ssh", "apt"] {
            std::fs::create_dir_all(etc.path().join(dir)).expect("dir");
        }
        for file in ["shadow", "passwd", "hosts"] {
            std::fs::write(etc.path().join(file), "x").expect("file");
        }
        let mut readable: Vec<String> = etc_readable(etc.path())
            .iter()
            .map(|p| {
                p.strip_prefix(etc.path())
                    .expect("inside")
                    .display()
                    .to_string()
            })
            .collect();
        readable.sort();
        assert_eq!(readable, ["apt", "hosts", "passwd", "ssl/certs"]);
    }

    #[test]
    fn ports_of_urls() {
        assert_eq!(url_port("http://127.0.0.1:4000/v1"), Some(4000));
        assert_eq!(url_port("https://api.anthropic.com"), Some(443));
        assert_eq!(url_port("http://[::1]:81"), Some(81));
        assert_eq!(url_port("http://[::1]"), Some(80));
        assert_eq!(
            postgres_port("postgres://u:p@127.0.0.1:6000/db"),
            Some(6000)
        );
        assert_eq!(postgres_port("postgres://localhost/db"), Some(5432));
        assert_eq!(postgres_port("sqlite://x"), None);
    }

    #[test]
    fn path_keeps_what_the_walls_let_a_tree_read() {
        let walls = Walls {
            read_only: [PathBuf::from("/usr"), PathBuf::from("/bin")]
                .into_iter()
                .collect(),
            ..Walls::default()
        };
        assert_eq!(
            walled_path("/root/.pyenv/shims:/usr/local/bin:/usr/bin:/bin", &walls),
            "/usr/local/bin:/usr/bin:/bin"
        );
    }
}
