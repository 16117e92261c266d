//! `harness`: the daemon (`serve`), a small client for a running daemon (`send`, `threads`), an
//! Agent Client Protocol agent over stdio for editors (`acp`), and API keys, made and revoked in the daemon's database (`keys`).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use orchestrator::config::{Config, LogFormat, ServeArgs};
use orchestrator::server::Stopped;

mod first_run;
mod keys;

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
    Serve(ServeArgs),
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
    /// Be an Agent Client Protocol (ACP) agent on stdin/stdout for an editor (Zed, JetBrains,
    /// Neovim), driving a running daemon: each ACP session is a thread (docs/acp.md).
    Acp {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List the threads of a running daemon.
    Threads {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Make, list and revoke API keys, in the database the daemon uses (`--db`, `--config`,
    /// `--data-dir` as for `serve`); a running daemon sees the change at once.
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
}

#[derive(clap::Args)]
struct ClientArgs {
    /// The daemon's URL.
    #[arg(long, env = "HARNESS_URL", default_value = "http://127.0.0.1:7878")]
    url: String,
    /// A file holding the daemon's bearer token (else the HARNESS_TOKEN variable is used).
    #[arg(long, env = "HARNESS_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

impl ClientArgs {
    /// The daemon these arguments name, with their token.
    fn daemon(&self) -> anyhow::Result<orchestrator::remote::Daemon> {
        Ok(orchestrator::remote::Daemon::new(&self.url, self.token()?))
    }

    fn token(&self) -> anyhow::Result<Option<String>> {
        match &self.token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the token file {}", path.display()))?;
                Ok(Some(text.trim().to_owned()))
            }
            None => Ok(token_from_env()),
        }
    }
}

/// `HARNESS_TOKEN`, when set and not empty.
fn token_from_env() -> Option<String> {
    std::env::var("HARNESS_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
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
    // The daemon's configuration is read before any other thread exists: its secrets then leave
    // the process's environment, where a process that may trace it would read them.
    let served = match &cli.command {
        Command::Serve(args) => {
            let config = Config::load(args)?;
            let names = config.secret_env_names();
            // SAFETY: no thread but this one yet (the runtime starts below).
            unsafe { orchestrator::environment::keep_secrets(&names) }
                .map_err(anyhow::Error::msg)?;
            Some(config)
        }
        _ => None,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(_) => {
                let Some(mut config) = served else {
                    bail!("no configuration was read");
                };
                init_tracing(config.log_format);
                first_run::ensure_cli(&mut config)?;
                let signals = count_signals()?;
                let nth = |n: u32| {
                    let mut signals = signals.clone();
                    async move {
                        let _ = signals.wait_for(|count| *count >= n).await;
                    }
                };
                let plugins = harness::plugins(&config)?;
                match orchestrator::server::run(config, plugins, nth(1), nth(2)).await? {
                    Stopped::Gracefully => Ok(()),
                    Stopped::Forced => {
                        bail!("stopped by a second signal, without the grace period")
                    }
                }
            }
            Command::Send {
                thread,
                model,
                client,
                text,
            } => send(client, thread, model, text).await,
            Command::Keys { command } => keys::run(command).await,
            Command::Acp { client } => Ok(orchestrator::acp::run(client.daemon()?).await?),
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
    // rmcp writes three lines at info for every `/mcp` request (and more when a client goes
    // away); the endpoint writes one of its own. `RUST_LOG` brings them back.
    // An empty `RUST_LOG` is the default too.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info,rmcp=off"));
    // Colour only for a person at a terminal: a log file or journal gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Counts SIGINT and SIGTERM: the first asks for a graceful stop, the second cuts it short.
fn count_signals() -> anyhow::Result<tokio::sync::watch::Receiver<u32>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let (tx, rx) = tokio::sync::watch::channel(0u32);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            tx.send_modify(|count| *count += 1);
        }
    });
    Ok(rx)
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
    Ok(client.daemon()?.call(method, path, body).await?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn the_token_itself_is_never_a_flag() {
        // `ps` shows every flag: the token comes from a file or the environment.
        for args in [
            ["harness", "serve", "--token", "s3cret"],
            ["harness", "threads", "--token", "s3cret"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
        assert!(Cli::try_parse_from(["harness", "serve", "--token-file", "/run/t"]).is_ok());
    }
}
