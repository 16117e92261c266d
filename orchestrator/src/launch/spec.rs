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
    /// The CLI session to resume; `None` starts a fresh one.
    pub resume: Option<CliSessionId>,
}

/// How a running process fits a turn's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    Yes,
    /// Everything but the model: `set_model` can switch it in place.
    OtherModel,
    /// Another thread, folder or start option: the turn needs another process.
    No,
}

impl ProcessSpec {
    /// How a process started from this spec, on `model` now (`set_model` may have changed it),
    /// fits a turn that asks for `wanted`. Which session it resumed, and whether it forked one,
    /// do not matter once it runs: its session is the thread's.
    pub fn fit(&self, model: &Option<String>, wanted: &ProcessSpec) -> Fit {
        let same_start = self.thread == wanted.thread
            && self.profile == wanted.profile
            && self.workdir == wanted.workdir
            && self.config_dir == wanted.config_dir
            && SpawnOptions {
                model: wanted.options.model.clone(),
                fork_session: wanted.options.fork_session,
                ..self.options.clone()
            } == wanted.options;
        if !same_start {
            Fit::No
        } else if *model == wanted.options.model {
            Fit::Yes
        } else {
            Fit::OtherModel
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
            resume: None,
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
        let model = started.options.model.clone();
        assert_eq!(started.fit(&model, &spec("t")), Fit::Yes);
    }

    #[test]
    fn only_the_model_can_change_in_place() {
        let started = spec("t");
        let opus = ProcessSpec {
            options: SpawnOptions {
                model: Some("opus".into()),
                ..started.options.clone()
            },
            ..started.clone()
        };
        assert_eq!(started.fit(&Some("sonnet".into()), &opus), Fit::OtherModel);
        // After `set_model`, the process is on the model asked for.
        assert_eq!(started.fit(&Some("opus".into()), &opus), Fit::Yes);
        let schema = ProcessSpec {
            options: SpawnOptions {
                json_schema: Some("{}".into()),
                ..started.options.clone()
            },
            ..started.clone()
        };
        assert_eq!(started.fit(&Some("sonnet".into()), &schema), Fit::No);
    }

    #[test]
    fn another_thread_or_folder_never_fits() {
        let started = spec("t");
        let model = started.options.model.clone();
        assert_eq!(started.fit(&model, &spec("u")), Fit::No);
        let elsewhere = ProcessSpec {
            workdir: PathBuf::from("/srv/repo"),
            ..spec("t")
        };
        assert_eq!(started.fit(&model, &elsewhere), Fit::No);
    }
}
