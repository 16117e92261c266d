//! What every page test needs: a daemon behind a [`Link`] the test can cut, a Chromium session
//! on the page, and the page read through its `data-testid` hooks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fantoccini::key::Key;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use harness_tests::browser::Browser;
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use orchestrator::config::Config;

/// Long enough for a cold CLI start on a busy 2-core machine.
pub const TURN: Duration = Duration::from_secs(60);
/// For what the page does on its own (render, fetch).
pub const QUICK: Duration = Duration::from_secs(15);

/// What the [`Link`] does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Up,
    /// Accept and close at once: the daemon looks down.
    Down,
    /// Forward requests, throw the answers away and close: the daemon acts, the page never hears.
    LoseAnswers,
}

/// A TCP forwarder between the browser and the daemon: the page's network, which a test cuts.
/// Leaving `Up` also cuts the connections already open (the event stream among them).
pub struct Link {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    /// Message POSTs forwarded while in [`Mode::LoseAnswers`].
    lost_posts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    pub async fn start(upstream: SocketAddr) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the link");
        let addr = listener.local_addr().expect("bound");
        let (mode, _) = watch::channel(Mode::Up);
        let lost_posts = Arc::new(AtomicUsize::new(0));
        let modes = mode.clone();
        let counter = lost_posts.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let modes = modes.subscribe();
                tokio::spawn(carry(client, upstream, modes, counter.clone()));
            }
        });
        Link {
            addr,
            mode,
            lost_posts,
            task,
        }
    }

    /// The page's address through this link.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn lost_posts(&self) -> usize {
        self.lost_posts.load(Ordering::SeqCst)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn carry(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut modes: watch::Receiver<Mode>,
    lost_posts: Arc<AtomicUsize>,
) {
    let mode = *modes.borrow_and_update();
    if mode == Mode::Down {
        return; // dropped: closed before any answer
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    match mode {
        Mode::Up => {
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = modes.wait_for(|m| *m != Mode::Up) => {}
            }
        }
        Mode::LoseAnswers => {
            let (mut from_client, mut to_server) = client.split();
            let (mut from_server, _) = server.split();
            let forward = async {
                let mut buf = vec![0u8; 64 * 1024];
                let mut first = true;
                loop {
                    let n = match from_client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if first {
                        let head = String::from_utf8_lossy(&buf[..n]);
                        let line = head.lines().next().unwrap_or("");
                        if line.starts_with("POST ") && line.contains("/messages") {
                            lost_posts.fetch_add(1, Ordering::SeqCst);
                        }
                        first = false;
                    }
                    if to_server.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            };
            // The first byte of the answer ends the connection, unread by the browser.
            let answer = async {
                let mut byte = [0u8; 1];
                let _ = from_server.read(&mut byte).await;
            };
            tokio::select! {
                _ = forward => {}
                _ = answer => {}
            }
        }
        Mode::Down => {}
    }
}

/// The mock, a daemon, the link in front of it and a browser on the page.
pub struct Page {
    pub mock: MockApi,
    pub daemon: TestDaemon,
    pub link: Link,
    pub browser: Browser,
}

impl Page {
    /// Starts everything and loads the page; `tweak` adjusts the daemon's config.
    pub async fn open(tweak: impl FnOnce(&mut Config)) -> Page {
        let mock = MockApi::start().await;
        let daemon = TestDaemon::start(&mock, tweak).await;
        let upstream: SocketAddr = daemon
            .base
            .trim_start_matches("http://")
            .parse()
            .expect("the daemon's base is http://ADDR");
        let link = Link::start(upstream).await;
        let browser = Browser::start().await.expect("a Chromium session");
        browser
            .client
            .goto(&link.url())
            .await
            .expect("the page loads");
        Page {
            mock,
            daemon,
            link,
            browser,
        }
    }

    /// Checks the console (failed requests allowed when the test caused them), then closes the
    /// browser and stops the daemon.
    pub async fn finish(self, allow_network_errors: bool) {
        let clean = self
            .browser
            .assert_console_clean(allow_network_errors)
            .await;
        self.browser.close().await;
        self.daemon.stop().await;
        if let Err(err) = clean {
            panic!("{err:#}");
        }
    }

    /// Runs `script` until it returns something truthy.
    pub async fn wait_js(&self, timeout: Duration, what: &str, script: &str) -> Value {
        self.browser
            .eventually_js(timeout, what, script)
            .await
            .unwrap_or_else(|err| panic!("{err:#}"))
    }

    /// Clicks "New thread" and returns the id the URL then names.
    pub async fn new_thread(&self) -> String {
        self.browser
            .hook("new-thread")
            .await
            .expect("the New thread button")
            .click()
            .await
            .expect("click New thread");
        let id = self
            .wait_js(
                QUICK,
                "the URL names the new thread and the composer shows",
                "const id = new URLSearchParams(location.search).get('thread');
                 const form = document.querySelector('[data-testid=composer-form]');
                 return id && !form.hidden && document.activeElement
                     === document.querySelector('[data-testid=composer]') ? id : null;",
            )
            .await;
        id.as_str().expect("a thread id").to_owned()
    }

    /// Types `text` into the composer and presses Enter.
    pub async fn send(&self, text: &str) {
        let composer = self.browser.hook("composer").await.expect("the composer");
        composer
            .send_keys(&format!("{text}{}", char::from(Key::Enter)))
            .await
            .expect("type into the composer");
    }

    /// Scripts a reply to `prompt` in `chunks`, `delay` apart, sends `prompt`, and waits until
    /// the reply streams and shows `needle`.
    pub async fn send_slow(
        &self,
        prompt: &str,
        chunks: Vec<String>,
        delay: Duration,
        needle: &str,
    ) {
        self.mock
            .once_when_prompt_contains(prompt, Reply::slow_text(chunks, delay));
        self.send(prompt).await;
        self.wait_js(
            TURN,
            &format!("the reply streams and shows {needle:?}"),
            &format!(
                "const r = document.querySelector('[data-testid=message][data-role=assistant]');
                 return r && r.dataset.status === 'streaming' && r.textContent.includes({needle:?});"
            ),
        )
        .await;
    }

    /// The messages with `data-role=role`, as `{text, status}`, in page order.
    pub async fn messages(&self, role: &str) -> Vec<Value> {
        let script = format!(
            "return Array.from(document.querySelectorAll('[data-testid=message][data-role={role}]'),
                m => ({{text: (m.querySelector('.parts') || m.querySelector('.text')).textContent,
                        status: m.dataset.status}}));"
        );
        let value = self
            .browser
            .client
            .execute(&script, Vec::new())
            .await
            .expect("read the messages");
        value.as_array().cloned().unwrap_or_default()
    }

    /// Waits until the last assistant message has `status` and returns its text.
    pub async fn wait_last_reply(&self, status: &str, timeout: Duration) -> String {
        let script = format!(
            "const all = document.querySelectorAll('[data-testid=message][data-role=assistant]');
             const last = all[all.length - 1];
             return last && last.dataset.status === '{status}'
                 ? last.querySelector('.parts').textContent : null;"
        );
        let value = self
            .wait_js(timeout, &format!("the last reply is {status}"), &script)
            .await;
        value.as_str().unwrap_or_default().to_owned()
    }

    /// The stored messages of `thread`, straight from the daemon (not through the link).
    pub async fn stored(&self, thread: &str) -> Vec<Value> {
        let (status, body) = self.daemon.get(&format!("/api/threads/{thread}")).await;
        assert_eq!(status, 200, "{body}");
        body["messages"].as_array().cloned().unwrap_or_default()
    }
}
