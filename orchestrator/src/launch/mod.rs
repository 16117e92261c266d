//! How the daemon starts `claude` children: where each works, what it sees of the environment,
//! and its command-line options, all derived from [`Config`] once. [`Launcher::spec`] turns a
//! thread's row into the [`ProcessSpec`] the pool starts (and matches) processes by; nothing
//! else derives a process's folder or options.
//!
//! Files: `spec.rs` ([`ProcessSpec`], with its profile's `TurnLimits`), `profile.rs`
//! (`AgentProfile`), `walls.rs` (`WallPlan`: each spec's `walls::Walls` from its folders, its
//! profile and `[sandbox]`); this one: the folder, containment, stored transcripts written back,
//! a gateway token per process.
//!
//! **Invariant (isolation, SECURITY.md):** a thread's process works in a folder of its own
//! (`<claude.workdir>/<thread id>`, mode 0700), so each thread is its own CLI project with its own
//! transcripts and memory; auto-memory is off unless configured; deny rules keep the file tools
//! out of the CLI config dir; the environment is an allow-list; the CLI's own tools that reach
//! other sessions or start turns by themselves are off ([`CONTAINED_TOOLS`],
//! [`CONTAINMENT_SWITCHES`]), in every profile, whatever `claude.env` says; every other built-in
//! tool of the pinned CLI is known to act within its turn ([`IN_TURN_TOOLS`]).
//!
//! The folder is the CLI's project: the CLI keys its transcripts and memory folder by the
//! folder's path (`<config dir>/projects/<key>/`), so the folder decides where a session's files
//! live and which session a `--resume` finds. Writing a stored transcript back there
//! ([`Launcher::restore_transcript`]) makes 0600 files, each written whole and renamed, the main
//! transcript last.
//!
//! Besides: the environment from `claude.pass_env` + `claude.env` (the containment switches set
//! last, so `claude.env` cannot undo them), `--max-turns`, `--session-mirror`, and our MCP server
//! declared in `initialize` with its manifest (`initializeResult` + `toolsListResult`), so the
//! CLI needs no MCP handshake before the first turn.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use claude_cli::{Launch, SdkMcpServer, SpawnOptions};
use plugin_contract::{CliSessionId, ThreadId};

use crate::config::{Config, Profile, ProfileConfig};
use crate::mcp::SERVER_NAME;
use crate::store::{NewThread, ThreadRow};

mod containment;
pub mod profile;
mod spec;
pub mod walls;

use containment::{contained_tools, containment_switches};
pub use containment::{
    CONTAINED_TOOLS, CONTAINMENT_SWITCHES, IN_TURN_TOOLS, LEAN_SWITCHES, SCHEDULING_TOOLS,
};
pub use profile::{AgentProfile, ProfileInfo};
pub use walls::WallPlan;

pub use spec::{Fit, ProcessSpec, Switchable, TurnLimits};

/// Everything needed to start a process for any thread.
#[derive(Clone, Debug)]
pub struct Launcher {
    bin: PathBuf,
    config_dir: PathBuf,
    threads_dir: PathBuf,
    ready_timeout: Duration,
    /// Our in-process MCP server, declared in every `initialize` with its manifest.
    mcp_server: SdkMcpServer,
    /// Every configured profile by name (see [`profile`]).
    profiles: BTreeMap<String, Arc<AgentProfile>>,
    /// Profiles made while the daemon runs ([`Launcher::make_profile`]: an agent of the Managed
    /// Agents API at one version), by name.
    made: Arc<Mutex<BTreeMap<String, Arc<AgentProfile>>>>,
    /// What making a profile needs: the daemon's configuration, and the longest bound of our
    /// MCP server's tools.
    config: Arc<Config>,
    longest_tool_call: Duration,
    /// The profile of threads that ask for none (`claude.profile`).
    default_profile: &'static str,
    /// `claude.scheduling_tools`: the CLI may start turns by itself.
    scheduling_tools: bool,
    /// The model gateway that issues each process its token ([`Launcher::with_gateway`]).
    gateway: Option<crate::gateway::Gateway>,
    /// Each thread's HOME and temp dir: `<homes>/<thread>/{home,tmp}`.
    homes_dir: PathBuf,
    /// What each thread's tree may touch ([`walls`]).
    plan: WallPlan,
    /// The machine's walls; `None` with `sandbox.enabled = false`.
    sandbox: Option<Arc<::walls::Sandbox>>,
}

/// A process ready to start: how, its token at the model gateway (to keep while the process
/// lives), and its walled tree (to watch while it lives, and release after).
pub struct Launched {
    pub launch: Launch,
    pub pass: Option<crate::gateway::Pass>,
    pub tree: Option<Arc<::walls::Tree>>,
}

/// A thread whose profile the daemon no longer has: its turns are refused rather than run with
/// another profile's powers.
#[derive(Clone, Debug, thiserror::Error)]
#[error("the thread's profile `{0}` is not configured on this daemon")]
pub struct UnknownProfile(pub String);

impl Launcher {
    /// Prepares the CLI's directories (mode 0700) and every profile's options, reading the
    /// secrets of their MCP servers. `manifest` is our MCP server's handshake
    /// ([`crate::mcp::McpAdapter::manifest`]); `longest_tool_call` the longest any of its tools
    /// may run ([`crate::mcp::ToolRegistry::longest_timeout`]), which the CLI's own limit on a
    /// call must clear; `approval_denies` are each profile's approval deny rules in the CLI's
    /// terms (`approvals::policy::Policy::cli_deny_rules`), added to its children's
    /// `permissions.deny`.
    pub fn new(
        config: &Config,
        manifest: serde_json::Value,
        longest_tool_call: Duration,
        approval_denies: &BTreeMap<String, Vec<String>>,
    ) -> std::io::Result<Launcher> {
        let config_dir = config.claude_config_dir();
        let threads_dir = config.claude_workdir();
        let homes_dir = config.data_dir.join("homes");
        crate::private_fs::create_dir(&config_dir)?;
        crate::private_fs::create_dir(&threads_dir)?;
        crate::private_fs::create_dir(&homes_dir)?;
        let daemon_env = crate::environment::var;
        let profiles = profile::all(config, longest_tool_call, approval_denies, &daemon_env)
            .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err.to_string()))?
            .into_iter()
            .map(|(name, profile)| (name, Arc::new(profile)))
            .collect();
        Ok(Launcher {
            bin: config.claude.bin.clone(),
            config_dir,
            threads_dir,
            ready_timeout: config.turn.ready_timeout,
            mcp_server: SdkMcpServer {
                name: SERVER_NAME.to_owned(),
                timeout_ms: mcp_timeout_ms(longest_tool_call),
                manifest: Some(manifest),
            },
            profiles,
            made: Arc::default(),
            config: Arc::new(config.clone()),
            longest_tool_call,
            default_profile: profile::default_name(config),
            scheduling_tools: config.claude.scheduling_tools,
            gateway: None,
            homes_dir,
            plan: WallPlan::new(config),
            sandbox: None,
        })
    }

    /// Its processes talk to the model through `gateway`, each with a token of its own (the
    /// profiles kept their upstreams out of the environment when `gateway.enabled`).
    pub fn with_gateway(self, gateway: crate::gateway::Gateway) -> Launcher {
        let port = walls::url_port(gateway.url());
        Launcher {
            gateway: Some(gateway),
            plan: self.plan.clone().with_model_port(port),
            ..self
        }
    }

    /// Its processes' trees are walled in by `sandbox` (`sandbox.enabled`).
    pub fn with_sandbox(self, sandbox: Arc<::walls::Sandbox>) -> Launcher {
        Launcher {
            sandbox: Some(sandbox),
            ..self
        }
    }

    /// The walls' plan: the API's port is closed to every tree once bound
    /// ([`WallPlan::close_port`]).
    pub fn wall_plan(&self) -> &WallPlan {
        &self.plan
    }

    /// The machine's walls, when they are on.
    pub fn sandbox(&self) -> Option<&Arc<::walls::Sandbox>> {
        self.sandbox.as_ref()
    }

    /// The profile `name` (the default when `None`), or why there is none.
    pub fn profile(&self, name: Option<&str>) -> Result<Arc<AgentProfile>, UnknownProfile> {
        let name = name.unwrap_or(self.default_profile);
        if let Some(profile) = self.profiles.get(name) {
            return Ok(profile.clone());
        }
        crate::sync::lock(&self.made)
            .get(name)
            .cloned()
            .ok_or_else(|| UnknownProfile(name.to_owned()))
    }

    /// Makes the profile `name` from `table`, as a `[profiles.NAME]` table would be, with the
    /// tools its threads' client runs (`client_tools`), unless it is there already (a profile
    /// made once does not change: its name says its version); `denies` are its approval deny
    /// rules in the CLI's terms. A configured profile's name cannot be taken.
    pub fn make_profile(
        &self,
        name: &str,
        table: &ProfileConfig,
        denies: &[String],
        client_tools: Arc<crate::mcp::ClientTools>,
    ) -> Result<Arc<AgentProfile>, crate::config::ConfigError> {
        if let Ok(made) = self.profile(Some(name)) {
            return Ok(made);
        }
        let profile = AgentProfile::build(
            &self.config,
            name,
            Some(table),
            Profile::Standard,
            self.longest_tool_call,
            denies,
            &crate::environment::var,
        )?;
        // Its MCP servers run without asking only as its table allows them.
        let allowed = table.allowed_tools.as_deref().unwrap_or_default();
        let asked: Vec<String> = (table.mcp_servers.keys())
            .map(|server| format!("mcp__{server}"))
            .filter(|tool| !allowed.contains(tool))
            .collect();
        let profile = Arc::new(profile.asking_for(&asked).with_client_tools(client_tools));
        // Its walls are the table's over `[sandbox]`; an MCP server of its own opens no port
        // (its network says what it reaches).
        self.plan
            .add_made(name, self.config.sandbox.of(&table.sandbox));
        let mut made = crate::sync::lock(&self.made);
        Ok(made.entry(name.to_owned()).or_insert(profile).clone())
    }

    /// Every profile, by name.
    pub fn profiles(&self) -> impl Iterator<Item = &Arc<AgentProfile>> {
        self.profiles.values()
    }

    /// The spec of `thread`'s process on `model` (its profile's default model when `None`): a
    /// process started for one `outputSchema` never serves a turn that wants another; a fork
    /// with no session of its own yet forks the one it came from.
    pub fn spec(
        &self,
        thread: &ThreadRow,
        model: Option<String>,
    ) -> Result<ProcessSpec, UnknownProfile> {
        let forking = thread.cli_session_id.is_none() && thread.forked_session.is_some();
        let profile = self.profile(thread.profile.as_deref())?;
        let mut spec = fresh_spec(
            self,
            &profile,
            &thread.id,
            model,
            thread.output_schema.as_ref(),
        );
        spec.workdir = self.dirs_of(thread).0;
        spec.options.fork_session = forking;
        spec.resume = thread
            .cli_session_id
            .clone()
            .or_else(|| thread.forked_session.clone());
        Ok(self.walled(spec))
    }

    /// The spec of a thread about to be created from `new`, were its id `thread` (the id a
    /// parked spare was started for) and, for a worktree thread, its folder `worktree`.
    pub fn new_thread_spec(
        &self,
        thread: &ThreadId,
        new: &NewThread,
        worktree: Option<&Path>,
    ) -> Result<ProcessSpec, UnknownProfile> {
        let profile = self.profile(new.profile.as_deref())?;
        let mut spec = fresh_spec(
            self,
            &profile,
            thread,
            new.model.clone(),
            new.output_schema.as_ref(),
        );
        if let Some(worktree) = worktree {
            spec.workdir = worktree.to_path_buf();
        }
        Ok(self.walled(spec))
    }

    /// A parked spare's spec: the default profile's options, in the folder of the thread id
    /// reserved for it.
    pub fn spare_spec(&self, thread: &ThreadId) -> ProcessSpec {
        let profile = &self.profiles[self.default_profile];
        self.walled(fresh_spec(self, profile, thread, None, None))
    }

    /// The spec of a spare parked for the next worktree thread of `profile`: its options, in
    /// the worktree parked for it.
    pub fn worktree_spare_spec(
        &self,
        thread: &ThreadId,
        profile: &str,
        worktree: PathBuf,
    ) -> Result<ProcessSpec, UnknownProfile> {
        let profile = self.profile(Some(profile))?;
        Ok(self.walled(ProcessSpec {
            workdir: worktree,
            ..fresh_spec(self, &profile, thread, None, None)
        }))
    }

    /// How a process of `spec` starts, its token at the model gateway, and its walled tree.
    /// Creates a thread's own folder (mode 0700) and config dir, and with walls its HOME and
    /// temp dir; a workspace must be there already (`NotFound` otherwise: never another folder).
    pub fn launch(&self, spec: &ProcessSpec) -> std::io::Result<Launched> {
        if spec.workdir.starts_with(&self.threads_dir) {
            crate::private_fs::create_dir(&spec.workdir)?;
        } else if !spec.workdir.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the workspace {} is not there", spec.workdir.display()),
            ));
        }
        crate::private_fs::create_dir(&spec.config_dir)?;
        self.share_login(&spec.config_dir)?;
        let profile = self
            .profile(Some(&spec.profile))
            .map_err(|err| std::io::Error::new(std::io::ErrorKind::NotFound, err.to_string()))?;
        let mut env = profile.env().to_vec();
        let pass = match (&self.gateway, profile.upstream()) {
            (Some(gateway), Some(upstream)) => {
                let headers = env
                    .iter()
                    .rev()
                    .find(|(k, _)| k == "ANTHROPIC_CUSTOM_HEADERS")
                    .map(|(_, v)| v.as_str());
                let (own, pass) = gateway.issue(&spec.thread, upstream, headers);
                env.retain(|(k, _)| !own.iter().any(|(name, _)| name == k));
                env.extend(own);
                Some(pass)
            }
            _ => None,
        };
        if let Some(parent) = &spec.traceparent {
            env.push(("TRACEPARENT".into(), parent.clone()));
        }
        let (confine, tree) = self.wall_in(spec, &mut env)?.unzip();
        let launch = Launch {
            bin: self.bin.clone(),
            config_dir: spec.config_dir.clone(),
            workdir: spec.workdir.clone(),
            env,
            ready_timeout: self.ready_timeout,
            sdk_mcp_servers: self.sdk_mcp_servers(&profile),
            external_mcp_servers: profile
                .external_mcp_servers(spec.mcp_servers.as_deref())
                .filter(|servers| servers.0.as_object().is_some_and(|m| !m.is_empty())),
            agents: profile.agents().cloned(),
            hooks: claude_cli::Hooks {
                // The pool keeps a process with pending crons or background tasks alive.
                stop: self.scheduling_tools,
                // A skill's shell command is approved as a `Bash` call is (`approvals`).
                skill_shell: true,
            },
            confine,
            managed_settings: (self.config.claude.managed_settings.clone())
                .map(serde_json::Value::Object),
        };
        Ok(Launched { launch, pass, tree })
    }

    /// The in-process MCP servers of a process of `profile`: ours, and with tools its client
    /// runs, theirs (`custom`), whose calls may wait as long as a turn may run.
    fn sdk_mcp_servers(&self, profile: &AgentProfile) -> Vec<SdkMcpServer> {
        let mut servers = vec![self.mcp_server.clone()];
        if let Some(tools) = profile.client_tools() {
            servers.push(SdkMcpServer {
                name: crate::mcp::CLIENT_SERVER.to_owned(),
                timeout_ms: mcp_timeout_ms(self.config.turn.timeout),
                manifest: Some(tools.manifest()),
            });
        }
        servers
    }

    /// A Claude login (`claude /login`) in the daemon's config dir, copied into a thread's own
    /// when it has none yet: each thread's CLI has a config dir of its own, and without an API
    /// key this is how it authenticates (the gateway passes its `Authorization` on).
    fn share_login(&self, config_dir: &Path) -> std::io::Result<()> {
        const LOGIN: &str = ".credentials.json";
        let login = self.config_dir.join(LOGIN);
        let own = config_dir.join(LOGIN);
        if config_dir != self.config_dir && login.is_file() && !own.exists() {
            std::fs::copy(&login, &own)?;
            std::fs::set_permissions(&own, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        }
        Ok(())
    }

    /// Where `thread`'s processes work and keep their CLI state: its workspace, else its own
    /// folder; its CLI config dir (settings, sessions' transcripts) is its own.
    fn dirs_of(&self, thread: &ThreadRow) -> (PathBuf, PathBuf) {
        let config_dir = self.config_dir_of(&thread.id);
        match thread.workspace.as_deref() {
            None => (self.folder_of(&thread.id), config_dir),
            Some(workspace) => (workspace.path().to_path_buf(), config_dir),
        }
    }

    /// `thread`'s own CLI config dir: `<claude config dir>/threads/<thread id>`.
    fn config_dir_of(&self, thread: &ThreadId) -> PathBuf {
        thread_workdir(&self.config_dir.join("threads"), thread)
    }

    /// Removes what is on disk of a deleted thread: its CLI config dir (the sessions'
    /// transcripts), HOME and temp dir and, when it has no workspace, its own folder (a workspace goes as
    /// `workspaces.on_archive` says, elsewhere). What is gone already is fine.
    pub fn forget(&self, thread: &ThreadRow) -> std::io::Result<()> {
        let (workdir, config_dir) = self.dirs_of(thread);
        let mut doomed = vec![config_dir, thread_workdir(&self.homes_dir, &thread.id)];
        if thread.workspace.is_none() {
            doomed.push(workdir);
        }
        for dir in doomed {
            match std::fs::remove_dir_all(&dir) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        Ok(())
    }

    /// Where `thread`'s own folder is (not created).
    fn folder_of(&self, thread: &ThreadId) -> PathBuf {
        thread_workdir(&self.threads_dir, thread)
    }

    /// Copies the CLI's transcript of `session` from the project of `from`'s process to that of
    /// `to`'s (each folder is its own CLI project), so that a process of `to` can `--resume` it.
    /// False when the CLI no longer has the session.
    pub fn copy_session(
        &self,
        from: &ProcessSpec,
        to: &ProcessSpec,
        session: &CliSessionId,
    ) -> std::io::Result<bool> {
        let file = format!("{}.jsonl", session.as_str());
        let source = project_dir(from).join(&file);
        if !source.is_file() {
            return Ok(false);
        }
        let target = project_dir(to);
        crate::private_fs::create_dir(&target)?;
        std::fs::copy(&source, target.join(&file))?;
        Ok(true)
    }

    /// True when the CLI has `session`'s transcript in the project of `spec`'s process: a
    /// `--resume` of it from there finds it.
    pub fn has_session(&self, spec: &ProcessSpec, session: &CliSessionId) -> bool {
        session_file(spec, session).is_file()
    }

    /// True when `spec`'s project's copy of `session`'s transcript holds the entry `uuid` (a
    /// line that names it); false when it does not, or there is no copy.
    pub fn session_has_entry(
        &self,
        spec: &ProcessSpec,
        session: &CliSessionId,
        uuid: &str,
    ) -> std::io::Result<bool> {
        match std::fs::read_to_string(session_file(spec, session)) {
            Ok(text) => Ok(text.lines().any(|line| line.contains(uuid))),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Writes a stored transcript back into the CLI project of `spec`'s process, so that it can
    /// `--resume` it: each `(file, line)` appended, in order, to `file` inside the project
    /// folder (see [`write_transcript`]).
    pub fn restore_transcript<'a>(
        &self,
        spec: &ProcessSpec,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> std::io::Result<usize> {
        write_transcript(&project_dir(spec), entries)
    }

    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// True when the CLI may start turns by itself (`claude.scheduling_tools`).
    pub fn scheduling_tools(&self) -> bool {
        self.scheduling_tools
    }

    /// Bound on a process becoming ready (`turn.ready_timeout`).
    pub fn ready_timeout(&self) -> Duration {
        self.ready_timeout
    }
}

/// A new thread's spec on `profile`: its own folder and config dir, no session yet, no walls
/// yet ([`Launcher::walled`]).
fn fresh_spec(
    launcher: &Launcher,
    profile: &AgentProfile,
    thread: &ThreadId,
    model: Option<String>,
    output_schema: Option<&serde_json::Value>,
) -> ProcessSpec {
    ProcessSpec {
        thread: thread.clone(),
        profile: profile.name().to_owned(),
        workdir: launcher.folder_of(thread),
        config_dir: launcher.config_dir_of(thread),
        options: SpawnOptions {
            json_schema: output_schema.map(crate::mcp::schema::for_cli),
            ..profile.options(model)
        },
        mcp_servers: None,
        resume: None,
        traceparent: None,
        walls: None,
        limits: profile.limits(),
    }
}

/// Where the CLI keeps the transcripts of `spec`'s project: `<config dir>/projects/<the
/// folder's path, every character but ASCII letters and digits as `-`>`.
fn project_dir(spec: &ProcessSpec) -> PathBuf {
    project_dir_of(&spec.workdir, &spec.config_dir)
}

/// The CLI's project folder for processes working in `workdir` with `config_dir`.
fn project_dir_of(workdir: &Path, config_dir: &Path) -> PathBuf {
    let key: String = workdir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    config_dir.join("projects").join(key)
}

fn session_file(spec: &ProcessSpec, session: &CliSessionId) -> PathBuf {
    project_dir(spec).join(format!("{}.jsonl", session.as_str()))
}

/// The working directory of `thread`'s processes: `<threads_dir>/<thread id>`, with anything but
/// ASCII letters, digits, `-` and `_` replaced, so an id can never name another folder.
pub fn thread_workdir(threads_dir: &Path, thread: &ThreadId) -> PathBuf {
    let name: String = thread
        .as_str()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    threads_dir.join(name)
}

/// Writes transcript files into the CLI project folder `project` (created 0700): each `(file,
/// line)` is one line of `project/<file>`, files in the order given (mode 0600). Returns the
/// number of files written.
///
/// Each file is written whole under a temporary name and then renamed, the files a session's
/// main transcript (`<id>.jsonl`) needs first and the main one last: a crash midway never
/// leaves a main transcript that a `--resume` would take for the whole session. A `file` that
/// is not a plain relative path (absolute, `..`) is refused.
pub fn write_transcript<'a>(
    project: &Path,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> std::io::Result<usize> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    let mut files: Vec<(&str, Vec<&str>)> = Vec::new();
    for (file, line) in entries {
        match files.iter_mut().find(|(name, _)| *name == file) {
            Some((_, lines)) => lines.push(line),
            None => files.push((file, vec![line])),
        }
    }
    // Sub-agents' files (`<id>/…`) before the main transcripts.
    files.sort_by_key(|(name, _)| !name.contains('/'));
    for (file, lines) in &files {
        let relative = Path::new(file);
        let plain = relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain || file.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not a path inside the project folder: {file}"),
            ));
        }
        let target = project.join(relative);
        if let Some(parent) = target.parent() {
            crate::private_fs::create_dir(parent)?;
        }
        let temporary = target.with_extension("jsonl.restoring");
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        let mut text = String::new();
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        out.write_all(text.as_bytes())?;
        out.sync_all()?;
        drop(out);
        std::fs::rename(&temporary, &target)?;
    }
    Ok(files.len())
}

/// What names the model the CLI's sub-agents run on (a profile's `subagent_model`).
pub const SUBAGENT_MODEL_ENV: &str = "CLAUDE_CODE_SUBAGENT_MODEL";

/// A child's whole environment: the variables of the daemon's own that `claude.pass_env` names,
/// then the CLI settings the daemon controls, then `claude.env`, then the containment switches.
/// `longest_tool_call` sets `MCP_TOOL_TIMEOUT` (as in [`Launcher::new`]).
pub fn child_env(
    config: &Config,
    longest_tool_call: Duration,
    daemon_env: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(String, String)> {
    let passes = |name: &str| {
        config
            .claude
            .pass_env
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pattern,
            })
    };
    let mut env: Vec<(String, String)> = daemon_env
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| passes(k) && k != "CLAUDECODE")
        .collect();
    env.extend([
        (
            "CLAUDE_CODE_MAX_RETRIES".to_owned(),
            config.claude.max_retries.to_string(),
        ),
        (
            "ENABLE_TOOL_SEARCH".to_owned(),
            config.claude.tool_search.to_string(),
        ),
        (
            "MCP_TOOL_TIMEOUT".to_owned(),
            mcp_timeout_ms(longest_tool_call).to_string(),
        ),
    ]);
    if !config.claude.auto_memory {
        env.push(("CLAUDE_CODE_DISABLE_AUTO_MEMORY".to_owned(), "1".to_owned()));
    }
    if config.claude.profile == Profile::Lean {
        env.extend(
            LEAN_SWITCHES
                .iter()
                .map(|k| ((*k).to_owned(), "1".to_owned())),
        );
    }
    env.extend(
        config
            .claude
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    env.extend(containment_switches(config).map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    env
}

/// The `--settings` of every child: auto-memory as configured, the approvals' deny rules (the
/// CLI checks them before the reads and commands it runs without asking us), and deny rules
/// that keep every thread's file tools out of the CLI's config dir, where all threads'
/// transcripts, memories, agent memory and task files live. In the CLI, a `Read(…)` path rule also governs Glob and Grep,
/// and an `Edit(…)` rule Write and NotebookEdit; deny rules are checked before every automatic
/// allowance (the current project's memory folder, which the CLI lets the model write even with
/// auto-memory off) and win over every allow rule and permission mode. `//` makes the path
/// absolute. They go in the settings JSON rather than `--disallowedTools`, whose list a space
/// or comma in the path would split.
fn session_settings(
    config: &Config,
    config_dir: &Path,
    approval_denies: &[String],
) -> serde_json::Value {
    let dir = config_dir.to_string_lossy();
    let dir = dir.trim_end_matches('/');
    let mut deny: Vec<String> = ["Read", "Edit"]
        .iter()
        .map(|tool| format!("{tool}(/{dir}/**)"))
        .collect();
    deny.extend(approval_denies.iter().cloned());
    serde_json::json!({
        "autoMemoryEnabled": config.claude.auto_memory,
        "permissions": {"deny": deny},
    })
}

/// The CLI's own per-call limit on our MCP server sits above the longest of ours (the adapter
/// answers first with a clear error), delegation's included.
fn mcp_timeout_ms(longest_tool_call: Duration) -> u64 {
    (longest_tool_call + Duration::from_secs(30)).as_millis() as u64
}

#[cfg(test)]
mod tests;
