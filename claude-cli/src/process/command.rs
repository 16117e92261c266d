//! The command line a process of a [`Launch`] starts with: its argv, folder and whole
//! environment, nothing of the host's inherited, and its walls ([`Confine`]).
//! [`super::CliProcess::spawn`] adds its pipes and process group; the bench replays a daemon's
//! start with it, exactly.

use crate::protocol::{self, SpawnOptions};

use super::Launch;

impl Launch {
    /// `claude` with `options` (resuming `resume` when given) in the launch's folder, with its
    /// environment and `CLAUDE_CONFIG_DIR`, walled in by its [`Confine`], and no stdio or process
    /// group yet.
    pub fn command(&self, options: &SpawnOptions, resume: Option<&str>) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(protocol::cli_args(options, resume))
            .current_dir(&self.workdir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("CLAUDE_CONFIG_DIR", &self.config_dir)
            // A start that fails says why, as a `result` ([`crate::StartupFailure`]).
            .env("CLAUDE_CODE_STARTUP_FAILURE_RESULTS", "1");
        if self.managed_settings.is_some() {
            // The policy comes in `initialize`; the CLI starts no session without it.
            cmd.args(["--await-initialize", "--managed-settings-in-initialize"]);
        }
        if let Some(confine) = &self.confine {
            confine.confine(cmd.as_std_mut());
        }
        cmd
    }
}

/// What walls a process in: given its command, it arranges what the child does between fork and
/// exec, so everything the process starts inherits it.
pub trait Confine: Send + Sync + std::fmt::Debug {
    fn confine(&self, cmd: &mut std::process::Command);
}
