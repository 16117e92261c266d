//! Runs turns on the `claude` CLI through the warm-process [`Pool`].
//!
//! [`protocol`] is the stream-json codec (no IO); [`process`] owns one child process (IO).
//! [`ClaudeCliInvoker`] ties them to the pool and implements [`plugin_contract::Invoker`].

pub mod process;
pub mod protocol;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

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
}

impl ClaudeCliInvoker {
    /// Builds the invoker from the daemon's config. `handler` answers the CLI's MCP requests.
    pub fn new(
        config: &Config,
        handler: Arc<dyn ControlHandler>,
    ) -> std::io::Result<ClaudeCliInvoker> {
        let config_dir = config.claude_config_dir();
        let workdir = config.claude_workdir();
        std::fs::create_dir_all(&config_dir)?;
        std::fs::create_dir_all(&workdir)?;
        let mut env: Vec<(String, String)> = vec![
            (
                "CLAUDE_CODE_MAX_RETRIES".into(),
                config.claude.max_retries.to_string(),
            ),
            (
                "ENABLE_TOOL_SEARCH".into(),
                config.claude.tool_search.to_string(),
            ),
            (
                "MCP_TOOL_TIMEOUT".into(),
                mcp_timeout_ms(config).to_string(),
            ),
        ];
        env.extend(
            config
                .claude
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        let launch = LaunchConfig {
            bin: config.claude.bin.clone(),
            config_dir,
            workdir,
            env,
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
            self.pool
                .checkout(&options.thread_id, &spawn, options.session_id.as_ref()),
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
        // The lease ends here: the process waits idle for the thread's first message.
        self.pool
            .checkout(thread_id, &spawn, session_id.as_ref())
            .await?;
        self.pool.touch(thread_id).await;
        Ok(())
    }
}
