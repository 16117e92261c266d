//! The real CLI against the mock: proves the install works and that the mock speaks the wire format the CLI accepts
//! (text streaming, tool_use streaming). Each conversation runs inside a 60 s timeout.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::*;
use crate::mock::{MockApi, Reply};
use crate::util::init_tracing;

/// Bound on one whole CLI conversation (spawn, turn, exit).
const CONVERSATION_TIMEOUT: Duration = Duration::from_secs(60);

/// A `claude` child in stream-json mode, isolated from the developer's settings.
struct CliChild {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
    /// Every stdout line so far, for failure messages.
    seen: Vec<String>,
    _config_dir: tempfile::TempDir,
    _work_dir: tempfile::TempDir,
}

impl CliChild {
    /// `tools` is `--tools`' value: `""` for none, `"default"` for all the CLI enables.
    async fn spawn(mock: &MockApi, tools: &str) -> anyhow::Result<CliChild> {
        let bin = tokio::task::spawn_blocking(claude_bin).await??;
        let config_dir = tempfile::tempdir()?;
        let work_dir = tempfile::tempdir()?;
        let mut cmd = tokio::process::Command::new(&bin);
        cmd.args([
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
            "--system-prompt",
            "",
            "--setting-sources=",
            "--tools",
            tools,
        ]);
        for key in stray_cli_env() {
            cmd.env_remove(key);
        }
        cmd.envs(cli_env(&mock.url()))
            .env("CLAUDE_CONFIG_DIR", config_dir.path())
            .current_dir(work_dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let stdin = child.stdin.take().context("stdin is piped")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout is piped")?).lines();
        let mut stderr_pipe = child.stderr.take().context("stderr is piped")?;
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text).await;
            text
        });
        Ok(CliChild {
            child,
            stdin: Some(stdin),
            stdout,
            stderr,
            seen: Vec::new(),
            _config_dir: config_dir,
            _work_dir: work_dir,
        })
    }

    async fn send_user_text(&mut self, text: &str) -> anyhow::Result<()> {
        let line = json!({"type": "user", "session_id": "", "parent_tool_use_id": null,
                          "message": {"role": "user", "content": text}});
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        stdin.write_all(format!("{line}\n").as_bytes()).await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Reads stdout until the turn's `result` line.
    async fn read_result(&mut self) -> anyhow::Result<Value> {
        while let Some(line) = self.stdout.next_line().await? {
            self.seen.push(line.clone());
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if event["type"] == "result" {
                return Ok(event);
            }
        }
        anyhow::bail!("stdout closed before a result; lines: {:#?}", self.seen)
    }

    /// Reads stdout until the turn's `system/init` line.
    async fn read_init(&mut self) -> anyhow::Result<Value> {
        while let Some(line) = self.stdout.next_line().await? {
            self.seen.push(line.clone());
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if event["type"] == "system" && event["subtype"] == "init" {
                return Ok(event);
            }
        }
        anyhow::bail!("stdout closed before system/init; lines: {:#?}", self.seen)
    }

    /// Closes stdin and waits for the exit; returns the exit code and stderr.
    async fn close_and_wait(mut self) -> anyhow::Result<(Option<i32>, String)> {
        drop(self.stdin.take());
        let status = self.child.wait().await?;
        let stderr = self.stderr.await?;
        Ok((status.code(), stderr))
    }
}

/// How one CLI conversation ended.
struct Outcome {
    /// The turn's `result` line.
    result: Value,
    /// The exit code after stdin was closed: 0, or 1 when the last result had `is_error: true`.
    code: Option<i32>,
    stderr: String,
}

/// Runs one turn of `prompt` against `mock`, then closes stdin and waits for the exit.
async fn one_turn(mock: &MockApi, prompt: &str) -> anyhow::Result<Outcome> {
    let mut cli = CliChild::spawn(mock, "").await?;
    let conversation = async {
        cli.send_user_text(prompt).await?;
        let result = cli.read_result().await?;
        let (code, stderr) = cli.close_and_wait().await?;
        Ok(Outcome {
            result,
            code,
            stderr,
        })
    };
    tokio::time::timeout(CONVERSATION_TIMEOUT, conversation)
        .await
        .context("the CLI conversation took longer than 60 s")?
}

#[tokio::test]
async fn real_cli_gets_the_echo_reply() {
    init_tracing();
    let mock = MockApi::start().await;
    let Outcome {
        result,
        code,
        stderr,
    } = one_turn(&mock, "hello mock").await.unwrap();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(result["result"], "echo: hello mock", "{result:#}");
    assert_eq!(result["is_error"], false, "{result:#}");

    let requests = mock.message_requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let request = &requests[0];
    assert!(request.is_streaming());
    assert_eq!(request.query.as_deref(), Some("beta=true"));
    assert_eq!(request.header("x-api-key"), Some("sk-test"));
    assert!(request.model().is_some());
    assert_eq!(request.last_user_text(), "hello mock");
}

#[tokio::test]
async fn real_cli_answers_a_tool_use_for_an_unknown_tool() {
    init_tracing();
    let mock = MockApi::start().await;
    mock.once_when_prompt_contains(
        "use a tool",
        Reply::tool_use("no_such_tool", json!({"arg": 1})),
    );
    let Outcome {
        result,
        code,
        stderr,
    } = one_turn(&mock, "please use a tool").await.unwrap();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(result["is_error"], false, "{result:#}");
    assert_eq!(result["num_turns"], 2, "{result:#}");

    let requests = mock.message_requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 1, "{:#}", requests[1].body);
    assert!(results[0].is_error, "{results:?}");
    assert!(
        results[0].tool_use_id.starts_with("toolu_mock_"),
        "{results:?}"
    );
    // The CLI sent back the tool call it parsed from our stream, with the input intact.
    let history = requests[1].messages();
    let call = history
        .iter()
        .flat_map(|message| message["content"].as_array().into_iter().flatten())
        .find(|block| block["type"] == "tool_use")
        .unwrap();
    assert_eq!(call["name"], "no_such_tool");
    assert_eq!(call["input"], json!({"arg": 1}));
    assert_eq!(call["id"], results[0].tool_use_id.as_str());
    assert_eq!(result["result"], format!("tool said: {}", results[0].text));
    // The CLI adds a `role: system` message after the user's; the user's text must still be found.
    assert_eq!(requests[1].messages()[0]["content"], "please use a tool");
}

/// The scan of the binary misses no tool the CLI really offers: every built-in tool `system/init`
/// lists with `--tools default` (some under a legacy name, `Task` for `Agent`) is in the table
/// `builtin_tools::read` finds, which containment classifies (e2e `containment`).
#[tokio::test]
async fn every_tool_the_cli_offers_is_in_the_table_read_from_its_binary() {
    init_tracing();
    let mock = MockApi::start().await;
    let table = tokio::task::spawn_blocking(|| builtin_tools::read(&claude_bin()?))
        .await
        .unwrap()
        .unwrap();
    assert!(table.names.len() >= 40, "{table:?}");
    assert_eq!(table.canonical("Task"), "Agent", "{table:?}");
    let mut cli = CliChild::spawn(&mock, "default").await.unwrap();
    let init = tokio::time::timeout(CONVERSATION_TIMEOUT, async {
        cli.send_user_text("which tools").await?;
        let init = cli.read_init().await?;
        cli.read_result().await?;
        anyhow::Ok(init)
    })
    .await
    .expect("the CLI answers within 60 s")
    .unwrap();
    let offered: Vec<&str> = init["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|tool| !tool.starts_with("mcp__"))
        .collect();
    assert!(offered.contains(&"Bash"), "{init:#}");
    let missing: Vec<&&str> = offered
        .iter()
        .filter(|tool| !table.names.contains(table.canonical(tool)))
        .collect();
    assert!(
        missing.is_empty(),
        "system/init offers tools the binary's table lacks: {missing:?} (table: {:?})",
        table.names
    );
    let (code, stderr) = cli.close_and_wait().await.unwrap();
    assert_eq!(code, Some(0), "stderr: {stderr}");
}

/// A 400 is not retried as such, but 2.1.330 (and 2.1.332) answers each of the first two by resending at once without one optional
/// beta header (`thinking-token-count-…`, then `thinking-display-updates-…`): three requests in all, where the
/// protocol notes' §8 saw one. So a persistent rule (not one queued error) is needed for the error to reach the result.
#[tokio::test]
async fn real_cli_reports_a_mock_400_after_dropping_two_betas() {
    init_tracing();
    let mock = MockApi::start().await;
    mock.when_prompt_contains("fail please", Reply::error(400));
    let Outcome {
        result,
        code,
        stderr,
    } = one_turn(&mock, "fail please").await.unwrap();
    assert_eq!(result["is_error"], true, "{result:#}");
    assert_eq!(result["api_error_status"], 400, "{result:#}");
    let text = result["result"].as_str().unwrap();
    assert!(text.contains("mock 400"), "{result:#}");
    assert_eq!(code, Some(1), "stderr: {stderr}");

    let requests = mock.message_requests();
    let betas: Vec<&str> = requests
        .iter()
        .map(|request| request.header("anthropic-beta").unwrap_or_default())
        .collect();
    assert_eq!(requests.len(), 3, "{betas:#?}");
    assert!(betas[0].contains("thinking-token-count"), "{betas:#?}");
    assert!(betas[0].contains("thinking-display-updates"), "{betas:#?}");
    assert!(!betas[1].contains("thinking-token-count"), "{betas:#?}");
    assert!(betas[1].contains("thinking-display-updates"), "{betas:#?}");
    assert!(!betas[2].contains("thinking-display-updates"), "{betas:#?}");
}

#[test]
fn cli_env_points_at_the_mock() {
    let env = cli_env("http://127.0.0.1:1");
    assert!(env.contains(&("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:1".into())));
    assert!(env.contains(&("ANTHROPIC_API_KEY".into(), "sk-test".into())));
    assert!(env.contains(&(
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
        "1".into()
    )));
    assert!(env.contains(&("DISABLE_TELEMETRY".into(), "1".into())));
    assert!(target_dir().is_absolute());
}

#[test]
fn run_with_timeout_kills_a_slow_child() {
    let err = run_with_timeout(Command::new("sleep").arg("30"), Duration::from_millis(200))
        .err()
        .unwrap();
    assert!(err.to_string().contains("did not finish"), "{err}");
    let out = run_with_timeout(
        Command::new("sh").args(["-c", "echo out; echo err >&2"]),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n")
    );
}
