//! `harness`: the daemon (`serve`) and a small client for a running daemon (`send`, `threads`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use orchestrator::config::{Config, LogFormat, Overrides};

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Hold conversations with Claude Code through a warm process pool."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon.
    Serve {
        /// Address for the HTTP API [default: 127.0.0.1:7878].
        #[arg(long, env = "HARNESS_BIND")]
        bind: Option<SocketAddr>,
        /// SQLite database file [default: <data-dir>/harness.db].
        #[arg(long, env = "HARNESS_DB")]
        db: Option<String>,
        /// The claude CLI binary [default: claude on PATH].
        #[arg(long, env = "HARNESS_CLAUDE_BIN")]
        claude_bin: Option<PathBuf>,
        /// TOML config file.
        #[arg(long, env = "HARNESS_CONFIG")]
        config: Option<PathBuf>,
        /// Data directory [default: $XDG_DATA_HOME/harness or ~/.local/share/harness].
        #[arg(long, env = "HARNESS_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Bearer token the API requires (required when binding beyond loopback).
        #[arg(long, env = "HARNESS_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Log lines as `text` or `json`.
        #[arg(long, env = "HARNESS_LOG_FORMAT")]
        log_format: Option<String>,
    },
    /// Send a message to a running daemon and print the reply.
    Send {
        /// The thread; a new one is created (and its id printed) when absent.
        #[arg(long)]
        thread: Option<String>,
        /// Model for this message.
        #[arg(long)]
        model: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
        /// The message.
        text: String,
    },
    /// List the threads of a running daemon.
    Threads {
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(clap::Args)]
struct ClientArgs {
    /// The daemon's URL.
    #[arg(long, env = "HARNESS_URL", default_value = "http://127.0.0.1:7878")]
    url: String,
    #[arg(long, env = "HARNESS_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line, without a backtrace.
            eprintln!("harness: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn real_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve {
                bind,
                db,
                claude_bin,
                config,
                data_dir,
                token,
                log_format,
            } => {
                let log_format = match log_format.as_deref() {
                    None => None,
                    Some("text") => Some(LogFormat::Text),
                    Some("json") => Some(LogFormat::Json),
                    Some(other) => bail!("--log-format must be text or json, not {other}"),
                };
                let overrides = Overrides {
                    bind,
                    db,
                    claude_bin,
                    data_dir,
                    auth_token: token,
                    log_format,
                };
                let config = Config::load(config.as_deref(), overrides)?;
                init_tracing(config.log_format);
                orchestrator::app::run(config, shutdown_signal()).await?;
                Ok(())
            }
            Command::Send {
                thread,
                model,
                client,
                text,
            } => send(client, thread, model, text).await,
            Command::Threads { client } => {
                let threads = request(&client, reqwest::Method::GET, "/api/threads", None).await?;
                for t in threads["threads"].as_array().into_iter().flatten() {
                    println!(
                        "{}\t{}\t{}",
                        t["id"].as_str().unwrap_or(""),
                        t["updatedAt"].as_str().unwrap_or(""),
                        t["title"].as_str().unwrap_or("")
                    );
                }
                Ok(())
            }
        }
    })
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn send(
    client: ClientArgs,
    thread: Option<String>,
    model: Option<String>,
    text: String,
) -> anyhow::Result<()> {
    let thread = match thread {
        Some(id) => id,
        None => {
            let created = request(
                &client,
                reqwest::Method::POST,
                "/api/threads",
                Some(json!({})),
            )
            .await?;
            let id = created["id"]
                .as_str()
                .context("the daemon returned no thread id")?
                .to_owned();
            eprintln!("thread {id}");
            id
        }
    };
    let body = json!({"content": text, "model": model, "clientMessageId": uuid::Uuid::new_v4().to_string()});
    let reply = request(
        &client,
        reqwest::Method::POST,
        &format!("/api/threads/{thread}/messages"),
        Some(body),
    )
    .await?;
    println!(
        "{}",
        reply["message"]["content"].as_str().unwrap_or_default()
    );
    Ok(())
}

async fn request(
    client: &ClientArgs,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let url = format!("{}{}", client.url.trim_end_matches('/'), path);
    let mut req = reqwest::Client::new().request(method, &url);
    if let Some(token) = &client.token {
        req = req.bearer_auth(token);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let response = req
        .send()
        .await
        .with_context(|| format!("cannot reach the daemon at {url}"))?;
    let status = response.status();
    let value: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let message = value["error"]["message"].as_str().unwrap_or("no details");
        bail!("{status}: {message}");
    }
    Ok(value)
}
