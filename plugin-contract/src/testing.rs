//! One stand-in per capability the daemon hands to plugins, for plugins' tests (feature
//! `testing`): [`StubStore`] for [`ThreadStore`], [`StubDelegate`] for [`Delegate`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::{
    Delegate, DelegateReply, HistoryMessage, ThreadId, ThreadInfo, ThreadStore, ToolContext,
    UserContent,
};

/// Threads with parents and histories, held in memory. An unknown thread is `None` (and has no
/// depth).
#[derive(Clone, Debug, Default)]
pub struct StubStore {
    threads: HashMap<ThreadId, ThreadInfo>,
    history: HashMap<ThreadId, Vec<HistoryMessage>>,
}

impl StubStore {
    /// A thread `id`, child of `parent`.
    pub fn with_thread(mut self, id: &str, parent: Option<&str>) -> Self {
        let id = ThreadId::from_string(id);
        self.threads.insert(
            id.clone(),
            ThreadInfo {
                id,
                title: None,
                model: None,
                parent_id: parent.map(ThreadId::from_string),
            },
        );
        self
    }

    /// `messages` as the history of thread `id`: `(role, content)` pairs, oldest first.
    pub fn with_history(mut self, id: &str, messages: &[(&str, &str)]) -> Self {
        let history = messages
            .iter()
            .map(|(role, content)| HistoryMessage {
                role: (*role).to_owned(),
                content: UserContent::from(*content),
            })
            .collect();
        self.history.insert(ThreadId::from_string(id), history);
        self
    }
}

#[async_trait::async_trait]
impl ThreadStore for StubStore {
    async fn thread(&self, id: &ThreadId) -> Result<Option<ThreadInfo>, String> {
        Ok(self.threads.get(id).cloned())
    }

    async fn history(&self, id: &ThreadId) -> Result<Vec<HistoryMessage>, String> {
        Ok(self.history.get(id).cloned().unwrap_or_default())
    }

    async fn depth(&self, id: &ThreadId) -> Result<u32, String> {
        let mut depth = 0;
        let mut current = self
            .threads
            .get(id)
            .ok_or_else(|| format!("thread {id} not found"))?;
        while let Some(parent) = &current.parent_id {
            current = self
                .threads
                .get(parent)
                .ok_or_else(|| format!("thread {parent} not found"))?;
            depth += 1;
        }
        Ok(depth)
    }
}

/// Records every delegation and answers `did: <prompt>` from a child thread `child`.
#[derive(Debug, Default)]
pub struct StubDelegate {
    calls: Mutex<Vec<(ThreadId, String)>>,
    timeouts: Mutex<Vec<Duration>>,
}

impl StubDelegate {
    /// The delegations so far: (parent, the prompt's text).
    pub fn calls(&self) -> Vec<(ThreadId, String)> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The bound each delegation so far asked for its child's turn, in order.
    pub fn timeouts(&self) -> Vec<Duration> {
        self.timeouts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait::async_trait]
impl Delegate for StubDelegate {
    async fn delegate(
        &self,
        parent: &ThreadId,
        prompt: UserContent,
        _model: Option<String>,
        timeout: Duration,
    ) -> Result<DelegateReply, String> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((parent.clone(), prompt.text().into_owned()));
        self.timeouts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(timeout);
        Ok(DelegateReply {
            child_thread_id: ThreadId::from_string("child"),
            text: format!("did: {}", prompt.text()),
        })
    }
}

/// A [`ToolContext`] for `thread` over `store` and `delegate`.
pub fn tool_context(
    thread: Option<&str>,
    store: StubStore,
    delegate: Arc<StubDelegate>,
) -> ToolContext {
    ToolContext {
        thread_id: thread.map(ThreadId::from_string),
        store: Arc::new(store),
        delegate,
    }
}
