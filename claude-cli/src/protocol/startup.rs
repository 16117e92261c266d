//! Start-up failures as values. With `CLAUDE_CODE_STARTUP_FAILURE_RESULTS` set (every
//! [`crate::Launch`] sets it), a CLI that cannot start writes one zeroed `error_during_execution`
//! `result` with a `startup_failure_reason` before it exits; `config_file_invalid`,
//! `org_config_required_unavailable` and `org_config_refused` are written even without it. The
//! reasons are the CLI's (2.1.332 knows 25); each is sorted by who can fix it, which is what a
//! host needs: whether to retry, and whom to tell.

use serde::Deserialize;

use super::TurnResult;

/// Why the CLI refused to start, as it said it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupFailure {
    /// The CLI's `startup_failure_reason` (`cwd_unavailable`, `config_file_invalid`, …). A
    /// reason this crate does not know is kept as it came.
    pub reason: String,
    /// The CLI's own message (its `errors`), or the host's when the host saw the failure first.
    pub message: String,
    /// For `config_file_invalid`: the file that did not parse.
    pub file: Option<String>,
}

/// Who can make a failed start succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupClass {
    /// The caller: the folder it asked for is gone or cannot be used. Retrying the same start
    /// fails the same way.
    Caller,
    /// The operator: a configuration file, a setting or the machine. Not retried.
    Operator,
    /// A policy (managed settings, the organization, running as root) refuses the start. Not
    /// retried: only a change of policy or of the request helps.
    Policy,
    /// Something that may pass: the CLI says retrying may succeed.
    Transient,
}

impl StartupClass {
    /// Whether the same start may succeed when tried again.
    pub fn retryable(self) -> bool {
        self == StartupClass::Transient
    }

    /// The class's name in metrics and error bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            StartupClass::Caller => "caller",
            StartupClass::Operator => "operator",
            StartupClass::Policy => "policy",
            StartupClass::Transient => "transient",
        }
    }
}

impl StartupFailure {
    /// The host could not start the process in its folder: the CLI's `cwd_unavailable`, seen
    /// before the CLI could say it (the folder is gone when the process is created).
    pub fn cwd_unavailable(message: impl Into<String>) -> StartupFailure {
        StartupFailure {
            reason: "cwd_unavailable".to_owned(),
            message: message.into(),
            file: None,
        }
    }

    /// Who can fix it. An unknown reason is the operator's: a newer CLI than this crate knows,
    /// and a start that is not known to pass on retry is not retried.
    pub fn class(&self) -> StartupClass {
        match self.reason.as_str() {
            "cwd_unavailable" | "worktree_resume_refused" | "session_held_by_background" => {
                StartupClass::Caller
            }
            "org_pin_api_key_conflict"
            | "provider_not_allowed"
            | "org_pin_mismatch"
            | "gateway_signin_required"
            | "gateway_access_denied"
            | "bypass_root"
            | "org_config_refused"
            | "sideload_flags_disabled"
            | "cli_version_too_old" => StartupClass::Policy,
            "org_verify_failed"
            | "remote_settings_required_unavailable"
            | "worktree_unverified"
            | "org_config_required_unavailable" => StartupClass::Transient,
            // managed_settings_invalid, proxy_invalid, temp_dir_unusable, shell_tool_missing,
            // sandbox_required_unavailable, initialize_not_first, config_file_invalid,
            // managed_settings_not_delivered, initialize_fields_not_delivered, and unknown ones.
            _ => StartupClass::Operator,
        }
    }
}

impl std::fmt::Display for StartupFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)?;
        if let Some(file) = &self.file {
            if !self.message.contains(file.as_str()) {
                write!(f, " (file {file})")?;
            }
        }
        Ok(())
    }
}

/// `invalid_config_file` on a `config_file_invalid` result.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct InvalidConfigFile {
    #[serde(default)]
    pub path: Option<String>,
}

impl TurnResult {
    /// Why the process refused to start, when this is its start-up failure result.
    pub fn startup_failure(&self) -> Option<StartupFailure> {
        let reason = self.startup_failure_reason.clone()?;
        Some(StartupFailure {
            reason,
            message: self.error_reason(),
            file: self
                .invalid_config_file
                .as_ref()
                .and_then(|file| file.path.clone()),
        })
    }
}
