//! Runs turns on the `claude` CLI through the warm-process [`Pool`].
//!
//! [`protocol`] is the stream-json codec (no IO); [`process`] owns one child process (IO).
//! [`ClaudeCliInvoker`] ties them to the pool and implements [`plugin_contract::Invoker`].

pub mod process;
pub mod protocol;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use plugin_contract::{
    CliSessionId, InvokeError, InvokeOptions, InvokeOutcome, Invoker, StreamEvent, ThreadId,
};

use crate::config::Config;
use crate::pool::{EvictionCause, Pool};
use process::{ControlHandler, LaunchConfig};
use protocol::SpawnOptions;

/// The daemon's [`Invoker`]: one warm `claude` process per thread.
pub struct ClaudeCliInvoker {
    pool: Pool,
    base: SpawnOptions,
    default_model: Option<String>,
    idle_timeout: Duration,
    turn_timeout: Duration,
    max_tool_calls: u32,
    prewarm_evicts_after: Duration,
}

impl ClaudeCliInvoker {
    /// Builds the invoker from the daemon's config. `handler` answers the CLI's MCP requests.
    pub fn new(
        config: &Config,
        handler: Arc<dyn ControlHandler>,
    ) -> std::io::Result<ClaudeCliInvoker> {
        let config_dir = config.claude_config_dir();
        let threads_dir = config.claude_workdir();
        crate::private_fs::create_dir(&config_dir)?;
        crate::private_fs::create_dir(&threads_dir)?;
        let launch = LaunchConfig {
            bin: config.claude.bin.clone(),
            config_dir: config_dir.clone(),
            threads_dir,
            env: child_env(config, std::env::vars_os()),
            ready_timeout: config.turn.ready_timeout,
        };
        let base = SpawnOptions {
            model: None,
            system_prompt: config.claude.system_prompt.clone(),
            append_system_prompt: config.claude.append_system_prompt.clone(),
            builtin_tools: config.claude.builtin_tools.clone(),
            allowed_tools: config.claude.allowed_tools.clone(),
            permission_mode: config.claude.permission_mode.clone(),
            mcp_timeout_ms: mcp_timeout_ms(config),
            max_turns: Some(config.turn.max_tool_calls.saturating_add(1)),
            settings: Some(session_settings(config, &config_dir).to_string()),
        };
        Ok(ClaudeCliInvoker {
            pool: Pool::new(
                launch,
                config.pool.idle_ttl,
                config.pool.max_capacity,
                handler,
            ),
            base,
            default_model: config.claude.default_model.clone(),
            idle_timeout: config.turn.idle_timeout,
            turn_timeout: config.turn.timeout,
            max_tool_calls: config.turn.max_tool_calls,
            prewarm_evicts_after: config.pool.prewarm_evicts_after,
        })
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    fn spawn_options(&self, model: Option<String>) -> SpawnOptions {
        SpawnOptions {
            model: model.or_else(|| self.default_model.clone()),
            ..self.base.clone()
        }
    }

    /// Asks the thread's running turn to stop. Returns false when no turn is running.
    pub async fn interrupt(&self, thread: &ThreadId) -> Result<bool, InvokeError> {
        match self.pool.peek(thread).await {
            Some(process) if process.is_busy() => {
                process.interrupt().await.map_err(InvokeError::Cli)
            }
            _ => Ok(false),
        }
    }
}

/// A child's whole environment: the variables of the daemon's own that `claude.pass_env` names,
/// then the CLI settings the daemon controls, then `claude.env`.
pub fn child_env(
    config: &Config,
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
            mcp_timeout_ms(config).to_string(),
        ),
    ]);
    if !config.claude.auto_memory {
        env.push(("CLAUDE_CODE_DISABLE_AUTO_MEMORY".to_owned(), "1".to_owned()));
    }
    env.extend(
        config
            .claude
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    env
}

/// The `--settings` of every child: auto-memory as configured, and deny rules that keep every
/// thread's file tools out of the CLI's config dir, where all threads' transcripts (and, when
/// on, memories) live. Deny rules win over allow rules and over every permission mode. They go
/// in the settings JSON rather than `--disallowedTools`, whose list a space or comma in the
/// path would split.
fn session_settings(config: &Config, config_dir: &std::path::Path) -> serde_json::Value {
    let dir = config_dir.to_string_lossy();
    let dir = dir.trim_end_matches('/');
    let deny: Vec<String> = ["Read", "Edit", "Write", "Glob", "Grep", "NotebookEdit"]
        .iter()
        .map(|tool| format!("{tool}(/{dir}/**)"))
        .collect();
    serde_json::json!({
        "autoMemoryEnabled": config.claude.auto_memory,
        "permissions": {"deny": deny},
    })
}

/// The CLI's own per-call limit on our MCP server sits above ours (the adapter answers first with
/// a clear error), and above delegation's longer limit.
fn mcp_timeout_ms(config: &Config) -> u64 {
    let longest = config.tools.timeout.max(config.tools.delegation_timeout);
    (longest + Duration::from_secs(30)).as_millis() as u64
}

#[async_trait::async_trait]
impl Invoker for ClaudeCliInvoker {
    async fn invoke(
        &self,
        prompt: &str,
        options: InvokeOptions,
    ) -> Result<InvokeOutcome, InvokeError> {
        let started = Instant::now();
        let timeout = options.timeout.unwrap_or(self.turn_timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        let spawn = self.spawn_options(options.model.clone());
        let process = tokio::time::timeout_at(
            deadline,
            self.pool.checkout(
                &options.thread_id,
                &spawn,
                options.session_id.as_ref(),
                None,
            ),
        )
        .await
        .map_err(|_| InvokeError::TurnTimeout(timeout))??;
        let start = process.session_start();
        let prompt = match &options.preparer {
            Some(preparer) => preparer.prepare(start, prompt).await,
            None => prompt.to_owned(),
        };
        if let Some(sink) = &options.on_event {
            sink(StreamEvent::TurnStarted {
                start,
                pid: Some(process.pid()),
            });
        }
        debug!(thread_id = %options.thread_id, pid = process.pid(), ?start, "Turn sent.");
        let outcome = process
            .turn(
                &prompt,
                options.on_event.as_ref(),
                self.idle_timeout,
                deadline,
                self.max_tool_calls,
            )
            .await;
        let pid = process.pid();
        match outcome {
            Ok(result) if !result.is_error => {
                let session_id = result
                    .session_id
                    .map(CliSessionId::from_string)
                    .or_else(|| process.session_id());
                // Let go of the process before announcing it idle to spawns waiting for a slot.
                drop(process);
                self.pool.touch(&options.thread_id).await;
                Ok(InvokeOutcome {
                    text: result.text.unwrap_or_default(),
                    session_id,
                    start,
                    pid: Some(pid),
                    num_turns: result.num_turns,
                    duration: started.elapsed(),
                })
            }
            Ok(result)
                if result
                    .terminal_reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with("aborted")) =>
            {
                // An interrupt: the process stays usable.
                drop(process);
                self.pool.touch(&options.thread_id).await;
                Err(InvokeError::Interrupted)
            }
            Ok(result) => {
                let reason = result.error_reason();
                warn!(thread_id = %options.thread_id, pid = process.pid(), %reason, "Turn failed; evicting the process.");
                self.pool
                    .discard(process.process(), EvictionCause::Error)
                    .await;
                Err(InvokeError::Cli(reason))
            }
            Err(err @ InvokeError::ToolCallLimit(_)) => {
                // Stopped by an interrupt: the process stays usable.
                drop(process);
                self.pool.touch(&options.thread_id).await;
                Err(err)
            }
            Err(err) => {
                // The process only knows its deadline; the user set (and should read) the total.
                let err = match err {
                    InvokeError::TurnTimeout(_) => InvokeError::TurnTimeout(timeout),
                    other => other,
                };
                warn!(thread_id = %options.thread_id, pid = process.pid(), error = %err, "Turn failed; evicting the process.");
                self.pool
                    .discard(process.process(), EvictionCause::Error)
                    .await;
                Err(err)
            }
        }
    }

    async fn prewarm(
        &self,
        thread_id: &ThreadId,
        session_id: Option<CliSessionId>,
        model: Option<String>,
    ) -> Result<(), InvokeError> {
        self.pool.note_prewarm();
        let spawn = self.spawn_options(model);
        let warm = self
            .pool
            .peek(thread_id)
            .await
            .is_some_and(|p| !p.has_exited() && !p.is_retired() && p.options() == &spawn);
        let slot = if warm {
            None
        } else {
            match self.pool.prewarm_slot(self.prewarm_evicts_after).await {
                Some(slot) => Some(slot),
                None => {
                    self.pool.note_prewarm_skipped();
                    info!(thread_id = %thread_id, "Prewarm skipped: every pool slot holds a process used recently.");
                    return Ok(());
                }
            }
        };
        // The lease ends here: the process waits idle for the thread's first message.
        self.pool
            .checkout(thread_id, &spawn, session_id.as_ref(), slot)
            .await?;
        self.pool.touch(thread_id).await;
        Ok(())
    }
}
