//! [`ProcessSpec`]: how and where one thread's process runs, as one value.
//!
//! The launcher builds it once from the thread's row ([`super::Launcher::spec`]); the pool takes
//! it whole: a process is started from it, a warm process serves a turn only when its spec fits
//! the turn's ([`ProcessSpec::fit`]), and a parked spare is claimed by it. Nothing downstream
//! recomputes the folder or the options from the thread id.

use std::path::PathBuf;

use claude_cli::SpawnOptions;
use plugin_contract::{CliSessionId, ThreadId};

/// How and where one thread's process runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSpec {
    /// The thread the process serves: the pool's key.
    pub thread: ThreadId,
    /// The thread's profile (`[profiles.NAME]`, or `standard`/`lean`): the process's
    /// environment and external MCP servers; its options are already in `options`.
    pub profile: String,
    /// The folder the process works in. The CLI keys its project (transcripts, memory) by this
    /// path, so it also decides which sessions a `--resume` finds.
    pub workdir: PathBuf,
    /// The CLI's config dir (`CLAUDE_CONFIG_DIR`): its settings, and each project's data under
    /// `projects/`. The daemon's, except for a thread on a `path` workspace, which another
    /// thread may share: that one has a config dir of its own, so its project data is its own.
    pub config_dir: PathBuf,
    /// The command-line options; `model` is the one the turn asks for.
    pub options: SpawnOptions,
    /// The profile's external MCP servers the process runs, by name (sorted); `None`: all of
    /// them. A turn that asks for fewer has the others switched off in place.
    pub mcp_servers: Option<Vec<String>>,
    /// The CLI session to resume; `None` starts a fresh one.
    pub resume: Option<CliSessionId>,
    /// The W3C `traceparent` of the turn a process is started for: its `TRACEPARENT`. Not part
    /// of what a process fits.
    pub traceparent: Option<String>,
    /// What the process's tree may touch, and its limits (`None` with `sandbox.enabled =
    /// false`): raised at spawn, inherited by everything the process starts.
    pub walls: Option<walls::Walls>,
    /// What bounds each of its turns: its profile's.
    pub limits: TurnLimits,
}

/// What bounds each turn of a process, from its profile. Not part of what a process fits: a
/// profile's limits are its own, and the profile is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnLimits {
    /// Most tool calls in one turn (its `max_tool_calls`, else `turn.max_tool_calls`); the
    /// process's `--max-turns` is one above it, so a loop of built-in tools stops too.
    pub max_tool_calls: u32,
    /// Longest the CLI may stay silent while no tool call of ours runs (`turn.idle_timeout`).
    pub idle_timeout: std::time::Duration,
}

impl Default for TurnLimits {
    /// `[turn]`'s defaults.
    fn default() -> Self {
        TurnLimits {
            max_tool_calls: 200,
            idle_timeout: std::time::Duration::from_secs(120),
        }
    }
}

/// How a running process fits a turn's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    Yes,
    /// Everything but the model, the permission mode or the external MCP servers, which the
    /// process can switch in place (`set_model`, `set_permission_mode`, `mcp_set_servers`).
    Switch,
    /// Another thread, folder or start option: the turn needs another process.
    No,
}

/// What of a running process can change in place: its model, its permission mode and its
/// external MCP servers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Switchable {
    pub model: Option<String>,
    pub permission_mode: Option<String>,
    pub mcp_servers: Option<Vec<String>>,
}

impl Switchable {
    /// What `spec` asks for.
    pub fn of(spec: &ProcessSpec) -> Switchable {
        Switchable {
            model: spec.options.model.clone(),
            permission_mode: spec.options.permission_mode.clone(),
            mcp_servers: spec.mcp_servers.clone(),
        }
    }
}

impl ProcessSpec {
    /// How a process started from this spec, on `now` (its model, permission mode and external
    /// MCP servers, which may have been switched since), fits a turn that asks for `wanted`. Which session it
    /// resumed, and whether it forked one, do not matter once it runs: its session is the
    /// thread's.
    pub fn fit(&self, now: &Switchable, wanted: &ProcessSpec) -> Fit {
        let same_start = self.thread == wanted.thread
            && self.profile == wanted.profile
            && self.workdir == wanted.workdir
            && self.config_dir == wanted.config_dir
            && self.walls == wanted.walls
            && SpawnOptions {
                model: wanted.options.model.clone(),
                permission_mode: wanted.options.permission_mode.clone(),
                fork_session: wanted.options.fork_session,
                ..self.options.clone()
            } == wanted.options;
        if !same_start {
            Fit::No
        } else if *now == Switchable::of(wanted) {
            Fit::Yes
        } else {
            Fit::Switch
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(thread: &str) -> ProcessSpec {
        ProcessSpec {
            thread: ThreadId::from_string(thread),
            profile: "standard".into(),
            workdir: PathBuf::from(format!("/threads/{thread}")),
            config_dir: PathBuf::from("/claude"),
            options: SpawnOptions {
                model: Some("sonnet".into()),
                ..Default::default()
            },
            mcp_servers: None,
            resume: None,
            traceparent: None,
            walls: None,
            limits: TurnLimits::default(),
        }
    }

    fn on(model: &str, mode: Option<&str>) -> Switchable {
        Switchable {
            model: Some(model.into()),
            permission_mode: mode.map(str::to_owned),
            mcp_servers: None,
        }
    }

    #[test]
    fn a_process_fits_its_own_spec_whatever_session_it_resumed() {
        let started = ProcessSpec {
            resume: Some(CliSessionId::from_string("s-1")),
            options: SpawnOptions {
                fork_session: true,
                ..spec("t").options
            },
            ..spec("t")
        };
        assert_eq!(started.fit(&on("sonnet", None), &spec("t")), Fit::Yes);
    }

    #[test]
    fn only_the_model_the_permission_mode_and_the_mcp_servers_change_in_place() {
        let started = spec("t");
        let with = |model: &str, mode: Option<&str>| ProcessSpec {
            options: SpawnOptions {
                model: Some(model.into()),
                permission_mode: mode.map(str::to_owned),
                ..started.options.clone()
            },
            ..started.clone()
        };
        let opus = with("opus", None);
        assert_eq!(started.fit(&on("sonnet", None), &opus), Fit::Switch);
        // After `set_model`, the process is on the model asked for.
        assert_eq!(started.fit(&on("opus", None), &opus), Fit::Yes);
        let plan = with("sonnet", Some("plan"));
        assert_eq!(started.fit(&on("sonnet", None), &plan), Fit::Switch);
        assert_eq!(started.fit(&on("sonnet", Some("plan")), &plan), Fit::Yes);
        // And back.
        assert_eq!(
            started.fit(&on("sonnet", Some("plan")), &started),
            Fit::Switch
        );
        let schema = ProcessSpec {
            options: SpawnOptions {
                json_schema: Some("{}".into()),
                ..started.options.clone()
            },
            ..started.clone()
        };
        assert_eq!(started.fit(&on("sonnet", None), &schema), Fit::No);
        let fewer_servers = ProcessSpec {
            mcp_servers: Some(vec!["tickets".into()]),
            ..started.clone()
        };
        assert_eq!(
            started.fit(&on("sonnet", None), &fewer_servers),
            Fit::Switch
        );
        let switched = Switchable {
            mcp_servers: Some(vec!["tickets".into()]),
            ..on("sonnet", None)
        };
        assert_eq!(started.fit(&switched, &fewer_servers), Fit::Yes);
        assert_eq!(started.fit(&switched, &started), Fit::Switch, "and back");
    }

    #[test]
    fn another_thread_profile_or_folder_never_fits() {
        let started = spec("t");
        let now = on("sonnet", None);
        assert_eq!(started.fit(&now, &spec("u")), Fit::No);
        let elsewhere = ProcessSpec {
            workdir: PathBuf::from("/srv/repo"),
            ..spec("t")
        };
        assert_eq!(started.fit(&now, &elsewhere), Fit::No);
        let reviewer = ProcessSpec {
            profile: "reviewer".into(),
            ..spec("t")
        };
        assert_eq!(started.fit(&now, &reviewer), Fit::No);
    }
}
